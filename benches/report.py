#!/usr/bin/env python3
"""Turns criterion's results (target/criterion) into the ratio tables of
BENCHMARKS.md: ratomic vs governor, the algorithms vs TokenBucket,
allow_many vs single calls, and the key stores.

Usage: python3 benches/report.py [target/criterion]   (from the repo root)

Figures are criterion's median time per iteration, in ns.
"""
import json
import pathlib
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
results = {}  # group -> {function: median ns}
for bench in root.glob("**/new/benchmark.json"):
    meta = json.loads(bench.read_text())
    est = json.loads((bench.parent / "estimates.json").read_text())
    results.setdefault(meta["group_id"], {})[meta["function_id"]] = est["median"]["point_estimate"]


def ns(x):
    return f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"


def met(ratio, target):
    return "met" if ratio <= target else f"**not met** ({ratio / target:.2f}× the target)"


def vs_governor():
    targets = {"direct": 1.0, "hot": 1.0, "2threads": 1.0, "keys": 0.7, "insert": 0.7}
    order = ["direct-allow", "direct-deny", "hot-u64", "hot-str16", "hot-deny", "keys100k-u64", "keys1m-u64",
             "keys100k-str16", "keys1m-str16", "insert-u64", "insert-str16", "2threads-hot", "2threads-100k"]
    for clock, title in [("fake", "manual clocks (ratomic ManualClock, governor FakeRelativeClock)"),
                         ("default", "default clocks (ratomic MonotonicClock = Instant, governor DefaultClock = quanta TSC)")]:
        print(f"\n#### ratomic vs governor, {title}\n")
        print("| scenario | ratomic ns | governor ns | ratio ratomic/governor | target | |")
        print("|---|---:|---:|---:|---:|---|")
        for s in order:
            r = results.get(f"{clock}/{s}", {})
            if "ratomic" not in r or "governor" not in r:
                continue
            target = next(v for k, v in targets.items() if s.startswith(k))
            ratio = r["ratomic"] / r["governor"]
            print(f"| {s} | {ns(r['ratomic'])} | {ns(r['governor'])} | {ratio:.2f} | ≤ {target} | {met(ratio, target)} |")


def algorithms():
    targets = {"fixed-window": 1.2, "sliding-window": 1.2, "limiter-tb+fw": 1.6}
    for label in ["hot", "keys100k"]:
        r = results.get(f"alg/{label}", {})
        if "token-bucket" not in r:
            continue
        print(f"\n#### Algorithms, {'one hot key' if label == 'hot' else '100k keys'} (u64 keys, explicit time)\n")
        print("| algorithm | ns per call | ÷ TokenBucket | target | |")
        print("|---|---:|---:|---:|---|")
        tb = r["token-bucket"]
        print(f"| token-bucket | {ns(tb)} | 1.00 | | |")
        for name, target in targets.items():
            if name in r:
                ratio = r[name] / tb
                print(f"| {name} | {ns(r[name])} | {ratio:.2f} | ≤ {target} | {met(ratio, target)} |")
    for label in ["hot", "keys100k"]:
        r = results.get(f"batch64/{label}", {})
        single = r.get("64 x allow_at")
        if single is None:
            continue
        print(f"\n#### allow_many of 64 pairs vs 64 single calls, {'one hot key' if label == 'hot' else '100k keys'}\n")
        print("| form | ns per 64 pairs | ns per pair | ÷ 64 single calls | target | |")
        print("|---|---:|---:|---:|---:|---|")
        print(f"| 64 x allow_at | {ns(single)} | {ns(single / 64)} | 1.00 | | |")
        for name in ["allow_many_at (buffer reused)", "allow_many (new Vec, clock read)"]:
            if name in r:
                ratio = r[name] / single
                print(f"| {name} | {ns(r[name])} | {ns(r[name] / 64)} | {ratio:.2f} | ≤ 1.0 | {met(ratio, 1.0)} |")


def stores():
    names = {"hot": "one hot key", "keys100k": "100k keys, random order", "insert": "100k inserts into an empty map",
             "2threads-100k": "two threads, 100k keys (per call per thread)"}
    print("\n#### Key stores: the same GCRA CAS on an AtomicU64 per u64 key (foldhash)\n")
    print("| scenario | ratomic ns | dashmap ns | papaya ns | scc ns | best peer ÷ ratomic |")
    print("|---|---:|---:|---:|---:|---:|")
    for g, title in names.items():
        r = results.get(f"store/{g}", {})
        if "ratomic" not in r:
            continue
        peers = [r.get(p) for p in ["dashmap", "papaya", "scc"]]
        best = min(p for p in peers if p is not None)
        cells = " | ".join(ns(p) if p is not None else "–" for p in peers)
        print(f"| {title} | {ns(r['ratomic'])} | {cells} | {best / r['ratomic']:.2f} |")


vs_governor()
algorithms()
stores()
