"""One view limited in Flask and in Django (``ratomic.wsgi.rate_limit``,
issue 38): Flask-Limiter's ``@limiter.limit`` and django-ratelimit's
``@ratelimit`` over a ratomic limiter. Each app is served by wsgiref on
127.0.0.1 and asked by a real HTTP client: statuses, header fields,
the decision handed to the view, a custom denial, and refunds."""

from __future__ import annotations

import json
from typing import Any

import pytest

import ratomic
from ratomic.wsgi import rate_limit
from test_http import check_denial, get, rate_limit_fields, serve_wsgi

flask = pytest.importorskip("flask")
django = pytest.importorskip("django")


# ---- Flask --------------------------------------------------------------------


def flask_app(limiter: Any, **options: Any) -> Any:
    app = flask.Flask("ratomic-test")

    @app.get("/limited")
    @rate_limit(limiter, **options)
    def limited() -> Any:
        d = flask.request.environ.get("ratomic.rate_limit")
        if flask.request.args.get("fail"):
            flask.abort(503)
        return {"remaining": d.remaining if d is not None else None}

    @app.get("/free")
    def free() -> str:
        return "free"

    return app


def test_flask_view_is_limited_and_others_are_not() -> None:
    limiter = ratomic.TokenBucket("2/min", clock=ratomic.ManualClock())
    with serve_wsgi(flask_app(limiter, name="view")) as port:
        r = get(port, "/limited")
        assert (r.status, json.loads(r.body)) == (200, {"remaining": 1})
        assert rate_limit_fields(r) == {"ratelimit-policy": '"view";q=2;w=60', "ratelimit": '"view";r=1;t=30'}
        assert get(port, "/limited").status == 200
        check_denial(get(port, "/limited"), ["view"])
        assert [get(port, "/free").status for _ in range(4)] == [200] * 4


def test_flask_view_skip_key_and_legacy_fields() -> None:
    limiter = ratomic.FixedWindow("1/min", clock=ratomic.ManualClock())
    options = {
        "key": lambda request: request.headers.get("X-Api-Key", "anonymous"),
        "skip": lambda request: request.headers.get("X-Internal") == "yes",
        "legacy_headers": True,
        "standard_headers": False,
    }
    with serve_wsgi(flask_app(limiter, **options)) as port:
        r = get(port, "/limited", headers={"X-Api-Key": "a"})
        assert rate_limit_fields(r) == {"x-ratelimit-limit": "1", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "60"}
        assert get(port, "/limited", headers={"X-Api-Key": "a"}).status == 429
        assert get(port, "/limited", headers={"X-Api-Key": "b"}).status == 200
        assert [get(port, "/limited", headers={"X-Api-Key": "a", "X-Internal": "yes"}).status for _ in range(3)] == [200] * 3


def test_flask_view_custom_denial_and_refund_of_failures() -> None:
    limiter = ratomic.TokenBucket("1/min", clock=ratomic.ManualClock())

    def on_deny(request: Any, decision: ratomic.Decision) -> Any:
        return {"error": "slow down", "retry_after": decision.retry_after}, 429

    with serve_wsgi(flask_app(limiter, on_deny=on_deny, skip_failed_requests=True)) as port:
        # The view aborts with a 503 three times: each is given back.
        assert [get(port, "/limited?fail=1").status for _ in range(3)] == [503] * 3
        assert get(port, "/limited").status == 200
        r = get(port, "/limited")
    assert (r.status, json.loads(r.body)) == (429, {"error": "slow down", "retry_after": 60.0})
    assert r.headers["retry-after"] == "60" and r.headers["ratelimit"] == '"default";r=0;t=60'


def test_flask_view_switched_off() -> None:
    limiter = ratomic.TokenBucket("1/min", clock=ratomic.ManualClock())
    app = flask_app(limiter)
    view = app.view_functions["limited"]
    view.rate_limit.enabled = False
    with serve_wsgi(app) as port:
        assert [get(port, "/free").status for _ in range(2)] == [200, 200]
        # Off: the view runs, unlimited, with no decision and no fields.
        r = get(port, "/limited")
        assert (r.status, json.loads(r.body), rate_limit_fields(r)) == (200, {"remaining": None}, {})
        view.rate_limit.enabled = True
        assert [get(port, "/limited").status for _ in range(2)] == [200, 429]


def test_an_async_view_is_refused_naming_the_alternative() -> None:
    async def view() -> str:
        return "x"

    with pytest.raises(TypeError, match="ratomic.asgi.RateLimitMiddleware or ratomic.fastapi"):
        rate_limit(ratomic.TokenBucket("1/s"))(view)


# ---- Django -------------------------------------------------------------------

_django_views: dict[str, Any] = {}


def _django() -> Any:
    """Django configured once for this process: this module is its URLconf,
    whose views the tests set."""
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DEBUG=False,
            SECRET_KEY="ratomic-tests",
            ROOT_URLCONF=__name__,
            ALLOWED_HOSTS=["127.0.0.1"],
            MIDDLEWARE=[],
            INSTALLED_APPS=[],
            LOGGING_CONFIG=None,
        )
        django.setup()
    from django.core.wsgi import get_wsgi_application

    return get_wsgi_application()


def _dispatch(request: Any, name: str) -> Any:
    return _django_views[name](request)


def __getattr__(name: str) -> Any:
    if name == "urlpatterns":  # read by Django when it first routes a request
        from django.urls import path

        return [path("<str:name>", _dispatch)]
    raise AttributeError(name)


def test_django_view_is_limited_with_the_decision_on_the_request() -> None:
    from django.http import HttpResponse, JsonResponse

    limiter = ratomic.SlidingWindow("2/min", clock=ratomic.ManualClock())

    @rate_limit(limiter, name="django", skip_failed_requests=True)
    def view(request: Any) -> Any:
        if request.GET.get("fail"):
            return HttpResponse("broken", status=500)
        return JsonResponse({"remaining": request.META["ratomic.rate_limit"].remaining})

    _django_views["view"] = view
    with serve_wsgi(_django()) as port:
        assert get(port, "/view?fail=1").status == 500  # given back
        r = get(port, "/view")
        assert (r.status, json.loads(r.body)) == (200, {"remaining": 1})
        assert r.headers["ratelimit-policy"] == '"django";q=2;w=60'
        assert get(port, "/view").status == 200
        check_denial(get(port, "/view"), ["django"])


def test_django_view_custom_denial() -> None:
    from django.http import HttpResponse

    limiter = ratomic.TokenBucket("1/min", clock=ratomic.ManualClock())

    def on_deny(request: Any, decision: ratomic.Decision) -> Any:
        return HttpResponse(f"wait {decision.retry_after:.0f} s", status=429, content_type="text/plain")

    _django_views["custom"] = rate_limit(limiter, on_deny=on_deny)(lambda request: HttpResponse("ok"))
    with serve_wsgi(_django()) as port:
        assert get(port, "/custom").body == b"ok"
        r = get(port, "/custom")
    assert (r.status, r.body, r.headers["content-type"]) == (429, b"wait 60 s", "text/plain")
    assert r.headers["retry-after"] == "60"
