"""FixedWindow: at most limit calls in each window, windows aligned to the clock's epoch
(https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md#42-fixedwindowlimit-window-and-43-slidingwindowlimit-window)."""

import pytest

import ratomic


def test_fixed_window_counts_per_window(clock):
    fw = ratomic.FixedWindow(2, 60.0, clock=clock)
    assert fw.allow("ip") and fw.allow("ip")
    d = fw.allow("ip")
    assert not d and d.retry_after == pytest.approx(60.0) and d.limit == 2
    clock.advance(59.0)
    assert not fw.allow("ip")
    clock.advance(1.0)
    assert fw.allow("ip").remaining == 1


def test_fixed_window_allows_double_burst_at_boundary(clock):
    fw = ratomic.FixedWindow("3/s", clock=clock)
    clock.set(0.9)
    assert all(fw.allow("k") for _ in range(3))
    clock.set(1.0)
    assert all(fw.allow("k") for _ in range(3)), "a new window, a new count"


def test_fixed_window_refuses_a_limit_its_state_cannot_count():
    # Core's bound (FixedWindowCounter.max_limit), named in the error.
    with pytest.raises(ratomic.InvalidArgumentError, match="too large for a fixed window of 1s: at most 1073741823"):
        ratomic.FixedWindow(2**40, 1.0)
    assert ratomic.FixedWindow(1073741823, 1.0).limit == 1073741823
