"""Every argument error: the right class, a clear message, no state change."""

import pytest

import ratomic

E = ratomic


def test_hierarchy():
    assert issubclass(E.InvalidArgumentError, E.RatomicError) and issubclass(E.InvalidArgumentError, ValueError)
    for cls in (E.InvalidRateError, E.CostExceedsLimitError, E.KeyTooLongError, E.KeyEncodingError):
        assert issubclass(cls, E.InvalidArgumentError)
    assert issubclass(E.KeyEncodingError, UnicodeError)
    assert issubclass(E.ArgumentTypeError, E.RatomicError) and issubclass(E.ArgumentTypeError, TypeError)
    assert issubclass(E.KeyTypeError, E.ArgumentTypeError)
    assert E.RatomicError.__module__ == "ratomic"
    assert E.RatomicError("x").index is None, "only a batch's error names a request"


@pytest.mark.parametrize(
    "args, exc, match",
    [
        ((10, float("nan")), E.InvalidArgumentError, "refill_per_sec"),
        ((10, float("inf")), E.InvalidArgumentError, "refill_per_sec"),
        ((10, -1.0), E.InvalidArgumentError, "refill_per_sec"),
        ((10, 0.0), E.InvalidArgumentError, "refill_per_sec"),
        ((10, 1e-300), E.InvalidArgumentError, "refill_per_sec"),
        ((0, 1.0), E.InvalidArgumentError, "capacity"),
        ((-1, 1.0), E.InvalidArgumentError, "capacity"),
        ((2**64, 1.0), E.InvalidArgumentError, "capacity"),
        ((2**62, 1.0), E.InvalidArgumentError, "capacity"),
        ((10.0, 1.0), E.ArgumentTypeError, "capacity"),
        ((10, "1.0"), E.InvalidRateError, "1.0"),
        ((10, None), E.ArgumentTypeError, "refill_per_sec"),
        (("10/s", 1.0), E.ArgumentTypeError, "not both"),
        (("ten per second",), E.InvalidRateError, "ten per second"),
        (("10/fortnight",), E.InvalidRateError, "unknown unit"),
        (("0/s",), E.InvalidRateError, "at least 1"),
        ((True, 1.0), E.ArgumentTypeError, "capacity"),
        ((10, [1]), E.ArgumentTypeError, "refill_per_sec"),
        ((10, 10**400), E.InvalidArgumentError, "refill_per_sec"),
    ],
)
def test_token_bucket_arguments(args, exc, match):
    with pytest.raises(exc, match=match):
        ratomic.TokenBucket(*args)


@pytest.mark.parametrize("cls", [ratomic.FixedWindow, ratomic.SlidingWindow])
@pytest.mark.parametrize(
    "args, exc, match",
    [
        # The face checks the numbers, naming the Python parameters.
        ((10, 0.0), E.InvalidArgumentError, "window_secs"),
        ((10, 1e-10), E.InvalidArgumentError, "window_secs"),
        ((10, -1.0), E.InvalidArgumentError, "window_secs"),
        ((10, float("nan")), E.InvalidArgumentError, "window_secs"),
        ((10, float("inf")), E.InvalidArgumentError, "window_secs"),
        ((10, 1e300), E.InvalidArgumentError, "window_secs"),
        ((10, 2.0**63 / 1e9), E.InvalidArgumentError, "window_secs"),
        ((0, 1.0), E.InvalidArgumentError, "limit"),
        ((-5, 1.0), E.InvalidArgumentError, "limit"),
        ((10,), E.ArgumentTypeError, "window_secs"),
        ((10, "1m"), E.ArgumentTypeError, "window_secs"),
        (("10/m", 60.0), E.ArgumentTypeError, "not both"),
        (("10 per fortnight",), E.InvalidRateError, "10 per fortnight"),
        ((2.5, 1.0), E.ArgumentTypeError, "limit"),
    ],
)
def test_window_arguments(cls, args, exc, match):
    with pytest.raises(exc, match=match):
        cls(*args)


@pytest.mark.parametrize(
    "kwargs, exc",
    [
        ({"max_keys": 0}, E.InvalidArgumentError),
        ({"max_keys": -1}, E.InvalidArgumentError),
        ({"max_keys": 1.5}, E.ArgumentTypeError),
        ({"max_key_len": 0}, E.InvalidArgumentError),
        ({"max_key_len": "64"}, E.ArgumentTypeError),
        ({"max_key_bytes": -1}, E.InvalidArgumentError),
        ({"max_key_bytes": 1.0}, E.ArgumentTypeError),
        ({"reserve_keys": -1}, E.InvalidArgumentError),
        ({"reserve_keys": 1.0}, E.ArgumentTypeError),
        ({"reserve_keys": 2_000, "max_keys": 1_000}, E.InvalidArgumentError),
        ({"eviction": "lru"}, E.InvalidArgumentError),
        ({"eviction": "Fair"}, E.InvalidArgumentError),
        ({"eviction": 1}, E.ArgumentTypeError),
        ({"burst": 0}, E.InvalidArgumentError),
        ({"burst": "5"}, E.ArgumentTypeError),
    ],
)
def test_options(kwargs, exc):
    with pytest.raises(exc):
        ratomic.TokenBucket.from_rate("10/s", **kwargs)


@pytest.fixture(params=["token_bucket", "fixed_window", "sliding_window", "limiter"])
def limiter(request, clock):
    return {
        "token_bucket": lambda: ratomic.TokenBucket(5, 1.0, clock=clock, max_key_len=8),
        "fixed_window": lambda: ratomic.FixedWindow(5, 1.0, clock=clock, max_key_len=8),
        "sliding_window": lambda: ratomic.SlidingWindow(5, 1.0, clock=clock, max_key_len=8),
        "limiter": lambda: ratomic.Limiter({"a": "5/s"}, clock=clock, max_key_len=8),
    }[request.param]()


@pytest.mark.parametrize("key", [1, 1.5, None, bytearray(b"k"), memoryview(b"k"), ["k"], ("k",), object()])
def test_wrong_key_type(limiter, key):
    for op in (limiter.allow, limiter.peek, limiter.reset, lambda k: limiter.refund(k, 1)):
        with pytest.raises(TypeError) as e:
            op(key)
        assert isinstance(e.value, ratomic.KeyTypeError)
        assert "str or bytes" in str(e.value)


def test_overlong_key(limiter):
    with pytest.raises(ValueError, match=r"9 bytes long; the limit is 8 bytes \(the limiter's max_key_len option\)$") as e:
        limiter.allow("123456789")
    assert isinstance(e.value, ratomic.KeyTooLongError)
    with pytest.raises(ratomic.KeyTooLongError):
        limiter.allow(b"123456789")
    assert limiter.allow("12345678")


@pytest.mark.parametrize("key", ["\ud800", "\udbff", "\udc00", "user:\udfff", "a\ud83d"])
def test_key_with_lone_surrogate_is_refused(limiter, key):
    # Such a str has no UTF-8 form; Node refuses the same keys (issue 11).
    for op in (limiter.allow, limiter.peek, limiter.reset, lambda k: limiter.refund(k, 1)):
        with pytest.raises(ValueError, match="lone surrogate.*encode the key yourself and pass bytes") as e:
            op(key)
        assert isinstance(e.value, ratomic.KeyEncodingError)
        assert isinstance(e.value, UnicodeError) and isinstance(e.value.__cause__, UnicodeEncodeError)
    with pytest.raises(ratomic.KeyEncodingError, match="request 1 of the batch") as e:
        limiter.allow_many(["k", key])
    assert e.value.index == 1
    assert limiter.peek("k", 0).remaining == 5 and len(limiter) == 0, "nothing changed"
    # What the message suggests works, and is a key of its own.
    assert limiter.allow(key.encode("utf-8", "surrogatepass")).remaining == 4


def test_replacement_character_is_a_valid_key(limiter):
    assert limiter.allow("\ufffd").remaining == 4
    assert limiter.allow("\ufffd".encode()).remaining == 3, "the same key as its UTF-8 bytes"
    assert limiter.peek("\ud800".encode("utf-8", "surrogatepass"), 0).remaining == 5, "and not a surrogate's"


def test_cost_above_limit_changes_nothing(limiter):
    with pytest.raises(ratomic.CostExceedsLimitError, match="cost 6 exceeds the limit 5"):
        limiter.allow("k", 6)
    with pytest.raises(ValueError):
        limiter.peek("k", 6)
    assert limiter.peek("k", 0).remaining == 5


@pytest.mark.parametrize("cost, exc", [(-1, E.InvalidArgumentError), (2**64, E.InvalidArgumentError),
                                       (1.0, E.ArgumentTypeError), ("1", E.ArgumentTypeError),
                                       (None, E.ArgumentTypeError), (True, E.ArgumentTypeError)])
def test_bad_cost(limiter, cost, exc):
    with pytest.raises(exc):
        limiter.allow("k", cost)
    with pytest.raises(exc):
        limiter.refund("k", cost)
    with pytest.raises(exc) as e:
        limiter.allow_many(["a", ("k", cost)])
    assert e.value.index == 1 and str(e.value).startswith("request 1 of the batch: ")
    assert limiter.peek("k", 0).remaining == 5 and limiter.peek("a", 0).remaining == 5


def test_bad_allow_many_requests(limiter):
    with pytest.raises(ratomic.ArgumentTypeError):
        limiter.allow_many("k")
    with pytest.raises(ratomic.ArgumentTypeError):
        limiter.allow_many([("k", 1, 2)])
    with pytest.raises(TypeError):
        limiter.allow_many(5)


@pytest.mark.parametrize("cls", [ratomic.TokenBucket, ratomic.FixedWindow, ratomic.SlidingWindow])
def test_call_signatures(cls):
    for name in ("allow", "peek"):
        method = getattr(cls(5, 60.0), name)
        assert method(key="a", cost=2).remaining == 3
        assert method("b", cost=0).remaining == 5
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'key'"):
            method()
        with pytest.raises(TypeError, match="takes from 1 to 2 positional arguments"):
            method("a", 1, 2)
        with pytest.raises(TypeError, match="multiple values for argument 'key'"):
            method("a", key="b")
        with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
            method("a", foo=1)
    with pytest.raises(TypeError):
        cls.allow(ratomic.Limiter({"a": "1/s"}), "a")


STORE_OPTIONS = {"max_keys": 1000, "max_key_len": 64, "max_key_bytes": 4096, "reserve_keys": 500, "eviction": "strict"}


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: ratomic.TokenBucket(10, 1.0, **kw),
        lambda **kw: ratomic.TokenBucket.from_rate("10/s", **kw),
        lambda **kw: ratomic.FixedWindow("10/s", **kw),
        lambda **kw: ratomic.SlidingWindow("10/s", **kw),
        lambda **kw: ratomic.Limiter({"a": "10/s"}, **kw),
    ],
    ids=["TokenBucket", "TokenBucket.from_rate", "FixedWindow", "SlidingWindow", "Limiter"],
)
def test_every_keyed_limiter_takes_the_store_options(make):
    lim = make(**STORE_OPTIONS)
    assert lim.max_key_len == 64 and lim.allow("k")
    for name, bad in [("max_keys", 0), ("max_key_len", 0), ("eviction", "lru"), ("max_key_bytes", -1), ("reserve_keys", 1001)]:
        with pytest.raises(ratomic.InvalidArgumentError, match=name):
            make(**{**STORE_OPTIONS, name: bad})
    assert make(eviction="fair", max_key_bytes=None).allow("k")
