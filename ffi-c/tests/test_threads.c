/* Many threads on one limiter: on one hot key exactly `capacity` calls pass
 * (repeated, and for every kind, the keyless direct bucket included); on a
 * real clock a direct bucket never grants more than burst + rate x time,
 * alone or as a stack member; and a mixed workload of all operations runs
 * clean under the sanitizers. */
/* pthread_barrier_t is POSIX, hidden by -std=c11 without this. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "common.h"

#define THREADS 16
#define CALLS_PER_THREAD 500

typedef struct {
    ratomic_limiter *limiter;
    pthread_barrier_t *start;
    int granted;
    int errors;
} worker;

static void *hammer_hot_key(void *arg) {
    worker *w = (worker *)arg;
    ratomic_decision d;
    pthread_barrier_wait(w->start);
    for (int i = 0; i < CALLS_PER_THREAD; i++) {
        if (ratomic_allow(w->limiter, KEY("hot"), 1, &d) != RATOMIC_OK) {
            w->errors++;
        } else if (d.allowed) {
            w->granted++;
        } else if (d.retry_after_ns == 0) {
            w->errors++; /* a denial must carry a positive retry_after */
        }
    }
    return NULL;
}

/* THREADS x CALLS_PER_THREAD calls on one key of a limiter whose clock is
 * frozen: exactly `capacity` pass. */
static int race(ratomic_limiter *l) {
    pthread_t threads[THREADS];
    worker workers[THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (worker){l, &start, 0, 0};
        CHECK(pthread_create(&threads[i], NULL, hammer_hot_key, &workers[i]) == 0);
    }
    int granted = 0, errors = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        granted += workers[i].granted;
        errors += workers[i].errors;
    }
    pthread_barrier_destroy(&start);
    CHECK(errors == 0);
    return granted;
}

static void exactly_capacity_pass_for_every_kind(void) {
    manual_clock clock = {NS_PER_SEC};
    ratomic_options o = manual_clock_options(&clock);
    for (int round = 0; round < 5; round++) {
        ratomic_limiter *l = NULL;
        CHECK_OK(ratomic_token_bucket_new(1000, 1.0, &o, &l));
        CHECK(race(l) == 1000);
        ratomic_limiter_free(l);

        CHECK_OK(ratomic_fixed_window_from_rate("1000/h", &o, &l));
        CHECK(race(l) == 1000);
        ratomic_limiter_free(l);

        CHECK_OK(ratomic_sliding_window_from_rate("1000/h", &o, &l));
        CHECK(race(l) == 1000);
        ratomic_limiter_free(l);

        ratomic_limit_spec limits[2] = {{"burst", "1000/s", RATOMIC_ALGORITHM_TOKEN_BUCKET},
                                        {"hourly", "1500/h", RATOMIC_ALGORITHM_SLIDING_WINDOW}};
        CHECK_OK(ratomic_multi_limiter_new(limits, 2, &o, &l));
        /* All or nothing may deny spuriously under contention (a charge on
         * its way back), but never grants more than the tightest limit. */
        int granted = race(l);
        CHECK(granted <= 1000 && granted > 0);
        ratomic_limiter_free(l);
    }
}

/* A direct bucket (no key) under the same race. */
typedef struct {
    const ratomic_direct *direct;
    const ratomic_stack *stack; /* when set: a stack call, member 0 keyed by thread */
    pthread_barrier_t *start;
    int id;
    int granted;
    int errors;
} direct_worker;

static void *hammer_direct(void *arg) {
    direct_worker *w = (direct_worker *)arg;
    ratomic_decision d;
    ratomic_limit_decision e[2];
    size_t len;
    char key[16];
    int n = snprintf(key, sizeof key, "t%d", w->id);
    ratomic_key keys[2] = {{(const uint8_t *)key, (size_t)n}, {NULL, 0}};
    pthread_barrier_wait(w->start);
    for (int i = 0; i < CALLS_PER_THREAD; i++) {
        ratomic_result rc = w->stack != NULL ? ratomic_stack_allow(w->stack, keys, 2, 1, &d, e, 2, &len)
                                             : ratomic_direct_allow(w->direct, 1, &d);
        if (rc != RATOMIC_OK) {
            w->errors++;
        } else if (d.allowed) {
            w->granted++;
        } else if (d.retry_after_ns == 0) {
            w->errors++; /* a denial must carry a positive retry_after */
        }
    }
    return NULL;
}

/* THREADS x CALLS_PER_THREAD calls on a direct bucket, or on a stack whose
 * member 1 is that bucket: the number granted. */
static int race_direct(const ratomic_direct *direct, const ratomic_stack *stack) {
    pthread_t threads[THREADS];
    direct_worker workers[THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (direct_worker){direct, stack, &start, i, 0, 0};
        CHECK(pthread_create(&threads[i], NULL, hammer_direct, &workers[i]) == 0);
    }
    int granted = 0, errors = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        granted += workers[i].granted;
        errors += workers[i].errors;
    }
    pthread_barrier_destroy(&start);
    CHECK(errors == 0);
    return granted;
}

static void direct_bucket_never_over_grants(void) {
    /* A frozen clock: exactly the capacity passes, every round. */
    manual_clock clock = {NS_PER_SEC};
    ratomic_options o = manual_clock_options(&clock);
    for (int round = 0; round < 5; round++) {
        ratomic_direct *b = NULL;
        CHECK_OK(ratomic_direct_token_bucket_new(1000, 1.0, &o, &b));
        CHECK(race_direct(b, NULL) == 1000);
        ratomic_direct_free(b);
    }

    /* The real clock: never more than burst + rate x elapsed time (GCRA:
     * B + floor(elapsed / T)), and at least the burst. */
    ratomic_direct *b = NULL;
    CHECK_OK(ratomic_direct_token_bucket_new(50, 2000.0, NULL, &b)); /* T = 500 us */
    uint64_t t0 = 0, t1 = 0;
    CHECK_OK(ratomic_direct_now(b, &t0));
    int granted = race_direct(b, NULL);
    CHECK_OK(ratomic_direct_now(b, &t1));
    CHECK(granted >= 50);
    CHECK((uint64_t)granted <= 50 + (t1 - t0) / 500000);
    ratomic_direct_free(b);

    /* As a stack member behind a keyed member (one key per thread, never
     * the one that denies): all or nothing may deny spuriously under
     * contention, never grant more than the direct bucket holds, and never
     * leave the bucket holding more than it would have without them. */
    ratomic_limiter *per_thread = NULL;
    ratomic_direct *global = NULL;
    CHECK_OK(ratomic_token_bucket_new(CALLS_PER_THREAD, 1.0, &o, &per_thread));
    CHECK_OK(ratomic_direct_token_bucket_new(1000, 1.0, &o, &global));
    ratomic_stack_member members[2] = {{"thread", per_thread, NULL}, {"global", NULL, global}};
    ratomic_stack *s = NULL;
    CHECK_OK(ratomic_stack_new_members(members, 2, &o, &s));
    granted = race_direct(global, s);
    CHECK(granted > 0 && granted <= 1000);
    ratomic_decision left;
    CHECK_OK(ratomic_direct_peek(global, 0, &left));
    CHECK(left.remaining + (uint64_t)granted <= 1000);
    ratomic_stack_free(s);
    ratomic_limiter_free(per_thread);
    ratomic_direct_free(global);
}

static void *mixed(void *arg) {
    worker *w = (worker *)arg;
    ratomic_decision d;
    char key[32];
    pthread_barrier_wait(w->start);
    for (int i = 0; i < CALLS_PER_THREAD; i++) {
        int len = snprintf(key, sizeof key, "key-%d", i % 37);
        const uint8_t *k = (const uint8_t *)key;
        size_t n = (size_t)len;
        ratomic_result rc;
        switch (i % 8) {
        case 0: rc = ratomic_allow(w->limiter, k, n, 1, &d); break;
        case 1: rc = ratomic_peek(w->limiter, k, n, 2, &d); break;
        case 2: rc = ratomic_refund(w->limiter, k, n, 1); break;
        case 3: rc = ratomic_reset(w->limiter, k, n); break;
        case 4: {
            size_t count;
            rc = ratomic_key_count(w->limiter, &count);
            break;
        }
        case 5: rc = ratomic_gc(w->limiter, NULL); break;
        case 6: rc = ratomic_acquire(w->limiter, k, n, 1, 0, &d); break; /* never waits */
        default: {
            uint64_t now = 0;
            rc = ratomic_now(w->limiter, &now);
            if (rc == RATOMIC_OK) rc = ratomic_gc_at(w->limiter, now, NULL);
            break;
        }
        }
        if (rc != RATOMIC_OK) w->errors++;
    }
    return NULL;
}

static void mixed_operations_race_clean(void) {
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(5, 100.0, NULL, &l)); /* the real clock */
    pthread_t threads[THREADS];
    worker workers[THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (worker){l, &start, 0, 0};
        CHECK(pthread_create(&threads[i], NULL, mixed, &workers[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        CHECK(workers[i].errors == 0);
    }
    pthread_barrier_destroy(&start);
    ratomic_limiter_free(l);
}

/* ratomic_acquire's wait on a shared manual clock: moves it forward. */
static void advance_clock(void *user_data, uint64_t ns) {
    manual_clock_advance((manual_clock *)user_data, ns);
}

#define ACQUIRES_PER_THREAD 20

static void *acquire_many(void *arg) {
    worker *w = (worker *)arg;
    ratomic_decision d;
    pthread_barrier_wait(w->start);
    for (int i = 0; i < ACQUIRES_PER_THREAD; i++) {
        if (ratomic_acquire(w->limiter, KEY("hot"), 1, RATOMIC_NO_TIMEOUT, &d) != RATOMIC_OK || !d.allowed) {
            w->errors++;
        } else {
            w->granted++;
        }
    }
    return NULL;
}

/* Every acquire passes in the end, and all of them together never got more
 * than the bucket holds plus what the clock's waits refilled. */
static void acquire_from_many_threads_passes_and_never_over_grants(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    o.clock_sleep = advance_clock;
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(4, 100.0, &o, &l)); /* a token every 10 ms */
    pthread_t threads[THREADS];
    worker workers[THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    for (int i = 0; i < THREADS; i++) {
        workers[i] = (worker){l, &start, 0, 0};
        CHECK(pthread_create(&threads[i], NULL, acquire_many, &workers[i]) == 0);
    }
    int granted = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        CHECK(workers[i].errors == 0);
        granted += workers[i].granted;
    }
    pthread_barrier_destroy(&start);
    CHECK(granted == THREADS * ACQUIRES_PER_THREAD);
    uint64_t now = atomic_load(&clock.now_ns);
    CHECK((uint64_t)granted <= 4 + now / 10000000);
    ratomic_limiter_free(l);
}

int main(void) {
    exactly_capacity_pass_for_every_kind();
    direct_bucket_never_over_grants();
    mixed_operations_race_clean();
    acquire_from_many_threads_passes_and_never_over_grants();
    return finish("test_threads");
}
