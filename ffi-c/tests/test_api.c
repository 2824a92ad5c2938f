/* Every function of the C ABI and every result code it can return from C:
 * NULL pointers, bad rates, costs above the limit, overlong keys, small
 * buffers; and that a failed call writes no out-parameter. */
#include <math.h>

#include "common.h"

static const ratomic_decision SENTINEL = {true, 77, 77, 77, 77};

static bool untouched(const ratomic_decision *d) {
    /* Field by field: struct assignment need not copy padding. */
    return d->allowed == SENTINEL.allowed && d->remaining == SENTINEL.remaining &&
           d->limit == SENTINEL.limit && d->retry_after_ns == SENTINEL.retry_after_ns &&
           d->reset_after_ns == SENTINEL.reset_after_ns;
}

static void test_messages_and_version(void) {
    /* Every code has its own message; unknown codes have one too. */
    const ratomic_result codes[] = {
        RATOMIC_OK, RATOMIC_NULL_ARGUMENT, RATOMIC_INVALID_RATE,
        RATOMIC_INVALID_ARGUMENT, RATOMIC_COST_EXCEEDS_LIMIT,
        RATOMIC_KEY_TOO_LONG, RATOMIC_BUFFER_TOO_SMALL, RATOMIC_PANIC,
        RATOMIC_OTHER_ERROR, RATOMIC_INVALID_REQUEST};
    const size_t n = sizeof codes / sizeof codes[0];
    const char *unknown = ratomic_result_message(4242);
    CHECK(unknown != NULL && strcmp(unknown, "unknown ratomic_result code") == 0);
    for (size_t i = 0; i < n; i++) {
        const char *m = ratomic_result_message(codes[i]);
        CHECK(m != NULL && m[0] != '\0' && strcmp(m, unknown) != 0);
        for (size_t j = 0; j < i; j++) {
            CHECK(strcmp(m, ratomic_result_message(codes[j])) != 0);
        }
    }
    /* The numbers are ABI. */
    CHECK(RATOMIC_OK == 0 && RATOMIC_NULL_ARGUMENT == 1 && RATOMIC_INVALID_RATE == 2 &&
          RATOMIC_INVALID_ARGUMENT == 3 && RATOMIC_COST_EXCEEDS_LIMIT == 4 &&
          RATOMIC_KEY_TOO_LONG == 5 && RATOMIC_BUFFER_TOO_SMALL == 6 &&
          RATOMIC_PANIC == 7 && RATOMIC_OTHER_ERROR == 8 && RATOMIC_INVALID_REQUEST == 9);
    CHECK(RATOMIC_ALGORITHM_TOKEN_BUCKET == 0 && RATOMIC_ALGORITHM_FIXED_WINDOW == 1 &&
          RATOMIC_ALGORITHM_SLIDING_WINDOW == 2);
    CHECK(RATOMIC_EVICTION_FAIR == 0 && RATOMIC_EVICTION_STRICT == 1);

    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", RATOMIC_VERSION_MAJOR,
             RATOMIC_VERSION_MINOR, RATOMIC_VERSION_PATCH);
    CHECK(strcmp(ratomic_version(), expected) == 0);
    CHECK(strcmp(ratomic_version(), RATOMIC_VERSION_STRING) == 0);
}

static void test_last_error_message(void) {
    ratomic_limiter *l = NULL;
    CHECK_RC(RATOMIC_INVALID_RATE, ratomic_token_bucket_from_rate("10/fortnight", NULL, &l));
    CHECK(l == NULL);

    size_t len = 0;
    CHECK_OK(ratomic_last_error_message(NULL, 0, &len)); /* length only */
    char buf[1024];
    size_t len2 = 0;
    CHECK_OK(ratomic_last_error_message(buf, sizeof buf, &len2));
    CHECK(len == len2 && len == strlen(buf));
    CHECK(strstr(buf, "10/fortnight") != NULL && strstr(buf, "unknown unit") != NULL);

    char small[6];
    CHECK_OK(ratomic_last_error_message(small, sizeof small, NULL)); /* truncates */
    CHECK(strlen(small) == 5 && strncmp(small, buf, 5) == 0);
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_last_error_message(NULL, 10, &len));
    /* That failure is now the last error. */
    CHECK_OK(ratomic_last_error_message(buf, sizeof buf, NULL));
    CHECK(strcmp(buf, "buf must not be NULL") == 0);
}

static void test_constructor_errors(void) {
    ratomic_limiter *l = NULL;
    /* NULL out-pointers. */
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_token_bucket_new(10, 1.0, NULL, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_token_bucket_from_rate("10/s", NULL, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_fixed_window_new(10, NS_PER_SEC, NULL, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_fixed_window_from_rate("10/s", NULL, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_sliding_window_new(10, NS_PER_SEC, NULL, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_sliding_window_from_rate("10/s", NULL, NULL));
    /* NULL rate strings. */
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_token_bucket_from_rate(NULL, NULL, &l));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_fixed_window_from_rate(NULL, NULL, &l));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_sliding_window_from_rate(NULL, NULL, &l));

    /* NaN, infinite, zero and negative rates; zero capacity. */
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_token_bucket_new(10, NAN, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_token_bucket_new(10, INFINITY, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_token_bucket_new(10, 0.0, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_token_bucket_new(10, -1.0, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_token_bucket_new(10, 1e-300, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_token_bucket_new(0, 1.0, NULL, &l));
    /* Zero limits and windows. */
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_fixed_window_new(0, NS_PER_SEC, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_fixed_window_new(10, 0, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_fixed_window_new(10, UINT64_MAX, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_sliding_window_new(0, NS_PER_SEC, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_sliding_window_new(10, 0, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_sliding_window_new(10, UINT64_MAX, NULL, &l));
    /* Limits above a window's largest (see test_contract.c). */
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_sliding_window_new(32768, NS_PER_SEC, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_sliding_window_from_rate("32768/s", NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_fixed_window_from_rate("1073741824/s", NULL, &l));

    /* Malformed rate strings, for each kind. */
    const char *bad[] = {"", "10", "10/", "/s", "ten/s", "10/x", "0/s", "10/0s",
                         "-1/s", "1.5/s", "10 per", "\xff/s", "99999999999999999999/s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_RC(RATOMIC_INVALID_RATE, ratomic_token_bucket_from_rate(bad[i], NULL, &l));
        CHECK_RC(RATOMIC_INVALID_RATE, ratomic_fixed_window_from_rate(bad[i], NULL, &l));
        CHECK_RC(RATOMIC_INVALID_RATE, ratomic_sliding_window_from_rate(bad[i], NULL, &l));
    }

    /* Options out of range. */
    ratomic_options o;
    memset(&o, 0, sizeof o);
    o.max_key_len = (size_t)1 << 32;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_token_bucket_new(10, 1.0, &o, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_fixed_window_from_rate("1/s", &o, &l));
    o.max_key_len = 0;
    o.eviction = 2; /* no such policy */
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_token_bucket_from_rate("1/s", &o, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_fixed_window_new(1, NS_PER_SEC, &o, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_sliding_window_new(1, NS_PER_SEC, &o, &l));
    o.eviction = RATOMIC_EVICTION_STRICT;
    o.max_key_len = (size_t)1 << 32;
    ratomic_limit_spec one = {"a", "1/s", RATOMIC_ALGORITHM_TOKEN_BUCKET};
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_multi_limiter_new(&one, 1, &o, &l));
    CHECK(l == NULL); /* never written by a failed constructor */

    /* Multi-limit specs. */
    ratomic_limit_spec dup[2] = {{"a", "1/s", RATOMIC_ALGORITHM_TOKEN_BUCKET},
                                 {"a", "5/min", RATOMIC_ALGORITHM_FIXED_WINDOW}};
    ratomic_limit_spec spec;
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_multi_limiter_new(NULL, 1, NULL, &l));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_multi_limiter_new(&one, 1, NULL, NULL));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_multi_limiter_new(&one, 0, NULL, &l));
    ratomic_limit_spec many[17];
    for (int i = 0; i < 17; i++) many[i] = one;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_multi_limiter_new(many, 17, NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_multi_limiter_new(dup, 2, NULL, &l));
    spec = one; spec.name = "";
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_multi_limiter_new(&spec, 1, NULL, &l));
    spec = one; spec.name = "\xc3\x28";
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_multi_limiter_new(&spec, 1, NULL, &l));
    spec = one; spec.name = NULL;
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_multi_limiter_new(&spec, 1, NULL, &l));
    spec = one; spec.rate = NULL;
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_multi_limiter_new(&spec, 1, NULL, &l));
    spec = one; spec.rate = "1/s/s";
    CHECK_RC(RATOMIC_INVALID_RATE, ratomic_multi_limiter_new(&spec, 1, NULL, &l));
    spec = one; spec.algorithm = 99;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_multi_limiter_new(&spec, 1, NULL, &l));
    CHECK(l == NULL);

    /* Freeing NULL is fine. */
    ratomic_limiter_free(NULL);
}

static void test_call_errors(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    o.max_key_len = 8;
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_new(5, 1.0, &o, &l));
    CHECK(l != NULL);

    ratomic_decision d = SENTINEL;
    /* NULL limiter / decision / key. */
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow(NULL, KEY("k"), 1, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow(l, KEY("k"), 1, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow(l, NULL, 3, 1, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow_at(NULL, KEY("k"), 1, 0, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_peek(NULL, KEY("k"), 1, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_peek(l, KEY("k"), 1, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_peek_at(l, NULL, 1, 1, 0, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_refund(NULL, KEY("k"), 1));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_refund(l, NULL, 1, 1));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_refund_at(NULL, KEY("k"), 1, 0));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_reset(NULL, KEY("k")));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_reset(l, NULL, 1));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_reset_at(NULL, KEY("k"), 0));
    size_t n = 12345;
    uint64_t t = 12345;
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_key_count(NULL, &n));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_key_count(l, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_limit_count(NULL, &n));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_limit_count(l, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_gc(NULL, &n));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_gc_at(NULL, 0, &n));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_acquire(NULL, KEY("k"), 1, 0, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_acquire(l, KEY("k"), 1, 0, NULL));
    ratomic_limit_info info = {NULL, 77, 77, 77, 77, 7.0};
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_limit_get(NULL, 0, &info));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_limit_get(l, 0, NULL));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_limit_get(l, 1, &info));
    CHECK(info.name == NULL && info.limit == 77);
    uint64_t max = 12345;
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_window_max_limit(RATOMIC_ALGORITHM_FIXED_WINDOW, 1, NULL));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_window_max_limit(RATOMIC_ALGORITHM_TOKEN_BUCKET, 1, &max));
    CHECK(max == 12345);
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_now(NULL, &t));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_now(l, NULL));
    CHECK(n == 12345 && t == 12345 && untouched(&d));

    /* The empty key: NULL is fine when the length is 0. */
    CHECK_OK(ratomic_allow(l, NULL, 0, 1, &d));
    CHECK(d.allowed && d.remaining == 4);

    /* A cost above the limit could never pass: an error, not a denial. */
    d = SENTINEL;
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_allow(l, KEY("k"), 6, &d));
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_peek(l, KEY("k"), 6, &d));
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_allow_at(l, KEY("k"), UINT64_MAX, 0, &d));
    CHECK(untouched(&d));
    /* ... and it changed nothing. */
    CHECK_OK(ratomic_peek(l, KEY("k"), 0, &d));
    CHECK(d.remaining == 5);

    /* Keys over max_key_len (8), whatever the pointer. */
    d = SENTINEL;
    CHECK_RC(RATOMIC_KEY_TOO_LONG, ratomic_allow(l, KEY("123456789"), 1, &d));
    CHECK_RC(RATOMIC_KEY_TOO_LONG, ratomic_allow(l, NULL, SIZE_MAX, 1, &d));
    CHECK_RC(RATOMIC_KEY_TOO_LONG, ratomic_peek(l, KEY("123456789"), 1, &d));
    CHECK_RC(RATOMIC_KEY_TOO_LONG, ratomic_refund(l, KEY("123456789"), 1));
    CHECK_RC(RATOMIC_KEY_TOO_LONG, ratomic_reset(l, KEY("123456789")));
    CHECK(untouched(&d));
    CHECK_OK(ratomic_allow(l, KEY("12345678"), 1, &d)); /* exactly 8 is fine */
    char msg[128];
    CHECK_RC(RATOMIC_KEY_TOO_LONG, ratomic_allow(l, KEY("123456789"), 1, &d));
    CHECK_OK(ratomic_last_error_message(msg, sizeof msg, NULL));
    CHECK(strcmp(msg, "key is 9 bytes long; the limit is 8 bytes (the limiter's max_key_len option)") == 0);

    /* Batches: bad arrays fail; a bad request fails the whole batch (its
     * index from ratomic_last_error_request; see test_contract.c). */
    ratomic_request reqs[4] = {{(const uint8_t *)"a", 1, 1},
                               {(const uint8_t *)"123456789", 9, 1},
                               {(const uint8_t *)"b", 1, 6},
                               {NULL, 1, 1}};
    ratomic_decision ds[4] = {SENTINEL, SENTINEL, SENTINEL, SENTINEL};
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow_many(NULL, reqs, 4, ds));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow_many(l, NULL, 4, ds));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow_many(l, reqs, 4, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow_many_at(l, reqs, 4, 0, NULL));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_allow_many(l, reqs, SIZE_MAX, ds));
    CHECK_OK(ratomic_allow_many(l, NULL, 0, NULL)); /* empty batch */
    CHECK_RC(RATOMIC_INVALID_REQUEST, ratomic_allow_many(l, reqs, 4, ds));
    size_t bad = 99;
    ratomic_result why = RATOMIC_OK;
    CHECK_OK(ratomic_last_error_request(&bad, &why));
    CHECK(bad == 1 && why == RATOMIC_KEY_TOO_LONG);
    for (int i = 0; i < 4; i++) CHECK(untouched(&ds[i]));
    CHECK_OK(ratomic_peek(l, KEY("a"), 0, &d));
    CHECK(d.remaining == 5); /* "a" was not charged */

    /* Detailed calls: NULL pointers and an array too small. */
    ratomic_limit_decision entries[2];
    size_t len = 777;
    d = SENTINEL;
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow_detailed(NULL, KEY("k"), 1, &d, entries, 2, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow_detailed(l, KEY("k"), 1, NULL, entries, 2, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow_detailed(l, KEY("k"), 1, &d, NULL, 2, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_allow_detailed(l, KEY("k"), 1, &d, entries, 2, NULL));
    CHECK_RC(RATOMIC_BUFFER_TOO_SMALL, ratomic_allow_detailed(l, KEY("k"), 1, &d, entries, 0, &len));
    CHECK_RC(RATOMIC_BUFFER_TOO_SMALL, ratomic_peek_detailed(l, KEY("k"), 1, &d, entries, 0, &len));
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_allow_detailed_at(l, KEY("k"), 9, 0, &d, entries, 2, &len));
    CHECK_RC(RATOMIC_KEY_TOO_LONG, ratomic_peek_detailed_at(l, KEY("123456789"), 1, 0, &d, entries, 2, &len));
    CHECK(len == 777 && untouched(&d));

    ratomic_limiter_free(l);
}

int main(void) {
    test_messages_and_version();
    test_last_error_message();
    test_constructor_errors();
    test_call_errors();
    /* RATOMIC_PANIC and RATOMIC_OTHER_ERROR cannot be provoked through the
     * public C API (that is the point of the panic boundary); the Rust unit
     * tests in ffi-c/src/tests.rs drive a panicking clock through every
     * entry point. Their messages are checked above. */
    return finish("test_api");
}
