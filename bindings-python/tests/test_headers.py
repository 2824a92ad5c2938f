"""HTTP header fields and problem bodies, from core's one implementation."""

import json

import ratomic
from ratomic import Rule


def test_token_bucket_headers_allow_and_deny():
    clock = ratomic.ManualClock()
    tb = ratomic.TokenBucket("2/s", clock=clock)
    d = tb.allow("ip")
    assert tb.headers(d) == [("RateLimit-Policy", '"default";q=2;w=1'), ("RateLimit", '"default";r=1;t=1')]
    assert tb.problem(d) is None
    tb.allow("ip")
    d = tb.allow("ip")
    h = dict(tb.headers(d, name="per-ip", legacy=True))
    assert h["Retry-After"] == "1"  # 500 ms, rounded up, never 0
    assert h["RateLimit"] == '"per-ip";r=0;t=1'
    assert (h["X-RateLimit-Limit"], h["X-RateLimit-Remaining"], h["X-RateLimit-Reset"]) == ("2", "0", "1")
    body = json.loads(tb.problem(d, name="per-ip"))
    assert body["status"] == 429 and body["violated-policies"] == ["per-ip"] and body["retry-after"] == 1
    assert ratomic.PROBLEM_CONTENT_TYPE == "application/problem+json"


def test_limiter_headers_name_each_limit_and_the_deniers():
    clock = ratomic.ManualClock()
    api = ratomic.Limiter({"burst": "2/s", "daily": Rule.fixed_window("100/day")}, clock=clock)
    api.allow("k", 2)
    d = api.allow("k")
    h = dict(api.headers(d))
    assert h["RateLimit-Policy"] == '"burst";q=2;w=1, "daily";q=100;w=86400'
    # On a denial each entry is what that limit alone would answer, so the
    # daily limit reports what it would hold had the call been charged.
    assert h["RateLimit"] == '"burst";r=0;t=1, "daily";r=97;t=86400'

    assert json.loads(api.problem(d))["violated-policies"] == ["burst"]
    only_daily = api.allow("k", limits=["daily"])
    assert dict(api.headers(only_daily))["RateLimit-Policy"] == '"daily";q=100;w=86400'


def test_direct_and_quotas():
    clock = ratomic.ManualClock()
    direct = ratomic.DirectTokenBucket("1/s", clock=clock)
    direct.allow()
    assert dict(direct.headers(direct.allow()))["Retry-After"] == "1"
    q = ratomic.Quotas(clock=clock)
    d = q.allow("acme", "100/min")
    assert q.headers(d, "100/min", name="plan")[0] == ("RateLimit-Policy", '"plan";q=100;w=60')
    assert q.problem(d, "100/min") is None


def test_bad_names_are_errors_not_headers():
    tb = ratomic.TokenBucket("2/s", clock=ratomic.ManualClock())
    d = tb.allow("k")
    for bad in ["", "caf\u00e9", "line\nbreak"]:
        try:
            tb.headers(d, name=bad)
        except ratomic.InvalidArgumentError:
            pass
        else:
            raise AssertionError(f"{bad!r} accepted")
    assert tb.headers(d, name='a "quoted" \\ name')[0][1].startswith('"a \\"quoted\\" \\\\ name"')
