"""Every middleware takes every limiter the Python face has (issue 38):
in memory, on a shared file, on Redis (an asyncio client under ASGI, a
blocking one under WSGI), a multi-limit ``Limiter``, a ``Stack`` and
``Quotas`` — each under the ASGI and WSGI middlewares, the FastAPI
dependency, the FastAPI route decorator and a Flask view, over real
sockets (uvicorn, wsgiref, a real redis-server). Each allows 2 a minute:
200, 200, 429, with the policy in the fields. And a forged ``Forwarded``,
``X-Real-IP`` or ``X-Forwarded-For`` never makes a new client when no proxy
is trusted, in any of them."""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any, Callable, Iterator

import pytest

import ratomic
import ratomic.asgi
import ratomic.fastapi
import ratomic.wsgi
from test_http import get, hello, hello_wsgi, serve_asgi, serve_wsgi

redis = pytest.importorskip("redis")
fastapi = pytest.importorskip("fastapi")
flask = pytest.importorskip("flask")
pytest.importorskip("uvicorn")

import redis.asyncio  # noqa: E402

from ratomic.redis import RedisTokenBucket  # noqa: E402
from redis_server import Server  # noqa: E402
from test_http_redis import served  # noqa: E402

# FastAPI resolves this module's (string) annotations here.
from fastapi import Request  # noqa: E402

KINDS = ["memory", "shared-file", "redis", "limiter", "stack", "quotas"]
FACES = ["asgi", "wsgi", "fastapi-dependency", "fastapi-decorator", "flask-view"]
ASYNC = {"asgi", "fastapi-dependency", "fastapi-decorator"}


def make(kind: str, face: str, server: Server, tmp_path: Any) -> tuple[Any, dict[str, Any], str, list[Any]]:
    """A limiter of 2 a minute of ``kind`` for ``face``: the limiter, the
    options it needs, its ``RateLimit-Policy``, and the clients to close."""
    clock = ratomic.ManualClock()
    if kind == "memory":
        return ratomic.TokenBucket("2/min", clock=clock), {}, '"default";q=2;w=60', []
    if kind == "shared-file":
        path = str(tmp_path / "limits.shm")
        return ratomic.TokenBucket.from_rate("2/min", max_keys=1000, shared_file=path), {}, '"default";q=2;w=60', []
    if kind == "redis":
        client: Any = (redis.asyncio.Redis if face in ASYNC else redis.Redis)(port=server.port)
        limiter = RedisTokenBucket("2/min", client=client, prefix=f"kinds-{uuid.uuid4().hex[:8]}:")
        return limiter, {}, '"default";q=2;w=60', [client]
    if kind == "limiter":
        limiter = ratomic.Limiter({"burst": "2/min", "daily": ratomic.Rule.fixed_window("100/day")}, clock=clock)
        return limiter, {}, '"burst";q=2;w=60, "daily";q=100;w=86400', []
    if kind == "stack":
        stack = ratomic.Stack(
            {"ip": ratomic.TokenBucket("2/min", clock=clock), "all": ratomic.DirectTokenBucket("1000/min", clock=clock)}
        )
        return stack, {}, '"ip";q=2;w=60, "all";q=1000;w=60', []
    assert kind == "quotas"
    return ratomic.Quotas(clock=clock), {"quota": lambda request: "2/min"}, '"default";q=2;w=60', []


@contextlib.contextmanager
def serve_face(face: str, limiter: Any, options: dict[str, Any], clients: list[Any]) -> Iterator[int]:
    if face == "asgi":
        app = ratomic.asgi.RateLimitMiddleware(hello, limiter, **options)
    elif face == "wsgi":
        app = ratomic.wsgi.RateLimitMiddleware(hello_wsgi, limiter, **options)
    elif face == "fastapi-dependency":
        app = fastapi.FastAPI()
        app.add_exception_handler(ratomic.fastapi.RateLimitExceeded, ratomic.fastapi.problem_response)

        @app.get("/", dependencies=[fastapi.Depends(ratomic.fastapi.RateLimit(limiter, **options))])
        async def dependency_route() -> dict:
            return {}

    elif face == "fastapi-decorator":
        limits = ratomic.fastapi.Limiter(standard_headers=True)
        app = fastapi.FastAPI()
        app.state.limiter = limits
        app.add_exception_handler(ratomic.fastapi.RateLimitExceeded, ratomic.fastapi.problem_response)

        @app.get("/")
        @limits.limit(limiter, **options)
        async def decorated_route(request: Request) -> dict:
            return {}

    else:
        app = flask.Flask("kinds")

        @app.get("/")
        @ratomic.wsgi.rate_limit(limiter, **options)
        def view() -> str:
            return "hello"

    if face in ASYNC:
        with serve_asgi(served({"": app}, *clients), lifespan="on") as port:
            yield port
    else:
        with serve_wsgi(app) as port:
            yield port
        for c in clients:
            c.close()


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_face_takes_every_limiter(kind: str, face: str, server: Server, tmp_path: Any) -> None:
    limiter, options, policy, clients = make(kind, face, server, tmp_path)
    with serve_face(face, limiter, options, clients) as port:
        rs = [get(port) for _ in range(3)]
    assert [r.status for r in rs] == [200, 200, 429], (kind, face, [r.body for r in rs])
    assert [r.headers["ratelimit-policy"] for r in rs] == [policy] * 3
    assert int(rs[2].headers["retry-after"]) >= 1
    problem = json.loads(rs[2].body)
    assert problem["status"] == 429 and len(problem["violated-policies"]) == 1


SPOOFS: list[dict[str, str]] = [
    {"X-Forwarded-For": "198.51.100.{i}"},
    {"X-Real-IP": "198.51.100.{i}"},
    {"Forwarded": "for=198.51.100.{i}"},
    {"Forwarded": 'for="[2001:db8::{i}]:4711";proto=https'},
    {"X-Forwarded-For": "198.51.100.{i}", "X-Real-IP": "203.0.113.{i}", "Forwarded": "for=192.0.2.{i}"},
]


@pytest.mark.parametrize("face", FACES)
def test_forged_client_addresses_never_make_a_new_client(face: str, server: Server, tmp_path: Any) -> None:
    limiter = ratomic.TokenBucket("3/min", clock=ratomic.ManualClock())
    with serve_face(face, limiter, {}, []) as port:
        statuses = [
            get(port, headers={n: v.format(i=i) for n, v in spoof.items()}).status for spoof in SPOOFS for i in range(2)
        ]
    assert statuses == [200, 200, 200] + [429] * 7, statuses
    assert limiter.peek("127.0.0.1", 0).remaining == 0, "the connection's address is the key"


def test_the_slowapi_shaped_limiter_default_key_ignores_forged_addresses() -> None:
    limits = ratomic.fastapi.Limiter(default_limits=["2/hour"], clock=ratomic.ManualClock())
    app = fastapi.FastAPI()
    app.state.limiter = limits
    app.add_middleware(ratomic.fastapi.LimiterMiddleware)

    @app.get("/")
    async def root() -> dict:
        return {}

    with serve_asgi(app) as port:
        statuses = [get(port, headers={"X-Forwarded-For": f"198.51.100.{i}", "X-Real-IP": f"203.0.113.{i}"}).status for i in range(4)]
    assert statuses == [200, 200, 429, 429]


