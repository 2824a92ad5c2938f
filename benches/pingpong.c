// Cache-line ping-pong between two processes: the one-way latency of handing
// one word back and forth through a shared mapping, in ns. On this project's
// VM it switches between ~40-80 ns and ~200 ns from minute to minute (the
// host placing the two vCPUs near or far), and the shared-file store's
// figures from 2+ processes move with it: run it beside them.
//
//   cc -O2 -o /tmp/pingpong benches/pingpong.c && /tmp/pingpong
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(void) {
    const long n = 2000000;
    _Atomic long *w = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (w == MAP_FAILED) return 1;
    if (!fork()) {
        for (long i = 1; i < 2 * n; i += 2) {
            while (atomic_load_explicit(w, memory_order_acquire) != i) {}
            atomic_store_explicit(w, i + 1, memory_order_release);
        }
        _exit(0);
    }
    double t = now();
    for (long i = 0; i < 2 * n; i += 2) {
        atomic_store_explicit(w, i + 1, memory_order_release);
        while (atomic_load_explicit(w, memory_order_acquire) != i + 2) {}
    }
    printf("one-way %.1f ns\n", (now() - t) / (2.0 * n));
    wait(0);
    return 0;
}
