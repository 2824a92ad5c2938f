"""ratomic.redis against real redis-servers (started here, on free
127.0.0.1 ports, without persistence; run-tests.sh installs redis-server).

The behaviours of the in-memory limiters, on Redis; parity with them on
the same explicit times; 100 threads on a bucket of 50; a server stopped
or frozen mid-run; NOSCRIPT; clients of the wrong kind.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.retry import Retry

import ratomic
from ratomic import Rule
from ratomic.redis import RedisFixedWindow, RedisLimiter, RedisSlidingWindow, RedisTokenBucket
from redis_server import Server

# What a call against a dead or frozen server may take before the test calls
# it a hang. Not a speed requirement (the client's timeout is 0.05-0.2 s; a
# loaded machine may take longer to schedule it): a call with no timeout
# would wait forever.
HANG_BOUND = 30.0


@pytest.fixture
def client(server: Server) -> Iterator[redis.Redis]:
    c = redis.Redis(port=server.port, socket_timeout=5)
    yield c
    c.close()


@pytest.fixture
def prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}:"


def fields(d: ratomic.Decision | ratomic.MultiDecision) -> tuple[bool, int, int, int, int]:
    """Every field, waits in whole µs rounded up: Redis computes in whole µs
    (exact for these rules' token buckets and windows; a sliding window's
    exact wait is rounded up there, so a caller who waits it is never early)."""
    d = d.decision if isinstance(d, ratomic.MultiDecision) else d
    up = lambda ns: -(-ns // 1000)  # noqa: E731
    return (d.allowed, d.remaining, d.limit, up(d.retry_after_ns), up(d.reset_after_ns))


# ---- the behaviours ------------------------------------------------------------


def test_a_burst_is_granted_then_denied_with_the_exact_wait(client, prefix):
    l = RedisTokenBucket(3, 1.0, client=client, prefix=prefix)
    ds = [l.allow_at("k", 10.0) for _ in range(4)]
    assert [d.allowed for d in ds] == [True, True, True, False]
    assert [d.remaining for d in ds] == [2, 1, 0, 0]
    assert ds[3].retry_after == 1.0 and ds[3].reset_after == 3.0
    assert all(d.source == "redis" and d.limit == 3 for d in ds)
    assert not l.allow_at("k", 10.999999) and l.allow_at("k", 11.0), "refilled after exactly retry_after"


def test_keys_are_independent_and_reset_and_refund_give_tokens_back(client, prefix):
    l = RedisTokenBucket("2/s", client=client, prefix=prefix)
    assert l.allow("a", 2) and not l.allow("a")
    assert l.allow("b"), "another key has its own bucket"
    l.reset("a")
    assert l.allow("a", 2), "a reset key is full"
    l.refund("a", 1)
    assert l.peek("a").allowed and l.peek("a").remaining == 0
    assert client.exists(f"{prefix}{{a}}") == 1, "keys live at <prefix>{key}"


def test_windows_and_a_two_limit_limiter_decide_as_documented(client, prefix):
    fw = RedisFixedWindow(2, 10.0, client=client, prefix=prefix + "fw:")
    assert [bool(fw.allow_at("k", t)) for t in (0.0, 1.0, 9.0, 10.0)] == [True, True, False, True]
    sw = RedisSlidingWindow("2/10s", client=client, prefix=prefix + "sw:")
    assert [bool(sw.allow_at("k", t)) for t in (0.0, 1.0, 12.0, 19.0)] == [True, True, False, True]
    m = RedisLimiter({"burst": "2/s", "daily": Rule.fixed_window(3, 86400)}, client=client, prefix=prefix + "m:")
    ds = [m.allow_at("u", t) for t in (0.0, 0.0, 0.0, 5.0, 10.0)]
    assert [d.allowed for d in ds] == [True, True, False, True, False]
    assert ds[2].denied_by == ("burst",) and ds[4].denied_by == ("daily",)
    assert ds[4].entries["burst"].allowed, "on a denial each entry is what that limit alone would answer"
    assert m.names == ("burst", "daily") and ds[0]["daily"].remaining == 2


def test_a_limits_string_as_slowapi_writes_it(client, prefix):
    m = RedisLimiter("2/second;3 per day", client=client, prefix=prefix)
    assert m.names == ("2/second", "3 per day")
    ds = [m.allow_at("u", t) for t in (0.0, 0.0, 0.0, 5.0, 10.0)]
    assert [d.allowed for d in ds] == [True, True, False, True, False]
    assert ds[2].denied_by == ("2/second",) and ds[4].denied_by == ("3 per day",)
    memory = ratomic.Limiter("2/second;3 per day", clock=ratomic.ManualClock())
    assert memory.rules == {"2/second": Rule.token_bucket("2/s"), "3 per day": Rule.token_bucket("3/d")}
    with pytest.raises(ratomic.InvalidRateError, match='invalid rate "5/fortnight"'):
        RedisLimiter("2/s|5/fortnight", client=client, prefix=prefix)
    assert repr(m) == (
        f'RedisLimiter({{"2/second": token bucket 2 per 1s, "3 per day": token bucket 3 per 1d}}, '
        f"prefix={prefix!r}, client=blocking)"
    )
    assert repr(RedisFixedWindow(5, window_secs=60, client=client, prefix=prefix)) == (
        f"RedisFixedWindow(fixed window 5 per 1m, prefix={prefix!r}, client=blocking)"
    )


def test_bad_input_raises_the_in_memory_errors_before_any_round_trip(server, prefix):
    dead = redis.Redis(port=1)  # nothing listens: a round trip would fail
    l = RedisTokenBucket("2/s", client=dead, prefix=prefix)
    with pytest.raises(ratomic.CostExceedsLimitError):
        l.allow("k", 3)
    with pytest.raises(ratomic.KeyTooLongError):
        l.allow("x" * 1025)
    with pytest.raises(ratomic.KeyTypeError):
        l.allow(42)  # type: ignore[arg-type]
    with pytest.raises(ratomic.InvalidArgumentError):
        l.allow_at("k", float("nan"))
    with pytest.raises(ratomic.CostExceedsLimitError) as e:
        l.allow_many(["a", ("b", 9)])
    assert e.value.index == 1
    with pytest.raises(ratomic.InvalidRateError):
        RedisTokenBucket("ten/s", client=dead)
    with pytest.raises(ratomic.InvalidArgumentError, match="prefix"):
        RedisTokenBucket("2/s", client=dead, prefix="a{b}")
    with pytest.raises(ratomic.InvalidArgumentError, match="on_error"):
        RedisTokenBucket("2/s", client=dead, on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(ratomic.ArgumentTypeError, match="on_error"):
        RedisTokenBucket("2/s", client=dead, on_error=ratomic.Limiter({"a": "1/s"}))
    with pytest.raises(ratomic.InvalidArgumentError, match="socket_timeout"):
        RedisTokenBucket("2/s", client=dead, timeout=0.1)


# ---- parity with memory ----------------------------------------------------------

RULES = {
    "token_bucket": Rule.token_bucket(5, 10.0),
    "fixed_window": Rule.fixed_window(4, 2.0),
    "sliding_window": Rule.sliding_window(6, 3.0),
}


def _pairs(seed: int) -> Iterator[tuple[str, str, int, float]]:
    rng = random.Random(seed)
    t_us = rng.randrange(0, 10_000_000)
    for _ in range(300):
        t_us += rng.choice([0, 0, rng.randrange(1, 50_000), rng.randrange(1, 2_000_000)])
        yield rng.choice(["allow", "allow", "peek"]), rng.choice(["a", "b"]), rng.randrange(1, 4), t_us / 1e6


@pytest.mark.parametrize("kind", sorted(RULES))
@pytest.mark.parametrize("seed", range(3))
def test_every_field_equals_the_in_memory_limiter_on_the_same_times(client, prefix, kind, seed):
    rule = RULES[kind]
    clock = ratomic.ManualClock()
    memory = {
        "token_bucket": lambda: ratomic.TokenBucket(5, 10.0, clock=clock),
        "fixed_window": lambda: ratomic.FixedWindow(4, 2.0, clock=clock),
        "sliding_window": lambda: ratomic.SlidingWindow(6, 3.0, clock=clock),
    }[kind]()
    on_redis = {
        "token_bucket": RedisTokenBucket,
        "fixed_window": RedisFixedWindow,
        "sliding_window": RedisSlidingWindow,
    }[kind](*((5, 10.0) if kind == "token_bucket" else (4, 2.0) if kind == "fixed_window" else (6, 3.0)), client=client, prefix=prefix)
    assert on_redis.limit == rule.limit
    for op, key, cost, now in _pairs(seed):
        clock.set(now)
        m = getattr(memory, op)(key, cost)
        r = getattr(on_redis, op + "_at")(key, now, cost)
        assert fields(r) == fields(m), (op, key, cost, now)
        if kind != "sliding_window":
            assert r == m, "equality compares the answer, not its source"


@pytest.mark.parametrize("seed", range(3))
def test_a_limiter_and_its_batches_equal_memory_on_the_same_times(client, prefix, seed):
    limits = {"burst": "4/s", "minute": Rule.sliding_window(10, 60.0), "hour": Rule.fixed_window(30, 3600.0)}
    clock = ratomic.ManualClock()
    memory = ratomic.Limiter(limits, clock=clock)
    on_redis = RedisLimiter(limits, client=client, prefix=prefix)
    rng = random.Random(seed)
    for op, key, cost, now in _pairs(seed):
        clock.set(now)
        if rng.random() < 0.2:
            reqs = [(key, cost), ("c", 1), (key, 1)]
            ms, rs = memory.allow_many(reqs), on_redis.allow_many_at(reqs, now)
            assert [fields(r) for r in rs] == [fields(m) for m in ms]
            assert [r.denied_by for r in rs] == [m.denied_by for m in ms]
            continue
        m = getattr(memory, op)(key, cost)
        r = getattr(on_redis, op + "_at")(key, now, cost)
        assert fields(r) == fields(m), (op, key, cost, now)
        assert [fields(d) for d in r.entries.values()] == [fields(d) for d in m.entries.values()]
        assert r.denied_by == m.denied_by


# ---- concurrency -------------------------------------------------------------------


def test_a_hundred_threads_on_a_bucket_of_fifty_get_exactly_fifty(server, prefix):
    client = redis.Redis(port=server.port, max_connections=100, socket_timeout=5)
    l = RedisTokenBucket(50, 1 / 3600, client=client, prefix=prefix, deny_cache=0)
    start = threading.Barrier(100)
    granted = []

    def run() -> None:
        start.wait()
        granted.append(l.allow("hot").allowed)

    threads = [threading.Thread(target=run) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) == 50 and len(granted) == 100
    client.close()


def test_a_hundred_tasks_on_an_asyncio_client_get_exactly_fifty(server, prefix):
    async def main() -> int:
        client = aredis.Redis(port=server.port)
        l = RedisTokenBucket(50, 1 / 3600, client=client, prefix=prefix, timeout=5.0, deny_cache=0)
        ds = await asyncio.gather(*(l.allow("hot") for _ in range(100)))
        await client.aclose()
        return sum(d.allowed for d in ds)

    assert asyncio.run(main()) == 50


# ---- the asyncio face ----------------------------------------------------------------


def test_asyncio_clients_give_coroutines_with_every_operation(server, prefix):
    async def main() -> None:
        client = aredis.Redis(port=server.port)
        # A token an hour: none comes back before the acquire's denial below.
        l = RedisTokenBucket(2, 1 / 3600, client=client, prefix=prefix, timeout=5.0)
        assert (await l.allow_at("k", 1.0)).remaining == 1
        assert (await l.peek_at("k", 1.0)).remaining == 0
        await l.refund_at("k", 1.0, 1)
        assert [d.allowed for d in await l.allow_many_at(["k", "k", "k"], 1.0)] == [True, True, False]
        await l.reset("k")
        assert (await l.allow("k", 2)).allowed
        d = await l.acquire("k", timeout=0.0)
        assert not d and d.retry_after > 0, "a wait past the timeout: the denial, nothing slept"
        m = RedisLimiter({"a": "1/s"}, client=client, prefix=prefix + "m:", timeout=5.0)
        assert (await m.allow("u")).source == "redis"
        await client.aclose()

    asyncio.run(main())


def test_a_client_of_the_wrong_kind_is_a_clear_type_error(server, prefix):
    sync = redis.Redis(port=server.port)
    l = RedisTokenBucket("2/s", client=sync, prefix=prefix)

    async def await_sync() -> None:
        await l.allow("k")  # type: ignore[misc]

    with pytest.raises(TypeError, match="await"):
        asyncio.run(await_sync())

    async def forget_await() -> None:
        client = aredis.Redis(port=server.port)
        a = RedisTokenBucket("2/s", client=client, prefix=prefix)
        pending = a.allow("k")
        with pytest.raises(TypeError, match="await them"):
            bool(pending)
        with pytest.raises(TypeError, match="await them"):
            pending.allowed  # type: ignore[attr-defined]  # noqa: B018
        await client.aclose()

    asyncio.run(forget_await())
    for wrong in (redis.Redis, object(), "redis://127.0.0.1"):
        with pytest.raises(TypeError, match="client must be"):
            RedisTokenBucket("2/s", client=wrong)
    sync.close()


# ---- NOSCRIPT, failures ------------------------------------------------------------


def test_a_server_that_forgot_the_script_gets_it_again_and_nothing_is_charged_twice(client, prefix):
    l = RedisTokenBucket(3, 1 / 3600, client=client, prefix=prefix)
    assert l.allow("k").remaining == 2
    client.script_flush()
    assert l.allow("k").remaining == 1, "one retry after SCRIPT LOAD, charged once"
    client.script_flush()
    ds = l.allow_many(["k", "j"])
    assert [d.remaining for d in ds] == [0, 2]


def test_a_stopped_server_is_answered_by_the_policy_without_hanging(prefix):
    s = Server()
    try:
        # The client's own retries are its owner's choice; none here. A dead
        # server refuses at once, so the timeouts only bound a stall: the
        # call before the kill must reach Redis however loaded the machine.
        client = redis.Redis(port=s.port, socket_timeout=5, socket_connect_timeout=5, retry=Retry(NoBackoff(), 0))
        deny = RedisTokenBucket(
            "5/s", client=client, prefix=prefix, on_error="deny", deny_retry_after=2.0, breaker_threshold=3
        )
        allow = RedisTokenBucket("5/s", client=client, prefix=prefix, on_error="allow", breaker_threshold=0)
        local = ratomic.TokenBucket("5/h")  # hourly: its count below cannot refill meanwhile
        fallback = RedisTokenBucket("5/s", client=client, prefix=prefix, on_error=local)
        strict = RedisTokenBucket("5/s", client=client, prefix=prefix, breaker_threshold=0)
        assert deny.allow("k").source == "redis"
        s.proc.kill()
        s.proc.wait()
        for _ in range(5):
            # A dead server refuses at once: the call answers from the policy
            # rather than waiting (HANG_BOUND only catches a call that hangs,
            # whatever the machine's load).
            t = time.monotonic()
            d = deny.allow("k")
            assert time.monotonic() - t < HANG_BOUND
            assert not d and d.source == "policy" and d.retry_after == 2.0
        assert deny.breaker_open, "three failures in a row open the breaker"
        d = allow.allow("k")
        assert d and d.source == "policy"
        assert [fallback.allow("k").source for _ in range(2)] == ["fallback", "fallback"]
        assert local.peek("k").remaining == 2, "the fallback decided in the given limiter"
        with pytest.raises(ratomic.BackendError) as e:
            strict.allow("k")
        assert isinstance(e.value.__cause__, redis.ConnectionError)
        with pytest.raises(ratomic.BackendError):
            strict.refund("k", 1)
        with pytest.raises(ratomic.BackendError):
            strict.reset("k")
        assert [d.source for d in allow.allow_many(["a", "b"])] == ["policy", "policy"]
        client.close()
    finally:
        s.stop()


def test_a_frozen_server_times_out_within_the_timeout(prefix):
    s = Server()
    try:
        # Only the timeout ends a call to a stopped server (it costs this
        # test that long); the call before the stop gets as long to answer.
        sync = redis.Redis(port=s.port, socket_timeout=3, retry=Retry(NoBackoff(), 0))
        l = RedisTokenBucket("5/s", client=sync, prefix=prefix, on_error="allow", breaker_threshold=0)
        assert l.allow("k").source == "redis"
        os.kill(s.proc.pid, signal.SIGSTOP)  # accepts nothing, answers nothing
        t = time.monotonic()
        d = l.allow("k")
        assert d.source == "policy" and time.monotonic() - t < HANG_BOUND

        async def main() -> tuple[str, float]:
            client = aredis.Redis(port=s.port)
            a = RedisTokenBucket("5/s", client=client, prefix=prefix, on_error="allow", timeout=0.1)
            t = time.monotonic()
            d = await a.allow("k")
            return d.source, time.monotonic() - t

        source, took = asyncio.run(main())
        assert source == "policy" and took < HANG_BOUND
    finally:
        s.stop()


def test_denials_are_answered_from_the_deny_cache_until_their_wait_ends(client, prefix):
    l = RedisTokenBucket(1, 1 / 3600, client=client, prefix=prefix)
    assert l.allow("k").source == "redis"
    first = l.allow("k")
    assert not first and first.source == "redis"
    again = l.allow("k")
    assert not again and again.source == "deny_cache" and again.retry_after <= first.retry_after
    assert l.allow("k", 1).source == "deny_cache" and l.peek("k").source == "redis"
    l.reset("k")
    assert l.allow("k").source == "redis", "a reset through this limiter forgets the cached denial"
