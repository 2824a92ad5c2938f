"""Issue 37's benchmark, Python's half: ratomic.redis with leases off and on
against `limits` (fixed and moving window, Redis storage), the plain GCRA
script through the same client, and the in-memory limiter of the same
process. Run by hand (not a test), in the venv that run-tests.sh made:

    bindings-python/.venv/bin/python bindings-python/benches/fleet_bench.py [RUNS] [SECONDS]

It starts its own redis-server (a free 127.0.0.1 port, no persistence) and
installs `limits` (benches/requirements.txt) if it is missing. Cells: one
call in flight (a blocking redis.Redis, each call after the other) and 64 in
flight (64 asyncio tasks on one redis.asyncio.Redis); one hot key, or 10,000
keys in turn. Every contender is given a limit no run reaches (10^9 tokens
refilled 10^6 a second; limits' windows of 10^9 a second and 10^7 an hour).
In each cell the contenders take turns, in a new shuffled order each of
ROUNDS (5) rounds, each turn SECONDS / ROUNDS (SECONDS default 1.0) by wall
clock; a contender's rate is the median of its turns. Each run's prefixes
are fresh. Also counted, from the server: script calls (EVALSHA and EVAL, in
INFO commandstats) and read events (INFO stats total_reads_processed: one
per round trip, a pipeline's included) per 1,000 decisions.

Prints each run's decisions/s, then the ratios against the issue's targets:
lease off >= 1.0x the better `limits` and >= 0.9x the plain script in every
cell; lease on, hot key, >= 20x the better `limits` and >= 0.5x the
in-memory limiter.
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from bench import ensure_peers  # noqa: E402

ensure_peers(("limits", "redis"))

import redis  # noqa: E402
import redis.asyncio as aredis  # noqa: E402
from limits import aio, parse, storage, strategies  # noqa: E402
from redis_server import Server  # noqa: E402

import ratomic  # noqa: E402
from ratomic.redis import RedisTokenBucket  # noqa: E402

# The benchmark's blocking client has no socket_timeout (a stopped server is
# no part of it): ratomic's advice to set one would fill the output.
logging.getLogger("ratomic.redis").setLevel(logging.ERROR)

# The GCRA everyone writes: one string key, server time, SET ... PX.
RAW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new = tat + interval
if new - now > tau then return {0, new - tau - now} end
redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', math.ceil((new - now) / 1000))
return {1, 0}
"""

CAPACITY, PER_SEC = 10**9, 10**6  # T = 1 µs, whole as Redis needs
FIXED, MOVING = parse("1000000000/second"), parse("10000000/hour")
IN_FLIGHT = 64
KEYSETS = {"hot key": ["hot"], "10,000 keys": [f"user:{i}" for i in range(10_000)]}
PEERS = ("limits fixed", "limits moving")


ROUNDS = 5


def counts(client: redis.Redis) -> tuple[int, int]:
    """Script calls and read events so far (this call's own read included)."""
    stats = client.info("commandstats")
    scripts = sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))
    return scripts, int(client.info("stats")["total_reads_processed"])


def time_blocking(call: Callable[[str], object], keys: list[str], seconds: float) -> int:
    n, i, end = 0, random.randrange(len(keys)), time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(64):
            call(keys[i % len(keys)])
            i += 1
        n += 64
    return n


async def time_async(call: Callable[[str], Awaitable[object]], keys: list[str], seconds: float) -> int:
    end = time.perf_counter() + seconds
    counts = [0] * IN_FLIGHT

    async def worker(w: int) -> None:
        i = random.randrange(len(keys))
        while time.perf_counter() < end:
            for _ in range(16):
                await call(keys[i % len(keys)])
                i += 1
            counts[w] += 16

    await asyncio.gather(*(worker(w) for w in range(IN_FLIGHT)))
    return sum(counts)


def blocking_contenders(url: str, client: redis.Redis, tag: str) -> dict[str, Callable[[str], object]]:
    raw = client.register_script(RAW)
    off = RedisTokenBucket(CAPACITY, PER_SEC, client=client, prefix=f"off-{tag}:")
    on = RedisTokenBucket(CAPACITY, PER_SEC, client=client, prefix=f"on-{tag}:", lease="auto")
    fixed = strategies.FixedWindowRateLimiter(storage.RedisStorage(url, key_prefix=f"fw-{tag}"))
    moving = strategies.MovingWindowRateLimiter(storage.RedisStorage(url, key_prefix=f"mw-{tag}"))
    memory = ratomic.TokenBucket(CAPACITY, PER_SEC)
    return {
        "ratomic, lease off": off.allow,
        "ratomic, lease on": on.allow,
        "limits fixed": lambda k: fixed.hit(FIXED, k),
        "limits moving": lambda k: moving.hit(MOVING, k),
        "plain GCRA script": lambda k: raw(keys=[f"raw-{tag}:{k}"], args=[1, CAPACITY]),
        "in memory": memory.allow,
    }


def async_contenders(url: str, client: aredis.Redis, tag: str) -> dict[str, Callable[[str], Awaitable[object]]]:
    raw = client.register_script(RAW)
    off = RedisTokenBucket(CAPACITY, PER_SEC, client=client, prefix=f"aoff-{tag}:", timeout=1.0)
    on = RedisTokenBucket(CAPACITY, PER_SEC, client=client, prefix=f"aon-{tag}:", lease="auto", timeout=1.0)
    aurl = url.replace("redis://", "async+redis://")
    fixed = aio.strategies.FixedWindowRateLimiter(
        aio.storage.RedisStorage(aurl, implementation="redispy", key_prefix=f"afw-{tag}")
    )
    moving = aio.strategies.MovingWindowRateLimiter(
        aio.storage.RedisStorage(aurl, implementation="redispy", key_prefix=f"amw-{tag}")
    )
    memory = ratomic.TokenBucket(CAPACITY, PER_SEC)

    async def in_memory(k: str) -> object:
        return memory.allow(k)

    return {
        "ratomic, lease off": off.allow,
        "ratomic, lease on": on.allow,
        "limits fixed": lambda k: fixed.hit(FIXED, k),
        "limits moving": lambda k: moving.hit(MOVING, k),
        "plain GCRA script": lambda k: raw(keys=[f"araw-{tag}:{k}"], args=[1, CAPACITY]),
        "in memory": in_memory,
    }


Cell = dict[str, tuple[float, float, float]]  # contender -> (decisions/s, script calls and round trips per 1,000)


def run_cell(
    admin: redis.Redis, shape: str, keys: list[str], contenders: dict[str, Any], seconds: float, loop: asyncio.AbstractEventLoop
) -> Cell:
    def timed(call: Any, span: float) -> int:
        if shape == "1 in flight":
            return time_blocking(call, keys, span)
        return loop.run_until_complete(time_async(call, keys, span))

    for call in contenders.values():
        timed(call, 0.05)  # warm-up: connections, scripts, a key seen before
    rates: dict[str, list[float]] = {n: [] for n in contenders}
    totals = {n: [0, 0, 0] for n in contenders}  # decisions, script calls, reads
    order = list(contenders)
    for _ in range(ROUNDS):
        random.shuffle(order)
        for name in order:
            scripts, reads = counts(admin)
            t0 = time.perf_counter()
            n = timed(contenders[name], seconds / ROUNDS)
            took = time.perf_counter() - t0
            scripts2, reads2 = counts(admin)
            rates[name].append(n / took)
            t = totals[name]
            t[0] += n
            t[1] += scripts2 - scripts
            t[2] += max(reads2 - reads - 2, 0)  # less our two INFOs
    return {n: (statistics.median(rates[n]), 1000 * totals[n][1] / totals[n][0], 1000 * totals[n][2] / totals[n][0]) for n in contenders}


def ratio(cell: Cell, a: str, b: str) -> float:
    return cell[a][0] / cell[b][0]


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    server = Server()
    loop = asyncio.new_event_loop()
    try:
        url = f"redis://127.0.0.1:{server.port}/0"
        admin = redis.Redis.from_url(url)
        client = redis.Redis.from_url(url)
        aclient = aredis.Redis.from_url(url)
        print(
            f"redis-server {admin.info('server')['redis_version']}, Python {sys.version.split()[0]}, "
            f"redis-py {redis.__version__}, limits {__import__('limits').__version__}, ratomic {ratomic.__version__}; "
            f"{runs} runs, {seconds:g} s a contender a cell"
        )
        results: list[dict[tuple[str, str], Cell]] = []
        for run in range(1, runs + 1):
            cells: dict[tuple[str, str], Cell] = {}
            for shape in ("1 in flight", f"{IN_FLIGHT} in flight"):
                for kname, keys in KEYSETS.items():
                    tag = f"r{run}-{'s' if shape.startswith('1 ') else 'a'}-{'hot' if len(keys) == 1 else 'many'}"
                    contenders = (
                        blocking_contenders(url, client, tag)
                        if shape == "1 in flight"
                        else async_contenders(url, aclient, tag)
                    )
                    cells[(shape, kname)] = run_cell(admin, shape, keys, contenders, seconds, loop)
            results.append(cells)
            print(f"\nrun {run}: decisions/s (script calls, round trips per 1,000 decisions)")
            for (shape, kname), cell in cells.items():
                row = ", ".join(f"{n} {r:,.0f} ({c:.0f}, {t:.0f})" for n, (r, c, t) in sorted(cell.items()))
                print(f"  {shape}, {kname}: {row}")
        print("\nratios, runs " + " / ".join(str(i) for i in range(1, runs + 1)))
        for shape in ("1 in flight", f"{IN_FLIGHT} in flight"):
            for kname in KEYSETS:
                cs = [r[(shape, kname)] for r in results]
                best = [max(PEERS, key=lambda p, c=c: c[p][0]) for c in cs]
                fmt = lambda xs: " / ".join(f"{x:.2f}" for x in xs)  # noqa: E731
                print(f"  {shape}, {kname}:")
                print(f"    lease off / best limits ({', '.join(best)}): {fmt(ratio(c, 'ratomic, lease off', b) for c, b in zip(cs, best))}  (target >= 1.0)")
                print(f"    lease off / plain script: {fmt(ratio(c, 'ratomic, lease off', 'plain GCRA script') for c in cs)}  (target >= 0.9)")
                print(f"    lease on / best limits: {fmt(ratio(c, 'ratomic, lease on', b) for c, b in zip(cs, best))}" + ("  (target >= 20)" if kname == "hot key" else ""))
                print(f"    lease on / in memory: {fmt(ratio(c, 'ratomic, lease on', 'in memory') for c in cs)}" + ("  (target >= 0.5)" if kname == "hot key" else ""))
                print(f"    script calls per 1,000 decisions, lease off: {fmt(c['ratomic, lease off'][1] for c in cs)}; lease on: {fmt(c['ratomic, lease on'][1] for c in cs)}")
        loop.run_until_complete(aclient.aclose())
        client.close()
        admin.close()
    finally:
        loop.close()
        server.stop()


if __name__ == "__main__":
    main()
