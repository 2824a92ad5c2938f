"""`ratomic serve --redis`: two servers share one redis-server exactly, and a
lost backend is answered by the configured policy."""

import json
import os
import re
import signal
import time
import urllib.error
import urllib.request
import uuid

import grpc
import pytest

from conftest import DEADLINE, OK, OVER_LIMIT, descriptor, hot_grants, lease_decisions, request

PORT = os.environ.get("RATOMIC_TEST_REDIS_PORT")
VICTIM_PORT = os.environ.get("RATOMIC_TEST_REDIS_VICTIM_PORT")
VICTIM_PID = os.environ.get("RATOMIC_TEST_REDIS_VICTIM_PID")
pytestmark = pytest.mark.skipif(PORT is None, reason="run through serve/run-tests.sh, which starts the redis-servers")


def redis_flags(port):
    return ("--redis", f"redis://127.0.0.1:{port}/", "--redis-prefix", f"t-{uuid.uuid4().hex}:")


def test_two_servers_sharing_one_redis_never_exceed_the_limit_together(serve):
    limit = 250  # a year's window on Redis holds at most 285 (limit x window < 2^53 us)
    yaml = f"domain: hot\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: year, requests_per_unit: {limit}}}\n"
    # A generous timeout: this test is about the bound, not about a busy
    # machine's round trips (a timeout would be a backend error here).
    flags = (*redis_flags(PORT), "--redis-timeout-ms", "30000")
    a = serve(yaml, *flags, name="a.yaml")
    b = serve(yaml, *flags, name="b.yaml")
    ok = hot_grants((a, b, a, b))
    assert ok == limit, f"{ok} grants through two servers for a limit of {limit}"


def test_a_lost_backend_is_answered_by_the_configured_policy(serve):
    yaml = "domain: app\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 100}\n"
    # Long enough that a busy machine's round trip (its stalls can pass 1 s)
    # is not taken for a lost backend; each call to the stopped server costs it.
    flags = (*redis_flags(VICTIM_PORT), "--redis-timeout-ms", "3000")
    servers = {
        policy: serve(yaml, *flags, "--redis-on-failure", policy, name=f"{policy}.yaml")
        for policy in ("error", "fail-open", "fail-closed", "fallback")
    }
    req = request("app", descriptor(("user", "u")))
    for s in servers.values():
        assert s.call(req).overall_code == OK
    os.kill(int(VICTIM_PID), signal.SIGSTOP)
    try:
        with pytest.raises(grpc.RpcError) as e:
            servers["error"].call(req)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert VICTIM_PORT not in e.value.details() and "127.0.0.1" not in e.value.details()
        assert servers["fail-open"].call(req).overall_code == OK
        assert servers["fail-closed"].call(req).overall_code == OVER_LIMIT
        r = servers["fallback"].call(req)
        assert r.overall_code == OK and r.statuses[0].current_limit.requests_per_unit == 100
        # The operator sees it: in the log and in /metrics.
        servers["error"].wait_for(r"backend error; no decision")
        with urllib.request.urlopen(servers["error"].http + "/metrics", timeout=DEADLINE) as m:
            metrics = m.read().decode()
        assert any(
            line.startswith("ratomic_serve_backend_errors_total ") and int(line.split()[1]) >= 1
            for line in metrics.splitlines()
        ), metrics
        # The HTTP API obeys the same policy, without internal detail.
        body = json.dumps({"identifier": "x", "limit": 5, "duration": "1d"}).encode()
        try:
            urllib.request.urlopen(urllib.request.Request(servers["error"].http + "/v1/ratelimit", data=body), timeout=DEADLINE)
            raise AssertionError("expected 503")
        except urllib.error.HTTPError as err:
            assert err.code == 503
            assert VICTIM_PORT not in err.read().decode()
    finally:
        os.kill(int(VICTIM_PID), signal.SIGCONT)
    # Back: Redis decides again (after the breaker's cooldown).
    end = time.monotonic() + DEADLINE
    while True:
        try:
            r = servers["error"].call(req)
            break
        except grpc.RpcError:
            assert time.monotonic() < end, "Redis never came back"
            time.sleep(0.05)
    assert r.overall_code == OK



def test_two_servers_leasing_from_one_redis_never_exceed_the_limit_together(serve):
    limit, lease = 250, 8
    yaml = f"domain: hot\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: year, requests_per_unit: {limit}}}\n"
    flags = (*redis_flags(PORT), "--redis-timeout-ms", "30000", "--algorithm", "token-bucket", "--redis-lease", str(lease))
    a = serve(yaml, *flags, name="a.yaml")
    b = serve(yaml, *flags, name="b.yaml")
    ok = hot_grants((a, b, a, b))
    # Never more than the limit; at most one lease per server withheld at the end.
    assert limit - 2 * lease <= ok <= limit, f"{ok} grants through two leasing servers for a limit of {limit}"
    assert lease_decisions(a) + lease_decisions(b) > 0, "the servers answered nothing from a lease"


def test_a_server_gives_its_leases_back_at_shutdown(serve):
    limit = 100
    yaml = f"domain: app\ndescriptors:\n  - key: user\n    rate_limit: {{unit: year, requests_per_unit: {limit}}}\n"
    flags = (*redis_flags(PORT), "--redis-timeout-ms", "30000", "--algorithm", "token-bucket")
    a = serve(yaml, *flags, "--redis-lease", "8", name="a.yaml")
    req = request("app", descriptor(("user", "u")))
    granted = 0
    while lease_decisions(a) == 0:  # a hot key takes a lease on its second call within a second
        assert granted < 50, "no lease taken"
        assert a.call(req).overall_code == OK
        granted += 1
    a.stop()
    assert re.search(r"leases given back limits=1", a.text()), a.text()
    # Another server (no lease) sees every token a did not grant: nothing is withheld.
    b = serve(yaml, *flags, name="b.yaml")
    r = b.call(req)
    assert r.overall_code == OK and r.statuses[0].limit_remaining == limit - granted - 1
