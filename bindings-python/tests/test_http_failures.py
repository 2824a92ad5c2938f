"""What a client sees when the limiter cannot decide, and what the log
gets: Redis really down (a redis-server killed), a key the limiter refuses,
a request with no client address (uvicorn on a Unix socket) — through
uvicorn (ASGI, FastAPI) and wsgiref (WSGI) on real sockets. The client gets
a generic RFC 9457 document (503, 400 or 500); the address, the error's
text and the key's length go to the ``ratomic.http`` logger only."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import tempfile
import threading
import time
import uuid
from typing import Any, Callable

import pytest

import ratomic
import ratomic.asgi
import ratomic.wsgi

redis = pytest.importorskip("redis")
uvicorn = pytest.importorskip("uvicorn")

import redis.asyncio  # noqa: E402
import redis.backoff  # noqa: E402
import redis.retry  # noqa: E402

from ratomic.redis import RedisTokenBucket  # noqa: E402
from redis_server import Server  # noqa: E402
from test_http import Response, fastapi_app, get, get_lines, hello, hello_wsgi, serve_asgi, serve_wsgi  # noqa: E402
from test_http_redis import served  # noqa: E402

GENERIC = {
    503: {
        "type": "about:blank",
        "title": "Service Unavailable",
        "status": 503,
        "detail": "Rate limiting is unavailable; try again later.",
    },
    400: {"type": "about:blank", "title": "Bad Request", "status": 400, "detail": "This request cannot be rate limited."},
    500: {
        "type": "about:blank",
        "title": "Internal Server Error",
        "status": 500,
        "detail": "Rate limiting is misconfigured on this server.",
    },
}


def check_generic(r: Response, status: int, secrets: list[str]) -> None:
    """A refusal with the generic body, and nothing of ``secrets`` (or of an
    error's wording) in its body or header fields."""
    assert r.status == status, (r.status, r.body)
    assert r.headers["content-type"] == ratomic.PROBLEM_CONTENT_TYPE
    assert json.loads(r.body) == GENERIC[status]
    seen = r.body.decode() + "".join(f"{n}: {v}\n" for n, v in r.headers.items())
    for secret in [*secrets, "rror 111", "Connection", "refused", "bytes", "Traceback", "edis", "connecting"]:
        assert secret not in seen, f"{secret!r} reached the client: {seen}"
    assert ("retry-after" in r.headers) == (status == 503)


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ratomic.http" and r.levelno == level]


def logged_with_cause(caplog: pytest.LogCaptureFixture, needle: str) -> list[logging.LogRecord]:
    """Records of ratomic.http whose message or traceback names ``needle``."""
    out = []
    for r in caplog.records:
        if r.name != "ratomic.http":
            continue
        text = r.getMessage()
        if r.exc_info:
            text += logging.Formatter().formatException(r.exc_info)
        if needle in text:
            out.append(r)
    return out


def dead_redis() -> Server:
    """A redis-server, started and then killed: its port refuses connections."""
    s = Server()
    s.proc.kill()
    s.proc.wait()
    return s


@pytest.mark.parametrize("face", ["asgi", "fastapi"])
def test_redis_down_is_a_generic_503_and_the_log_has_the_cause_asgi(
    face: str, caplog: pytest.LogCaptureFixture
) -> None:
    s = dead_redis()
    # No retries (README's client settings): redis-py 8's default client
    # retries a refused connection 10 times with backoff, seconds a call.
    client = redis.asyncio.Redis(port=s.port, retry=redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0))
    prefix = f"down-{uuid.uuid4().hex[:8]}:"
    # The refused connection, which names the address, must end each call:
    # with the 50 ms default a loaded machine's slow connect (getaddrinfo
    # runs in a thread) ends it by the timeout instead, whose error does not.
    limiter = RedisTokenBucket("5/s", client=client, prefix=prefix, breaker_threshold=0, timeout=10.0)
    if face == "asgi":
        closed, opened = (ratomic.asgi.RateLimitMiddleware(hello, limiter, on_error=e) for e in ("deny", "allow"))
    else:
        closed, opened = (fastapi_app(limiter, f"/{p}/", on_error=e) for p, e in (("closed", "deny"), ("open", "allow")))
    try:
        with caplog.at_level(logging.WARNING, logger="ratomic.http"):
            with serve_asgi(served({"closed": closed, "open": opened}, client), lifespan="on") as port:
                for _ in range(3):
                    check_generic(get(port, "/closed/"), 503, ["127.0.0.1", str(s.port)])
                assert get(port, "/open/").status == 200, "on_error='allow': fail open"
        # The operator's log has the cause, with the address: once per
        # kind of failure and policy (the first at once, the rest counted).
        assert logged_with_cause(caplog, str(s.port)), caplog.text
        backend = records(caplog, logging.ERROR)
        assert len(backend) == 2, backend  # one for the 503s, one for the middleware failing open
        assert any("refused with a 503" in m for m in backend) and any("unchecked" in m for m in backend)
    finally:
        s.stop()


def test_redis_down_is_a_generic_503_and_the_log_has_the_cause_wsgi(caplog: pytest.LogCaptureFixture) -> None:
    s = dead_redis()
    client = redis.Redis(port=s.port, socket_timeout=0.5, retry=redis.retry.Retry(redis.backoff.NoBackoff(), 0))
    limiter = RedisTokenBucket("5/s", client=client, prefix=f"down-{uuid.uuid4().hex[:8]}:", breaker_threshold=0)
    try:
        with caplog.at_level(logging.WARNING, logger="ratomic.http"):
            with serve_wsgi(ratomic.wsgi.RateLimitMiddleware(hello_wsgi, limiter)) as port:
                for _ in range(3):
                    check_generic(get(port), 503, ["127.0.0.1", str(s.port)])
            with serve_wsgi(ratomic.wsgi.RateLimitMiddleware(hello_wsgi, limiter, on_error="allow")) as port:
                assert get(port).status == 200
        assert logged_with_cause(caplog, str(s.port)), caplog.text
        assert len(records(caplog, logging.ERROR)) == 2
    finally:
        client.close()
        s.stop()


@pytest.mark.parametrize("on_error", ["deny", "allow"])
def test_a_key_the_limiter_refuses_is_a_generic_400_whatever_on_error_says(
    on_error: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A key from the request (an API key header) too long for the limiter:
    # letting it through would let any client skip the limit.
    limiter = ratomic.TokenBucket("5/s", clock=ratomic.ManualClock())

    def api_key(request: Any) -> str:
        return dict(request["headers"])[b"x-api-key"].decode()

    def api_key_fastapi(request: Any) -> str:
        return str(request.headers["x-api-key"])

    long_key = "k" * 2000
    apps: list[tuple[str, Callable[[], Any]]] = [
        ("asgi", lambda: serve_asgi(ratomic.asgi.RateLimitMiddleware(hello, limiter, key=api_key, on_error=on_error))),
        ("fastapi", lambda: serve_asgi(fastapi_app(limiter, key=api_key_fastapi, on_error=on_error))),
        (
            "wsgi",
            lambda: serve_wsgi(
                ratomic.wsgi.RateLimitMiddleware(
                    hello_wsgi, limiter, key=lambda environ: environ["HTTP_X_API_KEY"], on_error=on_error
                )
            ),
        ),
    ]
    with caplog.at_level(logging.WARNING, logger="ratomic.http"):
        for face, serve in apps:
            with serve() as port:
                check_generic(get(port, headers={"X-API-Key": long_key}), 400, ["2000", "long", "1024"])
                assert get(port, headers={"X-API-Key": "short"}).status == 200, face
    warned = records(caplog, logging.WARNING)
    assert len(warned) == 3 and all("2000 bytes" in m for m in warned), warned


def serve_asgi_unix(app: Any, path: str) -> Any:
    """uvicorn on a Unix socket: ASGI requests without a client address."""
    config = uvicorn.Config(app, uds=path, log_level="error", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.005)
    return server, thread


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=10)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self.path)


def get_unix(path: str) -> Response:
    conn = UnixConnection(path)
    try:
        conn.request("GET", "/")
        r = conn.getresponse()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    finally:
        conn.close()


def test_no_client_address_is_a_500_and_one_error_naming_the_fix(caplog: pytest.LogCaptureFixture) -> None:
    limiter = ratomic.TokenBucket("5/s", clock=ratomic.ManualClock())
    with tempfile.TemporaryDirectory() as d, caplog.at_level(logging.WARNING, logger="ratomic.http"):
        path = f"{d}/app.sock"
        server, thread = serve_asgi_unix(ratomic.asgi.RateLimitMiddleware(hello, limiter), path)
        try:
            for _ in range(3):
                check_generic(get_unix(path), 500, [])
        finally:
            server.should_exit = True
            thread.join(10)
        # With a key function, the same server decides.
        keyed = ratomic.asgi.RateLimitMiddleware(hello, limiter, key=lambda scope: "everyone")
        server, thread = serve_asgi_unix(keyed, path)
        try:
            assert get_unix(path).status == 200
        finally:
            server.should_exit = True
            thread.join(10)
    errors = records(caplog, logging.ERROR)
    assert len(errors) == 1, errors
    assert 'scope["client"]' in errors[0] and "key=" in errors[0]


def test_an_untrusted_forwarded_for_is_a_warning_once(caplog: pytest.LogCaptureFixture) -> None:
    limiter = ratomic.TokenBucket("5/min", clock=ratomic.ManualClock())
    with caplog.at_level(logging.WARNING, logger="ratomic.http"):
        with serve_asgi(ratomic.asgi.RateLimitMiddleware(hello, limiter)) as port:
            for i in range(3):
                assert get_lines(port, [("X-Forwarded-For", f"198.51.100.{i}")]).status == 200
        with serve_asgi(ratomic.asgi.RateLimitMiddleware(hello, limiter, trusted_proxies=1)) as port:
            assert get_lines(port, [("X-Forwarded-For", "198.51.100.1")]).status == 200
    warned = records(caplog, logging.WARNING)
    assert len(warned) == 1 and "trusted_proxies=N" in warned[0], warned
