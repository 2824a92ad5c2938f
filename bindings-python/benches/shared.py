"""One limit shared by several processes: ratomic's `shared_file` against
what a Python team would otherwise use.

Run by hand (not a test), in the venv that run-tests.sh made:

    bindings-python/run-tests.sh                      # builds and installs the wheel
    bindings-python/.venv/bin/python bindings-python/benches/shared.py [ROUNDS]

It installs the peers (benches/requirements.txt) into that venv
if they are missing and starts its own `redis-server` (no persistence, a free
127.0.0.1 port) when one is installed. Contenders, each called as
`call(key)` in a loop by P worker processes at once (P = 1, 2, 4; started
with fork, released together):

- `ratomic shared`: `TokenBucket(..., shared_file=path)` on a tmpfs file;
- `ratomic in process`: the same limiter without the file (each worker has
  its own: *not* one limit, shown as the floor);
- `pyrate SQLite`: pyrate-limiter's SQLite bucket with its file lock
  (`create_sqlite_limiter(use_file_lock=True)`), its documented way to share
  a limit between processes;
- `limits Redis`: `limits` with `RedisStorage` on the local server, fixed
  and moving window.

Scenario: one key every worker hits (`hot`), limits never reached. Figures
are wall-clock µs per call per worker (a shared limit's cost includes its
waits: lock, socket), the median over ROUNDS (default 5) rounds in which
the contenders take turns; ratios are the peer's ÷ ratomic shared's.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from bench import ensure_peers  # this directory is on sys.path when run as a script


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis() -> tuple[subprocess.Popen[bytes], int] | None:
    exe = shutil.which("redis-server")
    if exe is None:
        return None
    port = free_port()
    work = tempfile.mkdtemp()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", work],
        stdout=subprocess.DEVNULL,
    )
    for _ in range(500):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                return proc, port
        except OSError:
            time.sleep(0.01)
    proc.kill()
    return None


# ---- contenders: (name, calls per worker, setup(tmpdir, port) -> make) ------
# `make()` runs in the worker and returns `call(key)`.


def ratomic_shared(tmp: str, port: int | None) -> Callable[[], Callable[[str], object]]:
    path = os.path.join(tmp, "ratomic.shm")

    def make() -> Callable[[str], object]:
        import ratomic

        return ratomic.TokenBucket(10**9, 10**6, max_keys=1024, shared_file=path).allow

    return make


def ratomic_local(tmp: str, port: int | None) -> Callable[[], Callable[[str], object]]:
    def make() -> Callable[[str], object]:
        import ratomic

        return ratomic.TokenBucket(10**9, 10**6).allow

    return make


def pyrate_sqlite(tmp: str, port: int | None) -> Callable[[], Callable[[str], object]]:
    path = os.path.join(tmp, "pyrate.sqlite")

    def make() -> Callable[[str], object]:
        from pyrate_limiter import Duration, limiter_factory

        lim = limiter_factory.create_sqlite_limiter(
            rate_per_duration=10**9, duration=Duration.SECOND, db_path=path, use_file_lock=True
        )
        acquire = lim.try_acquire
        return lambda key: acquire(key, blocking=False)

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


CONTENDERS = [
    ("ratomic shared", 200_000, ratomic_shared, False),
    ("ratomic in process", 200_000, ratomic_local, False),
    ("pyrate SQLite (file lock)", 2_000, pyrate_sqlite, False),
    ("limits Redis (fixed)", 5_000, limits_redis("fixed"), True),
    ("limits Redis (moving)", 2_000, limits_redis("moving"), True),
]


def worker(make: Callable[[], Callable[[str], object]], calls: int, start: mp.Barrier, out: mp.Queue) -> None:
    call = make()
    call("warm-up")
    start.wait()
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        call("user:42")
    out.put((time.perf_counter_ns() - t0) / calls / 1000)


def run(make: Callable[[], Callable[[str], object]], calls: int, p: int) -> float:
    ctx = mp.get_context("fork")
    start, out = ctx.Barrier(p), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(make, calls, start, out)) for _ in range(p)]
    for pr in procs:
        pr.start()
    us = [out.get(timeout=600) for _ in procs]
    for pr in procs:
        pr.join()
        assert pr.exitcode == 0
    return statistics.mean(us)


def main() -> None:
    ensure_peers(("limits", "pyrate_limiter", "filelock", "redis"))
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    redis = start_redis()
    port = redis[1] if redis else None
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    try:
        print(f"one key shared by P processes; {rounds} rounds; {os.cpu_count()} CPUs; redis: {port or 'not installed'}")
        print()
        print("| contender | P | µs per call per worker | ÷ ratomic shared |")
        print("|---|---|---|---|")
        for p in (1, 2, 4):
            times: dict[str, list[float]] = {name: [] for name, *_ in CONTENDERS}
            for r in range(rounds):
                order = CONTENDERS if r % 2 == 0 else CONTENDERS[::-1]
                for name, calls, setup, needs_redis in order:
                    if needs_redis and port is None:
                        continue
                    with tempfile.TemporaryDirectory(dir=base) as tmp:
                        times[name].append(run(setup(tmp, port), calls, p))
            ref = statistics.median(times["ratomic shared"])
            for name, *_ in CONTENDERS:
                if times[name]:
                    m = statistics.median(times[name])
                    print(f"| {name} | {p} | {m:.3f} | {m / ref:.1f} |", flush=True)
    finally:
        if redis:
            redis[0].kill()
            redis[0].wait()


if __name__ == "__main__":
    main()
