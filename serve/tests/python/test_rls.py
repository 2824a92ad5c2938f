"""Envoy's RLS v3 ShouldRateLimit against `ratomic serve`, per its YAML."""

import subprocess
import os

import grpc
import pytest

from conftest import OK, OVER_LIMIT, UNIT, descriptor, request

MESSAGING = """\
domain: messaging
descriptors:
  # Units of a year: a window boundary (counted from the host's boot) cannot
  # fall inside a test and change its counts.
  # Only 5 marketing messages to one number
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: year
          requests_per_unit: 5
  # 100 messages to any one number
  - key: to_number
    rate_limit:
      unit: year
      requests_per_unit: 100
  - key: ldap
    rate_limit:
      unlimited: true
  - key: canary
    shadow_mode: true
    rate_limit:
      unit: year
      requests_per_unit: 2
  - key: blocked
    value: evil
    rate_limit:
      unit: second
      requests_per_unit: 0
"""


def test_nested_descriptors_are_decided_per_descriptor_all_or_nothing(serve):
    s = serve(MESSAGING)
    marketing = descriptor(("message_type", "marketing"), ("to_number", "2061111111"))
    number = descriptor(("to_number", "2061111111"))
    for i in range(5):
        r = s.call(request("messaging", marketing, number))
        assert r.overall_code == OK
        assert [st.code for st in r.statuses] == [OK, OK]
        assert r.statuses[0].current_limit.requests_per_unit == 5
        assert r.statuses[0].current_limit.unit == UNIT.YEAR
        assert r.statuses[0].limit_remaining == 4 - i
        assert r.statuses[1].current_limit.requests_per_unit == 100
        assert r.statuses[1].limit_remaining == 99 - i
        assert 0 < r.statuses[0].duration_until_reset.ToNanoseconds() <= 365 * 86_400 * 10**9
    r = s.call(request("messaging", marketing, number))
    assert r.overall_code == OVER_LIMIT
    assert [st.code for st in r.statuses] == [OVER_LIMIT, OK]
    assert r.statuses[0].limit_remaining == 0
    # The rejected request took nothing from the per-number limit.
    assert r.statuses[1].limit_remaining == 95
    r = s.call(request("messaging", number))
    assert r.statuses[0].limit_remaining == 94
    # Another number has its own keys.
    r = s.call(request("messaging", descriptor(("message_type", "marketing"), ("to_number", "2062222222"))))
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 4


def test_a_descriptor_without_a_rule_is_ok_and_unlimited_says_so(serve):
    s = serve(MESSAGING)
    r = s.call(request("messaging", descriptor(("nothing", "here")), descriptor(("ldap", "x"))))
    assert r.overall_code == OK
    none, unlimited = r.statuses
    assert none.code == OK and not none.HasField("current_limit") and none.limit_remaining == 0
    assert unlimited.code == OK and unlimited.limit_remaining == 2**32 - 1
    for _ in range(50):
        assert s.call(request("messaging", descriptor(("ldap", "x")), hits_addend=1000)).overall_code == OK
    r = s.call(request("unknown_domain", descriptor(("to_number", "1"))))
    assert r.overall_code == OK and not r.statuses[0].HasField("current_limit")
    # Deeper than any rule: no rule.
    r = s.call(request("messaging", descriptor(("to_number", "1"), ("extra", "x"))))
    assert r.overall_code == OK and not r.statuses[0].HasField("current_limit")
    # requests_per_unit: 0 refuses every call.
    r = s.call(request("messaging", descriptor(("blocked", "evil"))))
    assert r.overall_code == OVER_LIMIT


def test_hits_addend_from_the_request_and_from_the_descriptor(serve):
    s = serve(MESSAGING)
    number = descriptor(("to_number", "1"))
    r = s.call(request("messaging", number, hits_addend=30))
    assert r.statuses[0].limit_remaining == 70
    r = s.call(request("messaging", descriptor(("to_number", "1"), hits=60), hits_addend=30))
    assert r.statuses[0].limit_remaining == 10, "the descriptor's hits_addend overrides the request's"
    r = s.call(request("messaging", number, hits_addend=0))
    assert r.statuses[0].limit_remaining == 9, "hits_addend 0 counts one hit"
    r = s.call(request("messaging", number, hits_addend=10))
    assert r.overall_code == OVER_LIMIT, "10 hits do not fit in 9"
    r = s.call(request("messaging", number, hits_addend=9))
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 0
    r = s.call(request("messaging", descriptor(("to_number", "2")), hits_addend=101))
    assert r.overall_code == OVER_LIMIT, "more hits than the limit"
    r = s.call(request("messaging", descriptor(("to_number", "2"))))
    assert r.statuses[0].limit_remaining == 99, "and they took nothing"


def test_shadow_mode_reports_ok_over_the_limit(serve):
    s = serve(MESSAGING)
    canary = descriptor(("canary", "x"))
    codes = [s.call(request("messaging", canary)) for _ in range(4)]
    assert [r.overall_code for r in codes] == [OK] * 4
    assert [r.statuses[0].code for r in codes] == [OK] * 4
    assert [r.statuses[0].limit_remaining for r in codes] == [1, 0, 0, 0]
    # A shadow descriptor over its limit does not reject the request's others.
    r = s.call(request("messaging", canary, descriptor(("to_number", "9"))))
    assert r.overall_code == OK and r.statuses[1].limit_remaining == 99
    assert s.call(request("messaging", descriptor(("to_number", "9")))).statuses[0].limit_remaining == 98


REPLACES = """\
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: year
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: year
"""


def test_replaces_drops_the_named_limit(serve):
    s = serve(REPLACES)
    d1 = descriptor(("key_1", "value_1"), ("user", "bkthomps"))
    d2 = descriptor(("key_2", "value_2"), ("user", "bkthomps"))
    for i in range(10):
        r = s.call(request("example7", d1, d2))
        assert r.overall_code == OK, i
        assert not r.statuses[0].HasField("current_limit"), "replaced"
        assert r.statuses[1].limit_remaining == 9 - i
    assert s.call(request("example7", d1, d2)).overall_code == OVER_LIMIT
    # Alone, the replaced limit was never spent.
    r = s.call(request("example7", d1))
    assert r.overall_code == OK and r.statuses[0].limit_remaining == 4


def test_response_headers_carry_the_ietf_fields(serve):
    s = serve(MESSAGING, "--response-headers")
    r = s.call(request("messaging", descriptor(("canary", "h")), descriptor(("to_number", "5"))))
    headers = {h.key: h.value for h in r.response_headers_to_add}
    assert headers["RateLimit-Policy"] == '"messaging.canary";q=2;w=31536000'
    assert headers["RateLimit"].startswith('"messaging.canary";r=1;t=')
    r = s.call(request("messaging", descriptor(("blocked", "evil"))))
    headers = {h.key: h.value for h in r.response_headers_to_add}
    assert r.overall_code == OVER_LIMIT and int(headers["Retry-After"]) >= 1
    # Off by default.
    s2 = serve(MESSAGING, name="other.yaml")
    assert len(s2.call(request("messaging", descriptor(("to_number", "5")))).response_headers_to_add) == 0


def test_bad_requests_get_invalid_argument_and_change_nothing(serve):
    s = serve(MESSAGING, "--max-descriptors", "4", "--max-request-bytes", "4096")
    number = descriptor(("to_number", "7"))
    cases = [
        request("", number),
        request("messaging"),
        request("messaging", *[number] * 5),
        request("messaging", number, descriptor(("to_number", "x" * 2000))),
    ]
    for req in cases:
        with pytest.raises(grpc.RpcError) as e:
            s.call(req)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value
        assert "127.0.0.1" not in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        s.call(request("messaging", descriptor(("to_number", "x" * 5000))))
    assert e.value.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OUT_OF_RANGE), e.value
    # Nothing was counted, and the server still answers.
    assert s.call(request("messaging", number)).statuses[0].limit_remaining == 99


def test_a_bad_configuration_is_refused_at_start_naming_file_line_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n")
    p = subprocess.run(
        [os.environ["RATOMIC_BIN"], "serve", "--config", str(bad), "--grpc-listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert f"{bad}:5: descriptors[0].rate_limit.unit: invalid rate limit unit \"fortnight\"" in p.stderr, p.stderr


def test_a_rate_the_algorithm_cannot_hold_is_refused_at_start_naming_the_rule(tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 4000000000\n")
    p = subprocess.run(
        [os.environ["RATOMIC_BIN"], "serve", "--config", str(big), "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert f"{big}:5: descriptors[0].rate_limit: 4000000000 per second: invalid limit" in p.stderr, p.stderr
