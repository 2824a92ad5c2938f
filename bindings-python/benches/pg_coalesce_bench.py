"""Issue 41's coalescing, Python's half: ratomic.postgres with calls in
flight at once sharing statements (the default ``max_in_flight``: half the
pool's ``max_size``, rounded up) against the same limiter with ``max_in_flight`` large
enough to turn it off (every call its own statement). Run by hand (not a
test), in the venv that run-tests.sh made, against a PostgreSQL whose URL
is in RATOMIC_POSTGRES_URL (``source postgres/server.sh; pg_install;
pg_start $(pg_free_port)`` gives one in $PG_URL):

    RATOMIC_POSTGRES_URL=... bindings-python/.venv/bin/python bindings-python/benches/pg_coalesce_bench.py [RUNS] [SECONDS]

Cells: 1 and 64 calls in flight, blocking (threads, each one call after
the other, through a psycopg_pool.ConnectionPool of 4) and asyncio (tasks,
through an AsyncConnectionPool of 4); one hot key, or 10,000 keys in turn.
The limit is one no run reaches (10^9 tokens refilled 10^6 a second): every
call is granted and goes to the server (no deny cache). In each cell the two
settings take turns, in a new shuffled order each of ROUNDS (5) rounds, each
turn SECONDS / ROUNDS (SECONDS default 1.0) by wall clock; a setting's rate
is the median of its turns. Statements are counted honestly: each one takes
one connection from the pool, and the pool counts them.

Prints, per run and cell, decisions/s and statements per 1,000 decisions
for both settings and the ratio on / off.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg_pool

from ratomic.postgres import PostgresTokenBucket, migrate

ROUNDS = 5
POOL = 4
KEYS = {"hot key": ["hot"], "10,000 keys": [f"k{i}" for i in range(10_000)]}
SETTINGS = {"coalescing on": None, "off": 1_000_000}  # max_in_flight


class CountingPool(psycopg_pool.ConnectionPool):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.statements = 0
        self._count_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def connection(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        with self._count_lock:
            self.statements += 1
        return super().connection(*args, **kwargs)


class CountingAsyncPool(psycopg_pool.AsyncConnectionPool):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.statements = 0
        super().__init__(*args, **kwargs)

    def connection(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        self.statements += 1
        return super().connection(*args, **kwargs)


class Tally:
    """One cell: its turns, and per setting the rates and statements seen."""

    def __init__(self) -> None:
        self.rates: dict[str, list[float]] = {s: [] for s in SETTINGS}
        self.statements = dict.fromkeys(SETTINGS, 0)
        self.calls = dict.fromkeys(SETTINGS, 0)

    def turns(self) -> Iterator[str]:
        """The settings in a new shuffled order each round."""
        for _ in range(ROUNDS):
            order = list(SETTINGS)
            random.shuffle(order)
            yield from order

    def add(self, setting: str, calls: int, spent: float, statements: int) -> None:
        self.rates[setting].append(calls / spent)
        self.statements[setting] += statements
        self.calls[setting] += calls

    def result(self) -> dict[str, tuple[float, float]]:
        """Per setting: the median rate, and statements per 1,000 decisions."""
        return {s: (statistics.median(self.rates[s]), 1000 * self.statements[s] / self.calls[s]) for s in SETTINGS}


def time_threads(lim: PostgresTokenBucket, keys: list[str], workers: int, seconds: float) -> tuple[int, float]:
    """Calls made by ``workers`` threads in ``seconds``, and the time it took."""
    done = [0] * workers
    times: list[float] = []  # the turn's start and end, set once every thread is ready
    start = threading.Barrier(workers + 1, action=lambda: times.extend((time.monotonic(), time.monotonic() + seconds)))

    def work(w: int) -> None:
        n, i = 0, w * 7919
        start.wait()
        stop = times[1]
        while time.monotonic() < stop:
            lim.allow(keys[i % len(keys)])
            n, i = n + 1, i + 1
        done[w] = n

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join()
    return sum(done), time.monotonic() - times[0]


async def time_tasks(lim: PostgresTokenBucket, keys: list[str], workers: int, seconds: float) -> tuple[int, float]:
    loop = asyncio.get_running_loop()
    stop = loop.time() + seconds

    async def work(w: int) -> int:
        n, i = 0, w * 7919
        while loop.time() < stop:
            await lim.allow(keys[i % len(keys)])
            n, i = n + 1, i + 1
        return n

    t0 = loop.time()
    done = await asyncio.gather(*(work(w) for w in range(workers)))
    return sum(done), loop.time() - t0


def run(url: str, seconds: float) -> dict[tuple[str, int, str], dict[str, tuple[float, float]]]:
    """One run: per (mode, in flight, keys) cell, per setting, (decisions/s, statements per 1,000)."""
    out: dict[tuple[str, int, str], dict[str, tuple[float, float]]] = {}
    turn = seconds / ROUNDS
    tag = uuid.uuid4().hex[:8]
    with CountingPool(url, min_size=POOL, max_size=POOL, open=True, kwargs={"autocommit": True}) as pool:
        lims = {s: PostgresTokenBucket(10**9, 10**6, client=pool, prefix=f"b-{tag}", max_in_flight=m) for s, m in SETTINGS.items()}
        for workers in (1, 64):
            for kname, keys in KEYS.items():
                tally = Tally()
                for s in tally.turns():
                    before = pool.statements
                    n, spent = time_threads(lims[s], keys, workers, turn)
                    tally.add(s, n, spent, pool.statements - before)
                out[("blocking", workers, kname)] = tally.result()

    async def asyncio_cells() -> None:
        async with CountingAsyncPool(url, min_size=POOL, max_size=POOL, kwargs={"autocommit": True}) as apool:
            alims = {
                s: PostgresTokenBucket(10**9, 10**6, client=apool, prefix=f"a-{tag}", max_in_flight=m)
                for s, m in SETTINGS.items()
            }
            for workers in (1, 64):
                for kname, keys in KEYS.items():
                    tally = Tally()
                    for s in tally.turns():
                        before = apool.statements
                        n, spent = await time_tasks(alims[s], keys, workers, turn)
                        tally.add(s, n, spent, apool.statements - before)
                    out[("asyncio", workers, kname)] = tally.result()

    asyncio.run(asyncio_cells())
    return out


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    url = os.environ.get("RATOMIC_POSTGRES_URL")
    if not url:
        sys.exit("set RATOMIC_POSTGRES_URL to a PostgreSQL this benchmark may write to (see the docstring)")
    with psycopg_pool.ConnectionPool(url, min_size=1, max_size=1, open=True, kwargs={"autocommit": True}) as p:
        migrate(p)
    results = []
    for r in range(runs):
        res = run(url, seconds)
        results.append(res)
        print(f"run {r + 1}:")
        for (mode, workers, kname), cell in res.items():
            on, off = cell["coalescing on"], cell["off"]
            print(
                f"  {mode:8} {workers:2} in flight, {kname:11}: on {on[0]:8.0f}/s {on[1]:6.1f} stmts/1k | "
                f"off {off[0]:8.0f}/s {off[1]:6.1f} stmts/1k | on/off {on[0] / off[0]:.2f}x",
                flush=True,
            )
    print("on / off, each run:")
    for cell in results[0]:
        ratios = " / ".join(f"{r[cell]['coalescing on'][0] / r[cell]['off'][0]:.2f}" for r in results)
        print(f"  {cell[0]}, {cell[1]} in flight, {cell[2]}: {ratios}")


if __name__ == "__main__":
    main()
