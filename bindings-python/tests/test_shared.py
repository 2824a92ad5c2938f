"""`shared_file=`: limiters in different processes sharing one file.

Real processes (`multiprocessing` with fork), real SIGKILLs, real files in
pytest's tmp_path; no sleeps.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import random
import signal
import sys

import pytest

import ratomic

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="shared_file is Linux only")

CTX = multiprocessing.get_context("fork")
SLOW = 1 / 3600  # one token an hour: no refill during a test


def bucket(path):
    return ratomic.TokenBucket(50, SLOW, max_keys=1000, shared_file=path)


def window(path):
    return ratomic.FixedWindow(50, 3600.0, max_keys=1000, shared_file=path)


def multi(path):
    return ratomic.Limiter(
        {"burst": ratomic.TokenBucket(1000, 1000.0).rule, "slow": ratomic.TokenBucket(50, SLOW).rule},
        max_keys=1000,
        shared_file=path,
    )


BUILDERS = {"bucket": bucket, "window": window, "multi": multi}


def _race(kind, path, calls, start, out):
    limiter = BUILDERS[kind](path)
    start.wait()
    out.put(sum(bool(limiter.allow("key")) for _ in range(calls)))


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_eight_processes_on_one_key_get_exactly_the_limit(tmp_path, kind):
    path = str(tmp_path / f"{kind}.shm")
    start, out = CTX.Barrier(8), CTX.Queue()
    procs = [CTX.Process(target=_race, args=(kind, path, 200, start, out)) for _ in range(8)]
    for p in procs:
        p.start()
    total = sum(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join()
        assert p.exitcode == 0
    assert total == 50
    assert not BUILDERS[kind](path).allow("key"), "the parent sees the key empty too"


def _traffic(path, keys, calls, conn):
    limiter = bucket(path)
    for n in range(calls):
        key = f"k{(n * 7919 + os.getpid()) % keys}"
        if limiter.allow(key):
            conn.send(key)  # reported before the next call: a kill loses nothing granted
    conn.close()


def test_workers_killed_mid_traffic_leave_the_file_usable_and_nothing_over_granted(tmp_path):
    # One pipe per process (a multiprocessing.Queue has a lock a killed
    # writer could hold).
    path = str(tmp_path / "kill.shm")
    keys = 20
    granted: dict[str, int] = {}
    kills = 0
    for _ in range(5):
        procs, readers, victims = [], {}, set()
        for calls in (100_000, 100_000, 300):
            r, w = CTX.Pipe(duplex=False)
            p = CTX.Process(target=_traffic, args=(path, keys, calls, w))
            p.start()
            w.close()
            procs.append(p)
            readers[r] = p
            if calls > 300:
                victims.add(p)
        while readers:
            for r in multiprocessing.connection.wait(list(readers)):
                try:
                    key = r.recv()
                except EOFError:
                    del readers[r]
                    continue
                granted[key] = granted.get(key, 0) + 1
                p = readers[r]
                if p in victims:  # mid-traffic: it was just granted a token
                    os.kill(p.pid, signal.SIGKILL)
                    victims.discard(p)
                    kills += 1
        for p in procs:
            p.join()
    assert all(n <= 50 for n in granted.values()), granted
    # The file still works: drain every key from a new limiter.
    limiter = bucket(path)
    for k in range(keys):
        while limiter.allow(f"k{k}"):
            granted[f"k{k}"] = granted.get(f"k{k}", 0) + 1
    # Each kill may lose one grant made but not yet reported: never more.
    assert all(n <= 50 for n in granted.values()) and len(granted) == keys, granted
    assert sum(granted.values()) >= 50 * keys - kills
    assert limiter.gc() == 0 and len(limiter) == keys


def test_a_file_that_does_not_fit_is_a_clear_error(tmp_path):
    path = tmp_path / "rule.shm"
    first = bucket(path)  # os.PathLike works as well as str
    assert first.allow("a")
    with pytest.raises(ratomic.InvalidArgumentError, match="different rule"):
        ratomic.TokenBucket(60, SLOW, max_keys=1000, shared_file=str(path))
    with pytest.raises(ratomic.InvalidArgumentError, match="different rule"):
        window(path)
    link = tmp_path / "link.shm"
    link.symlink_to(path)
    with pytest.raises(ratomic.InvalidArgumentError, match="symbolic link"):
        bucket(link)
    junk = tmp_path / "junk.shm"
    junk.write_bytes(b"\x07" * 8192)
    junk.chmod(0o600)
    with pytest.raises(ratomic.InvalidArgumentError, match="not a ratomic"):
        bucket(junk)
    open_to_all = tmp_path / "open.shm"
    open_to_all.write_bytes(path.read_bytes())
    open_to_all.chmod(0o644)
    with pytest.raises(ratomic.InvalidArgumentError, match="other users"):
        bucket(open_to_all)
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


def test_shared_file_of_the_wrong_type_is_a_type_error(tmp_path):
    with pytest.raises(TypeError, match="shared_file"):
        ratomic.TokenBucket(5, 1.0, shared_file=42)
    with pytest.raises(TypeError, match="shared_file"):
        ratomic.Quotas(shared_file=["x"])


def test_a_shared_limiter_answers_as_one_in_process(tmp_path):
    # A shared file reads the host's monotonic clock (no other is accepted),
    # so both sides run on it, at rates no test lasts long enough to refill:
    # their answers agree in everything but the waits (read microseconds
    # apart).
    rng = random.Random(7)
    for build in (
        lambda **kw: ratomic.TokenBucket(5, SLOW, max_keys=64, **kw),
        lambda **kw: ratomic.SlidingWindow(5, 3600.0, max_keys=64, **kw),
        lambda **kw: ratomic.Limiter(
            {"a": ratomic.TokenBucket(4, SLOW).rule, "b": ratomic.FixedWindow(9, 3600.0).rule},
            max_keys=64,
            **kw,
        ),
    ):
        local = build()
        shared = build(shared_file=str(tmp_path / f"parity-{rng.random()}.shm"))

        def seen(d):
            if d is None:
                return None
            if isinstance(d, ratomic.Decision):
                return (d.allowed, d.remaining, d.limit)
            return (d.allowed, {n: (x.allowed, x.remaining, x.limit) for n, x in d.entries.items()})

        for _ in range(400):
            key, cost = f"k{rng.randrange(4)}", rng.randrange(4)
            op = rng.random()
            if op < 0.6:
                a, b = local.allow(key, cost=cost), shared.allow(key, cost=cost)
            elif op < 0.85:
                a, b = local.peek(key, cost=cost), shared.peek(key, cost=cost)
            elif op < 0.95:
                a, b = local.refund(key, max(cost, 1)), shared.refund(key, max(cost, 1))
            else:
                a, b = local.reset(key), shared.reset(key)
            assert seen(a) == seen(b), (key, cost, a, b)


def test_a_clock_of_its_own_is_refused_on_a_shared_file(tmp_path):
    # Issue 35: a ManualClock with a shared file was accepted, and one
    # process's times then locked a key in the others' for 653 s.
    path = tmp_path / "clock.shm"
    for build in (
        lambda: ratomic.TokenBucket(5, 1.0, clock=ratomic.ManualClock(), shared_file=str(path)),
        lambda: ratomic.TokenBucket(5, 1.0, clock=lambda: 0.0, shared_file=str(path)),
        lambda: ratomic.FixedWindow(5, 60.0, clock=ratomic.ManualClock(), shared_file=str(path)),
        lambda: ratomic.Limiter({"a": "5/min"}, clock=ratomic.ManualClock(), shared_file=str(path)),
        lambda: ratomic.Quotas(clock=ratomic.ManualClock(), shared_file=str(path)),
    ):
        with pytest.raises(ratomic.InvalidArgumentError, match="monotonic clock"):
            build()
    assert not path.exists(), "a refused limiter makes no file"
    assert ratomic.TokenBucket(5, 1.0, shared_file=str(path)).allow("k")


def test_a_new_limit_takes_the_file_once_its_old_users_have_exited(tmp_path):
    # Issue 36: changing a limit with an existing file was refused even with
    # no process using it (uvicorn's workers then died in a loop).
    path = str(tmp_path / "limits.shm")
    ready, done = CTX.Event(), CTX.Event()

    def old_worker():
        limiter = bucket(path)
        assert limiter.allow("a")
        ready.set()
        done.wait(60)

    p = CTX.Process(target=old_worker)
    p.start()
    assert ready.wait(60)
    with pytest.raises(ratomic.InvalidArgumentError) as e:
        ratomic.TokenBucket(60, SLOW, max_keys=1000, shared_file=path)
    for part in ("in use with a different rule", "token bucket 50 per", "token bucket 60 per", f"rm -- '{path}'"):
        assert part in str(e.value), (part, str(e.value))
    done.set()
    p.join()
    assert p.exitcode == 0
    new = ratomic.TokenBucket(60, SLOW, max_keys=1000, shared_file=path)
    assert sum(bool(new.allow("a")) for _ in range(70)) == 60, "made anew: key a is full"


def _mount_tmpfs(path, size):
    import subprocess

    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_file_system_is_an_error_never_a_bus_error(tmp_path):
    # Issue 35: TokenBucket(5, 1.0, shared_file=…, max_keys=2_000_000) on a
    # 64 MiB tmpfs killed the process with a bus error.
    import subprocess

    fs = tmp_path / "tmpfs"
    _mount_tmpfs(fs, "64m")
    try:
        code = (
            "import ratomic, sys\n"
            f"lim = ratomic.TokenBucket(5, 1.0, shared_file={str(fs / 'limits.shm')!r}, max_keys=2_000_000)\n"
            "n = 0\n"
            "try:\n"
            "    while True:\n"
            "        assert lim.allow(f'key{n}')\n"
            "        n += 1\n"
            "except ratomic.BackendError as e:\n"
            "    print(n, e)\n"
            "    held = len(lim)\n"
            "    try:\n"
            "        lim.allow(f'key{n}')\n"
            "    except ratomic.BackendError:\n"
            "        pass\n"
            "    assert len(lim) == held, 'the refusal changed nothing'\n"
            "    assert lim.allow('key0').remaining == 3, 'keys held still work'\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, (out.returncode, out.stderr)
        n, _, message = out.stdout.partition(" ")
        assert int(n) > 1000, out.stdout
        assert "the file system holding it is full" in message, message
    finally:
        subprocess.run(["umount", str(fs)], check=False)


def test_quotas_share_their_buckets(tmp_path):
    path = str(tmp_path / "quotas.shm")
    a, b = ratomic.Quotas(max_keys=64, shared_file=path), ratomic.Quotas(max_keys=64, shared_file=path)
    three = "3/min"
    assert sum(bool(lim.allow("acme", three)) for lim in (a, b, a, b, a)) == 3
