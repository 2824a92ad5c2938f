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
    assert repr(stack).startswith('Stack({"ip": TokenBucket(token bucket 3 per 1s, keys=')


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


def test_stack_members_must_share_one_clock(clock):
    # The stack passes one reading to every member: core refuses a member
    # on another clock (the contract, https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md#45-limiters-on-different-keys--stack), in every face.
    manual = ratomic.TokenBucket("1/s", clock=clock)
    default = ratomic.TokenBucket("1/s")
    with pytest.raises(ratomic.InvalidArgumentError, match='member: "b" .*another clock'):
        ratomic.Stack({"a": manual, "b": default})
    with pytest.raises(ratomic.InvalidArgumentError, match='member: "b"'):
        ratomic.Stack({"a": manual, "b": default}, clock=clock)
    with pytest.raises(ratomic.InvalidArgumentError, match='member: "a"'):
        ratomic.Stack({"a": manual}, clock=ratomic.ManualClock())
    with pytest.raises(ratomic.InvalidArgumentError):
        ratomic.Stack({"a": ratomic.TokenBucket("1/s", clock=lambda: 0.0), "b": ratomic.TokenBucket("1/s", clock=lambda: 0.0)})
    assert ratomic.Stack({"a": manual, "b": ratomic.FixedWindow("1/s", clock=clock)}).clock is clock
    assert ratomic.Stack({"a": manual}, clock=clock).allow(["k"])
    assert ratomic.Stack({"a": default, "b": ratomic.DirectTokenBucket("1/s")}).clock is None
    now = [0.0]

    def read():
        return now[0]

    stack = ratomic.Stack({"a": ratomic.TokenBucket("1/s", clock=read), "b": ratomic.Limiter({"x": "2/s"}, clock=read)})
    assert stack.clock is read and stack.allow(["k", "k"]) and not stack.allow(["k", "k"])
    now[0] = 1.0
    assert stack.allow(["k", "k"])


def test_stack_refund_and_reset(clock):
    per_ip = ratomic.TokenBucket("3/s", clock=clock)
    per_user = ratomic.Limiter({"burst": "2/s", "daily": ratomic.Rule.fixed_window("10/day")}, clock=clock)
    everyone = ratomic.DirectTokenBucket(5, 1.0, clock=clock)
    stack = ratomic.Stack({"ip": per_ip, "user": per_user, "global": everyone})
    keys = ["10.0.0.1", "alice", ""]
    assert stack.allow(keys, 2)
    stack.refund(keys, 1)
    assert per_ip.peek("10.0.0.1", 0).remaining == 2
    assert per_user.peek("alice", 0).remaining == 1 and per_user.peek("alice", 0)["daily"].remaining == 9
    assert everyone.peek(0).remaining == 4
    stack.refund(keys, 100)
    assert stack.peek(keys, 0).remaining == 2, "never above full"
    assert stack.allow(keys, 2) and not stack.allow(keys)
    stack.reset(keys)
    assert per_ip.peek("10.0.0.1", 0).remaining == 3 and everyone.peek(0).remaining == 5
    assert per_user.peek("alice", 0)["daily"].remaining == 10
    with pytest.raises(ratomic.InvalidArgumentError, match="one key per member"):
        stack.refund(["10.0.0.1"], 1)
    with pytest.raises(ratomic.KeyTypeError):
        stack.reset(["10.0.0.1", 2, ""])
    with pytest.raises(ratomic.ArgumentTypeError):
        stack.refund(keys, 1.5)


def test_stack_clock_past_the_last_valid_time_changes_nothing(clock):
    tb = ratomic.TokenBucket("2/s", clock=clock)
    stack = ratomic.Stack({"a": tb})
    assert stack.allow(["k"])
    clock.set(2.0**62 / 1e9)
    for op in (stack.allow, stack.peek, stack.reset, lambda k: stack.refund(k, 1)):
        with pytest.raises(ratomic.InvalidArgumentError, match=r"invalid clock reading: 4611686018\.427388 \(a time"):
            op(["k"])
    clock.set(0.0)
    assert tb.peek("k", 0).remaining == 1


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
