"""The process test_postgres_restart.py crashes a PostgreSQL server under:
limiters on one psycopg_pool pool of its own (blocking, or asyncio with
``MODE=async``), driven a line at a time on stdin, each command answered by
one JSON line on stdout. A crash of this process is its exit, which the
test sees instead of dying with it; what the pool's workers print goes to
stderr, which the test reads at the end.

Env: ``URL`` (the server), ``MODE`` (``sync`` or ``async``), ``PREFIX``,
``POOL_TIMEOUT`` (seconds a call waits for a pool connection).

Commands (JSON): ``{"op": "allow", "limiter": NAME, "key": KEY}``,
``{"op": "burst", "limiter": NAME, "keys": [KEY, ...]}`` (the allows at
once: threads, or tasks), ``{"op": "leases"}`` (``[{"held": the "lease"
limiter's leases_held}]``), ``{"op": "quit"}``. Each answer is a list of
``{"allowed", "remaining", "source", "error", "seconds"}`` (``error``: the
exception's class when the call raised; ``seconds``: how long it took).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import time
import typing as _t

import psycopg_pool

import ratomic
from ratomic.postgres import PostgresTokenBucket

URL = os.environ["URL"]
ASYNC = os.environ["MODE"] == "async"
PREFIX = os.environ["PREFIX"]
POOL_TIMEOUT = float(os.environ["POOL_TIMEOUT"])
RATE = "3/h"  # drained keys stay drained for the whole test
HOT = (40, 40 / 86400)  # the leased key's bucket: 40 tokens, 40 a day


def limiters(pool: _t.Any) -> dict[str, PostgresTokenBucket]:
    common = {"client": pool, "prefix": PREFIX}
    return {
        "raise": PostgresTokenBucket(RATE, **common),
        "allow": PostgresTokenBucket(RATE, on_error="allow", **common),
        "deny": PostgresTokenBucket(RATE, on_error="deny", **common),
        "fallback": PostgresTokenBucket(RATE, on_error="fallback", **common),
        "local": PostgresTokenBucket(RATE, on_error=ratomic.TokenBucket(RATE), **common),
        # No deny cache: every call of its asks the server (what it remembers).
        "fresh": PostgresTokenBucket(RATE, on_error="deny", deny_cache=0, **common),
        # Leases of a hot key, and a limiter that asks the server about that key.
        "lease": PostgresTokenBucket(*HOT, on_error="deny", lease="auto", **common),
        "hot": PostgresTokenBucket(*HOT, on_error="deny", deny_cache=0, **common),
    }


def answer(started: float, d: object = None, e: BaseException | None = None) -> dict[str, object]:
    seconds = time.monotonic() - started
    if e is not None:
        return {"allowed": None, "remaining": None, "source": None, "error": type(e).__name__, "seconds": seconds}
    return {
        "allowed": bool(getattr(d, "allowed")),
        "remaining": int(getattr(d, "remaining")),
        "source": str(getattr(d, "source")),
        "error": None,
        "seconds": seconds,
    }


def reply(value: object) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()


def run_sync() -> None:
    with psycopg_pool.ConnectionPool(URL, min_size=1, max_size=2, timeout=POOL_TIMEOUT, open=True) as pool:
        pool.wait()
        lims = limiters(pool)

        def one(name: str, key: str) -> dict[str, object]:
            started = time.monotonic()
            try:
                d = lims[name].allow(key)
            except ratomic.BackendError as e:
                return answer(started, e=e)
            return answer(started, d)

        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["op"] == "quit":
                reply([])
                break
            if cmd["op"] == "allow":
                reply([one(cmd["limiter"], cmd["key"])])
                continue
            if cmd["op"] == "leases":
                reply([{"held": lims["lease"].leases_held}])
                continue
            got: list[dict[str, object]] = [{} for _ in cmd["keys"]]

            def run(i: int, key: str) -> None:
                got[i] = one(cmd["limiter"], key)

            threads = [threading.Thread(target=run, args=(i, k)) for i, k in enumerate(cmd["keys"])]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            reply(got)


async def run_async() -> None:
    loop = asyncio.get_running_loop()
    async with psycopg_pool.AsyncConnectionPool(
        URL, min_size=1, max_size=2, timeout=POOL_TIMEOUT, open=False
    ) as pool:
        await pool.wait()
        lims = limiters(pool)

        async def one(name: str, key: str) -> dict[str, object]:
            started = time.monotonic()
            try:
                d = await lims[name].allow(key)
            except ratomic.BackendError as e:
                return answer(started, e=e)
            return answer(started, d)

        while True:
            # Read in a thread: the loop (the pool's tasks) runs meanwhile.
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            cmd = json.loads(line)
            if cmd["op"] == "quit":
                reply([])
                break
            if cmd["op"] == "allow":
                reply([await one(cmd["limiter"], cmd["key"])])
                continue
            if cmd["op"] == "leases":
                reply([{"held": lims["lease"].leases_held}])
                continue
            reply(list(await asyncio.gather(*(one(cmd["limiter"], k) for k in cmd["keys"]))))


if __name__ == "__main__":
    # The pool's own warnings (failed reconnects) go to stderr, named.
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s", stream=sys.stderr)
    if ASYNC:
        asyncio.run(run_async())
    else:
        run_sync()
