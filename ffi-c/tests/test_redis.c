/* Redis-backed limiters through the same handle and the same calls as the
 * in-memory ones, against the real redis-server whose URL the test script
 * passes in RATOMIC_REDIS_URL. */
#include <stdint.h>
#include <time.h>

#include "common.h"

static const char *url;

/* A prefix no other run uses. */
static ratomic_redis_options opts(const char *name, char *buf, size_t len) {
    ratomic_redis_options o;
    memset(&o, 0, sizeof o);
    snprintf(buf, len, "c:%ld:%s:", (long)time(NULL) ^ (long)clock(), name);
    o.prefix = buf;
    /* No call here should time out: a bound a loaded machine's stalls (up to
     * 9 s seen) cannot reach, sanitizers and all. */
    o.timeout_ns = 60000000000ull;
    o.ttl_floor_ns = 3600000000000ull; /* the _at times below run ahead of the server's */
    return o;
}

static int same(ratomic_decision a, ratomic_decision b) {
    return a.allowed == b.allowed && a.remaining == b.remaining && a.limit == b.limit &&
           a.retry_after_ns == b.retry_after_ns && a.reset_after_ns == b.reset_after_ns;
}

static void the_same_calls_work_on_redis(void) {
    char p[96];
    ratomic_redis_options o = opts("calls", p, sizeof p);
    ratomic_limiter *l = NULL;
    /* 3 an hour: no refill during the test. */
    CHECK_OK(ratomic_redis_token_bucket_new(url, 3, 3.0 / 3600.0, &o, &l));
    ratomic_decision d;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
        CHECK(d.allowed && d.remaining == (uint64_t)(2 - i) && d.limit == 3);
    }
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK(!d.allowed && d.retry_after_ns > 0);
    CHECK_OK(ratomic_peek(l, KEY("k"), 0, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_refund(l, KEY("k"), 1));
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK(d.allowed);
    CHECK_OK(ratomic_reset(l, KEY("k")));
    CHECK_OK(ratomic_peek(l, KEY("k"), 0, &d));
    CHECK(d.remaining == 3);

    /* Misuse: the in-memory codes, before any round trip. */
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_allow(l, KEY("k"), 4, &d));
    char long_key[2000];
    memset(long_key, 'x', sizeof long_key);
    CHECK_RC(RATOMIC_KEY_TOO_LONG, ratomic_allow(l, (const uint8_t *)long_key, sizeof long_key, 1, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow(l, NULL, 3, 1, &d));
    size_t n;
    CHECK_RC(RATOMIC_OTHER_ERROR, ratomic_key_count(l, &n));

    /* A batch: one pipeline, decisions in order. */
    ratomic_request reqs[4] = {{(const uint8_t *)"a", 1, 2}, {(const uint8_t *)"a", 1, 1}, {(const uint8_t *)"a", 1, 1}, {(const uint8_t *)"b", 1, 3}};
    ratomic_decision out[4];
    CHECK_OK(ratomic_allow_many(l, reqs, 4, out));
    CHECK(out[0].allowed && out[1].allowed && !out[2].allowed && out[3].allowed);
    ratomic_request bad[2] = {{(const uint8_t *)"a", 1, 1}, {(const uint8_t *)"a", 1, 9}};
    CHECK_RC(RATOMIC_INVALID_REQUEST, ratomic_allow_many(l, bad, 2, out));
    size_t index;
    ratomic_result code;
    CHECK_OK(ratomic_last_error_request(&index, &code));
    CHECK(index == 1 && code == RATOMIC_COST_EXCEEDS_LIMIT);
    ratomic_limiter_free(l);
}

/* The same explicit times through memory and Redis: the same decisions. */
static void explicit_times_decide_as_in_memory(void) {
    char p[96];
    ratomic_redis_options o = opts("parity", p, sizeof p);
    ratomic_limiter *mem = NULL, *red = NULL;
    CHECK_OK(ratomic_sliding_window_new(5, 1000000000ull, NULL, &mem));
    CHECK_OK(ratomic_redis_sliding_window_new(url, 5, 1000000000ull, &o, &red));
    uint64_t t = 1700000000000000000ull;
    const uint64_t steps[] = {0, 1000, 250000000, 1000000, 600000000, 0, 400000000, 1500000000};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        t += steps[i];
        for (int j = 0; j < 3; j++) {
            ratomic_decision a, b;
            CHECK_OK(ratomic_allow_at(mem, KEY("k"), 1, t, &a));
            CHECK_OK(ratomic_allow_at(red, KEY("k"), 1, t, &b));
            /* Redis waits are whole µs, rounded up. */
            a.retry_after_ns = (a.retry_after_ns + 999) / 1000 * 1000;
            a.reset_after_ns = (a.reset_after_ns + 999) / 1000 * 1000;
            CHECK(same(a, b));
        }
    }
    ratomic_limiter_free(mem);
    ratomic_limiter_free(red);
}

static void multi_limits_say_who_denied(void) {
    char p[96];
    ratomic_redis_options o = opts("multi", p, sizeof p);
    ratomic_limit_spec specs[2] = {
        {"burst", "5/h", RATOMIC_ALGORITHM_TOKEN_BUCKET},
        {"window", "2/h", RATOMIC_ALGORITHM_FIXED_WINDOW},
    };
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_redis_multi_limiter_new(url, specs, 2, &o, &l));
    ratomic_decision d;
    ratomic_limit_decision entries[2];
    size_t len = 0;
    CHECK_OK(ratomic_allow(l, KEY("k"), 2, &d));
    CHECK(d.allowed);
    CHECK_OK(ratomic_allow_detailed(l, KEY("k"), 1, &d, entries, 2, &len));
    CHECK(!d.allowed && len == 2);
    // burst (5, 3 left) would have allowed it: nothing was charged, so it
    // reports the 3 it still has, not 3 - 1.
    CHECK(strcmp(entries[0].name, "burst") == 0 && entries[0].decision.allowed && entries[0].decision.remaining == 3);
    CHECK(strcmp(entries[1].name, "window") == 0 && !entries[1].decision.allowed);
    ratomic_limiter_free(l);
}

static void bad_urls_and_options_are_clear_errors(void) {
    ratomic_limiter *l = NULL;
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_redis_token_bucket_new(NULL, 1, 1.0, NULL, &l));
    CHECK_RC(RATOMIC_BACKEND_UNAVAILABLE, ratomic_redis_token_bucket_new("http://127.0.0.1:1/", 1, 1.0, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_redis_token_bucket_new(url, 0, 1.0, NULL, &l));
    ratomic_redis_options o;
    memset(&o, 0, sizeof o);
    o.policy = 99;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_redis_token_bucket_new(url, 1, 1.0, &o, &l));
    o.policy = RATOMIC_REDIS_FAIL_OPEN;
    o.prefix = "bad{prefix}";
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_redis_token_bucket_new(url, 1, 1.0, &o, &l));
    CHECK(l == NULL);
    CHECK(strlen(ratomic_result_message(RATOMIC_BACKEND_TIMEOUT)) > 0);
}

/* Leases: a hot key's slice of tokens, given back by ratomic_limiter_free. */
static void leases_are_given_back_on_free(void) {
    char p[96];
    ratomic_redis_options o = opts("lease", p, sizeof p);
    ratomic_redis_options plain = o;
    o.lease = RATOMIC_REDIS_LEASE_AUTO; /* 40 / 8 = 5 at most; a key's first lease is 2 */
    ratomic_limiter *l = NULL, *other = NULL;
    /* 40 an hour: nothing refills during the test. */
    CHECK_OK(ratomic_redis_token_bucket_new(url, 40, 40.0 / 3600.0, &o, &l));
    CHECK_OK(ratomic_redis_token_bucket_new(url, 40, 40.0 / 3600.0, &plain, &other));
    ratomic_decision d;
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d)); /* a warm key: takes a lease of 2 */
    CHECK_OK(ratomic_peek(other, KEY("k"), 0, &d));
    CHECK(d.remaining == 36);
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d)); /* from the lease */
    CHECK(d.allowed && d.remaining == 37);       /* the fleet's 36 at its round trip, plus 1 still leased */
    CHECK_OK(ratomic_reset(other, KEY("k")));
    CHECK_OK(ratomic_peek(other, KEY("k"), 0, &d));
    CHECK(d.remaining == 36); /* a reset elsewhere keeps what the lease holds */
    ratomic_limiter_free(l);
    CHECK_OK(ratomic_peek(other, KEY("k"), 0, &d));
    CHECK(d.remaining == 37); /* the lease's unused token came back */
    ratomic_limiter_free(other);
}

static void bad_lease_options_are_clear_errors(void) {
    ratomic_limiter *l = NULL;
    ratomic_redis_options o;
    memset(&o, 0, sizeof o);
    o.lease = 7;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_redis_token_bucket_new(url, 10, 1.0, &o, &l));
    CHECK(last_error_has("RATOMIC_REDIS_LEASE_MAX (2)"));
    o.lease = RATOMIC_REDIS_LEASE_MAX;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_redis_token_bucket_new(url, 10, 1.0, &o, &l));
    CHECK(last_error_has("at least 1"));
    o.lease = RATOMIC_REDIS_LEASE_AUTO;
    o.lease_max = 4;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_redis_token_bucket_new(url, 10, 1.0, &o, &l));
    CHECK(last_error_has("only with lease = RATOMIC_REDIS_LEASE_MAX"));
    o.lease = RATOMIC_REDIS_LEASE_MAX;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_redis_fixed_window_new(url, 10, 1000000000ull, &o, &l));
    CHECK(last_error_has("token bucket"));
    CHECK(l == NULL);
    o.lease = RATOMIC_REDIS_LEASE_AUTO;
    o.lease_max = 0;
    CHECK_OK(ratomic_redis_fixed_window_new(url, 10, 1000000000ull, &o, &l)); /* auto: a window leases nothing */
    ratomic_limiter_free(l);
}

int main(void) {
    url = getenv("RATOMIC_REDIS_URL");
    if (url == NULL) {
        fprintf(stderr, "test_redis: set RATOMIC_REDIS_URL (ffi-c/run-tests.sh starts a server)\n");
        return EXIT_FAILURE;
    }
    the_same_calls_work_on_redis();
    explicit_times_decide_as_in_memory();
    multi_limits_say_who_denied();
    bad_urls_and_options_are_clear_errors();
    leases_are_given_back_on_free();
    bad_lease_options_are_clear_errors();
    return finish("test_redis");
}
