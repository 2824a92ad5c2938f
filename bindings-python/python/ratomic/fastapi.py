"""A FastAPI dependency that rate-limits one route (or a router):
``Depends(RateLimit(limiter))``. Importing this module imports FastAPI.

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
from typing import Any, Callable

from fastapi import HTTPException, Request, Response
from fastapi.responses import JSONResponse

from ratomic import _http
from ratomic._http import AnyLimiter, KeyFunc, Policy, StandardHeaders
from ratomic._ratomic import PROBLEM_CONTENT_TYPE

__all__ = ["RateLimit", "RateLimitExceeded", "client_key", "problem_response"]


class RateLimitExceeded(HTTPException):
    """Raised by :class:`RateLimit` on a denial: a 429 whose ``detail`` is
    the problem document and whose headers are the rate-limit fields. Also
    raised, with a generic problem document, for a request the limiter
    could not decide: ``status_code`` 503 (its backend failed, under
    ``on_error="deny"``), 400 (a request it cannot judge, say a key too
    long) or 500 (no client address to key by); the reason is logged on
    the ``ratomic.http`` logger, never sent."""

    def __init__(self, problem: dict[str, Any], headers: dict[str, str], status_code: int = 429) -> None:
        super().__init__(status_code=status_code, detail=problem, headers=headers)


async def problem_response(request: Request, exc: Exception) -> Response:
    """An exception handler that answers :class:`RateLimitExceeded` with the
    problem document itself (``application/problem+json``), not FastAPI's
    ``{"detail": ...}`` wrapper."""
    assert isinstance(exc, RateLimitExceeded)
    return JSONResponse(exc.detail, status_code=exc.status_code, headers=exc.headers, media_type=PROBLEM_CONTENT_TYPE)



def client_key(request: Request, *, trusted_proxies: int = 0, ipv6_prefix: int = 64) -> str | None:
    """The key :class:`RateLimit` gives a request by default (the client's
    address, IPv6 grouped by ``ipv6_prefix`` bits, ``X-Forwarded-For`` read
    only behind ``trusted_proxies`` proxies), for a ``key`` callable that
    combines it with others: say a ``Stack``'s per-IP member. ``None`` when
    the request has no client address."""
    host = request.client.host if request.client else None
    return _http.client_key(host, _forwarded_for(request), trusted_proxies, ipv6_prefix)


def _forwarded_for(request: Request) -> str | None:
    """Every ``X-Forwarded-For`` field line, combined (``headers.get``
    would give the first line only: the client's own, when a proxy appends
    a line of its own)."""
    return _http.forwarded_for(request.headers.getlist("x-forwarded-for"))

class RateLimit:
    """A dependency limiting the requests of the routes that use it; same
    options as :class:`ratomic.asgi.RateLimitMiddleware` (``key`` and
    ``cost`` receive the ``Request``; a ``ratomic.Stack`` takes one key for
    every member or ``key`` returns one per member). Sets the rate-limit fields on the
    route's response; raises :class:`RateLimitExceeded` on a denial."""

    def __init__(
        self,
        limiter: AnyLimiter,
        *,
        key: KeyFunc | None = None,
        cost: int | Callable[[Request], int] = 1,
        name: str = "default",
        standard_headers: StandardHeaders = True,
        legacy_headers: bool = False,
        trusted_proxies: int = 0,
        ipv6_prefix: int = 64,
        on_error: str = "deny",
    ) -> None:
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
        )

    async def __call__(self, request: Request, response: Response) -> None:
        p = self.policy
        if p.key is not None:
            key = p.key(request)
        else:
            key = p.default_key(request.client.host if request.client else None, _forwarded_for(request), "request.client")
        outcome = await p.decide_async(request, key) if p.awaits else p.decide(request, key)
        if not outcome.allowed:
            raise RateLimitExceeded(json.loads(outcome.problem or "{}"), dict(outcome.headers), outcome.status)
        for name, value in outcome.headers:
            response.headers[name] = value
