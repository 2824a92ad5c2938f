"""The HTTP middlewares over real sockets: uvicorn (ASGI, FastAPI) and
wsgiref (WSGI) on 127.0.0.1 port 0, driven by a real HTTP client."""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

import ratomic
import ratomic.asgi
import ratomic.wsgi
from ratomic import Rule
from ratomic._http import client_key

uvicorn = pytest.importorskip("uvicorn")


class Response:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


def get(port: int, path: str = "/", headers: dict[str, str] | None = None) -> Response:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return Response(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read())
    except urllib.error.HTTPError as e:
        with e:
            return Response(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())


def get_lines(port: int, lines: list[tuple[str, str]], path: str = "/") -> Response:
    """A GET whose header fields go out exactly as ``lines``: one field line
    each, repeated names kept as separate lines (as a proxy that appends its
    own ``X-Forwarded-For`` line sends them)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", path)
        for name, value in lines:
            conn.putheader(name, value)
        conn.endheaders()
        r = conn.getresponse()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


@contextlib.contextmanager
def serve_asgi(app, lifespan: str = "off"):
    # proxy_headers=False: uvicorn itself would otherwise take X-Forwarded-For
    # from a loopback peer as the client, which is what these tests check.
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error", lifespan=lifespan, proxy_headers=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:  # poll the server's own flag
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.005)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)


@contextlib.contextmanager
def serve_wsgi(app):
    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):  # keep test output clean
            pass

    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


async def hello(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


def hello_wsgi(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


def check_denial(r: Response, names: list[str]) -> None:
    assert r.status == 429
    assert int(r.headers["retry-after"]) >= 1
    assert r.headers["content-type"] == ratomic.PROBLEM_CONTENT_TYPE
    body = json.loads(r.body)
    assert body["status"] == 429 and body["violated-policies"] == names


def test_asgi_allows_then_denies_with_standard_headers():
    limiter = ratomic.TokenBucket("3/min", clock=ratomic.ManualClock())
    app = ratomic.asgi.RateLimitMiddleware(hello, limiter, name="per-ip")
    with serve_asgi(app) as port:
        for left in (2, 1, 0):
            r = get(port)
            assert r.status == 200 and r.body == b"hello"
            assert r.headers["ratelimit-policy"] == '"per-ip";q=3;w=60'
            assert r.headers["ratelimit"].startswith(f'"per-ip";r={left};t=')
        check_denial(get(port), ["per-ip"])


def test_asgi_forwarded_for_is_ignored_unless_proxies_are_trusted():
    clock = ratomic.ManualClock()
    spoofable = ratomic.asgi.RateLimitMiddleware(hello, ratomic.TokenBucket("1/min", clock=clock))
    with serve_asgi(spoofable) as port:
        assert get(port, headers={"X-Forwarded-For": "1.1.1.1"}).status == 200
        # A forged header does not make a new client.
        assert get(port, headers={"X-Forwarded-For": "2.2.2.2"}).status == 429
    behind_proxy = ratomic.asgi.RateLimitMiddleware(hello, ratomic.TokenBucket("1/min", clock=clock), trusted_proxies=1)
    with serve_asgi(behind_proxy) as port:
        assert get(port, headers={"X-Forwarded-For": "6.6.6.6, 1.1.1.1"}).status == 200
        assert get(port, headers={"X-Forwarded-For": "7.7.7.7, 1.1.1.1"}).status == 429, "same client, forged prefix"
        assert get(port, headers={"X-Forwarded-For": "2.2.2.2"}).status == 200, "another client is independent"


def forged_then_appended(i: int) -> list[tuple[str, str]]:
    """What HAProxy's ``option forwardfor`` passes on: the client's own
    (forged) line, then a line of its own with the address it saw."""
    return [("X-Forwarded-For", f"6.6.{i}.{i}"), ("X-Forwarded-For", "203.0.113.7")]


def fastapi_app(limiter, path: str = "/", **options):
    fastapi = pytest.importorskip("fastapi")
    from ratomic.fastapi import RateLimit, RateLimitExceeded, problem_response

    app = fastapi.FastAPI()
    app.add_exception_handler(RateLimitExceeded, problem_response)

    @app.get(path, dependencies=[fastapi.Depends(RateLimit(limiter, **options))])
    async def root() -> dict:
        return {"ok": True}

    return app


# Each face behind one trusted proxy, served for real: ASGI and FastAPI by
# uvicorn (h11 keeps repeated field lines apart), WSGI by wsgiref.
BEHIND_ONE_PROXY = {
    "asgi": lambda limiter: serve_asgi(ratomic.asgi.RateLimitMiddleware(hello, limiter, trusted_proxies=1)),
    "fastapi": lambda limiter: serve_asgi(fastapi_app(limiter, trusted_proxies=1)),
    "wsgi": lambda limiter: serve_wsgi(ratomic.wsgi.RateLimitMiddleware(hello_wsgi, limiter, trusted_proxies=1)),
}


@pytest.mark.parametrize("face", sorted(BEHIND_ONE_PROXY))
def test_a_proxy_that_appends_its_own_forwarded_line_is_the_one_trusted(face: str) -> None:
    limiter = ratomic.TokenBucket("3/min", clock=ratomic.ManualClock())
    with BEHIND_ONE_PROXY[face](limiter) as port:
        passed = sum(get_lines(port, forged_then_appended(i)).status == 200 for i in range(10))
    assert passed == 3, f"{face}: {passed} of 10 passed a limit of 3 with a forged first line"
    assert limiter.peek("203.0.113.7", 0).remaining == 0, "the proxy's hop is the key"


@pytest.mark.parametrize("face", sorted(BEHIND_ONE_PROXY))
@pytest.mark.parametrize("hop", ["203.0.113.7:{port}", "[2001:db8::7]:{port}"])
def test_a_hop_with_a_port_is_one_client_whatever_the_port(face: str, hop: str) -> None:
    limiter = ratomic.TokenBucket("3/min", clock=ratomic.ManualClock())
    with BEHIND_ONE_PROXY[face](limiter) as port:
        statuses = [get_lines(port, [("X-Forwarded-For", hop.format(port=40000 + i))]).status for i in range(10)]
    assert statuses.count(200) == 3, f"{face}: {statuses}"


def test_asgi_multi_limit_lists_every_policy_and_the_denier():
    clock = ratomic.ManualClock()
    limiter = ratomic.Limiter({"burst": "2/s", "daily": Rule.fixed_window("100/day")}, clock=clock)
    app = ratomic.asgi.RateLimitMiddleware(hello, limiter, cost=lambda scope: 1, legacy_headers=True)
    with serve_asgi(app) as port:
        r = get(port)
        assert r.headers["ratelimit-policy"] == '"burst";q=2;w=1, "daily";q=100;w=86400'
        assert r.headers["x-ratelimit-limit"] == "2"
        get(port)
        check_denial(get(port), ["burst"])


def test_asgi_a_key_too_long_is_a_400_even_when_failing_open():
    too_long = lambda scope: "k" * 5000  # above max_key_len
    limiter = ratomic.TokenBucket("5/s", clock=ratomic.ManualClock())
    for on_error in ("deny", "allow"):
        with serve_asgi(ratomic.asgi.RateLimitMiddleware(hello, limiter, key=too_long, on_error=on_error)) as port:
            r = get(port)
            assert r.status == 400 and json.loads(r.body)["title"] == "Bad Request"
            assert b"5000" not in r.body


def test_fastapi_dependency_per_route():
    fastapi = pytest.importorskip("fastapi")
    from ratomic.fastapi import RateLimit, RateLimitExceeded, problem_response

    app = fastapi.FastAPI()
    app.add_exception_handler(RateLimitExceeded, problem_response)
    limited = RateLimit(ratomic.TokenBucket("2/min", clock=ratomic.ManualClock()), name="search")

    @app.get("/search", dependencies=[fastapi.Depends(limited)])
    async def search() -> dict:
        return {"ok": True}

    @app.get("/free")
    async def free() -> dict:
        return {"ok": True}

    with serve_asgi(app) as port:
        r = get(port, "/search")
        assert r.status == 200 and r.headers["ratelimit"].startswith('"search";r=1;')
        get(port, "/search")
        check_denial(get(port, "/search"), ["search"])
        assert get(port, "/free").status == 200, "other routes are not limited"


def test_wsgi_allows_then_denies_with_standard_headers():
    limiter = ratomic.TokenBucket("2/min", clock=ratomic.ManualClock())
    with serve_wsgi(ratomic.wsgi.RateLimitMiddleware(hello_wsgi, limiter)) as port:
        r = get(port)
        assert r.status == 200 and r.headers["ratelimit-policy"] == '"default";q=2;w=60'
        assert get(port).status == 200
        check_denial(get(port), ["default"])


def rate_limit_fields(r: Response) -> dict[str, str]:
    return {n: v for n, v in r.headers.items() if "ratelimit" in n or n == "retry-after"}


def test_asgi_writes_the_draft_it_is_asked_for():
    limiter = ratomic.FixedWindow("2/min", clock=ratomic.ManualClock())
    app = ratomic.asgi.RateLimitMiddleware(hello, limiter, name="per-ip", standard_headers="draft-7")
    with serve_asgi(app) as port:
        r = get(port)
        assert r.status == 200 and r.body == b"hello"
        assert rate_limit_fields(r) == {"ratelimit-policy": "2;w=60", "ratelimit": "limit=2, remaining=1, reset=60"}
        get(port)
        r = get(port)
        check_denial(r, ["per-ip"])
        assert rate_limit_fields(r) == {
            "ratelimit-policy": "2;w=60",
            "ratelimit": "limit=2, remaining=0, reset=60",
            "retry-after": "60",
        }


def test_fastapi_writes_the_draft_it_is_asked_for_on_a_limiter():
    fastapi = pytest.importorskip("fastapi")
    from ratomic.fastapi import RateLimit, RateLimitExceeded, problem_response

    app = fastapi.FastAPI()
    app.add_exception_handler(RateLimitExceeded, problem_response)
    limiter = ratomic.Limiter({"burst": "1/s", "daily": Rule.fixed_window("100/day")}, clock=ratomic.ManualClock())

    @app.get("/", dependencies=[fastapi.Depends(RateLimit(limiter, standard_headers="draft-6"))])
    async def root() -> dict:
        return {"ok": True}

    with serve_asgi(app) as port:
        r = get(port)
        assert r.status == 200
        # The combined decision: burst has the least left, the day the latest reset.
        assert rate_limit_fields(r) == {
            "ratelimit-policy": "1;w=1, 100;w=86400",
            "ratelimit-limit": "1",
            "ratelimit-remaining": "0",
            "ratelimit-reset": "86400",
        }
        r = get(port)
        check_denial(r, ["burst"])
        assert r.headers["ratelimit-remaining"] == "0" and r.headers["retry-after"] == "1"


def test_asgi_without_standard_headers_still_says_when_to_retry():
    limiter = ratomic.TokenBucket("1/min", clock=ratomic.ManualClock())
    app = ratomic.asgi.RateLimitMiddleware(hello, limiter, standard_headers=False)
    with serve_asgi(app) as port:
        r = get(port)
        assert r.status == 200 and rate_limit_fields(r) == {}
        r = get(port)
        check_denial(r, ["default"])
        assert rate_limit_fields(r) == {"retry-after": "60"}


def test_wsgi_without_standard_headers_keeps_the_legacy_fields():
    limiter = ratomic.TokenBucket("1/min", clock=ratomic.ManualClock())
    app = ratomic.wsgi.RateLimitMiddleware(hello_wsgi, limiter, standard_headers=False, legacy_headers=True)
    with serve_wsgi(app) as port:
        r = get(port)
        assert r.status == 200
        assert rate_limit_fields(r) == {"x-ratelimit-limit": "1", "x-ratelimit-remaining": "0", "x-ratelimit-reset": "60"}
        r = get(port)
        check_denial(r, ["default"])
        assert rate_limit_fields(r) == {
            "retry-after": "60",
            "x-ratelimit-limit": "1",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-reset": "60",
        }


def test_client_keys():
    assert client_key("10.0.0.1", None, 0, 64) == "10.0.0.1"
    assert client_key("10.0.0.1", "9.9.9.9", 0, 64) == "10.0.0.1", "not trusted: ignored"
    assert client_key("10.0.0.1", "6.6.6.6, 9.9.9.9", 1, 64) == "9.9.9.9"
    assert client_key("10.0.0.1", "6.6.6.6, 9.9.9.9", 2, 64) == "6.6.6.6"
    assert client_key("10.0.0.1", "9.9.9.9", 2, 64) == "10.0.0.1", "fewer hops than proxies: the peer"
    assert client_key("2001:db8:1:2:3:4:5:6", None, 0, 64) == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:2:ffff::1", None, 0, 64) == "2001:db8:1:2::/64"
    assert client_key("2001:db8:1:2::1", None, 0, 128) == "2001:db8:1:2::1/128"
    assert client_key("::ffff:10.0.0.1", None, 0, 64) == "10.0.0.1"
    assert client_key(None, None, 0, 64) is None
    # The same keys from a request, for key callables that combine them.
    scope = {"type": "http", "client": ("2001:db8:1:2::ffff", 5000), "headers": [(b"x-forwarded-for", b"10.9.9.9")]}
    assert ratomic.asgi.client_key(scope) == "2001:db8:1:2::/64"
    assert ratomic.asgi.client_key(scope, ipv6_prefix=48) == "2001:db8:1::/48"
    assert ratomic.asgi.client_key(scope, trusted_proxies=1) == "10.9.9.9"
    assert ratomic.asgi.client_key({"type": "http", "headers": []}) is None
    environ = {"REMOTE_ADDR": "::ffff:10.0.0.1", "HTTP_X_FORWARDED_FOR": "10.9.9.9"}
    assert ratomic.wsgi.client_key(environ) == "10.0.0.1"
    assert ratomic.wsgi.client_key(environ, trusted_proxies=1) == "10.9.9.9"
    # Ports some proxies append are not part of the client.
    for hop, key in [
        ("10.9.9.9:443", "10.9.9.9"),
        ("[2001:db8:1:2::9]:443", "2001:db8:1:2::/64"),
        ("[2001:db8:1:2::9]", "2001:db8:1:2::/64"),
        ("2001:db8:1:2::9", "2001:db8:1:2::/64"),
        ("::ffff:10.9.9.9", "10.9.9.9"),
    ]:
        assert client_key("10.0.0.1", f"6.6.6.6:1, {hop}", 1, 64) == key, hop
    # Every X-Forwarded-For line of an ASGI request, in order.
    two_lines = {**scope, "headers": [(b"x-forwarded-for", b"6.6.6.6"), (b"X-Forwarded-For", b"10.9.9.9:80")]}
    assert ratomic.asgi.client_key(two_lines, trusted_proxies=1) == "10.9.9.9"
    assert ratomic.asgi.client_key(two_lines, trusted_proxies=2) == "6.6.6.6"


def test_bad_options_are_refused_at_setup():
    tb = ratomic.TokenBucket("2/s")
    for kwargs, error in [
        ({"trusted_proxies": -1}, ValueError),
        ({"ipv6_prefix": 129}, ValueError),
        ({"on_error": "maybe"}, ValueError),
        ({"standard_headers": "draft-9"}, ValueError),
        ({"standard_headers": "Draft-7"}, ValueError),
        ({"standard_headers": 1}, ValueError),
        ({"standard_headers": None}, ValueError),
        ({"name": "caf\u00e9"}, ratomic.InvalidArgumentError),
    ]:
        with pytest.raises(error):
            ratomic.asgi.RateLimitMiddleware(hello, tb, **kwargs)
    with pytest.raises(TypeError):
        ratomic.wsgi.RateLimitMiddleware(hello_wsgi, object())  # type: ignore[arg-type]
    # A limit no header can name: refused at set-up, not on every request.
    with pytest.raises(ratomic.InvalidArgumentError, match="caf"):
        ratomic.asgi.RateLimitMiddleware(hello, ratomic.Limiter({"burst": "5/s", "caf\u00e9": "100/d"}))
    with pytest.raises(ValueError, match=r'standard_headers must be True \(draft-11\), False, "draft-11", "draft-8", '):
        ratomic.wsgi.RateLimitMiddleware(hello_wsgi, tb, standard_headers="draft-9")  # type: ignore[arg-type]
