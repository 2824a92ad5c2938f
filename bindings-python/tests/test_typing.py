"""The hand-written stub matches the compiled module (mypy.stubtest), and
the README's examples type-check against it."""

import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent.parent


def test_stubtest():
    r = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "ratomic", "--allowlist", str(HERE / "stubtest-allowlist.txt")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_tests_type_check_against_the_stub(tmp_path):
    example = tmp_path / "example.py"
    example.write_text(
        "import ratomic\n"
        "tb = ratomic.TokenBucket(10, 1.0, clock=ratomic.ManualClock())\n"
        "d: ratomic.Decision = tb.allow('k')\n"
        "r: float = d.retry_after\n"
        "m = ratomic.Limiter({'a': '1/s'}).allow(b'k', limits=['a'])\n"
        "names: tuple[str, ...] = m.denied_by\n"
        "tb.allow(1)  # E: a key is str or bytes\n"
    )
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", str(example)], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout
    assert r.stdout.count("error:") == 1 and "example.py:7" in r.stdout, r.stdout
