"""ratomic's Python package against the limiters a Python user would pick.

Run by hand (not a test), in the venv that run-tests.sh made:

    bindings-python/run-tests.sh                      # builds and installs the wheel
    bindings-python/.venv/bin/python bindings-python/benches/bench.py

It installs the peers (benches/requirements.txt: limits, pyrate-limiter,
psutil) into that venv if they are missing, then prints one table: ns per
call (best of several rounds) and calls per second for

- allow on one hot key (every call allowed),
- allow over 100k distinct keys (every call allowed),
- a denial (one key, drained),

for ratomic's TokenBucket, FixedWindow and SlidingWindow, `limits`
(MemoryStorage; fixed window and moving window) and `pyrate-limiter`
(in-memory, a bucket per key), beside the floor: the same loop calling an
empty Python function; each ratomic limiter's ratio to the floor and to
`limits`' fixed window on the hot key, each measured in passes alternating
with the other (so that the machine's swings between scenarios cancel). Then
the RSS growth of 1M live keys, each measured in a fresh process.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable

HERE = os.path.dirname(os.path.abspath(__file__))


def ensure_peers(modules: tuple[str, ...] = ("limits", "pyrate_limiter", "psutil")) -> None:
    """Installs benches/requirements.txt if any of `modules` is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        print(f"installing {', '.join(missing)} from benches/requirements.txt ...", flush=True)
        subprocess.check_call(
            [sys.executable, "-m", "pip", "install", "--quiet", "-r", os.path.join(HERE, "requirements.txt")]
        )


# ---- the contenders: each a factory returning `call(key) -> allowed?` -------
#
# "allowed" runs use a limit no run reaches, and (for ratomic) a refill slow
# enough that no key becomes full again during the run, so every key stays
# live in the store: 10^7 tokens refilled at 10/s, or 10^7 per day (5·10^6
# for the sliding window, whose largest limit for a day is 8,388,607).
# "Denied" runs drain one key of a limit of 1 per hour first.


def ratomic_factory(kind: str) -> Callable[[bool], Callable[[str], object]]:
    import ratomic

    def make(deny: bool) -> Callable[[str], object]:
        if kind == "TokenBucket":
            lim = ratomic.TokenBucket(1, 1 / 3600) if deny else ratomic.TokenBucket(10**7, 10.0)
        elif kind == "FixedWindow":
            lim = ratomic.FixedWindow(1, 3600.0) if deny else ratomic.FixedWindow(10**7, 86400.0)
        else:
            lim = ratomic.SlidingWindow(1, 3600.0) if deny else ratomic.SlidingWindow(5 * 10**6, 86400.0)
        return lim.allow  # a Decision, truthy when allowed

    return make


def limits_factory(strategy: str) -> Callable[[bool], Callable[[str], object]]:
    from limits import parse, storage, strategies

    def make(deny: bool) -> Callable[[str], object]:
        cls = strategies.FixedWindowRateLimiter if strategy == "fixed" else strategies.MovingWindowRateLimiter
        lim = cls(storage.MemoryStorage())
        # The moving window keeps one timestamp per hit, up to the limit.
        item = parse("1/hour") if deny else parse("1000000000/second" if strategy == "fixed" else "10000000/second")
        hit = lim.hit
        return lambda key: hit(item, key)

    return make


def pyrate_factory() -> Callable[[bool], Callable[[str], object]]:
    import pyrate_limiter as p

    class PerKey(p.BucketFactory):
        """A bucket per key, made on first use (no background leaker)."""

        def __init__(self, rates: list[p.Rate]) -> None:
            self.rates = rates
            self.buckets: dict[str, p.InMemoryBucket] = {}
            self.clock = p.MonotonicClock()

        def wrap_item(self, name: str, weight: int = 1) -> p.RateItem:
            return p.RateItem(name, self.clock.now(), weight=weight)

        def get(self, item: p.RateItem) -> p.InMemoryBucket:
            b = self.buckets.get(item.name)
            if b is None:
                b = self.buckets[item.name] = p.InMemoryBucket(self.rates)
            return b

    def make(deny: bool) -> Callable[[str], object]:
        rate = p.Rate(1, p.Duration.HOUR) if deny else p.Rate(10_000_000, p.Duration.SECOND)
        lim = p.Limiter(PerKey([rate]))
        acquire = lim.try_acquire
        return lambda key: acquire(key, blocking=False)

    return make


def empty(key: str) -> None:
    pass


# ---- timing -----------------------------------------------------------------


def per_call_ns(call: Callable[[str], object], keys: list[str], rounds: int) -> float:
    """Best ns per call over `rounds` passes of `call(k) for k in keys`.

    CPU time of this process (`process_time_ns`), not wall time: the machine
    is shared, and time spent descheduled is not the limiter's cost.
    """
    best = float("inf")
    for _ in range(rounds):
        gc.disable()
        t0 = time.process_time_ns()
        for k in keys:
            call(k)
        dt = time.process_time_ns() - t0
        gc.enable()
        best = min(best, dt / len(keys))
    return best


def scenario_keys(name: str) -> list[str]:
    if name == "hot":
        return ["user:42"] * 200_000
    if name == "100k":
        return [f"user:{i}" for i in range(100_000)]
    return ["user:42"] * 100_000  # deny


def run_scenario(
    name: str, make: Callable[[bool], Callable[[str], object]], rounds: int
) -> tuple[float, float]:
    """(best ns per call, best ns per call of the floor measured in rounds
    interleaved with it), so a ratio compares the two under the same load."""
    deny = name == "deny"
    call = make(deny)
    keys = scenario_keys(name)
    if deny:
        call(keys[0])  # drain the key
        assert not call(keys[0]), "the denial scenario must deny"
    else:
        assert call(keys[0]), "the allowed scenarios must allow"
        for k in keys[1:1000]:
            call(k)
    floor, best = interleaved((empty, keys), (call, keys), rounds)
    return best, floor


def interleaved(
    a: tuple[Callable[[str], object], list[str]], b: tuple[Callable[[str], object], list[str]], rounds: int
) -> tuple[float, float]:
    """Best ns per call of `a` and of `b` (each a call and its keys), timed
    in alternating passes, so that a ratio of the two compares them under
    the same load."""
    best_a, best_b = float("inf"), float("inf")
    for _ in range(rounds):
        best_a = min(best_a, per_call_ns(a[0], a[1], 1))
        best_b = min(best_b, per_call_ns(b[0], b[1], 1))
    return best_a, best_b


def paired_hot_ratio(
    peer_make: Callable[[bool], Callable[[str], object]],
    ours_make: Callable[[bool], Callable[[str], object]],
    rounds: int,
) -> float:
    """The peer's best ns per call on the hot key ÷ ours, the two measured
    in alternating passes (the peer's a tenth as long: its calls cost ~20x
    more), so that the ratio compares them under the same load rather than
    across the seconds between their own scenarios."""
    peer, ours = peer_make(False), ours_make(False)
    keys = scenario_keys("hot")
    assert peer(keys[0]) and ours(keys[0]), "the hot scenario must allow"
    best_peer, best_ours = interleaved((peer, keys[: len(keys) // 10]), (ours, keys), rounds)
    return best_peer / best_ours


# ---- memory -----------------------------------------------------------------

RSS_CHILD = r"""
import sys, psutil, gc
kind, n = sys.argv[1], int(sys.argv[2])
proc = psutil.Process()
if kind.startswith("ratomic"):
    import ratomic
    lim = {"ratomic TokenBucket": lambda: ratomic.TokenBucket(10, 1 / 3600),
           "ratomic FixedWindow": lambda: ratomic.FixedWindow(10, 3600.0),
           "ratomic SlidingWindow": lambda: ratomic.SlidingWindow(10, 3600.0)}[kind]()
    call = lim.allow
else:
    from limits import parse, storage, strategies
    lim = strategies.FixedWindowRateLimiter(storage.MemoryStorage())
    item = parse("10/hour")
    call = lambda k: lim.hit(item, k)
gc.collect()
before = proc.memory_info().rss
for i in range(n):
    call("user:%d" % i)
gc.collect()
after = proc.memory_info().rss
live = len(lim) if kind.startswith("ratomic") else n
print(after - before, live)
"""


def rss_growth(kind: str, n: int) -> tuple[int, int]:
    out = subprocess.check_output([sys.executable, "-c", RSS_CHILD, kind, str(n)], text=True)
    grown, live = out.split()
    return int(grown), int(live)


# ---- main -------------------------------------------------------------------


def main() -> None:
    ensure_peers()
    import limits
    import pyrate_limiter

    import ratomic

    rounds = int(os.environ.get("ROUNDS", "9"))
    contenders: list[tuple[str, Callable[[bool], Callable[[str], object]]]] = [
        ("ratomic TokenBucket", ratomic_factory("TokenBucket")),
        ("ratomic FixedWindow", ratomic_factory("FixedWindow")),
        ("ratomic SlidingWindow", ratomic_factory("SlidingWindow")),
        ("limits FixedWindow (MemoryStorage)", limits_factory("fixed")),
        ("limits MovingWindow (MemoryStorage)", limits_factory("moving")),
        ("pyrate-limiter (InMemoryBucket per key)", pyrate_factory()),
    ]
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {platform.machine()}, {os.cpu_count()} cores, "
          f"{platform.python_implementation()} {platform.python_version()}")
    print(f"# ratomic {ratomic.__version__}, limits {limits.__version__}, pyrate-limiter {pyrate_limiter.__version__}")
    print(f"# best of {rounds} rounds (peers: {max(2, rounds // 3)}); CPU ns per call (calls per CPU-second)\n")

    scenarios = ("hot", "100k", "deny")
    rows: list[tuple[str, dict[str, float]]] = []
    paired_floor: dict[str, dict[str, float]] = {}
    for name, make in contenders:
        n = rounds if name.startswith("ratomic") else max(2, rounds // 3)
        results = {s: run_scenario(s, make, n) for s in scenarios}
        rows.append((name, {s: r[0] for s, r in results.items()}))
        paired_floor[name] = {s: r[1] for s, r in results.items()}
    floor = {s: min(f[s] for f in paired_floor.values()) for s in scenarios}
    rows.insert(0, ("floor: empty Python function", floor))

    print("| limiter | allow, hot key | allow, 100k keys | denial |")
    print("|---|---|---|---|")
    for name, r in rows:
        cells = [f"{r[s]:,.0f} ns ({1e9 / r[s] / 1e6:.2f} M/s)" for s in ("hot", "100k", "deny")]
        print(f"| {name} | " + " | ".join(cells) + " |")

    by_name = dict(rows)
    makers = dict(contenders)
    print("\nRatios (each against the floor, or limits' fixed window, measured in rounds interleaved with it):")
    print("| limiter | hot / floor (target <= 5x) | 100k keys / floor (target <= 12x) | denial / floor "
          "| limits fixed window hot / this (target >= 20x) |")
    print("|---|---|---|---|---|")
    for name in ("ratomic TokenBucket", "ratomic FixedWindow", "ratomic SlidingWindow"):
        r, f = by_name[name], paired_floor[name]
        vs_limits = paired_hot_ratio(makers["limits FixedWindow (MemoryStorage)"], makers[name], rounds)
        print(f"| {name} | {r['hot'] / f['hot']:.1f}x | {r['100k'] / f['100k']:.1f}x | {r['deny'] / f['deny']:.1f}x "
              f"| {vs_limits:.1f}x |")

    if os.environ.get("SKIP_RSS") != "1":
        print("\nRSS growth for 1M live keys (fresh process each):")
        for kind in ("ratomic TokenBucket", "ratomic FixedWindow", "ratomic SlidingWindow", "limits FixedWindow"):
            grown, live = rss_growth(kind, 1_000_000)
            print(f"- {kind}: {grown / 2**20:.1f} MiB for {live:,} live keys ({grown / live:.0f} B/key)")


if __name__ == "__main__":
    main()
