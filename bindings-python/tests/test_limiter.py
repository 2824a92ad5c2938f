"""Limiter: several named limits on one key, all or nothing
(https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md#44-several-limits-on-one-key--limiter)."""

import pytest

import ratomic
from ratomic import Rule


@pytest.fixture
def api(clock):
    return ratomic.Limiter(
        {"burst": "3/s", "daily": Rule.fixed_window("5/day")},
        clock=clock,
    )


def test_all_or_nothing(api):
    for _ in range(3):
        d = api.allow("u")
        assert d and isinstance(d, ratomic.MultiDecision)
    d = api.allow("u")
    assert not d
    assert d.denied_by == ("burst",)
    assert d["daily"].allowed, "daily alone would have allowed it"
    assert api.peek("u", 0)["daily"].remaining == 2, "and it was not charged"


def test_combined_fields(api, clock):
    d = api.allow("u", 2)
    assert (d.remaining, d.limit) == (1, 3)  # burst has the least left
    assert list(d.entries) == ["burst", "daily"]
    assert d.entries["daily"].remaining == 3
    assert d.reset_after == pytest.approx(86400.0)
    assert isinstance(d.decision, ratomic.Decision) and d.decision.remaining == 1
    assert len(d) == 2 and "burst" in d and "hourly" not in d and 1 not in d
    assert d.get("hourly") is None
    with pytest.raises(KeyError):
        d["hourly"]
    api.allow("u")
    d = api.allow("u")
    assert d.retry_after == pytest.approx(1 / 3, abs=1e-6)
    assert repr(d).startswith("MultiDecision(allowed=False, remaining=0, limit=3, ")
    assert repr(d).endswith("denied_by=('burst',))")


def test_per_request_limit_sets(clock):
    lim = ratomic.Limiter([("free", "2/s"), ("enterprise", "100/s")], clock=clock)
    free = lim.limit_set(["free"])
    assert free.names == ("free",) and len(free) == 1
    assert lim.allow("bob", limits=free) and lim.allow("bob", limits=free)
    assert not lim.allow("bob", limits=free)
    d = lim.allow("acme", limits=["enterprise"])
    assert d and list(d.entries) == ["enterprise"] and d.remaining == 99
    with pytest.raises(ratomic.InvalidArgumentError):
        lim.allow("bob", limits=["platinum"])
    with pytest.raises(ratomic.InvalidArgumentError):
        lim.allow("bob", limits=[])
    with pytest.raises(ratomic.ArgumentTypeError):
        lim.allow("bob", limits="free")
    other = ratomic.Limiter({"free": "2/s"})
    with pytest.raises(ratomic.InvalidArgumentError, match="another Limiter"):
        other.allow("bob", limits=free)


def test_operations(api, clock):
    api.allow("u", 3)
    api.refund("u", 1)
    assert api.peek("u", 0).remaining == 1
    api.refund("u", 1, limits=["daily"])
    assert api.peek("u", 0)["daily"].remaining == 4
    api.reset("u")
    assert api.peek("u", 0).remaining == 3
    out = api.allow_many(["a", ("a", 2), ("a", 1)])
    assert [bool(d) for d in out] == [True, True, False]
    with pytest.raises(ratomic.CostExceedsLimitError):
        api.allow_many([("b", 1), ("c", 4)])
    assert api.peek("b", 0).remaining == 3, "nothing charged"
    assert len(api) >= 1 and api.memory_bytes() > 0
    clock.advance(86400.0)
    assert api.gc() >= 1 and len(api) == 0
    assert api.names == ("burst", "daily")
    assert api.rules == {"burst": Rule.token_bucket("3/s"), "daily": Rule.fixed_window(5, 86400.0)}
    assert api.max_key_len == 1024
    assert repr(api) == 'Limiter({"burst": token bucket 3 per 1s, "daily": fixed window 5 per 1d}, keys=0)'


def test_rules_of_every_kind(clock):
    lim = ratomic.Limiter(
        [
            ("tb", Rule.token_bucket(10, 1.0)),
            ("tb2", Rule.token_bucket(20, "1/s")),
            ("fw", Rule.fixed_window(100, 60.0)),
            ("sw", Rule.sliding_window("50/h")),
            ("s", "5/s"),
        ],
        clock=clock,
    )
    d = lim.allow("k")
    assert d.remaining == 4 and len(d) == 5
    assert [r.kind for r in lim.rules.values()] == ["token_bucket"] * 2 + ["fixed_window", "sliding_window", "token_bucket"]
    assert repr(Rule.sliding_window(50, 3600.0)) == "Rule.sliding_window(50, window_secs=3600.0)"
    assert str(Rule.sliding_window(50, 3600.0)) == "sliding window 50 per 1h"
    assert repr(Rule.token_bucket(10, 2.5)) == "Rule.token_bucket(10, refill_per_sec=2.5)"
    assert str(Rule.token_bucket(10, 2.5)) == "token bucket 10 per 4s"
    for rule in lim.rules.values():
        assert eval(repr(rule), {"Rule": Rule}) == rule, "a Rule's repr rebuilds it"
    assert Rule.fixed_window("5/s").limit == 5


def test_a_limits_string_as_slowapi_and_limits_write_it(clock):
    """slowapi's "10/second;1000/day": token buckets named by their rates."""
    api = ratomic.Limiter("2/second; 3 per minute | 5/hour,", clock=clock)
    assert api.names == ("2/second", "3 per minute", "5/hour")
    assert api.rules == {
        "2/second": Rule.token_bucket("2/s"),
        "3 per minute": Rule.token_bucket("3/min"),
        "5/hour": Rule.token_bucket("5/h"),
    }
    assert [bool(api.allow("k")) for _ in range(3)] == [True, True, False]
    clock.advance(1.0)
    d = api.allow("k")
    assert d and d["3 per minute"].remaining == 0
    assert api.allow("k").denied_by == ("3 per minute",)
    assert api.peek("k", 0, limits=["5/hour"]).remaining == 2
    # Every rate string accepts the notation of `limits`.
    for text, same in [
        ("5 per minute", "5/min"),
        ("10 per 2 minutes", "10/2m"),
        ("10/2 minutes", "10/120s"),
        ("7 PER Hour", "7/h"),
        ("1/month", "1/30d"),
        ("1 per year", "1/360d"),
    ]:
        assert Rule.token_bucket(text) == Rule.token_bucket(same), text
        assert Rule.fixed_window(text) == Rule.fixed_window(same), text
        assert ratomic.SlidingWindow(text).window_secs == ratomic.SlidingWindow(same).window_secs
    with pytest.raises(ratomic.InvalidRateError, match="no rate in it"):
        ratomic.Limiter(" ; ")


def test_limiter_errors():
    with pytest.raises(ratomic.InvalidArgumentError):
        ratomic.Limiter({})
    with pytest.raises(ratomic.InvalidArgumentError):
        ratomic.Limiter([("a", "1/s"), ("a", "2/s")])
    with pytest.raises(ratomic.InvalidArgumentError):
        ratomic.Limiter({"": "1/s"})
    with pytest.raises(ratomic.InvalidArgumentError):
        ratomic.Limiter({f"l{i}": "1/s" for i in range(17)})
    with pytest.raises(ratomic.InvalidRateError):
        ratomic.Limiter({"a": "ten per second"})
    with pytest.raises(ratomic.ArgumentTypeError):
        ratomic.Limiter({"a": 10})
    with pytest.raises(ratomic.ArgumentTypeError):
        ratomic.Limiter([("a",)])
    with pytest.raises(ratomic.ArgumentTypeError):
        ratomic.Limiter([(1, "1/s")])
    with pytest.raises(ratomic.InvalidRateError, match='invalid rate "a"'):
        ratomic.Limiter("a")  # a str is a limits string: "10/second;1000/day"
    with pytest.raises(ratomic.ArgumentTypeError):
        ratomic.Limiter(5)
    lim = ratomic.Limiter({"a": "2/s", "b": "5/s"})
    with pytest.raises(ratomic.CostExceedsLimitError):
        lim.allow("k", 3)
    assert lim.allow("k", 3, limits=["b"])
