/* The C ABI linked two ways, side by side in one process: libratomic.a
 * linked into this program (a direct call; the library's thread-locals
 * reached from %fs like the program's own) against libratomic.so loaded
 * with dlopen and called through the pointers dlsym returns (each of the
 * library's thread-locals then a __tls_get_addr call).
 * `cargo bench -p ratomic-ffi` measures the .so against the same call in
 * Rust; this measures the static library against the .so, so together they
 * give the static library against Rust.
 *
 * Interleaved as that bench is: chunks of CHUNK calls, the two sides in
 * turn (which goes first alternates), on the same keys in the same order,
 * each side on its own limiter with the same quota; the figure is the
 * median over the chunk pairs of each side's ns a call and of their ratio
 * (a preemption spoils one pair and the median drops it).
 *
 *   bash ffi-c/bench/run.sh [PAIRS]
 *
 * Rows: a hot key and 100k keys, each reading the library's clock
 * (ratomic_allow) and with an explicit time (ratomic_allow_at). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ratomic.h"

#define CHUNK 256
#define KEYS 100000
#define KEY_LEN 13 /* "user:00000000" */
/* The quota the Rust bench uses: every timed call is a grant, even at one
 * fixed explicit time (no refill) on the hot key. */
#define CAPACITY 1000000000000000ULL
#define PER_SEC 1e9

typedef ratomic_result (*new_fn)(uint64_t, double, const ratomic_options *, ratomic_limiter **);
typedef ratomic_result (*allow_fn)(const ratomic_limiter *, const uint8_t *, size_t, uint64_t,
                                   ratomic_decision *);
typedef ratomic_result (*allow_at_fn)(const ratomic_limiter *, const uint8_t *, size_t, uint64_t,
                                      uint64_t, ratomic_decision *);
typedef ratomic_result (*now_fn)(const ratomic_limiter *, uint64_t *);
typedef void (*free_fn)(ratomic_limiter *);

struct side {
    const char *name;
    new_fn new_;
    allow_fn allow;
    allow_at_fn allow_at;
    now_fn now;
    free_fn free_;
    ratomic_limiter *limiter;
};

static uint8_t keys[KEYS][KEY_LEN];

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void fail(const char *what) {
    fprintf(stderr, "static_vs_shared: %s\n", what);
    exit(1);
}

/* `n` calls from key `first` on, of a `nkeys`-key cycle; ns a call. The
 * decision is checked so the compiler keeps every call's result. */
static double run_chunk(const struct side *s, int explicit_time, uint64_t at, size_t first, size_t nkeys,
                        size_t n) {
    ratomic_decision d;
    double start = now_ns();
    for (size_t i = 0; i < n; i++) {
        const uint8_t *k = keys[(first + i) % nkeys];
        ratomic_result rc = explicit_time ? s->allow_at(s->limiter, k, KEY_LEN, 1, at, &d)
                                          : s->allow(s->limiter, k, KEY_LEN, 1, &d);
        if (rc != RATOMIC_OK) fail("a call failed");
    }
    return (now_ns() - start) / (double)n;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp);
    return v[n / 2];
}

static void row(struct side *sides, const char *label, size_t nkeys, int explicit_time, size_t pairs) {
    double *a = malloc(pairs * sizeof *a), *b = malloc(pairs * sizeof *b), *r = malloc(pairs * sizeof *r);
    if (!a || !b || !r) fail("out of memory");
    for (int i = 0; i < 2; i++) {
        if (sides[i].new_(CAPACITY, PER_SEC, NULL, &sides[i].limiter) != RATOMIC_OK) fail("new failed");
        /* Every key in, so neither side times inserts. */
        run_chunk(&sides[i], 0, 0, 0, nkeys, nkeys);
    }
    uint64_t at[2];
    for (int i = 0; i < 2; i++)
        if (sides[i].now(sides[i].limiter, &at[i]) != RATOMIC_OK) fail("now failed");
    size_t next = 0;
    for (size_t p = 0; p < pairs; p++) {
        double t[2];
        int first = (int)(p & 1);
        for (int j = 0; j < 2; j++) {
            int i = first ^ j;
            t[i] = run_chunk(&sides[i], explicit_time, at[i], next, nkeys, CHUNK);
        }
        a[p] = t[0];
        b[p] = t[1];
        r[p] = t[0] / t[1];
        next += CHUNK;
    }
    /* At one fixed time a bucket only empties (and on the clock it refills
     * faster than it is drawn): if the last key still grants, every timed
     * call was a grant, on both sides. */
    for (int i = 0; i < 2; i++) {
        ratomic_decision d;
        if (sides[i].allow_at(sides[i].limiter, keys[nkeys - 1], KEY_LEN, 1, at[i], &d) != RATOMIC_OK || !d.allowed)
            fail("a timed call was denied: the quota is too small for the run");
    }
    printf("| %s, %s | %.1f | %.1f | %.3f |\n", label, explicit_time ? "`ratomic_allow_at`" : "`ratomic_allow`",
           median(a, pairs), median(b, pairs), median(r, pairs));
    for (int i = 0; i < 2; i++) sides[i].free_(sides[i].limiter);
    free(a);
    free(b);
    free(r);
}

int main(int argc, char **argv) {
    if (argc < 2) fail("usage: static_vs_shared PATH/TO/libratomic.so [PAIRS]");
    size_t pairs = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : 20000;
    if (pairs == 0) fail("PAIRS must be at least 1");
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) fail(dlerror());
    struct side sides[2] = {
        {"static", ratomic_token_bucket_new, ratomic_allow, ratomic_allow_at, ratomic_now, ratomic_limiter_free,
         NULL},
        {"shared", 0, 0, 0, 0, 0, NULL},
    };
    /* POSIX: a dlsym result converts to a function pointer. */
    *(void **)&sides[1].new_ = dlsym(h, "ratomic_token_bucket_new");
    *(void **)&sides[1].allow = dlsym(h, "ratomic_allow");
    *(void **)&sides[1].allow_at = dlsym(h, "ratomic_allow_at");
    *(void **)&sides[1].now = dlsym(h, "ratomic_now");
    *(void **)&sides[1].free_ = dlsym(h, "ratomic_limiter_free");
    if (!sides[1].new_ || !sides[1].allow || !sides[1].allow_at || !sides[1].now || !sides[1].free_)
        fail("libratomic.so lacks a ratomic_* function");
    if (sides[1].allow == ratomic_allow) fail("dlsym resolved to the static copy");
    for (size_t i = 0; i < KEYS; i++) {
        char k[KEY_LEN + 1];
        snprintf(k, sizeof k, "user:%08zu", i);
        memcpy(keys[i], k, KEY_LEN);
    }
    printf("libratomic.a linked in vs libratomic.so through dlopen: %zu chunk pairs of %d calls\n\n", pairs,
           CHUNK);
    printf("| call | static (ns) | shared (ns) | static ÷ shared |\n|---|---:|---:|---:|\n");
    for (int explicit_time = 0; explicit_time < 2; explicit_time++) row(sides, "hot key", 1, explicit_time, pairs);
    for (int explicit_time = 0; explicit_time < 2; explicit_time++)
        row(sides, "100k keys", KEYS, explicit_time, pairs);
    return 0;
}
