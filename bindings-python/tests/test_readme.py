"""The READMEs' Python examples, run as tests.

Two READMEs hold Python: the package's own (bindings-python/README.md, the
PyPI page) and the project's (the repository root's README.md, with the
full guide), and docs/choosing.md. Every ```python block in them runs here, and every
`print(x)  # shown` comment must match what was printed. A ```diff python
block (GitHub shows it as a diff) is a migration, from slowapi say: its new
side (context and `+` lines) runs as a block, and its old side (context
and `-` lines) runs too where the peer it imports is installed. The two
multi-worker apps also run under gunicorn and uvicorn with four workers
(test_readme_workers.py).

RATOMIC_READMES (paths separated by os.pathsep) names other copies: the
fresh install outside the repository (run-tests.sh) runs this file against
the README inside the installed wheel's metadata and a copy of the root one.
"""

import os
import pathlib
import re
import textwrap

import pytest

HERE = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_READMES = [HERE / "README.md", HERE.parent / "README.md"]
# Pages of docs/ with Python examples (not in a package: run from the repository only).
DOCS = [HERE.parent / "docs" / "choosing.md"]


def readmes():
    given = os.environ.get("RATOMIC_READMES")
    return [pathlib.Path(p) for p in given.split(os.pathsep)] if given else DEFAULT_READMES


def python_blocks(path):
    text = path.read_text(encoding="utf-8")
    # Blocks inside a list item are indented: dedent them.
    return [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", text, flags=re.S)]


def pages():
    return readmes() + ([] if os.environ.get("RATOMIC_READMES") else DOCS)


def diff_blocks(path):
    text = path.read_text(encoding="utf-8")
    return [textwrap.dedent(b) for b in re.findall(r"```diff python\n(.*?)```", text, flags=re.S)]


def diff_side(diff, sign):
    """The program on one side of a diff: its context lines and those
    marked ``sign`` (``+`` new, ``-`` old), without the marks."""
    lines = []
    for line in diff.splitlines():
        if line == "" or line[0] in (" ", sign):
            lines.append(line[1:])
        elif line[0] not in "+-":
            raise AssertionError(f"not a line of a unified diff: {line!r}")
    return "\n".join(lines) + "\n"


BLOCKS = [(path, i, code) for path in pages() for i, code in enumerate(python_blocks(path))] + [
    (path, f"diff {i}", diff_side(d, "+")) for path in readmes() for i, d in enumerate(diff_blocks(path))
]
DIFFS = [(path, i, d) for path in readmes() for i, d in enumerate(diff_blocks(path))]


@pytest.mark.parametrize("path", readmes(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_readme_has_examples(path):
    assert len(python_blocks(path)) >= 3, path


@pytest.mark.parametrize("path, index, code", BLOCKS, ids=[f"{p.parent.name}/{p.name}[{i}]" for p, i, _ in BLOCKS])
def test_readme_example_runs(path, index, code, capsys, monkeypatch, tmp_path):
    # Run where nothing of the repository is importable: `ratomic` is the
    # installed wheel. The shared-file examples put their file under the
    # runtime directory: a fresh one (mode 0700, as a session's is).
    monkeypatch.chdir(tmp_path)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    if "REDIS_URL" in code:
        # The Redis example talks to a real server of its own.
        from redis_server import Server

        server = Server()
        monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{server.port}/0")
        try:
            run(code, f"{path.name}[python block {index}]", capsys)
        finally:
            server.stop()
    elif "POSTGRES_URL" in code:
        # The PostgreSQL example talks to the cluster run-tests.sh started.
        url = os.environ.get("RATOMIC_POSTGRES_URL")
        assert url, "RATOMIC_POSTGRES_URL: run-tests.sh starts a PostgreSQL cluster for this example"
        monkeypatch.setenv("POSTGRES_URL", url)
        run(code, f"{path.name}[python block {index}]", capsys)
    else:
        run(code, f"{path.name}[python block {index}]", capsys)


@pytest.mark.parametrize("path, index, diff", DIFFS, ids=[f"{p.parent.name}/{p.name}[diff {i}]" for p, i, _ in DIFFS])
def test_readme_diff_old_side_runs_with_the_peer(path, index, diff, capsys, monkeypatch, tmp_path):
    # The old side is the peer's code as its users write it: it must run
    # with the peer, so the diff shows a real migration.
    monkeypatch.chdir(tmp_path)
    try:
        run(diff_side(diff, "-"), f"{path.name}[old side of diff {index}]", capsys)
    except ModuleNotFoundError as e:
        if (e.name or "").startswith("ratomic"):
            raise
        pytest.skip(f"the peer this diff migrates from ({e.name}) is not installed here")


def run(code, name, capsys):
    exec(compile(code, name, "exec"), {"__name__": "__readme__"})
    expected = [m.group(1) for m in re.finditer(r"^\s*print\(.*\)\s+# (.*)$", code, flags=re.M)]
    printed = capsys.readouterr().out.splitlines()
    assert printed == expected
