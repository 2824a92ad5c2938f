"""TokenBucket: the five course behaviours and the GCRA equations of the contract
(https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md#41-tokenbucket--gcra-normative), on an injected clock."""

import pytest

import ratomic


def test_full_bucket_allows_capacity(clock):
    tb = ratomic.TokenBucket(10, 1.0, clock=clock)
    for i in range(10):
        d = tb.allow("k")
        assert d.allowed and d.remaining == 9 - i
    d = tb.allow("k")
    assert not d.allowed and d.retry_after > 0


def test_denial_carries_retry_after(clock):
    tb = ratomic.TokenBucket(3, 2.0, clock=clock)
    for _ in range(3):
        tb.allow("k")
    for _ in range(5):
        d = tb.allow("k")
        assert not d
        assert d.retry_after == pytest.approx(0.5)
        assert d.retry_after_ns == 500_000_000
    clock.advance(0.2)
    assert tb.allow("k").retry_after == pytest.approx(0.3)


def test_refill_restores_tokens(clock):
    tb = ratomic.TokenBucket(5, 10.0, clock=clock)
    for _ in range(5):
        assert tb.allow("k")
    assert not tb.allow("k")
    clock.advance(1 / 10)
    d = tb.allow("k")
    assert d and d.remaining == 0
    assert not tb.allow("k")


def test_fractional_refill_is_never_lost(clock):
    tb = ratomic.TokenBucket(1, 10.0, clock=clock)
    assert tb.allow("k")
    for _ in range(2):  # two half-token steps make one token
        assert not tb.allow("k")
        clock.advance(0.05)
    assert tb.allow("k")


def test_per_key_isolated(clock):
    tb = ratomic.TokenBucket(2, 1.0, clock=clock)
    assert tb.allow("a") and tb.allow("a")
    assert not tb.allow("a")
    assert tb.allow("b").remaining == 1
    assert tb.allow(b"b").remaining == 0, "str and bytes with the same UTF-8 are the same key"


def test_decision_fields_follow_gcra(clock):
    tb = ratomic.TokenBucket(4, 2.0, clock=clock)  # T = 0.5 s, tau = 2 s
    d = tb.allow("k", 3)
    assert (d.allowed, d.remaining, d.limit, d.retry_after) == (True, 1, 4, 0.0)
    assert d.reset_after == pytest.approx(1.5)
    d = tb.allow("k", 2)
    assert (d.allowed, d.remaining) == (False, 1)
    assert d.retry_after == pytest.approx(0.5)
    assert d.reset_after == pytest.approx(1.5)


def test_cost_zero_answers_like_peek(clock):
    tb = ratomic.TokenBucket(3, 1.0, clock=clock)
    tb.allow("k")
    assert tb.allow("k", 0) == tb.peek("k", 0)
    assert tb.peek("k", 0).remaining == 2


def test_peek_changes_nothing(clock):
    tb = ratomic.TokenBucket(2, 1.0, clock=clock)
    for _ in range(5):
        assert tb.peek("k").remaining == 1
    assert tb.allow("k").remaining == 1


def test_refund_never_overfills(clock):
    tb = ratomic.TokenBucket(3, 1.0, clock=clock)
    tb.allow("k", 3)
    tb.refund("k", 2)
    assert tb.peek("k", 0).remaining == 2
    tb.refund("k", 100)
    assert tb.peek("k", 0).remaining == 3
    tb.refund("never-seen", 1)
    assert tb.peek("never-seen", 0).remaining == 3


def test_reset_forgets_a_key(clock):
    tb = ratomic.TokenBucket(2, 1.0, clock=clock)
    tb.allow("k", 2)
    assert not tb.allow("k")
    tb.reset("k")
    assert tb.allow("k").remaining == 1


def test_clock_stepping_back_never_grants_more(clock):
    clock.set(100.0)
    tb = ratomic.TokenBucket(2, 1.0, clock=clock)
    tb.allow("k", 2)
    clock.set(50.0)
    d = tb.allow("k")
    assert not d and d.remaining == 0 and d.retry_after > 0


def test_rate_string_forms(clock):
    a = ratomic.TokenBucket("10/s", clock=clock)
    assert (a.capacity, a.refill_per_sec, a.limit) == (10, 10.0, 10)
    b = ratomic.TokenBucket(50, "10/s")
    assert (b.capacity, b.refill_per_sec) == (50, 10.0)
    c = ratomic.TokenBucket.from_rate("100/min", burst=5)
    assert (c.capacity, c.refill_per_sec) == (5, pytest.approx(100 / 60))
    d = ratomic.TokenBucket.from_rate(" 3/250ms ")
    assert (d.capacity, d.refill_per_sec) == (3, 12.0)


def test_allow_many_decides_in_order_at_one_time(clock):
    tb = ratomic.TokenBucket(1, 1.0, clock=clock)
    out = tb.allow_many(["a", ("a", 1), (b"b", 1), ["c", 0]])
    assert [bool(d) for d in out] == [True, False, True, True]
    assert all(isinstance(d, ratomic.Decision) for d in out)
    assert tb.allow_many([]) == []


def test_allow_many_checks_everything_before_charging(clock):
    tb = ratomic.TokenBucket(2, 1.0, clock=clock)
    with pytest.raises(ratomic.CostExceedsLimitError):
        tb.allow_many([("a", 1), ("b", 3)])
    with pytest.raises(ratomic.KeyTypeError):
        tb.allow_many([("a", 1), 7])
    assert tb.peek("a", 0).remaining == 2, "nothing was charged"


def test_len_and_gc(clock):
    tb = ratomic.TokenBucket(1, 1.0, clock=clock)
    assert len(tb) == 0
    for i in range(100):
        tb.allow(f"user:{i}")
    assert len(tb) == 100
    assert tb.gc() == 0, "no bucket is full yet"
    assert tb.memory_bytes() > 0
    clock.advance(1.0)
    assert tb.gc() == 100
    assert len(tb) == 0


def test_max_keys_bounds_memory_without_over_granting(clock):
    tb = ratomic.TokenBucket(2, 1.0, clock=clock, max_keys=64)
    for i in range(1000):
        tb.allow(f"k{i}", 2)
    assert len(tb) <= 128
    # A forgotten key never gets more than a full bucket would have.
    assert tb.peek("k0", 0).remaining <= 2


def test_long_keys_and_max_key_len(clock):
    tb = ratomic.TokenBucket(1, 1.0, clock=clock, max_key_len=64)
    assert tb.max_key_len == 64
    assert tb.allow("x" * 64)
    assert not tb.allow("x" * 64)
    assert tb.allow("x" * 63 + "y")
    assert tb.allow("é" * 32), "64 bytes of UTF-8"
    with pytest.raises(ratomic.KeyTooLongError):
        tb.allow("é" * 33)


def test_unicode_keys_are_their_utf8(clock):
    tb = ratomic.TokenBucket(1, 1.0, clock=clock)
    assert tb.allow("ключ-🔑")
    assert not tb.allow("ключ-🔑".encode())


def test_properties_and_repr(clock):
    tb = ratomic.TokenBucket(10, 2.5, clock=clock)
    assert tb.clock is clock
    assert ratomic.TokenBucket(1, 1.0).clock is None
    assert tb.rule == ratomic.Rule.token_bucket(10, 2.5)
    tb.allow("k")
    assert repr(tb) == "TokenBucket(token bucket 10 per 4s, keys=1)"
