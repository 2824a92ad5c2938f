"""Rate limiting for any ASGI app (Starlette, FastAPI, Litestar, ...), with
the IETF ``RateLimit`` header fields on every response and an RFC 9457
problem body on each 429. Pure ASGI: no framework is imported.

>>> from ratomic import TokenBucket
>>> from ratomic.asgi import RateLimitMiddleware
>>> async def app(scope, receive, send): ...
>>> app = RateLimitMiddleware(app, TokenBucket("100/min"))  # per client address
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, MutableMapping

from ratomic import _http
from ratomic._ratomic import PROBLEM_CONTENT_TYPE
from ratomic._http import (
    STATE_KEY,
    AnyLimiter,
    KeyFunc,
    LimitsLike,
    Outcome,
    Policy,
    QuotaLike,
    StandardHeaders,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["RateLimitMiddleware", "client_key"]

_CONTENT_TYPE = (b"content-type", PROBLEM_CONTENT_TYPE.encode())


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
    return _http.forwarded_for([bytes(v) for k, v in scope.get("headers", ()) if k.lower() == b"x-forwarded-for"])


def scope_key(p: Policy, scope: Scope, request: Any) -> Any:
    """The key of a request under ``p``: ``p.key(request)``, or the
    client's address (``X-Forwarded-For`` looked for only while it matters)."""
    if p.key is not None:
        return p.key(request)
    client = scope.get("client")
    return p.default_key(
        client[0] if client else None, _forwarded_for(scope) if p.reads_forwarded_for else None, 'scope["client"]'
    )


def set_state(scope: Scope, decision: Any) -> None:
    """Hands ``decision`` to the app: ``scope["state"]["rate_limit"]``, which
    Starlette and FastAPI show as ``request.state.rate_limit``."""
    state = scope.get("state")
    if state is None:
        scope["state"] = {STATE_KEY: decision}
    else:
        state[STATE_KEY] = decision


async def send_problem(outcome: Outcome, send: Send) -> None:
    """The middleware's own refusal: the problem document and its fields."""
    body = (outcome.problem or "").encode()
    headers = [*outcome.headers, _CONTENT_TYPE, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": outcome.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_custom(response: Any, extra: list[tuple[bytes, bytes]], scope: Scope, receive: Receive, send: Send) -> None:
    """Answers with ``response`` (an ASGI app, such as a Starlette
    ``Response``), adding the rate-limit fields it does not set itself."""

    async def send_with_fields(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message)
            headers = list(message.get("headers", ()))
            present = {bytes(n).lower() for n, _ in headers}
            headers.extend(f for f in extra if f[0] not in present)
            message["headers"] = headers
        await send(message)

    await response(scope, receive, send_with_fields)


async def custom_response(on_deny: Callable[..., Any], request: Any, decision: Any) -> Any:
    """``on_deny(request, decision)``, awaited if it is a coroutine."""
    response = on_deny(request, decision)
    if inspect.isawaitable(response):
        response = await response
    return response


class RateLimitMiddleware(_http._Switchable):
    """Limits the HTTP requests reaching ``app`` with ``limiter``: any
    in-memory ratomic limiter (a shared-file one too), a ``ratomic.Stack``
    of them, a ``ratomic.Quotas`` (with ``quota=``), or one of
    ``ratomic.redis`` on a ``redis.asyncio`` client or of
    ``ratomic.postgres`` on a ``psycopg.AsyncConnection`` or
    ``psycopg_pool.AsyncConnectionPool`` (their decisions are awaited; a
    backend failure under the limiter's ``on_error="raise"`` is a limiter
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

    Per request:

    - ``skip(scope)`` true: the request passes neither counted nor limited
      (health checks, an allow-list, routes of their own limits);
    - ``quota`` (with a ``ratomic.Quotas``: a rate string, a
      ``Rule.token_bucket``, or a function of the scope returning one, say
      the client's plan) and ``limits`` (with a ``ratomic.Limiter``: which
      of its limits apply, a ``LimitSet``, names, or a function of the
      scope returning them) choose the limit;
    - the decision is handed to the app in ``scope["state"]["rate_limit"]``
      (``request.state.rate_limit`` in Starlette and FastAPI; None when the
      limiter could not decide and ``on_error="allow"`` let it through, or
      the request was skipped);
    - ``on_deny(scope, decision)`` replaces the 429: it returns an ASGI app
      to answer with (a Starlette ``Response`` is one), or an awaitable of
      one; the rate-limit fields the response does not set are added;
    - with ``skip_successful_requests`` or ``skip_failed_requests``, a
      request is charged on the way in and its cost given back (the
      limiter's ``refund``, exactly) when its response starts with a status
      that ``request_was_successful(status)`` (default: below 400) says is
      a success, or a failure; a request whose app raised before answering
      is a failure. The bound never moves: a refund only returns what the
      request took.

    ``enabled=False`` (or ``middleware.enabled = False`` at run time, in
    tests) passes every request through untouched.

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
        skip: Callable[[Scope], bool] | None = None,
        quota: QuotaLike | Callable[[Scope], QuotaLike] | None = None,
        limits: LimitsLike | Callable[[Scope], LimitsLike] = None,
        on_deny: Callable[[Scope, Any], Any] | None = None,
        skip_successful_requests: bool = False,
        skip_failed_requests: bool = False,
        request_was_successful: Callable[[int], bool] | None = None,
        enabled: bool = True,
    ) -> None:
        _http._check_callable("on_deny", on_deny)
        self.app = app
        self.on_deny = on_deny
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
            skip=skip,
            quota=quota,
            limits=limits,
            skip_successful_requests=skip_successful_requests,
            skip_failed_requests=skip_failed_requests,
            request_was_successful=request_was_successful,
            enabled=enabled,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        p = self.policy
        if scope["type"] != "http" or not p.enabled:
            await self.app(scope, receive, send)
            return
        if p.skip is not None and p.skip(scope):
            set_state(scope, None)
            await self.app(scope, receive, send)
            return
        key = scope_key(p, scope, scope)
        outcome = await p.decide_async(scope, key) if p.awaits else p.decide(scope, key)
        set_state(scope, outcome.decision)
        if not outcome.allowed:
            if outcome.status == 429 and self.on_deny is not None:
                response = await custom_response(self.on_deny, scope, outcome.decision)
                await send_custom(response, outcome.headers, scope, receive, send)
            else:
                await send_problem(outcome, send)
            return
        extra = outcome.headers
        if outcome.charge is None:

            async def send_with_headers(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message = dict(message)
                    message["headers"] = [*message.get("headers", ()), *extra]
                await send(message)

            await self.app(scope, receive, send_with_headers)
            return
        await run_refunding(p, outcome, extra, self.app, scope, receive, send)


async def run_refunding(
    p: Policy, outcome: Outcome, extra: list[tuple[bytes, bytes]], app: ASGIApp, scope: Scope, receive: Receive, send: Send
) -> None:
    """Runs ``app`` on a charged request, giving its cost back when the
    response's status says so (:meth:`Policy.refund_for`), before the
    response goes out; an app that raises before answering is a failure."""
    started = False

    async def send_refunding(message: Message) -> None:
        nonlocal started
        if message["type"] == "http.response.start" and not started:
            started = True
            if p.refund_for(message["status"]):
                await p.give_back_async(outcome)
            message = dict(message)
            message["headers"] = [*message.get("headers", ()), *extra]
        await send(message)

    try:
        await app(scope, receive, send_refunding)
    finally:
        # No response started: the app raised, was cancelled (the client
        # left) or returned without answering (the server sends a 500).
        if not started and p.skip_failed:
            await p.give_back_async(outcome)
