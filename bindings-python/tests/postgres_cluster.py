"""A PostgreSQL cluster a test owns, to crash and start again (the shared
one run-tests.sh starts serves the other test files meanwhile): initdb in a
temp dir as the cluster's unprivileged owner (initdb refuses root), on a
free 127.0.0.1 port, as postgres/server.sh and the Node tests'
postgres-server.js do. run-tests.sh exports RATOMIC_PG_BIN and
RATOMIC_PG_USER; run alone, the binaries are looked for where Debian puts
them.

Unlike postgres/server.sh's shared cluster (``synchronous_commit=off``, for
speed), this one keeps PostgreSQL's default, durable commits
(``synchronous_commit=on``): a commit is in the WAL before its reply, so a
crash (``pg_ctl stop -m immediate``: every server process ends at once, its
shared memory with it) loses nothing that was answered. ``fsync=off`` only
skips the flush to the disk, which outlives the server processes here.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile

from redis_server import free_port


def _bin() -> str:
    found = os.environ.get("RATOMIC_PG_BIN")
    if found:
        return found
    dirs = sorted(
        (d for d in glob.glob("/usr/lib/postgresql/*/bin") if os.path.exists(os.path.join(d, "initdb"))),
        key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit() else 0,
    )
    assert dirs, "initdb not found: run these tests with bindings-python/run-tests.sh (it installs PostgreSQL)"
    return dirs[-1]


def _user() -> str:
    if "RATOMIC_PG_USER" in os.environ:
        return os.environ["RATOMIC_PG_USER"]
    return "postgres" if os.getuid() == 0 else ""


class Cluster:
    """One cluster of the caller's own: :meth:`crash` (immediate stop),
    :meth:`start` again on the same data directory and port, :meth:`remove`."""

    def __init__(self) -> None:
        self.user = _user()
        self.dir = tempfile.mkdtemp(prefix="ratomic-pg-")
        if self.user:
            os.chmod(self.dir, 0o755)
            shutil.chown(self.dir, self.user)
        self.data = os.path.join(self.dir, "data")
        self._as_owner("initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8")
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.start()

    def _as_owner(self, program: str, *args: str) -> None:
        cmd = [os.path.join(_bin(), program), *args]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
        assert done.returncode == 0, f"{program} failed ({done.returncode}):\n{done.stdout}\n{self.log()}"

    def log(self) -> str:
        try:
            with open(os.path.join(self.dir, "log")) as f:
                return f.read()
        except OSError:
            return ""

    def start(self) -> None:
        """Starts it (again) on its port, PostgreSQL's default durable
        commits; returns once it accepts connections."""
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir} -c fsync=off"
        self._as_owner("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w", "-t", "60", "-o", opts, "start")

    def crash(self) -> None:
        """Every server process stops at once (``pg_ctl stop -m
        immediate``), as in a crash: the next start runs crash recovery."""
        self._as_owner("pg_ctl", "-D", self.data, "-m", "immediate", "stop")

    def remove(self) -> None:
        try:
            self.crash()
        except AssertionError:
            pass  # not running
        shutil.rmtree(self.dir, ignore_errors=True)
