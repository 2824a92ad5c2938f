"""Calls in flight at the same time share round trips (ratomic.redis),
against a real redis-server: 1,000 concurrent awaits on a default asyncio
client and 100 threads on a default blocking one, each on a bucket of half
as many, get exactly the bucket, with no error, in far fewer round trips
than calls (counted by the server) and a handful of connections."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
import redis
import redis.asyncio as aredis

from ratomic.redis import RedisTokenBucket
from redis_server import Server


@pytest.fixture
def prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}:"


def counters(server: Server) -> tuple[int, int]:
    """The server's read events so far (one per round trip that reached it)
    and connections received so far; this INFO call's own read included."""
    admin = redis.Redis(port=server.port)
    stats = admin.info("stats")
    admin.close()
    return stats["total_reads_processed"], stats["total_connections_received"]


def evalsha_calls(server: Server) -> int:
    admin = redis.Redis(port=server.port)
    calls = admin.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    admin.close()
    return int(calls)


def test_a_thousand_awaits_on_a_default_asyncio_client_share_round_trips(server, prefix):
    async def main() -> tuple[list[object], int, int]:
        client = aredis.Redis(port=server.port)  # every setting as it comes
        l = RedisTokenBucket(500, 1 / 3600, client=client, prefix=prefix)  # and the limiter's
        assert (await l.peek("warm-up")).allowed  # one connection, the script loaded
        reads, connections = counters(server)
        out = await asyncio.gather(*(l.allow("hot") for _ in range(1_000)), return_exceptions=True)
        after_reads, after_connections = counters(server)
        await client.aclose()
        return out, after_reads - reads - 1, after_connections - connections - 1

    out, trips, connections = asyncio.run(main())
    errors = [o for o in out if isinstance(o, BaseException)]
    assert not errors, f"{len(errors)} errors, e.g. {errors[0]!r}"
    assert sum(bool(d) for d in out) == 500
    assert trips < 100, f"{trips} round trips reached the server for 1,000 calls"
    assert connections <= 3, f"{connections} connections opened"


def test_a_hundred_threads_on_a_default_blocking_client_share_round_trips(server, prefix):
    client = redis.Redis(port=server.port)
    l = RedisTokenBucket(50, 1 / 3600, client=client, prefix=prefix, deny_cache=0)
    assert l.peek("warm-up").allowed
    start = threading.Barrier(100)
    out: list[object] = []

    def run() -> None:
        start.wait()
        try:
            out.append(l.allow("hot"))
        except Exception as e:  # noqa: BLE001 - counted below
            out.append(e)

    reads, connections = counters(server)
    threads = [threading.Thread(target=run) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    after_reads, after_connections = counters(server)
    client.close()
    errors = [o for o in out if isinstance(o, BaseException)]
    assert not errors, f"{len(errors)} errors, e.g. {errors[0]!r}"
    assert sum(bool(d) for d in out) == 50 and len(out) == 100
    assert after_reads - reads - 1 < 60, f"{after_reads - reads - 1} round trips for 100 calls"
    assert after_connections - connections - 1 <= 3


def test_calls_waiting_for_a_lease_on_their_way_are_answered_from_it(server, prefix):
    async def main() -> tuple[int, int, set[str]]:
        client = aredis.Redis(port=server.port)
        l = RedisTokenBucket(500, 1 / 3600, client=client, prefix=prefix, lease="auto")
        before = evalsha_calls(server)
        out = await asyncio.gather(*(l.allow("hot") for _ in range(1_000)))
        after = evalsha_calls(server)
        await l.aclose()
        await client.aclose()
        return sum(bool(d) for d in out), after - before, {d.source for d in out}

    granted, scripts, sources = asyncio.run(main())
    assert granted == 500
    assert "lease" in sources
    assert scripts < 100, f"{scripts} script calls for 1,000 decisions"
