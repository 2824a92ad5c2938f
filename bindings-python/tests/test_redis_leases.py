"""ratomic.redis's leases against a real redis-server: the option, calls
answered from a lease, refunds into it, resets that leave other processes'
leases alone, and the give-back on close, on ``aclose`` and at exit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import uuid

import pytest
import redis
import redis.asyncio as aredis

import ratomic
from ratomic import Rule
from ratomic.redis import RedisFixedWindow, RedisLimiter, RedisTokenBucket
from redis_server import Server

# A process that should exit at once is given this long before the test calls
# it a hang (not a speed requirement).
HANG_BOUND = 60.0

# 40 tokens, one an hour: nothing refills during a test. lease="auto" takes
# at most 40 / 8 = 5 tokens; a key's first lease is 2.
FORTY = (40, 1 / 3600)


@pytest.fixture
def client(server: Server):
    c = redis.Redis(port=server.port, socket_timeout=5)
    yield c
    c.close()


@pytest.fixture
def prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}:"


def test_the_lease_option_is_off_auto_or_a_size_and_anything_else_is_refused(server, prefix):
    dead = redis.Redis(port=1)  # nothing listens: nothing here may need a round trip
    assert RedisTokenBucket("2/s", client=dead).lease is None, "off by default"
    assert RedisTokenBucket("2/s", client=dead, lease="off").lease is None
    assert RedisTokenBucket(80, 10.0, client=dead, lease="auto").lease == 10
    assert RedisTokenBucket(80, 10.0, client=dead, lease=3).lease == 3
    assert RedisLimiter({"a": "80/s", "b": "16/min"}, client=dead, lease="auto").lease == 2, "an eighth of the least"
    assert RedisFixedWindow("5/s", client=dead, lease="auto").lease is None, "auto: windows lease nothing"
    with pytest.raises(ratomic.InvalidArgumentError, match="token bucket"):
        RedisFixedWindow("5/s", client=dead, lease=4)
    with pytest.raises(ratomic.InvalidArgumentError, match="token bucket"):
        RedisLimiter({"a": "5/s", "w": Rule.fixed_window(5, 1.0)}, client=dead, lease=4)
    with pytest.raises(ratomic.InvalidArgumentError, match=r'invalid lease: "sometimes" \(lease must be "off", "auto"'):
        RedisTokenBucket("2/s", client=dead, lease="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ratomic.InvalidArgumentError, match="invalid lease: 0"):
        RedisTokenBucket("2/s", client=dead, lease=0)
    with pytest.raises(ratomic.ArgumentTypeError, match="not bool: True"):
        RedisTokenBucket("2/s", client=dead, lease=True)
    with pytest.raises(ratomic.ArgumentTypeError, match="not float: 1.5"):
        RedisTokenBucket("2/s", client=dead, lease=1.5)  # type: ignore[arg-type]
    with pytest.raises(ratomic.InvalidArgumentError, match="lease_keys"):
        RedisTokenBucket("2/s", client=dead, lease="auto", lease_keys=0)


def test_a_hot_key_is_answered_from_its_lease_and_close_gives_the_rest_back(client, prefix):
    a = RedisTokenBucket(*FORTY, client=client, prefix=prefix, lease="auto")
    other = RedisTokenBucket(*FORTY, client=client, prefix=prefix)  # no lease: sees the fleet's state

    def remaining() -> int:
        return other.peek("k", 0).remaining

    assert a.allow("k").source == "redis", "a key seen once takes no lease"
    assert a.allow("k").source == "redis" and a.leases_held == 1
    assert remaining() == 36, "two granted, two more leased to this process"
    d = a.allow("k")
    assert d and d.source == "lease" and d.limit == 40
    assert d.remaining == 37, "what the fleet had at the lease's round trip plus what the lease still holds"
    a.refund("k", 1)  # back into the lease: no round trip, the fleet sees nothing
    assert remaining() == 36
    other.refund("k", 5)
    assert remaining() == 36, "a refund elsewhere stops at the lease's end"
    other.reset("k")
    assert remaining() == 36, "a reset keeps what the leases hold"
    assert a.close() == 1, "one limit took the lease's unused tokens back"
    assert remaining() == 38 and a.leases_held == 0, "the lease's two unused tokens (one refunded into it)"
    assert a.close() == 0, "nothing held: nothing to do"
    with a:
        a.allow("k")  # takes a lease again (the key is warm)
        assert a.leases_held == 1
    assert a.leases_held == 0, "leaving the with block gives it back"


def test_an_asyncio_limiter_gives_its_leases_back_on_aclose(server, prefix):
    async def main() -> tuple[int, int, int]:
        client = aredis.Redis(port=server.port)
        other = RedisTokenBucket(*FORTY, client=client, prefix=prefix, timeout=5.0)
        async with RedisTokenBucket(*FORTY, client=client, prefix=prefix, lease="auto", timeout=5.0) as a:
            await a.allow("k")
            await a.allow("k")
            assert (await a.allow("k")).source == "lease"
            await a.refund("k", 1)
            held = (await other.peek("k", 0)).remaining
        after = (await other.peek("k", 0)).remaining
        with pytest.raises(TypeError, match="aclose"):
            a.close()
        blocking = RedisTokenBucket(*FORTY, client=redis.Redis(port=server.port), prefix=prefix)
        with pytest.raises(TypeError, match=r"limiter\.close\(\)"):
            await blocking.aclose()
        await client.aclose()
        return held, after, a.leases_held

    held, after, left = asyncio.run(main())
    assert (held, after, left) == (36, 38, 0), "the lease's two tokens (one spent, one refunded) went back"


def _run(script: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=HANG_BOUND
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_blocking_limiter_gives_its_leases_back_at_exit(server, client, prefix):
    other = RedisTokenBucket(*FORTY, client=client, prefix=prefix)
    out = _run(
        f"""
        import redis
        from ratomic.redis import RedisTokenBucket
        client = redis.Redis(port={server.port}, socket_timeout=5)
        a = RedisTokenBucket(40, 1 / 3600, client=client, prefix={prefix!r}, lease="auto")
        a.allow("k"); a.allow("k")
        print(a.leases_held, a.allow("k").source)
        """
    )
    assert out.split() == ["1", "lease"]
    assert other.peek("k", 0).remaining == 37, "three granted; the lease's other token came back at exit"
    # Collected before exit: the same.
    assert "collected" in _run(
        f"""
        import gc, redis
        from ratomic.redis import RedisTokenBucket
        client = redis.Redis(port={server.port}, socket_timeout=5)
        a = RedisTokenBucket(40, 1 / 3600, client=client, prefix={prefix!r}, lease=4)
        a.allow("j"); a.allow("j")
        assert a.leases_held == 1
        del a
        gc.collect()
        print("collected")
        """
    )
    assert other.peek("j", 0).remaining == 38


def test_an_asyncio_process_exits_at_once_and_its_unreturned_lease_stays_bounded(server, client, prefix):
    other = RedisTokenBucket(*FORTY, client=client, prefix=prefix)
    out = _run(
        f"""
        import asyncio
        import redis.asyncio as aredis
        from ratomic.redis import RedisTokenBucket

        async def main():
            client = aredis.Redis(port={server.port})
            a = RedisTokenBucket(40, 1 / 3600, client=client, prefix={prefix!r}, lease="auto", timeout=5.0)
            await a.allow("k"); await a.allow("k")
            print(a.leases_held)
            await client.aclose()

        asyncio.run(main())
        """
    )
    assert out.split() == ["1"], "the process ended (nothing kept it alive) holding one lease"
    assert other.peek("k", 0).remaining == 36, "no aclose: its two leased tokens wait for their time to pass"
