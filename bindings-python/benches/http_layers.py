"""The layer's own cost per request, in process: ratomic's FastAPI
middleware, dependency and decorator against slowapi's (issue 38).

    bindings-python/.venv/bin/python bindings-python/benches/http_layers.py [ROUNDS] [REQUESTS]

Every app is the same FastAPI app (one ``GET /`` answering ``hello``),
called as an ASGI server calls it (a fresh scope per request, a receive
and a send that keep nothing) in one process, with no socket: what is
measured is the app, and an app minus the bare app is the layer's own
cost. The apps run in rounds, in a shuffled order each round; each
round times ``REQUESTS`` requests of each app; the median over rounds
of the ns per request is the app's figure.

Three scenarios, each with every limiter allowing or every one denying:

- ``one key``: allowed, every request from one client address;
- ``10k keys``: allowed, the client address cycling over 10,000;
- ``denied``: one client, its limit spent before the run (a 429 each).

Both sides write the same fields: slowapi with ``headers_enabled=True``
(``X-RateLimit-Limit``, ``-Remaining``, ``-Reset``, and ``Retry-After`` on
a 429), ratomic with ``legacy_headers=True, standard_headers=False`` (the
same three and ``Retry-After``). ratomic runs "with the new features on":
a ``skip`` function, ``skip_failed_requests`` (a refund when the answer is
a failure), and the decision handed to the endpoint in ``request.state``.

Pairs compared (ratomic's cost ÷ slowapi's; the target is ≤ 0.5):

- ``middleware``: ``ratomic.asgi.RateLimitMiddleware`` against slowapi's
  ``SlowAPIASGIMiddleware`` with a default limit;
- ``decorator``: ``@limiter.limit(...)`` of ``ratomic.fastapi.Limiter``
  against slowapi's ``@limiter.limit(...)``;
- ``dependency``: ``Depends(ratomic.fastapi.RateLimit(...))`` against
  slowapi's decorator (slowapi has no dependency).
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints'
# parameter types at run time, from the functions' own scopes.
import asyncio
import gc
import os
import random
import statistics
import sys
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
KEYS = 10_000
ALLOW = "1000000000/day"  # a limit no run reaches
DENY = "1/day"  # spent before the run
SCENARIOS = ("one key", "10k keys", "denied")


def fastapi_app() -> Any:
    from fastapi import FastAPI, Request
    from fastapi.responses import PlainTextResponse

    app = FastAPI()

    @app.get("/", response_class=PlainTextResponse)
    async def hello(request: Request) -> str:
        return "hello"

    return app


def bare(scenario: str) -> Any:
    return fastapi_app()


def ratomic_middleware(scenario: str) -> Any:
    import ratomic
    from ratomic.asgi import RateLimitMiddleware

    limiter = ratomic.FixedWindow(DENY if scenario == "denied" else ALLOW)
    return RateLimitMiddleware(
        fastapi_app(),
        limiter,
        legacy_headers=True,
        standard_headers=False,
        skip=lambda scope: False,
        skip_failed_requests=True,
    )


def slowapi_middleware(scenario: str) -> Any:
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.middleware import SlowAPIASGIMiddleware
    from slowapi.util import get_remote_address

    app = fastapi_app()
    app.state.limiter = Limiter(
        key_func=get_remote_address,
        default_limits=[DENY if scenario == "denied" else ALLOW],
        headers_enabled=True,
    )
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
    app.add_middleware(SlowAPIASGIMiddleware)
    return app


def _decorated(limit: Callable[[Callable[..., Any]], Callable[..., Any]], handlers: Callable[[Any], None]) -> Any:
    from fastapi import FastAPI, Request, Response
    from fastapi.responses import PlainTextResponse

    app = FastAPI()
    handlers(app)

    # slowapi's decorator writes its headers on a `response` parameter when
    # the endpoint returns no Response of its own.
    @app.get("/", response_class=PlainTextResponse)
    @limit
    async def hello(request: Request, response: Response) -> str:
        return "hello"

    return app


def ratomic_decorator(scenario: str) -> Any:
    from ratomic.fastapi import Limiter, RateLimitExceeded, _rate_limit_exceeded_handler, get_remote_address

    limiter = Limiter(key_func=get_remote_address, headers_enabled=True)

    def handlers(app: Any) -> None:
        app.state.limiter = limiter
        app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

    return _decorated(
        limiter.limit(DENY if scenario == "denied" else ALLOW, exempt_when=lambda: False, skip_failed_requests=True),
        handlers,
    )


def slowapi_decorator(scenario: str) -> Any:
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded
    from slowapi.util import get_remote_address

    limiter = Limiter(key_func=get_remote_address, headers_enabled=True)

    def handlers(app: Any) -> None:
        app.state.limiter = limiter
        app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)

    return _decorated(limiter.limit(DENY if scenario == "denied" else ALLOW, exempt_when=lambda: False), handlers)


def ratomic_dependency(scenario: str) -> Any:
    import ratomic
    from fastapi import Depends, FastAPI, Request
    from fastapi.responses import PlainTextResponse
    from ratomic.fastapi import RateLimit, RateLimitExceeded, problem_response

    app = FastAPI()
    app.add_exception_handler(RateLimitExceeded, problem_response)
    limit = RateLimit(
        ratomic.FixedWindow(DENY if scenario == "denied" else ALLOW),
        legacy_headers=True,
        standard_headers=False,
        skip=lambda request: False,
    )

    @app.get("/", response_class=PlainTextResponse, dependencies=[Depends(limit)])
    async def hello(request: Request) -> str:
        return "hello"

    return app


PAIRS: dict[str, tuple[Callable[[str], Any], Callable[[str], Any]]] = {
    "middleware": (ratomic_middleware, slowapi_middleware),
    "decorator": (ratomic_decorator, slowapi_decorator),
    "dependency": (ratomic_dependency, slowapi_decorator),
}


def scopes(scenario: str) -> list[dict[str, Any]]:
    """The requests' scopes (copied before each request: apps write into them)."""
    clients = [f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(KEYS if scenario == "10k keys" else 1)]
    return [
        {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/",
            "raw_path": b"/",
            "root_path": "",
            "query_string": b"",
            "headers": [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"bench"), (b"accept", b"*/*")],
            "client": (c, 50000),
            "server": ("127.0.0.1", 8000),
            "state": {},
        }
        for c in clients
    ]


async def receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


class Sink:
    """An ASGI send that keeps the last status (to check the scenario)."""

    status = 0

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]


async def run(app: Any, templates: list[dict[str, Any]], n: int, sink: Sink) -> float:
    """ns per request over n requests."""
    count = len(templates)
    gc.collect()
    start = time.perf_counter_ns()
    for i in range(n):
        scope = templates[i % count].copy()
        scope["state"] = {}
        await app(scope, receive, sink)
    return (time.perf_counter_ns() - start) / n


async def measure(rounds: int, n: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    for scenario in SCENARIOS:
        templates = scopes(scenario)
        apps: dict[str, Any] = {"bare": bare(scenario)}
        for pair, (ours, peer) in PAIRS.items():
            apps[f"ratomic {pair}"] = ours(scenario)
            apps[f"slowapi {pair}"] = peer(scenario)
        want = 429 if scenario == "denied" else 200
        for name, app in apps.items():  # warm up; spend the denied limits
            sink = Sink()
            await run(app, templates, 2 * len(templates) + 200, sink)
            if name != "bare":
                assert sink.status == want, f"{scenario}: {name} answered {sink.status}, not {want}"
        times: dict[str, list[float]] = {name: [] for name in apps}
        order = list(apps)
        for _ in range(rounds):
            random.shuffle(order)
            for name in order:
                times[name].append(await run(apps[name], templates, n, Sink()))
        results[scenario] = {name: statistics.median(t) for name, t in times.items()}
    return results


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    import fastapi
    import slowapi  # noqa: F401
    import starlette

    import ratomic

    print(
        f"ratomic {ratomic.__version__}, FastAPI {fastapi.__version__}, Starlette {starlette.__version__}, "
        f"slowapi 0.1.10, Python {sys.version.split()[0]}; {rounds} rounds of {n} requests per app"
    )
    results = asyncio.run(measure(rounds, n))
    print(f"{'scenario':10} {'pair':11} {'bare ns':>8} {'ratomic +ns':>12} {'slowapi +ns':>12} {'ratio':>6}")
    worst = 0.0
    for scenario, r in results.items():
        for pair in PAIRS:
            ours, peer = r[f"ratomic {pair}"] - r["bare"], r[f"slowapi {pair}"] - r["bare"]
            ratio = ours / peer
            worst = max(worst, ratio)
            print(f"{scenario:10} {pair:11} {r['bare']:8.0f} {ours:12.0f} {peer:12.0f} {ratio:6.2f}")
    print(f"worst ratio {worst:.2f} (target <= 0.5)")


if __name__ == "__main__":
    main()
