# Hand-written stub for the compiled module; `python -m mypy.stubtest ratomic`
# (run by run-tests.sh) checks it against the real thing.

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, Literal, Union, final, overload

from typing_extensions import disjoint_base

__all__ = [
    "__version__",
    "PROBLEM_CONTENT_TYPE",
    "ArgumentTypeError",
    "BackendError",
    "CoarseClock",
    "CostExceedsLimitError",
    "Decision",
    "DirectTokenBucket",
    "FixedWindow",
    "InvalidArgumentError",
    "InvalidRateError",
    "KeyEncodingError",
    "KeyTooLongError",
    "KeyTypeError",
    "Keyed",
    "LimitSet",
    "Limiter",
    "ManualClock",
    "MultiDecision",
    "Quotas",
    "RatomicError",
    "Rule",
    "SlidingWindow",
    "Stack",
    "TokenBucket",
    "_HttpFields",
    "_RedisCall",
    "_RedisDriver",
    "_PostgresCall",
    "_PostgresBatch",
    "_PostgresDriver",
]

__version__: Final[str]
PROBLEM_CONTENT_TYPE: Final[str]

_Key = Union[str, bytes]
"""A key: a str (as its UTF-8 bytes; a lone surrogate has none and raises
``KeyEncodingError``) or bytes, at most ``max_key_len`` bytes."""

_Eviction = Literal["fair", "strict"]
"""What a full store does with keys it must evict before they are full
again: ``"fair"`` (the default; churn on other keys never denies a key) or
``"strict"`` (never grants more than remembering every key would)."""

_Draft = Literal["draft-11", "draft-8", "draft-7", "draft-6"]
"""The IETF draft the standard HTTP fields follow: ``"draft-11"`` (the
default; ``"draft-8"`` has the same fields) or the earlier forms
``"draft-7"`` and ``"draft-6"``."""

_Clock = Callable[[], float]
"""A clock: any callable returning seconds (monotonic in production)."""

_Request = Union[str, bytes, tuple[Union[str, bytes], int]]
"""One ``allow_many`` request: a key (cost 1) or a ``(key, cost)`` pair."""

_RuleLike = Union[str, "Rule"]
"""A rule for a ``Limiter``: a rate string (a token bucket) or a ``Rule``."""

_LimitsArg = Union["LimitSet", Sequence[str], None]
"""The limits a ``Limiter`` call is subject to: all (None), a ``LimitSet`` or names."""

_Member = Union["Keyed", "Limiter", "DirectTokenBucket"]
"""A ``Stack`` member (a ``DirectTokenBucket`` ignores its key)."""

class RatomicError(Exception):
    """Base class of every error ratomic raises."""

    index: int | None
    """None, or for a batch (``allow_many``), the position of the first
    invalid request: nothing in the batch was decided."""

class InvalidArgumentError(RatomicError, ValueError):
    """An argument is out of range. Also a ValueError."""

class InvalidRateError(InvalidArgumentError):
    """A rate string such as "10/s" could not be parsed."""

class CostExceedsLimitError(InvalidArgumentError):
    """A call asked for more than the key can ever hold."""

class KeyTooLongError(InvalidArgumentError):
    """A key is longer than the limiter's max_key_len."""

class KeyEncodingError(InvalidArgumentError, UnicodeError):
    """A str key has no UTF-8 form (a lone surrogate such as '\\ud800'):
    encode it yourself and pass bytes. Also a UnicodeError."""

class ArgumentTypeError(RatomicError, TypeError):
    """An argument has the wrong type. Also a TypeError."""

class KeyTypeError(ArgumentTypeError):
    """A key is neither str nor bytes."""

class BackendError(RatomicError):
    """A Redis-backed limiter (``ratomic.redis``) got no answer from Redis
    and its ``on_error`` is ``"raise"``. ``__cause__`` is the client's exception.
    Also a limiter on a ``shared_file`` that could not serve a call (its file
    system is full, or another process holds the key): nothing changed."""

_Source = Literal["memory", "redis", "postgres", "fallback", "policy", "deny_cache", "lease"]
"""Who answered a call."""

@final
class Decision:
    """The answer to one call. Immutable; truthy exactly when allowed."""

    @property
    def allowed(self) -> bool:
        """Whether the cost was granted and consumed."""
    @property
    def remaining(self) -> int:
        """Whole tokens the key still has right after the call."""
    @property
    def limit(self) -> int:
        """The most the key can ever hold (capacity, burst or window limit)."""
    @property
    def retry_after(self) -> float:
        """Seconds until the same call would pass: 0.0 when allowed, > 0 when denied."""
    @property
    def reset_after(self) -> float:
        """Seconds until the key is full again if nothing consumes."""
    @property
    def retry_after_ns(self) -> int:
        """``retry_after`` in whole nanoseconds (exact)."""
    @property
    def reset_after_ns(self) -> int:
        """``reset_after`` in whole nanoseconds (exact)."""
    @property
    def source(self) -> _Source:
        """Who answered: "memory" (an in-memory or shared-file limiter),
        "redis", "fallback" (a local limiter, Redis having failed), "policy"
        (``on_error="allow"``/``"deny"``), "deny_cache" or "lease" (tokens this
        process leased from Redis, granted here). Not part of equality."""
    def __bool__(self) -> bool: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class MultiDecision:
    """The answer to a ``Limiter`` or ``Stack`` call: combined, plus one
    ``Decision`` per limit. Immutable; truthy exactly when allowed."""

    @property
    def allowed(self) -> bool: ...
    @property
    def remaining(self) -> int:
        """The smallest remaining among the limits."""
    @property
    def limit(self) -> int:
        """The limit of the limit with the least remaining."""
    @property
    def retry_after(self) -> float:
        """The largest wait among the limits that denied (0.0 when allowed)."""
    @property
    def reset_after(self) -> float:
        """The largest reset_after among the limits."""
    @property
    def decision(self) -> Decision:
        """The combined answer as a plain ``Decision``."""
    @property
    def entries(self) -> dict[str, Decision]:
        """``{name: Decision}`` for every limit the call was subject to."""
    @property
    def denied_by(self) -> tuple[str, ...]:
        """The names of the limits that denied the call (empty when allowed)."""
    @property
    def source(self) -> _Source:
        """Who answered (see ``Decision.source``)."""
    def get(self, name: str) -> Decision | None: ...
    def __getitem__(self, key: str, /) -> Decision: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...

@final
class ManualClock:
    """A clock that moves only when told to (for tests). Read natively by
    the limiters it is given to; also a callable returning seconds."""

    def __new__(cls, start: float = 0.0) -> ManualClock: ...
    def advance(self, seconds: float) -> None:
        """Moves time forward by ``seconds`` (finite, >= 0)."""
    def set(self, seconds: float) -> None:
        """Sets the time (forward or back)."""
    def now(self) -> float:
        """The time, in seconds."""
    def now_ns(self) -> int:
        """The time, in whole nanoseconds."""
    def __call__(self) -> float: ...

@final
class CoarseClock:
    """The opt-in coarse clock: the kernel's ``CLOCK_MONOTONIC_COARSE``, the
    default clock's timeline read several times more cheaply, in steps of
    one kernel tick (``resolution``, typically 4 ms). Read natively by the
    limiters it is given to; works with ``shared_file=`` and in a ``Stack``
    beside the default clock. Over any span of real time a limiter on it
    grants at most ``rate * resolution`` more than on a perfect clock."""

    def __new__(cls) -> CoarseClock: ...
    def now(self) -> float:
        """The time, in seconds on the host's monotonic timeline."""
    def now_ns(self) -> int:
        """The time, in whole nanoseconds."""
    @property
    def resolution(self) -> float:
        """How far apart readings step, in seconds (the kernel's tick)."""
    def __call__(self) -> float: ...

@final
class Rule:
    """One limit of a ``Limiter``."""

    @staticmethod
    def token_bucket(capacity: int | str, refill_per_sec: float | str | None = None) -> Rule: ...
    @staticmethod
    def fixed_window(limit: int | str, window_secs: float | None = None) -> Rule:
        """A fixed window: ``Rule.fixed_window("1000/day")`` or ``Rule.fixed_window(1000, 86400.0)`` (seconds)."""
    @staticmethod
    def sliding_window(limit: int | str, window_secs: float | None = None) -> Rule:
        """A sliding window: ``Rule.sliding_window("100/h")`` or ``Rule.sliding_window(100, 3600.0)`` (seconds)."""
    @property
    def kind(self) -> Literal["token_bucket", "fixed_window", "sliding_window"]: ...
    @property
    def limit(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __str__(self) -> str:
        """The rule with its unit, as every face prints it: ``fixed window 5 per 1m``."""
    __hash__: None  # type: ignore[assignment]

@disjoint_base
class Keyed:
    """A limiter with one rule and a state per key: the base class of
    ``TokenBucket``, ``FixedWindow`` and ``SlidingWindow``, which hold every
    operation here (built through them, never directly)."""

    def allow(self, key: _Key, cost: int = 1) -> Decision:
        """Takes ``cost`` from ``key`` if it has that much; a denial is a falsy Decision."""
    def peek(self, key: _Key, cost: int = 1) -> Decision:
        """What ``allow`` would answer, changing nothing."""
    def refund(self, key: _Key, tokens: int) -> None:
        """Gives ``tokens`` back to ``key`` (never above full)."""
    def reset(self, key: _Key) -> None:
        """Forgets ``key``: it is full again."""
    def allow_many(self, requests: Iterable[_Request]) -> list[Decision]:
        """Decides many requests at one clock reading; checks them all
        first (an error names the first invalid one in its ``index``)."""
    def headers(
        self, decision: Decision, *, name: str = "default", legacy: bool = False, draft: _Draft = "draft-11"
    ) -> list[tuple[str, str]]:
        """HTTP fields for ``decision``: RateLimit-Policy, RateLimit, Retry-After on a denial, and X-RateLimit-* with
        ``legacy``; the standard ones as ``draft`` writes them (``"draft-7"``: ``RateLimit: limit=.., remaining=..,
        reset=..``; ``"draft-6"``: ``RateLimit-Limit``, ``-Remaining``, ``-Reset``)."""
    def problem(self, decision: Decision, *, name: str = "default") -> str | None:
        """The RFC 9457 problem document (JSON) for a 429 answering ``decision``; None when allowed."""
    def gc(self) -> int:
        """Drops keys that are full again; returns how many."""
    def memory_bytes(self) -> int:
        """Bytes of memory the store holds (slots, long keys, summaries)."""
    def __len__(self) -> int: ...
    @property
    def limit(self) -> int: ...
    @property
    def max_key_len(self) -> int: ...
    @property
    def clock(self) -> ManualClock | _Clock | None: ...
    @property
    def rule(self) -> Rule: ...

@final
class TokenBucket(Keyed):
    """A token bucket per key (GCRA)."""

    def __new__(
        cls,
        capacity: int | str,
        refill_per_sec: float | str | None = None,
        *,
        clock: ManualClock | _Clock | None = None,
        max_keys: int | None = None,
        max_key_len: int | None = None,
        max_key_bytes: int | None = None,
        reserve_keys: int | None = None,
        eviction: _Eviction | None = None,
        shared_file: str | os.PathLike[str] | None = None,
    ) -> TokenBucket: ...
    @staticmethod
    def from_rate(
        rate: str,
        *,
        burst: int | None = None,
        clock: ManualClock | _Clock | None = None,
        max_keys: int | None = None,
        max_key_len: int | None = None,
        max_key_bytes: int | None = None,
        reserve_keys: int | None = None,
        eviction: _Eviction | None = None,
        shared_file: str | os.PathLike[str] | None = None,
    ) -> TokenBucket: ...
    @property
    def capacity(self) -> int: ...
    @property
    def refill_per_sec(self) -> float: ...

@final
class FixedWindow(Keyed):
    """At most ``limit`` calls per key in each window of ``window_secs`` seconds
    (or a rate string such as ``"100/min"``), windows aligned to the clock's epoch."""

    def __new__(
        cls,
        limit: int | str,
        window_secs: float | None = None,
        *,
        clock: ManualClock | _Clock | None = None,
        max_keys: int | None = None,
        max_key_len: int | None = None,
        max_key_bytes: int | None = None,
        reserve_keys: int | None = None,
        eviction: _Eviction | None = None,
        shared_file: str | os.PathLike[str] | None = None,
    ) -> FixedWindow: ...
    @property
    def window_secs(self) -> float:
        """The window length, in seconds."""

@final
class SlidingWindow(Keyed):
    """At most ``limit`` calls per key in any ``window_secs`` seconds (or a rate
    string such as ``"100/min"``), by the sliding-window counter approximation."""

    def __new__(
        cls,
        limit: int | str,
        window_secs: float | None = None,
        *,
        clock: ManualClock | _Clock | None = None,
        max_keys: int | None = None,
        max_key_len: int | None = None,
        max_key_bytes: int | None = None,
        reserve_keys: int | None = None,
        eviction: _Eviction | None = None,
        shared_file: str | os.PathLike[str] | None = None,
    ) -> SlidingWindow: ...
    @property
    def window_secs(self) -> float:
        """The window length, in seconds."""

@final
class DirectTokenBucket:
    """One token bucket for all traffic: no key."""

    def __new__(
        cls,
        capacity: int | str,
        refill_per_sec: float | str | None = None,
        *,
        clock: ManualClock | _Clock | None = None,
    ) -> DirectTokenBucket: ...
    def allow(self, cost: int = 1) -> Decision: ...
    def peek(self, cost: int = 1) -> Decision: ...
    def refund(self, tokens: int) -> None: ...
    def reset(self) -> None: ...
    def headers(
        self, decision: Decision, *, name: str = "default", legacy: bool = False, draft: _Draft = "draft-11"
    ) -> list[tuple[str, str]]:
        """HTTP fields for ``decision`` (as ``Keyed.headers``)."""
    def problem(self, decision: Decision, *, name: str = "default") -> str | None:
        """The problem document for a 429 answering ``decision``; None when allowed."""
    @property
    def limit(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def refill_per_sec(self) -> float: ...
    @property
    def clock(self) -> ManualClock | _Clock | None: ...
    @property
    def rule(self) -> Rule: ...

@final
class LimitSet:
    """Which of a ``Limiter``'s limits a call is subject to."""

    @property
    def names(self) -> tuple[str, ...]: ...
    def __len__(self) -> int: ...
    def __eq__(self, value: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Limiter:
    """Several named limits on one key, all or nothing: ``{name: rule}``,
    ``(name, rule)`` pairs, or one string of rates as Python's ``limits`` and
    slowapi write them, ``"10/second;1000/day"`` (token buckets, each named by
    its rate string)."""

    # Separate overloads, not one union: mypy infers a dict display of mixed
    # values ("3/s" and a Rule) against a Mapping alone, not against a union.
    @overload
    def __new__(
        cls,
        limits: str,
        *,
        clock: ManualClock | _Clock | None = None,
        max_keys: int | None = None,
        max_key_len: int | None = None,
        max_key_bytes: int | None = None,
        reserve_keys: int | None = None,
        eviction: _Eviction | None = None,
        shared_file: str | os.PathLike[str] | None = None,
    ) -> Limiter: ...
    @overload
    def __new__(
        cls,
        limits: Mapping[str, _RuleLike],
        *,
        clock: ManualClock | _Clock | None = None,
        max_keys: int | None = None,
        max_key_len: int | None = None,
        max_key_bytes: int | None = None,
        reserve_keys: int | None = None,
        eviction: _Eviction | None = None,
        shared_file: str | os.PathLike[str] | None = None,
    ) -> Limiter: ...
    @overload
    def __new__(
        cls,
        limits: Iterable[tuple[str, _RuleLike]],
        *,
        clock: ManualClock | _Clock | None = None,
        max_keys: int | None = None,
        max_key_len: int | None = None,
        max_key_bytes: int | None = None,
        reserve_keys: int | None = None,
        eviction: _Eviction | None = None,
        shared_file: str | os.PathLike[str] | None = None,
    ) -> Limiter: ...
    def allow(self, key: _Key, cost: int = 1, *, limits: _LimitsArg = None) -> MultiDecision: ...
    def peek(self, key: _Key, cost: int = 1, *, limits: _LimitsArg = None) -> MultiDecision: ...
    def refund(self, key: _Key, tokens: int, *, limits: _LimitsArg = None) -> None: ...
    def reset(self, key: _Key) -> None: ...
    def allow_many(self, requests: Iterable[_Request], *, limits: _LimitsArg = None) -> list[MultiDecision]: ...
    def limit_set(self, names: Sequence[str]) -> LimitSet: ...
    def headers(
        self, decision: MultiDecision, *, legacy: bool = False, draft: _Draft = "draft-11"
    ) -> list[tuple[str, str]]:
        """HTTP fields for ``decision``, one RateLimit-Policy/RateLimit item per limit the call was subject to
        (``draft`` as in ``Keyed.headers``: drafts 7 and 6 give the rest from the combined decision)."""
    def problem(self, decision: MultiDecision) -> str | None:
        """The RFC 9457 problem document naming the limits that denied; None when allowed."""
    def gc(self) -> int: ...
    def memory_bytes(self) -> int: ...
    def __len__(self) -> int: ...
    @property
    def names(self) -> tuple[str, ...]: ...
    @property
    def rules(self) -> dict[str, Rule]: ...
    @property
    def clock(self) -> ManualClock | _Clock | None: ...
    @property
    def max_key_len(self) -> int: ...

@final
class Quotas:
    """Token buckets whose quota comes with each call, one bucket per
    (quota, key), all in one bounded store: per-customer quotas read from a
    database. A quota is a rate string (``"100/min"``: burst = count) or a
    ``Rule.token_bucket(...)``."""

    def __new__(
        cls,
        *,
        clock: ManualClock | _Clock | None = None,
        max_keys: int | None = None,
        max_key_len: int | None = None,
        max_key_bytes: int | None = None,
        reserve_keys: int | None = None,
        eviction: _Eviction | None = None,
        shared_file: str | os.PathLike[str] | None = None,
    ) -> Quotas: ...
    def allow(self, key: _Key, quota: str | Rule, cost: int = 1) -> Decision:
        """Takes ``cost`` from ``key``'s bucket under ``quota``; a denial is a falsy Decision."""
    def peek(self, key: _Key, quota: str | Rule, cost: int = 1) -> Decision:
        """What ``allow`` would answer, changing nothing."""
    def refund(self, key: _Key, quota: str | Rule, tokens: int) -> None:
        """Gives ``tokens`` back to ``key``'s bucket under ``quota`` (never above full)."""
    def reset(self, key: _Key, quota: str | Rule) -> None:
        """Forgets ``key``'s bucket under ``quota``: it is full again."""
    def headers(
        self,
        decision: Decision,
        quota: str | Rule,
        *,
        name: str = "default",
        legacy: bool = False,
        draft: _Draft = "draft-11",
    ) -> list[tuple[str, str]]:
        """HTTP fields for ``decision`` under ``quota`` (as ``Keyed.headers``)."""
    def problem(self, decision: Decision, quota: str | Rule, *, name: str = "default") -> str | None:
        """The problem document for a 429 answering ``decision`` under ``quota``; None when allowed."""
    def gc(self) -> int:
        """Drops every bucket that is full again; returns how many."""
    def memory_bytes(self) -> int: ...
    def __len__(self) -> int: ...
    @property
    def max_key_len(self) -> int: ...
    @property
    def clock(self) -> ManualClock | _Clock | None: ...

@final
class Stack:
    """Limiters on different keys (per IP, per user, ...), all or nothing."""

    @overload  # two overloads, not one union: see Limiter.__new__
    def __new__(cls, members: Mapping[str, _Member], *, clock: ManualClock | _Clock | None = None) -> Stack: ...
    @overload
    def __new__(
        cls, members: Iterable[tuple[str, _Member]], *, clock: ManualClock | _Clock | None = None
    ) -> Stack: ...
    def allow(self, keys: Sequence[_Key], cost: int = 1) -> MultiDecision: ...
    def peek(self, keys: Sequence[_Key], cost: int = 1) -> MultiDecision: ...
    def refund(self, keys: Sequence[_Key], tokens: int) -> None:
        """Gives ``tokens`` back to every member, each on its key (never above full)."""
    def reset(self, keys: Sequence[_Key]) -> None:
        """Forgets every member's key (a ``DirectTokenBucket`` member is reset for everyone)."""
    def headers(
        self, decision: MultiDecision, *, legacy: bool = False, draft: _Draft = "draft-11"
    ) -> list[tuple[str, str]]:
        """HTTP fields for ``decision`` (one of this stack's), one RateLimit-Policy/RateLimit item per member,
        named as the member (``draft`` as in ``Limiter.headers``). ``InvalidArgumentError`` naming a
        ``Limiter`` member (it has no single policy) or for another limiter's decision."""
    def problem(self, decision: MultiDecision) -> str | None:
        """The RFC 9457 problem document naming the members that denied; None when allowed."""
    def __len__(self) -> int: ...
    @property
    def names(self) -> tuple[str, ...]: ...
    @property
    def members(self) -> tuple[_Member, ...]: ...
    @property
    def clock(self) -> ManualClock | _Clock | None: ...

@final
class _HttpFields:
    """The fields an HTTP middleware writes for one limiter's decisions, its
    header policies formatted once (internal to ``ratomic._http``)."""

    def __new__(
        cls,
        limiter: Keyed | DirectTokenBucket | Limiter | Stack,
        *,
        name: str = "default",
        draft: _Draft = "draft-11",
        legacy: bool = False,
        standard: bool = True,
        asgi: bool = True,
    ) -> _HttpFields: ...
    def fields(self, decision: Decision | MultiDecision) -> list[tuple[bytes, bytes]] | list[tuple[str, str]]:
        """The fields for ``decision``: lower-case bytes pairs with ``asgi``, else str pairs."""
    def problem(self, decision: Decision | MultiDecision) -> str | None:
        """The RFC 9457 problem document for a 429 answering ``decision``; None when allowed."""

@final
class _RedisCall:
    """One script call for ``ratomic.redis`` to send (internal)."""

    @property
    def argv(self) -> tuple[str | int | bytes, ...]: ...
    @property
    def lease(self) -> int: ...
    @property
    def key(self) -> bytes: ...

@final
class _RedisDriver:
    """ratomic-redis's driver for ``ratomic.redis`` (internal)."""

    def __new__(
        cls,
        limits: object,
        *,
        multi: bool,
        prefix: str,
        on_error: str,
        deny_retry_after: float,
        deny_cache: int,
        breaker_threshold: int,
        breaker_cooldown: float,
        breaker_failure_time: float,
        max_key_len: int,
        lease: str | int,
        lease_keys: int,
    ) -> _RedisDriver: ...
    @property
    def script(self) -> str: ...
    @property
    def rules(self) -> list[Rule]: ...
    @property
    def names(self) -> list[str]: ...
    @property
    def limit(self) -> int: ...
    @property
    def prefix(self) -> str: ...
    @property
    def breaker_open(self) -> bool: ...
    @property
    def lease_max(self) -> int | None: ...
    @property
    def leases_held(self) -> int: ...
    def begin_give_backs(self) -> list[_RedisCall]: ...
    def finish_give_back(self, reply: object, kind: str | None = None) -> int: ...
    def refund_lease(self, key: _Key, tokens: int) -> bool: ...
    def begin_reset_call(self, key: _Key, now: float | None = None) -> _RedisCall: ...
    def finish_reset(self, reply: object, kind: str | None = None) -> None: ...
    def begin(
        self, op: str, key: _Key, cost: int, now: float | None = None, demand: int = 0
    ) -> Decision | MultiDecision | _RedisCall: ...
    def begin_local(
        self, op: str, key: _Key, cost: int, now: float | None = None
    ) -> Decision | MultiDecision | None: ...
    def finish(self, call: _RedisCall, reply: object) -> Decision | MultiDecision: ...
    def fail(self, call: _RedisCall, kind: str, error: BaseException) -> Decision | MultiDecision: ...
    def begin_refund(self, key: _Key, tokens: int, now: float | None = None) -> _RedisCall: ...
    def finish_refund(self, reply: object, kind: str | None = None) -> None: ...
    def begin_reset(self, key: _Key) -> bytes: ...
    def begin_many(
        self, requests: Iterable[_Request], now: float | None = None
    ) -> list[Decision] | list[MultiDecision] | list[_RedisCall]: ...
    def finish_many(self, calls: list[_RedisCall], replies: object, kind: str | None = None) -> list[Decision] | list[MultiDecision]: ...
    def backend_error(self, kind: str, error: BaseException) -> BackendError: ...
    def fallback(self, decision: Decision | MultiDecision) -> Decision | MultiDecision: ...
    def headers(
        self, decision: Decision | MultiDecision, name: str, legacy: bool, *, draft: _Draft = "draft-11"
    ) -> list[tuple[str, str]]: ...
    def problem(self, decision: Decision | MultiDecision, name: str) -> str | None: ...
    def check_name(self, name: str) -> None: ...

@final
class _PostgresCall:
    """One statement for ``ratomic.postgres`` to run (internal)."""

    @property
    def params(self) -> tuple[object, ...] | dict[str, object]: ...
    @property
    def statement(self) -> str: ...
    @property
    def upsert(self) -> bool: ...
    @property
    def coalescible(self) -> bool: ...

@final
class _PostgresBatch:
    """One batch statement for ``ratomic.postgres`` to run (internal)."""

    @property
    def params(self) -> tuple[object, ...]: ...

@final
class _PostgresDriver:
    """ratomic-postgres's driver for ``ratomic.postgres`` (internal)."""

    def __new__(
        cls,
        limits: object,
        *,
        multi: bool,
        prefix: str,
        on_error: str,
        deny_retry_after: float,
        deny_cache: int,
        breaker_threshold: int,
        breaker_cooldown: float,
        breaker_failure_time: float,
        max_key_len: int,
        lease: str | int,
        lease_keys: int,
    ) -> _PostgresDriver: ...
    @property
    def statement(self) -> str: ...
    @property
    def many_statement(self) -> str: ...
    @property
    def gc_statement(self) -> str: ...
    @staticmethod
    def schema(unlogged: bool) -> str: ...
    def at_us(self, now: float | None) -> int | None: ...
    @property
    def rules(self) -> list[Rule]: ...
    @property
    def names(self) -> list[str]: ...
    @property
    def limit(self) -> int: ...
    @property
    def prefix(self) -> str: ...
    @property
    def breaker_open(self) -> bool: ...
    def begin(
        self, op: str, key: _Key, cost: int, now: float | None = None
    ) -> Decision | MultiDecision | _PostgresCall: ...
    def finish(self, call: _PostgresCall, reply: object, kind: str | None = None) -> Decision | MultiDecision: ...
    def general(self, call: _PostgresCall) -> _PostgresCall: ...
    def begin_refund(self, key: _Key, tokens: int, now: float | None = None) -> _PostgresCall: ...
    def finish_refund(self, reply: object, kind: str | None = None) -> None: ...
    def begin_reset(self, key: _Key) -> _PostgresCall: ...
    def finish_reset(self, reply: object, kind: str | None = None) -> None: ...
    def begin_many(
        self, requests: Iterable[_Request], now: float | None = None
    ) -> list[Decision] | list[MultiDecision] | _PostgresBatch: ...
    def finish_many(
        self, batch: _PostgresBatch, reply: object, kind: str | None = None
    ) -> list[Decision] | list[MultiDecision]: ...
    def coalesce(
        self, calls: list[_PostgresCall]
    ) -> _PostgresBatch | list[Decision | MultiDecision | Exception]: ...
    def finish_coalesced(
        self, batch: _PostgresBatch, reply: object, kind: str | None = None
    ) -> list[Decision | MultiDecision | Exception]: ...
    def backend_error(self, kind: str, error: BaseException) -> BackendError: ...
    @property
    def lease_max(self) -> int | None: ...
    @property
    def leases_held(self) -> int: ...
    @property
    def give_back_statement(self) -> str: ...
    def begin_give_backs(self) -> list[tuple[object, ...]]: ...
    def finish_give_back(self, reply: object, kind: str | None = None) -> int: ...
    def refund_lease(self, key: _Key, tokens: int) -> bool: ...
    def headers(
        self, decision: Decision | MultiDecision, name: str, legacy: bool, *, draft: _Draft = "draft-11"
    ) -> list[tuple[str, str]]: ...
    def problem(self, decision: Decision | MultiDecision, name: str) -> str | None: ...
    def check_name(self, name: str) -> None: ...
    def fallback(self, decision: Decision | MultiDecision) -> Decision | MultiDecision: ...
