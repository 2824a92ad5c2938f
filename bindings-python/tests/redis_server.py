"""A real redis-server for the tests: a free 127.0.0.1 port, no
persistence, stopped by the test that started it (run-tests.sh installs
redis-server with apt)."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time

import redis


class Server:
    """One redis-server on a free loopback port, no persistence."""

    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        assert exe, "redis-server is not installed (bindings-python/run-tests.sh installs it with apt)"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="ratomic-redis-")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            + ["--dir", self.dir, "--loglevel", "warning"],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        for _ in range(500):
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                time.sleep(0.01)
        else:
            raise RuntimeError(f"redis-server on port {self.port} did not start")
        client.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
