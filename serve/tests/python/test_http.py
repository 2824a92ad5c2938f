"""The HTTP side of `ratomic serve`: the JSON API, /metrics, /healthz, /readyz
(driven by Python's own urllib)."""

import json
import signal
import urllib.error
import urllib.request

from conftest import descriptor, request

CONFIG = """\
domain: app
descriptors:
  - key: user
    rate_limit: {unit: year, requests_per_unit: 2}
  - key: canary
    shadow_mode: true
    rate_limit: {unit: year, requests_per_unit: 1}
"""


def post(s, body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(s.http + "/v1/ratelimit", data=data, method="POST", headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read().decode()


def get(s, path):
    try:
        with urllib.request.urlopen(s.http + path, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_json_api_answers_the_decision_with_the_ietf_headers(serve):
    s = serve(CONFIG)
    body = {"identifier": "user-123", "limit": 2, "duration": "1d", "cost": 1}
    status, headers, text = post(s, body)
    assert status == 200
    d = json.loads(text)
    assert d["allowed"] is True and d["remaining"] == 1 and d["limit"] == 2 and d["retry_after_ms"] == 0
    assert headers["ratelimit-policy"] == '"limit";q=2;w=86400'
    assert headers["ratelimit"].startswith('"limit";r=1;t=')
    assert post(s, body)[0] == 200
    status, headers, text = post(s, body)
    d = json.loads(text)
    assert status == 200 and d["allowed"] is False and d["remaining"] == 0 and d["retry_after_ms"] > 0
    assert int(headers["retry-after"]) >= 1
    # cost defaults to 1; another identifier has its own budget.
    status, _, text = post(s, {"identifier": "user-456", "limit": 2, "duration": "1d"})
    assert json.loads(text)["remaining"] == 1


def test_bad_requests_get_a_clear_4xx_and_change_nothing(serve):
    s = serve(CONFIG)
    cases = [
        (None, b"not json"),
        ({"identifier": "u", "limit": 0, "duration": "1s"}, None),
        ({"identifier": "u", "limit": 5, "duration": "fortnight"}, None),
        ({"identifier": "", "limit": 5, "duration": "1s"}, None),
        ({"identifier": "u", "limit": 5, "duration": "1s", "cost": 6}, None),
        ({"identifier": "u", "limit": 5, "duration": "1s", "extra": 1}, None),
        ({"identifier": "u" * 2000, "limit": 5, "duration": "1s"}, None),
        ({"limit": 5, "duration": "1s"}, None),
        # More than a one-second window can count.
        ({"identifier": "u", "limit": 2_000_000_000, "duration": "1s"}, None),
    ]
    for body, raw in cases:
        status, headers, text = post(s, body, raw)
        assert status == 400, (body, raw, status, text)
        assert headers["content-type"] == "application/problem+json"
        detail = json.loads(text)["detail"]
        assert detail and "127.0.0.1" not in detail and "panicked" not in detail
    status, _, _ = post(s, None, b"x" * 100_000)
    assert status == 413
    assert get(s, "/nowhere")[0] == 404
    # Nothing was counted for "u".
    _, _, text = post(s, {"identifier": "u", "limit": 5, "duration": "1s"})
    assert json.loads(text)["remaining"] == 4


def test_metrics_count_decisions_per_domain_and_rule_and_time_them(serve):
    s = serve(CONFIG)
    for _ in range(3):
        s.call(request("app", descriptor(("user", "a"))))
    for _ in range(2):
        s.call(request("app", descriptor(("canary", "c"))))
    post(s, {"identifier": "x", "limit": 1, "duration": "1d"})
    post(s, {"identifier": "x", "limit": 1, "duration": "1d"})
    status, text = get(s, "/metrics")
    assert status == 200
    lines = set(text.splitlines())
    assert 'ratomic_serve_decisions_total{domain="app",descriptor="app.user",result="allowed"} 2' in lines
    assert 'ratomic_serve_decisions_total{domain="app",descriptor="app.user",result="denied"} 1' in lines
    assert 'ratomic_serve_decisions_total{domain="app",descriptor="app.canary",result="allowed"} 1' in lines
    assert 'ratomic_serve_decisions_total{domain="app",descriptor="app.canary",result="shadow_denied"} 1' in lines
    assert 'ratomic_serve_decisions_total{domain="http",descriptor="identifier",result="allowed"} 1' in lines
    assert 'ratomic_serve_decisions_total{domain="http",descriptor="identifier",result="denied"} 1' in lines
    assert 'ratomic_serve_request_duration_seconds_count{api="grpc"} 5' in lines
    assert 'ratomic_serve_request_duration_seconds_count{api="http"} 2' in lines
    assert 'ratomic_serve_backend_errors_total 0' in lines


def test_health_and_readiness(serve):
    s = serve(CONFIG)
    assert get(s, "/healthz") == (200, "ok\n")
    assert get(s, "/readyz") == (200, "ready\n")
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=60) == 0
    s.wait_for(r"stopped")
