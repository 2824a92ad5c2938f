"""One limit shared by several processes: ratomic's `shared_file` against
what a Python team would otherwise use (issue 14's peer benchmark).

Run by hand (not a test), in the venv that run-tests.sh made:

    bindings-python/run-tests.sh                      # builds and installs the wheel
    bindings-python/.venv/bin/pip install -r bindings-python/benches/requirements.txt
    bindings-python/.venv/bin/python bindings-python/benches/shared.py [ROUNDS]

To rerun part of it: SCENARIOS=many PROCS=4 ONLY="ratomic shared,ratomic in process"
(comma-separated; ONLY must keep `ratomic shared`, the reference). VERBOSE=1
also prints every run's ns per call as it comes.

It installs the peers (benches/requirements.txt) into that venv if they are
missing and starts its own `redis-server` (no persistence, a free 127.0.0.1
port, flushed before every run of a Redis contender) when one is installed.
Contenders, each called as `call(key)` in a loop by P worker processes at
once (P = 1, 2, 4; `multiprocessing` with fork; each worker builds its own
limiter object after the fork, touches every key it will use once, then all
are released together by a barrier):

- `ratomic shared`: `TokenBucket(10**7, 1.0, max_keys=2**15,
  shared_file=path)`, the file in a fresh private directory (`mkdtemp`) under
  /dev/shm for every run;
- `ratomic in process`: the same limiter without the file (each worker has
  its own: *not* one limit, shown as the floor);
- `pyrate SQLite`: pyrate-limiter's SQLite bucket with its file lock
  (`create_sqlite_limiter(use_file_lock=True)`, `try_acquire(key)`, blocking
  as by default: non-blocking calls that find the file lock held return
  False), its documented way to share a limit between processes.
  Note: that factory makes *one* bucket for every name (the name is stored
  with each item but not counted per name), so its `many` row is one limit
  over all keys, not one per key;
- `limits Redis`: `limits` with `RedisStorage` on the local server, fixed
  window and moving window (`hit(item, key)`).

Limits are never reached: every call must be allowed, and the script says so
when one is not. After every `ratomic shared` run a separate process opens
the file again and checks, by `peek`, that the tokens taken from the keys add
up to the calls made (all processes' calls landed on one shared state; the
refill of 1 token a second is allowed for).

Scenarios: `hot`, one 16-byte key every worker hits; `many`, 10,000 16-byte
keys, each worker visiting them in its own random order. Figures are
wall-clock ns per call per worker (a shared limit's cost includes its waits:
lock, socket, a CPU taken by another worker), the workers' mean, median over
ROUNDS (default 7) rounds in which the contenders take turns (forward order
in even rounds, reversed in odd ones); `calls/s` is all workers' calls over
the time from the first start to the last finish. Ratios are the peer's ns
per call ÷ ratomic shared's (medians; in brackets the range of the per-round
ratios). With P = 4 on a 2-CPU machine every contender's workers share the
CPUs (and redis-server takes one of them while it works).
"""

from __future__ import annotations

import importlib.metadata
import multiprocessing as mp
import os
import platform
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from bench import ensure_peers  # this directory is on sys.path when run as a script

CAP = 10**7  # ratomic's capacity: never reached
REFILL = 1.0  # tokens a second: slow, so no key becomes full (and forgettable) during a run
MAX_KEYS = 1 << 15
KEYS = 10_000
HOT = "user:00000000042"  # 16 bytes, as every key here


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis() -> tuple[subprocess.Popen[bytes], int, str] | None:
    """A redis-server as tests/redis_server.py starts one: a free loopback port, no persistence."""
    exe = shutil.which("redis-server")
    if exe is None:
        return None
    port = free_port()
    work = tempfile.mkdtemp(prefix="ratomic-bench-redis-")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        + ["--dir", work, "--loglevel", "warning"],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(500):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                return proc, port, work
        except OSError:
            time.sleep(0.01)
    proc.kill()
    shutil.rmtree(work, ignore_errors=True)
    return None


def flush_redis(port: int) -> None:
    import redis

    client = redis.Redis(port=port)
    client.flushall()
    client.close()


# ---- contenders: setup(tmpdir, port) -> make; `make()` runs in the worker ---


def ratomic_shared_path(tmp: str) -> str:
    return os.path.join(tmp, "ratomic.shm")


def ratomic_shared(tmp: str, port: int | None) -> Callable[[], Callable[[str], object]]:
    path = ratomic_shared_path(tmp)

    def make() -> Callable[[str], object]:
        import ratomic

        return ratomic.TokenBucket(CAP, REFILL, max_keys=MAX_KEYS, shared_file=path).allow

    return make


def ratomic_local(tmp: str, port: int | None) -> Callable[[], Callable[[str], object]]:
    def make() -> Callable[[str], object]:
        import ratomic

        return ratomic.TokenBucket(CAP, REFILL, max_keys=MAX_KEYS).allow

    return make


def pyrate_sqlite(tmp: str, port: int | None) -> Callable[[], Callable[[str], object]]:
    path = os.path.join(tmp, "pyrate.sqlite")

    def make() -> Callable[[str], object]:
        from pyrate_limiter import Duration, limiter_factory

        lim = limiter_factory.create_sqlite_limiter(
            rate_per_duration=10**9, duration=Duration.SECOND, db_path=path, use_file_lock=True
        )
        # Blocking, its default: with blocking=False a call that finds the file
        # lock held (by another process, or by the bucket's own leak thread)
        # returns False as if the limit were reached.
        return lim.try_acquire

    return make


def limits_redis(strategy: str) -> Callable[[str, int | None], Callable[[], Callable[[str], object]]]:
    def setup(tmp: str, port: int | None) -> Callable[[], Callable[[str], object]]:
        def make() -> Callable[[str], object]:
            from limits import parse, storage, strategies

            cls = strategies.FixedWindowRateLimiter if strategy == "fixed" else strategies.MovingWindowRateLimiter
            lim = cls(storage.RedisStorage(f"redis://127.0.0.1:{port}"))
            item = parse("1000000000/second" if strategy == "fixed" else "10000000/hour")
            hit = lim.hit
            return lambda key: hit(item, key)

        return make

    return setup


# (name, calls per worker, setup, needs redis)
CONTENDERS = [
    ("ratomic shared", 1_000_000, ratomic_shared, False),
    ("ratomic in process", 1_000_000, ratomic_local, False),
    ("pyrate SQLite (file lock)", 2_000, pyrate_sqlite, False),
    ("limits Redis (fixed)", 5_000, limits_redis("fixed"), True),
    ("limits Redis (moving)", 3_000, limits_redis("moving"), True),
]
REF = "ratomic shared"


def key_sequence(scenario: str, calls: int, worker_index: int) -> list[str]:
    if scenario == "hot":
        return [HOT] * calls
    keys = [f"user:{i:011d}" for i in range(KEYS)]
    random.Random(worker_index).shuffle(keys)
    return [keys[i % KEYS] for i in range(calls)]


def worker(
    make: Callable[[], Callable[[str], object]],
    scenario: str,
    calls: int,
    index: int,
    start: mp.synchronize.Barrier,
    out: mp.Queue,
) -> None:
    seq = key_sequence(scenario, calls, index)
    call = make()
    warm = 0
    for k in dict.fromkeys(seq):  # every key it will use, once: keys present when timing starts
        warm += 1 if call(k) else 0
    start.wait()
    ok = 0
    t0 = time.perf_counter_ns()  # CLOCK_MONOTONIC: comparable between processes
    for k in seq:
        if call(k):
            ok += 1
    t1 = time.perf_counter_ns()
    out.put((t0, t1, ok, warm, len(dict.fromkeys(seq))))


def run(make: Callable[[], Callable[[str], object]], scenario: str, calls: int, p: int) -> tuple[float, float, list[str], int]:
    """Returns (mean ns per call per worker, calls/s of all workers, problems, calls made incl. warm-up)."""
    ctx = mp.get_context("fork")
    start, out = ctx.Barrier(p), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(make, scenario, calls, i, start, out)) for i in range(p)]
    for pr in procs:
        pr.start()
    res = [out.get(timeout=900) for _ in procs]
    problems = []
    for pr in procs:
        pr.join()
        if pr.exitcode != 0:
            problems.append(f"worker exit code {pr.exitcode}")
    made = 0
    for t0, t1, ok, warm, distinct in res:
        made += calls + distinct
        if ok != calls or warm != distinct:
            problems.append(f"denied {calls - ok} of {calls} timed calls, {distinct - warm} of {distinct} warm-up calls")
    ns = statistics.mean((t1 - t0) / calls for t0, t1, *_ in res)
    span = max(r[1] for r in res) - min(r[0] for r in res)
    return ns, p * calls / (span / 1e9), problems, made


def check_shared(path: str, scenario: str, p: int, made: int, elapsed_s: float) -> str | None:
    """In a fresh process: the tokens taken from the shared file's keys add up to the calls made."""

    def count(q: mp.Queue) -> None:
        import ratomic

        lim = ratomic.TokenBucket(CAP, REFILL, max_keys=MAX_KEYS, shared_file=path)
        keys = [HOT] if scenario == "hot" else [f"user:{i:011d}" for i in range(KEYS)]
        # peek(cost=1)'s remaining is what would be left after one more call.
        q.put(sum(CAP - 1 - lim.peek(k).remaining for k in keys))

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    pr = ctx.Process(target=count, args=(q,))
    pr.start()
    taken = q.get(timeout=120)
    pr.join()
    keys = 1 if scenario == "hot" else KEYS
    refill = keys * REFILL * (elapsed_s + 1)  # tokens the refill may have given back since each key's first call
    if not (made - refill <= taken <= made):
        return f"ratomic shared count: {taken} tokens taken from the file, {made} calls made by {p} processes"
    return None


def versions() -> str:
    out = []
    for dist in ("ratomic", "pyrate-limiter", "filelock", "limits", "redis"):
        try:
            out.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{dist} missing")
    exe = shutil.which("redis-server")
    if exe:
        v = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.split()
        out.append("redis-server " + next((w[2:] for w in v if w.startswith("v=")), "?"))
    return ", ".join(out)


def commit() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def main() -> None:
    ensure_peers(("limits", "pyrate_limiter", "filelock", "redis"))
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    scenarios = os.environ.get("SCENARIOS", "hot,many").split(",")
    procs = [int(x) for x in os.environ.get("PROCS", "1,2,4").split(",")]
    only = os.environ.get("ONLY")
    contenders = [c for c in CONTENDERS if only is None or c[0] in only.split(",")]
    verbose = bool(os.environ.get("VERBOSE"))
    redis = start_redis()
    port = redis[1] if redis else None
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    problems: list[str] = []
    try:
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; commit {commit()}; {platform.machine()}, {os.cpu_count()} CPUs; "
              f"{platform.python_implementation()} {platform.python_version()}")
        print(f"# {versions()}; redis: {('127.0.0.1:' + str(port)) if port else 'not installed'}")
        print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"# {rounds} rounds; calls per worker: " + ", ".join(f"{n} {c:,}" for n, c, *_ in contenders))
        print()
        for scenario in scenarios:
            title = "one key every worker hits" if scenario == "hot" else f"{KEYS:,} keys, each worker in its own random order"
            print(f"## {scenario}: {title}")
            print()
            print("| P | contender | ns per call per worker: median | min–max | calls/s, all workers | ÷ ratomic shared: median [min–max] |")
            print("|---|---|---:|---:|---:|---|")
            for p in procs:
                ns: dict[str, list[float]] = {name: [] for name, *_ in contenders}
                rate: dict[str, list[float]] = {name: [] for name, *_ in contenders}
                for r in range(rounds):
                    order = contenders if r % 2 == 0 else contenders[::-1]
                    for name, calls, setup, needs_redis in order:
                        if needs_redis:
                            if port is None:
                                continue
                            flush_redis(port)
                        with tempfile.TemporaryDirectory(dir=base, prefix="ratomic-bench-") as tmp:
                            t = time.monotonic()
                            per_call, per_s, bad, made = run(setup(tmp, port), scenario, calls, p)
                            elapsed = time.monotonic() - t
                            if name == REF:
                                miss = check_shared(ratomic_shared_path(tmp), scenario, p, made, elapsed)
                                bad += [miss] if miss else []
                        for b in bad:
                            problems.append(f"{scenario}, P={p}, round {r}, {name}: {b}")
                            print(f"PROBLEM: {problems[-1]}", file=sys.stderr, flush=True)
                        ns[name].append(per_call)
                        rate[name].append(per_s)
                        if verbose:
                            print(f"# {scenario}, P={p}, round {r}: {name} {per_call:,.0f} ns", flush=True)
                ref = statistics.median(ns[REF])
                for name, *_ in contenders:
                    if not ns[name]:
                        continue
                    m = statistics.median(ns[name])
                    per_round = [a / b for a, b in zip(ns[name], ns[REF])]
                    ratio = "" if name == REF else f"{m / ref:.1f} [{min(per_round):.1f}–{max(per_round):.1f}]"
                    print(f"| {p} | {name} | {m:,.0f} | {min(ns[name]):,.0f}–{max(ns[name]):,.0f} "
                          f"| {statistics.median(rate[name]):,.0f} | {ratio} |", flush=True)
            print()
        print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
        if problems:
            print(f"# {len(problems)} PROBLEMS:")
            for b in problems:
                print(f"#   {b}")
        else:
            print("# every call allowed; every ratomic shared run's token count matched the calls made")
    finally:
        if redis:
            redis[0].kill()
            redis[0].wait()
            shutil.rmtree(redis[2], ignore_errors=True)


if __name__ == "__main__":
    main()
