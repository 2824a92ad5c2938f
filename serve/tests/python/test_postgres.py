"""`ratomic serve --postgres`: two servers share one PostgreSQL exactly."""

import os
import subprocess
import sys
import uuid

import pytest

URL = os.environ.get("RATOMIC_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(URL is None, reason="run through serve/run-tests.sh, which starts PostgreSQL")


def test_two_servers_sharing_one_postgres_never_exceed_the_limit_together(serve):
    limit = 250
    yaml = f"domain: hot\ndescriptors:\n  - key: tenant\n    rate_limit: {{unit: year, requests_per_unit: {limit}}}\n"
    # A generous timeout: this test is about the bound, not about a busy
    # machine's round trips (a timeout would be a backend error here).
    flags = ("--postgres", URL, "--postgres-prefix", f"t-{uuid.uuid4().hex}:", "--postgres-timeout-ms", "30000")
    a = serve(yaml, *flags, name="a.yaml")
    b = serve(yaml, *flags, name="b.yaml")
    here = os.path.dirname(__file__)
    calls, inflight = 400, 64
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.join(here, "hot_worker.py"), s.addr, str(calls), str(inflight)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=here,
        )
        for s in (a, b, a, b)
    ]
    ok = 0
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        o, v, err = map(int, out.split())
        assert err == 0 and o + v == calls
        ok += o
    assert ok == limit, f"{ok} grants through two servers for a limit of {limit}"
