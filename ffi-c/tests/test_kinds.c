/* Each limiter kind through the same operations, on a manual clock:
 * token bucket, fixed window, sliding window, several named limits. */
#include "common.h"

static void test_token_bucket_operations(void) {
    manual_clock clock = {5 * NS_PER_SEC};
    ratomic_options o = manual_clock_options(&clock);
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(3, 1.0, &o, &l));

    uint64_t now = 0;
    CHECK_OK(ratomic_now(l, &now));
    CHECK(now == 5 * NS_PER_SEC); /* the callback's reading, with its user data */

    ratomic_decision d;
    for (uint64_t i = 0; i < 3; i++) {
        CHECK_OK(ratomic_allow(l, KEY("alice"), 1, &d));
        CHECK(d.allowed && d.remaining == 2 - i && d.limit == 3 && d.retry_after_ns == 0);
        CHECK(d.reset_after_ns == (i + 1) * NS_PER_SEC);
    }
    CHECK_OK(ratomic_allow(l, KEY("alice"), 1, &d));
    CHECK(!d.allowed && d.remaining == 0 && d.retry_after_ns == NS_PER_SEC && d.reset_after_ns == 3 * NS_PER_SEC);

    /* Peek changes nothing; cost 0 reports the key as it is. */
    CHECK_OK(ratomic_peek(l, KEY("alice"), 0, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_peek(l, KEY("alice"), 1, &d));
    CHECK(!d.allowed && d.retry_after_ns == NS_PER_SEC);
    CHECK_OK(ratomic_peek(l, KEY("bob"), 2, &d));
    CHECK(d.allowed && d.remaining == 1);

    /* Refund gives tokens back (never above full). */
    CHECK_OK(ratomic_refund(l, KEY("alice"), 1));
    CHECK_OK(ratomic_allow(l, KEY("alice"), 1, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_refund(l, KEY("alice"), 100));
    CHECK_OK(ratomic_peek(l, KEY("alice"), 0, &d));
    CHECK(d.remaining == 3);

    /* Cost > 1, reset. */
    CHECK_OK(ratomic_allow(l, KEY("alice"), 3, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_reset(l, KEY("alice")));
    CHECK_OK(ratomic_peek(l, KEY("alice"), 0, &d));
    CHECK(d.remaining == 3);

    /* Explicit time: the _at forms ignore the clock. */
    CHECK_OK(ratomic_allow_at(l, KEY("carol"), 3, 100 * NS_PER_SEC, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_peek_at(l, KEY("carol"), 1, 100 * NS_PER_SEC + NS_PER_SEC / 2, &d));
    CHECK(!d.allowed && d.retry_after_ns == NS_PER_SEC / 2);
    CHECK_OK(ratomic_refund_at(l, KEY("carol"), 1, 100 * NS_PER_SEC));
    CHECK_OK(ratomic_allow_at(l, KEY("carol"), 1, 100 * NS_PER_SEC, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_reset_at(l, KEY("carol"), 100 * NS_PER_SEC));
    CHECK_OK(ratomic_peek_at(l, KEY("carol"), 0, 100 * NS_PER_SEC, &d));
    CHECK(d.remaining == 3);

    /* Keys are any bytes, NUL included. */
    const uint8_t k1[3] = {0, 1, 0}, k2[3] = {0, 1, 1};
    CHECK_OK(ratomic_allow(l, k1, 3, 3, &d));
    CHECK(d.allowed);
    CHECK_OK(ratomic_allow(l, k2, 3, 3, &d));
    CHECK(d.allowed);

    /* Key count; gc drops the keys that are full again. */
    size_t n = 0;
    CHECK_OK(ratomic_key_count(l, &n));
    CHECK(n >= 2);
    manual_clock_advance(&clock, 10 * NS_PER_SEC);
    size_t dropped = 0;
    CHECK_OK(ratomic_gc(l, &dropped));
    CHECK(dropped >= 2);
    CHECK_OK(ratomic_gc(l, NULL));
    CHECK_OK(ratomic_key_count(l, &n));
    CHECK(n == 0);

    /* A single-limit limiter answers the detailed calls with one entry. */
    CHECK_OK(ratomic_limit_count(l, &n));
    CHECK(n == 1);
    ratomic_limit_decision e[1];
    size_t len = 0;
    CHECK_OK(ratomic_allow_detailed(l, KEY("dave"), 2, &d, e, 1, &len));
    CHECK(len == 1 && strcmp(e[0].name, "token_bucket") == 0);
    CHECK(d.allowed && e[0].decision.allowed && e[0].decision.remaining == 1);

    /* Batches at one clock reading. */
    ratomic_request reqs[3] = {{(const uint8_t *)"x", 1, 2}, {(const uint8_t *)"x", 1, 2}, {(const uint8_t *)"y", 1, 3}};
    ratomic_decision ds[3];
    CHECK_OK(ratomic_allow_many(l, reqs, 3, ds));
    CHECK(ds[0].allowed && ds[0].remaining == 1);
    CHECK(!ds[1].allowed && ds[1].retry_after_ns == NS_PER_SEC);
    CHECK(ds[2].allowed && ds[2].remaining == 0);
    CHECK_OK(ratomic_allow_many_at(l, reqs, 1, 1000 * NS_PER_SEC, ds));
    CHECK(ds[0].allowed && ds[0].remaining == 1);

    /* gc at an explicit time; acquire (no wait needed on a fresh key). */
    CHECK_OK(ratomic_gc_at(l, 2000 * NS_PER_SEC, &dropped));
    CHECK(dropped >= 2);
    /* Calls stamped before a gc answer from what the shard forgot, which may
     * be another key's state (keys share shards by a per-process random
     * hash): move the clock to the gc's time first. */
    manual_clock_advance(&clock, 2000 * NS_PER_SEC);
    CHECK_OK(ratomic_acquire(l, KEY("erin"), 3, 0, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_acquire(l, KEY("erin"), 1, 0, &d));
    CHECK(!d.allowed && d.retry_after_ns == NS_PER_SEC);

    ratomic_limiter_free(l);
}

static void test_token_bucket_from_rate(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_from_rate("10/s", &o, &l));
    ratomic_decision d;
    for (int i = 0; i < 10; i++) {
        CHECK_OK(ratomic_allow(l, KEY("u"), 1, &d));
        CHECK(d.allowed && d.limit == 10);
    }
    CHECK_OK(ratomic_allow(l, KEY("u"), 1, &d));
    CHECK(!d.allowed && d.retry_after_ns == 100000000ull); /* 100 ms */
    manual_clock_advance(&clock, d.retry_after_ns);
    CHECK_OK(ratomic_allow(l, KEY("u"), 1, &d));
    CHECK(d.allowed);
    ratomic_limiter_free(l);
}

/* A window limiter of 2 per minute: two pass, the third waits `retry_ns`. */
static void check_window(ratomic_limiter *l, manual_clock *clock, uint64_t retry_ns) {
    ratomic_decision d;
    CHECK_OK(ratomic_allow(l, KEY("ip"), 1, &d));
    CHECK(d.allowed && d.remaining == 1 && d.limit == 2);
    CHECK_OK(ratomic_allow(l, KEY("ip"), 1, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_allow(l, KEY("ip"), 1, &d));
    CHECK(!d.allowed && d.retry_after_ns == retry_ns);
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_allow(l, KEY("ip"), 3, &d));
    manual_clock_advance(clock, retry_ns);
    CHECK_OK(ratomic_allow(l, KEY("ip"), 1, &d));
    CHECK(d.allowed);
    CHECK_OK(ratomic_reset(l, KEY("ip")));
    CHECK_OK(ratomic_peek(l, KEY("ip"), 0, &d));
    CHECK(d.remaining == 2);
    size_t n = 0;
    CHECK_OK(ratomic_limit_count(l, &n));
    CHECK(n == 1);
}

static void test_windows(void) {
    const uint64_t minute = 60 * NS_PER_SEC;
    ratomic_limit_decision e[1];
    ratomic_decision d;
    size_t len = 0;
    for (int from_rate = 0; from_rate < 2; from_rate++) {
        manual_clock clock = {0};
        ratomic_options o = manual_clock_options(&clock);
        ratomic_limiter *l = NULL;
        if (from_rate) {
            CHECK_OK(ratomic_fixed_window_from_rate("2/min", &o, &l));
        } else {
            CHECK_OK(ratomic_fixed_window_new(2, minute, &o, &l));
        }
        check_window(l, &clock, minute); /* the next window */
        CHECK_OK(ratomic_peek_detailed(l, KEY("ip"), 1, &d, e, 1, &len));
        CHECK(len == 1 && strcmp(e[0].name, "fixed_window") == 0);
        ratomic_limiter_free(l);

        manual_clock clock2 = {0};
        o = manual_clock_options(&clock2);
        l = NULL;
        if (from_rate) {
            CHECK_OK(ratomic_sliding_window_from_rate("2/min", &o, &l));
        } else {
            CHECK_OK(ratomic_sliding_window_new(2, minute, &o, &l));
        }
        /* Both calls count until the window ends, then fade out over the
         * next minute: one fits once half of it has passed. */
        check_window(l, &clock2, minute + minute / 2);
        CHECK_OK(ratomic_peek_detailed_at(l, KEY("ip"), 1, 0, &d, e, 1, &len));
        CHECK(len == 1 && strcmp(e[0].name, "sliding_window") == 0);
        ratomic_limiter_free(l);
    }
}

static void test_multi_limit(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    o.max_keys = 1000;
    ratomic_limit_spec limits[3] = {
        {"burst", "3/s", RATOMIC_ALGORITHM_TOKEN_BUCKET},
        {"daily", "5/day", RATOMIC_ALGORITHM_FIXED_WINDOW},
        {"hourly", "100/h", RATOMIC_ALGORITHM_SLIDING_WINDOW},
    };
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_multi_limiter_new(limits, 3, &o, &l));
    size_t n = 0;
    CHECK_OK(ratomic_limit_count(l, &n));
    CHECK(n == 3);

    ratomic_decision d;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(ratomic_allow(l, KEY("user:1"), 1, &d));
        CHECK(d.allowed);
    }
    ratomic_limit_decision e[3];
    size_t len = 0;
    CHECK_OK(ratomic_allow_detailed(l, KEY("user:1"), 1, &d, e, 3, &len));
    CHECK(!d.allowed && d.retry_after_ns > 0 && len == 3);
    CHECK(strcmp(e[0].name, "burst") == 0 && !e[0].decision.allowed);
    CHECK(strcmp(e[1].name, "daily") == 0 && e[1].decision.allowed);
    CHECK(strcmp(e[2].name, "hourly") == 0 && e[2].decision.allowed);
    /* All or nothing: the denial charged no limit. */
    CHECK_OK(ratomic_peek_detailed(l, KEY("user:1"), 0, &d, e, 3, &len));
    CHECK(e[1].decision.remaining == 2 && e[2].decision.remaining == 97);

    /* Two more after a second; then the daily limit is what denies. */
    manual_clock_advance(&clock, NS_PER_SEC);
    CHECK_OK(ratomic_allow(l, KEY("user:1"), 2, &d));
    CHECK(d.allowed && d.remaining == 0); /* the tightest: daily, 0 left */
    manual_clock_advance(&clock, NS_PER_SEC);
    CHECK_OK(ratomic_allow_detailed_at(l, KEY("user:1"), 1, 2 * NS_PER_SEC, &d, e, 3, &len));
    CHECK(!d.allowed && e[0].decision.allowed && !e[1].decision.allowed && e[2].decision.allowed);
    CHECK(d.retry_after_ns == 86400 * NS_PER_SEC - 2 * NS_PER_SEC);

    /* Other keys are untouched; refund and reset reach every limit. */
    CHECK_OK(ratomic_allow(l, KEY("user:2"), 1, &d));
    CHECK(d.allowed);
    CHECK_OK(ratomic_refund(l, KEY("user:1"), 1));
    CHECK_OK(ratomic_peek_detailed(l, KEY("user:1"), 0, &d, e, 3, &len));
    CHECK(e[1].decision.remaining == 1);
    CHECK_OK(ratomic_reset(l, KEY("user:1")));
    CHECK_OK(ratomic_peek_detailed(l, KEY("user:1"), 0, &d, e, 3, &len));
    CHECK(e[0].decision.remaining == 3 && e[1].decision.remaining == 5 && e[2].decision.remaining == 100);

    /* The other operations work on it too. */
    CHECK_OK(ratomic_key_count(l, &n));
    CHECK(n == 1); /* user:2; the reset forgot user:1 */
    ratomic_request reqs[2] = {{(const uint8_t *)"user:3", 6, 3}, {(const uint8_t *)"user:3", 6, 1}};
    ratomic_decision ds[2];
    CHECK_OK(ratomic_allow_many(l, reqs, 2, ds));
    CHECK(ds[0].allowed && !ds[1].allowed);
    CHECK_OK(ratomic_acquire(l, KEY("user:4"), 3, 0, &d));
    CHECK(d.allowed);
    CHECK_OK(ratomic_acquire(l, KEY("user:4"), 1, 0, &d));
    CHECK(!d.allowed && d.retry_after_ns > 0);
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_allow(l, KEY("user:1"), 4, &d)); /* burst holds 3 */
    CHECK_RC(RATOMIC_BUFFER_TOO_SMALL, ratomic_allow_detailed(l, KEY("user:1"), 1, &d, e, 2, &len));
    CHECK_OK(ratomic_peek_at(l, KEY("user:1"), 1, 2 * NS_PER_SEC, &d));
    CHECK(d.allowed && d.remaining == 2);
    ratomic_limiter_free(l);
}

static void test_default_clock_and_options(void) {
    /* No options at all: the library's monotonic clock. */
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(2, 1000.0, NULL, &l));
    uint64_t t1 = 0, t2 = 0;
    CHECK_OK(ratomic_now(l, &t1));
    ratomic_decision d;
    CHECK_OK(ratomic_allow(l, KEY("k"), 2, &d));
    CHECK(d.allowed);
    CHECK_OK(ratomic_now(l, &t2));
    CHECK(t2 >= t1);
    ratomic_limiter_free(l);

    /* A zeroed struct is all defaults. */
    ratomic_options o;
    memset(&o, 0, sizeof o);
    CHECK_OK(ratomic_sliding_window_from_rate("1/s", &o, &l));
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK(d.allowed);
    ratomic_limiter_free(l);

    /* max_keys bounds the store (approximately: per shard). */
    o.max_keys = 64;
    CHECK_OK(ratomic_token_bucket_new(1, 1e-3, &o, &l));
    char key[16];
    for (int i = 0; i < 10000; i++) {
        int len = snprintf(key, sizeof key, "k%d", i);
        CHECK_OK(ratomic_allow(l, (const uint8_t *)key, (size_t)len, 1, &d));
    }
    size_t n = 0;
    CHECK_OK(ratomic_key_count(l, &n));
    CHECK(n <= 1024);
    ratomic_limiter_free(l);
}

int main(void) {
    test_token_bucket_operations();
    test_token_bucket_from_rate();
    test_windows();
    test_multi_limit();
    test_default_clock_and_options();
    return finish("test_kinds");
}
