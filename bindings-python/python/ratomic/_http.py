"""What every ratomic HTTP middleware shares: choosing the client's key,
deciding, and the header fields and problem body of the answer (formatted
by ratomic's Rust core through each limiter's ``headers()``/``problem()``).

Frameworks are not imported here: ``ratomic.asgi``, ``ratomic.wsgi`` and
``ratomic.fastapi`` adapt this to their protocols.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Literal, Sequence, Union

from ratomic._ratomic import (
    PROBLEM_CONTENT_TYPE,
    ArgumentTypeError,
    BackendError,
    DirectTokenBucket,
    InvalidArgumentError,
    Keyed,
    LimitSet,
    Limiter,
    Quotas,
    RatomicError,
    Rule,
    Stack,
    _HttpFields,
)

if TYPE_CHECKING:
    from ratomic._ratomic import _Draft
    from ratomic.postgres import _PostgresBase
    from ratomic.redis import _RedisBase

#: Any limiter a middleware can use: in memory (or a shared file), a
#: ``Stack`` of them, or in a shared backend (``ratomic.redis``,
#: ``ratomic.postgres``; an asyncio client under ASGI and FastAPI, a
#: blocking one under WSGI).
AnyLimiter = Union[Keyed, Limiter, DirectTokenBucket, Stack, Quotas, "_RedisBase[Any, Any]", "_PostgresBase"]

#: A quota for a ``ratomic.Quotas``: a rate string or a ``Rule.token_bucket``.
QuotaLike = Union[str, Rule]

#: Which of a ``ratomic.Limiter``'s limits apply: a ``LimitSet`` (resolve
#: it once with ``limiter.limit_set(names)``), names, or None for all.
LimitsLike = Union[LimitSet, Sequence[str], None]

#: A request's key: ``str`` or ``bytes``.
Key = Union[str, bytes]

#: What a key function returns: the key (``None``: the request has none);
#: for a ``Stack``, either one key for every member or a sequence (list or
#: tuple) of exactly one key per member, in the stack's order.
KeyFunc = Callable[[Any], Union[Key, Sequence[Key], None]]

#: Which standard ``RateLimit*`` fields a middleware writes: ``True`` (draft
#: 11), a draft a limiter's ``headers(draft=...)`` takes (``"draft-8"`` has
#: draft 11's fields; ``"draft-7"`` and ``"draft-6"`` are the earlier forms
#: express-rate-limit writes), or ``False`` for none (``Retry-After`` on a
#: denial and ``X-RateLimit-*`` with ``legacy_headers`` stay).
StandardHeaders = Union[bool, "_Draft"]

# The names _Draft (in the extension's stub) allows, checked at set-up.
_DRAFTS = ("draft-11", "draft-8", "draft-7", "draft-6")

#: Where the middlewares report what a client is not told: a backend that
#: failed (Redis down), a request the limiter could not judge, a set-up
#: mistake. Each kind is logged at once, then at most once a minute with
#: the count since (a dead Redis must not write a line per request).
logger = logging.getLogger("ratomic.http")

#: Seconds between two log records of one kind of failure.
REPORT_INTERVAL = 60.0

# The bodies of the answers that are not a rate-limit denial: generic RFC
# 9457 documents, the same for every request. What went wrong (an address,
# an error's text, a key's length) goes to the log, never to the client.
_STATUS_TEXT = {400: "Bad Request", 500: "Internal Server Error", 503: "Service Unavailable"}
_DETAIL = {
    400: "This request cannot be rate limited.",
    500: "Rate limiting is misconfigured on this server.",
    503: "Rate limiting is unavailable; try again later.",
}


# Field names as ASGI writes them (lower case, bytes), made once.
_RAW_NAMES = {
    n: n.lower().encode("latin-1")
    for n in (
        "RateLimit-Policy",
        "RateLimit",
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
        "Retry-After",
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
        "Content-Type",
    )
}


def raw_headers(fields: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """``fields`` as an ASGI ``http.response.start`` carries them."""
    names = _RAW_NAMES
    return [(names.get(n) or n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in fields]


def _problem(status: int) -> str:
    body = {"type": "about:blank", "title": _STATUS_TEXT[status], "status": status, "detail": _DETAIL[status]}
    return json.dumps(body, separators=(",", ":"))


#: Where the decision is handed to the endpoint: ``scope["state"]`` under
#: this name (``request.state.rate_limit`` in Starlette and FastAPI).
STATE_KEY = "rate_limit"

#: Where the WSGI faces hand the decision to the app: ``environ`` under
#: this name (``request.environ`` in Flask, ``request.META`` in Django).
ENVIRON_KEY = "ratomic.rate_limit"


class Outcome:
    """A request's answer: allowed or not, the header fields every response
    carries (ASGI's lower-case bytes pairs from an async policy, WSGI's
    str pairs from a sync one), and when not allowed the problem body
    (JSON) and the status:
    429 (denied), 503 (the limiter's backend failed), 400 (a request the
    limiter cannot judge) or 500 (a set-up mistake: no client address).
    ``decision`` is the limiter's (None when it could not decide);
    ``charge`` is what a refund gives back (None when nothing is to be)."""

    __slots__ = ("allowed", "headers", "problem", "status", "decision", "charge")

    def __init__(
        self,
        allowed: bool,
        headers: list[Any],
        problem: str | None,
        status: int = 429,
        decision: Any = None,
        charge: tuple[Any, int, Any] | None = None,
    ) -> None:
        self.allowed = allowed
        self.headers = headers
        self.problem = problem
        self.status = status
        self.decision = decision
        self.charge = charge

    @property
    def problem_headers(self) -> list[tuple[str, str]]:
        """The refusal's fields: the rate-limit ones plus the body's content type."""
        return [*self.headers, ("Content-Type", PROBLEM_CONTENT_TYPE)]

    @property
    def status_line(self) -> str:
        """``"429 Too Many Requests"`` and the others, for WSGI."""
        return f"{self.status} {_STATUS_TEXT.get(self.status, 'Too Many Requests')}"


class _Reporter:
    """Logs each kind of failure at once, then at most once per
    :data:`REPORT_INTERVAL` with how many more there were since."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def report(self, kind: str, level: int, message: str, exc: BaseException | None = None) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < REPORT_INTERVAL:
                self._since[kind] = self._since.get(kind, 0) + 1
                return
            self._last[kind] = now
            more = self._since.pop(kind, 0)
        if more:
            message += f" ({more} more since the last report)"
        logger.log(level, message, exc_info=exc)

    def reported(self, kind: str) -> bool:
        """Whether ``kind`` has been logged (read without the lock)."""
        return kind in self._last

    def once(self, kind: str, level: int, message: str) -> None:
        """Logs ``kind`` the first time only (a set-up mistake)."""
        if kind in self._last:
            return  # the common case once reported: no lock
        with self._lock:
            if kind in self._last:
                return
            self._last[kind] = 0.0
        logger.log(level, message)


def client_key(peer: str | None, forwarded_for: str | None, trusted_proxies: int, ipv6_prefix: int) -> str | None:
    """The client's key: its IP address (an IPv6 address grouped by
    ``ipv6_prefix`` bits, as one client commonly holds a /64).

    ``X-Forwarded-For`` is read only when ``trusted_proxies`` > 0: each proxy
    appends the address it saw, so with ``n`` trusted proxies in front the
    client is the ``n``-th address from the right. Anything left of it was
    written by the client and is ignored (it is spoofable).
    """
    host = peer
    if trusted_proxies > 0 and forwarded_for:
        hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
        if len(hops) >= trusted_proxies:
            host = _without_port(hops[-trusted_proxies])
    if host is None:
        return None
    if ":" not in host:
        # Not IPv6: an IPv4 address ipaddress would give back as written
        # (it takes no other spelling of one), or a name kept as is. The
        # common case, without parsing.
        return host
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host  # a Unix socket path or a test client's name: use as is
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        net = ipaddress.ip_network(f"{ip}/{ipv6_prefix}", strict=False)
        return f"{net.network_address}/{ipv6_prefix}"
    return str(ip)


def _without_port(hop: str) -> str:
    """A hop's address without the port some proxies append
    (``203.0.113.7:41234``, ``[2001:db8::1]:41234``): one client is one
    key, whatever port its connection came from."""
    if hop.startswith("["):
        end = hop.find("]")
        return hop[1:end] if end > 0 else hop
    host, colon, port = hop.rpartition(":")
    # One colon: IPv4 (or a name) and a port; more is a bare IPv6 address.
    if colon and ":" not in host and port.isdigit():
        return host
    return hop


def forwarded_for(lines: Sequence[str | bytes]) -> str | None:
    """The ``X-Forwarded-For`` field of a request that carries it on
    several field lines, combined as RFC 9110 §5.3 says (in order, joined
    by commas): a proxy that appends its own line (HAProxy's ``option
    forwardfor``) adds the last hop, and only the whole list says which
    hop the trusted proxies wrote."""
    if not lines:
        return None
    return ", ".join(v.decode("latin-1") if isinstance(v, bytes) else v for v in lines)


#: The shared backends' modules: (module, base class, multi-limit class,
#: the source of a decision the backend itself gave, the asyncio client's
#: name, the blocking client's name).
_BACKENDS = (
    ("ratomic.redis", "_RedisBase", "RedisLimiter", "redis", "a redis.asyncio client", "a blocking redis.Redis client"),
    (
        "ratomic.postgres",
        "_PostgresBase",
        "PostgresLimiter",
        "postgres",
        "a psycopg.AsyncConnection or psycopg_pool.AsyncConnectionPool",
        "a blocking psycopg.Connection or psycopg_pool.ConnectionPool",
    ),
)


class _Remote:
    """A limiter whose state is in a shared backend (``ratomic.redis``,
    ``ratomic.postgres``): the same calls as an in-memory one, awaited on an
    asyncio client, its decisions with a ``source``."""

    __slots__ = ("limiter", "multi", "source", "async_client", "sync_client", "name")

    def __init__(self, limiter: Any, multi: bool, source: str, async_client: str, sync_client: str) -> None:
        self.limiter = limiter
        self.multi = multi
        #: The source of a decision the backend gave (one a refund can go back to).
        self.source = source
        self.async_client = async_client
        self.sync_client = sync_client
        self.name = type(limiter).__module__


def _remote_limiter(limiter: object) -> _Remote | None:
    """``limiter`` as a :class:`_Remote` if it is one of ``ratomic.redis``'s
    or ``ratomic.postgres``'s (a module is loaded if one of its limiters
    was ever made; this one never imports them, nor their clients)."""
    for module_name, base, multi, source, async_client, sync_client in _BACKENDS:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(limiter, getattr(module, base)):
            return _Remote(limiter, isinstance(limiter, getattr(module, multi)), source, async_client, sync_client)
    return None


def _check_callable(param: str, value: Any) -> None:
    if value is not None and not callable(value):
        raise ArgumentTypeError(f"{param} must be a function of the request or None, not {type(value).__name__}: {value!r}")


def _check_bool(param: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{param} must be True or False, not {type(value).__name__}: {value!r}")


def default_was_successful(status: int) -> bool:
    """Whether a response counts as successful by default: a status below
    400 (as express-rate-limit and Flask-Limiter count it)."""
    return status < 400


class Policy:
    """A limiter and how a middleware applies it to requests. ``server``
    says how the middleware runs: ``"async"`` (ASGI, FastAPI: a Redis
    limiter must have an asyncio client, whose decisions are awaited) or
    ``"sync"`` (WSGI: a blocking client).

    ``skip(request)`` true: the request is neither counted nor limited.
    ``quota`` (a ``ratomic.Quotas``'s, required with one) and ``limits``
    (which of a ``ratomic.Limiter``'s limits apply) are fixed or functions
    of the request. With ``skip_successful_requests`` or
    ``skip_failed_requests``, a request is charged on the way in and given
    back (the limiter's ``refund``, exactly its cost) when its response's
    status says so: ``request_was_successful(status)``, by default a
    status below 400; a response that never started (the app raised) is a
    failure. ``enabled=False`` makes the face a pass-through (it can be
    switched at run time)."""

    def __init__(
        self,
        limiter: AnyLimiter,
        *,
        server: Literal["sync", "async"],
        face: str = "middleware",
        key: KeyFunc | None = None,
        cost: int | Callable[[Any], int] = 1,
        name: str = "default",
        standard_headers: StandardHeaders = True,
        legacy_headers: bool = False,
        trusted_proxies: int = 0,
        ipv6_prefix: int = 64,
        on_error: Literal["deny", "allow"] = "deny",
        skip: Callable[[Any], bool] | None = None,
        enabled: bool = True,
        quota: QuotaLike | Callable[[Any], QuotaLike] | None = None,
        limits: LimitsLike | Callable[[Any], LimitsLike] = None,
        skip_successful_requests: bool = False,
        skip_failed_requests: bool = False,
        request_was_successful: Callable[[int], bool] | None = None,
    ) -> None:
        remote = _remote_limiter(limiter)
        if remote is None and not isinstance(limiter, (Keyed, Limiter, DirectTokenBucket, Stack, Quotas)):
            raise ArgumentTypeError(
                f"limiter must be a ratomic TokenBucket, FixedWindow, SlidingWindow, Limiter, "
                f"DirectTokenBucket, Stack or Quotas, or one of ratomic.redis or ratomic.postgres, "
                f"not {type(limiter).__name__}"
            )
        if remote is not None and remote.limiter._async != (server == "async"):
            raise ArgumentTypeError(
                f"an ASGI app needs a {remote.name} limiter on {remote.async_client} (a blocking call would "
                "stall the event loop)"
                if server == "async"
                else f"a WSGI app needs a {remote.name} limiter on {remote.sync_client}, not an asyncio one"
            )
        for param, value, top in (("trusted_proxies", trusted_proxies, None), ("ipv6_prefix", ipv6_prefix, 128)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ArgumentTypeError(f"{param} must be an int, not {type(value).__name__}: {value!r}")
            if value < 0 or (top is not None and value > top):
                accepted = "a whole number >= 0" if top is None else f"a whole number from 0 to {top}"
                raise InvalidArgumentError(f"invalid {param}: {value!r} (must be {accepted})")
        if on_error not in ("deny", "allow"):
            raise InvalidArgumentError(f'on_error must be "deny" or "allow", not {on_error!r}')
        # `is`, not `==`: 1 and 0 are not booleans here.
        if standard_headers is not True and standard_headers is not False and standard_headers not in _DRAFTS:
            raise InvalidArgumentError(
                'standard_headers must be True (draft-11), False, "draft-11", "draft-8", "draft-7" or "draft-6", '
                f"not {standard_headers!r}"
            )
        if isinstance(cost, bool) or not (callable(cost) or isinstance(cost, int)):
            raise ArgumentTypeError(f"cost must be a whole number or a function of the request, not {cost!r}")
        if not callable(cost) and cost < 0:
            raise InvalidArgumentError(f"invalid cost: {cost!r} (must be a whole number >= 0)")
        for fn_param, fn in (("key", key), ("skip", skip), ("request_was_successful", request_was_successful)):
            _check_callable(fn_param, fn)
        for param, flag in (
            ("enabled", enabled),
            ("legacy_headers", legacy_headers),
            ("skip_successful_requests", skip_successful_requests),
            ("skip_failed_requests", skip_failed_requests),
        ):
            _check_bool(param, flag)
        if isinstance(limiter, Quotas):
            if quota is None:
                raise ArgumentTypeError(
                    "a ratomic.Quotas takes its quota with each call: pass quota= a rate string, a "
                    "Rule.token_bucket(...), or a function of the request returning one (say, the client's plan)"
                )
        elif quota is not None:
            raise ArgumentTypeError(
                f"quota= is for a ratomic.Quotas (a quota per call), not a {type(limiter).__name__}, whose rule is "
                "fixed: drop quota=, or pass ratomic.Quotas() with quota= a function of the request"
            )
        if limits is not None and not isinstance(limiter, Limiter):
            raise ArgumentTypeError(
                f"limits= chooses among a ratomic.Limiter's limits, and a {type(limiter).__name__} has none to "
                "choose: drop limits=, or pass a ratomic.Limiter of named limits"
            )
        #: A Stack's member names (its calls take one key per member), else None.
        self.stack_names: tuple[str, ...] | None = None
        #: The fixed quota or limit set, or the function choosing one per request.
        self.select_fn: Callable[[Any], Any] | None = None
        self.selection: Any = None
        fields: Callable[[Any, Any], list[tuple[str, str]]]
        problem: Callable[[Any, Any], str | None]
        #: Whether fields are ASGI's (bytes, lower-case names) or WSGI's (str).
        self.raw = raw = server == "async"
        standard = standard_headers is not False
        allow: Callable[[Any, int, Any], Any]
        refund: Callable[[Any, int, Any], Any]
        lim: Any = limiter
        draft_: _Draft = "draft-11" if isinstance(standard_headers, bool) else standard_headers
        legacy = legacy_headers
        # Named limits (the decisions carry entries), else one rule whose
        # name is checked once, at set-up, not on the first request.
        if isinstance(limiter, Stack):
            self.multi = True
            self.stack_names = limiter.names
            # Formatted once, at set-up: a member with no single header
            # policy (a Limiter) or a name no header can carry is an error
            # naming it now, not on the first request.
            limiter.headers(limiter.peek([b""] * len(limiter), 0))
            stack_keys = self._stack_keys
            allow = lambda key, cost, sel: lim.allow(stack_keys(key), cost)  # noqa: E731
            refund = lambda key, cost, sel: lim.refund(stack_keys(key), cost)  # noqa: E731
        elif remote is not None:
            self.multi = remote.multi
            # Each limit's name, or the one rule's: one no header can carry
            # is an error now, not on every request.
            for n in remote.limiter.names if self.multi else (name,):
                remote.limiter._driver.check_name(n)
            allow = lambda key, cost, sel: lim.allow(_one_key(key), cost)  # noqa: E731
            refund = lambda key, cost, sel: lim.refund(key, cost)  # noqa: E731
        elif isinstance(limiter, DirectTokenBucket):
            self.multi = False
            limiter.headers(limiter.peek(), name=name)
            allow = lambda key, cost, sel: lim.allow(cost)  # noqa: E731
            refund = lambda key, cost, sel: lim.refund(cost)  # noqa: E731
        elif isinstance(limiter, Keyed):
            self.multi = False
            limiter.headers(limiter.peek(b"", 0), name=name)
            allow = lambda key, cost, sel: lim.allow(_one_key(key), cost)  # noqa: E731
            refund = lambda key, cost, sel: lim.refund(key, cost)  # noqa: E731
        elif isinstance(limiter, Quotas):
            self.multi = False
            if callable(quota):
                self.select_fn = quota
                limiter.headers(limiter.peek(b"", "1/s", 0), "1/s", name=name)  # the name, checked now
            else:
                if not isinstance(quota, (str, Rule)):
                    raise ArgumentTypeError(
                        f"quota must be a rate string, a Rule.token_bucket(...) or a function of the request, "
                        f"not {type(quota).__name__}: {quota!r}"
                    )
                self.selection = quota
                limiter.headers(limiter.peek(b"", quota, 0), quota, name=name)  # the quota and name, checked now
            allow = lambda key, cost, sel: lim.allow(_one_key(key), sel, cost)  # noqa: E731
            refund = lambda key, cost, sel: lim.refund(key, sel, cost)  # noqa: E731
        else:
            assert isinstance(limiter, Limiter)
            self.multi = True
            limiter.headers(limiter.peek(b"", 0))  # every limit's name, checked now
            if callable(limits):
                self.select_fn = limits
            elif limits is not None:
                # Names resolved once, here (an unknown one is an error now).
                self.selection = limits if isinstance(limits, LimitSet) else limiter.limit_set(list(limits))
            allow = lambda key, cost, sel: lim.allow(_one_key(key), cost, limits=sel)  # noqa: E731
            refund = lambda key, cost, sel: lim.refund(key, cost, limits=sel)  # noqa: E731
        if isinstance(limiter, Quotas):
            fields = lambda d, sel: lim.headers(d, sel, name=name, legacy=legacy, draft=draft_)  # noqa: E731
            problem = lambda d, sel: lim.problem(d, sel, name=name)  # noqa: E731
        elif self.multi:
            fields = lambda d, sel: lim.headers(d, legacy=legacy, draft=draft_)  # noqa: E731
            problem = lambda d, sel: lim.problem(d)  # noqa: E731
        else:
            fields = lambda d, sel: lim.headers(d, name=name, legacy=legacy, draft=draft_)  # noqa: E731
            problem = lambda d, sel: lim.problem(d, name=name)  # noqa: E731
        self._allow_call = allow
        self._refund_call = refund
        self._fields = fields
        self._problem = problem
        # Limiters whose header policies are fixed get them formatted once,
        # in the server's form, by one native call per response.
        self._native: Any = None
        if isinstance(limiter, (Keyed, DirectTokenBucket, Limiter, Stack)):
            self._native = _HttpFields(limiter, name=name, draft=draft_, legacy=legacy, standard=standard, asgi=raw)
        self._retry_1: list[Any] = [(b"retry-after", b"1")] if raw else [("Retry-After", "1")]
        #: Whether decisions are awaited (a Redis or PostgreSQL limiter on an asyncio client).
        self.awaits = remote is not None and remote.limiter._async
        #: Whether a refund must check who answered (the backend, or its fallback).
        self.remote = remote is not None
        #: The source of a decision the backend itself gave (None: in memory).
        self.remote_source = None if remote is None else remote.source
        #: Whether a request needs no key (one bucket for everyone).
        self.keyless = isinstance(limiter, DirectTokenBucket)
        self.limiter = limiter
        self.key = key
        self.cost: Any = cost
        self.cost_fn = callable(cost)
        self.name = name
        #: Whether responses carry the standard fields, in which draft's form.
        self.standard = standard_headers is not False
        self.draft: _Draft = draft_
        self.legacy = legacy_headers
        self.trusted_proxies = trusted_proxies
        self.ipv6_prefix = ipv6_prefix
        self.on_error = on_error
        self.skip = skip
        #: False: the face passes every request through untouched.
        self.enabled = enabled
        self.skip_successful = skip_successful_requests
        self.skip_failed = skip_failed_requests
        #: Whether a response's status can give a request's cost back.
        self.refunds = skip_successful_requests or skip_failed_requests
        #: Whether an outcome keeps what it charged (for a refund, or for a
        #: face that decides several limits all or nothing).
        self.keep_charge = self.refunds
        self.was_successful = request_was_successful or default_was_successful
        #: What the middleware is, in its log records (``ratomic.asgi`` ...).
        self.face = face
        self.reporter = _Reporter()

    def default_key(self, peer: str | None, forwarded_for: str | None, where: str = "the peer address") -> str | None:
        """The client's key (see :func:`client_key`). A request without a
        peer address, or with an ``X-Forwarded-For`` the middleware is not
        told to trust, is a set-up mistake: logged once, naming the fix."""
        if peer is None:
            self.reporter.once(
                "no-peer",
                logging.ERROR,
                f"{self.face}: a request has no client address ({where} is missing: served over a Unix "
                "socket?), so the default key cannot be made and such requests are refused with a 500. "
                "Serve over TCP, or pass key= a function of the request (a user id, an API key).",
            )
        elif forwarded_for is not None and self.trusted_proxies == 0:
            self.reporter.once(
                "untrusted-forwarded-for",
                logging.WARNING,
                f"{self.face}: requests carry X-Forwarded-For but trusted_proxies=0, so each client is keyed "
                f"by the connection's address ({peer} here): behind a proxy, every client shares the proxy's "
                "one bucket. Behind N proxies you run, pass trusted_proxies=N; if clients reach the app "
                "directly, leave it at 0 (the header is then whatever they wrote).",
            )
        return client_key(peer, forwarded_for, self.trusted_proxies, self.ipv6_prefix)

    @property
    def reads_forwarded_for(self) -> bool:
        """Whether the default key needs the request's ``X-Forwarded-For``:
        behind trusted proxies, or until an untrusted one has been reported
        (after that, a face need not look for it)."""
        return self.trusted_proxies > 0 or not self.reporter.reported("untrusted-forwarded-for")

    def decide(self, request: Any, key: Key | Sequence[Key] | None) -> Outcome:
        """Decides a request whose key is ``key`` (``request`` is what the
        cost, quota and limits functions are given). Not for a limiter
        whose decisions are awaited: see :meth:`decide_async`."""
        if key is None and not self.keyless:
            return self._keyless()
        try:
            cost = self.cost(request) if self.cost_fn else self.cost
            sel = self.select_fn(request) if self.select_fn is not None else self.selection
            d = self._allow_call(key, cost, sel)
            return self._outcome(d, key, cost, sel)
        except _UNJUDGED as e:
            return self._unjudged(e)

    async def decide_async(self, request: Any, key: Key | Sequence[Key] | None) -> Outcome:
        """:meth:`decide`, awaiting the decision of a Redis limiter on an
        asyncio client (a Redis failure under its ``on_error="raise"`` is a
        failure of the backend: see :meth:`_unjudged`)."""
        if key is None and not self.keyless:
            return self._keyless()
        try:
            cost = self.cost(request) if self.cost_fn else self.cost
            sel = self.select_fn(request) if self.select_fn is not None else self.selection
            d = await self._allow_call(key, cost, sel)
            return self._outcome(d, key, cost, sel)
        except _UNJUDGED as e:
            return self._unjudged(e)

    def refund_for(self, status: int) -> bool:
        """Whether a response of ``status`` gives its request's cost back."""
        if self.was_successful(status):
            return self.skip_successful
        return self.skip_failed

    def give_back(self, outcome: Outcome) -> Any:
        """Refunds what ``outcome`` charged (an awaitable for a Redis
        limiter on an asyncio client: await it with :meth:`give_back_async`).
        A failure is logged, never raised: the response is on its way."""
        charge = outcome.charge
        if charge is None:
            return None
        outcome.charge = None  # once
        try:
            return self._refund_call(*charge)
        except Exception as e:  # noqa: BLE001 - reported, and the response goes on
            self._refund_failed(e)
            return None

    async def give_back_async(self, outcome: Outcome) -> None:
        """:meth:`give_back`, awaited when the limiter's calls are."""
        pending = self.give_back(outcome)
        if pending is not None:
            try:
                await pending
            except Exception as e:  # noqa: BLE001 - reported, and the response goes on
                self._refund_failed(e)

    def _refund_failed(self, e: BaseException) -> None:
        self.reporter.report(
            "refund",
            logging.ERROR,
            f"{self.face}: a request's cost could not be given back (the client keeps it spent): {e}",
            e,
        )

    def _stack_keys(self, key: Key | Sequence[Key]) -> Sequence[Key]:
        """A Stack call's keys: one key for every member, or one per member
        as given (a direct bucket member ignores its key)."""
        names = self.stack_names
        assert names is not None
        if isinstance(key, (str, bytes)):
            return [key] * len(names)
        if not isinstance(key, (list, tuple)):
            raise TypeError(f"a key function must return a key or a list of keys, not {type(key).__name__}")
        if len(key) != len(names):
            raise ValueError(
                f"the key function returned {len(key)} keys for a stack of {len(names)} members "
                f"({', '.join(names)}): a stack takes one key, or one key per member"
            )
        return key

    def _outcome(self, d: Any, key: Any, cost: int, sel: Any) -> Outcome:
        native = self._native
        if native is not None:
            if d:
                if self.keep_charge and cost:
                    return Outcome(True, native.fields(d), None, 200, d, (key, cost, sel))
                return Outcome(True, native.fields(d), None, 200, d)
            return Outcome(False, native.fields(d), native.problem(d), 429, d)
        fields = self._fields(d, sel)
        if not self.standard:
            # Every standard field's name starts so; Retry-After and
            # X-RateLimit-* stay (as express-rate-limit's standardHeaders: false).
            fields = [f for f in fields if not f[0].startswith("RateLimit")]
        if self.raw:
            fields = raw_headers(fields)
        if self.remote:
            source = d.source
            if source in ("policy", "fallback"):
                # A Redis or PostgreSQL limiter answered by its own on_error: its backend is failing.
                self.reporter.report(
                    "backend-policy",
                    logging.WARNING,
                    f"{self.face}: the limiter's backend is failing; its own on_error answers (source={source!r})",
                )
            if d and self.keep_charge and cost and source == self.remote_source:
                return Outcome(True, fields, None, 200, d, (key, cost, sel))
        elif d:
            if self.keep_charge and cost:
                return Outcome(True, fields, None, 200, d, (key, cost, sel))
            return Outcome(True, fields, None, 200, d)
        if d:
            return Outcome(True, fields, None, 200, d)
        return Outcome(False, fields, self._problem(d, sel), 429, d)

    def _keyless(self) -> Outcome:
        if self.key is None:
            # The default key found no address: logged once by default_key.
            return Outcome(False, [], _problem(500), 500)
        self.reporter.report(
            "no-key", logging.WARNING, f"{self.face}: the key function returned None: the request is refused (400)"
        )
        return Outcome(False, [], _problem(400), 400)

    def _unjudged(self, e: BaseException) -> Outcome:
        """A request the limiter could not decide. A failure of its backend
        (Redis down under the limiter's ``on_error="raise"``) is answered
        as ``on_error`` says: ``"deny"``, a 503 (fail closed, the default)
        or ``"allow"`` (fail open). Anything else is about the request (a
        key too long, a cost above the limit, a stack's keys not one per
        member): a 400 whatever ``on_error`` says, as letting it through
        would let any client skip the limit by sending, say, a long key.
        The client sees a generic problem document; the log gets the rest."""
        if isinstance(e, BackendError):
            self.reporter.report(
                "backend",
                logging.ERROR,
                f"{self.face}: the rate limiter's backend failed; requests are "
                + ("let through unchecked (on_error='allow')" if self.on_error == "allow" else "refused with a 503")
                + f": {e}",
                e,
            )
            if self.on_error == "allow":
                return Outcome(True, [], None, 200)
            return Outcome(False, self._retry_1, _problem(503), 503)
        self.reporter.report(
            "request", logging.WARNING, f"{self.face}: a request cannot be rate limited and is refused (400): {e}"
        )
        return Outcome(False, [], _problem(400), 400)


def _one_key(key: Any) -> Key:
    """A single-key limiter's key: a list is for a Stack (said plainly, in
    the log, rather than as the limiter's key type error)."""
    if key.__class__ is str or isinstance(key, (str, bytes)):
        return key
    raise TypeError(f"a key must be str or bytes (a list of keys is for a Stack), not {type(key).__name__}")


# What a limiter raises for a request it cannot judge (a key too long, a
# cost above the limit, Redis failing under on_error="raise": BackendError).
_UNJUDGED = (RatomicError, ValueError, TypeError)


class _Switchable:
    """The ``enabled`` switch every middleware and dependency shares: it
    reads and writes its :class:`Policy`'s."""

    policy: Policy

    @property
    def enabled(self) -> bool:
        """False: every request passes through untouched, unlimited."""
        return self.policy.enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        _check_bool("enabled", value)
        self.policy.enabled = value
