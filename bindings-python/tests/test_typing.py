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


def test_redis_limiters_are_typed_by_their_client(tmp_path):
    example = tmp_path / "example.py"
    example.write_text(
        "import redis\n"
        "import redis.asyncio\n"
        "import ratomic\n"
        "from ratomic.redis import RedisLimiter, RedisTokenBucket\n"
        "s = RedisTokenBucket('2/s', client=redis.Redis(), prefix='p:')\n"
        "d: ratomic.Decision = s.allow('k')\n"
        "m: ratomic.MultiDecision = RedisLimiter({'a': '1/s'}, client=redis.Redis()).allow('k')\n"
        "async def f() -> None:\n"
        "    a = RedisTokenBucket('2/s', client=redis.asyncio.Redis(), timeout=0.1)\n"
        "    e: ratomic.Decision = await a.allow('k')\n"
        "    x: ratomic.Decision = a.allow('k')  # E: not awaited\n"
    )
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", str(example)], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout
    assert r.stdout.count("error:") == 1 and "example.py:11" in r.stdout, r.stdout


def test_limits_and_members_of_mixed_kinds_type_check(tmp_path):
    # A dict display of mixed values ("3/s" and a Rule) against a union of
    # Mapping and pairs was inferred as dict[str, object]: the constructors
    # take each in its own overload.
    example = tmp_path / "example.py"
    example.write_text(
        "import redis\n"
        "import ratomic\n"
        "from ratomic.redis import RedisLimiter\n"
        "rules = {'burst': '3/s', 'daily': ratomic.Rule.fixed_window('100/d')}\n"
        "l = ratomic.Limiter({'burst': '3/s', 'daily': ratomic.Rule.fixed_window('100/d')})\n"
        "p = ratomic.Limiter([('burst', '3/s'), ('daily', ratomic.Rule.fixed_window('100/d'))])\n"
        "s = ratomic.Stack({'ip': ratomic.TokenBucket(5, 1.0), 'all': ratomic.DirectTokenBucket(100, 10.0)})\n"
        "t = ratomic.Stack([('ip', ratomic.TokenBucket(5, 1.0)), ('user', l)])\n"
        "r = RedisLimiter({'burst': '3/s', 'daily': ratomic.Rule.fixed_window('100/d')}, client=redis.Redis())\n"
        "bad = ratomic.Limiter({'burst': 3})  # E: not a rule\n"
    )
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", str(example)], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout
    assert r.stdout.count("error:") == 1 and "example.py:10" in r.stdout, r.stdout
