"""ratomic.redis against the raw script and `limits`, through one redis-py client.

Run by hand (not a test), in the venv that run-tests.sh made:

    bindings-python/run-tests.sh                       # builds and installs the wheel
    bindings-python/.venv/bin/python bindings-python/benches/redis_bench.py [ROUNDS]

It starts its own redis-server (a free 127.0.0.1 port, no persistence) and
installs `limits` (benches/requirements.txt) if it is missing. One process,
one blocking `redis.Redis` client for everyone, 1,000 keys in turn, limits
no run reaches. Contenders, interleaved in rounds (their order shuffled
each round), each timed over BATCH calls by wall clock (a round trip is
mostly waiting):

- raw: `client.execute_command("EVALSHA", sha, 1, key, *args)` of ratomic's
  own script, its arguments built once per key before timing: the floor of
  any limiter that uses this script through this client;
- ratomic: `RedisTokenBucket.allow(key)` (checks, arguments, decoding,
  deny cache, breaker: everything);
- limits fixed / limits moving: `limits`' FixedWindowRateLimiter and
  MovingWindowRateLimiter on its Redis storage (same server).

Prints decisions/s (median over rounds) and ratios to ratomic. Then the
deny cache: 10 keys at their limit take 90% of 10,000 calls, 1,000 other
keys the rest; it counts the server's EVALSHA calls (INFO commandstats).
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from bench import ensure_peers  # noqa: E402

ensure_peers(("limits", "redis"))

import redis  # noqa: E402
from limits import parse, storage, strategies  # noqa: E402
from redis_server import Server  # noqa: E402

from ratomic.redis import RedisTokenBucket  # noqa: E402

BATCH = 2_000
KEYS = [f"user:{i}" for i in range(1_000)]


def evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    server = Server()
    try:
        url = f"redis://127.0.0.1:{server.port}/0"
        client = redis.Redis.from_url(url)
        limiter = RedisTokenBucket(10**7, 10.0, client=client, prefix="bench:")
        driver = limiter._driver
        prepared = {k: driver.begin("allow", k, 1).argv for k in KEYS}
        limiter.allow("warm")  # loads the script

        def raw(k: str) -> object:
            return client.execute_command(*prepared[k])

        fixed = strategies.FixedWindowRateLimiter(storage.RedisStorage(url))
        moving = strategies.MovingWindowRateLimiter(storage.RedisStorage(url))
        item_fixed = parse("1000000000/second")
        item_moving = parse("10000000/hour")
        contenders = {
            "raw script": raw,
            "ratomic": limiter.allow,
            "limits fixed": lambda k: fixed.hit(item_fixed, k),
            "limits moving": lambda k: moving.hit(item_moving, k),
        }
        for call in contenders.values():
            for k in KEYS[:50]:
                call(k)
        rates: dict[str, list[float]] = {n: [] for n in contenders}
        order = list(contenders)
        at = 0
        for _ in range(rounds):
            random.shuffle(order)
            for name in order:
                call = contenders[name]
                keys = [KEYS[(at + i) % len(KEYS)] for i in range(BATCH)]
                t0 = time.perf_counter()
                for k in keys:
                    call(k)
                rates[name].append(BATCH / (time.perf_counter() - t0))
            at += BATCH
        print(f"{rounds} rounds of {BATCH} calls each, one blocking client, {len(KEYS)} keys; decisions/s (median)")
        base = statistics.median(rates["ratomic"])
        for name in contenders:
            m = statistics.median(rates[name])
            print(f"  {name:14} {m:10,.0f}/s   ratomic ÷ this: {base / m:5.2f}")

        # The deny cache: 90% of calls on 10 keys at their limit.
        capped = RedisTokenBucket(5, 1 / 3600, client=client, prefix="bench-deny:")
        hot = [f"hot:{i}" for i in range(10)]
        for k in hot:
            while capped.allow(k):
                pass
        rng = random.Random(1)
        calls = [rng.choice(hot) if rng.random() < 0.9 else rng.choice(KEYS) for _ in range(10_000)]
        before = evalsha_calls(client)
        t0 = time.perf_counter()
        sources: dict[str, int] = {}
        for k in calls:
            s = capped.allow(k).source
            sources[s] = sources.get(s, 0) + 1
        took = time.perf_counter() - t0
        sent = evalsha_calls(client) - before
        print(
            f"deny cache, 90% of 10,000 calls over the limit: {sent} EVALSHA sent "
            f"({100 * (1 - sent / len(calls)):.1f}% of calls kept off Redis), {len(calls) / took:,.0f} decisions/s, "
            f"sources {sources}"
        )
        client.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
