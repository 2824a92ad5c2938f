"""SlidingWindow: the sliding-window counter approximation
(https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md#42-fixedwindowlimit-window-and-43-slidingwindowlimit-window)."""

import pytest

import ratomic


def test_sliding_window_weights_the_previous_window(clock):
    sw = ratomic.SlidingWindow("2/min", clock=clock)
    assert sw.allow("ip") and sw.allow("ip")
    d = sw.allow("ip")
    assert not d and d.retry_after == pytest.approx(90.0)
    clock.advance(90.0)
    assert sw.allow("ip")
    assert not sw.allow("ip")


def test_sliding_window_smooths_the_boundary(clock):
    sw = ratomic.SlidingWindow(4, 1.0, clock=clock)
    clock.set(0.9)
    assert all(sw.allow("k") for _ in range(4))
    clock.set(1.0)
    assert not sw.allow("k"), "the previous window still counts almost fully"


def test_sliding_window_refuses_a_limit_its_state_cannot_count():
    # Core's bound (SlidingWindowCounter.max_limit), named in the error.
    with pytest.raises(ratomic.InvalidArgumentError, match="too large for a sliding window of 1s: at most 32767"):
        ratomic.SlidingWindow(10**6, 1.0)
    with pytest.raises(ratomic.InvalidArgumentError, match="at most 32767"):
        ratomic.Rule.sliding_window("1000000/s")
    assert ratomic.SlidingWindow(32767, 1.0).limit == 32767
