"""DirectTokenBucket: one bucket, no key."""

import pytest

import ratomic


def test_direct_bucket(clock):
    b = ratomic.DirectTokenBucket(3, 2.0, clock=clock)
    assert (b.capacity, b.refill_per_sec, b.limit) == (3, 2.0, 3)
    assert b.allow().remaining == 2 and b.allow(2).remaining == 0
    d = b.allow()
    assert not d and d.retry_after == pytest.approx(0.5)
    assert b.peek(0).remaining == 0
    clock.advance(0.5)
    assert b.allow()
    b.refund(2)
    assert b.peek(0).remaining == 2
    b.reset()
    assert b.peek(0).remaining == 3
    assert b.clock is clock and b.rule == ratomic.Rule.token_bucket(3, 2.0)
    assert repr(b) == "DirectTokenBucket(token bucket 3 per 1500ms)"


def test_direct_bucket_arguments():
    assert ratomic.DirectTokenBucket("10/s").capacity == 10
    assert ratomic.DirectTokenBucket(20, "10/s").capacity == 20
    with pytest.raises(ratomic.InvalidArgumentError):
        ratomic.DirectTokenBucket(0, 1.0)
    with pytest.raises(ratomic.InvalidRateError):
        ratomic.DirectTokenBucket("10 a second")
    b = ratomic.DirectTokenBucket(2, 1.0)
    with pytest.raises(ratomic.CostExceedsLimitError):
        b.allow(3)
    with pytest.raises(ratomic.InvalidArgumentError):
        b.allow(-1)
    with pytest.raises(ratomic.ArgumentTypeError):
        b.refund(1.5)
    assert b.peek(0).remaining == 2


def test_direct_bucket_with_a_raising_clock():
    def clock():
        raise RuntimeError("no time")

    b = ratomic.DirectTokenBucket(2, 1.0, clock=clock)
    with pytest.raises(RuntimeError, match="no time"):
        b.allow()
