"""Where a hot call's time goes: a few calls side by side, CPU ns per call.

    bindings-python/.venv/bin/python bindings-python/benches/call_cost.py

Best of 10 passes of 100k calls each, in CPU time of this process. Compares
`allow` on the default (monotonic) clock and on a ManualClock (no clock
read), a one-argument PyO3 method (`ManualClock.advance`), a C builtin
(`len`) and the floor (an empty Python function).
"""

import time

import ratomic

clock = ratomic.ManualClock()
monotonic = ratomic.TokenBucket(10**7, 10.0)
manual = ratomic.TokenBucket(10**7, 10.0, clock=clock)
decision = monotonic.allow("k")


def empty(key):
    pass


def measure(f, args, reps=10):
    best = float("inf")
    for _ in range(reps):
        t0 = time.process_time_ns()
        for a in args:
            f(a)
        best = min(best, (time.process_time_ns() - t0) / len(args))
    return best


hot = ["user:42"] * 100_000
for name, f, args in [
    ("floor: empty(key)", empty, hot),
    ("len(key)", len, hot),
    ("ManualClock.advance(0)", clock.advance, [0] * 100_000),
    ("bool(decision)", bool, [decision] * 100_000),
    ("allow(key), monotonic clock", monotonic.allow, hot),
    ("allow(key), ManualClock", manual.allow, hot),
    ("floor again", empty, hot),
]:
    print(f"{name:30} {measure(f, args):6.0f} ns")
