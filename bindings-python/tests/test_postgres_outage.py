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
