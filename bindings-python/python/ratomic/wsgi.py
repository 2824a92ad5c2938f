"""Rate limiting for any WSGI app (Flask, Django, ...), with the IETF
``RateLimit`` header fields on every response and an RFC 9457 problem body
on each 429: the whole app (:class:`RateLimitMiddleware`) or one view
(:func:`rate_limit`, for Flask and Django views). No framework is imported
until a view decorated by :func:`rate_limit` runs.

>>> from ratomic import TokenBucket
>>> from ratomic.wsgi import RateLimitMiddleware
>>> def app(environ, start_response): ...
>>> app = RateLimitMiddleware(app, TokenBucket("100/min"))  # per client address
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable, Iterable, Iterator, TypeVar

from ratomic import _http
from ratomic._ratomic import PROBLEM_CONTENT_TYPE
from ratomic._http import (
    ENVIRON_KEY,
    AnyLimiter,
    KeyFunc,
    LimitsLike,
    Outcome,
    Policy,
    QuotaLike,
    StandardHeaders,
)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]
_View = TypeVar("_View", bound=Callable[..., Any])

__all__ = ["RateLimitMiddleware", "client_key", "rate_limit"]


def client_key(environ: dict[str, Any], *, trusted_proxies: int = 0, ipv6_prefix: int = 64) -> str | None:
    """The key the middleware gives a request by default (``REMOTE_ADDR``,
    IPv6 grouped by ``ipv6_prefix`` bits, ``X-Forwarded-For`` read only
    behind ``trusted_proxies`` proxies), for a ``key`` callable that
    combines it with others: say a ``Stack``'s per-IP member. ``None`` when
    the request has no client address. Takes a Flask ``request.environ`` or
    a Django ``request.META`` as well."""
    return _http.client_key(environ.get("REMOTE_ADDR"), environ.get("HTTP_X_FORWARDED_FOR"), trusted_proxies, ipv6_prefix)


def _environ_key(p: Policy, environ: Environ, request: Any) -> Any:
    if p.key is not None:
        return p.key(request)
    return p.default_key(environ.get("REMOTE_ADDR") or None, environ.get("HTTP_X_FORWARDED_FOR"), 'environ["REMOTE_ADDR"]')


def _status_code(status: str) -> int:
    """``200`` of ``"200 OK"`` (a status WSGI cannot read is a failure: 500)."""
    try:
        return int(status[:3])
    except ValueError:
        return 500


def _with_fields(headers: list[tuple[str, str]], fields: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``headers`` plus the ``fields`` whose names they do not carry."""
    present = {n.lower() for n, _ in headers}
    return [*headers, *(f for f in fields if f[0].lower() not in present)]


class RateLimitMiddleware(_http._Switchable):
    """Limits the requests reaching ``app`` with ``limiter``: the WSGI twin
    of :class:`ratomic.asgi.RateLimitMiddleware` (same options; a
    ``ratomic.redis`` limiter here has a blocking ``redis.Redis``, a
    ``ratomic.postgres`` one a blocking psycopg connection or pool). The key is
    ``environ["REMOTE_ADDR"]`` (grouped as IPv6 /64), or ``key(environ)``;
    ``HTTP_X_FORWARDED_FOR`` only with ``trusted_proxies`` > 0. A
    ``ratomic.Stack`` takes one key for every member, or ``key(environ)``
    returns one per member, as under ASGI.

    ``skip``, ``cost``, ``quota``, ``limits`` and ``key`` are functions of
    the ``environ``; the decision is handed to the app in
    ``environ["ratomic.rate_limit"]`` (``request.environ`` in Flask,
    ``request.META`` in Django). ``on_deny(environ, decision)`` returns a
    WSGI app to answer a denial with (a Werkzeug or Flask ``Response`` is
    one), given the rate-limit fields it does not set. With
    ``skip_successful_requests`` or ``skip_failed_requests`` the cost is
    given back by the status the app starts its response with (an app
    that raises, or whose body ends before it starts one, failed).
    ``enabled`` as under ASGI."""

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
        skip: Callable[[Environ], bool] | None = None,
        quota: QuotaLike | Callable[[Environ], QuotaLike] | None = None,
        limits: LimitsLike | Callable[[Environ], LimitsLike] = None,
        on_deny: Callable[[Environ, Any], WSGIApp] | None = None,
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
            skip=skip,
            quota=quota,
            limits=limits,
            skip_successful_requests=skip_successful_requests,
            skip_failed_requests=skip_failed_requests,
            request_was_successful=request_was_successful,
            enabled=enabled,
        )

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        p = self.policy
        if not p.enabled:
            return self.app(environ, start_response)
        if p.skip is not None and p.skip(environ):
            environ[ENVIRON_KEY] = None
            return self.app(environ, start_response)
        outcome = p.decide(environ, _environ_key(p, environ, environ))
        environ[ENVIRON_KEY] = outcome.decision
        if not outcome.allowed:
            if outcome.status == 429 and self.on_deny is not None:
                response = self.on_deny(environ, outcome.decision)

                def start_custom(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                    return start_response(status, _with_fields(headers, outcome.headers), exc_info)

                return response(environ, start_custom)
            body = (outcome.problem or "").encode()
            start_response(outcome.status_line, [*outcome.problem_headers, ("Content-Length", str(len(body)))])
            return [body]
        if outcome.charge is None:

            def start_with_headers(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                return start_response(status, [*headers, *outcome.headers], exc_info)

            return self.app(environ, start_with_headers)
        return _Refunding(p, outcome).run(self.app, environ, start_response)


class _Refunding:
    """A charged request's run: its cost given back when the status the
    app starts its response with says so (:meth:`Policy.refund_for`); an
    app that raises, or whose body ends before it answers, failed."""

    def __init__(self, p: Policy, outcome: Outcome) -> None:
        self.p, self.outcome, self.started = p, outcome, False

    def run(self, app: WSGIApp, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        fields = self.outcome.headers

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if not self.started:
                self.started = True
                if self.p.refund_for(_status_code(status)):
                    self.p.give_back(self.outcome)
            return start_response(status, [*headers, *fields], exc_info)

        try:
            body = app(environ, start)
        except BaseException:
            self.failed()
            raise
        # An app that answers lazily (a generator) starts its response while
        # the server iterates: watch its body.
        return body if self.started else self._watch(body)

    def failed(self) -> None:
        if not self.started and self.p.skip_failed:
            self.p.give_back(self.outcome)

    def _watch(self, body: Iterable[bytes]) -> Iterable[bytes]:
        return _WatchedBody(body, self)


class _WatchedBody:
    """The body of an app that had not started its response when it
    returned: a failure if it raises or ends (is closed) before it does."""

    def __init__(self, body: Iterable[bytes], run: _Refunding) -> None:
        self.body, self.run = body, run

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.body
        except BaseException:
            self.run.failed()
            raise

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.run.failed()


# ---- one view: Flask and Django ---------------------------------------------


def _django_response(body: bytes | str, status: int, content_type: str) -> Any:
    from django.http import HttpResponse  # type: ignore[import-untyped,unused-ignore]

    return HttpResponse(body, status=status, content_type=content_type)


def _flask_response(body: bytes | str, status: int, content_type: str) -> Any:
    import flask

    return flask.current_app.response_class(body, status=status, content_type=content_type)


def _view_request(args: tuple[Any, ...]) -> tuple[Any, Environ, bool]:
    """The request a view serves, its environ, and whether it is Django's:
    Django passes it first (``request.META``: its WSGI environ); Flask
    keeps it in its context (``flask.request``)."""
    if args and hasattr(args[0], "META"):
        return args[0], args[0].META, True
    flask = sys.modules.get("flask")
    if flask is not None and flask.has_request_context():
        return flask.request, flask.request.environ, False
    raise TypeError(
        "ratomic.wsgi.rate_limit limits a Flask view (called in a request context) or a Django view (given "
        "the request first); for any other WSGI app, wrap it in ratomic.wsgi.RateLimitMiddleware"
    )


def _exception_status(e: BaseException) -> int:
    """The status a framework answers an exception with, as far as a
    refund cares: Werkzeug's ``HTTPException.code``, else a failure."""
    code = getattr(e, "code", None)
    return code if isinstance(code, int) and 100 <= code <= 599 else 500


def rate_limit(
    limiter: AnyLimiter,
    *,
    key: KeyFunc | None = None,
    cost: int | Callable[[Any], int] = 1,
    name: str = "default",
    standard_headers: StandardHeaders = True,
    legacy_headers: bool = False,
    trusted_proxies: int = 0,
    ipv6_prefix: int = 64,
    on_error: str = "deny",
    skip: Callable[[Any], bool] | None = None,
    quota: QuotaLike | Callable[[Any], QuotaLike] | None = None,
    limits: LimitsLike | Callable[[Any], LimitsLike] = None,
    on_deny: Callable[[Any, Any], Any] | None = None,
    skip_successful_requests: bool = False,
    skip_failed_requests: bool = False,
    request_was_successful: Callable[[int], bool] | None = None,
    enabled: bool = True,
) -> Callable[[_View], _View]:
    """A decorator limiting one Flask or Django view (Flask-Limiter's
    ``@limiter.limit``, django-ratelimit's ``@ratelimit``, over any ratomic
    limiter; a Redis or PostgreSQL one with a blocking client). Options as
    :class:`RateLimitMiddleware`'s, but ``key``, ``cost``, ``skip``,
    ``quota``, ``limits`` and ``on_deny`` get the framework's request
    (Flask's ``flask.request``, Django's ``HttpRequest``), and
    ``on_deny(request, decision)`` returns what the view would (a Flask
    return value, a Django ``HttpResponse``). A denial is a 429 response
    of the framework, with the problem document; an allowed request's
    response gets the rate-limit fields, and its decision is in
    ``request.environ["ratomic.rate_limit"]`` (Flask) or
    ``request.META["ratomic.rate_limit"]`` (Django). A refund goes by the
    status of the view's response, or of the exception it raised
    (Werkzeug's ``HTTPException.code``; any other exception failed).
    ``decorated.rate_limit.enabled = False`` switches it off (in tests).

    Decorate the view itself, under the route (``@app.get`` above it in
    Flask), so every call of it is limited."""
    _http._check_callable("on_deny", on_deny)
    policy = Policy(
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
        skip=skip,
        quota=quota,
        limits=limits,
        skip_successful_requests=skip_successful_requests,
        skip_failed_requests=skip_failed_requests,
        request_was_successful=request_was_successful,
        enabled=enabled,
    )

    def decorate(view: _View) -> _View:
        if inspect.iscoroutinefunction(view):
            raise TypeError(
                f"ratomic.wsgi.rate_limit limits synchronous views; {view.__qualname__} is async: serve it with "
                "ASGI and limit it with ratomic.asgi.RateLimitMiddleware or ratomic.fastapi"
            )

        @functools.wraps(view)
        def limited(*args: Any, **kwargs: Any) -> Any:
            p = policy
            if not p.enabled:
                return view(*args, **kwargs)
            request, environ, django = _view_request(args)
            if p.skip is not None and p.skip(request):
                environ[ENVIRON_KEY] = None
                return view(*args, **kwargs)
            outcome = p.decide(request, _environ_key(p, environ, request))
            environ[ENVIRON_KEY] = outcome.decision
            if not outcome.allowed:
                if outcome.status == 429 and p_on_deny is not None:
                    response = _as_response(p_on_deny(request, outcome.decision), django)
                    fields = [f for f in outcome.headers if f[0] not in response.headers]
                else:
                    make = _django_response if django else _flask_response
                    response = make(outcome.problem or "", outcome.status, PROBLEM_CONTENT_TYPE)
                    fields = outcome.headers
                for n, v in fields:
                    response.headers[n] = v
                return response
            try:
                response = _as_response(view(*args, **kwargs), django)
            except BaseException as e:
                if outcome.charge is not None and p.refund_for(_exception_status(e)):
                    p.give_back(outcome)
                raise
            if outcome.charge is not None and p.refund_for(response.status_code):
                p.give_back(outcome)
            for n, v in outcome.headers:
                response.headers[n] = v
            return response

        limited.rate_limit = policy  # type: ignore[attr-defined]
        return limited  # type: ignore[return-value]

    p_on_deny = on_deny
    return decorate


def _as_response(rv: Any, django: bool) -> Any:
    """A view's return value as its framework's response (Flask's
    ``make_response``; a Django view returns one already)."""
    if django:
        return rv
    import flask

    return flask.make_response(rv)
