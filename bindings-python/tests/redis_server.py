"""A real redis-server for the tests: a free 127.0.0.1 port, no
persistence, stopped by the test that started it (run-tests.sh installs
redis-server with apt)."""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import redis


def free_port() -> int:
    """A free 127.0.0.1 port below the kernel's ephemeral range, as
    scripts/free-port.sh picks them: a port in that range can be taken as
    the local end of any outgoing connection (a test client's) between this
    check and redis-server's bind, which then fails."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(v) for v in f.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    for _ in range(200):
        port = random.randrange(10000, low) if low - 10000 >= 1000 else random.randrange(high + 1, 65536)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free loopback port below the ephemeral range")


class Server:
    """One redis-server on a free loopback port, no persistence."""

    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        assert exe, "redis-server is not installed (bindings-python/run-tests.sh installs it with apt)"
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="ratomic-redis-")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            + ["--dir", self.dir, "--loglevel", "warning"],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        # Up to 30 s: a loaded machine can take seconds to start a process.
        deadline = time.monotonic() + 30
        while True:
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.01)
        client.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
