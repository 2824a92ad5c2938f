from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

import ratomic


@pytest.fixture
def clock() -> ratomic.ManualClock:
    return ratomic.ManualClock()


@pytest.fixture(scope="module")
def url() -> str:
    """The PostgreSQL server run-tests.sh started, with ratomic's schema in
    it (the PostgreSQL tests)."""
    import psycopg  # the [postgres] extra: imported only by the PostgreSQL tests

    from ratomic.postgres import migrate

    url = os.environ.get("RATOMIC_POSTGRES_URL")
    assert url, "RATOMIC_POSTGRES_URL: run these tests with bindings-python/run-tests.sh (it starts a server)"
    with psycopg.connect(url, autocommit=True) as conn:
        migrate(conn)
    return url


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    """A real redis-server for the module's tests (see redis_server.py)."""
    from redis_server import Server  # needs redis-py: imported only by the Redis tests

    s = Server()
    yield s
    s.stop()
