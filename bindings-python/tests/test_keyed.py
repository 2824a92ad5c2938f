"""Keyed: the one base of every single-rule limiter (core's Keyed<Rule>), its
batches and its store options, as the contract states them
(https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md#46-batches--allow_many, #5-keys-and-memory)."""

import pytest

import ratomic

KINDS = {
    "TokenBucket": lambda clock, **kw: ratomic.TokenBucket(5, 1e-6, clock=clock, **kw),
    "FixedWindow": lambda clock, **kw: ratomic.FixedWindow(5, 3600.0, clock=clock, **kw),
    "SlidingWindow": lambda clock, **kw: ratomic.SlidingWindow(5, 3600.0, clock=clock, **kw),
}


@pytest.fixture(params=KINDS.values(), ids=KINDS.keys())
def make(request):
    return request.param


def test_every_single_rule_limiter_is_a_keyed(make, clock):
    lim = make(clock)
    assert isinstance(lim, ratomic.Keyed) and type(lim).__bases__ == (ratomic.Keyed,)
    assert type(lim).allow is ratomic.Keyed.allow, "one implementation of every operation"
    assert lim.rule.limit == lim.limit == 5 and lim.clock is clock
    with pytest.raises(TypeError):
        ratomic.Keyed()


def test_a_batch_with_an_invalid_request_fails_whole(make, clock):
    lim = make(clock, max_key_len=8)
    bad_requests = [
        (["a", ("b", 6), ("c", 1)], 1, ratomic.CostExceedsLimitError),
        (["a", "b", "123456789"], 2, ratomic.KeyTooLongError),
        ([("a", 1), 7], 1, ratomic.KeyTypeError),
        ([("a", 1), ("b", 1.5)], 1, ratomic.ArgumentTypeError),
        (["a", ("b", 1, 2)], 1, ratomic.ArgumentTypeError),
        (["a", "\ud800"], 1, ratomic.KeyEncodingError),
        # The first invalid request is named, whoever finds it: core (a cost
        # too high) or the face (a key of the wrong type).
        (["a", ("b", 6), 7], 1, ratomic.CostExceedsLimitError),
        (["a", 7, ("b", 6)], 1, ratomic.KeyTypeError),
        ([("a", 99), "123456789", 7], 0, ratomic.CostExceedsLimitError),
    ]
    for requests, index, exc in bad_requests:
        with pytest.raises(exc) as e:
            lim.allow_many(requests)
        assert e.value.index == index, requests
        assert str(e.value).startswith(f"request {index} of the batch: ")
        assert str(e.value).endswith("(nothing in the batch was decided)")
    assert len(lim) == 0, "nothing was charged"
    out = lim.allow_many(["a", ("a", 4), ("a", 1), ["b", 0]])
    assert [bool(d) for d in out] == [True, True, False, True]


def test_limiter_batches_name_the_first_invalid_request(clock):
    lim = ratomic.Limiter({"small": "2/s", "big": "10/s"}, clock=clock)
    with pytest.raises(ratomic.CostExceedsLimitError, match="request 1 .* the limit 2") as e:
        lim.allow_many(["a", ("b", 3)])
    assert e.value.index == 1
    assert [bool(d) for d in lim.allow_many(["a", ("b", 3)], limits=["big"])] == [True, True]
    with pytest.raises(ratomic.KeyTypeError) as e:
        lim.allow_many(["a", None], limits=["big"])
    assert e.value.index == 1
    assert lim.peek("a", 0)["small"].remaining == 2, "nothing charged by the failed batches"


def test_store_options_reach_the_store(clock):
    # An attacker's single-use keys churn a store of 64 keys. Fair eviction
    # (the default) never lets that deny an honest key; strict eviction
    # never over-grants, so new keys start from the churned summaries.
    def honest_allowed(eviction):
        tb = ratomic.TokenBucket(1, 1e-6, clock=clock, max_keys=64, eviction=eviction)
        for i in range(20_000):
            tb.allow(f"attacker:{i}")
        return sum(bool(tb.allow(f"honest:{i}")) for i in range(50))

    assert honest_allowed("fair") == honest_allowed(None) == 50
    assert honest_allowed("strict") < 50
    long_keys = [f"a key longer than twenty-three bytes: {i}" for i in range(5000)]
    unbounded = ratomic.TokenBucket(1, 1e-6, clock=clock)
    bounded = ratomic.TokenBucket(1, 1e-6, clock=clock, max_key_bytes=10_000)
    for k in long_keys:
        unbounded.allow(k), bounded.allow(k)
    assert len(unbounded) == 5000 and len(bounded) < 5000
    assert bounded.memory_bytes() < unbounded.memory_bytes()


@pytest.mark.parametrize("cls", [ratomic.FixedWindow, ratomic.SlidingWindow])
def test_window_operations(cls, clock):
    w = cls(5, 10.0, clock=clock)
    assert w.window_secs == 10.0 and w.limit == 5
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
    assert (w.limit, w.window_secs) == (1000, 900.0)
    w = cls(3, 0.25)
    assert (w.limit, w.window_secs) == (3, 0.25)


def test_reserve_keys_makes_room_up_front(make, clock):
    # Room for 5,000 keys allocated at once: filling it grows no table (the
    # memory stays what it was), and every decision is a plain limiter's.
    sized, plain = make(clock, reserve_keys=5_000), make(clock)
    room = sized.memory_bytes()
    assert room > 10 * plain.memory_bytes()
    for k in range(5_000):
        for _ in range(6):
            a, b = sized.allow(f"k{k}"), plain.allow(f"k{k}")
            assert (a.allowed, a.remaining) == (b.allowed, b.remaining)
    assert len(sized) == 5_000 and sized.memory_bytes() == room
    with pytest.raises(ratomic.InvalidArgumentError, match=r"reserve_keys: 101 \(must be at most max_keys \(100\)"):
        make(clock, max_keys=100, reserve_keys=101)
    with pytest.raises(ratomic.ArgumentTypeError):
        make(clock, reserve_keys="many")
