"""Rate limits for FastAPI routes: a dependency,
``Depends(RateLimit(limiter))``, and slowapi's ``Limiter`` with its
``@limiter.limit("5/minute")`` decorator (from :mod:`ratomic.starlette`,
re-exported here). Importing this module imports FastAPI.

>>> from fastapi import Depends, FastAPI
>>> from ratomic import TokenBucket
>>> from ratomic.fastapi import RateLimit, RateLimitExceeded, problem_response
>>> app = FastAPI()
>>> app.add_exception_handler(RateLimitExceeded, problem_response)  # RFC 9457 bodies
>>> @app.get("/search", dependencies=[Depends(RateLimit(TokenBucket("10/s")))])
... async def search() -> dict: return {}
"""

# No `from __future__ import annotations`: FastAPI reads the dependency's
# parameter types at run time, and an instance's __call__ has no globals
# to resolve string annotations in.
import json
from typing import Any, Callable, Optional

from fastapi import Request, Response

from ratomic import _http
from ratomic._http import STATE_KEY, AnyLimiter, KeyFunc, LimitsLike, Policy, QuotaLike, StandardHeaders
from ratomic._ratomic import ArgumentTypeError
from ratomic.asgi import scope_key
from ratomic.starlette import (
    Limiter,
    LimiterMiddleware,
    RateLimitExceeded,
    SlowAPIASGIMiddleware,
    SlowAPIMiddleware,
    _rate_limit_exceeded_handler,
    get_remote_address,
    problem_response,
    str_headers,
)

__all__ = [
    "Limiter",
    "LimiterMiddleware",
    "RateLimit",
    "RateLimitExceeded",
    "SlowAPIASGIMiddleware",
    "SlowAPIMiddleware",
    "_rate_limit_exceeded_handler",
    "client_key",
    "get_remote_address",
    "problem_response",
]


def client_key(request: Request, *, trusted_proxies: int = 0, ipv6_prefix: int = 64) -> Optional[str]:
    """The key :class:`RateLimit` gives a request by default (the client's
    address, IPv6 grouped by ``ipv6_prefix`` bits, ``X-Forwarded-For`` read
    only behind ``trusted_proxies`` proxies), for a ``key`` callable that
    combines it with others: say a ``Stack``'s per-IP member. ``None`` when
    the request has no client address."""
    host = request.client.host if request.client else None
    return _http.client_key(host, _forwarded_for(request), trusted_proxies, ipv6_prefix)


def _forwarded_for(request: Request) -> Optional[str]:
    """Every ``X-Forwarded-For`` field line, combined (``headers.get``
    would give the first line only: the client's own, when a proxy appends
    a line of its own)."""
    return _http.forwarded_for(request.headers.getlist("x-forwarded-for"))


class RateLimit(_http._Switchable):
    """A dependency limiting the requests of the routes that use it; same
    options as :class:`ratomic.asgi.RateLimitMiddleware` (``key``, ``cost``,
    ``skip``, ``quota`` and ``limits`` receive the ``Request``; a
    ``ratomic.Stack`` takes one key for every member or ``key`` returns one
    per member). Sets the rate-limit fields on the route's response and
    the decision in ``request.state.rate_limit``; raises
    :class:`RateLimitExceeded` on a denial (its handler is where a custom
    denial response goes: ``exc.decision`` is the limiter's).

    A dependency runs before the route and never sees its response, so
    ``skip_successful_requests``/``skip_failed_requests`` are refused here,
    naming what can: ``@limiter.limit(...)`` of a :class:`Limiter` or
    :class:`ratomic.asgi.RateLimitMiddleware`. ``enabled=False`` (or
    ``dependency.enabled = False``) lets every request through."""

    def __init__(
        self,
        limiter: AnyLimiter,
        *,
        key: Optional[KeyFunc] = None,
        cost: "int | Callable[[Request], int]" = 1,
        name: str = "default",
        standard_headers: StandardHeaders = True,
        legacy_headers: bool = False,
        trusted_proxies: int = 0,
        ipv6_prefix: int = 64,
        on_error: str = "deny",
        skip: Optional[Callable[[Request], bool]] = None,
        quota: "QuotaLike | Callable[[Request], QuotaLike] | None" = None,
        limits: "LimitsLike | Callable[[Request], LimitsLike]" = None,
        enabled: bool = True,
        on_deny: Optional[Callable[..., Any]] = None,
        skip_successful_requests: bool = False,
        skip_failed_requests: bool = False,
    ) -> None:
        if on_deny is not None:
            raise ArgumentTypeError(
                "on_deny is not taken by a dependency (it cannot answer a request itself): register an exception "
                "handler, app.add_exception_handler(RateLimitExceeded, handler), whose exc.decision is the "
                "limiter's"
            )
        if skip_successful_requests or skip_failed_requests:
            raise ArgumentTypeError(
                "a dependency runs before the route and never sees its response, so it cannot give a request's "
                "cost back by it: use @limiter.limit(..., skip_failed_requests=True) of ratomic.fastapi.Limiter, "
                "or ratomic.asgi.RateLimitMiddleware(app, limiter, skip_failed_requests=True)"
            )
        self.policy = Policy(
            limiter,
            server="async",
            face="ratomic.fastapi",
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
            enabled=enabled,
        )

    async def __call__(self, request: Request, response: Response) -> None:
        p = self.policy
        if not p.enabled:
            return
        scope = request.scope
        state = scope.get("state")
        if state is None:
            state = scope["state"] = {}
        if p.skip is not None and p.skip(request):
            state[STATE_KEY] = None
            return
        key = scope_key(p, scope, request)
        outcome = await p.decide_async(request, key) if p.awaits else p.decide(request, key)
        state[STATE_KEY] = outcome.decision
        if not outcome.allowed:
            raise RateLimitExceeded(
                json.loads(outcome.problem or "{}"), str_headers(outcome.headers), outcome.status, outcome.decision
            )
        response.raw_headers.extend(outcome.headers)
