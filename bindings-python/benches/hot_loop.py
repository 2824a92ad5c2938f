"""A TokenBucket's calls on 100k present keys and on one hot key, nothing
else: the loop to compare two builds of the extension (unpack each wheel
into its own directory and put it first on PYTHONPATH in turn, a few runs
each; the machine is noisy and code layout alone moves this by 1-3 ns).

    PYTHONPATH=/tmp/build-a python bindings-python/benches/hot_loop.py
    PYTHONPATH=/tmp/build-b python bindings-python/benches/hot_loop.py

Prints the best CPU ns per call over 15 passes of each (bench.py's timer).
"""

import ratomic
from bench import per_call_ns  # best CPU ns per call over passes, as the bench


def main():
    keys = [f"user:{i}" for i in range(100_000)]
    limiter = ratomic.TokenBucket(10_000_000, 10.0)  # never runs dry, keys stay live
    allow = limiter.allow
    for k in keys:
        assert allow(k).allowed
    spread = per_call_ns(allow, keys, 15)
    hot = per_call_ns(allow, ["user:42"] * 100_000, 15)
    print(f"100k keys {spread:.1f} ns, hot key {hot:.1f} ns ({ratomic.__file__})")


if __name__ == "__main__":
    main()
