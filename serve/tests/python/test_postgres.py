"""`ratomic serve --postgres`: two servers share one PostgreSQL exactly, with
and without leases."""

import os
import re
import uuid

import pytest

from conftest import OK, descriptor, hot_grants, lease_decisions, request

URL = os.environ.get("RATOMIC_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(URL is None, reason="run through serve/run-tests.sh, which starts PostgreSQL")


def pg_flags():
    return ("--postgres", URL, "--postgres-prefix", f"t-{uuid.uuid4().hex}:", "--postgres-timeout-ms", "30000")

def test_two_servers_sharing_one_postgres_never_exceed_the_limit_together(serve):
    limit = 250
    yaml = f"domain: hot\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: year, requests_per_unit: {limit}}}\n"
    # A generous timeout: this test is about the bound, not about a busy
    # machine's round trips (a timeout would be a backend error here).
    flags = pg_flags()
    a = serve(yaml, *flags, name="a.yaml")
    b = serve(yaml, *flags, name="b.yaml")
    ok = hot_grants((a, b, a, b))
    assert ok == limit, f"{ok} grants through two servers for a limit of {limit}"



def test_two_servers_leasing_from_one_postgres_never_exceed_the_limit_together(serve):
    limit, lease = 250, 8
    yaml = f"domain: hot\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: year, requests_per_unit: {limit}}}\n"
    flags = (*pg_flags(), "--algorithm", "token-bucket", "--postgres-lease", str(lease))
    a = serve(yaml, *flags, name="a.yaml")
    b = serve(yaml, *flags, name="b.yaml")
    ok = hot_grants((a, b, a, b))
    # Never more than the limit; at most one lease per server withheld at the end.
    assert limit - 2 * lease <= ok <= limit, f"{ok} grants through two leasing servers for a limit of {limit}"
    assert lease_decisions(a) + lease_decisions(b) > 0, "the servers answered nothing from a lease"


def test_a_server_gives_its_postgres_leases_back_at_shutdown(serve):
    limit = 100
    yaml = f"domain: app\ndescriptors:\n  - key: user\n    rate_limit: {{unit: year, requests_per_unit: {limit}}}\n"
    flags = (*pg_flags(), "--algorithm", "token-bucket")
    a = serve(yaml, *flags, "--postgres-lease", "8", name="a.yaml")
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
