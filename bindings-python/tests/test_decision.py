"""Decision: immutable, truthy exactly when allowed, readable repr."""

import dataclasses

import pytest

import ratomic


def test_truthy_exactly_when_allowed(clock):
    tb = ratomic.TokenBucket(1, 1.0, clock=clock)
    yes, no = tb.allow("k"), tb.allow("k")
    assert yes.allowed is True and bool(yes) is True
    assert no.allowed is False and bool(no) is False


def test_immutable(clock):
    d = ratomic.TokenBucket(1, 1.0, clock=clock).allow("k")
    for field in ("allowed", "remaining", "limit", "retry_after", "reset_after"):
        with pytest.raises(AttributeError):
            setattr(d, field, 0)
    with pytest.raises(AttributeError):
        d.extra = 1
    with pytest.raises(TypeError):
        ratomic.Decision()


def test_repr_and_types(clock):
    tb = ratomic.TokenBucket(10, 10.0, clock=clock)
    assert repr(tb.allow("k")) == "Decision(allowed=True, remaining=9, limit=10, retry_after=0.0, reset_after=0.1)"
    tb.allow("k", 9)
    d = tb.allow("k")
    assert repr(d) == "Decision(allowed=False, remaining=0, limit=10, retry_after=0.1, reset_after=1.0)"
    assert type(d.remaining) is int and type(d.retry_after) is float and type(d.allowed) is bool
    assert not dataclasses.is_dataclass(d)


def test_equal_and_hashable(clock):
    a = ratomic.TokenBucket(2, 1.0, clock=clock)
    d1, d2 = a.peek("x"), a.peek("y")
    assert d1 == d2 and hash(d1) == hash(d2)
    assert d1 != a.allow("x", 2)
    assert len({d1, d2}) == 1
