"""One limiter shared by many threads stays exact."""

import threading

import ratomic


def race(limiter, threads=100, key="hot"):
    barrier = threading.Barrier(threads)
    results = []
    lock = threading.Lock()

    def worker():
        barrier.wait()
        d = limiter.allow(key)
        with lock:
            results.append(d)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return results


def test_concurrent_allow_grants_exactly_capacity():
    tb = ratomic.TokenBucket(50, 1e-6, clock=ratomic.ManualClock())
    results = race(tb)
    assert len(results) == 100
    assert sum(bool(d) for d in results) == 50


def test_concurrent_windows_and_limiter_are_exact():
    clock = ratomic.ManualClock()
    for limiter in (
        ratomic.FixedWindow(50, 3600.0, clock=clock),
        ratomic.SlidingWindow(50, 3600.0, clock=clock),
        ratomic.Limiter({"a": ratomic.Rule.token_bucket(50, 1e-6), "b": "70/h"}, clock=clock),
    ):
        assert sum(bool(d) for d in race(limiter)) == 50


def test_many_threads_many_keys():
    tb = ratomic.TokenBucket(10, 1e-6, clock=ratomic.ManualClock())
    counts = {}
    lock = threading.Lock()

    def worker(n):
        for i in range(200):
            key = f"user:{i % 20}"
            if tb.allow(key):
                with lock:
                    counts[key] = counts.get(key, 0) + 1

    ts = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert counts == {f"user:{i}": 10 for i in range(20)}
