"""The HTTP middlewares with limiters in PostgreSQL (``ratomic.postgres``):
the throwaway cluster run-tests.sh starts (RATOMIC_POSTGRES_URL), uvicorn
(ASGI, FastAPI) and wsgiref (WSGI) on 127.0.0.1 port 0, a real HTTP client.
ASGI awaits an asyncio connection's decisions; WSGI uses a blocking one; a
server that cannot be reached is answered by the limiter's own ``on_error``
(an in-memory limiter to fall back to) or is a request the limiter cannot
judge — never a 500."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import pytest

import ratomic
import ratomic.asgi
import ratomic.wsgi
from ratomic import Rule

psycopg = pytest.importorskip("psycopg")
pytest.importorskip("uvicorn")

from ratomic.postgres import (  # noqa: E402
    PostgresFixedWindow,
    PostgresLimiter,
    PostgresSlidingWindow,
    PostgresTokenBucket,
)
from test_http import check_denial, get, hello, hello_wsgi, serve_asgi, serve_wsgi  # noqa: E402

DRAFTS: tuple[Literal["draft-11", "draft-8", "draft-7", "draft-6"], ...] = ("draft-11", "draft-8", "draft-7", "draft-6")


@pytest.fixture
def prefix() -> str:
    return f"http-{uuid.uuid4().hex[:12]}"


def made_on_the_loop(make: Callable[[], Awaitable[tuple[dict[str, Any], list[Any]]]]) -> Any:
    """One ASGI app for one uvicorn server whose asyncio connections are
    opened on its event loop (at lifespan startup, by ``make``: the apps by
    first path segment, and the connections to close at shutdown)."""
    state: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    state["apps"], state["close"] = await make()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    for c in state["close"]:
                        await c.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await state["apps"][scope["path"].split("/")[1]](scope, receive, send)

    return app


def test_asgi_awaits_an_asyncio_postgres_limiter(url: str, prefix: str) -> None:
    async def make() -> tuple[dict[str, Any], list[Any]]:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        limiter = PostgresTokenBucket("3/min", client=conn, prefix=prefix)
        return {"": ratomic.asgi.RateLimitMiddleware(hello, limiter, name="per-ip", legacy_headers=True)}, [conn]

    with serve_asgi(made_on_the_loop(make), lifespan="on") as port:
        for left in (2, 1, 0):
            r = get(port)
            assert r.status == 200 and r.body == b"hello"
            assert r.headers["ratelimit-policy"] == '"per-ip";q=3;w=60'
            assert r.headers["ratelimit"].startswith(f'"per-ip";r={left};t=')
            assert r.headers["x-ratelimit-limit"] == "3"
            assert r.headers["x-ratelimit-remaining"] == str(left)
        check_denial(get(port), ["per-ip"])
    # The count lives in PostgreSQL: another limiter on the prefix sees it.
    with psycopg.connect(url, autocommit=True) as conn:
        assert not PostgresTokenBucket("3/min", client=conn, prefix=prefix).peek("127.0.0.1").allowed


def test_fastapi_dependency_on_a_postgres_limiter(url: str, prefix: str) -> None:
    fastapi = pytest.importorskip("fastapi")
    from ratomic.fastapi import RateLimit, RateLimitExceeded, problem_response

    async def make() -> tuple[dict[str, Any], list[Any]]:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        limits: dict[str, str | Rule] = {"burst": "2/min", "daily": Rule.fixed_window("100/day")}
        limiter = PostgresLimiter(limits, client=conn, prefix=prefix)
        app = fastapi.FastAPI()
        app.add_exception_handler(RateLimitExceeded, problem_response)

        @app.get("/search", dependencies=[fastapi.Depends(RateLimit(limiter))])
        async def search() -> dict:
            return {"ok": True}

        return {"search": app}, [conn]

    with serve_asgi(made_on_the_loop(make), lifespan="on") as port:
        r = get(port, "/search")
        assert r.status == 200
        assert r.headers["ratelimit-policy"] == '"burst";q=2;w=60, "daily";q=100;w=86400'
        assert get(port, "/search").status == 200
        check_denial(get(port, "/search"), ["burst"])


@pytest.mark.parametrize("cls", [PostgresFixedWindow, PostgresSlidingWindow])
def test_wsgi_on_a_blocking_postgres_limiter(url: str, prefix: str, cls: Any) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        limiter = cls(2, 3600, client=conn, prefix=prefix)
        with serve_wsgi(ratomic.wsgi.RateLimitMiddleware(hello_wsgi, limiter)) as port:
            r = get(port)
            assert r.status == 200 and r.headers["ratelimit-policy"] == '"default";q=2;w=3600'
            assert r.headers["ratelimit"].startswith('"default";r=1;t=')
            assert get(port).status == 200
            check_denial(get(port), ["default"])


def test_wsgi_refunds_failed_requests_on_a_postgres_limiter(url: str, prefix: str) -> None:
    def app(environ: Any, start_response: Any) -> list[bytes]:
        failing = environ["PATH_INFO"] == "/fail"
        start_response("500 Internal Server Error" if failing else "200 OK", [("Content-Type", "text/plain")])
        return [b"no" if failing else b"ok"]

    with psycopg.connect(url, autocommit=True) as conn:
        limiter = PostgresTokenBucket("2/hour", client=conn, prefix=prefix)
        with serve_wsgi(ratomic.wsgi.RateLimitMiddleware(app, limiter, skip_failed_requests=True)) as port:
            # Failures are given back: any number of them leave the two calls.
            assert [get(port, "/fail").status for _ in range(4)] == [500] * 4
            assert limiter.peek("127.0.0.1", 0).remaining == 2
            assert [get(port).status for _ in range(3)] == [200, 200, 429]


def test_a_postgres_that_cannot_be_reached_is_answered_by_on_error(url: str, prefix: str) -> None:
    # A connection that was open and is now broken: closed under the limiter.
    conn = psycopg.connect(url, autocommit=True)
    local = PostgresTokenBucket("5/min", client=conn, prefix=prefix, breaker_threshold=0, on_error=ratomic.TokenBucket(2, 1 / 60))
    raising = PostgresTokenBucket("5/min", client=conn, prefix=prefix, breaker_threshold=0)
    apps = {
        "/local": ratomic.wsgi.RateLimitMiddleware(hello_wsgi, local),
        "/closed": ratomic.wsgi.RateLimitMiddleware(hello_wsgi, raising),
        "/open": ratomic.wsgi.RateLimitMiddleware(hello_wsgi, raising, on_error="allow"),
    }

    def app(environ: Any, start_response: Any) -> Any:
        return apps[environ["PATH_INFO"]](environ, start_response)

    with serve_wsgi(app) as port:
        r = get(port, "/local")
        assert r.status == 200 and r.headers["ratelimit"].startswith('"default";r=4;t='), "PostgreSQL answers first"
        conn.close()
        # The in-memory bucket of 2 decides now: the third request is its denial, not a 503.
        assert [get(port, "/local").status for _ in range(3)] == [200, 200, 429]
        r = get(port, "/closed")
        assert r.status == 503 and r.headers["retry-after"] == "1"
        assert json.loads(r.body)["title"] == "Service Unavailable"
        assert get(port, "/open").status == 200


def test_a_client_of_the_wrong_kind_is_refused_at_setup(url: str) -> None:
    import asyncio

    with psycopg.connect(url, autocommit=True) as conn:
        blocking = PostgresTokenBucket("5/s", client=conn)
        with pytest.raises(TypeError, match="AsyncConnection"):
            ratomic.asgi.RateLimitMiddleware(hello, blocking)
        with pytest.raises(ratomic.InvalidArgumentError):
            ratomic.wsgi.RateLimitMiddleware(hello_wsgi, blocking, name="caf\u00e9")
        named = PostgresLimiter({"burst": "5/s", "caf\u00e9": "100/d"}, client=conn)
        with pytest.raises(ratomic.InvalidArgumentError, match="caf"):
            ratomic.wsgi.RateLimitMiddleware(hello_wsgi, named)
        with pytest.raises(TypeError, match="ratomic.Limiter"):
            PostgresLimiter({"a": "1/s"}, client=conn, on_error=ratomic.TokenBucket("1/s"))

    async def main() -> None:
        aconn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            with pytest.raises(TypeError, match="blocking"):
                ratomic.wsgi.RateLimitMiddleware(hello_wsgi, PostgresTokenBucket("5/s", client=aconn))
        finally:
            await aconn.close()

    asyncio.run(main())


def test_headers_match_the_in_memory_limiters(url: str, prefix: str) -> None:
    # Same decisions (a fresh key, windows aligned: 1,000,020 s is a whole
    # number of minutes, as the manual clock's 0), same header fields.
    now = 1_000_020.0
    with psycopg.connect(url, autocommit=True) as conn:
        pairs = [
            (PostgresTokenBucket("10/s", client=conn, prefix=prefix + "tb"), ratomic.TokenBucket("10/s", clock=ratomic.ManualClock())),
            (PostgresFixedWindow(5, 60, client=conn, prefix=prefix + "fw"), ratomic.FixedWindow(5, 60, clock=ratomic.ManualClock())),
        ]
        for remote, local in pairs:
            for cost in (1, 4, 6):
                if cost > remote.limit:
                    continue
                got, want = remote.allow_at("k", now, cost), local.allow("k", cost)
                assert (got.allowed, got.remaining, got.limit) == (want.allowed, want.remaining, want.limit)
                for draft in DRAFTS:
                    assert remote.headers(got, name="api", legacy=True, draft=draft) == local.headers(
                        want, name="api", legacy=True, draft=draft
                    )
                assert remote.problem(got, name="api") == local.problem(want, name="api")
        multi = PostgresLimiter({"a": "2/s", "b": "3/min"}, client=conn, prefix=prefix + "m")
        local_multi = ratomic.Limiter({"a": "2/s", "b": "3/min"}, clock=ratomic.ManualClock())
        for _ in range(3):
            got_m, want_m = multi.allow_at("k", now), local_multi.allow("k")
            for draft in DRAFTS:
                assert multi.headers(got_m, legacy=True, draft=draft) == local_multi.headers(want_m, legacy=True, draft=draft)
            assert multi.problem(got_m) == local_multi.problem(want_m)
        assert repr(pairs[1][0]) == f"PostgresFixedWindow(fixed window 5 per 1m, prefix={prefix + 'fw'!r}, client=blocking)"
        assert repr(multi).startswith('PostgresLimiter({"a": token bucket 2 per 1s, "b": token bucket 3 per 1m}')
        with pytest.raises(TypeError):
            multi.headers(pairs[0][0].allow("x"))
        with pytest.raises(ratomic.InvalidArgumentError, match="invalid draft"):
            multi.headers(got_m, draft="draft-9")  # type: ignore[arg-type]


def test_on_error_limiter_answers_asyncio_calls_when_the_connection_breaks(url: str, prefix: str) -> None:
    import asyncio

    async def main() -> None:
        aconn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        local = ratomic.TokenBucket(2, 1 / 60)
        limiter = PostgresTokenBucket("5/min", client=aconn, prefix=prefix, breaker_threshold=0, on_error=local)
        assert (await limiter.allow("k")).source == "postgres"
        await aconn.close()
        d = await limiter.allow("k")
        assert (d.allowed, d.remaining, d.source) == (True, 1, "fallback")
        assert (await limiter.peek("k")).source == "fallback"
        many = await limiter.allow_many(["k", "k"])
        assert [(m.allowed, m.source) for m in many] == [(True, "fallback"), (False, "fallback")]
        multi_conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        multi = PostgresLimiter({"a": "1/h"}, client=multi_conn, prefix=prefix, on_error=ratomic.Limiter({"a": "1/h"}))
        await multi_conn.close()
        md = await multi.allow("k")
        assert (list(md.entries), md.source) == (["a"], "fallback")

    asyncio.run(main())
