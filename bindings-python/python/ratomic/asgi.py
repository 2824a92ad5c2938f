"""Rate limiting for any ASGI app (Starlette, FastAPI, Litestar, ...), with
the IETF ``RateLimit`` header fields on every response and an RFC 9457
problem body on each 429. Pure ASGI: no framework is imported.

>>> from ratomic import TokenBucket
>>> from ratomic.asgi import RateLimitMiddleware
>>> async def app(scope, receive, send): ...
>>> app = RateLimitMiddleware(app, TokenBucket("100/min"))  # per client address
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, MutableMapping

from ratomic import _http
from ratomic._http import AnyLimiter, KeyFunc, Policy, StandardHeaders

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["RateLimitMiddleware", "client_key"]


def client_key(scope: Scope, *, trusted_proxies: int = 0, ipv6_prefix: int = 64) -> str | None:
    """The key the middleware gives a request by default (the client's
    address, IPv6 grouped by ``ipv6_prefix`` bits, ``X-Forwarded-For`` read
    only behind ``trusted_proxies`` proxies), for a ``key`` callable that
    combines it with others: say a ``Stack``'s per-IP member,
    ``key=lambda scope: [client_key(scope), user_of(scope), ""]``. ``None``
    when the connection has no client address."""
    client = scope.get("client")
    return _http.client_key(client[0] if client else None, _forwarded_for(scope), trusted_proxies, ipv6_prefix)


def _forwarded_for(scope: Scope) -> str | None:
    """Every ``X-Forwarded-For`` field line of the request, combined: the
    last hop may be on a line of its own (a proxy that appends one)."""
    return _http.forwarded_for([bytes(v) for k, v in scope.get("headers", []) if k.lower() == b"x-forwarded-for"])


class RateLimitMiddleware:
    """Limits the HTTP requests reaching ``app`` with ``limiter``: any
    in-memory ratomic limiter, a ``ratomic.Stack`` of them, or one of
    ``ratomic.redis`` on a ``redis.asyncio`` client (its decisions are
    awaited; a Redis failure under its ``on_error="raise"`` is a limiter
    error, below).

    The key is the client's address (``scope["client"]``; an IPv6 address
    grouped by ``ipv6_prefix`` bits), or ``key(scope)`` when given. A
    ``Stack`` gives the key to every member (a ``DirectTokenBucket`` ignores
    it), or ``key(scope)`` returns a list or tuple of one key per member, in
    the stack's order (another count is a limiter error); its responses list
    every member, named as in the stack, and a stack with a ``Limiter``
    member (no single header policy) is refused here.
    ``X-Forwarded-For`` is used only with ``trusted_proxies`` > 0 (the number
    of proxies in front of the app); otherwise any client could forge it.
    ``cost`` is a whole number or a function of the scope. Every response
    gets ``RateLimit-Policy`` and ``RateLimit`` (plus ``X-RateLimit-*`` with
    ``legacy_headers``); a denial is a 429 with ``Retry-After`` and a
    problem document. ``standard_headers`` picks the form of the
    ``RateLimit*`` fields: ``True`` (draft 11, the default), ``"draft-11"``,
    ``"draft-8"`` (the same fields), ``"draft-7"`` or ``"draft-6"`` (the
    earlier forms, for clients written against express-rate-limit's), or
    ``False`` for none (``Retry-After`` and ``X-RateLimit-*`` stay).

    What the client is not told is logged on the ``ratomic.http`` logger
    (each kind at once, then at most once a minute). When the limiter's
    backend fails (a Redis limiter whose ``on_error="raise"``), ``on_error``
    here decides: ``"deny"`` (the default: a 503 with ``Retry-After: 1``,
    fail closed) or ``"allow"`` (fail open: the request goes through
    unchecked). A request the limiter cannot judge (a key too long, a cost
    above the limit, a stack's keys not one per member, ``key`` returning
    None) is a 400 whatever ``on_error`` says, and a request with no client
    address to key by is a 500 (a set-up mistake, logged once). Each is a
    generic RFC 9457 document: no address or error text reaches the client.
    WebSocket and lifespan traffic passes through unlimited.
    """

    def __init__(
        self,
        app: ASGIApp,
        limiter: AnyLimiter,
        *,
        key: KeyFunc | None = None,
        cost: int | Callable[[Scope], int] = 1,
        name: str = "default",
        standard_headers: StandardHeaders = True,
        legacy_headers: bool = False,
        trusted_proxies: int = 0,
        ipv6_prefix: int = 64,
        on_error: str = "deny",
    ) -> None:
        self.app = app
        self.policy = Policy(
            limiter,
            server="async",
            face="ratomic.asgi",
            key=key,
            cost=cost,
            name=name,
            standard_headers=standard_headers,
            legacy_headers=legacy_headers,
            trusted_proxies=trusted_proxies,
            ipv6_prefix=ipv6_prefix,
            on_error=on_error,  # type: ignore[arg-type]
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        p = self.policy
        if p.key is not None:
            key = p.key(scope)
        else:
            client = scope.get("client")
            key = p.default_key(client[0] if client else None, _forwarded_for(scope), 'scope["client"]')
        outcome = await p.decide_async(scope, key) if p.awaits else p.decide(scope, key)
        extra = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in outcome.headers]
        if not outcome.allowed:
            body = (outcome.problem or "").encode()
            headers = [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in outcome.problem_headers]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": outcome.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)
