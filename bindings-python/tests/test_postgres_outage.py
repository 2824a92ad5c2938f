"""ratomic.postgres when the server side of its connection goes away (a
server restart, ``pg_terminate_backend``, a cut network), against the real
PostgreSQL run-tests.sh starts: the limiter's connections are found by
their ``application_name`` and terminated from another connection.

A single psycopg connection does not reconnect: every call on it answers by
``on_error`` from then on, and says how to fix it (a pool); a psycopg_pool
pool replaces the broken connection and the calls reach PostgreSQL again.
Blocking and asyncio.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import typing as _t
import uuid

import psycopg
import psycopg_pool
import pytest

import ratomic
from ratomic.postgres import PostgresTokenBucket

FIX = "psycopg_pool.ConnectionPool"


@pytest.fixture
def app() -> str:
    return f"ratomic-outage-{uuid.uuid4().hex[:12]}"


def terminate(url: str, app: str) -> int:
    """Terminates every backend of ``app`` from a connection of the test's own; how many."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            # In the select list, never in WHERE: the planner may call a
            # function there on rows the other condition rejects.
            "SELECT count(*) FILTER (WHERE t) FROM"
            " (SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity WHERE application_name = %s) s",
            (app,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def fix_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What ratomic.postgres logged about a closed connection, naming the fix."""
    got = [r.getMessage() for r in caplog.records if r.name == "ratomic.postgres"]
    return [m for m in got if "does not reconnect" in m and "ConnectionPool" in m]


def test_a_single_connection_whose_backend_dies_answers_by_the_policy_from_then_on_and_says_to_use_a_pool(
    url: str, app: str, caplog: pytest.LogCaptureFixture
) -> None:
    conn = psycopg.connect(url, autocommit=True, application_name=app)
    try:
        closed = PostgresTokenBucket("100/h", client=conn, prefix=app, on_error="deny")
        raising = PostgresTokenBucket("100/h", client=conn, prefix=app)
        assert closed.allow("k").source == "postgres"
        assert raising.allow("k").source == "postgres"
        assert terminate(url, app) == 1
        with caplog.at_level(logging.WARNING, logger="ratomic.postgres"):
            for _ in range(3):
                d = closed.allow("k")
                assert (d.allowed, d.source) == (False, "policy")
            for _ in range(2):
                with pytest.raises(ratomic.BackendError) as e:
                    raising.allow("k")
                assert FIX in str(e.value) and "does not reconnect" in str(e.value)
                assert isinstance(e.value.__cause__, psycopg.OperationalError)
        assert conn.closed
        # Once per limiter, not once per call.
        assert len(fix_warnings(caplog)) == 2
    finally:
        conn.close()


def test_a_pool_replaces_the_dead_connection_and_the_calls_reach_postgres_again(url: str, app: str) -> None:
    kwargs = {"application_name": app}
    with psycopg_pool.ConnectionPool(url, min_size=1, max_size=1, kwargs=kwargs, open=True) as pool:
        pg = PostgresTokenBucket("100/h", client=pool, prefix=app, on_error="deny")
        assert pg.allow("k").source == "postgres"
        assert terminate(url, app) == 1
        # The pool hands out the dead connection once (it checks none by
        # default): that call answers by the policy, and the pool replaces it.
        assert [pg.allow("k").source for _ in range(3)] == ["policy", "postgres", "postgres"]
    # With check=ConnectionPool.check_connection, not even that one.
    check = psycopg_pool.ConnectionPool.check_connection
    with psycopg_pool.ConnectionPool(url, min_size=1, max_size=1, kwargs=kwargs, check=check, open=True) as pool:
        pg = PostgresTokenBucket("100/h", client=pool, prefix=app, on_error="deny")
        assert pg.allow("k").source == "postgres"
        assert terminate(url, app) == 1
        assert [pg.allow("k").source for _ in range(2)] == ["postgres", "postgres"]


def test_asyncio_a_single_connection_stays_on_the_policy_and_says_to_use_a_pool_a_pool_recovers(
    url: str, app: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True, application_name=app)
        try:
            closed = PostgresTokenBucket("100/h", client=conn, prefix=app, on_error="deny")
            raising = PostgresTokenBucket("100/h", client=conn, prefix=app)
            assert (await closed.allow("k")).source == "postgres"
            assert terminate(url, app) == 1
            for _ in range(3):
                d = await closed.allow("k")
                assert (d.allowed, d.source) == (False, "policy")
            with pytest.raises(ratomic.BackendError) as e:
                await raising.allow("k")
            assert "AsyncConnectionPool" in str(e.value) and "does not reconnect" in str(e.value)
            assert conn.closed
        finally:
            await conn.close()

        pool_app = app + "-pool"
        async with psycopg_pool.AsyncConnectionPool(
            url, min_size=1, max_size=1, kwargs={"application_name": pool_app}, open=False
        ) as pool:
            pg = PostgresTokenBucket("100/h", client=pool, prefix=app, on_error="deny")
            assert (await pg.allow("k")).source == "postgres"
            assert terminate(url, pool_app) == 1
            assert [(await pg.allow("k")).source for _ in range(3)] == ["policy", "postgres", "postgres"]

    with caplog.at_level(logging.WARNING, logger="ratomic.postgres"):
        asyncio.run(main())
    assert len(fix_warnings(caplog)) == 2


def wait_until(what: str, ready: _t.Callable[[], bool]) -> None:
    """Polls ``ready`` (a state another session or thread reaches) for at most a minute."""
    for _ in range(1200):
        if ready():
            return
        time.sleep(0.05)
    pytest.fail(f"never: {what}")


def terminate_waiting(url: str, app: str) -> int:
    """Terminates ``app``'s backends that wait for a lock (its other
    connections live on); how many."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FILTER (WHERE t) FROM (SELECT pg_terminate_backend(pid) AS t FROM pg_stat_activity"
            " WHERE application_name = %s AND wait_event_type = 'Lock') s",
            (app,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def lock_waits(url: str, app: str) -> int:
    """How many of ``app``'s backends wait for a lock."""
    with psycopg.connect(url, autocommit=True) as watch:
        row = watch.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'", (app,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def remaining(url: str, prefix: str) -> int:
    """What key "k" has left, asked on a connection of the test's own (the
    limiter's breaker is open for a second)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return int(PostgresTokenBucket("100/h", client=conn, prefix=prefix).peek("k", 0).remaining)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_calls_waiting_behind_a_statement_whose_connection_dies_are_answered_by_the_open_breaker(
    url: str, app: str, mode: str
) -> None:
    """One statement out (max_in_flight 1), blocked on a row lock another
    session holds; three allows wait to share the next. Its connection dies
    (pg_terminate_backend of that backend only), which opens the breaker
    (breaker_threshold=1): the three are answered by the policy then, as a
    call made then would be, instead of being sent (on a crashed server
    each would wait out the pool's timeout once more; here the pool's other
    connection would carry them, and the lock is released, so they would
    be granted by the server)."""
    prefix = app
    kwargs = {"application_name": app}
    options = {"prefix": prefix, "on_error": "deny", "breaker_threshold": 1, "deny_cache": 0}
    locker = psycopg.connect(url)
    try:
        if mode == "sync":
            with psycopg_pool.ConnectionPool(url, min_size=1, max_size=2, kwargs=kwargs, open=True) as pool:
                pg = PostgresTokenBucket("100/h", client=pool, **options)
                assert pg.max_in_flight == 1
                assert pg.allow("k").source == "postgres"
                locker.execute("SELECT 1 FROM ratomic_v1_state WHERE prefix = %s FOR UPDATE", (prefix,))
                got: dict[int, object] = {}

                def call(i: int) -> None:
                    d = pg.allow("k")
                    got[i] = (d.allowed, d.source)

                first = threading.Thread(target=call, args=(0,))
                first.start()
                wait_until("the first statement waits for the lock", lambda: lock_waits(url, app) == 1)
                rest = [threading.Thread(target=call, args=(i,)) for i in range(1, 4)]
                for t in rest:
                    t.start()
                wait_until("three calls wait to share a statement", lambda: len(pg._queue) == 3)
                assert terminate_waiting(url, app) == 1
                wait_until("the first call is answered", lambda: 0 in got)
                locker.rollback()  # the lock goes: a statement sent now would be answered
                for t in [first, *rest]:
                    t.join(60)
                assert got[0] == (False, "policy")
                assert [got[i] for i in range(1, 4)] == [(False, "policy")] * 3
                assert remaining(url, prefix) == 99, "none of them reached the server"
        else:

            async def main() -> None:
                async with psycopg_pool.AsyncConnectionPool(
                    url, min_size=1, max_size=2, kwargs=kwargs, open=False
                ) as pool:
                    pg = PostgresTokenBucket("100/h", client=pool, **options)
                    assert pg.max_in_flight == 1
                    assert (await pg.allow("k")).source == "postgres"
                    locker.execute("SELECT 1 FROM ratomic_v1_state WHERE prefix = %s FOR UPDATE", (prefix,))
                    first = asyncio.ensure_future(pg.allow("k"))
                    for _ in range(1200):
                        if await asyncio.to_thread(lock_waits, url, app) == 1:
                            break
                        await asyncio.sleep(0.05)
                    rest = [asyncio.ensure_future(pg.allow("k")) for _ in range(3)]
                    for _ in range(100):
                        if len(pg._queue) == 3:
                            break
                        await asyncio.sleep(0)
                    assert len(pg._queue) == 3, "three calls wait to share a statement"
                    assert await asyncio.to_thread(terminate_waiting, url, app) == 1
                    d = await asyncio.wait_for(first, 60)
                    assert (d.allowed, d.source) == (False, "policy")
                    locker.rollback()  # the lock goes: a statement sent now would be answered
                    ds = await asyncio.wait_for(asyncio.gather(*rest), 60)
                    assert [(d.allowed, d.source) for d in ds] == [(False, "policy")] * 3
                    assert await asyncio.to_thread(remaining, url, prefix) == 99, "none of them reached the server"

            asyncio.run(main())
    finally:
        locker.close()
