"""Redis-backed limiters through the Redis client you already have.

Every process and host that uses the same Redis server (or Valkey, or a
Redis Cluster) and the same ``prefix`` shares every key's state::

    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    from ratomic.redis import RedisTokenBucket

    # One attempt of at most 50 ms a call: redis-py would otherwise retry 10
    # times with backoff, seconds on a stopped server.
    client = redis.Redis(host="127.0.0.1", port=6379, socket_timeout=0.05,
                         socket_connect_timeout=0.05, retry=Retry(NoBackoff(), 0))
    limiter = RedisTokenBucket("10/s", client=client, prefix="api:")
    d = limiter.allow("user:42")          # one round trip: one EVALSHA
    if not d:
        print(f"retry in {d.retry_after:.3f}s")

With a ``redis.asyncio.Redis`` client the same methods are coroutines
(``await limiter.allow(key)``). The classes answer with the same
:class:`~ratomic.Decision` / :class:`~ratomic.MultiDecision` as the
in-memory limiters, whose ``source`` says who answered: ``"redis"``,
``"deny_cache"``, ``"lease"``, ``"policy"`` or ``"fallback"``.

This module only moves bytes: the script, the key layout, the arguments,
the decoding of replies, the deny cache, the circuit breaker and the
failure policy are ratomic's Rust engine (the crate ``ratomic-redis``),
shared with the Rust and C faces. It needs the ``redis`` package
(``pip install 'ratomic[redis]'``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sys
import threading
import time
import typing as _t
import weakref
from collections.abc import Awaitable, Coroutine, Generator, Iterable, Mapping, Sequence

from ratomic._acquire import check_timeout
from ratomic._ratomic import (
    ArgumentTypeError,
    BackendError,
    Decision,
    InvalidArgumentError,
    Keyed,
    Limiter,
    MultiDecision,
    Rule,
    _RedisCall,
    _RedisDriver,
)

try:
    import redis as _redis
    import redis.asyncio as _aredis
    import redis.exceptions as _rexc
except ImportError as _e:  # pragma: no cover - exercised by hand
    raise ImportError(
        "ratomic.redis needs the redis package: pip install 'ratomic[redis]' (or pip install redis)"
    ) from _e

__all__ = [
    "Async",
    "BackendError",
    "RedisFixedWindow",
    "RedisLimiter",
    "RedisSlidingWindow",
    "RedisTokenBucket",
    "Sync",
]

_Key = _t.Union[str, bytes]
_Request = _t.Union[_Key, tuple[_Key, int]]
_OnError = _t.Union[_t.Literal["raise", "allow", "deny"], Keyed, Limiter]
_Lease = _t.Union[_t.Literal["off", "auto"], int]
_SyncClient = _t.Union[_redis.Redis, _redis.RedisCluster]
_AsyncClient = _t.Union[_aredis.Redis, _aredis.RedisCluster]

if _t.TYPE_CHECKING:
    from typing_extensions import Unpack

    from ratomic._ratomic import _Draft


class _Options(_t.TypedDict, total=False):
    """The options every class takes (see ``_OPTIONS_DOC``)."""

    prefix: str
    timeout: float | None
    on_error: _OnError
    deny_retry_after: float
    deny_cache: int
    breaker_threshold: int
    breaker_cooldown: float
    breaker_failure_time: float
    max_key_len: int
    lease: _Lease
    lease_keys: int


#: Where ratomic.redis reports a set-up that can stall requests.
logger = logging.getLogger("ratomic.redis")


def _check_blocking_client(client: _t.Any) -> None:
    """Warns when a blocking ``redis.Redis`` cannot bound a call to a short
    wait: with no ``socket_timeout`` a stopped server blocks it for good,
    redis-py 8's default waits 5 s an attempt, and its default retries (10,
    with backoff up to 1 s) make one call to a stopped server take seconds
    more. The breaker opens on time spent too (``breaker_failure_time``),
    but the call that opens it has stalled its request already."""
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None)
    if not isinstance(client, _redis.Redis) or not isinstance(kwargs, dict):
        return  # a cluster client, or a redis-py that keeps these elsewhere
    retry = kwargs.get("retry")
    if retry is not None and hasattr(retry, "get_retries"):
        retries = retry.get_retries()
    else:
        # No Retry given (Redis.from_url): redis-py makes one attempt, or two
        # when told to retry on some errors.
        retries = 1 if kwargs.get("retry_on_error") or kwargs.get("retry_on_timeout") else 0
    timeout = kwargs.get("socket_timeout")
    problems = []
    if timeout is None:
        problems.append("has no socket_timeout (a stopped server blocks a call for good)")
    elif timeout >= 1:
        problems.append(f"waits {timeout} s for a reply (socket_timeout; redis-py 8's default is 5)")
    if retries != 0:
        problems.append(
            f"retries {'forever' if retries < 0 else f'{retries} times'} with backoff (a call to a stopped "
            "server takes seconds)"
        )
    if problems:
        logger.warning(
            "the redis.Redis client of a ratomic limiter %s: every request waits that long until the breaker "
            "opens. Bound each call to one attempt: redis.Redis(..., socket_timeout=0.05, "
            "socket_connect_timeout=0.05, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))",
            " and ".join(problems),
        )


class Sync:
    """Marks a limiter over a blocking client (``redis.Redis``): its
    methods answer at once."""


class Async:
    """Marks a limiter over an asyncio client (``redis.asyncio.Redis``):
    its methods are awaited."""


_M = _t.TypeVar("_M", Sync, Async)
_D = _t.TypeVar("_D", Decision, MultiDecision)
_Self = _t.TypeVar("_Self", bound="_RedisBase[_t.Any, _t.Any]")
_T = _t.TypeVar("_T")

_SYNC_CLIENTS: tuple[type, ...] = (_redis.Redis, _redis.RedisCluster)
_ASYNC_CLIENTS: tuple[type, ...] = (_aredis.Redis, _aredis.RedisCluster)


def _is_async(client: object) -> bool:
    if isinstance(client, _ASYNC_CLIENTS):
        return True
    if isinstance(client, _SYNC_CLIENTS):
        return False
    what = f"the class {client.__name__}" if isinstance(client, type) else type(client).__name__
    raise ArgumentTypeError(
        "client must be a redis.Redis or redis.RedisCluster (blocking) or a redis.asyncio.Redis or "
        f"redis.asyncio.RedisCluster (asyncio) instance, not {what}"
    )


def _kind(e: BaseException) -> str | None:
    """How a client call failed, in the driver's terms; None: not a backend failure."""
    if isinstance(e, (_rexc.TimeoutError, TimeoutError, asyncio.TimeoutError)):
        return "timeout"
    if isinstance(e, (_rexc.ConnectionError, OSError)):
        return "connection"
    if isinstance(e, _rexc.ResponseError):
        return "server"
    if isinstance(e, _rexc.RedisError):
        return "reply"
    return None


class _Pending(Awaitable[_T]):
    """An async limiter's answer before it is awaited. Using it as a
    decision (truth value, attributes) is a mistake this catches: without
    ``await`` nothing was decided."""

    __slots__ = ("_coro",)

    def __init__(self, coro: Coroutine[_t.Any, _t.Any, _T]) -> None:
        self._coro = coro

    def __await__(self) -> Generator[_t.Any, None, _T]:
        return self._coro.__await__()

    def _misuse(self) -> TypeError:
        self._coro.close()
        return TypeError(
            "this limiter's client is a redis.asyncio client: its calls are coroutines, await them "
            "(`d = await limiter.allow(key)`), or pass a blocking redis.Redis client"
        )

    def __bool__(self) -> bool:
        raise self._misuse()

    def __getattr__(self, name: str) -> _t.NoReturn:
        raise self._misuse()


def _send(client: _t.Any, driver: _RedisDriver, call: _RedisCall) -> object:
    try:
        return client.execute_command(*call.argv)
    except _rexc.NoScriptError:
        # A restarted or flushed server forgot the script; nothing ran.
        client.script_load(driver.script)
        return client.execute_command(*call.argv)


async def _send_async(client: _t.Any, driver: _RedisDriver, call: _RedisCall) -> object:
    try:
        return await client.execute_command(*call.argv)
    except _rexc.NoScriptError:
        await client.script_load(driver.script)
        return await client.execute_command(*call.argv)


async def _nothing() -> None:
    return None


def _give_back(client: _t.Any, driver: _RedisDriver) -> int:
    """Sends every lease's give-back in one pipeline: how many limits took
    tokens back."""
    calls = driver.begin_give_backs()
    if not calls:
        return 0
    try:
        replies = _send_many(client, driver, calls)
    except Exception as e:
        kind = _kind(e)
        if kind is None:
            raise
        driver.finish_give_back(e, kind)
    return sum(driver.finish_give_back(r) for r in replies)


def _give_back_quietly(client: _t.Any, driver: _RedisDriver) -> None:
    """The give-back at exit: never raises (the leases then come back when
    their time passes)."""
    try:
        _give_back(client, driver)
    except Exception as e:  # noqa: BLE001 - at exit, nothing can act on it
        logger.debug("ratomic.redis: leases not given back at exit: %s", e)


def _pipeline(client: _t.Any, calls: Sequence[_RedisCall], todo: list[int]) -> _t.Any:
    pipe = client.pipeline(transaction=False)
    for i in todo:
        pipe.execute_command(*calls[i].argv)
    return pipe


def _sort(out: list[object], todo: list[int], replies: Sequence[object], first: bool) -> list[int]:
    """Files each reply; returns the calls a server answered NOSCRIPT
    (they did not run: sent again once the script is loaded)."""
    again = []
    for i, r in zip(todo, replies):
        if first and isinstance(r, _rexc.NoScriptError):
            again.append(i)
        elif isinstance(r, BaseException):
            raise r
        else:
            out[i] = r
    return again


def _send_many(client: _t.Any, driver: _RedisDriver, calls: Sequence[_RedisCall]) -> list[object]:
    out: list[object] = [None] * len(calls)
    todo = list(range(len(calls)))
    for first in (True, False):
        todo = _sort(out, todo, _pipeline(client, calls, todo).execute(raise_on_error=False), first)
        if not todo:
            break
        client.script_load(driver.script)
    return out


async def _send_many_async(client: _t.Any, driver: _RedisDriver, calls: Sequence[_RedisCall]) -> list[object]:
    out: list[object] = [None] * len(calls)
    todo = list(range(len(calls)))
    for first in (True, False):
        todo = _sort(out, todo, await _pipeline(client, calls, todo).execute(raise_on_error=False), first)
        if not todo:
            break
        await client.script_load(driver.script)
    return out


#: The most decisions one coalesced round trip carries.
MAX_BATCH = 256

# How many round trips a waiting call is held back for a lease on its way to
# its key (then it goes to Redis itself): up to _FREE_DEFERS whatever came of
# them, then up to _MAX_DEFERS while its key's leases keep answering calls —
# a lease call granted in the last round trip, or a lease answering calls in
# this one (as in Rust's client). A lease call that keeps being denied holds
# no one long: the deny cache answers its waiters.
_FREE_DEFERS = 8
_MAX_DEFERS = 64


class _Waiting:
    """A decision waiting for the round trip in flight to end: with the call
    ``begin`` made for it (asking for a lease, or begun when nothing was in
    flight), or none (it came while a round trip was in flight, and nothing
    here answered it: it is begun when its round trip is planned)."""

    __slots__ = ("call", "cost", "deferred", "done", "error", "key", "lead", "now", "op", "result")

    def __init__(self, op: str, key: _Key, cost: int, now: float | None, call: _RedisCall | None) -> None:
        self.op, self.key, self.cost, self.now, self.call = op, key, cost, now, call
        self.deferred = 0
        self.done: _t.Any = None  # a threading.Event (blocking) or an asyncio.Future
        self.result: object = None
        self.error: BaseException | None = None
        self.lead = False  # blocking: woken to send the next round trip itself

    def outcome(self) -> _t.Any:
        if self.error is not None:
            raise self.error
        return self.result

    def key_id(self) -> bytes:
        """The key as the driver sees it (a str is its UTF-8)."""
        if self.call is not None:
            return self.call.key
        return self.key.encode() if isinstance(self.key, str) else bytes(self.key)


def _plan(
    driver: _RedisDriver,
    waiting: Sequence[_Waiting],
    settle: _t.Callable[[_Waiting, object, BaseException | None], None],
    granted: set[bytes],
) -> tuple[list[_RedisCall], list[_Waiting], list[_Waiting]]:
    """Which of ``waiting`` go in this round trip: the calls to send, whose
    they are, and those held back for a lease this round trip brings their
    key. A call asking for a lease goes as it is (its key's one asker); the
    others begin (again) — a lease or a denial that came meanwhile may answer
    them here (``settle``) — asking, should they ask for a lease, for one
    that covers the tokens the others on their key wait for. ``granted``:
    the keys whose lease call the last round trip granted (see
    ``_FREE_DEFERS``)."""
    keys = [w.key_id() for w in waiting]
    demand: dict[bytes, int] = {}
    for w, k in zip(waiting, keys):
        demand[k] = demand.get(k, 0) + w.cost
    calls: list[_RedisCall] = []
    sent: list[_Waiting] = []
    later: list[_Waiting] = []
    leasing: set[bytes] = set()
    progressed = set(granted)
    for w, k in zip(waiting, keys):
        if w.call is not None and w.call.lease:
            leasing.add(k)
        elif k in leasing and w.deferred < _MAX_DEFERS and (w.deferred < _FREE_DEFERS or k in progressed):
            w.deferred += 1
            later.append(w)
            continue
        else:
            try:
                step = driver.begin(w.op, w.key, w.cost, w.now, demand[k] - w.cost)
            except Exception as e:
                settle(w, None, e)
                continue
            if not isinstance(step, _RedisCall):
                if getattr(step, "source", None) == "lease":
                    progressed.add(k)
                settle(w, step, None)
                continue
            if step.lease:
                leasing.add(k)
            w.call = step
        calls.append(_t.cast(_RedisCall, w.call))
        sent.append(w)
    return calls, sent, later


def _settle_all(
    driver: _RedisDriver,
    sent: Sequence[_Waiting],
    replies: Sequence[object] | None,
    error: BaseException | None,
    settle: _t.Callable[[_Waiting, object, BaseException | None], None],
) -> set[bytes]:
    """Ends every call of a round trip with its reply, or with how the
    round trip failed (the policy answers each, or its error is theirs).
    The keys whose lease call was granted (``_plan``'s ``granted``)."""
    granted: set[bytes] = set()
    kind = None if error is None else _kind(error)
    for i, w in enumerate(sent):
        call = _t.cast(_RedisCall, w.call)  # every call sent was begun
        try:
            if error is None:
                d = driver.finish(call, _t.cast(Sequence[object], replies)[i])
            elif kind is None:
                raise error
            else:
                d = driver.fail(call, kind, error)
        except Exception as e:
            settle(w, None, e)
        else:
            if call.lease and d:
                granted.add(call.key)
            settle(w, d, None)
    return granted


async def _within(aw: Awaitable[_T], seconds: float) -> _T:
    """``aw``, or ``TimeoutError`` after ``seconds``: one timer, no task."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await aw
    return await asyncio.wait_for(aw, seconds)  # pragma: no cover - Python 3.10


class _RedisBase(_t.Generic[_M, _D]):
    """What the four classes share: the driver, the client and the policy."""

    _driver: _RedisDriver

    def __init__(
        self,
        limits: object,
        *,
        multi: bool,
        client: _t.Any,
        prefix: str = "ratomic:",
        timeout: float | None = None,
        on_error: _OnError = "raise",
        deny_retry_after: float = 1.0,
        deny_cache: int = 10_000,
        breaker_threshold: int = 5,
        breaker_cooldown: float = 1.0,
        breaker_failure_time: float = 1.0,
        max_key_len: int = 1024,
        lease: _Lease = "off",
        lease_keys: int = 10_000,
    ) -> None:
        self._async = _is_async(client)
        self._client = client
        self._local: Keyed | Limiter | None = None
        # Decisions waiting for the round trip in flight (see _coalesced).
        self._busy = False
        self._queue: collections.deque[_Waiting] = collections.deque()
        self._lock = threading.Lock()
        self._drainer: asyncio.Task[None] | None = None
        # Keys whose lease call the last round trip granted (see _plan).
        self._granted: set[bytes] = set()
        policy = "raise"
        if isinstance(on_error, str):
            policy = on_error
        elif isinstance(on_error, Limiter if multi else Keyed):
            self._local = on_error
        else:
            want = "a ratomic.Limiter" if multi else "an in-memory ratomic limiter (TokenBucket, FixedWindow, ...)"
            raise ArgumentTypeError(
                f'on_error must be "raise", "allow", "deny" or {want} to fall back to, not {type(on_error).__name__}'
            )
        if self._async:
            self._timeout = 0.05 if timeout is None else timeout
            if isinstance(self._timeout, bool) or not isinstance(self._timeout, (int, float)):
                raise ArgumentTypeError(
                    f"timeout must be None or a number of seconds, not {type(timeout).__name__}: {timeout!r}"
                )
            if not self._timeout > 0:
                raise InvalidArgumentError(f"invalid timeout: {timeout!r} (must be a number of seconds > 0)")
        elif timeout is not None:
            raise InvalidArgumentError(
                "timeout= applies to asyncio clients; a blocking redis.Redis call cannot be interrupted from "
                "outside: set socket_timeout (and socket_connect_timeout) on the client instead"
            )
        else:
            _check_blocking_client(client)
        self._driver = _RedisDriver(
            limits,
            multi=multi,
            prefix=prefix,
            on_error=policy,
            deny_retry_after=deny_retry_after,
            deny_cache=deny_cache,
            breaker_threshold=breaker_threshold,
            breaker_cooldown=breaker_cooldown,
            breaker_failure_time=breaker_failure_time,
            max_key_len=max_key_len,
            lease=lease,
            lease_keys=lease_keys,
        )
        if not self._async and self._driver.lease_max is not None:
            # At exit (or when the limiter is collected) the leases still
            # held go back. The finalizer holds the client and the driver,
            # not the limiter, so it keeps nothing alive; it runs once, at
            # most one call per key held, each bounded by the client's
            # socket_timeout.
            weakref.finalize(self, _give_back_quietly, client, self._driver)

    # ---- the operations ------------------------------------------------------

    @_t.overload
    def allow(self: _RedisBase[Sync, _D], key: _Key, cost: int = 1) -> _D: ...
    @_t.overload
    def allow(self: _RedisBase[Async, _D], key: _Key, cost: int = 1) -> Awaitable[_D]: ...
    def allow(self, key: _Key, cost: int = 1) -> _D | Awaitable[_D]:
        """Takes ``cost`` from ``key`` (from every limit, all or nothing) if
        it allows it, at the server's time. A denial is a falsy decision."""
        if self._async:
            return _Pending(self._decide_async("allow", key, cost, None))
        # _decide, written out: a call answered here (a lease, a cached
        # denial) costs little more than the driver's own work.
        try:
            if self._busy:
                # A round trip is in flight (read without the lock: a hint;
                # _coalesced decides under it). Answered here, or it waits
                # for the next round trip asking for no lease meanwhile: the
                # round trip's plan asks, for every call on the key at once.
                d = self._driver.begin_local("allow", key, cost)
                if d is not None:
                    return d  # type: ignore[return-value]
                return self._coalesced(_Waiting("allow", key, cost, None, None))  # type: ignore[return-value]
            step = self._driver.begin("allow", key, cost)
            if step.__class__ is _RedisCall:
                return self._coalesced(_Waiting("allow", key, cost, None, step))  # type: ignore[arg-type,return-value]
        except BackendError:
            if self._local is None:
                raise
            return self._fallback("allow", key, cost)
        return step  # type: ignore[return-value]

    @_t.overload
    def allow_at(self: _RedisBase[Sync, _D], key: _Key, now: float, cost: int = 1) -> _D: ...
    @_t.overload
    def allow_at(self: _RedisBase[Async, _D], key: _Key, now: float, cost: int = 1) -> Awaitable[_D]: ...
    def allow_at(self, key: _Key, now: float, cost: int = 1) -> _D | Awaitable[_D]:
        """As :meth:`allow` at ``now`` (seconds on your own clock, rounded
        down to whole microseconds) instead of the server's time: for tests
        and replays. Every caller of a key must use the same clock."""
        return self._decide("allow", key, cost, now)

    @_t.overload
    def peek(self: _RedisBase[Sync, _D], key: _Key, cost: int = 1) -> _D: ...
    @_t.overload
    def peek(self: _RedisBase[Async, _D], key: _Key, cost: int = 1) -> Awaitable[_D]: ...
    def peek(self, key: _Key, cost: int = 1) -> _D | Awaitable[_D]:
        """What :meth:`allow` would answer, changing nothing."""
        return self._decide("peek", key, cost, None)

    @_t.overload
    def peek_at(self: _RedisBase[Sync, _D], key: _Key, now: float, cost: int = 1) -> _D: ...
    @_t.overload
    def peek_at(self: _RedisBase[Async, _D], key: _Key, now: float, cost: int = 1) -> Awaitable[_D]: ...
    def peek_at(self, key: _Key, now: float, cost: int = 1) -> _D | Awaitable[_D]:
        """As :meth:`peek` at ``now`` (see :meth:`allow_at`)."""
        return self._decide("peek", key, cost, now)

    @_t.overload
    def refund(self: _RedisBase[Sync, _D], key: _Key, tokens: int) -> None: ...
    @_t.overload
    def refund(self: _RedisBase[Async, _D], key: _Key, tokens: int) -> Awaitable[None]: ...
    def refund(self, key: _Key, tokens: int) -> None | Awaitable[None]:
        """Gives back ``tokens`` to every limit on ``key`` (never above
        full). A Redis failure raises :class:`BackendError` whatever the
        policy."""
        return self._refund(key, tokens, None)

    @_t.overload
    def refund_at(self: _RedisBase[Sync, _D], key: _Key, now: float, tokens: int) -> None: ...
    @_t.overload
    def refund_at(self: _RedisBase[Async, _D], key: _Key, now: float, tokens: int) -> Awaitable[None]: ...
    def refund_at(self, key: _Key, now: float, tokens: int) -> None | Awaitable[None]:
        """As :meth:`refund` at ``now`` (see :meth:`allow_at`)."""
        return self._refund(key, tokens, now)

    @_t.overload
    def reset(self: _RedisBase[Sync, _D], key: _Key) -> None: ...
    @_t.overload
    def reset(self: _RedisBase[Async, _D], key: _Key) -> Awaitable[None]: ...
    def reset(self, key: _Key) -> None | Awaitable[None]:
        """Forgets ``key`` (one script call): it is full again, but for the
        tokens other processes' leases hold (those stay theirs until spent,
        given back or expired). A Redis failure raises :class:`BackendError`
        whatever the policy."""
        call = self._driver.begin_reset_call(key)
        if self._async:
            return _Pending(self._reset_async(call))
        try:
            reply = _send(self._client, self._driver, call)
        except Exception as e:
            kind = _kind(e)
            if kind is None:
                raise
            self._driver.finish_reset(e, kind)
        self._driver.finish_reset(reply)
        return None

    @_t.overload
    def allow_many(self: _RedisBase[Sync, _D], requests: Iterable[_Request]) -> list[_D]: ...
    @_t.overload
    def allow_many(self: _RedisBase[Async, _D], requests: Iterable[_Request]) -> Awaitable[list[_D]]: ...
    def allow_many(self, requests: Iterable[_Request]) -> list[_D] | Awaitable[list[_D]]:
        """Decides every request (a key, or a ``(key, cost)`` pair) in one
        pipeline, in order. Every request is checked first: an invalid one
        raises with its ``index`` and nothing is sent."""
        return self._many(requests, None)

    @_t.overload
    def allow_many_at(self: _RedisBase[Sync, _D], requests: Iterable[_Request], now: float) -> list[_D]: ...
    @_t.overload
    def allow_many_at(
        self: _RedisBase[Async, _D], requests: Iterable[_Request], now: float
    ) -> Awaitable[list[_D]]: ...
    def allow_many_at(self, requests: Iterable[_Request], now: float) -> list[_D] | Awaitable[list[_D]]:
        """As :meth:`allow_many`, every request at ``now``."""
        return self._many(requests, now)

    @_t.overload
    def acquire(self: _RedisBase[Sync, _D], key: _Key, cost: int = 1, *, timeout: float | None = None) -> _D: ...
    @_t.overload
    def acquire(
        self: _RedisBase[Async, _D], key: _Key, cost: int = 1, *, timeout: float | None = None
    ) -> Awaitable[_D]: ...
    def acquire(self, key: _Key, cost: int = 1, *, timeout: float | None = None) -> _D | Awaitable[_D]:
        """Takes ``cost`` from ``key``, sleeping through each ``retry_after``
        Redis gives until allowed (``time.sleep`` with a blocking client,
        ``asyncio.sleep`` with an asyncio one). With ``timeout`` (seconds),
        gives up as soon as the next wait would pass it and returns that
        denied decision: nothing was consumed."""
        check_timeout(timeout)
        if self._async:
            return _Pending(self._acquire_async(key, cost, timeout))
        waited = 0.0
        while True:
            d = _t.cast(_D, self._decide("allow", key, cost, None))
            if d or (timeout is not None and waited + d.retry_after > timeout):
                return d
            time.sleep(d.retry_after)
            waited += d.retry_after

    # ---- leases --------------------------------------------------------------

    @_t.overload
    def close(self: _RedisBase[Sync, _D]) -> int: ...
    @_t.overload
    def close(self: _RedisBase[Async, _D]) -> _t.NoReturn: ...
    def close(self) -> int:
        """Gives back the unused tokens of every lease this limiter holds, so
        that other processes can have them now rather than when their time
        passes: how many limits took tokens back (a lease some other call
        was granted after cannot be). The client stays open (it is yours);
        calls made afterwards take new leases. A blocking limiter also does
        this at exit. A Redis failure raises :class:`BackendError`. With an
        asyncio client, ``await limiter.aclose()``."""
        if self._async:
            raise TypeError(
                "this limiter's client is a redis.asyncio client: `await limiter.aclose()` "
                "(or `async with limiter:`) gives its leases back"
            )
        return _give_back(self._client, self._driver)

    async def aclose(self) -> int:
        """:meth:`close` for a limiter over an asyncio client. Nothing can
        run at exit for an asyncio client: call this before the event loop
        ends (``async with limiter:`` does), or the leases it still holds
        come back to the fleet only when their time passes."""
        if not self._async:
            raise TypeError("this limiter's client is a blocking redis.Redis: call limiter.close()")
        calls = self._driver.begin_give_backs()
        if not calls:
            return 0
        try:
            replies = await asyncio.wait_for(_send_many_async(self._client, self._driver, calls), self._timeout)
        except Exception as e:
            kind = _kind(e)
            if kind is None:
                raise
            self._driver.finish_give_back(e, kind)
        return sum(self._driver.finish_give_back(r) for r in replies)

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def lease(self) -> int | None:
        """The most tokens a lease takes (``lease="auto"``: an eighth of the
        smallest burst), or None when this limiter leases none."""
        return self._driver.lease_max

    @property
    def leases_held(self) -> int:
        """Keys this process holds a lease on now."""
        return self._driver.leases_held

    # ---- facts ---------------------------------------------------------------

    @property
    def client(self) -> _t.Any:
        """The Redis client the calls go through."""
        return self._client

    @property
    def prefix(self) -> str:
        """The key prefix: a user key ``k`` is stored at ``<prefix>{k}``."""
        return self._driver.prefix

    @property
    def limit(self) -> int:
        """The largest cost a call may ask (the smallest limit)."""
        return self._driver.limit

    @property
    def breaker_open(self) -> bool:
        """Whether the circuit breaker is open: calls answer by ``on_error``
        without reaching Redis until its cool-down ends."""
        return self._driver.breaker_open

    # ---- the I/O -------------------------------------------------------------

    def _fallback(self, op: str, key: _Key, cost: int) -> _D:
        local = _t.cast(_t.Any, self._local)
        d = local.peek(key, cost) if op == "peek" else local.allow(key, cost)
        return _t.cast(_D, self._driver.fallback(d))

    # Decisions in flight at the same time share round trips: while one is
    # outstanding, the calls that come meanwhile wait in self._queue and then
    # go together, up to MAX_BATCH in one pipeline (one timeout for all with
    # an asyncio client), each answered as it would have been alone: the
    # server runs a pipeline's calls in order.

    def _decide(self, op: str, key: _Key, cost: int, now: float | None) -> _D | Awaitable[_D]:
        if self._async:
            return _Pending(self._decide_async(op, key, cost, now))
        try:
            if self._busy:  # as in allow
                d = self._driver.begin_local(op, key, cost, now)
                if d is not None:
                    return _t.cast(_D, d)
                return _t.cast(_D, self._coalesced(_Waiting(op, key, cost, now, None)))
            step = self._driver.begin(op, key, cost, now)
            if not isinstance(step, _RedisCall):
                return _t.cast(_D, step)
            return _t.cast(_D, self._coalesced(_Waiting(op, key, cost, now, step)))
        except BackendError:
            if self._local is None:
                raise
            return self._fallback(op, key, cost)

    def _coalesced(self, me: _Waiting) -> object:
        """A blocking call: sent now if nothing is in flight, else it waits
        for the thread whose round trip is in flight to wake it, answered
        or to send the next round trip itself (with whoever waits then)."""
        with self._lock:
            if self._busy:
                me.done = threading.Event()
                self._queue.append(me)
            else:
                self._busy = True
        if me.done is not None:
            me.done.wait()
            if not me.lead:
                return me.outcome()
            with self._lock:
                batch = [me] + [self._queue.popleft() for _ in range(min(len(self._queue), MAX_BATCH - 1))]
        else:
            batch = None
        try:
            self._round_trip(me, batch)
        finally:
            with self._lock:
                if self._queue:
                    # The next waiter sends the next round trip (each thread
                    # sends at most one: none serves the others for ever).
                    nxt = self._queue.popleft()
                    nxt.lead = True
                    nxt.done.set()
                else:
                    self._busy = False
        return me.outcome()

    def _round_trip(self, me: _Waiting, batch: list[_Waiting] | None) -> None:
        def settle(w: _Waiting, result: object, error: BaseException | None) -> None:
            w.result, w.error = result, error
            if w is not me:
                w.done.set()

        later: list[_Waiting] = []
        if batch is None and me.call is not None:
            # Alone: its own call, as begun.
            calls, sent = [me.call], [me]
        else:
            # Or planned (alone too, if it waited for a round trip that
            # ended before it queued: begun now).
            calls, sent, later = _plan(self._driver, batch or [me], settle, self._granted)
            if later:
                with self._lock:
                    self._queue.extendleft(reversed(later))
        if not calls:
            return
        try:
            try:
                replies: list[object] | None = (
                    [_send(self._client, self._driver, calls[0])]
                    if len(calls) == 1
                    else _send_many(self._client, self._driver, calls)
                )
                error = None
            except Exception as e:
                replies, error = None, e
            self._granted = _settle_all(self._driver, sent, replies, error, settle)
        except BaseException as e:  # interrupted: nobody of this round trip waits for ever
            for w in sent:
                if w.result is None and w.error is None:
                    settle(w, None, e)
            raise

    async def _decide_async(self, op: str, key: _Key, cost: int, now: float | None) -> _D:
        try:
            if self._busy:
                # A round trip is in flight: answered here (a lease, a cached
                # denial), or it waits for the next one, asking for no lease
                # meanwhile (the round trip's plan asks, for every call on
                # the key at once).
                d = self._driver.begin_local(op, key, cost, now)
                if d is not None:
                    return _t.cast(_D, d)
                w = _Waiting(op, key, cost, now, None)
                w.done = asyncio.get_running_loop().create_future()
                self._queue.append(w)
                return _t.cast(_D, await w.done)
            step = self._driver.begin(op, key, cost, now)
            if not isinstance(step, _RedisCall):
                return _t.cast(_D, step)
            self._busy = True
            try:
                try:
                    reply = await _within(_send_async(self._client, self._driver, step), self._timeout)
                except Exception as e:
                    kind = _kind(e)
                    if kind is None:
                        raise
                    return _t.cast(_D, self._driver.fail(step, kind, e))
                return _t.cast(_D, self._driver.finish(step, reply))
            finally:
                if self._queue:
                    # Those that came meanwhile go in the next round trip, in a
                    # task of its own (no caller carries the others').
                    self._drainer = asyncio.ensure_future(self._drain())
                else:
                    self._busy = False
        except BackendError:
            if self._local is None:
                raise
            return self._fallback(op, key, cost)

    async def _drain(self) -> None:
        def settle(w: _Waiting, result: object, error: BaseException | None) -> None:
            if not w.done.done():
                if error is None:
                    w.done.set_result(result)
                else:
                    w.done.set_exception(error)

        sent: list[_Waiting] = []
        try:
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_BATCH))]
                # A caller that stopped waiting (cancelled) needs no decision.
                calls, sent, later = _plan(
                    self._driver, [w for w in batch if not w.done.done()], settle, self._granted
                )
                self._queue.extendleft(reversed(later))
                if not calls:
                    continue
                try:
                    replies: list[object] | None = await _within(
                        _send_many_async(self._client, self._driver, calls), self._timeout
                    )
                    error = None
                except Exception as e:
                    replies, error = None, e
                self._granted = _settle_all(self._driver, sent, replies, error, settle)
                sent = []
        except BaseException as e:  # cancelled (the loop is closing): nobody waits for ever
            for w in [*sent, *self._queue]:
                settle(w, None, e if isinstance(e, Exception) else BackendError("the round trip was cancelled"))
            self._queue.clear()
            raise
        finally:
            self._busy = False
            self._drainer = None

    def _refund(self, key: _Key, tokens: int, now: float | None) -> None | Awaitable[None]:
        if now is None and self._driver.refund_lease(key, tokens):
            # Back into this process's lease: no round trip.
            return _Pending(_nothing()) if self._async else None
        call = self._driver.begin_refund(key, tokens, now)
        if self._async:
            return _Pending(self._refund_async(call))
        try:
            reply = _send(self._client, self._driver, call)
        except Exception as e:
            kind = _kind(e)
            if kind is None:
                raise
            self._driver.finish_refund(e, kind)
        self._driver.finish_refund(reply)
        return None

    async def _refund_async(self, call: _RedisCall) -> None:
        try:
            reply = await asyncio.wait_for(_send_async(self._client, self._driver, call), self._timeout)
        except Exception as e:
            kind = _kind(e)
            if kind is None:
                raise
            self._driver.finish_refund(e, kind)
        self._driver.finish_refund(reply)

    async def _reset_async(self, call: _RedisCall) -> None:
        try:
            reply = await asyncio.wait_for(_send_async(self._client, self._driver, call), self._timeout)
        except Exception as e:
            kind = _kind(e)
            if kind is None:
                raise
            self._driver.finish_reset(e, kind)
        self._driver.finish_reset(reply)

    def _many(self, requests: Iterable[_Request], now: float | None) -> list[_D] | Awaitable[list[_D]]:
        if self._local is not None and not isinstance(requests, (list, tuple)):
            requests = list(requests)  # the fallback may read them again
        if self._async:
            return _Pending(self._many_async(requests, now))
        try:
            calls = self._driver.begin_many(requests, now)
            if not calls or not isinstance(calls[0], _RedisCall):
                return _t.cast(list[_D], calls)
            try:
                replies = _send_many(self._client, self._driver, calls)
            except Exception as e:
                kind = _kind(e)
                if kind is None:
                    raise
                return _t.cast(list[_D], self._driver.finish_many(calls, e, kind))
            return _t.cast(list[_D], self._driver.finish_many(calls, replies))
        except BackendError:
            if self._local is None:
                raise
            return [_t.cast(_D, self._driver.fallback(d)) for d in _t.cast(_t.Any, self._local).allow_many(requests)]

    async def _many_async(self, requests: Iterable[_Request], now: float | None) -> list[_D]:
        try:
            calls = self._driver.begin_many(requests, now)
            if not calls or not isinstance(calls[0], _RedisCall):
                return _t.cast(list[_D], calls)
            try:
                replies = await asyncio.wait_for(_send_many_async(self._client, self._driver, calls), self._timeout)
            except Exception as e:
                kind = _kind(e)
                if kind is None:
                    raise
                return _t.cast(list[_D], self._driver.finish_many(calls, e, kind))
            return _t.cast(list[_D], self._driver.finish_many(calls, replies))
        except BackendError:
            if self._local is None:
                raise
            return [_t.cast(_D, self._driver.fallback(d)) for d in _t.cast(_t.Any, self._local).allow_many(requests)]

    async def _acquire_async(self, key: _Key, cost: int, timeout: float | None) -> _D:
        waited = 0.0
        while True:
            d = await self._decide_async("allow", key, cost, None)
            if d or (timeout is not None and waited + d.retry_after > timeout):
                return d
            await asyncio.sleep(d.retry_after)
            waited += d.retry_after

    def __repr__(self) -> str:
        """``RedisTokenBucket(token bucket 10 per 1s, prefix='rl:', client=blocking)``:
        the rules with their units, as the in-memory limiters print them."""
        mode = "asyncio" if self._async else "blocking"
        rules = self._driver.rules
        if isinstance(self, RedisLimiter):
            shown = "{" + ", ".join(f'"{n}": {r}' for n, r in zip(self._driver.names, rules)) + "}"
        else:
            shown = str(rules[0])
        return f"{type(self).__name__}({shown}, prefix={self.prefix!r}, client={mode})"


# The options every class takes, documented once here and on each class.
_OPTIONS_DOC = """
    ``client``: a ``redis.Redis`` / ``redis.RedisCluster`` (methods answer at
    once) or a ``redis.asyncio.Redis`` / ``redis.asyncio.RedisCluster``
    (methods are coroutines). ``prefix``: where the keys live (one per
    limiter; no braces). ``timeout``: seconds a call may take with an
    asyncio client (default 0.05); a blocking client's call cannot be
    interrupted from outside and is bounded by the client's own
    ``socket_timeout`` and retry policy: redis-py 8 retries 10 times with
    backoff by default, seconds on a stopped server, so pass
    ``socket_timeout=0.05, socket_connect_timeout=0.05,
    retry=Retry(NoBackoff(), 0)`` for one attempt of at most 50 ms (a client
    that cannot bound a call is reported on the ``ratomic.redis`` logger).
    ``on_error``: what a Redis failure answers —
    ``"raise"`` (:class:`BackendError`, the default), ``"allow"``,
    ``"deny"`` (with ``retry_after=deny_retry_after``), or an in-memory
    ratomic limiter of the same rules to decide locally. ``deny_cache``:
    keys whose Redis denial is answered locally until its ``retry_after``
    ends (0 turns it off). ``breaker_threshold`` failures in a row (default
    5), or failures in a row that took ``breaker_failure_time`` seconds in
    all (default 1.0; 0 turns this bound off), open the circuit breaker for
    ``breaker_cooldown`` seconds (``breaker_threshold=0`` turns it off).
    ``lease``: ``"off"`` (the default: every decision that is not a cached
    denial is a round trip), ``"auto"``, or the most tokens a lease takes
    (an int >= 1): a hot key's call then also takes a slice of the key's
    tokens from Redis, which this process grants in memory
    (``source == "lease"``) until spent or their time passes — exactly,
    fleet-wide; the price is tokens idle in leases (at most processes ×
    ``lease`` per key; see :meth:`close`). Token buckets only: ``"auto"``
    leases nothing for a window limit, an int is refused with one.
    ``lease_keys``: keys whose leases this process keeps (default 10,000).
"""


class _SingleRule(_RedisBase[_M, Decision]):
    """The header fields of the single-rule classes, as the in-memory ones'."""

    def headers(
        self, decision: Decision, *, name: str = "default", legacy: bool = False, draft: _Draft = "draft-11"
    ) -> list[tuple[str, str]]:
        """HTTP fields for ``decision`` (one this limiter answered), as
        :meth:`ratomic.TokenBucket.headers` gives them: ``RateLimit-Policy``
        and ``RateLimit`` (the limit named ``name``), ``Retry-After`` on a
        denial, and ``X-RateLimit-*`` with ``legacy``; the standard fields
        as ``draft`` writes them (``"draft-11"``, ``"draft-8"``,
        ``"draft-7"`` or ``"draft-6"``)."""
        return self._driver.headers(decision, name, legacy, draft=draft)

    def problem(self, decision: Decision, *, name: str = "default") -> str | None:
        """The RFC 9457 problem document (JSON) for a 429 answering
        ``decision``; None when it was allowed."""
        return self._driver.problem(decision, name)


class RedisTokenBucket(_SingleRule[_M]):
    """A token bucket (GCRA) per key, on Redis: ``capacity`` tokens,
    refilled at ``refill_per_sec``, or a rate string such as ``"10/s"``.
    Same arguments and answers as :class:`ratomic.TokenBucket`.
    """

    __doc__ = (__doc__ or "") + _OPTIONS_DOC

    @_t.overload
    def __init__(
        self: RedisTokenBucket[Sync],
        capacity: int | str,
        refill_per_sec: float | str | None = None,
        *,
        client: _SyncClient,
        **options: Unpack[_Options],
    ) -> None: ...
    @_t.overload
    def __init__(
        self: RedisTokenBucket[Async],
        capacity: int | str,
        refill_per_sec: float | str | None = None,
        *,
        client: _AsyncClient,
        **options: Unpack[_Options],
    ) -> None: ...
    def __init__(
        self,
        capacity: int | str,
        refill_per_sec: float | str | None = None,
        *,
        client: _t.Any,
        **options: Unpack[_Options],
    ) -> None:
        super().__init__(Rule.token_bucket(capacity, refill_per_sec), multi=False, client=client, **options)


class RedisFixedWindow(_SingleRule[_M]):
    """A fixed window per key, on Redis: ``limit`` calls per ``window_secs``
    seconds, or a rate string such as ``"100/min"``. Same arguments and
    answers as :class:`ratomic.FixedWindow`; windows start at multiples of
    the window on the server's clock (or on yours, with the ``*_at`` forms).
    """

    __doc__ = (__doc__ or "") + _OPTIONS_DOC

    @_t.overload
    def __init__(
        self: RedisFixedWindow[Sync],
        limit: int | str,
        window_secs: float | None = None,
        *,
        client: _SyncClient,
        **options: Unpack[_Options],
    ) -> None: ...
    @_t.overload
    def __init__(
        self: RedisFixedWindow[Async],
        limit: int | str,
        window_secs: float | None = None,
        *,
        client: _AsyncClient,
        **options: Unpack[_Options],
    ) -> None: ...
    def __init__(
        self,
        limit: int | str,
        window_secs: float | None = None,
        *,
        client: _t.Any,
        **options: Unpack[_Options],
    ) -> None:
        super().__init__(Rule.fixed_window(limit, window_secs), multi=False, client=client, **options)


class RedisSlidingWindow(_SingleRule[_M]):
    """A sliding window per key, on Redis: at most ``limit`` calls in any
    ``window_secs`` seconds (the two-window estimate), or a rate string such as
    ``"100/min"``. Same arguments and answers as :class:`ratomic.SlidingWindow`.
    """

    __doc__ = (__doc__ or "") + _OPTIONS_DOC

    @_t.overload
    def __init__(
        self: RedisSlidingWindow[Sync],
        limit: int | str,
        window_secs: float | None = None,
        *,
        client: _SyncClient,
        **options: Unpack[_Options],
    ) -> None: ...
    @_t.overload
    def __init__(
        self: RedisSlidingWindow[Async],
        limit: int | str,
        window_secs: float | None = None,
        *,
        client: _AsyncClient,
        **options: Unpack[_Options],
    ) -> None: ...
    def __init__(
        self,
        limit: int | str,
        window_secs: float | None = None,
        *,
        client: _t.Any,
        **options: Unpack[_Options],
    ) -> None:
        super().__init__(Rule.sliding_window(limit, window_secs), multi=False, client=client, **options)


_LimitMap = Mapping[str, _t.Union[str, Rule]]
_LimitPairs = Iterable[tuple[str, _t.Union[str, Rule]]]
_Limits = _t.Union[str, _LimitMap, _LimitPairs]


class RedisLimiter(_RedisBase[_M, MultiDecision]):
    """Several named limits on each key, all or nothing, on Redis (one hash
    per key, one slot in a cluster): ``limits`` is ``{name: rule}`` or
    ``(name, rule)`` pairs, a rule being a rate string (a token bucket,
    ``"10/s"``) or a :class:`ratomic.Rule` (``Rule.fixed_window(1000, 86400)``);
    or one string of rates as slowapi writes them, ``"10/second;1000/day"``
    (token buckets, each named by its rate string).
    Answers :class:`ratomic.MultiDecision`, as :class:`ratomic.Limiter`.
    """

    __doc__ = (__doc__ or "") + _OPTIONS_DOC

    # A mapping and pairs in separate overloads, not one union: mypy infers a
    # dict display of mixed values ("3/s" and a Rule) against a Mapping
    # alone, not against a union.
    @_t.overload
    def __init__(
        self: RedisLimiter[Sync], limits: str, *, client: _SyncClient, **options: Unpack[_Options]
    ) -> None: ...
    @_t.overload
    def __init__(
        self: RedisLimiter[Sync], limits: _LimitMap, *, client: _SyncClient, **options: Unpack[_Options]
    ) -> None: ...
    @_t.overload
    def __init__(
        self: RedisLimiter[Sync], limits: _LimitPairs, *, client: _SyncClient, **options: Unpack[_Options]
    ) -> None: ...
    @_t.overload
    def __init__(
        self: RedisLimiter[Async], limits: str, *, client: _AsyncClient, **options: Unpack[_Options]
    ) -> None: ...
    @_t.overload
    def __init__(
        self: RedisLimiter[Async], limits: _LimitMap, *, client: _AsyncClient, **options: Unpack[_Options]
    ) -> None: ...
    @_t.overload
    def __init__(
        self: RedisLimiter[Async], limits: _LimitPairs, *, client: _AsyncClient, **options: Unpack[_Options]
    ) -> None: ...
    def __init__(self, limits: _Limits, *, client: _t.Any, **options: Unpack[_Options]) -> None:
        super().__init__(limits, multi=True, client=client, **options)

    @property
    def names(self) -> tuple[str, ...]:
        """The limits' names, in order."""
        return tuple(self._driver.names)

    def headers(
        self, decision: MultiDecision, *, legacy: bool = False, draft: _Draft = "draft-11"
    ) -> list[tuple[str, str]]:
        """HTTP fields for ``decision``, as :meth:`ratomic.Limiter.headers`:
        one ``RateLimit-Policy``/``RateLimit`` item per limit the call was
        subject to (in ``draft``'s form)."""
        return self._driver.headers(decision, "default", legacy, draft=draft)

    def problem(self, decision: MultiDecision) -> str | None:
        """The RFC 9457 problem document naming the limits that denied;
        None when it was allowed."""
        return self._driver.problem(decision, "default")
