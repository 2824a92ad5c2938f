"""A TokenBucket's calls on 100k present keys and on one hot key, nothing
else: the loop to compare two builds of the extension (unpack each wheel
into its own directory and put it first on PYTHONPATH in turn, a few runs
each; the machine is noisy and code layout alone moves this by 1-3 ns).

    PYTHONPATH=/tmp/build-a python bindings-python/benches/hot_loop.py
    PYTHONPATH=/tmp/build-b python bindings-python/benches/hot_loop.py

Prints the best CPU ns per call over 15 passes of each.
"""

import gc
import time

import ratomic


def best_ns(call, keys, passes=15):
    best = float("inf")
    for _ in range(passes):
        gc.disable()
        t0 = time.process_time_ns()
        for k in keys:
            call(k)
        dt = time.process_time_ns() - t0
        gc.enable()
        best = min(best, dt / len(keys))
    return best


def main():
    keys = [f"user:{i}" for i in range(100_000)]
    limiter = ratomic.TokenBucket(10_000_000, 10.0)  # never runs dry, keys stay live
    allow = limiter.allow
    for k in keys:
        assert allow(k).allowed
    spread = best_ns(allow, keys)
    hot = best_ns(allow, ["user:42"] * 100_000)
    print(f"100k keys {spread:.1f} ns, hot key {hot:.1f} ns ({ratomic.__file__})")


if __name__ == "__main__":
    main()
