"""slowapi's ``Limiter`` in ratomic (``ratomic.fastapi.Limiter``, also
``ratomic.starlette``; issue 38): the same app, written once against
slowapi's names, is served twice by uvicorn — with ``slowapi`` and with
``ratomic.fastapi`` imported — and a real HTTP client sends both the same
requests: the statuses must be the same, option by option. Then what only
ratomic has (refunds, routes without a ``request`` parameter, a limiter
object in place of a string) and the options it refuses, naming what to
use instead."""

from __future__ import annotations

import json
import types
from typing import Any, Callable

import pytest

import ratomic
import ratomic.fastapi
from test_http import get, rate_limit_fields, serve_asgi

fastapi = pytest.importorskip("fastapi")
slowapi = pytest.importorskip("slowapi")
pytest.importorskip("uvicorn")

# Module level: this module's annotations are strings (the __future__
# import), which FastAPI and ratomic's decorator resolve here.
from fastapi import FastAPI, HTTPException, Request, Response  # noqa: E402
from fastapi.responses import JSONResponse, PlainTextResponse  # noqa: E402


def slowapi_names() -> types.SimpleNamespace:
    import slowapi.errors
    import slowapi.middleware
    import slowapi.util

    return types.SimpleNamespace(
        Limiter=slowapi.Limiter,
        RateLimitExceeded=slowapi.errors.RateLimitExceeded,
        handler=slowapi._rate_limit_exceeded_handler,
        get_remote_address=slowapi.util.get_remote_address,
        Middleware=slowapi.middleware.SlowAPIASGIMiddleware,
        ratomic=False,
    )


def ratomic_names() -> types.SimpleNamespace:
    m = ratomic.fastapi
    return types.SimpleNamespace(
        Limiter=m.Limiter,
        RateLimitExceeded=m.RateLimitExceeded,
        handler=m._rate_limit_exceeded_handler,
        get_remote_address=m.get_remote_address,
        Middleware=m.SlowAPIASGIMiddleware,
        ratomic=True,
    )


SIDES = {"slowapi": slowapi_names, "ratomic": ratomic_names}

# Rates per hour: slowapi's windows (from the first hit) never turn during a
# test, and ratomic's clock is a ManualClock that stands still.
Build = Callable[[types.SimpleNamespace, Any], None]


def make_app(
    s: types.SimpleNamespace, build: Build, middleware: bool = False, **limiter_options: Any
) -> tuple[FastAPI, Any]:
    if s.ratomic:
        limiter_options.setdefault("clock", ratomic.ManualClock())
    limiter_options.setdefault("key_func", s.get_remote_address)
    limiter = s.Limiter(**limiter_options)
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(s.RateLimitExceeded, s.handler)
    if middleware:
        app.add_middleware(s.Middleware)
    build(app, limiter)
    return app, limiter


Request_ = tuple[str, str, dict[str, str]]  # method, path, header fields


def statuses(app: Any, requests: list[Request_]) -> list[int]:
    import http.client

    out = []
    with serve_asgi(app) as port:
        for method, path, headers in requests:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            try:
                conn.request(method, path, headers=headers)
                r = conn.getresponse()
                r.read()
                out.append(r.status)
            finally:
                conn.close()
    return out


def both(build: Build, requests: list[Request_], middleware: bool = False, **options: Any) -> list[int]:
    """The statuses under slowapi and under ratomic, which must agree."""
    seen = {side: statuses(make_app(names(), build, middleware, **options)[0], requests) for side, names in SIDES.items()}
    assert seen["ratomic"] == seen["slowapi"], seen
    return seen["ratomic"]


def GET(path: str, **headers: str) -> Request_:
    return ("GET", path, headers)


def POST(path: str, **headers: str) -> Request_:
    return ("POST", path, headers)


def test_a_route_limit() -> None:
    def build(app: FastAPI, limiter: Any) -> None:
        @app.get("/a")
        @limiter.limit("2/hour")
        async def a(request: Request) -> dict:
            return {}

        @app.get("/b")
        async def b(request: Request) -> dict:
            return {}

    assert both(build, [GET("/a")] * 3 + [GET("/b")] * 3) == [200, 200, 429, 200, 200, 200]


def test_default_limits_per_route_and_exempt() -> None:
    def build(app: FastAPI, limiter: Any) -> None:
        @app.get("/own")
        @limiter.limit("3/hour")
        async def own(request: Request) -> dict:
            return {}

        @app.get("/b")
        async def b(request: Request) -> dict:
            return {}

        @app.get("/c")
        async def c(request: Request) -> dict:
            return {}

        @app.get("/free")
        @limiter.exempt
        async def free(request: Request) -> dict:
            return {}

    requests = [GET("/b")] * 3 + [GET("/c")] * 3 + [GET("/own")] * 4 + [GET("/free")] * 4 + [GET("/nowhere")]
    assert both(build, requests, middleware=True, default_limits=["2/hour"]) == [200, 200, 429] * 2 + [
        200,
        200,
        200,
        429,
    ] + [200] * 4 + [404]


def test_application_limits_are_shared_by_routes() -> None:
    def build(app: FastAPI, limiter: Any) -> None:
        for path in ("/b", "/c"):
            app.add_api_route(path, _plain_endpoint(), methods=["GET"])

    requests = [GET("/b"), GET("/c"), GET("/b"), GET("/c")]
    assert both(build, requests, middleware=True, application_limits=["3/hour"]) == [200, 200, 200, 429]


def _plain_endpoint() -> Any:
    async def endpoint(request: Request) -> dict:
        return {}

    return endpoint


def test_exempt_when_methods_per_method_and_cost() -> None:
    def build(app: FastAPI, limiter: Any) -> None:
        @app.get("/admin")
        @limiter.limit("1/hour", exempt_when=lambda request: request.headers.get("x-admin") == "yes")
        async def admin(request: Request) -> dict:
            return {}

        @app.api_route("/posts", methods=["GET", "POST"])
        @limiter.limit("1/hour", methods=["POST"])
        async def posts(request: Request) -> dict:
            return {}

        @app.api_route("/items", methods=["GET", "POST"])
        @limiter.limit("1/hour", per_method=True)
        async def items(request: Request) -> dict:
            return {}

        @app.get("/heavy")
        @limiter.limit("4/hour", cost=lambda request: 2)
        async def heavy(request: Request) -> dict:
            return {}

    requests = (
        [GET("/admin", **{"X-Admin": "yes"})] * 3
        + [GET("/admin")] * 2
        + [GET("/posts")] * 3
        + [POST("/posts")] * 2
        + [GET("/items"), POST("/items"), GET("/items"), POST("/items")]
        + [GET("/heavy")] * 3
    )
    assert both(build, requests) == [200] * 3 + [200, 429] + [200] * 3 + [200, 429] + [200, 200, 429, 429] + [
        200,
        200,
        429,
    ]


def test_key_func_shared_limit_and_dynamic_limit() -> None:
    def user(request: Request) -> str:
        return request.headers.get("x-user", "nobody")

    def plan_of(key: str) -> str:
        return "3/hour" if key == "paying" else "1/hour"

    def build(app: FastAPI, limiter: Any) -> None:
        @app.get("/s1")
        @limiter.shared_limit("3/hour", scope="shared")
        async def s1(request: Request) -> dict:
            return {}

        @app.get("/s2")
        @limiter.shared_limit("3/hour", scope="shared")
        async def s2(request: Request) -> dict:
            return {}

        @app.get("/plan")
        @limiter.limit(plan_of)
        async def plan(request: Request) -> dict:
            return {}

    requests = (
        [GET("/s1", **{"X-User": "a"}), GET("/s2", **{"X-User": "a"})] * 2
        + [GET("/s1", **{"X-User": "b"})]
        + [GET("/plan", **{"X-User": "paying"})] * 4
        + [GET("/plan", **{"X-User": "free"})] * 2
    )
    assert both(build, requests, key_func=user) == [200, 200, 200, 429, 200] + [200, 200, 200, 429] + [200, 429]


def test_override_defaults_false_adds_the_defaults() -> None:
    def build(app: FastAPI, limiter: Any) -> None:
        @app.get("/both")
        @limiter.limit("5/hour", override_defaults=False)
        async def both_(request: Request) -> dict:
            return {}

    assert both(build, [GET("/both")] * 4, middleware=True, default_limits=["2/hour"]) == [200, 200, 429, 429]


def test_enabled_false_limits_nothing() -> None:
    def build(app: FastAPI, limiter: Any) -> None:
        @app.get("/a")
        @limiter.limit("1/hour")
        async def a(request: Request) -> dict:
            return {}

    assert both(build, [GET("/a")] * 3 + [GET("/b")] * 3, middleware=True, enabled=False, default_limits=["1/hour"]) == [
        200,
        200,
        200,
        404,
        404,
        404,
    ]


def test_headers_enabled_writes_the_x_ratelimit_fields() -> None:
    def build(app: FastAPI, limiter: Any) -> None:
        @app.get("/a")
        @limiter.limit("2/hour")
        async def a(request: Request, response: Response) -> dict:
            return {}

    for side, names in SIDES.items():
        app, _ = make_app(names(), build, headers_enabled=True)
        with serve_asgi(app) as port:
            rs = [get(port, "/a") for _ in range(3)]
        assert [r.status for r in rs] == [200, 200, 429], side
        assert [(r.headers["x-ratelimit-limit"], r.headers["x-ratelimit-remaining"]) for r in rs] == [
            ("2", "1"),
            ("2", "0"),
            ("2", "0"),
        ], side
        assert int(rs[2].headers["retry-after"]) > 0, side
        if side == "ratomic":
            # Seconds until the key is full again (a delta: ratomic reads a
            # monotonic clock); slowapi writes a Unix time here.
            assert [r.headers["x-ratelimit-reset"] for r in rs] == ["3600"] * 3
            assert "retry-after" not in rs[0].headers  # slowapi writes one on every response
            assert rs[2].headers["content-type"] == ratomic.PROBLEM_CONTENT_TYPE


def test_error_message_is_the_problem_documents_detail() -> None:
    def build(app: FastAPI, limiter: Any) -> None:
        @app.get("/a")
        @limiter.limit("1/hour", error_message="Too many searches: upgrade your plan")
        async def a(request: Request) -> dict:
            return {}

    app, _ = make_app(ratomic_names(), build)
    with serve_asgi(app) as port:
        get(port, "/a")
        r = get(port, "/a")
    body = json.loads(r.body)
    assert (r.status, body["detail"], body["status"]) == (429, "Too many searches: upgrade your plan", 429)


# ---- ratomic's own --------------------------------------------------------------


def test_a_route_needs_no_request_parameter_and_may_be_sync() -> None:
    limiter = ratomic.fastapi.Limiter(clock=ratomic.ManualClock(), headers_enabled=True)
    app = FastAPI()
    app.add_exception_handler(ratomic.fastapi.RateLimitExceeded, ratomic.fastapi.problem_response)

    @app.get("/sync/{item}")
    @limiter.limit("2/hour")
    def sync_route(item: int) -> dict:
        return {"item": item}

    @app.get("/state")
    @limiter.limit("5/hour")
    async def state(request: Request) -> dict:
        return {"remaining": request.state.rate_limit.remaining}

    with serve_asgi(app) as port:
        rs = [get(port, f"/sync/{i}") for i in range(3)]
        assert [(r.status, r.headers.get("x-ratelimit-remaining")) for r in rs] == [(200, "1"), (200, "0"), (429, "0")]
        assert json.loads(rs[0].body) == {"item": 0}
        assert get(port, "/sync/x").status == 422  # validation still FastAPI's
        assert [json.loads(get(port, "/state").body)["remaining"] for _ in range(2)] == [4, 3]


def test_a_limiter_object_in_place_of_a_string() -> None:
    limiter = ratomic.fastapi.Limiter(standard_headers=True)
    stack = ratomic.Stack({"ip": ratomic.TokenBucket("2/min"), "global": ratomic.DirectTokenBucket("100/min")})
    app = FastAPI()
    app.add_exception_handler(ratomic.fastapi.RateLimitExceeded, ratomic.fastapi.problem_response)

    @app.get("/")
    @limiter.limit(stack)
    async def root(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    with serve_asgi(app) as port:
        rs = [get(port) for _ in range(3)]
    assert [r.status for r in rs] == [200, 200, 429]
    assert rs[0].headers["ratelimit-policy"] == '"ip";q=2;w=60, "global";q=100;w=60'
    assert json.loads(rs[2].body)["violated-policies"] == ["ip"]


def test_skip_failed_requests_in_a_route_limit() -> None:
    limiter = ratomic.fastapi.Limiter(clock=ratomic.ManualClock())
    app = FastAPI()
    app.add_exception_handler(ratomic.fastapi.RateLimitExceeded, ratomic.fastapi.problem_response)

    @app.get("/{how}")
    @limiter.limit("2/hour", skip_failed_requests=True)
    async def route(how: str, response: Response) -> Any:
        if how == "raise":
            raise HTTPException(503)
        if how == "return":
            return JSONResponse({}, status_code=500)
        if how == "set":
            response.status_code = 404
        if how == "crash":
            raise RuntimeError("a bug")
        return {}

    with serve_asgi(app) as port:
        got = [get(port, f"/{how}").status for how in ("raise", "return", "set", "crash", "ok", "raise", "ok", "ok")]
    # Every failure given back: only the two successes count.
    assert got == [503, 500, 404, 500, 200, 503, 200, 429]


def test_default_limits_give_failures_back_by_the_responses_status() -> None:
    def build(app: FastAPI, limiter: Any) -> None:
        @app.get("/{how}")
        async def route(how: str) -> Any:
            return JSONResponse({}, status_code=500 if how == "fail" else 200)

    app, limiter = make_app(ratomic_names(), build, middleware=True, default_limits=["2/hour"], skip_failed_requests=True)
    with serve_asgi(app) as port:
        # key_style="url": each path its own count.
        assert [get(port, "/fail").status for _ in range(4)] == [500] * 4
        assert [get(port, "/ok").status for _ in range(3)] == [200, 200, 429]


def test_reset_and_enabled_at_run_time() -> None:
    def build(app: FastAPI, limiter: Any) -> None:
        @app.get("/a")
        @limiter.limit("1/hour")
        async def a(request: Request) -> dict:
            return {}

    app, limiter = make_app(ratomic_names(), build)
    with serve_asgi(app) as port:
        assert [get(port, "/a").status for _ in range(2)] == [200, 429]
        limiter.reset()
        assert [get(port, "/a").status for _ in range(2)] == [200, 429]
        limiter.enabled = False
        assert get(port, "/a").status == 200


def test_starlette_route_limit() -> None:
    from starlette.applications import Starlette
    from starlette.routing import Route

    from ratomic.starlette import Limiter, RateLimitExceeded, _rate_limit_exceeded_handler, get_remote_address

    limiter = Limiter(key_func=get_remote_address, clock=ratomic.ManualClock(), headers_enabled=True)

    @limiter.limit("2/hour")
    async def homepage(request: Any) -> PlainTextResponse:
        return PlainTextResponse(f"left {request.state.rate_limit.remaining}")

    app = Starlette(routes=[Route("/", homepage)])
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
    with serve_asgi(app) as port:
        rs = [get(port) for _ in range(3)]
    assert [(r.status, r.body if r.status == 200 else None) for r in rs] == [(200, b"left 1"), (200, b"left 0"), (429, None)]
    assert rate_limit_fields(rs[2]) == {
        "x-ratelimit-limit": "2",
        "x-ratelimit-remaining": "0",
        "x-ratelimit-reset": "3600",
        "retry-after": "3600",  # a fixed window (slowapi's default strategy): when it turns
    }


def test_a_missing_limiter_is_named() -> None:
    app = FastAPI()
    app.add_middleware(ratomic.fastapi.LimiterMiddleware)
    app.add_api_route("/", _plain_endpoint())
    with serve_asgi(app) as port:
        assert get(port).status == 500  # the server's answer to the RuntimeError below
    with pytest.raises(RuntimeError, match="app.state.limiter"):
        import asyncio

        async def nothing(*a: Any) -> None: ...

        asyncio.run(ratomic.fastapi.LimiterMiddleware(nothing)({"type": "http", "app": app}, nothing, nothing))


@pytest.mark.parametrize(
    "options, match",
    [
        ({"storage_uri": "redis://127.0.0.1:6379"}, "pass a ratomic.redis limiter where a rate string goes"),
        ({"in_memory_fallback": ["1/s"]}, "on_error=ratomic.FixedWindow"),
        ({"in_memory_fallback_enabled": True}, "on_error=ratomic.FixedWindow"),
        ({"retry_after": "http-date"}, "Retry-After is written in seconds"),
        ({"auto_check": False}, "exempt_when="),
        ({"config_filename": ".env"}, "pass the settings as arguments"),
        ({"strategy": "leaky-bucket"}, "'fixed-window', 'moving-window', 'sliding-window-counter', 'token-bucket'"),
        ({"key_style": "route"}, 'key_style must be "url" or "endpoint"'),
        ({"default_limits": ["5 per fortnight"]}, "fortnight"),
    ],
)
def test_options_ratomic_does_not_take_are_errors_naming_the_alternative(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ratomic.fastapi.Limiter(key_func=ratomic.fastapi.get_remote_address, **options)


def test_get_ipaddr_is_refused_naming_trusted_proxies() -> None:
    from ratomic.starlette import get_ipaddr

    with pytest.raises(TypeError, match="trusted_proxies=N"):
        ratomic.fastapi.Limiter(key_func=get_ipaddr)


def test_strategies_decide_as_named() -> None:
    clock = ratomic.ManualClock()

    def build(app: FastAPI, limiter: Any) -> None:
        @app.get("/a")
        @limiter.limit("2/minute")
        async def a(request: Request) -> dict:
            return {}

    results = {}
    for strategy in ("fixed-window", "moving-window", "token-bucket"):
        clock.set(0)
        app, _ = make_app(ratomic_names(), build, strategy=strategy, clock=clock)
        with serve_asgi(app) as port:
            first = [get(port, "/a").status for _ in range(3)]
            clock.advance(30)  # half a window: a token bucket has one back
            mid = get(port, "/a").status
            clock.advance(31)  # the next window
            after = get(port, "/a").status
        results[strategy] = (first, mid, after)
    assert results["fixed-window"] == ([200, 200, 429], 429, 200)
    assert results["token-bucket"] == ([200, 200, 429], 200, 200)
    # The sliding window still counts most of the last window 1 s into the next.
    assert results["moving-window"] == ([200, 200, 429], 429, 429)
