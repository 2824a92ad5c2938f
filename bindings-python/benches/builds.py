"""Two builds of ratomic's extension, side by side in one process.

    python bindings-python/benches/builds.py A.whl B.whl     # or two ratomic/_ratomic*.so

For deciding a build setting (say, the abi3 floor) by measurement: each
build's `_ratomic` module is loaded under its own name, and each call is
timed for A, for B and for the floor (an empty Python function) in turn,
round after round, so both builds run under the same load. Prints CPU ns
per call (best of ROUNDS, default 15) and the ratio B / A per call.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import platform
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from types import ModuleType


def load(path: str, name: str) -> ModuleType:
    """The extension module in `path` (a wheel or the .so itself) as `name`."""
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as whl:
            so = next(n for n in whl.namelist() if n.startswith("ratomic/_ratomic") and n.endswith(".so"))
            out = tempfile.mkdtemp(prefix=f"ratomic-{name}-")
            path = whl.extract(so, out)
    # The init function is named after the last component: `_ratomic`.
    spec = importlib.util.spec_from_file_location(f"{name}._ratomic", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases(m: ModuleType) -> dict[str, tuple[Callable[..., object], list[tuple[object, ...]]]]:
    """Each case: a call and the argument tuples of one pass."""
    hot = [("user:42",)] * 100_000
    many = [(f"user:{i}",) for i in range(100_000)]
    tb = m.TokenBucket(10**7, 10.0)
    fw = m.FixedWindow(10**7, 86400.0)
    manual = m.TokenBucket(10**7, 10.0, clock=m.ManualClock())
    denied = m.TokenBucket(1, 1 / 3600)
    denied.allow("user:42")
    many_tb = m.TokenBucket(10**7, 10.0)
    for (k,) in many[:1000]:
        many_tb.allow(k)
    return {
        "TokenBucket.allow(key), hot key": (tb.allow, hot),
        "TokenBucket.allow(key), 100k keys": (many_tb.allow, many),
        "TokenBucket.allow(key), denied": (denied.allow, hot),
        "TokenBucket.allow(key), ManualClock": (manual.allow, hot),
        "TokenBucket.allow(key, 2)": (tb.allow, [("user:42", 2)] * 100_000),
        "TokenBucket.peek(key)": (tb.peek, hot),
        "FixedWindow.allow(key), hot key": (fw.allow, hot),
    }


def kw_cases(m: ModuleType) -> dict[str, Callable[[object], object]]:
    tb = m.TokenBucket(10**7, 10.0)
    return {"TokenBucket.allow(key, cost=2)": lambda k: tb.allow(k, cost=2)}


def empty(*args: object, **kwargs: object) -> None:
    pass


def once(call: Callable[..., object], args: list[tuple[object, ...]]) -> float:
    gc.disable()
    t0 = time.process_time_ns()
    for a in args:
        call(*a)
    dt = time.process_time_ns() - t0
    gc.enable()
    return dt / len(args)


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rounds = int(os.environ.get("ROUNDS", "15"))
    a, b = load(sys.argv[1], "build_a"), load(sys.argv[2], "build_b")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {platform.machine()}, {os.cpu_count()} cores, "
          f"{platform.python_implementation()} {platform.python_version()}; load average {os.getloadavg()[0]:.1f}")
    print(f"# A = {sys.argv[1]}\n# B = {sys.argv[2]}")
    print(f"# best of {rounds} interleaved rounds (A, B, floor); CPU ns per call\n")
    ca, cb = cases(a), cases(b)
    # Keyword calls, wrapped alike in a lambda, so the floor is that lambda's.
    ka, kb = kw_cases(a), kw_cases(b)
    print("| call | A | B | floor | B / A | (B − floor) / (A − floor) |")
    print("|---|---|---|---|---|---|")
    rows = [(name, ca[name], cb[name], empty) for name in ca]
    hot = [("user:42",)] * 100_000
    rows += [(name, (ka[name], hot), (kb[name], hot), lambda k: empty(k, cost=2)) for name in ka]
    for name, (fa, args), (fb, _), floor_call in rows:
        best_a = best_b = best_f = float("inf")
        for _ in range(rounds):
            best_a = min(best_a, once(fa, args))
            best_b = min(best_b, once(fb, args))
            best_f = min(best_f, once(floor_call, args))
        print(f"| {name} | {best_a:.1f} | {best_b:.1f} | {best_f:.1f} | {best_b / best_a:.3f} "
              f"| {(best_b - best_f) / (best_a - best_f):.3f} |")


if __name__ == "__main__":
    main()
