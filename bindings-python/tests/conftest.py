from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import ratomic


@pytest.fixture
def clock() -> ratomic.ManualClock:
    return ratomic.ManualClock()


@pytest.fixture(scope="module")
def server() -> Iterator[Any]:
    """A real redis-server for the module's tests (see redis_server.py)."""
    from redis_server import Server  # needs redis-py: imported only by the Redis tests

    s = Server()
    yield s
    s.stop()
