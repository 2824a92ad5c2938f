"""acquire(): waits out retry_after with asyncio.sleep; driven by a ManualClock, no real sleeping."""

import asyncio

import pytest

import ratomic


@pytest.fixture
def slept(monkeypatch, clock):
    """Replace asyncio.sleep: record each wait and advance the manual clock by it."""
    waits = []

    async def fake_sleep(seconds, result=None):
        waits.append(seconds)
        clock.advance(seconds)
        return result

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    return waits


def run(coro):
    return asyncio.run(coro)


def test_acquire_returns_at_once_when_allowed(clock, slept):
    tb = ratomic.TokenBucket(2, 1.0, clock=clock)
    d = run(ratomic.acquire(tb, "k"))
    assert d and d.remaining == 1 and slept == []


def test_acquire_waits_out_retry_after(clock, slept):
    tb = ratomic.TokenBucket(2, 4.0, clock=clock)
    tb.allow("k", 2)
    d = run(ratomic.acquire(tb, "k"))
    assert d and slept == [0.25] and clock.now() == 0.25
    d = run(ratomic.acquire(tb, "k", 2))
    assert d and slept == [0.25, 0.5]


def test_acquire_waits_again_when_another_caller_wins(clock, monkeypatch):
    tb = ratomic.TokenBucket(1, 1.0, clock=clock)
    tb.allow("k")
    waits = []

    async def fake_sleep(seconds, result=None):
        waits.append(seconds)
        clock.advance(seconds)
        if len(waits) == 1:
            tb.allow("k")  # a competitor takes the refilled token first
        return result

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    assert run(ratomic.acquire(tb, "k"))
    assert waits == [1.0, 1.0]


def test_acquire_timeout_returns_the_denial_without_sleeping(clock, slept):
    tb = ratomic.TokenBucket(10, 1.0, clock=clock)
    tb.allow("k", 10)
    d = run(ratomic.acquire(tb, "k", 5, timeout=4.0))
    assert not d and d.retry_after == 5.0 and slept == []
    d = run(ratomic.acquire(tb, "k", 5, timeout=5.0))
    assert d and slept == [5.0]


def test_acquire_works_with_every_limiter(clock, slept):
    lim = ratomic.Limiter({"a": "1/s", "b": ratomic.Rule.fixed_window("10/min")}, clock=clock)
    stack = ratomic.Stack({"ip": ratomic.SlidingWindow("1/s", clock=clock)})
    run(ratomic.acquire(lim, "k"))
    d = run(ratomic.acquire(lim, "k"))
    assert isinstance(d, ratomic.MultiDecision) and d and slept == [1.0]
    run(ratomic.acquire(stack, ["ip"]))
    assert run(ratomic.acquire(stack, ["ip"]))


def test_acquire_errors_raise_at_once(clock, slept):
    tb = ratomic.TokenBucket(2, 1.0, clock=clock)
    with pytest.raises(ratomic.CostExceedsLimitError):
        run(ratomic.acquire(tb, "k", 3))
    with pytest.raises(ratomic.InvalidArgumentError):
        run(ratomic.acquire(tb, "k", timeout=-1))
    with pytest.raises(ratomic.InvalidArgumentError):
        run(ratomic.acquire(tb, "k", timeout=float("nan")))
    assert slept == []


def test_acquire_really_sleeps_briefly(monkeypatch):
    # One real, short wait on the default clock: the helper works with the
    # real asyncio.sleep, which is only watched here. How long it was asked
    # to sleep is what is bounded: the time it took also counts the loaded
    # machine's stalls, which can pass a second.
    tb = ratomic.TokenBucket(1, 50.0)
    asked: list[float] = []
    real_sleep = asyncio.sleep

    async def watched_sleep(seconds, result=None):
        asked.append(seconds)
        return await real_sleep(seconds, result)

    monkeypatch.setattr(asyncio, "sleep", watched_sleep)

    async def main():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        d = await ratomic.acquire(tb, "k", timeout=1.0)
        return d, loop.time() - t0

    # A stall of 20 ms between the drain and the acquire leaves nothing to
    # wait for: then again.
    for _ in range(100):
        tb.allow("k")  # drains the bucket (or finds it empty)
        d, elapsed = run(main())
        assert d
        if asked:
            break
    assert asked, "acquire never had to wait"
    assert 0 < sum(asked) <= 0.02 + 1e-6, asked  # a token every 20 ms: at most that
    assert elapsed >= sum(asked) - 0.001, (elapsed, asked)  # really slept
