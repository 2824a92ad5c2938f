"""The middlewares' per-request options over real sockets (issue 38):
``skip``, ``enabled``, a limit chosen per request (``quota`` on a
``Quotas``, ``limits`` on a ``Limiter``), a custom denial (``on_deny``),
the decision handed to the app, and skipping successful or failed
responses as an exact refund — under concurrency, against the bound.
uvicorn serves ASGI, wsgiref WSGI (a threading server where requests race);
a real HTTP client asks."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socketserver
import threading
from typing import Any, Callable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

import ratomic
import ratomic.asgi
import ratomic.wsgi
from ratomic import Rule
from test_http import check_denial, get, rate_limit_fields, serve_asgi, serve_wsgi

pytest.importorskip("uvicorn")


def _status_of(path: str) -> int:
    return {"/fail": 500, "/missing": 404, "/created": 201}.get(path, 200)


async def routes(scope: Any, receive: Any, send: Any) -> None:
    """200 (``/fail``: 500, ``/missing``: 404; ``/raise`` raises), the
    body the decision the middleware handed over: its ``remaining``."""
    path = scope["path"]
    await asyncio.sleep(0)  # let concurrent requests interleave here
    if path == "/raise":
        raise RuntimeError("the app failed")
    d = scope.get("state", {}).get("rate_limit", "absent")
    body = ("-" if d is None else d if isinstance(d, str) else str(d.remaining)).encode()
    await send({"type": "http.response.start", "status": _status_of(path), "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


def routes_wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
    path = environ["PATH_INFO"]
    if path == "/raise":
        raise RuntimeError("the app failed")
    d = environ.get("ratomic.rate_limit", "absent")
    body = ("-" if d is None else d if isinstance(d, str) else str(d.remaining)).encode()
    status = _status_of(path)
    start_response(f"{status} {'OK' if status < 400 else 'Error'}", [("Content-Type", "text/plain")])
    return [body]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


@contextlib.contextmanager
def serve_wsgi_threaded(app: Any) -> Any:
    """wsgiref, a thread per request: requests race in the middleware."""
    server = make_server("127.0.0.1", 0, app, server_class=_ThreadingWSGIServer, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


# Each face: (serve, middleware class, app) — the options are the same.
FACES = {
    "asgi": (serve_asgi, ratomic.asgi.RateLimitMiddleware, routes),
    "wsgi": (serve_wsgi, ratomic.wsgi.RateLimitMiddleware, routes_wsgi),
}


@pytest.mark.parametrize("face", sorted(FACES))
def test_skip_leaves_a_request_uncounted_and_unmarked(face: str) -> None:
    serve, middleware, app = FACES[face]
    limiter = ratomic.TokenBucket("2/min", clock=ratomic.ManualClock())
    where = (lambda s: s["path"]) if face == "asgi" else (lambda e: e["PATH_INFO"])
    with serve(middleware(app, limiter, skip=lambda request: where(request) == "/health")) as port:
        for _ in range(5):
            r = get(port, "/health")
            assert (r.status, r.body, rate_limit_fields(r)) == (200, b"-", {})
        assert [get(port).status for _ in range(3)] == [200, 200, 429]
        assert get(port, "/health").status == 200
    assert limiter.peek("127.0.0.1", 0).remaining == 0


@pytest.mark.parametrize("face", sorted(FACES))
def test_enabled_false_passes_everything_untouched_until_switched_on(face: str) -> None:
    serve, middleware, app = FACES[face]
    limiter = ratomic.TokenBucket("1/min", clock=ratomic.ManualClock())
    mw = middleware(app, limiter, enabled=False)
    with serve(mw) as port:
        for _ in range(3):
            r = get(port)
            assert (r.status, r.body, rate_limit_fields(r)) == (200, b"absent", {})
        mw.enabled = True
        r = get(port)
        assert (r.status, r.body, r.headers["ratelimit"]) == (200, b"0", '"default";r=0;t=60')
        check_denial(get(port), ["default"])
        mw.enabled = False
        assert get(port).status == 200
    with pytest.raises(TypeError, match="enabled must be True or False"):
        mw.enabled = 0  # type: ignore[assignment]


@pytest.mark.parametrize("face", sorted(FACES))
def test_the_decision_is_handed_to_the_app(face: str) -> None:
    serve, middleware, app = FACES[face]
    limiter = ratomic.FixedWindow("3/min", clock=ratomic.ManualClock())
    with serve(middleware(app, limiter)) as port:
        assert [get(port).body for _ in range(3)] == [b"2", b"1", b"0"]


@pytest.mark.parametrize("face", sorted(FACES))
def test_a_quota_chosen_per_request_from_quotas(face: str) -> None:
    serve, middleware, app = FACES[face]
    plans = {"free": "2/min", "pro": Rule.token_bucket("4/min")}

    def plan(request: Any) -> Any:
        headers = dict(request["headers"]) if face == "asgi" else {b"x-plan": request["HTTP_X_PLAN"].encode()}
        return plans[headers[b"x-plan"].decode()]

    quotas = ratomic.Quotas(clock=ratomic.ManualClock())
    with serve(middleware(app, quotas, quota=plan, name="plan")) as port:
        free = [get(port, headers={"X-Plan": "free"}) for _ in range(3)]
        pro = [get(port, headers={"X-Plan": "pro"}) for _ in range(5)]
    assert [r.status for r in free] == [200, 200, 429]
    assert [r.status for r in pro] == [200, 200, 200, 200, 429]
    assert free[0].headers["ratelimit-policy"] == '"plan";q=2;w=60'
    assert pro[0].headers["ratelimit-policy"] == '"plan";q=4;w=60'
    assert [r.body for r in pro[:4]] == [b"3", b"2", b"1", b"0"]
    check_denial(pro[4], ["plan"])


@pytest.mark.parametrize("face", sorted(FACES))
def test_limits_chosen_per_request_from_a_limiter(face: str) -> None:
    serve, middleware, app = FACES[face]
    clock = ratomic.ManualClock()
    api = ratomic.Limiter({"burst": "2/s", "daily": Rule.fixed_window("3/day"), "enterprise": "100/s"}, clock=clock)
    free = api.limit_set(["burst", "daily"])
    where = (lambda s: s["path"]) if face == "asgi" else (lambda e: e["PATH_INFO"])
    with serve(middleware(app, api, limits=lambda r: ["enterprise"] if where(r) == "/big" else free)) as port:
        r = get(port)
        assert r.headers["ratelimit-policy"] == '"burst";q=2;w=1, "daily";q=3;w=86400'
        assert r.headers["ratelimit"] == '"burst";r=1;t=1, "daily";r=2;t=86400'
        assert get(port).status == 200
        check_denial(get(port), ["burst"])
        clock.advance(1)
        assert get(port).status == 200
        check_denial(get(port), ["daily"])
        big = get(port, "/big")
        assert big.status == 200 and big.headers["ratelimit-policy"] == '"enterprise";q=100;w=1'


def test_asgi_on_deny_answers_with_the_apps_response_and_keeps_the_fields() -> None:
    from starlette.responses import JSONResponse

    seen: list[Any] = []

    async def on_deny(scope: Any, decision: ratomic.Decision) -> JSONResponse:
        seen.append(decision)
        return JSONResponse({"error": "slow down", "retry_in": decision.retry_after}, status_code=429)

    limiter = ratomic.TokenBucket("1/min", clock=ratomic.ManualClock())
    with serve_asgi(ratomic.asgi.RateLimitMiddleware(routes, limiter, on_deny=on_deny)) as port:
        assert get(port).status == 200
        r = get(port)
    assert (r.status, r.body, r.headers["content-type"]) == (429, b'{"error":"slow down","retry_in":60.0}', "application/json")
    assert rate_limit_fields(r) == {"ratelimit-policy": '"default";q=1;w=60', "ratelimit": '"default";r=0;t=60', "retry-after": "60"}
    assert len(seen) == 1 and not seen[0] and seen[0].retry_after == 60.0


def test_wsgi_on_deny_answers_with_a_wsgi_app_and_keeps_the_fields() -> None:
    def on_deny(environ: Any, decision: ratomic.Decision) -> Any:
        def app(environ: Any, start_response: Any) -> list[bytes]:
            start_response("429 Too Many Requests", [("Content-Type", "text/plain"), ("Retry-After", "3600")])
            return [f"come back in {decision.retry_after:.0f} s".encode()]

        return app

    limiter = ratomic.TokenBucket("1/min", clock=ratomic.ManualClock())
    with serve_wsgi(ratomic.wsgi.RateLimitMiddleware(routes_wsgi, limiter, on_deny=on_deny)) as port:
        assert get(port).status == 200
        r = get(port)
    assert (r.status, r.body) == (429, b"come back in 60 s")
    # The app's own Retry-After stays; the fields it did not set are added.
    assert rate_limit_fields(r) == {"ratelimit-policy": '"default";q=1;w=60', "ratelimit": '"default";r=0;t=60', "retry-after": "3600"}


# ---- skipping successful or failed responses: a refund ----------------------


@pytest.mark.parametrize("face", sorted(FACES))
def test_skip_failed_requests_gives_failures_back(face: str) -> None:
    serve, middleware, app = FACES[face]
    limiter = ratomic.TokenBucket("2/min", clock=ratomic.ManualClock())
    with serve(middleware(app, limiter, skip_failed_requests=True)) as port:
        statuses = [get(port, p).status for p in ("/fail", "/missing", "/raise", "/fail", "/", "/", "/fail", "/")]
        # A failure is charged, then given back: the two successes spend the limit.
        assert statuses == [500, 404, 500, 500, 200, 200, 429, 429]
        r = get(port, "/fail")
        check_denial(r, ["default"])
    assert limiter.peek("127.0.0.1", 0).remaining == 0


@pytest.mark.parametrize("face", sorted(FACES))
def test_skip_successful_requests_counts_failures_only(face: str) -> None:
    serve, middleware, app = FACES[face]
    limiter = ratomic.TokenBucket("2/min", clock=ratomic.ManualClock())
    with serve(middleware(app, limiter, skip_successful_requests=True)) as port:
        assert [get(port, p).status for p in ("/", "/created", "/", "/fail", "/", "/missing", "/", "/")] == [
            200,
            201,
            200,
            500,
            200,
            404,
            429,
            429,
        ]
    assert limiter.peek("127.0.0.1", 0).remaining == 0


@pytest.mark.parametrize("face", sorted(FACES))
def test_request_was_successful_decides_what_a_success_is(face: str) -> None:
    serve, middleware, app = FACES[face]
    limiter = ratomic.TokenBucket("2/min", clock=ratomic.ManualClock())
    # A 404 is the client's answer, not a failure of the service.
    mw = middleware(app, limiter, skip_failed_requests=True, request_was_successful=lambda status: status < 500)
    with serve(mw) as port:
        assert [get(port, p).status for p in ("/fail", "/missing", "/fail", "/", "/")] == [500, 404, 500, 200, 429]


@pytest.mark.parametrize("face", sorted(FACES))
def test_refunds_are_exact_and_never_pass_the_bound_under_concurrency(face: str) -> None:
    serve = serve_asgi if face == "asgi" else serve_wsgi_threaded
    _, middleware, app = FACES[face]
    capacity = 10
    limiter = ratomic.TokenBucket(capacity, "10/h", clock=ratomic.ManualClock())  # a clock that stands still: no refill
    paths = ["/fail", "/"] * 40
    with serve(middleware(app, limiter, skip_failed_requests=True)) as port:
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda p: (p, get(port, p).status), paths))
        ok = sum(1 for p, s in results if p == "/" and s == 200)
        assert ok <= capacity, f"{ok} successes passed a bound of {capacity}"
        assert {s for p, s in results if p == "/fail"} <= {500, 429}
        # Exact: every failure given back, every success kept.
        assert limiter.peek("127.0.0.1", 0).remaining == capacity - ok
        more = 0
        while get(port).status == 200:
            more += 1
        assert ok + more == capacity


def test_bad_options_are_refused_at_setup_naming_the_alternative() -> None:
    tb = ratomic.TokenBucket("2/s")
    for kwargs, error, match in [
        ({"skip": "yes"}, TypeError, "skip must be a function of the request"),
        ({"on_deny": 429}, TypeError, "on_deny must be a function"),
        ({"skip_failed_requests": "yes"}, TypeError, "skip_failed_requests must be True or False"),
        ({"request_was_successful": 400}, TypeError, "request_was_successful must be a function"),
        ({"quota": "5/min"}, TypeError, "quota= is for a ratomic.Quotas"),
        ({"limits": ["burst"]}, TypeError, "limits= chooses among a ratomic.Limiter's limits"),
        ({"cost": -1}, ValueError, "invalid cost: -1"),
        ({"enabled": "no"}, TypeError, "enabled must be True or False"),
    ]:
        with pytest.raises(error, match=match):
            ratomic.asgi.RateLimitMiddleware(routes, tb, **kwargs)
        with pytest.raises(error, match=match):
            ratomic.wsgi.RateLimitMiddleware(routes_wsgi, tb, **kwargs)
    with pytest.raises(TypeError, match="pass quota= a rate string"):
        ratomic.asgi.RateLimitMiddleware(routes, ratomic.Quotas())
    with pytest.raises(ValueError, match="burst"):
        ratomic.asgi.RateLimitMiddleware(routes, ratomic.Limiter({"a": "1/s"}), limits=["burst"])
