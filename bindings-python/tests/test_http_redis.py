"""The HTTP middlewares with limiters on Redis (``ratomic.redis``): a real
redis-server, uvicorn (ASGI, FastAPI) and wsgiref (WSGI) on 127.0.0.1 port
0, a real HTTP client. ASGI awaits an asyncio client's decisions; WSGI
uses a blocking client; a Redis that stops answering is a request the
limiter cannot judge (or its own ``on_error`` decides) — never a 500."""

from __future__ import annotations

import json
import uuid
from typing import Any, Literal

import pytest

import ratomic
import ratomic.asgi
import ratomic.wsgi
from ratomic import Rule

redis = pytest.importorskip("redis")
pytest.importorskip("uvicorn")

import redis.asyncio  # noqa: E402

from ratomic.redis import RedisFixedWindow, RedisLimiter, RedisTokenBucket  # noqa: E402
from redis_server import Server  # noqa: E402
from test_http import check_denial, get, hello, hello_wsgi, serve_asgi, serve_wsgi  # noqa: E402


DRAFTS: tuple[Literal["draft-11", "draft-8", "draft-7", "draft-6"], ...] = ("draft-11", "draft-8", "draft-7", "draft-6")


@pytest.fixture
def prefix() -> str:
    return f"http-{uuid.uuid4().hex[:12]}:"


# How long an asyncio limiter that should hear from Redis waits for it: the
# 0.05 s default could pass during a loaded machine's stall and fail a
# request these tests expect judged.
PATIENT = 10.0


def served(apps: dict[str, Any], *clients: Any) -> Any:
    """One ASGI app for one uvicorn server (one event loop, which asyncio
    clients are bound to): ``apps`` by first path segment, and the clients
    closed on that loop at the server's lifespan shutdown."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    for c in clients:
                        await c.aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await apps[scope["path"].split("/")[1]](scope, receive, send)

    return app


def test_asgi_awaits_an_asyncio_redis_limiter(server: Server, prefix: str) -> None:
    client = redis.asyncio.Redis(port=server.port)
    limiter = RedisTokenBucket("3/min", client=client, prefix=prefix, timeout=PATIENT)
    app = ratomic.asgi.RateLimitMiddleware(hello, limiter, name="per-ip", legacy_headers=True)
    with serve_asgi(served({"": app}, client), lifespan="on") as port:
        for left in (2, 1, 0):
            r = get(port)
            assert r.status == 200 and r.body == b"hello"
            assert r.headers["ratelimit-policy"] == '"per-ip";q=3;w=60'
            assert r.headers["ratelimit"].startswith(f'"per-ip";r={left};t=')
            assert r.headers["x-ratelimit-remaining"] == str(left)
        check_denial(get(port), ["per-ip"])
    # The count lives on Redis: another limiter on the prefix sees it.
    sync = RedisTokenBucket("3/min", client=redis.Redis(port=server.port), prefix=prefix)
    assert not sync.peek("127.0.0.1").allowed
    sync.client.close()


def test_fastapi_dependency_on_a_redis_limiter(server: Server, prefix: str) -> None:
    fastapi = pytest.importorskip("fastapi")
    from ratomic.fastapi import RateLimit, RateLimitExceeded, problem_response

    client = redis.asyncio.Redis(port=server.port)
    # 2 a minute: no token comes back between the requests, however slow the machine.
    limits = {"burst": "2/min", "daily": Rule.fixed_window("100/day")}
    limiter = RedisLimiter(limits, client=client, prefix=prefix, timeout=PATIENT)
    app = fastapi.FastAPI()
    app.add_exception_handler(RateLimitExceeded, problem_response)

    @app.get("/search", dependencies=[fastapi.Depends(RateLimit(limiter))])
    async def search() -> dict:
        return {"ok": True}

    with serve_asgi(served({"search": app}, client), lifespan="on") as port:
        r = get(port, "/search")
        assert r.status == 200
        assert r.headers["ratelimit-policy"] == '"burst";q=2;w=60, "daily";q=100;w=86400'
        get(port, "/search")
        check_denial(get(port, "/search"), ["burst"])


def test_wsgi_on_a_blocking_redis_limiter(server: Server, prefix: str) -> None:
    client = redis.Redis(port=server.port)
    limiter = RedisFixedWindow(2, 3600, client=client, prefix=prefix)
    with serve_wsgi(ratomic.wsgi.RateLimitMiddleware(hello_wsgi, limiter)) as port:
        r = get(port)
        assert r.status == 200 and r.headers["ratelimit-policy"] == '"default";q=2;w=3600'
        assert get(port).status == 200
        check_denial(get(port), ["default"])
    client.close()


def test_a_redis_that_stops_answering_is_answered_by_on_error(prefix: str) -> None:
    s = Server()
    client = redis.asyncio.Redis(port=s.port)
    raising = RedisTokenBucket("5/s", client=client, prefix=prefix, breaker_threshold=0)
    allowing = RedisTokenBucket("5/s", client=client, prefix=prefix, on_error="allow")
    # The server answers through this client before it dies: a patient
    # limiter's request (the others keep the short default for the calls after).
    patient = RedisTokenBucket("5/s", client=client, prefix=prefix, timeout=PATIENT)
    apps = {
        "patient": ratomic.asgi.RateLimitMiddleware(hello, patient),
        "closed": ratomic.asgi.RateLimitMiddleware(hello, raising),
        "open": ratomic.asgi.RateLimitMiddleware(hello, raising, on_error="allow"),
        "policy": ratomic.asgi.RateLimitMiddleware(hello, allowing),
    }
    try:
        with serve_asgi(served(apps, client), lifespan="on") as port:
            assert get(port, "/patient").status == 200
            s.proc.kill()
            s.proc.wait()
            r = get(port, "/closed")
            assert r.status == 503 and r.headers["retry-after"] == "1"
            assert json.loads(r.body)["title"] == "Service Unavailable"
            assert get(port, "/open").status == 200
            r = get(port, "/policy")
            assert r.status == 200 and r.headers["ratelimit-policy"] == '"default";q=5;w=1'
    finally:
        s.stop()


def test_a_client_of_the_wrong_kind_is_refused_at_setup(server: Server) -> None:
    blocking = RedisTokenBucket("5/s", client=redis.Redis(port=server.port))
    asyncio_ = RedisTokenBucket("5/s", client=redis.asyncio.Redis(port=server.port))
    with pytest.raises(TypeError, match="redis.asyncio"):
        ratomic.asgi.RateLimitMiddleware(hello, blocking)
    with pytest.raises(TypeError, match="blocking"):
        ratomic.wsgi.RateLimitMiddleware(hello_wsgi, asyncio_)
    with pytest.raises(ratomic.InvalidArgumentError):
        ratomic.asgi.RateLimitMiddleware(hello, asyncio_, name="caf\u00e9")
    named = RedisLimiter({"burst": "5/s", "caf\u00e9": "100/d"}, client=redis.asyncio.Redis(port=server.port))
    with pytest.raises(ratomic.InvalidArgumentError, match="caf"):
        ratomic.asgi.RateLimitMiddleware(hello, named)


def test_headers_match_the_in_memory_limiters(server: Server, prefix: str) -> None:
    # Same decisions (a fresh key, windows aligned: 1,000,020 s is a whole
    # number of minutes, as the manual clock's 0), same header fields.
    client = redis.Redis(port=server.port)
    now = 1_000_020.0
    pairs = [
        (RedisTokenBucket("10/s", client=client, prefix=prefix + "tb:"), ratomic.TokenBucket("10/s", clock=ratomic.ManualClock())),
        (RedisFixedWindow(5, 60, client=client, prefix=prefix + "fw:"), ratomic.FixedWindow(5, 60, clock=ratomic.ManualClock())),
    ]
    for on_redis, local in pairs:
        for cost in (1, 4, 6):
            if cost > on_redis.limit:
                continue
            got, want = on_redis.allow_at("k", now, cost), local.allow("k", cost)
            assert (got.allowed, got.remaining, got.limit) == (want.allowed, want.remaining, want.limit)
            for draft in DRAFTS:
                assert on_redis.headers(got, name="api", legacy=True, draft=draft) == local.headers(
                    want, name="api", legacy=True, draft=draft
                )
            assert on_redis.problem(got, name="api") == local.problem(want, name="api")
    multi = RedisLimiter({"a": "2/s", "b": "3/min"}, client=client, prefix=prefix + "m:")
    local_multi = ratomic.Limiter({"a": "2/s", "b": "3/min"}, clock=ratomic.ManualClock())
    for _ in range(3):
        got_m, want_m = multi.allow_at("k", now), local_multi.allow("k")
        for draft in DRAFTS:
            assert multi.headers(got_m, legacy=True, draft=draft) == local_multi.headers(want_m, legacy=True, draft=draft)
        assert multi.problem(got_m) == local_multi.problem(want_m)
    with pytest.raises(TypeError):
        multi.headers(pairs[0][0].allow("x"))  # type: ignore[arg-type]
    with pytest.raises(ratomic.InvalidArgumentError, match="invalid draft"):
        multi.headers(got_m, draft="draft-9")  # type: ignore[arg-type]
    with pytest.raises(ratomic.InvalidArgumentError, match="invalid draft"):
        pairs[0][0].headers(pairs[0][0].allow_at("k", now), draft="draft-9")  # type: ignore[arg-type]
    client.close()
