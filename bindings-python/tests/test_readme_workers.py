"""The READMEs' multi-worker examples under the servers they name.

The project README's WSGI app runs under ``gunicorn -w 4``, the package
page's FastAPI app under ``uvicorn --workers 4``: each block is copied out
of the Markdown into an ``app.py`` as written, served by four worker
processes, and one client sends 30 requests to its 5-per-minute limit.
Exactly 5 must pass, and all four workers must have the one shared file
mapped (a path made per worker, ``mkdtemp()`` at import or the process id
in the name, gives four files and lets 20 through).

``XDG_RUNTIME_DIR`` is a directory of the test's own (mode 0700), as a
login session or systemd gives a service; the servers bind a free
127.0.0.1 port, which they print.
"""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request

import pytest

HERE = pathlib.Path(__file__).resolve().parent.parent
ROOT_README = HERE.parent / "README.md"
PACKAGE_README = HERE / "README.md"

# Long enough for four workers to import the app on a loaded machine; a
# deadline for a condition polled, never a time anything is expected to take.
START_DEADLINE = 120.0


def example(readme: pathlib.Path, first_line: str) -> str:
    blocks = [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), flags=re.S)]
    found = [b for b in blocks if b.startswith(first_line)]
    assert len(found) == 1, f"{readme} has {len(found)} python blocks starting {first_line!r}"
    return found[0]


def mapped_files(session: int) -> dict[int, set[str]]:
    """The ``.shm`` files each process of the session has mapped, by pid."""
    found = {}
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            # The session id is the sixth field of stat, after "pid (comm) state ppid pgrp".
            if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[3]) != session:
                continue
            maps = (proc / "maps").read_text()
        except (OSError, IndexError, ValueError):  # gone meanwhile
            continue
        files = {line.split(maxsplit=5)[5] for line in maps.splitlines() if line.endswith(".shm")}
        if files:
            found[int(proc.name)] = files
    return found


def status_of_get(port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def serve_and_count(app_code: str, command: list[str]) -> tuple[list[int], set[str]]:
    """Serves ``app_code`` as ``app.py`` with ``command``, once four workers
    have their limiter's file mapped; returns the statuses of 30 requests
    from one client and the files the workers mapped."""
    with tempfile.TemporaryDirectory(prefix="ratomic-readme-workers-") as tmp:
        work = pathlib.Path(tmp)
        runtime = work / "runtime"
        runtime.mkdir(mode=0o700)
        (work / "app.py").write_text(app_code, encoding="utf-8")
        log = work / "server.log"
        env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
        with open(log, "wb") as out:
            server = subprocess.Popen(
                [sys.executable, "-m", *command], cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            deadline = time.monotonic() + START_DEADLINE
            while True:
                assert server.poll() is None, f"the server exited:\n{log.read_text()}"
                text = log.read_text()
                m = re.search(r"(?:Listening at:|running on) http://127\.0\.0\.1:(\d+)", text)
                workers = mapped_files(server.pid)
                if m and len(workers) >= 4:
                    break
                assert time.monotonic() < deadline, f"four workers did not start ({workers}):\n{text}"
                time.sleep(0.05)
            statuses = [status_of_get(int(m.group(1))) for _ in range(30)]
            return statuses, set().union(*workers.values())
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


def check(statuses: list[int], files: set[str]) -> None:
    assert (statuses.count(200), statuses.count(429)) == (5, 25), f"{statuses} from workers on {sorted(files)}"
    assert len(files) == 1, f"the workers mapped {sorted(files)}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a shared file is Linux only")
def test_the_gunicorn_example_shares_one_limit_across_four_workers():
    code = example(ROOT_README, "# app.py, served by `gunicorn -w 4 app:app`")
    statuses, files = serve_and_count(code, ["gunicorn", "-w", "4", "-b", "127.0.0.1:0", "app:app"])
    check(statuses, files)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a shared file is Linux only")
def test_the_uvicorn_example_shares_one_limit_across_four_workers():
    code = example(PACKAGE_README, "# app.py, served by `uvicorn app:app --workers 4`")
    statuses, files = serve_and_count(code, ["uvicorn", "app:app", "--workers", "4", "--host", "127.0.0.1", "--port", "0"])
    check(statuses, files)
