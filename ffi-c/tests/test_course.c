/* The five behaviours of the rate-limiter course's token-bucket stage, on
 * a clock callback (no sleeping): capacity 10, refill 10 per second. */
/* pthread_barrier_t is POSIX, hidden by -std=c11 without this. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "common.h"

static ratomic_limiter *bucket(manual_clock *clock, uint64_t capacity, double per_sec) {
    ratomic_options o = manual_clock_options(clock);
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(capacity, per_sec, &o, &l));
    return l;
}

static void full_bucket_allows_capacity(void) {
    manual_clock clock = {0};
    ratomic_limiter *l = bucket(&clock, 10, 10.0);
    ratomic_decision d;
    for (int i = 0; i < 10; i++) {
        CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
        CHECK(d.allowed);
    }
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK(!d.allowed && d.retry_after_ns > 0);
    ratomic_limiter_free(l);
}

static void denial_carries_retry_after(void) {
    manual_clock clock = {0};
    ratomic_limiter *l = bucket(&clock, 10, 10.0);
    ratomic_decision d;
    int denials = 0;
    for (int i = 0; i < 50; i++) {
        CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
        if (!d.allowed) {
            denials++;
            CHECK(d.retry_after_ns > 0);
        } else {
            CHECK(d.retry_after_ns == 0);
        }
        manual_clock_advance(&clock, 7000000); /* 7 ms: some refill, not enough */
    }
    CHECK(denials > 0);
    ratomic_limiter_free(l);
}

static void refill_restores_tokens(void) {
    manual_clock clock = {0};
    ratomic_limiter *l = bucket(&clock, 10, 10.0);
    ratomic_decision d;
    for (int i = 0; i < 10; i++) CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK(!d.allowed);
    manual_clock_advance(&clock, NS_PER_SEC / 10); /* 1 / rate: exactly one token */
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK(!d.allowed);
    /* Fractional credit is kept: two half-intervals make one token. */
    manual_clock_advance(&clock, NS_PER_SEC / 20);
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK(!d.allowed);
    manual_clock_advance(&clock, NS_PER_SEC / 20);
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK(d.allowed);
    ratomic_limiter_free(l);
}

static void per_key_isolated(void) {
    manual_clock clock = {0};
    ratomic_limiter *l = bucket(&clock, 10, 10.0);
    ratomic_decision d;
    for (int i = 0; i < 10; i++) CHECK_OK(ratomic_allow(l, KEY("a"), 1, &d));
    CHECK_OK(ratomic_allow(l, KEY("a"), 1, &d));
    CHECK(!d.allowed);
    CHECK_OK(ratomic_allow(l, KEY("b"), 1, &d));
    CHECK(d.allowed && d.remaining == 9);
    ratomic_limiter_free(l);
}

#define RACERS 100

typedef struct {
    ratomic_limiter *limiter;
    pthread_barrier_t *start;
    bool allowed;
    ratomic_result rc;
} racer;

static void *race(void *arg) {
    racer *r = (racer *)arg;
    ratomic_decision d;
    pthread_barrier_wait(r->start);
    r->rc = ratomic_allow(r->limiter, KEY("hot"), 1, &d);
    r->allowed = r->rc == RATOMIC_OK && d.allowed;
    return NULL;
}

static void concurrent_allow_grants_at_most_capacity(void) {
    manual_clock clock = {0}; /* frozen: no refill during the race */
    ratomic_limiter *l = bucket(&clock, 50, 1.0);
    pthread_t threads[RACERS];
    racer racers[RACERS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, RACERS);
    for (int i = 0; i < RACERS; i++) {
        racers[i] = (racer){l, &start, false, RATOMIC_PANIC};
        CHECK(pthread_create(&threads[i], NULL, race, &racers[i]) == 0);
    }
    int granted = 0;
    for (int i = 0; i < RACERS; i++) {
        pthread_join(threads[i], NULL);
        CHECK(racers[i].rc == RATOMIC_OK);
        granted += racers[i].allowed;
    }
    pthread_barrier_destroy(&start);
    CHECK(granted == 50);
    ratomic_limiter_free(l);
}

int main(void) {
    full_bucket_allows_capacity();
    denial_carries_retry_after();
    refill_restores_tokens();
    per_key_isolated();
    concurrent_allow_grants_at_most_capacity();
    return finish("test_course");
}
