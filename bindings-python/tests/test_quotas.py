"""Quotas: the quota comes with each call; one bucket per (quota, key)."""

import pytest

import ratomic
from ratomic import Quotas, Rule


def make(**kw):
    clock = ratomic.ManualClock()
    return Quotas(clock=clock, **kw), clock


def test_each_quota_is_its_own_bucket_and_matches_a_token_bucket():
    q, clock = make()
    ref = ratomic.TokenBucket("3/s", clock=clock)
    for _ in range(5):
        assert q.allow("k", "3/s") == ref.allow("k")
    # The same key under another quota: a bucket of its own, full.
    d = q.allow("k", Rule.token_bucket(10, "1/s"))
    assert d and d.remaining == 9 and d.limit == 10
    assert len(q) == 2
    clock.advance(1 / 3)
    assert q.peek("k", "3/s") == ref.peek("k")


def test_refund_reset_gc():
    q, clock = make()
    assert q.allow("k", "4/s", 4)
    q.refund("k", "4/s", 1)
    assert q.peek("k", "4/s", 0).remaining == 1
    q.reset("k", "4/s")
    assert q.peek("k", "4/s", 0).remaining == 4
    assert q.allow("k", "4/s")
    clock.advance(1.0)
    assert q.gc() == 1
    assert len(q) == 0


def test_bad_calls_raise_and_change_nothing():
    q, _ = make(max_key_len=4)
    with pytest.raises(ratomic.CostExceedsLimitError):
        q.allow("k", "3/s", 4)
    with pytest.raises(ratomic.KeyTooLongError):
        q.allow("12345", "3/s")
    with pytest.raises(ratomic.InvalidRateError):
        q.allow("k", "3 per fortnight")
    with pytest.raises(ratomic.InvalidArgumentError):
        q.allow("k", Rule.fixed_window("3/s"))
    with pytest.raises(ratomic.ArgumentTypeError):
        q.allow("k", 3)  # type: ignore[arg-type]
    with pytest.raises(ratomic.KeyTypeError):
        q.allow(3, "3/s")  # type: ignore[arg-type]
    assert len(q) == 0
    assert q.max_key_len == 4

