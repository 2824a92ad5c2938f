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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence, Union

from ratomic._ratomic import (
    PROBLEM_CONTENT_TYPE,
    ArgumentTypeError,
    BackendError,
    DirectTokenBucket,
    InvalidArgumentError,
    Keyed,
    Limiter,
    RatomicError,
    Stack,
)

if TYPE_CHECKING:
    from ratomic._ratomic import _Draft
    from ratomic.redis import _RedisBase

#: Any limiter a middleware can use: in memory (or a shared file), a
#: ``Stack`` of them, or on Redis (``ratomic.redis``; an asyncio client
#: under ASGI and FastAPI, a blocking one under WSGI).
AnyLimiter = Union[Keyed, Limiter, DirectTokenBucket, Stack, "_RedisBase[Any, Any]"]

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


def _problem(status: int) -> str:
    body = {"type": "about:blank", "title": _STATUS_TEXT[status], "status": status, "detail": _DETAIL[status]}
    return json.dumps(body, separators=(",", ":"))


@dataclass(frozen=True)
class Outcome:
    """A request's answer: allowed or not, the header fields every response
    carries, and when not allowed the problem body (JSON) and the status:
    429 (denied), 503 (the limiter's backend failed), 400 (a request the
    limiter cannot judge) or 500 (a set-up mistake: no client address)."""

    allowed: bool
    headers: list[tuple[str, str]]
    problem: str | None
    status: int = 429

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


def _redis_limiter(limiter: object) -> Any:
    """``limiter`` if it is one of ``ratomic.redis``'s (the module is loaded
    if one was ever made; this one never imports it, nor redis-py)."""
    module = sys.modules.get("ratomic.redis")
    return limiter if module is not None and isinstance(limiter, module._RedisBase) else None


class Policy:
    """A limiter and how a middleware applies it to requests. ``server``
    says how the middleware runs: ``"async"`` (ASGI, FastAPI: a Redis
    limiter must have an asyncio client, whose decisions are awaited) or
    ``"sync"`` (WSGI: a blocking client)."""

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
    ) -> None:
        redis = _redis_limiter(limiter)
        if redis is None and not isinstance(limiter, (Keyed, Limiter, DirectTokenBucket, Stack)):
            raise ArgumentTypeError(
                f"limiter must be a ratomic TokenBucket, FixedWindow, SlidingWindow, Limiter, "
                f"DirectTokenBucket or Stack, or one of ratomic.redis, not {type(limiter).__name__}"
            )
        if redis is not None and redis._async != (server == "async"):
            raise ArgumentTypeError(
                "an ASGI app needs a Redis limiter on a redis.asyncio client (a blocking call would stall "
                "the event loop)"
                if server == "async"
                else "a WSGI app needs a Redis limiter on a blocking redis.Redis client, not an asyncio one"
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
        #: A Stack's member names (its calls take one key per member), else None.
        self.stack_names: tuple[str, ...] | None = None
        # Named limits (the decisions carry entries), else one rule whose
        # name is checked once, at set-up, not on the first request.
        if isinstance(limiter, Stack):
            self.multi = True
            self.stack_names = limiter.names
            # Formatted once, at set-up: a member with no single header
            # policy (a Limiter) or a name no header can carry is an error
            # naming it now, not on the first request.
            limiter.headers(limiter.peek([b""] * len(limiter), 0))
        elif redis is not None:
            self.multi = isinstance(redis, sys.modules["ratomic.redis"].RedisLimiter)
            # Each limit's name, or the one rule's: one no header can carry
            # is an error now, not on every request.
            for n in redis.names if self.multi else (name,):
                redis._driver.check_name(n)
        elif isinstance(limiter, DirectTokenBucket):
            self.multi = False
            limiter.headers(limiter.peek(), name=name)
        elif isinstance(limiter, Keyed):
            self.multi = False
            limiter.headers(limiter.peek(b"", 0), name=name)
        else:
            self.multi = True
            if isinstance(limiter, Limiter):
                limiter.headers(limiter.peek(b"", 0))  # every limit's name, checked now
        #: Whether decisions are awaited (a Redis limiter on an asyncio client).
        self.awaits = redis is not None and redis._async
        self.limiter = limiter
        self.key = key
        self.cost = cost
        self.name = name
        #: Whether responses carry the standard fields, in which draft's form.
        self.standard = standard_headers is not False
        self.draft: _Draft = "draft-11" if isinstance(standard_headers, bool) else standard_headers
        self.legacy = legacy_headers
        self.trusted_proxies = trusted_proxies
        self.ipv6_prefix = ipv6_prefix
        self.on_error = on_error
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

    def decide(self, request: Any, key: Key | Sequence[Key] | None) -> Outcome:
        """Decides a request whose key is ``key`` (``request`` is what the
        cost function is given). Not for a limiter whose decisions are
        awaited: see :meth:`decide_async`."""
        if key is None and not isinstance(self.limiter, DirectTokenBucket):
            return self._keyless()
        try:
            return self._outcome(self._allow(request, key))
        except _UNJUDGED as e:
            return self._unjudged(e)

    async def decide_async(self, request: Any, key: Key | Sequence[Key] | None) -> Outcome:
        """:meth:`decide`, awaiting the decision of a Redis limiter on an
        asyncio client (a Redis failure under its ``on_error="raise"`` is a
        failure of the backend: see :meth:`_unjudged`)."""
        if key is None and not isinstance(self.limiter, DirectTokenBucket):
            return self._keyless()
        try:
            return self._outcome(await self._allow(request, key))
        except _UNJUDGED as e:
            return self._unjudged(e)

    def _allow(self, request: Any, key: Key | Sequence[Key] | None) -> Any:
        limiter = self.limiter
        cost = self.cost(request) if callable(self.cost) else self.cost
        if isinstance(limiter, DirectTokenBucket):
            return limiter.allow(cost)
        assert key is not None, "a request without a key is answered before it is decided"
        if isinstance(limiter, Stack):
            return limiter.allow(self._stack_keys(key), cost)
        if not isinstance(key, (str, bytes)):
            raise TypeError(f"a key must be str or bytes (a list of keys is for a Stack), not {type(key).__name__}")
        return limiter.allow(key, cost)

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

    def _outcome(self, d: Any) -> Outcome:
        limiter: Any = self.limiter
        if self.multi:
            fields, problem = limiter.headers(d, legacy=self.legacy, draft=self.draft), limiter.problem(d)
        else:
            fields = limiter.headers(d, name=self.name, legacy=self.legacy, draft=self.draft)
            problem = limiter.problem(d, name=self.name)
        if not self.standard:
            # Every standard field's name starts so; Retry-After and
            # X-RateLimit-* stay (as express-rate-limit's standardHeaders: false).
            fields = [f for f in fields if not f[0].startswith("RateLimit")]
        source = getattr(d, "source", None)
        if source in ("policy", "fallback"):
            # A Redis limiter answered by its own on_error: Redis is failing.
            self.reporter.report(
                "backend-policy",
                logging.WARNING,
                f"{self.face}: the limiter's backend is failing; its own on_error answers (source={source!r})",
            )
        return Outcome(bool(d), fields, problem)

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
                return Outcome(True, [], None)
            return Outcome(False, [("Retry-After", "1")], _problem(503), 503)
        self.reporter.report(
            "request", logging.WARNING, f"{self.face}: a request cannot be rate limited and is refused (400): {e}"
        )
        return Outcome(False, [], _problem(400), 400)


# What a limiter raises for a request it cannot judge (a key too long, a
# cost above the limit, Redis failing under on_error="raise": BackendError).
_UNJUDGED = (RatomicError, ValueError, TypeError)
