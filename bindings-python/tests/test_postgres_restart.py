"""ratomic.postgres across a real restart of the PostgreSQL server: the
server crashed (``pg_ctl stop -m immediate``), calls made while it is down,
then started again on the same data directory and port, blocking and
asyncio, on a ``psycopg_pool`` pool as the README recommends.

The server is a cluster of this test's own (postgres_cluster.py), never
the shared one run-tests.sh starts for the other tests, and unlike that one
it runs with PostgreSQL's default durable commits (no
``synchronous_commit=off``): what the server answered before the crash was
committed, so it must still be there after it. The limiters run in a child
process (postgres_restart_child.py), so a crash of it, or an exception a
pool worker leaves unhandled, is seen rather than taking pytest with it.

Before the crash every call is answered by PostgreSQL; calls in flight
when it crashes, and calls made while it is down, follow their ``on_error`` (raise, allow, deny, "fallback", an
in-memory limiter of the user's), none waits much beyond the pool's
timeout; after the restart every limiter reaches PostgreSQL again within a
bounded number of tries, and the buckets are as they were committed (a
drained key still drained, a hot key's leased tokens still spent).
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from postgres_cluster import Cluster
from ratomic.postgres import migrate

HERE = os.path.dirname(os.path.abspath(__file__))
#: Seconds a call waits for a connection of the pool (its ``timeout``): the
#: bound on a call while the server is down (the server refuses connections
#: at once, and a dead pooled connection fails at its first use).
POOL_TIMEOUT = 0.5
#: The most a call may take meanwhile: the pool's timeout a few times over,
#: plus a busy 2-core machine's stalls (this VM's have lasted up to 9 s).
#: A hang, or the pool's own default timeout (30 s), is beyond it.
CALL_BOUND = POOL_TIMEOUT * 4 + 15
#: The child must answer each command within this (else it hangs).
COMMAND_BOUND = 120.0
#: After the restart, tries (a quarter of a second apart) before a limiter
#: must reach PostgreSQL again: the pool reconnects with a backoff that
#: doubles from 1 s, so its next attempt comes at most about as long after
#: the restart as the outage lasted.
RECOVERY_TRIES = 240

#: What a limiter answers while the server is down: (allowed, source), or
#: the exception a call raises.
DOWN = {
    "allow": (True, "policy"),
    "deny": (False, "policy"),
    "fresh": (False, "policy"),
    "lease": (False, "policy"),
    "raise": "BackendError",
}
#: The leased key's bucket (postgres_restart_child.HOT): 40 tokens, a day to refill.
HOT_CAPACITY = 40


class Child:
    """postgres_restart_child.py, driven a JSON line at a time."""

    def __init__(self, url: str, mode: str) -> None:
        env = {
            **os.environ,
            "URL": url,
            "MODE": mode,
            "PREFIX": f"restart-{uuid.uuid4().hex[:8]}",
            "POOL_TIMEOUT": str(POOL_TIMEOUT),
        }
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "postgres_restart_child.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=HERE,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        self.out_thread = threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines.put), daemon=True)
        self.out_thread.start()
        self.err_thread = threading.Thread(target=self._pump, args=(self.proc.stderr, self.err.append), daemon=True)
        self.err_thread.start()

    @staticmethod
    def _pump(stream: Any, put: Any) -> None:
        for line in stream:
            put(line)
        put("")  # end of output

    def close(self) -> None:
        """Kills it if it still runs; closes its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.out_thread.join(10)
        self.err_thread.join(10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except BrokenPipeError:
                    pass

    def stderr(self) -> str:
        return "".join(self.err)

    def send(self, cmd: dict[str, Any]) -> list[dict[str, Any]]:
        self.write(cmd)
        return self.read(cmd)

    def write(self, cmd: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # it has exited: read says so

    def read(self, cmd: dict[str, Any]) -> list[dict[str, Any]]:
        """The answer to ``cmd``, written before."""
        try:
            line = self.lines.get(timeout=COMMAND_BOUND)
        except queue.Empty:
            self.proc.kill()
            pytest.fail(f"the child did not answer {cmd} within {COMMAND_BOUND}s (a hang):\n{self.stderr()}")
        if not line:
            code = self.proc.wait()
            self.err_thread.join(10)
            pytest.fail(f"the child exited (code {code}) on {cmd}:\n{self.stderr()}")
        return list(json.loads(line))

    def allow(self, limiter: str, key: str) -> dict[str, Any]:
        return self.send({"op": "allow", "limiter": limiter, "key": key})[0]

    def burst(self, limiter: str, keys: list[str]) -> list[dict[str, Any]]:
        return self.send({"op": "burst", "limiter": limiter, "keys": keys})


def shape(a: dict[str, Any]) -> object:
    """What a call answered: (allowed, source), or the exception's class."""
    return a["error"] if a["error"] is not None else (a["allowed"], a["source"])


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        with psycopg.connect(c.url, autocommit=True) as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",), "durable commits"
            migrate(conn)
        yield c
    finally:
        c.remove()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_server_crashed_and_restarted_policy_meanwhile_then_postgres_with_the_state_it_committed(
    cluster: Cluster, mode: str
) -> None:
    child = Child(cluster.url, mode)
    try:
        # ---- before the crash: PostgreSQL answers --------------------------
        drained = [shape(child.allow("fresh", "drained")) for _ in range(4)]
        assert drained == [(True, "postgres")] * 3 + [(False, "postgres")]
        partial = child.allow("fresh", "partial")
        assert (partial["allowed"], partial["remaining"], partial["source"]) == (True, 2, "postgres")
        for name in ["raise", "allow", "deny", "fallback", "local"]:
            assert shape(child.allow(name, f"before-{name}")) == (True, "postgres"), name
        burst = child.burst("deny", [f"before-burst-{i}" for i in range(6)])
        assert [shape(a) for a in burst] == [(True, "postgres")] * 6
        # A hot key: its second call takes a lease (the call's token and
        # more), whose rest this process still holds when the server crashes.
        hot = [child.allow("lease", "hot") for _ in range(2)]
        assert [shape(a) for a in hot] == [(True, "postgres")] * 2
        assert child.send({"op": "leases"}) == [{"held": 1}]
        granted = len(hot)

        # ---- the server crashes under calls in flight: their statements wait
        # for a row lock another session holds (the limiter's, coalesced,
        # behind them), and each is answered by the policy -------------------
        assert shape(child.allow("deny", "in-flight")) == (True, "postgres")
        locker = psycopg.connect(cluster.url)  # closed, not committed, below: the crash ends it
        try:
            locker.execute("SELECT 1 FROM ratomic_v1_state FOR UPDATE")
            in_flight = {"op": "burst", "limiter": "deny", "keys": ["in-flight"] * 4}
            child.write(in_flight)
            with psycopg.connect(cluster.url, autocommit=True) as watch:
                for _ in range(int(COMMAND_BOUND / 0.05)):
                    waiting = watch.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
                    if waiting and waiting[0] > 0:
                        break
                    time.sleep(0.05)
                else:
                    pytest.fail("the limiter's statement never waited for the row lock")
            cluster.crash()
        finally:
            locker.close()
        down: list[dict[str, Any]] = child.read(in_flight)
        assert [shape(a) for a in down] == [(False, "policy")] * 4

        # ---- while it is down, each call answers by its on_error ----------------
        for name, want in DOWN.items():
            got = [child.allow(name, f"down-{name}-{i}") for i in range(3)]
            down += got
            assert [shape(a) for a in got] == [want] * 3, name
        # "fallback" (a local limiter of the same rule) and the user's own
        # in-memory limiter decide instead: 3 an hour, per key, here.
        for name in ["fallback", "local"]:
            got = [child.allow(name, f"down-{name}") for _ in range(4)]
            down += got
            assert [shape(a) for a in got] == [(True, "fallback")] * 3 + [(False, "fallback")], name
            assert [a["remaining"] for a in got] == [2, 1, 0, 0], name
        # Calls at once share statements (max_in_flight 1 on a pool of 2):
        # a failed batch answers each of its calls by the policy.
        burst = child.burst("deny", [f"down-burst-{i}" for i in range(6)])
        down += burst
        assert [shape(a) for a in burst] == [(False, "policy")] * 6
        # The lease keeps granting what it holds (its slots were committed
        # when it was taken); then the hot key too is answered by the policy.
        hot = [child.allow("lease", "hot") for _ in range(HOT_CAPACITY)]
        down += hot
        leased = [shape(a) for a in hot].index((False, "policy"))
        assert leased >= 1, hot[:3]
        assert [shape(a) for a in hot] == [(True, "lease")] * leased + [(False, "policy")] * (HOT_CAPACITY - leased)
        granted += leased
        slow = [a for a in down if a["seconds"] > CALL_BOUND]
        assert not slow, f"calls beyond {CALL_BOUND}s while the server was down: {slow}"

        # ---- the server is back: every limiter reaches it again ---------------
        cluster.start()
        for name in ["fresh", *DOWN, "fallback", "local"]:
            tries: list[dict[str, Any]] = []
            for i in range(RECOVERY_TRIES):
                a = child.allow(name, f"after-{name}-{i}")
                tries.append(a)
                if a["source"] == "postgres":
                    break
                time.sleep(0.25)
            assert tries[-1]["source"] == "postgres", f"{name}: not back in {RECOVERY_TRIES} tries: {tries[-3:]}"
            assert shape(tries[-1]) == (True, "postgres"), name
            # Meanwhile: the policy's answers, in bounded time.
            for a in tries[:-1]:
                assert shape(a) in (DOWN.get(name), (True, "fallback")), (name, a)
                assert a["seconds"] <= CALL_BOUND, (name, a)
        # The server did not forget: the drained key is still drained, the
        # other still short of the token it gave before the crash.
        d = child.allow("fresh", "drained")
        assert (d["allowed"], d["remaining"], d["source"]) == (False, 0, "postgres")
        d = child.allow("fresh", "partial")
        assert (d["allowed"], d["remaining"], d["source"]) == (True, 1, "postgres")
        burst = child.burst("deny", [f"after-burst-{i}" for i in range(6)])
        assert [shape(a) for a in burst] == [(True, "postgres")] * 6
        # The hot key grants exactly what it had left: every token granted
        # before and during the outage (leased ones too) is still spent.
        after = [child.allow("hot", "hot") for _ in range(HOT_CAPACITY + 1)]
        left = [shape(a) for a in after].index((False, "postgres"))
        assert [shape(a) for a in after] == [(True, "postgres")] * left + [(False, "postgres")] * (HOT_CAPACITY + 1 - left)
        assert granted + left == HOT_CAPACITY, (granted, left)

        # ---- the process lived through it, its pool's workers quiet --------------
        assert child.send({"op": "quit"}) == []
        assert child.proc.wait(COMMAND_BOUND) == 0, child.stderr()
        child.err_thread.join(COMMAND_BOUND)
        err = child.stderr()
        for sign in ["Traceback", "Exception in thread", "Exception ignored", "never retrieved", "Fatal"]:
            assert sign not in err, f"{sign!r} on the child's stderr:\n{err}"
    finally:
        child.close()
