"""Starts the real `ratomic serve` binary and talks to it with grpcio.

The binary is $RATOMIC_BIN (run-tests.sh builds it). Each server listens on
127.0.0.1 port 0 and the tests read the port from its log, so no port is
guessed. Waits are on the server's log lines (bounded by a generous
deadline), never on the clock. RATOMIC_TEST_LOG sets the servers' log filter
(`info` by default; `info,h2=debug` shows every HTTP/2 frame).
"""

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import grpc
import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import wrappers_pb2

OK = rls_pb2.RateLimitResponse.OK
OVER_LIMIT = rls_pb2.RateLimitResponse.OVER_LIMIT
UNIT = rls_pb2.RateLimitResponse.RateLimit
DEADLINE = 60.0  # seconds a wait for a log line may take before the test fails


def descriptor(*entries, hits=None):
    d = ratelimit_pb2.RateLimitDescriptor(
        entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries]
    )
    if hits is not None:
        d.hits_addend.CopyFrom(wrappers_pb2.UInt64Value(value=hits))
    return d


def request(domain, *descriptors, hits_addend=0):
    return rls_pb2.RateLimitRequest(domain=domain, descriptors=list(descriptors), hits_addend=hits_addend)


class Server:
    def __init__(self, tmp_path, yaml_text, *flags, name="rl.yaml"):
        self.config = tmp_path / name
        self.config.write_text(yaml_text)
        self.log_path = tmp_path / f"server-{time.monotonic_ns()}.log"
        self.flags = flags
        self.proc = None
        self.channel = None

    def start(self):
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [os.environ["RATOMIC_BIN"], "serve", "--config", str(self.config), "--grpc-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", *self.flags],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RATOMIC_LOG": os.environ.get("RATOMIC_TEST_LOG", "info")},
        )
        m = self.wait_for(r"listening grpc=(\S+) http=(\S+)")
        self.addr = m.group(1)
        self.http = "http://" + m.group(2)
        self.channel = grpc.insecure_channel(self.addr)
        self.stub = rls_pb2_grpc.RateLimitServiceStub(self.channel)
        return self

    def text(self):
        return self.log_path.read_text(errors="replace")

    def count(self, pattern):
        return len(re.findall(pattern, self.text()))

    def wait_for(self, pattern, count=1):
        """Waits until `pattern` appears `count` times in the log; returns the last match."""
        end = time.monotonic() + DEADLINE
        while True:
            found = list(re.finditer(pattern, self.text()))
            if len(found) >= count:
                return found[count - 1]
            if self.proc.poll() is not None and len(list(re.finditer(pattern, self.text()))) < count:
                raise AssertionError(f"server exited ({self.proc.returncode}) before {pattern!r}:\n{self.text()}")
            if time.monotonic() > end:
                raise AssertionError(f"no {pattern!r} (x{count}) in the server's log:\n{self.text()}")
            time.sleep(0.01)

    def call(self, req, timeout=DEADLINE):
        return self.stub.ShouldRateLimit(req, timeout=timeout)

    def stop(self):
        if self.channel is not None:
            self.channel.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.log.close()


def hot_grants(servers, calls=400, inflight=64):
    """Runs one hot_worker.py process per server in `servers` (a server may
    appear twice), each making `calls` calls with `inflight` in flight on
    the `hot` domain's one descriptor; the grants of all of them."""
    here = os.path.dirname(__file__)
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.join(here, "hot_worker.py"), s.addr, str(calls), str(inflight)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=here,
        )
        for s in servers
    ]
    ok = 0
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        o, v, err = map(int, out.split())
        assert err == 0 and o + v == calls
        ok += o
    return ok


def lease_decisions(s):
    """The server's count of decisions answered from a lease (/metrics)."""
    with urllib.request.urlopen(s.http + "/metrics", timeout=DEADLINE) as m:
        text = m.read().decode()
    return int(re.search(r"^ratomic_serve_lease_decisions_total (\d+)$", text, re.M).group(1))


@pytest.fixture
def serve(tmp_path):
    servers = []

    def start(yaml_text, *flags, name="rl.yaml"):
        s = Server(tmp_path, yaml_text, *flags, name=name).start()
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()
