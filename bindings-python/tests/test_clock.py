"""Clocks: ManualClock, callables, and what a bad clock does."""

import re

import pytest

import ratomic


def test_manual_clock():
    c = ratomic.ManualClock()
    assert c.now() == 0.0 and c() == 0.0
    c.advance(1.5)
    assert c.now() == 1.5 and c.now_ns() == 1_500_000_000
    c.set(0.25)
    assert c.now() == 0.25
    assert repr(c) == "ManualClock(now=0.25)"
    assert ratomic.ManualClock(10).now() == 10.0
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ratomic.InvalidArgumentError):
            c.advance(bad)
        with pytest.raises(ratomic.InvalidArgumentError):
            c.set(bad)
    with pytest.raises(ratomic.ArgumentTypeError):
        c.advance("1")
    assert c.now() == 0.25


def test_one_clock_drives_many_limiters(clock):
    a = ratomic.TokenBucket(1, 1.0, clock=clock)
    b = ratomic.FixedWindow(1, 1.0, clock=clock)
    a.allow("k"), b.allow("k")
    assert not a.allow("k") and not b.allow("k")
    clock.advance(1.0)
    assert a.allow("k") and b.allow("k")


def test_callable_clock_returns_seconds():
    now = [100.0]
    tb = ratomic.TokenBucket(1, 2.0, clock=lambda: now[0])
    assert tb.allow("k")
    assert not tb.allow("k")
    now[0] += 0.5
    assert tb.allow("k")
    now[0] = 200  # an int is a number too
    assert tb.allow("k")


def test_raising_clock_propagates_and_changes_nothing():
    state = {"fail": False, "t": 0.0}

    def clock():
        if state["fail"]:
            raise RuntimeError("clock broke")
        return state["t"]

    tb = ratomic.TokenBucket(2, 1.0, clock=clock)
    assert tb.allow("k")
    state["fail"] = True
    for op in (lambda: tb.allow("k"), lambda: tb.peek("k"), lambda: tb.reset("k"), lambda: tb.refund("k", 1),
               lambda: tb.allow_many(["k"]), tb.gc):
        with pytest.raises(RuntimeError, match="clock broke"):
            op()
    state["fail"] = False
    assert tb.peek("k", 0).remaining == 1


@pytest.mark.parametrize("value", ["12", None, [1.0], True])
def test_clock_returning_a_non_number_is_a_type_error(value):
    t = {"v": 0.0}
    tb = ratomic.TokenBucket(2, 1.0, clock=lambda: t["v"])
    tb.allow("k")
    t["v"] = value
    with pytest.raises(TypeError) as e:
        tb.allow("k")
    assert isinstance(e.value, ratomic.ArgumentTypeError)
    t["v"] = 0.0
    assert tb.peek("k", 0).remaining == 1


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), float("-inf"), -(10**400)])
def test_clock_returning_no_time_is_a_value_error(value):
    tb = ratomic.TokenBucket(2, 1.0, clock=lambda: value)
    with pytest.raises(ratomic.InvalidArgumentError, match="clock reading"):
        tb.allow("k")


# Times are nanoseconds below 2**62 (the contract's time rules, https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md#6-time): a later reading is an error
# from core, never clamped, and changes nothing.
LAST = (2**62 - 1) / 1e9
LIMITERS = {
    "TokenBucket": lambda c: ratomic.TokenBucket(2, 1.0, clock=c),
    "FixedWindow": lambda c: ratomic.FixedWindow(2, 1.0, clock=c),
    "SlidingWindow": lambda c: ratomic.SlidingWindow(2, 1.0, clock=c),
    "Limiter": lambda c: ratomic.Limiter({"a": "2/s", "b": ratomic.Rule.fixed_window("5/min")}, clock=c),
}


# Each late reading, as the error quotes it: the value the clock returned,
# never the nanoseconds it would be (nor a saturated 18446744073709551615).
LATE = {1e300: "1e+300", 4.62e9: "4620000000.0", 10**400: "1" + "0" * 39 + "..." + "0" * 10 + " (401 characters)", 2**64: "18446744073709551616"}


@pytest.mark.parametrize("make", LIMITERS.values(), ids=LIMITERS.keys())
@pytest.mark.parametrize("late", list(LATE), ids=list(LATE.values()))
def test_clock_reading_past_the_last_time_is_an_error(make, late):
    now = [4.6e9]  # about 146 years: still valid
    lim = make(lambda: now[0])
    assert lim.allow("k")
    now[0] = late
    expected = (
        f"invalid clock reading: {LATE[late]} (a time must be at most 4611686018.427387903 seconds: 2^62 − 1 ns, "
        "about 146 years after the clock's epoch)"
    )
    for op in (lambda: lim.allow("k"), lambda: lim.peek("k"), lambda: lim.reset("k"),
               lambda: lim.refund("k", 1), lambda: lim.allow_many(["k"]), lim.gc):
        with pytest.raises(ratomic.InvalidArgumentError) as e:
            op()
        assert str(e.value) == expected
    now[0] = 4.6e9
    assert lim.peek("k", 0).remaining == 1, "nothing changed"


def test_manual_clock_past_the_last_time(clock):
    tb = ratomic.TokenBucket(2, 1.0, clock=clock)
    direct = ratomic.DirectTokenBucket(2, 1.0, clock=clock)
    clock.set(LAST - 1.0)
    assert tb.allow("k") and direct.allow()
    clock.advance(2.0)
    late = "invalid clock reading: 4611686019.427388 (a time must be at most 4611686018.427387903 seconds"
    with pytest.raises(ratomic.InvalidArgumentError, match=re.escape(late)):
        tb.allow("k")
    with pytest.raises(ratomic.InvalidArgumentError, match=re.escape(late)):
        direct.allow()
    # More than 64 bits of nanoseconds is no time at all: refused by the
    # clock, quoting it (never saturated to 18446744073709551615).
    for too_long in (lambda: clock.advance(1e300), lambda: ratomic.ManualClock(2.0**64 / 1e9)):
        with pytest.raises(ratomic.InvalidArgumentError, match=r"invalid (seconds|start): (1e\+300|18446744073\.709553) \(must be at most"):
            too_long()
    with pytest.raises(ratomic.InvalidArgumentError, match=re.escape(late)):
        tb.peek("k")
    clock.set(LAST - 1.0)
    assert tb.peek("k", 0).remaining == 1 and direct.peek(0).remaining == 1


def test_clock_must_be_callable():
    with pytest.raises(ratomic.ArgumentTypeError):
        ratomic.TokenBucket(1, 1.0, clock=5)


def test_coarse_clock_is_read_natively_and_shares_the_default_timeline(tmp_path):
    coarse = ratomic.CoarseClock()
    assert 0 < coarse.resolution <= 0.01
    assert repr(coarse).startswith("CoarseClock(resolution=")
    t = coarse.now()
    assert coarse.now_ns() >= int(t * 1e9) - 1 and coarse() >= t
    # Three tokens an hour: the fourth call is denied whatever the tick.
    tb = ratomic.TokenBucket(3, 1 / 3600, clock=coarse)
    assert tb.clock is coarse
    assert [tb.allow("k").allowed for _ in range(4)] == [True, True, True, False]
    direct = ratomic.DirectTokenBucket(3, 1 / 3600, clock=coarse)
    assert [direct.allow().allowed for _ in range(4)] == [True, True, True, False]
    # One timeline: a Stack takes it beside the default clock, and a shared
    # file (which refuses a clock of its own) takes it too, one count for both.
    ratomic.Stack({"coarse": tb, "default": ratomic.TokenBucket(3, 1.0)})
    path = str(tmp_path / "coarse.shm")
    on_coarse = ratomic.TokenBucket(3, 1 / 3600, clock=coarse, shared_file=path)
    on_default = ratomic.TokenBucket(3, 1 / 3600, shared_file=path)
    assert [on_coarse.allow("k").allowed for _ in range(3)] == [True, True, True]
    assert not on_default.allow("k").allowed and not on_coarse.allow("k").allowed


def test_coarse_clock_takes_no_arguments():
    with pytest.raises(TypeError):
        ratomic.CoarseClock(5)
