"""Stack: limiters on different keys, all or nothing."""

import pytest

import ratomic


def test_stack_is_all_or_nothing(clock):
    per_ip = ratomic.TokenBucket("3/s", clock=clock)
    per_user = ratomic.TokenBucket("2/s", clock=clock)
    stack = ratomic.Stack([("ip", per_ip), ("user", per_user)])
    assert stack.allow(["10.0.0.1", "alice"])
    assert stack.allow(["10.0.0.1", "alice"])
    d = stack.allow(["10.0.0.1", "alice"])
    assert not d and d.denied_by == ("user",)
    assert per_ip.peek("10.0.0.1", 0).remaining == 1, "the IP was not charged for the denial"
    assert stack.peek([b"10.0.0.1", "bob"]).remaining == 0
    clock.advance(0.5)
    assert stack.allow(["10.0.0.1", "alice"])
    assert len(stack) == 2 and stack.names == ("ip", "user")
    assert stack.members == (per_ip, per_user)
    assert repr(stack).startswith('Stack({"ip": TokenBucket(3, 3.0')


def test_stack_of_every_kind(clock):
    stack = ratomic.Stack(
        {
            "tb": ratomic.TokenBucket(5, 1.0, clock=clock),
            "fw": ratomic.FixedWindow(5, 1.0, clock=clock),
            "sw": ratomic.SlidingWindow(5, 1.0, clock=clock),
            "lim": ratomic.Limiter({"a": "4/s"}, clock=clock),
        }
    )
    d = stack.allow(["a", "b", "c", "d"], 2)
    assert d and d.remaining == 2 and d["lim"].remaining == 2


def test_stack_clocks(clock):
    a = ratomic.TokenBucket("1/s", clock=clock)
    b = ratomic.TokenBucket("1/s")
    with pytest.raises(ratomic.InvalidArgumentError, match="different clocks"):
        ratomic.Stack({"a": a, "b": b})
    stack = ratomic.Stack({"a": a, "b": b}, clock=clock)
    assert stack.allow(["k", "k"])


def test_stack_errors(clock):
    tb = ratomic.TokenBucket("2/s", clock=clock)
    stack = ratomic.Stack({"a": tb})
    with pytest.raises(ratomic.InvalidArgumentError):
        stack.allow(["k", "extra"])
    with pytest.raises(ratomic.ArgumentTypeError):
        stack.allow("k")
    with pytest.raises(ratomic.KeyTypeError):
        stack.allow([1])
    with pytest.raises(ratomic.CostExceedsLimitError):
        stack.allow(["k"], 3)
    with pytest.raises(ratomic.ArgumentTypeError):
        ratomic.Stack({"a": "2/s"})
    with pytest.raises(ratomic.InvalidArgumentError):
        ratomic.Stack({})
    assert tb.peek("k", 0).remaining == 2


def test_stack_with_a_global_bucket(clock):
    per_user = ratomic.TokenBucket("2/s", clock=clock)
    everyone = ratomic.DirectTokenBucket(3, 1.0, clock=clock)
    stack = ratomic.Stack({"user": per_user, "global": everyone})
    assert stack.allow(["alice", ""]) and stack.allow(["bob", ""]) and stack.allow(["carol", ""])
    d = stack.allow(["dave", "ignored"])
    assert d.denied_by == ("global",)
    assert per_user.peek("dave", 0).remaining == 2, "dave was not charged"
