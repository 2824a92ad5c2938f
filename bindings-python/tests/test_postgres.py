"""ratomic.postgres against a real PostgreSQL (a throwaway cluster that
run-tests.sh starts with postgres/server.sh; its URL in
RATOMIC_POSTGRES_URL), through psycopg connections and pools, blocking and
asyncio: parity with the in-memory limiters on the same explicit times,
batches, misuse refused before any statement, the failure policy.
"""

from __future__ import annotations

import asyncio
import os
import random
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
    migrate,
    schema,
)


@pytest.fixture(scope="module")
def url() -> str:
    url = os.environ.get("RATOMIC_POSTGRES_URL")
    assert url, "RATOMIC_POSTGRES_URL: run these tests with bindings-python/run-tests.sh (it starts a server)"
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn)
    return url


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
        assert len(executed) == 3 and all(s.startswith("INSERT INTO ratomic_v1_state") for s in executed)
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
