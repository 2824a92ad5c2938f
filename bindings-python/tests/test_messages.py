"""Error messages, pinned word for word: each names the parameter, the value
as the user wrote it, and what is accepted; and units shown wherever a rule
is printed."""

import re

import pytest

import ratomic
from ratomic import Rule

E = ratomic
REFILL_RANGE = (
    "must be a finite number of tokens per second greater than 1.0842021724855044e-10: "
    "one token per 2^63 − 1 ns, about 292 years"
)
WINDOW_RANGE = "must be a number of seconds from 1e-09 to 9223372036.854775807: 1 ns to 2^63 − 1 ns, about 292 years"
U64 = "from 1 to 18446744073709551615"
RATE_HELP = (
    '(expected "<count>/<period>" or "<count> per <period>", e.g. "10/s", "100/min", "3/250ms", "5 per minute")'
)


def message(call):
    with pytest.raises(E.RatomicError) as e:
        call()
    return type(e.value), str(e.value)


@pytest.mark.parametrize(
    "call, exc, text",
    [
        # A refill too slow to represent: the value as written, never a
        # 300-digit decimal.
        (
            lambda: ratomic.TokenBucket(10, 1e-300),
            E.InvalidArgumentError,
            f"invalid refill_per_sec: 1e-300 ({REFILL_RANGE})",
        ),
        (lambda: ratomic.TokenBucket(10, -0.5), E.InvalidArgumentError, f"invalid refill_per_sec: -0.5 ({REFILL_RANGE})"),
        (
            lambda: ratomic.TokenBucket(10, float("nan")),
            E.InvalidArgumentError,
            f"invalid refill_per_sec: nan ({REFILL_RANGE})",
        ),
        (lambda: ratomic.TokenBucket(10, 0), E.InvalidArgumentError, f"invalid refill_per_sec: 0 ({REFILL_RANGE})"),
        (
            lambda: ratomic.DirectTokenBucket(10, 1e-300),
            E.InvalidArgumentError,
            f"invalid refill_per_sec: 1e-300 ({REFILL_RANGE})",
        ),
        (lambda: Rule.token_bucket(10, 1e-300), E.InvalidArgumentError, f"invalid refill_per_sec: 1e-300 ({REFILL_RANGE})"),
        (
            lambda: ratomic.TokenBucket(10, "1.5"),
            E.InvalidRateError,
            f'invalid rate "1.5": missing \'/\' or \' per \' {RATE_HELP}',
        ),
        (
            lambda: ratomic.TokenBucket(10, [1]),
            E.ArgumentTypeError,
            "refill_per_sec must be a number (int or float), not list: [1]",
        ),
        (
            lambda: ratomic.TokenBucket(10, 10**400),
            E.InvalidArgumentError,
            "invalid refill_per_sec: 1000000000000000000000000000000000000000...0000000000 (401 characters) "
            "(too large for a float: must be at most 1.7976931348623157e+308)",
        ),
        # capacity
        (lambda: ratomic.TokenBucket(0, 1.0), E.InvalidArgumentError, f"invalid capacity: 0 (must be a whole number {U64})"),
        (lambda: ratomic.TokenBucket(-3, 1.0), E.InvalidArgumentError, f"invalid capacity: -3 (must be a whole number {U64})"),
        (
            lambda: ratomic.TokenBucket(2**64, 1.0),
            E.InvalidArgumentError,
            f"invalid capacity: 18446744073709551616 (must be a whole number {U64})",
        ),
        (
            lambda: ratomic.TokenBucket(2**62, 1.0),
            E.InvalidArgumentError,
            "invalid capacity: 4611686018427387904 (must be a whole number from 1 to 9223372036 at 1.0 tokens per "
            "second: a full refill must take at most 2^63 − 1 ns, about 292 years)",
        ),
        (
            lambda: ratomic.TokenBucket(10**12, "10/s"),
            E.InvalidArgumentError,
            "invalid capacity: 1000000000000 (must be a whole number from 1 to 92233720368 at 10.0 tokens per "
            "second: a full refill must take at most 2^63 − 1 ns, about 292 years)",
        ),
        (
            lambda: ratomic.TokenBucket.from_rate("10/s", burst=10**12),
            E.InvalidArgumentError,
            "invalid burst: 1000000000000 (must be a whole number from 1 to 92233720368 at 10.0 tokens per "
            "second: a full refill must take at most 2^63 − 1 ns, about 292 years)",
        ),
        (
            lambda: ratomic.TokenBucket.from_rate("10/s", burst=0),
            E.InvalidArgumentError,
            f"invalid burst: 0 (must be a whole number {U64})",
        ),
        (lambda: ratomic.TokenBucket(10.0, 1.0), E.ArgumentTypeError, "capacity must be an int, not float: 10.0"),
        (lambda: ratomic.TokenBucket(True, 1.0), E.ArgumentTypeError, "capacity must be an int, not bool: True"),
        # Rate strings: a count too large says the maximum.
        (
            lambda: ratomic.FixedWindow("99999999999999999999/s"),
            E.InvalidRateError,
            f'invalid rate "99999999999999999999/s": the count is too large (at most 18446744073709551615) {RATE_HELP}',
        ),
        (
            lambda: ratomic.TokenBucket("99999999999999999999 per second"),
            E.InvalidRateError,
            'invalid rate "99999999999999999999 per second": the count is too large (at most 18446744073709551615) '
            f"{RATE_HELP}",
        ),
        # Windows: limit and window_secs.
        (lambda: ratomic.FixedWindow(0, 1.0), E.InvalidArgumentError, f"invalid limit: 0 (must be a whole number {U64})"),
        (
            lambda: ratomic.SlidingWindow(-5, 1.0),
            E.InvalidArgumentError,
            f"invalid limit: -5 (must be a whole number {U64})",
        ),
        (lambda: ratomic.FixedWindow(5, 1e-12), E.InvalidArgumentError, f"invalid window_secs: 1e-12 ({WINDOW_RANGE})"),
        (lambda: ratomic.FixedWindow(5, 0), E.InvalidArgumentError, f"invalid window_secs: 0 ({WINDOW_RANGE})"),
        (lambda: ratomic.SlidingWindow(5, -60.0), E.InvalidArgumentError, f"invalid window_secs: -60.0 ({WINDOW_RANGE})"),
        (lambda: ratomic.SlidingWindow(5, 1e300), E.InvalidArgumentError, f"invalid window_secs: 1e+300 ({WINDOW_RANGE})"),
        (
            lambda: Rule.fixed_window(5, float("inf")),
            E.InvalidArgumentError,
            f"invalid window_secs: inf ({WINDOW_RANGE})",
        ),
        (
            lambda: ratomic.FixedWindow(5, "1m"),
            E.ArgumentTypeError,
            "window_secs must be a number of seconds, not str: '1m'; for a rate string write \"5/1m\" as the only argument",
        ),
        (
            lambda: ratomic.FixedWindow(5, "60"),
            E.ArgumentTypeError,
            "window_secs must be a number of seconds, not str: '60'; for a rate string write \"5/60s\" as the only argument",
        ),
        (
            lambda: ratomic.FixedWindow(5),
            E.ArgumentTypeError,
            'window_secs is missing: give (limit, window_secs) or a rate string such as "100/min"',
        ),
        (
            lambda: ratomic.FixedWindow(2**40, 1.0),
            E.InvalidArgumentError,
            "invalid limit: 1099511627776 (is too large for a fixed window of 1s: at most 1073741823)",
        ),
        (lambda: ratomic.FixedWindow(2.5, 1.0), E.ArgumentTypeError, "limit must be an int, not float: 2.5"),
        # Store options.
        (
            lambda: ratomic.TokenBucket("10/s", max_keys=0),
            E.InvalidArgumentError,
            f"invalid max_keys: 0 (must be a whole number {U64})",
        ),
        (
            lambda: ratomic.TokenBucket("10/s", max_key_len=-1),
            E.InvalidArgumentError,
            f"invalid max_key_len: -1 (must be a whole number {U64})",
        ),
        (
            lambda: ratomic.TokenBucket("10/s", max_key_bytes=-1),
            E.InvalidArgumentError,
            "invalid max_key_bytes: -1 (must be a whole number from 0 to 18446744073709551615)",
        ),
        (
            lambda: ratomic.TokenBucket("10/s", max_keys=1.5),
            E.ArgumentTypeError,
            "max_keys must be an int, not float: 1.5",
        ),
        # Calls.
        (
            lambda: ratomic.TokenBucket("10/s").allow("k", -1),
            E.InvalidArgumentError,
            "invalid cost: -1 (must be a whole number from 0 to 18446744073709551615)",
        ),
        (lambda: ratomic.TokenBucket("10/s").allow("k", 1.5), E.ArgumentTypeError, "cost must be an int, not float: 1.5"),
        (
            lambda: ratomic.TokenBucket("10/s").allow("k", 11),
            E.CostExceedsLimitError,
            "cost 11 exceeds the limit 10: this call could never be allowed",
        ),
        (
            lambda: ratomic.TokenBucket("10/s").refund("k", -2),
            E.InvalidArgumentError,
            "invalid tokens: -2 (must be a whole number from 0 to 18446744073709551615)",
        ),
        # Clocks.
        (
            lambda: ratomic.ManualClock(-1e-300),
            E.InvalidArgumentError,
            "invalid start: -1e-300 (must be a finite number of seconds ≥ 0)",
        ),
        (
            lambda: ratomic.ManualClock().advance("1"),
            E.ArgumentTypeError,
            "seconds must be a number (int or float), not str: '1'",
        ),
        # Several limits in one string.
        (
            lambda: ratomic.Limiter("10/s;10/s"),
            E.InvalidArgumentError,
            'invalid limits: "10/s;10/s" ("10/s" is given twice)',
        ),
        (
            lambda: ratomic.Limiter("10/second; 5/fortnight"),
            E.InvalidRateError,
            'invalid rate "5/fortnight": unknown unit',
        ),
    ],
)
def test_message(call, exc, text):
    got_type, got = message(call)
    assert got_type is exc
    if text.endswith("unknown unit"):
        assert got.startswith(text)  # then the list of units
    else:
        assert got == text


def test_no_message_prints_a_float_in_full():
    """Rust writes 1e-300 as 0.000…0001; every value here is the user's own."""
    for call in (
        lambda: ratomic.TokenBucket(10, 1e-300),
        lambda: ratomic.FixedWindow(5, 1e-300),
        lambda: ratomic.ManualClock(-1e-300),
        lambda: ratomic.ManualClock().advance(-1e-300),
    ):
        _, text = message(call)
        assert "1e-300" in text and not re.search(r"0\.0{10}", text), text


def test_type_errors_name_the_parameter():
    for call, name in [
        (lambda: ratomic.TokenBucket("5/s", None, clock=3), "clock"),
        (lambda: ratomic.TokenBucket(5, 1.0, eviction=1), "eviction"),
        (lambda: ratomic.TokenBucket(5, 1.0, shared_file=1), "shared_file"),
        (lambda: ratomic.Limiter({"a": 5}), "limit"),
        (lambda: ratomic.SlidingWindow(5, None), "window_secs"),
        (lambda: ratomic.TokenBucket(5), "refill_per_sec"),
    ]:
        with pytest.raises(TypeError, match=name):
            call()


def test_window_secs_by_keyword_and_position():
    clock = ratomic.ManualClock()
    by_keyword = ratomic.FixedWindow(5, window_secs=60.0, clock=clock)
    by_position = ratomic.FixedWindow(5, 60.0, clock=clock)
    assert by_keyword.window_secs == by_position.window_secs == 60.0
    assert ratomic.SlidingWindow(limit=100, window_secs=3600).window_secs == 3600.0
    assert Rule.fixed_window(5, window_secs=60) == Rule.fixed_window("5/min")
    assert Rule.sliding_window(5, window_secs=0.25) == Rule.sliding_window("5/250ms")


@pytest.mark.parametrize(
    "make, shown",
    [
        (lambda: ratomic.FixedWindow("5/min"), "FixedWindow(fixed window 5 per 1m, keys=0)"),
        (lambda: ratomic.FixedWindow(5, 0.06), "FixedWindow(fixed window 5 per 60ms, keys=0)"),
        (lambda: ratomic.SlidingWindow("100 per hour"), "SlidingWindow(sliding window 100 per 1h, keys=0)"),
        (lambda: ratomic.TokenBucket("10/s"), "TokenBucket(token bucket 10 per 1s, keys=0)"),
        (lambda: ratomic.TokenBucket(50, "10/s"), "TokenBucket(token bucket 50 per 5s, keys=0)"),
        (lambda: ratomic.TokenBucket(10, 1e-8), "TokenBucket(token bucket 10 per 1000000000s, keys=0)"),
        (lambda: ratomic.DirectTokenBucket("1000/min"), "DirectTokenBucket(token bucket 1000 per 1m)"),
        (
            lambda: ratomic.Limiter("10/second;1000/day"),
            'Limiter({"10/second": token bucket 10 per 1s, "1000/day": token bucket 1000 per 1d}, keys=0)',
        ),
    ],
)
def test_limiters_print_their_rule_with_units(make, shown):
    limiter = make()
    assert repr(limiter) == shown
    assert str(limiter) == shown


def test_python_side_arguments():
    import asyncio

    from ratomic.wsgi import RateLimitMiddleware

    limiter = ratomic.TokenBucket("5/s")
    for timeout, exc, text in [
        (-1.0, E.InvalidArgumentError, "invalid timeout: -1.0 (must be None or a number of seconds >= 0)"),
        (float("nan"), E.InvalidArgumentError, "invalid timeout: nan (must be None or a number of seconds >= 0)"),
        ("1", E.ArgumentTypeError, "timeout must be None or a number of seconds, not str: '1'"),
    ]:
        with pytest.raises(exc) as e:
            asyncio.run(ratomic.acquire(limiter, "k", timeout=timeout))
        assert str(e.value) == text
    for kwargs, exc, text in [
        ({"trusted_proxies": -1}, ValueError, "invalid trusted_proxies: -1 (must be a whole number >= 0)"),
        ({"trusted_proxies": "1"}, TypeError, "trusted_proxies must be an int, not str: '1'"),
        ({"ipv6_prefix": 129}, ValueError, "invalid ipv6_prefix: 129 (must be a whole number from 0 to 128)"),
        ({"ipv6_prefix": 64.0}, TypeError, "ipv6_prefix must be an int, not float: 64.0"),
    ]:
        with pytest.raises(exc) as e:
            RateLimitMiddleware(lambda environ, start_response: [], limiter, **kwargs)
        assert str(e.value) == text
