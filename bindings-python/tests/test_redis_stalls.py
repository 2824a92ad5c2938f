"""How long a Redis-backed call can stall a request, against a real
redis-server made unresponsive (SIGSTOP: it accepts connections, reads
nothing, answers nothing). Counted, not timed: the commands that reach the
client's connections, and the breaker's state. A blocking call cannot be
interrupted from outside; the client's own settings bound it (one attempt,
``socket_timeout``), and the breaker opens on time spent as well as on a
count, so a client that retries for seconds stalls one request, not five."""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import signal
import uuid
from typing import Any

import pytest

redis = pytest.importorskip("redis")

import redis.asyncio  # noqa: E402
from redis.backoff import ConstantBackoff, NoBackoff  # noqa: E402
from redis.retry import Retry  # noqa: E402

from ratomic.redis import RedisTokenBucket  # noqa: E402
from redis_server import Server  # noqa: E402

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"

# The settings the README's Python example gives its client: one attempt of
# at most 0.5 s.
DOCUMENTED = {"socket_timeout": 0.5, "socket_connect_timeout": 0.5, "retry": Retry(NoBackoff(), 0)}


def counting(sent: list[bytes]) -> type:
    """A redis-py connection class that records each command it sends: one
    per attempt on a stopped server (the call's EVALSHA on an open
    connection; after a timeout closed it, the new connection's HELLO, which
    times out in turn)."""

    class Counting(redis.Connection):  # type: ignore[misc]
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            sent.append(b"".join(command) if isinstance(command, list) else command)
            super().send_packed_command(command, check_health)

    return Counting


def counting_async(sent: list[bytes]) -> type:
    class Counting(redis.asyncio.Connection):  # type: ignore[misc]
        async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            sent.append(command if isinstance(command, (bytes, str)) else b"".join(command))
            await super().send_packed_command(command, check_health)

    return Counting


def prefix() -> str:
    return f"stall-{uuid.uuid4().hex[:8]}:"


def test_the_documented_client_makes_one_attempt_a_call_and_the_breaker_stops_them() -> None:
    readme = README.read_text()
    assert "socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)" in readme
    s = Server()
    sent: list[bytes] = []
    try:
        url = f"redis://127.0.0.1:{s.port}/0"
        client = redis.Redis.from_url(url, connection_class=counting(sent), **DOCUMENTED)
        # The breaker opens here by count alone: 5 failures of 0.5 s would
        # also pass its default failure time (1 s in all) at the second.
        limiter = RedisTokenBucket(
            "5/s", client=client, prefix=prefix(), on_error="deny", breaker_cooldown=3600, breaker_failure_time=3600
        )
        # The server answers through this client before it stops. The first
        # call also connects, and a loaded machine can stall it past 0.5 s:
        # a call that timed out is made again (fewer than 5 times, and the
        # answer ends the failures in a row, so the breaker starts from none).
        for _ in range(4):
            if limiter.allow("k").source == "redis":
                break
        else:
            pytest.fail("Redis never answered before it was stopped")
        sent.clear()
        os.kill(s.proc.pid, signal.SIGSTOP)
        sources = [limiter.allow("k").source for _ in range(20)]
        assert sources == ["policy"] * 20
        assert limiter.breaker_open
        # One attempt per failing call, and none once the breaker is open
        # (5 failures in a row, the default).
        assert len(sent) == 5, sent
        client.close()
    finally:
        s.stop()


def test_a_client_that_retries_for_long_opens_the_breaker_at_its_first_call(caplog: pytest.LogCaptureFixture) -> None:
    s = Server()
    sent: list[bytes] = []
    try:
        url = f"redis://127.0.0.1:{s.port}/0"
        # 4 attempts of 50 ms, 0.3 s apart: at least 1.1 s a call on a
        # stopped server, past the breaker's default failure time of 1 s.
        slow = Retry(ConstantBackoff(0.3), 3)
        client = redis.Redis.from_url(url, connection_class=counting(sent), socket_timeout=0.05, retry=slow)
        with caplog.at_level(logging.WARNING, logger="ratomic.redis"):
            limiter = RedisTokenBucket("5/s", client=client, prefix=prefix(), on_error="allow", breaker_cooldown=3600)
        warned = [r.getMessage() for r in caplog.records if r.name == "ratomic.redis"]
        assert len(warned) == 1 and "retries 3 times" in warned[0] and "Retry(" in warned[0], warned
        assert limiter.allow("k").source == "redis"
        sent.clear()
        os.kill(s.proc.pid, signal.SIGSTOP)
        assert limiter.allow("k").source == "policy"
        assert limiter.breaker_open, "one call that took over 1 s opens the breaker (5 would be needed by count)"
        first = len(sent)
        assert sum(b"EVALSHA" in c[:32] for c in sent) == 4, f"the call's 4 attempts: {sent}"
        assert [limiter.allow("k").source for _ in range(9)] == ["policy"] * 9
        assert len(sent) == first, "nothing more reached the client once the breaker was open"
        client.close()
    finally:
        s.stop()


def test_a_blocking_client_that_cannot_bound_a_call_is_reported_at_set_up(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ratomic.redis"):
        RedisTokenBucket("5/s", client=redis.Redis(port=1, socket_timeout=0.05))  # redis-py's default retries
        RedisTokenBucket("5/s", client=redis.Redis(port=1, retry=Retry(NoBackoff(), 0)))  # redis-py's 5 s timeout
        RedisTokenBucket("5/s", client=redis.Redis(port=1, **DOCUMENTED))
        RedisTokenBucket("5/s", client=redis.Redis.from_url("redis://127.0.0.1:1/0", socket_timeout=0.05))
    warned = [r.getMessage() for r in caplog.records if r.name == "ratomic.redis"]
    assert len(warned) == 2, warned
    assert "retries 10 times" in warned[0] and "waits 5 s for a reply" in warned[1]


def test_asyncio_calls_are_cut_at_the_timeout_and_the_breaker_counts_their_time() -> None:
    s = Server()
    sent: list[bytes] = []

    async def main() -> tuple[list[str], bool]:
        url = f"redis://127.0.0.1:{s.port}/0"
        client = redis.asyncio.Redis.from_url(url, connection_class=counting_async(sent))
        limiter = RedisTokenBucket(
            "5/s",
            client=client,
            prefix=prefix(),
            on_error="allow",
            timeout=0.05,
            breaker_threshold=100,
            breaker_cooldown=3600,
            breaker_failure_time=0.12,
        )
        assert (await limiter.allow("k")).source == "redis"
        sent.clear()
        os.kill(s.proc.pid, signal.SIGSTOP)
        sources = [(await limiter.allow("k")).source for _ in range(20)]
        open_ = limiter.breaker_open
        await client.aclose()
        return sources, open_

    try:
        sources, open_ = asyncio.run(main())
    finally:
        s.stop()
    assert sources == ["policy"] * 20 and open_
    # Each failing call took at least its 50 ms timeout: the breaker opened
    # by the third (120 ms), whatever the count of 100 says.
    assert 1 <= len(sent) <= 3, sent


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"breaker_threshold": 10**30}, "invalid breaker_threshold: 1000000000000000000000000000000 (must be a whole"),
        ({"breaker_threshold": 2**32}, "invalid breaker_threshold: 4294967296 (must be a whole number from 0 to 4294967295)"),
        ({"deny_cache": 10**30}, "invalid deny_cache: 1000000000000000000000000000000"),
        ({"max_key_len": -1}, "invalid max_key_len: -1"),
        ({"breaker_failure_time": -1.0}, "invalid breaker_failure_time: -1.0"),
        ({"breaker_cooldown": 1e30}, "invalid breaker_cooldown: 1e+30"),
    ],
)
def test_options_out_of_range_are_errors_naming_them_and_quoting_the_value(options: dict, message: str) -> None:
    with pytest.raises(ValueError) as e:
        RedisTokenBucket("5/s", client=redis.Redis(port=1, **DOCUMENTED), **options)
    assert message in str(e.value), str(e.value)


@pytest.mark.parametrize(("now", "shown"), [(1e30, "1e+30"), (2.0**64, "1.8446744073709552e+19"), (5e9, "5000000000.0")])
def test_a_time_past_the_last_is_an_error_quoting_it(now: float, shown: str) -> None:
    limiter = RedisTokenBucket("5/s", client=redis.Redis(port=1, **DOCUMENTED))
    with pytest.raises(ValueError) as e:
        limiter.allow_at("k", now)
    assert str(e.value) == (
        f"invalid now: {shown} (a time must be at most 4611686018.427387903 seconds: 2^62 − 1 ns, about 146 years "
        "after the clock's epoch)"
    )
