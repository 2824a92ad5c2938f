"""One client process of the hot-descriptor conformance test: `calls` calls
on one descriptor with `inflight` of them in flight at once; prints how
many were granted (OK) and how many refused (OVER_LIMIT)."""

import sys
import threading

import grpc

from conftest import OK, OVER_LIMIT, descriptor, request
from envoy.service.ratelimit.v3 import rls_pb2_grpc


def main(addr, calls, inflight):
    channel = grpc.insecure_channel(addr)
    stub = rls_pb2_grpc.RateLimitServiceStub(channel)
    req = request("hot", descriptor(("tenant", "hot")))
    slots = threading.Semaphore(inflight)
    lock = threading.Lock()
    counts = {"ok": 0, "over": 0, "error": 0}
    done = threading.Event()
    left = [calls]

    def finished(fut):
        try:
            code = fut.result().overall_code
            key = "ok" if code == OK else "over" if code == OVER_LIMIT else "error"
        except grpc.RpcError as e:
            print(f"call failed: {e.code()} {e.details()}", file=sys.stderr)
            key = "error"
        with lock:
            counts[key] += 1
            left[0] -= 1
            if left[0] == 0:
                done.set()
        slots.release()

    for _ in range(calls):
        slots.acquire()
        stub.ShouldRateLimit.future(req, timeout=120).add_done_callback(finished)
    done.wait()
    channel.close()
    print(counts["ok"], counts["over"], counts["error"])


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
