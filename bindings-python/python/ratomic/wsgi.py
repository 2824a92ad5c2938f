"""Rate limiting for any WSGI app (Flask, Django, ...), with the IETF
``RateLimit`` header fields on every response and an RFC 9457 problem body
on each 429. No framework is imported.

>>> from ratomic import TokenBucket
>>> from ratomic.wsgi import RateLimitMiddleware
>>> def app(environ, start_response): ...
>>> app = RateLimitMiddleware(app, TokenBucket("100/min"))  # per client address
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from ratomic import _http
from ratomic._http import AnyLimiter, KeyFunc, Policy, StandardHeaders

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

__all__ = ["RateLimitMiddleware", "client_key"]


def client_key(environ: dict[str, Any], *, trusted_proxies: int = 0, ipv6_prefix: int = 64) -> str | None:
    """The key the middleware gives a request by default (``REMOTE_ADDR``,
    IPv6 grouped by ``ipv6_prefix`` bits, ``X-Forwarded-For`` read only
    behind ``trusted_proxies`` proxies), for a ``key`` callable that
    combines it with others: say a ``Stack``'s per-IP member. ``None`` when
    the request has no client address."""
    return _http.client_key(environ.get("REMOTE_ADDR"), environ.get("HTTP_X_FORWARDED_FOR"), trusted_proxies, ipv6_prefix)

class RateLimitMiddleware:
    """Limits the requests reaching ``app`` with ``limiter``: the WSGI twin
    of :class:`ratomic.asgi.RateLimitMiddleware` (same options; a
    ``ratomic.redis`` limiter here has a blocking ``redis.Redis``). The key is
    ``environ["REMOTE_ADDR"]`` (grouped as IPv6 /64), or ``key(environ)``;
    ``HTTP_X_FORWARDED_FOR`` only with ``trusted_proxies`` > 0. A
    ``ratomic.Stack`` takes one key for every member, or ``key(environ)``
    returns one per member, as under ASGI."""

    def __init__(
        self,
        app: WSGIApp,
        limiter: AnyLimiter,
        *,
        key: KeyFunc | None = None,
        cost: int | Callable[[Environ], int] = 1,
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
            server="sync",
            face="ratomic.wsgi",
            key=key,
            cost=cost,
            name=name,
            standard_headers=standard_headers,
            legacy_headers=legacy_headers,
            trusted_proxies=trusted_proxies,
            ipv6_prefix=ipv6_prefix,
            on_error=on_error,  # type: ignore[arg-type]
        )

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        p = self.policy
        if p.key is not None:
            key = p.key(environ)
        else:
            key = p.default_key(environ.get("REMOTE_ADDR") or None, environ.get("HTTP_X_FORWARDED_FOR"), 'environ["REMOTE_ADDR"]')
        outcome = p.decide(environ, key)
        if not outcome.allowed:
            body = (outcome.problem or "").encode()
            start_response(outcome.status_line, [*outcome.problem_headers, ("Content-Length", str(len(body)))])
            return [body]

        def start_with_headers(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, [*headers, *outcome.headers], exc_info)

        return self.app(environ, start_with_headers)
