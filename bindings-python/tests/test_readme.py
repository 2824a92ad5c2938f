"""The README's Python examples, run as tests.

Reads the root README.md if it has the Python section (once the lead has
merged it), else bindings-python/README.section.md.
"""

import pathlib
import re

import pytest

HERE = pathlib.Path(__file__).resolve().parent.parent
ROOT_README = HERE.parent / "README.md"
SECTION = HERE / "README.section.md"


def python_blocks():
    for path in (ROOT_README, SECTION):
        if path.exists():
            text = path.read_text(encoding="utf-8")
            blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
            if blocks:
                return path, blocks
    raise AssertionError("no README with Python examples found")


PATH, BLOCKS = python_blocks()


def test_readme_has_examples():
    assert len(BLOCKS) >= 3, PATH


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, capsys):
    code = BLOCKS[index]
    exec(compile(code, f"{PATH.name}[python block {index}]", "exec"), {"__name__": "__readme__"})
    # Every `print(x)  # shown` comment must match what was printed.
    expected = [m.group(1) for m in re.finditer(r"^print\(.*\)\s+# (.*)$", code, flags=re.M)]
    printed = capsys.readouterr().out.splitlines()
    assert printed == expected
