"""HTTP middleware overhead on FastAPI: ratomic's ASGI middleware against
slowapi (what a FastAPI team would otherwise pick), issue 17's benchmark.
Run by hand after ``bindings-python/run-tests.sh`` (which builds the wheel
into ``.venv``)::

    bindings-python/.venv/bin/python bindings-python/benches/middleware.py [ROUNDS] [SECONDS]

Four FastAPI hello-world apps, each served by uvicorn (one worker, no
access log) in its own process: no limiter; ``ratomic.asgi.RateLimitMiddleware``
on a ``TokenBucket`` keyed by the client address (its ``RateLimit`` fields on
every response); slowapi's pure-ASGI ``SlowAPIASGIMiddleware`` with a
default limit keyed by ``get_remote_address``, with its headers off (its
default) and on. Every limiter allows everything. The load comes from
ratomic's Rust bench driver (``cargo run --release -p ratomic-benches --bin
middleware -- drive …``: 10 keep-alive HTTP/1.1 connections, apps in
shuffled order each round), which prints each app's median requests/s,
its cost per request over the bare app, and ratomic's cost ÷ each peer's
(the target: ≤ 0.5).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
APPS = ("bare", "ratomic", "slowapi", "slowapi+headers")
FOREVER = "1000000000/second"  # a limit no run reaches


def make_app(kind: str):  # noqa: ANN201 - FastAPI is imported here, in the server process
    from fastapi import FastAPI
    from fastapi.responses import PlainTextResponse

    app = FastAPI()

    @app.get("/", response_class=PlainTextResponse)
    async def hello() -> str:
        return "hello"

    if kind == "bare":
        return app
    if kind == "ratomic":
        import ratomic
        from ratomic.asgi import RateLimitMiddleware

        return RateLimitMiddleware(app, ratomic.TokenBucket(1 << 40, 1e12))
    from slowapi import Limiter
    from slowapi.middleware import SlowAPIASGIMiddleware
    from slowapi.util import get_remote_address

    app.state.limiter = Limiter(key_func=get_remote_address, default_limits=[FOREVER], headers_enabled=kind == "slowapi+headers")
    app.add_middleware(SlowAPIASGIMiddleware)
    return app


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        import uvicorn

        uvicorn.run(make_app(sys.argv[2]), host="127.0.0.1", port=int(sys.argv[3]), log_level="error", access_log=False)
        return
    sys.path.insert(0, HERE)
    from bench import ensure_peers

    ensure_peers(("slowapi", "fastapi", "uvicorn"))
    rounds, seconds = (sys.argv[1] if len(sys.argv) > 1 else "5"), (sys.argv[2] if len(sys.argv) > 2 else "2")
    subprocess.check_call(["cargo", "build", "-q", "--release", "-p", "ratomic-benches", "--bin", "middleware"], cwd=ROOT)
    servers, ports = [], []
    try:
        for kind in APPS:
            port = free_port()
            servers.append(subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port)]))
            ports.append(port)
        for port in ports:
            wait_listening(port)
        import fastapi
        import slowapi  # noqa: F401
        import uvicorn

        print(f"FastAPI {fastapi.__version__}, uvicorn {uvicorn.__version__}, slowapi 0.1.10, Python {sys.version.split()[0]}")
        driver = os.path.join(ROOT, "target", "release", "middleware")
        subprocess.check_call([driver, "drive", rounds, seconds, *(f"{k}={p}" for k, p in zip(APPS, ports))])
    finally:
        for s in servers:
            s.kill()
            s.wait()


if __name__ == "__main__":
    main()
