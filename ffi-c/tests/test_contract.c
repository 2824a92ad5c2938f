/* What every face of ratomic agrees on (docs/CONTRACT.md), through the C
 * ABI: a batch with an invalid request fails whole (§4.6); a time past
 * RATOMIC_MAX_TIME is an error, never clamped (§6); acquire waits on the
 * limiter's clock (here a manual one: no test sleeps); gc at an explicit
 * time forgets without changing a decision; the eviction policies and the
 * key byte budget (§5); every limit readable back; and the clock_source
 * option. */
#define _GNU_SOURCE /* clock_gettime, CLOCK_MONOTONIC under -std=c11 */
#include <time.h>

#include "common.h"

static const ratomic_decision SENTINEL = {true, 77, 77, 77, 77};

static bool untouched(const ratomic_decision *d) {
    return d->allowed == SENTINEL.allowed && d->remaining == SENTINEL.remaining &&
           d->limit == SENTINEL.limit && d->retry_after_ns == SENTINEL.retry_after_ns &&
           d->reset_after_ns == SENTINEL.reset_after_ns;
}

static void reset_decisions(ratomic_decision *ds, size_t n) {
    for (size_t i = 0; i < n; i++) ds[i] = SENTINEL;
}

/* The index and code ratomic_last_error_request reports, or {SIZE_MAX, 999}. */
typedef struct {
    size_t index;
    ratomic_result code;
} bad_request;

static bad_request last_bad_request(void) {
    bad_request b = {SIZE_MAX, 999};
    CHECK_OK(ratomic_last_error_request(&b.index, &b.code));
    return b;
}

static bool last_error_contains(const char *needle) {
    char msg[512];
    ratomic_last_error_message(msg, sizeof msg, NULL);
    return strstr(msg, needle) != NULL;
}

#define REQ(s, cost) {(const uint8_t *)(s), sizeof(s) - 1, (cost)}

/* ---- CONTRACT §4.6: batches fail whole ------------------------------ */

static void batch_with_an_invalid_request_fails_whole_and_changes_nothing(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    o.max_key_len = 8;
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(5, 1.0, &o, &l));

    ratomic_request reqs[3] = {REQ("a", 1), REQ("b", 6), REQ("c", 1)};
    ratomic_decision ds[3];
    reset_decisions(ds, 3);
    CHECK_RC(RATOMIC_INVALID_REQUEST, ratomic_allow_many(l, reqs, 3, ds));
    bad_request b = last_bad_request();
    CHECK(b.index == 1 && b.code == RATOMIC_COST_EXCEEDS_LIMIT);
    CHECK(last_error_contains("request 1 of the batch") && last_error_contains("cost 6 exceeds the limit 5"));
    CHECK(untouched(&ds[0]) && untouched(&ds[1]) && untouched(&ds[2]));
    /* Nothing was charged: not "a", before the bad request, nor "c", after. */
    ratomic_decision d;
    CHECK_OK(ratomic_peek(l, KEY("a"), 0, &d));
    CHECK(d.remaining == 5);
    CHECK_OK(ratomic_peek(l, KEY("c"), 0, &d));
    CHECK(d.remaining == 5);
    size_t n = 99;
    CHECK_OK(ratomic_key_count(l, &n));
    CHECK(n == 0);
    /* The explicit-time form fails the same way. */
    CHECK_RC(RATOMIC_INVALID_REQUEST, ratomic_allow_many_at(l, reqs, 3, 0, ds));
    CHECK(untouched(&ds[0]));

    /* The first invalid request is the one named, whatever is wrong with it. */
    ratomic_request too_long[3] = {REQ("a", 1), REQ("123456789", 1), REQ("b", 6)};
    CHECK_RC(RATOMIC_INVALID_REQUEST, ratomic_allow_many(l, too_long, 3, ds));
    b = last_bad_request();
    CHECK(b.index == 1 && b.code == RATOMIC_KEY_TOO_LONG);

    /* A NULL key with a length: found by the C face, reported the same way,
     * after any earlier request the engine refuses. */
    ratomic_request null_key[3] = {REQ("a", 1), REQ("b", 1), {NULL, 3, 1}};
    CHECK_RC(RATOMIC_INVALID_REQUEST, ratomic_allow_many(l, null_key, 3, ds));
    b = last_bad_request();
    CHECK(b.index == 2 && b.code == RATOMIC_NULL_ARGUMENT);
    CHECK(last_error_contains("request 2 of the batch: key must not be NULL"));
    null_key[1].cost = 9;
    CHECK_RC(RATOMIC_INVALID_REQUEST, ratomic_allow_many(l, null_key, 3, ds));
    b = last_bad_request();
    CHECK(b.index == 1 && b.code == RATOMIC_COST_EXCEEDS_LIMIT);
    /* A request whose cost and key are both bad: the cost, as the engine checks it first. */
    ratomic_request both[1] = {{NULL, 3, 9}};
    CHECK_RC(RATOMIC_INVALID_REQUEST, ratomic_allow_many(l, both, 1, ds));
    b = last_bad_request();
    CHECK(b.index == 0 && b.code == RATOMIC_COST_EXCEEDS_LIMIT);
    /* An overlong key is never read, whatever its pointer. */
    ratomic_request huge[2] = {REQ("a", 1), {NULL, SIZE_MAX, 1}};
    CHECK_RC(RATOMIC_INVALID_REQUEST, ratomic_allow_many(l, huge, 2, ds));
    b = last_bad_request();
    CHECK(b.index == 1 && b.code == RATOMIC_KEY_TOO_LONG);
    CHECK(untouched(&ds[0]) && untouched(&ds[1]));
    CHECK_OK(ratomic_key_count(l, &n));
    CHECK(n == 0);

    /* The report stays until another call fails; a failure that is not a
     * batch's leaves none. */
    CHECK_OK(ratomic_allow(l, KEY("z"), 1, &d));
    b = last_bad_request();
    CHECK(b.index == 1 && b.code == RATOMIC_KEY_TOO_LONG);
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_allow(l, KEY("z"), 6, &d));
    size_t index = 42;
    ratomic_result code = RATOMIC_OK;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_last_error_request(&index, &code));
    CHECK(index == 42 && code == RATOMIC_OK);
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_last_error_request(NULL, &code));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_last_error_request(&index, NULL));

    /* A valid batch: decisions in order, at one clock reading. */
    ratomic_request good[3] = {REQ("x", 3), REQ("x", 3), REQ("y", 5)};
    CHECK_OK(ratomic_allow_many(l, good, 3, ds));
    CHECK(ds[0].allowed && ds[0].remaining == 2);
    CHECK(!ds[1].allowed && ds[1].retry_after_ns == NS_PER_SEC);
    CHECK(ds[2].allowed && ds[2].remaining == 0);
    ratomic_limiter_free(l);
}

static void multi_limit_batch_fails_whole_too(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    ratomic_limit_spec limits[2] = {{"burst", "3/s", RATOMIC_ALGORITHM_TOKEN_BUCKET},
                                    {"minute", "10/min", RATOMIC_ALGORITHM_SLIDING_WINDOW}};
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_multi_limiter_new(limits, 2, &o, &l));
    ratomic_request reqs[3] = {REQ("u", 2), REQ("v", 1), REQ("u", 4)}; /* 4 > burst 3 */
    ratomic_decision ds[3];
    reset_decisions(ds, 3);
    CHECK_RC(RATOMIC_INVALID_REQUEST, ratomic_allow_many(l, reqs, 3, ds));
    bad_request b = last_bad_request();
    CHECK(b.index == 2 && b.code == RATOMIC_COST_EXCEEDS_LIMIT);
    CHECK(untouched(&ds[0]));
    ratomic_decision d;
    CHECK_OK(ratomic_peek(l, KEY("u"), 0, &d));
    CHECK(d.remaining == 3);

    reqs[2].cost = 1;
    CHECK_OK(ratomic_allow_many(l, reqs, 3, ds));
    CHECK(ds[0].allowed && ds[0].remaining == 1 && ds[1].allowed && ds[2].allowed && ds[2].remaining == 0);
    ratomic_limiter_free(l);
}

/* ---- CONTRACT §6: times past RATOMIC_MAX_TIME are errors -------------- */

static void explicit_times_past_the_bound_are_errors_that_change_nothing(void) {
    CHECK(RATOMIC_MAX_TIME == (UINT64_C(1) << 62) - 1);
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(2, 1.0, NULL, &l));
    ratomic_decision d = SENTINEL;
    const uint64_t bad[2] = {RATOMIC_MAX_TIME + 1, UINT64_MAX};
    for (int i = 0; i < 2; i++) {
        uint64_t t = bad[i];
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_allow_at(l, KEY("k"), 1, t, &d));
        CHECK(last_error_contains("invalid now") && last_error_contains("2^62"));
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_peek_at(l, KEY("k"), 1, t, &d));
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_refund_at(l, KEY("k"), 1, t));
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_reset_at(l, KEY("k"), t));
        size_t dropped = 99;
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_gc_at(l, t, &dropped));
        CHECK(dropped == 99);
        ratomic_request r = REQ("k", 1);
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_allow_many_at(l, &r, 1, t, &d));
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_allow_many_at(l, NULL, 0, t, NULL));
        ratomic_limit_decision e[1];
        size_t len = 99;
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_allow_detailed_at(l, KEY("k"), 1, t, &d, e, 1, &len));
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_peek_detailed_at(l, KEY("k"), 1, t, &d, e, 1, &len));
        CHECK(len == 99 && untouched(&d));
    }
    size_t n = 99;
    CHECK_OK(ratomic_key_count(l, &n));
    CHECK(n == 0);
    /* The bound itself is a valid time, and not clamped: a later call at an
     * earlier time sees what was charged at the bound. */
    CHECK_OK(ratomic_allow_at(l, KEY("k"), 2, RATOMIC_MAX_TIME, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_peek_at(l, KEY("k"), 1, RATOMIC_MAX_TIME, &d));
    CHECK(!d.allowed && d.retry_after_ns == NS_PER_SEC);
    ratomic_limiter_free(l);
}

static void clock_readings_past_the_bound_are_errors_that_change_nothing(void) {
    manual_clock clock = {RATOMIC_MAX_TIME + 1};
    ratomic_options o = manual_clock_options(&clock);
    ratomic_limit_spec two[2] = {{"a", "2/s", RATOMIC_ALGORITHM_TOKEN_BUCKET},
                                 {"b", "5/min", RATOMIC_ALGORITHM_FIXED_WINDOW}};
    for (int multi = 0; multi < 2; multi++) {
        ratomic_limiter *l = NULL;
        if (multi) {
            CHECK_OK(ratomic_multi_limiter_new(two, 2, &o, &l));
        } else {
            CHECK_OK(ratomic_token_bucket_new(2, 1.0, &o, &l));
        }
        atomic_store(&clock.now_ns, RATOMIC_MAX_TIME + 1);
        ratomic_decision d = SENTINEL;
        uint64_t now = 7;
        size_t dropped = 99;
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_now(l, &now));
        CHECK(now == 7 && last_error_contains("invalid now: 4611686018427387904"));
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_allow(l, KEY("k"), 1, &d));
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_peek(l, KEY("k"), 1, &d));
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_refund(l, KEY("k"), 1));
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_reset(l, KEY("k")));
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_gc(l, &dropped));
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_acquire(l, KEY("k"), 1, RATOMIC_NO_TIMEOUT, &d));
        ratomic_request r = REQ("k", 1);
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_allow_many(l, &r, 1, &d));
        ratomic_limit_decision e[2];
        size_t len = 99;
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_allow_detailed(l, KEY("k"), 1, &d, e, 2, &len));
        CHECK(len == 99 && dropped == 99 && untouched(&d));
        atomic_store(&clock.now_ns, UINT64_MAX);
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_allow(l, KEY("k"), 1, &d));

        /* Back on a valid reading: nothing was charged. */
        atomic_store(&clock.now_ns, 5 * NS_PER_SEC);
        CHECK_OK(ratomic_now(l, &now));
        CHECK(now == 5 * NS_PER_SEC);
        CHECK_OK(ratomic_peek(l, KEY("k"), 0, &d));
        CHECK(d.remaining == 2);
        size_t n = 99;
        CHECK_OK(ratomic_key_count(l, &n));
        CHECK(n == 0);
        ratomic_limiter_free(l);
    }
}

/* ---- acquire on a manual clock --------------------------------------- */

/* A manual clock whose sleep moves it forward and counts the waits. */
typedef struct {
    manual_clock clock;
    _Atomic uint64_t sleeps;
    _Atomic uint64_t slept_ns;
} sleepy_clock;

static uint64_t sleepy_read(void *user_data) {
    return atomic_load(&((sleepy_clock *)user_data)->clock.now_ns);
}

static void sleepy_sleep(void *user_data, uint64_t ns) {
    sleepy_clock *c = (sleepy_clock *)user_data;
    atomic_fetch_add(&c->sleeps, 1);
    atomic_fetch_add(&c->slept_ns, ns);
    atomic_fetch_add(&c->clock.now_ns, ns);
}

static ratomic_options sleepy_options(sleepy_clock *c) {
    ratomic_options o;
    memset(&o, 0, sizeof o);
    o.clock = sleepy_read;
    o.clock_sleep = sleepy_sleep;
    o.clock_user_data = c;
    return o;
}

static void acquire_waits_on_the_clock_and_times_out_with_the_denial(void) {
    sleepy_clock c = {{0}, 0, 0};
    ratomic_options o = sleepy_options(&c);
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_from_rate("2/s", &o, &l));
    ratomic_decision d;

    /* Tokens on hand: no wait, even with no time to wait. */
    CHECK_OK(ratomic_acquire(l, KEY("k"), 2, 0, &d));
    CHECK(d.allowed && d.remaining == 0 && c.sleeps == 0);

    /* A wait longer than the timeout: the denial, at once. */
    d = SENTINEL;
    CHECK_OK(ratomic_acquire(l, KEY("k"), 1, 100000000, &d)); /* 100 ms < 500 ms */
    CHECK(!d.allowed && d.retry_after_ns == 500000000 && c.sleeps == 0 && c.clock.now_ns == 0);
    CHECK_OK(ratomic_acquire(l, KEY("k"), 1, 0, &d));
    CHECK(!d.allowed && c.sleeps == 0);

    /* No timeout: waits exactly retry_after on the clock, then passes. */
    CHECK_OK(ratomic_acquire(l, KEY("k"), 1, RATOMIC_NO_TIMEOUT, &d));
    CHECK(d.allowed && d.remaining == 0 && c.sleeps == 1 && c.slept_ns == 500000000);
    CHECK(c.clock.now_ns == 500000000);

    /* A timeout equal to the wait is enough. */
    CHECK_OK(ratomic_acquire(l, KEY("k"), 1, 500000000, &d));
    CHECK(d.allowed && c.sleeps == 2 && c.clock.now_ns == NS_PER_SEC);

    /* Cost 2 waits for both tokens. */
    CHECK_OK(ratomic_acquire(l, KEY("k"), 2, RATOMIC_NO_TIMEOUT, &d));
    CHECK(d.allowed && c.clock.now_ns == 2 * NS_PER_SEC);

    /* A bad call errors at once, never waits. */
    uint64_t sleeps = c.sleeps;
    d = SENTINEL;
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_acquire(l, KEY("k"), 3, RATOMIC_NO_TIMEOUT, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_acquire(NULL, KEY("k"), 1, 0, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_acquire(l, KEY("k"), 1, 0, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_acquire(l, NULL, 1, 1, 0, &d));
    CHECK_RC(RATOMIC_KEY_TOO_LONG, ratomic_acquire(l, NULL, SIZE_MAX, 1, 0, &d));
    CHECK(untouched(&d) && c.sleeps == sleeps);
    ratomic_limiter_free(l);
}

static void acquire_on_several_limits_waits_for_the_slowest(void) {
    sleepy_clock c = {{0}, 0, 0};
    ratomic_options o = sleepy_options(&c);
    ratomic_limit_spec limits[2] = {{"burst", "1/s", RATOMIC_ALGORITHM_TOKEN_BUCKET},
                                    {"minute", "3/min", RATOMIC_ALGORITHM_FIXED_WINDOW}};
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_multi_limiter_new(limits, 2, &o, &l));
    ratomic_decision d;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(ratomic_acquire(l, KEY("k"), 1, RATOMIC_NO_TIMEOUT, &d));
        CHECK(d.allowed);
    }
    CHECK(c.clock.now_ns == 2 * NS_PER_SEC); /* the burst's two 1 s waits */
    /* The fourth waits for the next minute's window. */
    CHECK_OK(ratomic_acquire(l, KEY("k"), 1, 30 * NS_PER_SEC, &d));
    CHECK(!d.allowed && d.retry_after_ns == 58 * NS_PER_SEC);
    CHECK_OK(ratomic_acquire(l, KEY("k"), 1, RATOMIC_NO_TIMEOUT, &d));
    CHECK(d.allowed && c.clock.now_ns == 60 * NS_PER_SEC);
    ratomic_limiter_free(l);
}

static void acquire_fails_when_the_clock_runs_past_the_bound_while_waiting(void) {
    sleepy_clock c = {{RATOMIC_MAX_TIME - NS_PER_SEC / 2}, 0, 0};
    ratomic_options o = sleepy_options(&c);
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(1, 1.0, &o, &l));
    ratomic_decision d;
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK(d.allowed);
    d = SENTINEL;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_acquire(l, KEY("k"), 1, RATOMIC_NO_TIMEOUT, &d));
    CHECK(untouched(&d) && c.sleeps == 1);
    ratomic_limiter_free(l);
}

static void acquire_without_a_sleep_hook_never_waits_when_it_need_not(void) {
    /* The library's clock and no hook: only calls that need no wait, so
     * this test does not sleep either. */
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(1, 1e-6, NULL, &l));
    ratomic_decision d;
    CHECK_OK(ratomic_acquire(l, KEY("k"), 1, RATOMIC_NO_TIMEOUT, &d));
    CHECK(d.allowed);
    CHECK_OK(ratomic_acquire(l, KEY("k"), 1, NS_PER_SEC, &d)); /* the wait is ~11.6 days */
    CHECK(!d.allowed && d.retry_after_ns > 1000 * NS_PER_SEC);
    ratomic_limiter_free(l);
}

/* ---- gc at an explicit time ------------------------------------------ */

static void gc_at_drops_keys_full_at_that_time_and_changes_no_decision(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(2, 1.0, &o, &l));
    ratomic_decision d;
    CHECK_OK(ratomic_allow_at(l, KEY("a"), 1, 0, &d)); /* full again at 1 s */
    CHECK_OK(ratomic_allow_at(l, KEY("b"), 2, 0, &d)); /* full again at 2 s */
    size_t dropped = 99, n = 0;
    CHECK_OK(ratomic_gc_at(l, NS_PER_SEC / 2, &dropped));
    CHECK(dropped == 0);
    CHECK_OK(ratomic_gc_at(l, NS_PER_SEC, &dropped));
    CHECK(dropped == 1);
    CHECK_OK(ratomic_key_count(l, &n));
    CHECK(n == 1);
    CHECK_OK(ratomic_gc_at(l, 2 * NS_PER_SEC, NULL)); /* dropped may be NULL */
    CHECK_OK(ratomic_key_count(l, &n));
    CHECK(n == 0);
    /* Forgotten, yet a call stamped before the forget is no more generous
     * than remembering: "b" had one token at 1 s. */
    CHECK_OK(ratomic_peek_at(l, KEY("b"), 2, NS_PER_SEC, &d));
    CHECK(!d.allowed);
    CHECK_OK(ratomic_peek_at(l, KEY("b"), 2, 2 * NS_PER_SEC, &d));
    CHECK(d.allowed);
    /* The limiter's own clock is not read. */
    atomic_store(&clock.now_ns, RATOMIC_MAX_TIME + 1);
    CHECK_OK(ratomic_gc_at(l, 3 * NS_PER_SEC, &dropped));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_gc_at(NULL, 0, &dropped));
    ratomic_limiter_free(l);
}

/* ---- CONTRACT §5: eviction policies and the key byte budget ----------- */

/* `keys` single-use keys on a frozen clock through a bucket of 1 that
 * never refills in the test; returns how many were denied. */
static int churn(uint32_t eviction, int keys) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    o.max_keys = 64;
    o.eviction = eviction;
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(1, 1e-3, &o, &l));
    int denied = 0;
    char key[32];
    ratomic_decision d;
    for (int i = 0; i < keys; i++) {
        int len = snprintf(key, sizeof key, "attacker:%d", i);
        CHECK_OK(ratomic_allow(l, (const uint8_t *)key, (size_t)len, 1, &d));
        denied += !d.allowed;
    }
    size_t n = 0;
    CHECK_OK(ratomic_key_count(l, &n));
    CHECK(n <= 128);
    ratomic_limiter_free(l);
    return denied;
}

static void fair_eviction_never_denies_a_new_key_and_strict_never_over_grants(void) {
    ratomic_options zero;
    memset(&zero, 0, sizeof zero);
    CHECK(zero.eviction == RATOMIC_EVICTION_FAIR); /* zero is the default */
    CHECK(churn(RATOMIC_EVICTION_FAIR, 5000) == 0);
    /* Strict: new keys start from what evicted keys left, so churn denies them. */
    CHECK(churn(RATOMIC_EVICTION_STRICT, 5000) > 0);

    ratomic_options o;
    memset(&o, 0, sizeof o);
    o.eviction = 2;
    ratomic_limiter *l = NULL;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_token_bucket_new(1, 1.0, &o, &l));
    CHECK(last_error_contains("unknown eviction: 2"));
    o.eviction = UINT32_MAX;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_sliding_window_from_rate("1/s", &o, &l));
    ratomic_limit_spec one = {"a", "1/s", RATOMIC_ALGORITHM_TOKEN_BUCKET};
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_multi_limiter_new(&one, 1, &o, &l));
    CHECK(l == NULL);
}

/* Long (40-byte) keys through a limiter whose byte budget is `budget`
 * (0 = the default); returns the keys held afterwards. */
static size_t long_keys_held(size_t budget) {
    ratomic_options o;
    memset(&o, 0, sizeof o);
    o.max_keys = 100000;
    o.max_key_len = 40;
    o.max_key_bytes = budget;
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(2, 1e-3, &o, &l));
    char key[41];
    ratomic_decision d;
    for (int i = 0; i < 2000; i++) {
        snprintf(key, sizeof key, "%040d", i);
        CHECK_OK(ratomic_allow_at(l, (const uint8_t *)key, 40, 1, 0, &d));
        CHECK(d.allowed);
    }
    size_t n = 0;
    CHECK_OK(ratomic_key_count(l, &n));
    ratomic_limiter_free(l);
    return n;
}

static void max_key_bytes_bounds_the_bytes_of_long_keys(void) {
    CHECK(long_keys_held(0) == 2000);       /* 64 MiB by default: all fit */
    CHECK(long_keys_held((size_t)1 << 20) == 2000); /* 16 KiB a shard: room to spare */
    size_t held = long_keys_held(1);        /* each shard still holds one */
    CHECK(held >= 1 && held <= 256);
}

/* ---- every limit readable back --------------------------------------- */

static void every_limit_reads_back_as_built(void) {
    ratomic_limiter *l = NULL;
    ratomic_limit_info info;
    size_t n = 0;

    CHECK_OK(ratomic_token_bucket_new(10, 4.0, NULL, &l));
    CHECK_OK(ratomic_limit_count(l, &n));
    CHECK(n == 1);
    CHECK_OK(ratomic_limit_get(l, 0, &info));
    CHECK(strcmp(info.name, "token_bucket") == 0 && info.algorithm == RATOMIC_ALGORITHM_TOKEN_BUCKET);
    CHECK(info.limit == 10 && info.interval_ns == 250000000 && info.period_ns == 2500000000u);
    CHECK(info.refill_per_sec == 4.0);
    ratomic_limit_info before = info;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_limit_get(l, 1, &info));
    CHECK(last_error_contains("invalid index: 1") && last_error_contains("must be below 1"));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_limit_get(l, SIZE_MAX, &info));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_limit_get(NULL, 0, &info));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_limit_get(l, 0, NULL));
    CHECK(info.limit == before.limit && info.name == before.name); /* untouched */
    ratomic_limiter_free(l);

    CHECK_OK(ratomic_token_bucket_from_rate("3/250ms", NULL, &l));
    CHECK_OK(ratomic_limit_get(l, 0, &info));
    CHECK(info.limit == 3 && info.interval_ns == 83333333 && info.period_ns == 3 * 83333333u);
    CHECK(info.refill_per_sec == 12.0);
    ratomic_limiter_free(l);

    CHECK_OK(ratomic_fixed_window_new(100, 60 * NS_PER_SEC, NULL, &l));
    CHECK_OK(ratomic_limit_get(l, 0, &info));
    CHECK(strcmp(info.name, "fixed_window") == 0 && info.algorithm == RATOMIC_ALGORITHM_FIXED_WINDOW);
    CHECK(info.limit == 100 && info.period_ns == 60 * NS_PER_SEC && info.interval_ns == 0 && info.refill_per_sec == 0.0);
    ratomic_limiter_free(l);

    CHECK_OK(ratomic_sliding_window_from_rate("7/h", NULL, &l));
    CHECK_OK(ratomic_limit_get(l, 0, &info));
    CHECK(strcmp(info.name, "sliding_window") == 0 && info.algorithm == RATOMIC_ALGORITHM_SLIDING_WINDOW);
    CHECK(info.limit == 7 && info.period_ns == 3600 * NS_PER_SEC);
    ratomic_limiter_free(l);

    ratomic_limit_spec limits[3] = {{"burst", "10/s", RATOMIC_ALGORITHM_TOKEN_BUCKET},
                                    {"daily", "1000/d", RATOMIC_ALGORITHM_FIXED_WINDOW},
                                    {"hourly", "100/h", RATOMIC_ALGORITHM_SLIDING_WINDOW}};
    CHECK_OK(ratomic_multi_limiter_new(limits, 3, NULL, &l));
    CHECK_OK(ratomic_limit_count(l, &n));
    CHECK(n == 3);
    const uint64_t expect_limit[3] = {10, 1000, 100};
    const uint64_t expect_period[3] = {NS_PER_SEC, 86400 * NS_PER_SEC, 3600 * NS_PER_SEC};
    for (size_t i = 0; i < 3; i++) {
        CHECK_OK(ratomic_limit_get(l, i, &info));
        CHECK(strcmp(info.name, limits[i].name) == 0 && info.name != limits[i].name); /* a copy */
        CHECK(info.algorithm == limits[i].algorithm);
        CHECK(info.limit == expect_limit[i] && info.period_ns == expect_period[i]);
    }
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_limit_get(l, 3, &info));
    /* The names it lends are the ones the detailed decisions carry. */
    ratomic_limit_decision e[3];
    ratomic_decision d;
    size_t len = 0;
    CHECK_OK(ratomic_peek_detailed_at(l, KEY("k"), 1, 0, &d, e, 3, &len));
    for (size_t i = 0; i < 3; i++) {
        CHECK_OK(ratomic_limit_get(l, i, &info));
        CHECK(e[i].name == info.name);
    }
    ratomic_limiter_free(l);
}

static void windows_refuse_limits_above_their_largest_and_say_which(void) {
    uint64_t max = 0;
    const uint64_t S = NS_PER_SEC;
    CHECK_OK(ratomic_window_max_limit(RATOMIC_ALGORITHM_SLIDING_WINDOW, S, &max));
    CHECK(max == 32767);
    CHECK_OK(ratomic_window_max_limit(RATOMIC_ALGORITHM_SLIDING_WINDOW, 60 * S, &max));
    CHECK(max == 262143);
    CHECK_OK(ratomic_window_max_limit(RATOMIC_ALGORITHM_SLIDING_WINDOW, 3600 * S, &max));
    CHECK(max == 2097151);
    CHECK_OK(ratomic_window_max_limit(RATOMIC_ALGORITHM_SLIDING_WINDOW, 86400 * S, &max));
    CHECK(max == 8388607);
    CHECK_OK(ratomic_window_max_limit(RATOMIC_ALGORITHM_SLIDING_WINDOW, 1, &max));
    CHECK(max == 0);
    CHECK_OK(ratomic_window_max_limit(RATOMIC_ALGORITHM_FIXED_WINDOW, S, &max));
    CHECK(max == (UINT64_C(1) << 30) - 1);
    const uint64_t windows[5] = {1, 2, 1000, S, RATOMIC_MAX_TIME};
    for (int i = 0; i < 5; i++) {
        CHECK_OK(ratomic_window_max_limit(RATOMIC_ALGORITHM_FIXED_WINDOW, windows[i], &max));
        CHECK(max >= windows[i]); /* at least one call per nanosecond */
    }
    max = 5;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_window_max_limit(RATOMIC_ALGORITHM_TOKEN_BUCKET, S, &max));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_window_max_limit(7, S, &max));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_window_max_limit(RATOMIC_ALGORITHM_FIXED_WINDOW, 0, &max));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_window_max_limit(RATOMIC_ALGORITHM_FIXED_WINDOW, UINT64_MAX, &max));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_window_max_limit(RATOMIC_ALGORITHM_FIXED_WINDOW, S, NULL));
    CHECK(max == 5);

    /* The constructors refuse one more, naming the largest. */
    ratomic_limiter *l = NULL;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_sliding_window_new(32768, S, NULL, &l));
    CHECK(last_error_contains("at most 32767"));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_sliding_window_from_rate("40000/s", NULL, &l));
    CHECK(last_error_contains("at most 32767"));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_sliding_window_from_rate("40000/2s", NULL, &l));
    CHECK(last_error_contains("at most 32767")); /* the index takes one bit less: not enough */
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_sliding_window_new(1, 1, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_fixed_window_new(1u << 30, S, NULL, &l));
    ratomic_limit_spec spec = {"h", "2097152/h", RATOMIC_ALGORITHM_SLIDING_WINDOW};
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_multi_limiter_new(&spec, 1, NULL, &l));
    CHECK(l == NULL);
    /* The largest itself is fine; so is a longer window. */
    CHECK_OK(ratomic_sliding_window_new(32767, S, NULL, &l));
    ratomic_limiter_free(l);
    CHECK_OK(ratomic_sliding_window_from_rate("40000/4s", NULL, &l));
    ratomic_limiter_free(l);
    CHECK_OK(ratomic_fixed_window_new((1u << 30) - 1, S, NULL, &l));
    ratomic_limiter_free(l);
    spec.rate = "2097151/h";
    CHECK_OK(ratomic_multi_limiter_new(&spec, 1, NULL, &l));
    ratomic_limiter_free(l);
}

/* Issue 39: the opt-in coarse clock is chosen by clock_source, reads the
 * monotonic timeline (never ahead of CLOCK_MONOTONIC), sits in a stack
 * beside the default clock, and is refused with a callback or an unknown
 * value, changing nothing. */
static void clock_source_chooses_the_coarse_clock_and_refuses_what_it_cannot_mean(void) {
    ratomic_options o;
    memset(&o, 0, sizeof o);
    CHECK(o.clock_source == RATOMIC_CLOCK_MONOTONIC); /* zero is the default */
    o.clock_source = RATOMIC_CLOCK_COARSE;
    ratomic_limiter *coarse = NULL, *fine = NULL;
    CHECK_OK(ratomic_token_bucket_new(3, 1.0 / 3600.0, &o, &coarse));
    ratomic_decision d;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(ratomic_allow(coarse, KEY("k"), 1, &d));
        CHECK(d.allowed);
    }
    CHECK_OK(ratomic_allow(coarse, KEY("k"), 1, &d));
    CHECK(!d.allowed);
    uint64_t now = 0;
    CHECK_OK(ratomic_now(coarse, &now));
    struct timespec ts;
    CHECK(clock_gettime(CLOCK_MONOTONIC, &ts) == 0);
    CHECK(now <= (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec);

    /* One timeline: a stack takes a coarse member beside a default one. */
    CHECK_OK(ratomic_token_bucket_new(3, 1.0, NULL, &fine));
    const char *names[2] = {"coarse", "fine"};
    const ratomic_limiter *members[2] = {coarse, fine};
    ratomic_stack *stack = NULL;
    CHECK_OK(ratomic_stack_new(names, members, 2, NULL, &stack));
    ratomic_stack_free(stack);

    /* A callback and a source, or a source with no meaning: refused. */
    ratomic_limiter *l = NULL;
    manual_clock clock = {0};
    ratomic_options both = manual_clock_options(&clock);
    both.clock_source = RATOMIC_CLOCK_COARSE;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_token_bucket_new(3, 1.0, &both, &l));
    CHECK(last_error_contains("clock_source"));
    CHECK(last_error_contains("not both"));
    o.clock_source = 7;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_fixed_window_from_rate("1/s", &o, &l));
    CHECK(last_error_contains("unknown clock_source: 7"));
    CHECK(l == NULL);
    ratomic_limiter_free(coarse);
    ratomic_limiter_free(fine);
}

/* Issue 39: reserve_keys makes room up front: a limiter given it decides as
 * one without it, and a reserve_keys above max_keys is refused, saying why. */
static void reserve_keys_makes_room_up_front_and_is_bounded_by_max_keys(void) {
    ratomic_options o;
    memset(&o, 0, sizeof o);
    CHECK(o.reserve_keys == 0); /* zero is the default: no room up front */
    o.reserve_keys = 5000;
    o.max_keys = 10000;
    ratomic_limiter *sized = NULL, *plain = NULL;
    CHECK_OK(ratomic_token_bucket_new(2, 1.0 / 3600.0, &o, &sized));
    CHECK_OK(ratomic_token_bucket_new(2, 1.0 / 3600.0, NULL, &plain));
    for (uint64_t k = 0; k < 5000; k++) {
        for (int call = 0; call < 3; call++) {
            ratomic_decision a, b;
            CHECK_OK(ratomic_allow(sized, (const uint8_t *)&k, sizeof k, 1, &a));
            CHECK_OK(ratomic_allow(plain, (const uint8_t *)&k, sizeof k, 1, &b));
            CHECK(a.allowed == b.allowed && a.remaining == b.remaining);
            CHECK(a.allowed == (call < 2));
        }
    }
    ratomic_limiter_free(sized);
    ratomic_limiter_free(plain);

    ratomic_limiter *l = NULL;
    o.reserve_keys = 10001;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_token_bucket_new(2, 1.0, &o, &l));
    CHECK(last_error_contains("reserve_keys"));
    CHECK(last_error_contains("must be at most max_keys (10000)"));
    CHECK(l == NULL);
}

int main(void) {
    batch_with_an_invalid_request_fails_whole_and_changes_nothing();
    multi_limit_batch_fails_whole_too();
    explicit_times_past_the_bound_are_errors_that_change_nothing();
    clock_readings_past_the_bound_are_errors_that_change_nothing();
    acquire_waits_on_the_clock_and_times_out_with_the_denial();
    acquire_on_several_limits_waits_for_the_slowest();
    acquire_fails_when_the_clock_runs_past_the_bound_while_waiting();
    acquire_without_a_sleep_hook_never_waits_when_it_need_not();
    gc_at_drops_keys_full_at_that_time_and_changes_no_decision();
    fair_eviction_never_denies_a_new_key_and_strict_never_over_grants();
    clock_source_chooses_the_coarse_clock_and_refuses_what_it_cannot_mean();
    max_key_bytes_bounds_the_bytes_of_long_keys();
    every_limit_reads_back_as_built();
    windows_refuse_limits_above_their_largest_and_say_which();
    reserve_keys_makes_room_up_front_and_is_bounded_by_max_keys();
    return finish("test_contract");
}
