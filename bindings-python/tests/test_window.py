"""FixedWindow and SlidingWindow (SPEC §4.2, §4.3)."""

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


@pytest.mark.parametrize("cls", [ratomic.FixedWindow, ratomic.SlidingWindow])
def test_window_operations(cls, clock):
    w = cls(5, 10.0, clock=clock)
    assert w.window == 10.0 and w.limit == 5
    assert w.allow("k", 3).remaining == 2
    assert w.peek("k", 2).remaining == 0
    assert w.peek("k", 0).remaining == 2
    w.refund("k", 1)
    assert w.peek("k", 0).remaining == 3
    w.reset("k")
    assert w.peek("k", 0).remaining == 5
    out = w.allow_many([("a", 5), "a", ("b", 2)])
    assert [bool(d) for d in out] == [True, False, True]
    assert len(w) == 2
    clock.advance(100.0)
    assert w.gc() == 2 and len(w) == 0
    with pytest.raises(ratomic.CostExceedsLimitError):
        w.allow("k", 6)
    assert cls.__name__ in repr(w)
    assert w.rule.kind == ("fixed_window" if cls is ratomic.FixedWindow else "sliding_window")


@pytest.mark.parametrize("cls", [ratomic.FixedWindow, ratomic.SlidingWindow])
def test_window_from_rate_string(cls):
    w = cls("1000/15m")
    assert (w.limit, w.window) == (1000, 900.0)
    w = cls(3, 0.25)
    assert (w.limit, w.window) == (3, 0.25)
