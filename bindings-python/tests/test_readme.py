"""The README's Python examples, run as tests.

The project's README (the repository root's README.md) holds the Python
guide; every ```python block in it runs here.
"""

import pathlib
import re
import textwrap

import pytest

HERE = pathlib.Path(__file__).resolve().parent.parent
ROOT_README = HERE.parent / "README.md"


def python_blocks():
    text = ROOT_README.read_text(encoding="utf-8")
    # Blocks inside a list item are indented: dedent them.
    return ROOT_README, [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", text, flags=re.S)]


PATH, BLOCKS = python_blocks()


def test_readme_has_examples():
    assert len(BLOCKS) >= 3, PATH


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, capsys, monkeypatch):
    code = BLOCKS[index]
    if "REDIS_URL" in code:
        # The Redis example talks to a real server of its own.
        from redis_server import Server

        server = Server()
        monkeypatch.setenv("REDIS_URL", f"redis://127.0.0.1:{server.port}/0")
        try:
            run(code, index, capsys)
        finally:
            server.stop()
    else:
        run(code, index, capsys)


def run(code, index, capsys):
    exec(compile(code, f"{PATH.name}[python block {index}]", "exec"), {"__name__": "__readme__"})
    # Every `print(x)  # shown` comment must match what was printed.
    expected = [m.group(1) for m in re.finditer(r"^print\(.*\)\s+# (.*)$", code, flags=re.M)]
    printed = capsys.readouterr().out.splitlines()
    assert printed == expected
