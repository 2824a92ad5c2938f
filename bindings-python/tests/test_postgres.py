"""ratomic.postgres against a real PostgreSQL (a throwaway cluster that
run-tests.sh starts with postgres/server.sh; its URL in
RATOMIC_POSTGRES_URL), through psycopg connections and pools, blocking and
asyncio: parity with the in-memory limiters on the same explicit times,
batches, misuse refused before any statement, the failure policy.
"""

from __future__ import annotations

import asyncio
import random
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import psycopg
import psycopg_pool
import pytest

import ratomic
from ratomic import Rule
from ratomic.postgres import (
    PostgresFixedWindow,
    PostgresLimiter,
    PostgresSlidingWindow,
    PostgresTokenBucket,
    schema,
)


@pytest.fixture
def sigint() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in the main thread, as in a terminal:
    a runner started in the background (`cmd &` in a script) inherits
    SIGINT ignored, and Python then installs no handler of its own."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture
def conn(url: str) -> Iterator[psycopg.Connection]:
    c = psycopg.connect(url, autocommit=True)
    yield c
    c.close()


@pytest.fixture
def prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def fields(d: ratomic.Decision | ratomic.MultiDecision) -> tuple[bool, int, int, int, int]:
    """Every field, waits in whole µs rounded up (PostgreSQL computes in whole µs)."""
    d = d.decision if isinstance(d, ratomic.MultiDecision) else d
    up = lambda ns: -(-ns // 1000)  # noqa: E731
    return (d.allowed, d.remaining, d.limit, up(d.retry_after_ns), up(d.reset_after_ns))


@pytest.mark.parametrize(
    "make",
    [
        lambda c, **o: (ratomic.TokenBucket(5, 50.0, clock=c), PostgresTokenBucket(5, 50.0, **o)),
        lambda c, **o: (ratomic.FixedWindow(4, 0.1, clock=c), PostgresFixedWindow(4, 0.1, **o)),
        lambda c, **o: (ratomic.SlidingWindow(4, 0.1, clock=c), PostgresSlidingWindow(4, 0.1, **o)),
        lambda c, **o: (
            ratomic.Limiter({"burst": "2/10ms", "window": Rule.sliding_window(6, 0.1)}, clock=c),
            PostgresLimiter({"burst": "2/10ms", "window": Rule.sliding_window(6, 0.1)}, **o),
        ),
    ],
    ids=["token_bucket", "fixed_window", "sliding_window", "limiter"],
)
def test_explicit_times_decide_as_in_memory_field_by_field(conn: psycopg.Connection, prefix: str, make) -> None:
    clock = ratomic.ManualClock()
    mem, pg = make(clock, client=conn, prefix=prefix)
    rng = random.Random(7)
    now = 1000.0
    for step in range(300):
        # Multiples of 1/64 s: exact in a float, whole microseconds.
        now += rng.choice([0, 0, 1, 3, 8, 32]) / 64
        clock.set(now)
        key = rng.choice(["a", "b", b"c\x00}"])
        cost = rng.randint(0, pg.limit)
        what = rng.random()
        if what < 0.6:
            assert fields(pg.allow_at(key, now, cost)) == fields(mem.allow(key, cost)), step
        elif what < 0.75:
            assert fields(pg.peek_at(key, now, cost)) == fields(mem.peek(key, cost)), step
        elif what < 0.85:
            pg.refund_at(key, now, cost)
            mem.refund(key, cost)
        else:
            reqs = [(rng.choice(["a", "b"]), rng.randint(0, pg.limit)) for _ in range(4)]
            got = [fields(d) for d in pg.allow_many_at(reqs, now)]
            assert got == [fields(d) for d in mem.allow_many(reqs)], step


def test_calls_at_the_server_time_answer_from_postgres_then_the_deny_cache(conn, prefix) -> None:
    pg = PostgresTokenBucket("2/h", client=conn, prefix=prefix)
    assert [pg.allow("k").allowed for _ in range(3)] == [True, True, False]
    again = pg.allow("k")
    assert not again and again.source == "deny_cache" and again.retry_after > 0
    assert pg.peek("k", 0).source == "postgres"
    pg.refund("k", 1)
    assert pg.allow("k").allowed, "a refund through this limiter forgets the cached denial"
    pg.reset("k")
    assert pg.peek("k", 0).remaining == 2
    assert pg.acquire("k", 2, timeout=0).allowed
    assert not pg.acquire("k", 1, timeout=0).allowed, "an hour's wait is past the timeout"


def test_a_decision_raises_synchronous_commit_for_its_own_transaction_only(conn, prefix) -> None:
    # The test cluster runs synchronous_commit = off (fast, not durable). The
    # statements that take tokens commit durably there (local, for their own
    # transaction: the crash test in postgres/tests/server.rs pins that
    # nothing answered is lost) and leave the session's setting as it was.
    show = lambda: conn.execute("SHOW synchronous_commit").fetchone()[0]  # noqa: E731
    assert show() == "off"
    pg = PostgresTokenBucket("5/h", client=conn, prefix=prefix)
    assert pg.allow("k").allowed  # the plain upsert
    assert pg.allow_at("j", 1.0).allowed  # ratomic_v1_call (a key of its own: an earlier time)
    assert show() == "off"


def test_bad_input_is_refused_before_any_statement(conn, prefix) -> None:
    pg = PostgresTokenBucket(3, 1.0, client=conn, prefix=prefix)
    with pytest.raises(ratomic.CostExceedsLimitError):
        pg.allow("k", 4)
    with pytest.raises(ratomic.CostExceedsLimitError) as e:
        pg.allow_many([("a", 1), ("b", 9)])
    assert e.value.index == 1
    with pytest.raises(ratomic.KeyTooLongError):
        pg.allow("x" * 1025)
    with pytest.raises(ratomic.InvalidArgumentError):
        pg.allow_at("k", -1.0)
    rows = conn.execute("SELECT count(*) FROM ratomic_v1_state WHERE prefix = %s", (prefix,)).fetchone()
    assert rows == (0,), "nothing was written"
    conn.close()
    # With the connection gone, a bad call is still the caller's error.
    with pytest.raises(ratomic.CostExceedsLimitError):
        pg.allow("k", 4)


def test_max_in_flight_defaults_to_what_the_client_can_run_and_refuses_bad_values(url, conn) -> None:
    assert PostgresTokenBucket("1/s", client=conn).max_in_flight == 1
    with psycopg_pool.ConnectionPool(url, min_size=1, max_size=3, open=True) as pool:
        assert PostgresTokenBucket("1/s", client=pool).max_in_flight == 2  # half of 3, rounded up
        assert PostgresTokenBucket("1/s", client=pool, max_in_flight=64).max_in_flight == 64
    with pytest.raises(ratomic.InvalidArgumentError, match=">= 1"):
        PostgresTokenBucket("1/s", client=conn, max_in_flight=0)
    for bad in ("4", 2.0, True):
        with pytest.raises(ratomic.ArgumentTypeError, match="max_in_flight must be"):
            PostgresTokenBucket("1/s", client=conn, max_in_flight=bad)


def test_a_connection_in_a_transaction_is_refused_with_what_to_do(url) -> None:
    with psycopg.connect(url) as c:
        with pytest.raises(ratomic.InvalidArgumentError, match="autocommit"):
            PostgresTokenBucket("1/s", client=c)
    with pytest.raises(ratomic.ArgumentTypeError, match="psycopg"):
        PostgresTokenBucket("1/s", client=object())


def test_a_broken_connection_follows_the_policy(url, prefix) -> None:
    c = psycopg.connect(url, autocommit=True)
    closed = PostgresTokenBucket("5/h", client=c, prefix=prefix, on_error="deny", deny_retry_after=7.0)
    raising = PostgresTokenBucket("5/h", client=c, prefix=prefix)
    fallback = PostgresTokenBucket("5/h", client=c, prefix=prefix, on_error="fallback")
    assert closed.allow("k").source == "postgres"
    c.close()
    d = closed.allow("k")
    assert (d.allowed, d.source, d.retry_after) == (False, "policy", 7.0)
    with pytest.raises(ratomic.BackendError) as e:
        raising.allow("k")
    assert isinstance(e.value.__cause__, psycopg.Error)
    assert [fallback.allow("k").source for _ in range(2)] == ["fallback", "fallback"]


def test_a_pool_and_the_asyncio_faces(url, prefix) -> None:
    with psycopg_pool.ConnectionPool(url, min_size=1, max_size=2, open=True) as pool:
        pg = PostgresLimiter({"burst": "3/h", "daily": Rule.fixed_window("10/d")}, client=pool, prefix=prefix)
        assert [pg.allow("k").allowed for _ in range(4)] == [True, True, True, False]
        d = pg.peek("k", 1)
        assert d.denied_by == ("burst",) and d.source == "postgres"
        assert pg.gc() == 0, "the key is not full"

    async def main() -> None:
        aconn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        a = PostgresTokenBucket("3/h", client=aconn, prefix=prefix + "-a")
        got = [(await a.allow("k")).allowed for _ in range(4)]
        assert got == [True, True, True, False]
        ds = await a.allow_many(["x", ("x", 2), ("x", 1)])
        assert [d.allowed for d in ds] == [True, True, False]
        await aconn.close()
        async with psycopg_pool.AsyncConnectionPool(url, min_size=1, max_size=2, open=False) as apool:
            b = PostgresSlidingWindow("2/h", client=apool, prefix=prefix + "-b")
            assert [(await b.allow("k")).allowed for _ in range(3)] == [True, True, False]
            assert (await b.peek("k", 0)).remaining == 0

    asyncio.run(main())


def test_the_schema_is_printable_and_unlogged_on_request() -> None:
    assert "CREATE TABLE IF NOT EXISTS ratomic_v1_state" in schema()
    assert "CREATE UNLOGGED TABLE IF NOT EXISTS ratomic_v1_state" in schema(unlogged=True)


def test_leases_answer_a_hot_key_here_and_go_back(conn, prefix) -> None:
    # 40 tokens, 40 an hour: nothing refills during the test. `auto`: leases
    # of at most 40 / 8 = 5 tokens; a warm key's first is 2.
    a = PostgresTokenBucket(40, 40 / 3600, client=conn, prefix=prefix, lease="auto")
    other = PostgresTokenBucket(40, 40 / 3600, client=conn, prefix=prefix)
    assert a.allow("k").source == "postgres"  # a key seen once takes no lease
    assert a.allow("k").source == "postgres"  # a warm key: this statement took a lease of 2
    assert a.leases_held == 1
    assert other.peek("k", 0).remaining == 36
    other.refund("k", 5)
    other.reset("k")
    assert other.peek("k", 0).remaining == 36  # refunds and resets elsewhere leave the lease's slots alone
    d = a.allow("k")
    assert d.source == "lease" and d.allowed and d.remaining == 37  # the fleet's 36, plus 1 still leased
    assert a.give_back() == 1
    assert (a.leases_held, other.peek("k", 0).remaining) == (0, 37)


def test_leases_from_asyncio_and_bad_lease_options(url, prefix) -> None:
    async def main() -> None:
        aconn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        a = PostgresTokenBucket(40, 40 / 3600, client=aconn, prefix=prefix, lease=4)
        assert (await a.allow("k")).source == "postgres"
        await a.allow("k")  # takes a lease of 2
        assert a.leases_held == 1
        assert await a.give_back() == 1
        assert a.leases_held == 0
        await aconn.close()

    asyncio.run(main())
    with psycopg.connect(url, autocommit=True) as c:
        with pytest.raises(ratomic.InvalidArgumentError, match="token bucket"):
            PostgresFixedWindow("10/s", client=c, prefix=prefix, lease=4)
        with pytest.raises(ratomic.InvalidArgumentError, match="lease"):
            PostgresTokenBucket("10/s", client=c, prefix=prefix, lease="sometimes")
        assert PostgresFixedWindow("10/s", client=c, prefix=prefix, lease="auto").leases_held == 0


def test_the_common_call_is_one_upsert_and_a_denial_writes_nothing(url, conn, prefix) -> None:
    """A token bucket's allow is one statement (the upsert); a denial returns
    no row from it, then ratomic_v1_call answers every field; nothing is
    written by the denial, nor by a cost of 0 (blocking and asyncio)."""

    def row(p: str) -> tuple[object, ...] | None:
        return conn.execute("SELECT xmin::text, state FROM ratomic_v1_state WHERE prefix = %s", (p,)).fetchone()

    executed: list[str] = []

    class Counting(psycopg.Connection):  # type: ignore[type-arg]
        """A connection that records every statement run through it."""

        def execute(self, query, params=None, **kw):  # type: ignore[no-untyped-def,override]
            executed.append(str(query))
            return super().execute(query, params, **kw)

    with Counting.connect(url, autocommit=True) as inner:
        pg = PostgresTokenBucket(3, 3 / 3600, client=inner, prefix=prefix, deny_cache=0)
        got = [pg.allow("k") for _ in range(3)]
        assert [(d.allowed, d.remaining) for d in got] == [(True, 2), (True, 1), (True, 0)]
        assert len(executed) == 3 and all(s.startswith("WITH t AS (SELECT coalesce(") for s in executed)
        before = row(prefix)
        d = pg.allow("k")
        assert (d.allowed, d.remaining, d.limit, d.source) == (False, 0, 3, "postgres")
        # One token every 1,200 s: the next within that, not much sooner (3 were just taken).
        assert 1_100 < d.retry_after <= 1_200 and 3_500 < d.reset_after <= 3_600
        assert len(executed) == 5 and "ratomic_v1_call" in executed[4]
        assert row(prefix) == before, "the denial wrote nothing"
        zero = pg.allow("k", 0)
        assert (zero.allowed, zero.remaining) == (True, 0)
        assert row(prefix) == before, "a cost of 0 wrote nothing"

    async def main() -> None:
        aconn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        a = PostgresTokenBucket(2, 2 / 3600, client=aconn, prefix=prefix + "-a", deny_cache=0)
        got = [await a.allow("k") for _ in range(3)]
        assert [(g.allowed, g.remaining) for g in got] == [(True, 1), (True, 0), (False, 0)]
        assert 1_700 < got[2].retry_after <= 1_800
        await aconn.close()

    asyncio.run(main())


# ---- calls in flight at once share statements (issue 41) ---------------------
#
# The clients below count the statements honestly: each statement the
# limiter runs takes one pool connection (or one execute on a connection).


class CountingPool(psycopg_pool.ConnectionPool):
    def __init__(self, *args, **kwargs) -> None:
        self.statements = 0
        self._count_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def connection(self, *args, **kwargs):  # type: ignore[override]
        with self._count_lock:
            self.statements += 1
        return super().connection(*args, **kwargs)


class CountingAsyncPool(psycopg_pool.AsyncConnectionPool):
    def __init__(self, *args, **kwargs) -> None:
        self.statements = 0
        super().__init__(*args, **kwargs)

    def connection(self, *args, **kwargs):  # type: ignore[override]
        self.statements += 1
        return super().connection(*args, **kwargs)


class CountingConnection(psycopg.Connection):
    statements = 0

    def execute(self, *args, **kwargs):  # type: ignore[override]
        self.statements += 1  # the limiter's calls on it run one at a time
        return super().execute(*args, **kwargs)


class CountingAsyncConnection(psycopg.AsyncConnection):
    statements = 0

    async def execute(self, *args, **kwargs):  # type: ignore[override]
        self.statements += 1
        return await super().execute(*args, **kwargs)


HOUR_OF_50 = 3600 / 50  # seconds per token of "50/h": nothing refills during a test


def check_bucket_of_50(ds: list[ratomic.Decision]) -> None:
    """Exactly 50 granted, and every field of every decision as a bucket of
    50 an hour answers. A batch reads
    the server's clock once, before it waits for its rows (ratomic_v1_many),
    so a call of a batch may be decided a moment before a call that went
    alone and locked the row first: then its remaining count can be one
    lower, or a denial's retry_after a moment, than they would have been
    after it (never a token more granted)."""
    granted = [d for d in ds if d.allowed]
    remaining = sorted(d.remaining for d in granted)
    assert len(granted) == 50, f"{len(granted)} granted"
    assert all(r in (i - 1, i) for i, r in enumerate(remaining)), remaining
    for d in granted:
        assert (d.limit, d.retry_after, d.source) == (50, 0.0, "postgres"), d
        # remaining: the whole tokens left at the decision's time (the
        # bucket is full again after reset_after)
        assert d.remaining == (50 * HOUR_OF_50 * 10**9 - d.reset_after_ns) // (HOUR_OF_50 * 10**9), d
    for d in ds:
        if not d.allowed:
            # A denial waits for one token; full again 49 tokens' time after that.
            assert (d.remaining, d.limit) == (0, 50) and d.source in ("postgres", "deny_cache"), d
            assert 0 < d.retry_after < HOUR_OF_50 + 1 and d.reset_after < 3600 + 1, d
            if d.source == "postgres":
                assert d.reset_after_ns - d.retry_after_ns == 49 * HOUR_OF_50 * 10**9, d


def test_threads_in_flight_at_once_share_statements(url, prefix) -> None:
    # 64 threads x 4 calls on two keys of a bucket of 50 through a pool of
    # 4: one statement per call would take at least 100 (the 50 grants of
    # each key; the deny cache answers some denials without one).
    with CountingPool(url, min_size=4, max_size=4, open=True, kwargs={"autocommit": True}) as pool:
        pg = PostgresTokenBucket("50/h", client=pool, prefix=prefix)
        start = threading.Barrier(64)
        out: dict[str, list[ratomic.Decision]] = {"a": [], "b": []}

        def run(i: int) -> None:
            start.wait()
            for j in range(4):
                key = "ab"[(i + j) % 2]
                out[key].append(pg.allow(key))  # list.append is atomic

        threads = [threading.Thread(target=run, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(out["a"]) == len(out["b"]) == 128
        check_bucket_of_50(out["a"])
        check_bucket_of_50(out["b"])
        assert pool.statements < 100, f"{pool.statements} statements for 256 calls: they did not share"


def test_asyncio_tasks_in_flight_at_once_share_statements(url, prefix) -> None:
    async def main() -> None:
        async with CountingAsyncPool(url, min_size=4, max_size=4, kwargs={"autocommit": True}) as pool:
            pg = PostgresTokenBucket("50/h", client=pool, prefix=prefix)
            keys = ["ab"[i % 2] for i in range(400)]
            ds = await asyncio.gather(*(pg.allow(k) for k in keys))
            check_bucket_of_50([d for d, k in zip(ds, keys) if k == "a"])
            check_bucket_of_50([d for d, k in zip(ds, keys) if k == "b"])
            # 4 go at once; the 396 that wait go in the next 2 statements
            # (MAX_BATCH = 256 each), then the deny cache answers.
            assert pool.statements < 40, f"{pool.statements} statements for 400 calls: they did not share"
            # What does not coalesce still goes alone and right.
            assert (await pg.peek("a", 0)).remaining == 0
            assert [d.allowed for d in await pg.allow_many(["c", ("c", 50)])] == [True, False]

    asyncio.run(main())


@pytest.mark.parametrize("policy", ["deny", "allow", "raise", "fallback"])
def test_a_statement_timeout_answers_every_waiting_thread_by_the_policy(url, prefix, policy) -> None:
    # The key's row is held FOR UPDATE by another transaction: every
    # statement on it ends by the limiter connection's statement_timeout.
    on_error: object = ratomic.TokenBucket("50/h") if policy == "fallback" else policy
    conn = CountingConnection.connect(url, autocommit=True)
    holder = psycopg.connect(url)
    try:
        pg = PostgresTokenBucket(
            "50/h", client=conn, prefix=prefix, on_error=on_error, deny_retry_after=7.0, breaker_threshold=1000
        )
        assert pg.allow("k").allowed  # the row exists (without a timeout: a loaded machine may be slow)
        conn.execute("SET statement_timeout = 200")
        holder.execute("SELECT 1 FROM ratomic_v1_state WHERE prefix = %s FOR UPDATE", (prefix,))
        before = conn.statements
        start = threading.Barrier(20)
        answers: list[object] = []

        def run() -> None:
            start.wait()
            try:
                answers.append(pg.allow("k"))
            except ratomic.BackendError as e:
                answers.append(e)

        threads = [threading.Thread(target=run) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a caller still waits"
        assert len(answers) == 20
        if policy == "raise":
            assert all(isinstance(a, ratomic.BackendError) for a in answers), answers
            assert all(isinstance(a.__cause__, psycopg.errors.QueryCanceled) for a in answers)  # type: ignore[union-attr]
        elif policy == "fallback":
            assert sorted(a.remaining for a in answers) == list(range(30, 50))  # type: ignore[union-attr]
            assert {a.source for a in answers} == {"fallback"}  # type: ignore[union-attr]
        else:
            want = (policy == "allow", "policy")
            assert {(a.allowed, a.source) for a in answers} == {want}, answers  # type: ignore[union-attr]
        # The 19 that waited behind the first went together: one timeout
        # each statement, not one each call.
        assert conn.statements - before < 10, f"{conn.statements - before} statements for 20 calls"
    finally:
        holder.rollback()
        holder.close()
        conn.close()
    with psycopg.connect(url, autocommit=True) as c:
        # Every call ended by the timeout: none took a token.
        assert PostgresTokenBucket("50/h", client=c, prefix=prefix).peek("k", 0).remaining == 49


def test_a_statement_timeout_answers_every_waiting_task(url, prefix) -> None:
    async def main() -> None:
        conn = await CountingAsyncConnection.connect(url, autocommit=True)
        holder = await psycopg.AsyncConnection.connect(url)
        try:
            pg = PostgresTokenBucket("50/h", client=conn, prefix=prefix, breaker_threshold=1000)
            assert (await pg.allow("k")).allowed  # without a timeout: a loaded machine may be slow
            await conn.execute("SET statement_timeout = 200")
            await holder.execute("SELECT 1 FROM ratomic_v1_state WHERE prefix = %s FOR UPDATE", (prefix,))
            before = conn.statements
            answers = await asyncio.gather(*(pg.allow("k") for _ in range(20)), return_exceptions=True)
            assert all(isinstance(a, ratomic.BackendError) for a in answers), answers
            assert all(isinstance(a.__cause__, psycopg.errors.QueryCanceled) for a in answers)
            assert conn.statements - before == 2, "the first call's statement, then one for the 19 that waited"
        finally:
            await holder.rollback()
            await holder.close()
            await conn.close()

    asyncio.run(main())


def test_a_cancelled_task_leading_a_batch_strands_nobody(url, prefix) -> None:
    async def main() -> None:
        async with CountingAsyncPool(url, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
            pg = PostgresTokenBucket("50/h", client=pool, prefix=prefix)
            assert (await pg.allow("k")).allowed  # the row exists: 49 left
            holder = await psycopg.AsyncConnection.connect(url)
            await holder.execute("SELECT 1 FROM ratomic_v1_state WHERE prefix = %s FOR UPDATE", (prefix,))
            before = pool.statements
            # The leader's statement is out (and waits for the row); the
            # 20 after it wait for it to end, to go together.
            leader = asyncio.ensure_future(pg.allow("k"))
            await asyncio.sleep(0)
            waiting = [asyncio.ensure_future(pg.allow("k")) for _ in range(20)]
            await asyncio.sleep(0)
            waiting[0].cancel()  # one that waits gives up too: it needs no decision
            leader.cancel()
            with pytest.raises(asyncio.CancelledError):
                await leader
            await holder.rollback()  # the row is free: the 19 go
            await holder.close()
            ds = await asyncio.wait_for(asyncio.gather(*waiting[1:]), timeout=60)
            assert waiting[0].cancelled()
            assert pool.statements - before == 2, "the leader's statement, then one for the 19 that waited"
            # The one that waited took nothing. Whether the leader's statement
            # did depends on how soon the server saw its cancel: psycopg sends
            # one, and if the statement has not ended in time it closes the
            # connection ("query not terminated after cancellation"), and the
            # statement may still run once the row is free (CI saw both). Either
            # way nobody is stranded and nothing is over-granted: the 19 took the
            # 19 tokens after the leader's, if it took one.
            left = (await pg.peek("k", 0)).remaining
            assert left in (29, 30), left
            assert sorted(d.remaining for d in ds) == list(range(left, left + 19)) and all(d.allowed for d in ds)

    asyncio.run(main())


def wait_for_lock(url: str, statement: str) -> None:
    """Until a statement starting with ``statement`` waits for a row lock."""
    with psycopg.connect(url, autocommit=True) as c:
        for _ in range(6000):
            row = c.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
                (statement + "%",),
            ).fetchone()
            if row and row[0] > 0:
                return
            time.sleep(0.01)
    raise AssertionError(f"no {statement} statement came to wait for its row")


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_an_interrupted_thread_leading_a_batch_strands_nobody(url, prefix, sigint) -> None:
    # This thread leads a batch whose statement waits for a row another
    # transaction holds, and is interrupted (SIGINT: KeyboardInterrupt)
    # there; the five calls it carries are answered by the policy.
    conn = psycopg.connect(url, autocommit=True, options="-c statement_timeout=20000")  # bounds a failing run
    holders = [psycopg.connect(url), psycopg.connect(url)]
    pg = PostgresTokenBucket("50/h", client=conn, prefix=prefix, on_error="deny", deny_retry_after=7.0)
    try:
        assert pg.allow("j").allowed and pg.allow("k").allowed  # both rows exist
        for h, key in zip(holders, ("j", "k")):
            h.execute("SELECT 1 FROM ratomic_v1_state WHERE prefix = %s AND key = %s FOR UPDATE", (prefix, key.encode()))
        first: list[object] = []
        carried: list[object] = []
        a = threading.Thread(target=lambda: first.append(pg.allow("j")))
        a.start()
        wait_for_lock(url, "WITH t AS (SELECT coalesce(")  # the one statement out: the rest wait

        def drive() -> None:
            while not pg._queue:  # this thread waits first: it will lead
                time.sleep(0.001)
            others = [threading.Thread(target=lambda: carried.append(pg.allow("k"))) for _ in range(5)]
            for t in others:
                t.start()
            while len(pg._queue) < 6:
                time.sleep(0.001)
            holders[0].commit()  # the statement out ends: this thread sends the six
            wait_for_lock(url, "SELECT ratomic_v1_many")
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            for t in others:
                t.join(timeout=60)

        driver = threading.Thread(target=drive)
        driver.start()
        with pytest.raises(KeyboardInterrupt):
            pg.allow("k")
        driver.join(timeout=120)
        a.join(timeout=60)
        assert not driver.is_alive() and not a.is_alive()
        assert [getattr(d, "source", d) for d in first] == ["postgres"]
        assert [(d.allowed, d.source, d.retry_after) for d in carried] == [(False, "policy", 7.0)] * 5  # type: ignore[attr-defined]
        holders[1].commit()
        # The slot went back: the next call goes, and the cancelled batch took nothing.
        d = pg.allow("k")
        assert (d.allowed, d.remaining, d.source) == (True, 48, "postgres")
    finally:
        for h in holders:
            h.close()
        conn.close()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_an_interrupted_thread_waiting_for_a_statement_strands_nobody(url, prefix, sigint) -> None:
    # This thread waits first (it would lead the next batch) and is
    # interrupted while it waits; the five that wait after it go without it.
    conn = psycopg.connect(url, autocommit=True, options="-c statement_timeout=20000")  # bounds a failing run
    holder = psycopg.connect(url)
    pg = PostgresTokenBucket("50/h", client=conn, prefix=prefix)
    try:
        assert pg.allow("j").allowed and pg.allow("k").allowed
        holder.execute("SELECT 1 FROM ratomic_v1_state WHERE prefix = %s AND key = %s FOR UPDATE", (prefix, b"j"))
        first: list[object] = []
        after: list[object] = []
        a = threading.Thread(target=lambda: first.append(pg.allow("j")))
        a.start()
        wait_for_lock(url, "WITH t AS (SELECT coalesce(")
        others = [threading.Thread(target=lambda: after.append(pg.allow("k"))) for _ in range(5)]

        def drive() -> None:
            while not pg._queue:  # this thread waits
                time.sleep(0.001)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            for t in others:
                t.start()
            while len(pg._queue) < 5:
                time.sleep(0.001)
            holder.commit()  # the statement out ends: the five go
            for t in others:
                t.join(timeout=60)

        driver = threading.Thread(target=drive)
        driver.start()
        with pytest.raises(KeyboardInterrupt):
            pg.allow("k")
        driver.join(timeout=120)
        a.join(timeout=60)
        assert not driver.is_alive() and not a.is_alive() and not any(t.is_alive() for t in others)
        assert sorted(d.remaining for d in after) == [44, 45, 46, 47, 48]  # type: ignore[attr-defined]
        assert pg.peek("k", 0).remaining == 44, "the interrupted call took no token"
    finally:
        holder.close()
        conn.close()
