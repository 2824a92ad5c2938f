"""HTTP header fields and problem bodies, from core's one implementation."""

import json

import pytest

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
    # Nothing was charged on the denial: the daily limit, which would have
    # allowed the call, reports what it still has (core since c801a9a).
    assert h["RateLimit"] == '"burst";r=0;t=1, "daily";r=98;t=86400'

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


# What core's headers module pins for each draft (its `fields_in` doc test): a
# limit "burst" of 100 a minute, 99 left, 41.2 s until full.
BURST_IN = {
    "draft-11": [("RateLimit-Policy", '"burst";q=100;w=60'), ("RateLimit", '"burst";r=99;t=42')],
    "draft-8": [("RateLimit-Policy", '"burst";q=100;w=60'), ("RateLimit", '"burst";r=99;t=42')],
    "draft-7": [("RateLimit-Policy", "100;w=60"), ("RateLimit", "limit=100, remaining=99, reset=42")],
    "draft-6": [
        ("RateLimit-Policy", "100;w=60"),
        ("RateLimit-Limit", "100"),
        ("RateLimit-Remaining", "99"),
        ("RateLimit-Reset", "42"),
    ],
}


def test_each_draft_writes_core_s_fields_for_one_limit():
    clock = ratomic.ManualClock()
    fw = ratomic.FixedWindow("100/min", clock=clock)
    clock.advance(18.8)  # 41.2 s before the minute's window ends
    d = fw.allow("k")
    for draft, fields in BURST_IN.items():
        assert fw.headers(d, name="burst", draft=draft) == fields, draft
    assert fw.headers(d, name="burst") == BURST_IN["draft-11"], "draft 11 is the default"
    # The legacy fields follow the standard ones in every draft.
    for draft, fields in BURST_IN.items():
        assert fw.headers(d, name="burst", legacy=True, draft=draft) == [
            *fields,
            ("X-RateLimit-Limit", "100"),
            ("X-RateLimit-Remaining", "99"),
            ("X-RateLimit-Reset", "42"),
        ]


def test_every_single_rule_limiter_takes_a_draft():
    clock = ratomic.ManualClock()
    tb = ratomic.TokenBucket("2/s", clock=clock)
    sw = ratomic.SlidingWindow("2/s", clock=clock)
    direct = ratomic.DirectTokenBucket("2/s", clock=clock)
    quotas = ratomic.Quotas(clock=clock)
    tb.allow("k", 2)
    direct.allow(2)
    sw.allow("k", 2)
    quotas.allow("k", "2/s", 2)
    # Denied: 0 left, the whole bucket (or window) back in 1 s.
    want = [
        ("RateLimit-Policy", "2;w=1"),
        ("RateLimit-Limit", "2"),
        ("RateLimit-Remaining", "0"),
        ("RateLimit-Reset", "1"),
        ("Retry-After", "1"),
    ]
    assert tb.headers(tb.allow("k"), draft="draft-6") == want
    # A sliding window weighs the last second's count as it slides out:
    # room for one more after 1.5 s, empty after 2.
    assert sw.headers(sw.allow("k"), draft="draft-6") == [*want[:3], ("RateLimit-Reset", "2"), ("Retry-After", "2")]
    assert direct.headers(direct.allow(), draft="draft-6") == want
    assert quotas.headers(quotas.allow("k", "2/s"), "2/s", draft="draft-6") == want
    assert tb.headers(tb.peek("k"), draft="draft-7")[1] == ("RateLimit", "limit=2, remaining=0, reset=1")


def test_a_limiter_s_earlier_drafts_list_each_limit_unnamed_and_answer_for_the_combined_decision():
    clock = ratomic.ManualClock()
    api = ratomic.Limiter({"burst": "2/s", "daily": Rule.fixed_window("100/day")}, clock=clock)
    api.allow("k", 2)
    d = api.allow("k")  # denied by burst
    # The policies are core's strings for these two limits. The rest is the
    # combined decision: the limit and remaining of the limit with the
    # least left (burst), the largest reset (the day's window ends in 86400 s).
    assert api.headers(d, legacy=True, draft="draft-7") == [
        ("RateLimit-Policy", "2;w=1, 100;w=86400"),
        ("RateLimit", "limit=2, remaining=0, reset=86400"),
        ("Retry-After", "1"),
        ("X-RateLimit-Limit", "2"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", "86400"),
    ]
    assert api.headers(d, draft="draft-6") == [
        ("RateLimit-Policy", "2;w=1, 100;w=86400"),
        ("RateLimit-Limit", "2"),
        ("RateLimit-Remaining", "0"),
        ("RateLimit-Reset", "86400"),
        ("Retry-After", "1"),
    ]
    draft_11 = [
        ("RateLimit-Policy", '"burst";q=2;w=1, "daily";q=100;w=86400'),
        ("RateLimit", '"burst";r=0;t=1, "daily";r=98;t=86400'),
        ("Retry-After", "1"),
    ]
    assert api.headers(d, draft="draft-11") == api.headers(d, draft="draft-8") == api.headers(d) == draft_11
    # A call subject to some limits lists only those.
    only_daily = api.allow("k", limits=["daily"])
    assert api.headers(only_daily, draft="draft-7") == [
        ("RateLimit-Policy", "100;w=86400"),
        ("RateLimit", "limit=100, remaining=97, reset=86400"),
    ]


def test_a_draft_ratomic_does_not_write_is_an_error():
    clock = ratomic.ManualClock()
    tb = ratomic.TokenBucket("2/s", clock=clock)
    api = ratomic.Limiter({"a": "2/s"}, clock=clock)
    q = ratomic.Quotas(clock=clock)
    direct = ratomic.DirectTokenBucket("2/s", clock=clock)
    stack = ratomic.Stack({"a": tb})
    d, m, s = tb.allow("k"), api.allow("k"), stack.allow(["k"])
    calls = [
        lambda draft: tb.headers(d, draft=draft),
        lambda draft: api.headers(m, draft=draft),
        lambda draft: q.headers(d, "2/s", draft=draft),
        lambda draft: direct.headers(d, draft=draft),
        lambda draft: stack.headers(s, draft=draft),
    ]
    for call in calls:
        for bad in ["draft-9", "Draft-11", "11", "draft_7", ""]:
            with pytest.raises(ratomic.InvalidArgumentError) as e:
                call(bad)
            assert isinstance(e.value, ValueError)
            assert str(e.value) == f'invalid draft: "{bad}" (must be "draft-11", "draft-8", "draft-7" or "draft-6")'
        with pytest.raises(TypeError):  # not a str at all: a TypeError, as a non-str name is
            call(11)


def stack_of_three(clock: ratomic.ManualClock) -> ratomic.Stack:
    """core's tests/stack.rs `stack_headers_list_every_member_and_name_who_denied`."""
    return ratomic.Stack(
        {
            "ip": ratomic.TokenBucket("2/s", clock=clock),
            "user": ratomic.FixedWindow("100/min", clock=clock),
            "global": ratomic.DirectTokenBucket("1000/s", clock=clock),
        }
    )


KEYS = ["10.0.0.1", "alice", ""]


def test_stack_headers_list_every_member_and_name_who_denied():
    stack = stack_of_three(ratomic.ManualClock())
    policy = ("RateLimit-Policy", '"ip";q=2;w=1, "user";q=100;w=60, "global";q=1000;w=1')
    assert stack.headers(stack.allow(KEYS)) == [policy, ("RateLimit", '"ip";r=1;t=1, "user";r=99;t=60, "global";r=999;t=1')]
    assert stack.allow(KEYS)
    d = stack.allow(KEYS)
    assert d.denied_by == ("ip",)
    # Nothing charged on the denial: user still at 98, global at 998.
    draft_11 = [policy, ("RateLimit", '"ip";r=0;t=1, "user";r=98;t=60, "global";r=998;t=1'), ("Retry-After", "1")]
    assert stack.headers(d) == stack.headers(d, draft="draft-11") == stack.headers(d, draft="draft-8") == draft_11
    # Drafts 7 and 6: each member's policy unnamed, the rest from the
    # combined decision (the ip has the least left; the user's minute, the
    # latest reset).
    assert stack.headers(d, draft="draft-7", legacy=True) == [
        ("RateLimit-Policy", "2;w=1, 100;w=60, 1000;w=1"),
        ("RateLimit", "limit=2, remaining=0, reset=60"),
        ("Retry-After", "1"),
        ("X-RateLimit-Limit", "2"),
        ("X-RateLimit-Remaining", "0"),
        ("X-RateLimit-Reset", "60"),
    ]
    assert stack.headers(d, draft="draft-6") == [
        ("RateLimit-Policy", "2;w=1, 100;w=60, 1000;w=1"),
        ("RateLimit-Limit", "2"),
        ("RateLimit-Remaining", "0"),
        ("RateLimit-Reset", "60"),
        ("Retry-After", "1"),
    ]
    assert stack.problem(d) == (
        '{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests",'
        '"status":429,"detail":"Quota exceeded for ip; retry after 1 s.","violated-policies":["ip"],"retry-after":1}'
    )
    assert stack.problem(stack.peek(["10.0.0.2", "bob", ""])) is None


def test_stack_headers_refuse_a_decision_not_the_stack_s():
    clock = ratomic.ManualClock()
    stack = stack_of_three(clock)
    twin = stack_of_three(clock)  # the same names, other members: not its decisions either
    api = ratomic.Limiter({"ip": "2/s", "user": "5/s", "global": "9/s"}, clock=clock)
    tb = ratomic.TokenBucket("2/s", clock=clock)
    for other in [twin.allow(KEYS), api.allow("k")]:
        for call in (stack.headers, stack.problem):
            with pytest.raises(ratomic.InvalidArgumentError, match="not one of this Stack's") as e:
                call(other)
            assert isinstance(e.value, ValueError)
    for call in (stack.headers, stack.problem):
        with pytest.raises(TypeError):  # a single Decision, as Limiter.headers refuses one
            call(tb.allow("k"))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        api.headers(tb.allow("k"))  # type: ignore[arg-type]
    with pytest.raises(ratomic.InvalidArgumentError, match="invalid draft"):
        stack.headers(stack.allow(KEYS), draft="draft-9")  # type: ignore[arg-type]


def test_a_stack_with_a_limiter_member_works_but_has_no_headers():
    clock = ratomic.ManualClock()
    user = ratomic.Limiter({"burst": "2/s", "daily": Rule.fixed_window("100/day")}, clock=clock)
    stack = ratomic.Stack({"ip": ratomic.TokenBucket("5/s", clock=clock), "user": user})
    d = stack.allow(["10.0.0.1", "alice"])  # deciding needs no header policy
    assert d and d["user"].remaining == 1
    for call in (stack.headers, stack.problem):
        with pytest.raises(ratomic.InvalidArgumentError, match=r'stack member: "user" \(is a Limiter') as e:
            call(d)
        assert isinstance(e.value, ValueError)
    # A member name no header can carry is an error there too, naming it.
    odd = ratomic.Stack({"caf\u00e9": ratomic.TokenBucket("5/s", clock=clock)})
    with pytest.raises(ratomic.InvalidArgumentError, match="caf\u00e9"):
        odd.headers(odd.allow(["k"]))
