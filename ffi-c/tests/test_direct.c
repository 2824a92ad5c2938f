/* ratomic_direct: one token bucket for all traffic, no key. The token
 * bucket's equations (docs/CONTRACT.md §4.1) on an explicit clock (burst,
 * refill, retry_after, reset_after, cost 0, refund never above full, reset,
 * peek changes nothing); the
 * clock-reading forms and acquire on a manual clock; every error and NULL
 * argument refused with nothing changed and a clear last error; headers and
 * problem bodies as a keyed token bucket's; a direct bucket as a stack
 * member (its key ignored, all or nothing). */
#include <math.h>

#include "common.h"

/* A manual clock whose sleep moves it forward (acquire never sleeps). */
static void manual_sleep(void *user_data, uint64_t ns) {
    manual_clock_advance((manual_clock *)user_data, ns);
}

/* The bucket as it stands at `now`: a cost-0 peek. */
static ratomic_decision state_at(const ratomic_direct *b, uint64_t now) {
    ratomic_decision d;
    memset(&d, 0, sizeof d);
    CHECK_OK(ratomic_direct_peek_at(b, 0, now, &d));
    return d;
}

static int same(ratomic_decision a, ratomic_decision b) {
    return a.allowed == b.allowed && a.remaining == b.remaining && a.limit == b.limit &&
           a.retry_after_ns == b.retry_after_ns && a.reset_after_ns == b.reset_after_ns;
}

#define MS 1000000ull

/* Capacity 5, 10 tokens a second: T = 100 ms, tau = 500 ms. */
static void gcra_equations(void) {
    ratomic_direct *b = NULL;
    CHECK_OK(ratomic_direct_token_bucket_new(5, 10.0, NULL, &b));
    const uint64_t t0 = 7 * NS_PER_SEC, T = 100 * MS;
    ratomic_decision d;

    /* A fresh bucket is full, and passes exactly 5 unit calls in a row. */
    d = state_at(b, t0);
    CHECK(d.allowed && d.remaining == 5 && d.limit == 5 && d.retry_after_ns == 0 && d.reset_after_ns == 0);
    for (uint64_t i = 1; i <= 5; i++) {
        CHECK_OK(ratomic_direct_allow_at(b, 1, t0, &d));
        /* allowed: remaining = floor((tau - (new - now)) / T), reset_after = new - now */
        CHECK(d.allowed && d.remaining == 5 - i && d.limit == 5 && d.retry_after_ns == 0 && d.reset_after_ns == i * T);
    }
    /* denied: retry_after = new - tau - now > 0, reset_after = tat - now */
    CHECK_OK(ratomic_direct_allow_at(b, 1, t0, &d));
    CHECK(!d.allowed && d.remaining == 0 && d.limit == 5 && d.retry_after_ns == T && d.reset_after_ns == 5 * T);
    CHECK_OK(ratomic_direct_allow_at(b, 3, t0, &d));
    CHECK(!d.allowed && d.retry_after_ns == 3 * T && d.reset_after_ns == 5 * T);
    /* A denial writes nothing. */
    CHECK(same(state_at(b, t0), (ratomic_decision){true, 0, 5, 0, 5 * T}));

    /* One ns short of a token: still denied, 1 ns to wait. */
    CHECK_OK(ratomic_direct_allow_at(b, 1, t0 + T - 1, &d));
    CHECK(!d.allowed && d.retry_after_ns == 1 && d.reset_after_ns == 5 * T - (T - 1));
    /* 1 / refill_per_sec later, exactly one token is back. */
    CHECK_OK(ratomic_direct_allow_at(b, 1, t0 + T, &d));
    CHECK(d.allowed && d.remaining == 0 && d.reset_after_ns == 5 * T);
    CHECK_OK(ratomic_direct_allow_at(b, 1, t0 + T, &d));
    CHECK(!d.allowed && d.retry_after_ns == T);

    /* Peek changes nothing, however often it is asked. */
    ratomic_decision p1, p2;
    CHECK_OK(ratomic_direct_peek_at(b, 2, t0 + 3 * T, &p1));
    CHECK(p1.allowed && p1.remaining == 0 && p1.reset_after_ns == 5 * T);
    CHECK_OK(ratomic_direct_peek_at(b, 2, t0 + 3 * T, &p2));
    CHECK(same(p1, p2));
    CHECK_OK(ratomic_direct_peek_at(b, 3, t0 + 3 * T, &p1));
    CHECK(!p1.allowed && p1.retry_after_ns == T);
    CHECK(same(state_at(b, t0 + 3 * T), (ratomic_decision){true, 2, 5, 0, 3 * T}));
    /* Cost 0 answers like a peek and takes nothing. */
    CHECK_OK(ratomic_direct_allow_at(b, 0, t0 + 3 * T, &d));
    CHECK(same(d, (ratomic_decision){true, 2, 5, 0, 3 * T}));

    /* A clock that steps back never grants more. */
    CHECK_OK(ratomic_direct_allow_at(b, 1, t0 - NS_PER_SEC, &d));
    CHECK(!d.allowed && d.remaining == 0 && d.retry_after_ns > 0);

    /* Refund gives tokens back, never above full. */
    const uint64_t t1 = t0 + 3 * T;
    CHECK_OK(ratomic_direct_refund_at(b, 1, t1));
    CHECK(state_at(b, t1).remaining == 3);
    CHECK_OK(ratomic_direct_refund_at(b, 100, t1));
    CHECK(same(state_at(b, t1), (ratomic_decision){true, 5, 5, 0, 0}));
    CHECK_OK(ratomic_direct_allow_at(b, 5, t1, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_direct_allow_at(b, 1, t1, &d));
    CHECK(!d.allowed); /* the refund did not overfill: only 5 were there */

    /* Reset makes it full again. */
    CHECK_OK(ratomic_direct_reset(b));
    CHECK(same(state_at(b, t1), (ratomic_decision){true, 5, 5, 0, 0}));

    /* Fractional refill is never lost: 3 a second, T = 333,333,333 ns. */
    ratomic_direct *f = NULL;
    CHECK_OK(ratomic_direct_token_bucket_new(1, 3.0, NULL, &f));
    CHECK_OK(ratomic_direct_allow_at(f, 1, 0, &d));
    CHECK(d.allowed);
    for (uint64_t i = 1; i <= 30; i++) {
        CHECK_OK(ratomic_direct_allow_at(f, 1, i * 333333333ull - 1, &d));
        CHECK(!d.allowed && d.retry_after_ns == 1);
        CHECK_OK(ratomic_direct_allow_at(f, 1, i * 333333333ull, &d));
        CHECK(d.allowed);
    }

    /* What it enforces, read back. */
    ratomic_limit_info info;
    CHECK_OK(ratomic_direct_limit_get(b, &info));
    CHECK(strcmp(info.name, "token_bucket") == 0 && info.algorithm == RATOMIC_ALGORITHM_TOKEN_BUCKET &&
          info.limit == 5 && info.interval_ns == T && info.period_ns == 5 * T && info.refill_per_sec == 10.0);
    CHECK_OK(ratomic_direct_limit_get(f, &info));
    CHECK(info.limit == 1 && info.interval_ns == 333333333ull && info.refill_per_sec == 3.0);

    ratomic_direct_free(f);
    ratomic_direct_free(b);
}

/* The forms without _at read the options' clock; acquire waits on it. */
static void clock_and_acquire(void) {
    manual_clock clock = {NS_PER_SEC};
    ratomic_options o = manual_clock_options(&clock);
    o.clock_sleep = manual_sleep;
    ratomic_direct *b = NULL;
    CHECK_OK(ratomic_direct_token_bucket_from_rate("2/s", &o, &b)); /* T = 500 ms */
    uint64_t now = 0;
    CHECK_OK(ratomic_direct_now(b, &now));
    CHECK(now == NS_PER_SEC);

    ratomic_decision d;
    CHECK_OK(ratomic_direct_allow(b, 1, &d));
    CHECK(d.allowed && d.remaining == 1 && d.limit == 2);
    CHECK_OK(ratomic_direct_peek(b, 1, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_direct_allow(b, 1, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_direct_allow(b, 1, &d));
    CHECK(!d.allowed && d.retry_after_ns == 500 * MS && d.reset_after_ns == NS_PER_SEC);
    manual_clock_advance(&clock, 500 * MS);
    CHECK_OK(ratomic_direct_allow(b, 1, &d));
    CHECK(d.allowed);
    CHECK_OK(ratomic_direct_refund(b, 1));
    CHECK_OK(ratomic_direct_peek(b, 0, &d));
    CHECK(d.remaining == 1);

    /* acquire: timeout 0 gives the denial without waiting; no timeout
     * waits exactly one interval of the clock's time. */
    CHECK_OK(ratomic_direct_allow(b, 1, &d));
    uint64_t before = atomic_load(&clock.now_ns);
    CHECK_OK(ratomic_direct_acquire(b, 1, 0, &d));
    CHECK(!d.allowed && d.retry_after_ns == 500 * MS && atomic_load(&clock.now_ns) == before);
    CHECK_OK(ratomic_direct_acquire(b, 1, RATOMIC_NO_TIMEOUT, &d));
    CHECK(d.allowed && atomic_load(&clock.now_ns) == before + 500 * MS);
    CHECK_OK(ratomic_direct_acquire(b, 1, 499 * MS, &d));
    CHECK(!d.allowed); /* the next wait (500 ms) would pass the timeout */

    /* A clock past RATOMIC_MAX_TIME: an error, nothing changed. */
    ratomic_decision untouched;
    memset(&untouched, 0xAB, sizeof untouched);
    d = untouched;
    atomic_store(&clock.now_ns, RATOMIC_MAX_TIME + 1);
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_allow(b, 1, &d));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_peek(b, 1, &d));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_acquire(b, 1, 0, &d));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_refund(b, 1));
    now = 42;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_now(b, &now));
    CHECK(now == 42 && memcmp(&d, &untouched, sizeof d) == 0);
    ratomic_direct_free(b);
}

/* Every error and NULL argument: the documented code, a clear message,
 * out-parameters untouched and the bucket unchanged. */
static void errors(void) {
    static char not_a_bucket;
    ratomic_direct *sentinel = (ratomic_direct *)(void *)&not_a_bucket; /* never dereferenced */
    ratomic_direct *b = sentinel;

    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_token_bucket_new(0, 1.0, NULL, &b));
    CHECK(last_error_has("capacity"));
    const double bad_refill[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0, -0.0, -1.0, 1e-300};
    for (size_t i = 0; i < sizeof bad_refill / sizeof bad_refill[0]; i++) {
        CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_token_bucket_new(10, bad_refill[i], NULL, &b));
        CHECK(last_error_has("refill_per_sec"));
    }
    /* capacity x T above 2^63 - 1 ns. */
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_token_bucket_new(UINT64_MAX, 1.0, NULL, &b));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_token_bucket_new(10, 1.0, NULL, NULL));
    CHECK(last_error_has("out must not be NULL"));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_token_bucket_from_rate(NULL, NULL, &b));
    CHECK(last_error_has("rate must not be NULL"));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_token_bucket_from_rate("10/s", NULL, NULL));
    const char *bad_rate[] = {"", "10", "10/x", "0/s", "10/0s", "-1/s", "1.5/s", "\xff/s"};
    for (size_t i = 0; i < sizeof bad_rate / sizeof bad_rate[0]; i++) {
        CHECK_RC(RATOMIC_INVALID_RATE, ratomic_direct_token_bucket_from_rate(bad_rate[i], NULL, &b));
    }
    CHECK_RC(RATOMIC_INVALID_RATE, ratomic_direct_token_bucket_from_rate("10/x", NULL, &b));
    CHECK(last_error_has("\"10/x\""));
    ratomic_options o;
    memset(&o, 0, sizeof o);
    o.eviction = 2; /* no such policy: refused as by every constructor */
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_token_bucket_new(10, 1.0, &o, &b));
    CHECK(last_error_has("eviction"));
    o.eviction = 0;
    o.shared_file = "/run/ratomic-test/never-made";
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_token_bucket_new(10, 1.0, &o, &b));
    CHECK(last_error_has("shared_file"));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_token_bucket_from_rate("10/s", &o, &b));
    CHECK(b == sentinel); /* never written by a failed constructor */
    /* The key store's options do not apply, and are ignored. */
    memset(&o, 0, sizeof o);
    o.max_keys = 1;
    o.max_key_len = (size_t)1 << 40;
    CHECK_OK(ratomic_direct_token_bucket_new(3, 1.0, &o, &b));

    const uint64_t now = NS_PER_SEC;
    ratomic_decision before = state_at(b, now);
    ratomic_decision untouched, d;
    memset(&untouched, 0xAB, sizeof untouched);
    d = untouched;

    /* A cost above the capacity could never pass. */
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_direct_allow_at(b, 4, now, &d));
    CHECK(last_error_has("cost 4 exceeds the limit 3"));
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_direct_allow(b, 4, &d));
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_direct_peek_at(b, UINT64_MAX, now, &d));
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_direct_peek(b, 4, &d));
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_direct_acquire(b, 4, RATOMIC_NO_TIMEOUT, &d));
    /* A time past RATOMIC_MAX_TIME. */
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_allow_at(b, 1, RATOMIC_MAX_TIME + 1, &d));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_peek_at(b, 1, UINT64_MAX, &d));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_refund_at(b, 1, RATOMIC_MAX_TIME + 1));
    /* NULL arguments. */
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_allow(NULL, 1, &d));
    CHECK(last_error_has("direct must not be NULL"));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_allow_at(NULL, 1, now, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_peek(NULL, 1, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_peek_at(NULL, 1, now, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_acquire(NULL, 1, 0, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_refund(NULL, 1));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_refund_at(NULL, 1, now));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_reset(NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_allow(b, 1, NULL));
    CHECK(last_error_has("decision must not be NULL"));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_allow_at(b, 1, now, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_peek(b, 1, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_peek_at(b, 1, now, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_acquire(b, 1, 0, NULL));
    uint64_t t = 42;
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_now(NULL, &t));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_now(b, NULL));
    ratomic_limit_info info;
    memset(&info, 0xAB, sizeof info);
    ratomic_limit_info info_untouched = info;
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_limit_get(NULL, &info));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_limit_get(b, NULL));
    CHECK(t == 42 && memcmp(&info, &info_untouched, sizeof info) == 0);
    CHECK(memcmp(&d, &untouched, sizeof d) == 0);
    /* Nothing above changed the bucket (a NULL decision took nothing). */
    CHECK(same(state_at(b, now), before));

    ratomic_direct_free(b);
    ratomic_direct_free(NULL);
}

/* Headers and problem bodies: as a keyed token bucket's for the same
 * decision, exact strings; sizing; errors touch nothing. */
static void headers(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    ratomic_direct *b = NULL;
    ratomic_limiter *keyed = NULL;
    CHECK_OK(ratomic_direct_token_bucket_from_rate("2/s", &o, &b));
    CHECK_OK(ratomic_token_bucket_from_rate("2/s", &o, &keyed));
    char buf[512], kbuf[512];
    size_t len = 0, klen = 0;
    ratomic_decision d, kd;

    CHECK_OK(ratomic_direct_allow(b, 1, &d));
    CHECK_OK(ratomic_allow(keyed, KEY("k"), 1, &kd));
    CHECK(same(d, kd));
    CHECK_OK(ratomic_direct_headers(b, "global", &d, false, buf, sizeof buf, &len));
    CHECK(strcmp(buf, "RateLimit-Policy: \"global\";q=2;w=1\r\nRateLimit: \"global\";r=1;t=1\r\n") == 0);
    CHECK(len == strlen(buf));
    CHECK_OK(ratomic_direct_headers(b, NULL, &d, false, buf, sizeof buf, &len));
    CHECK(strcmp(buf, "RateLimit-Policy: \"default\";q=2;w=1\r\nRateLimit: \"default\";r=1;t=1\r\n") == 0);
    CHECK_OK(ratomic_direct_problem_json(b, "global", &d, buf, sizeof buf, &len));
    CHECK(len == 0 && buf[0] == 0); /* allowed: no problem */

    CHECK_OK(ratomic_direct_allow(b, 1, &d));
    CHECK_OK(ratomic_direct_allow(b, 1, &d));
    CHECK(!d.allowed && d.retry_after_ns == 500 * MS);
    CHECK_OK(ratomic_allow(keyed, KEY("k"), 1, &kd));
    CHECK_OK(ratomic_allow(keyed, KEY("k"), 1, &kd));
    CHECK(same(d, kd));
    CHECK_OK(ratomic_direct_headers(b, "global", &d, true, buf, sizeof buf, &len));
    CHECK(strcmp(buf,
                 "RateLimit-Policy: \"global\";q=2;w=1\r\n"
                 "RateLimit: \"global\";r=0;t=1\r\n"
                 "Retry-After: 1\r\n"
                 "X-RateLimit-Limit: 2\r\n"
                 "X-RateLimit-Remaining: 0\r\n"
                 "X-RateLimit-Reset: 1\r\n") == 0);
    CHECK_OK(ratomic_headers(keyed, "global", &kd, NULL, 0, true, kbuf, sizeof kbuf, &klen));
    CHECK(strcmp(buf, kbuf) == 0 && len == klen);
    CHECK_OK(ratomic_direct_problem_json(b, "global", &d, buf, sizeof buf, &len));
    CHECK(strcmp(buf,
                 "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\","
                 "\"title\":\"Too Many Requests\",\"status\":429,"
                 "\"detail\":\"Quota exceeded for global; retry after 1 s.\","
                 "\"violated-policies\":[\"global\"],\"retry-after\":1}") == 0);
    CHECK(len == strlen(buf));
    CHECK_OK(ratomic_problem_json(keyed, "global", &kd, NULL, 0, kbuf, sizeof kbuf, &klen));
    CHECK(strcmp(buf, kbuf) == 0);

    /* Sizing: NULL buffer, length only; then exactly that much room. */
    size_t need = 0;
    CHECK_OK(ratomic_direct_headers(b, NULL, &d, true, NULL, 0, &need));
    char *exact = malloc(need + 1);
    CHECK_OK(ratomic_direct_headers(b, NULL, &d, true, exact, need + 1, &len));
    CHECK(len == need && strlen(exact) == need);
    /* One byte short: an error, the buffer untouched. */
    memset(exact, 'x', need + 1);
    len = 77;
    CHECK_RC(RATOMIC_BUFFER_TOO_SMALL, ratomic_direct_headers(b, NULL, &d, true, exact, need, &len));
    char needs[64];
    snprintf(needs, sizeof needs, "needs %zu", need + 1);
    CHECK(last_error_has(needs)); /* the message gives the size needed */
    CHECK(exact[0] == 'x' && len == 77);
    free(exact);
    CHECK_OK(ratomic_direct_problem_json(b, NULL, &d, NULL, 0, &need));
    CHECK(need > 0);
    CHECK_RC(RATOMIC_BUFFER_TOO_SMALL, ratomic_direct_problem_json(b, NULL, &d, buf, need, &len));

    /* Errors, nothing written. */
    len = 77;
    buf[0] = 'x';
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_headers(b, "", &d, false, buf, sizeof buf, &len));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_headers(b, "caf\xc3\xa9", &d, false, buf, sizeof buf, &len));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_problem_json(b, "", &d, buf, sizeof buf, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_headers(NULL, NULL, &d, false, buf, sizeof buf, &len));
    CHECK(last_error_has("direct must not be NULL"));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_headers(b, NULL, NULL, false, buf, sizeof buf, &len));
    CHECK(last_error_has("decision must not be NULL"));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_headers(b, NULL, &d, false, NULL, 10, &len));
    CHECK(last_error_has("buf must not be NULL"));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_headers(b, NULL, &d, false, buf, sizeof buf, NULL));
    CHECK(last_error_has("len must not be NULL"));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_problem_json(NULL, NULL, &d, buf, sizeof buf, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_problem_json(b, NULL, NULL, buf, sizeof buf, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_problem_json(b, NULL, &d, NULL, 10, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_direct_problem_json(b, NULL, &d, buf, sizeof buf, NULL));
    CHECK(len == 77 && buf[0] == 'x');

    ratomic_limiter_free(keyed);
    ratomic_direct_free(b);
}

#define K(s) {(const uint8_t *)(s), sizeof(s) - 1}

/* A direct bucket as a stack member: its key ignored, all or nothing. */
static void stack_member(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    o.clock_sleep = manual_sleep;
    ratomic_limiter *per_ip = NULL;
    ratomic_direct *global = NULL, *other_clock = NULL;
    CHECK_OK(ratomic_token_bucket_from_rate("3/s", &o, &per_ip));
    CHECK_OK(ratomic_direct_token_bucket_from_rate("4/s", &o, &global));
    CHECK_OK(ratomic_direct_token_bucket_from_rate("4/s", NULL, &other_clock)); /* the monotonic clock */

    ratomic_stack_member members[2] = {{"ip", per_ip, NULL}, {"global", NULL, global}};
    ratomic_stack *s = NULL;
    CHECK_OK(ratomic_stack_new_members(members, 2, &o, &s));
    size_t n = 0;
    CHECK_OK(ratomic_stack_member_count(s, &n));
    CHECK(n == 2);

    ratomic_key a[2] = {K("10.0.0.1"), {NULL, 0}};
    ratomic_key b[2] = {K("10.0.0.2"), K("any key at all: ignored")};
    ratomic_decision d, g;
    ratomic_limit_decision e[2];
    size_t len = 0;
    for (uint64_t i = 1; i <= 3; i++) {
        CHECK_OK(ratomic_stack_allow(s, a, 2, 1, &d, e, 2, &len));
        CHECK(d.allowed && len == 2 && strcmp(e[1].name, "global") == 0);
        CHECK(e[0].decision.remaining == 3 - i && e[1].decision.remaining == 4 - i);
    }
    /* The ip is spent: denied by "ip" alone; the global bucket not charged. */
    CHECK_OK(ratomic_stack_allow(s, a, 2, 1, &d, e, 2, &len));
    CHECK(!d.allowed && !e[0].decision.allowed && e[1].decision.allowed);
    CHECK_OK(ratomic_direct_peek(global, 0, &g));
    CHECK(g.remaining == 1);
    /* Another ip, another key for the direct member: the same one bucket. */
    CHECK_OK(ratomic_stack_allow(s, b, 2, 1, &d, e, 2, &len));
    CHECK(d.allowed && e[0].decision.remaining == 2 && e[1].decision.remaining == 0);
    CHECK_OK(ratomic_stack_allow(s, b, 2, 1, &d, e, 2, &len));
    CHECK(!d.allowed && e[0].decision.allowed && !e[1].decision.allowed);
    CHECK(e[1].decision.retry_after_ns == 250 * MS && d.retry_after_ns == 250 * MS);
    ratomic_decision ip;
    CHECK_OK(ratomic_peek(per_ip, KEY("10.0.0.2"), 0, &ip));
    CHECK(ip.remaining == 2); /* not charged for the call "global" denied */
    /* The same bucket is used directly too. */
    CHECK_OK(ratomic_direct_allow(global, 1, &d));
    CHECK(!d.allowed);

    /* Peek changes nothing; refund and reset reach the direct member. */
    CHECK_OK(ratomic_stack_peek_at(s, b, 2, 1, 0, &d, e, 2, &len));
    CHECK(!d.allowed);
    CHECK_OK(ratomic_stack_refund_at(s, b, 2, 1, 0));
    CHECK_OK(ratomic_direct_peek(global, 0, &g));
    CHECK(g.remaining == 1);
    CHECK_OK(ratomic_stack_reset_at(s, b, 2, 0));
    CHECK_OK(ratomic_direct_peek(global, 0, &g));
    CHECK(g.remaining == 4);

    /* Errors: a cost above the direct member's capacity; nothing changed. */
    CHECK_OK(ratomic_stack_allow(s, b, 2, 3, &d, e, 2, &len));
    CHECK(d.allowed);
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_direct_allow(global, 5, &d));
    ratomic_limiter *big = NULL;
    CHECK_OK(ratomic_token_bucket_new(10, 1.0, &o, &big));
    ratomic_stack_member big_first[2] = {{"big", big, NULL}, {"global", NULL, global}};
    ratomic_stack *s2 = NULL;
    CHECK_OK(ratomic_stack_new_members(big_first, 2, &o, &s2));
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_stack_allow(s2, b, 2, 5, &d, e, 2, &len));
    CHECK_OK(ratomic_peek(big, KEY("10.0.0.2"), 0, &ip));
    CHECK(ip.remaining == 10);
    /* acquire waits out the direct member's wait on the manual clock. */
    CHECK_OK(ratomic_stack_acquire(s2, b, 2, 2, RATOMIC_NO_TIMEOUT, &d, e, 2, &len));
    CHECK(d.allowed && atomic_load(&clock.now_ns) == 250 * MS);
    ratomic_stack_free(s2);
    ratomic_limiter_free(big);

    /* Freeing the handle: the stack keeps the bucket alive. */
    ratomic_direct_free(global);
    global = NULL;
    CHECK_OK(ratomic_stack_reset_at(s, a, 2, 250 * MS));
    CHECK_OK(ratomic_stack_allow(s, a, 2, 1, &d, e, 2, &len));
    CHECK(d.allowed && e[1].decision.remaining == 3);

    /* ratomic_stack_new_members with keyed members only is ratomic_stack_new. */
    ratomic_stack_member only_keyed[1] = {{"ip", per_ip, NULL}};
    ratomic_stack *s3 = NULL;
    CHECK_OK(ratomic_stack_new_members(only_keyed, 1, &o, &s3));
    ratomic_key one[1] = {K("10.0.0.9")};
    CHECK_OK(ratomic_stack_allow(s3, one, 1, 1, &d, e, 1, &len));
    CHECK(d.allowed && d.remaining == 2 && len == 1 && strcmp(e[0].name, "ip") == 0);
    ratomic_stack_free(s3);

    /* Building: a member on another clock, both or neither handle, repeated
     * or missing names, NULLs, counts out of range. */
    ratomic_stack *bad = NULL;
    ratomic_direct *d2 = NULL;
    CHECK_OK(ratomic_direct_token_bucket_new(1, 1.0, &o, &d2));
    ratomic_stack_member mixed[2] = {{"ip", per_ip, NULL}, {"global", NULL, other_clock}};
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_new_members(mixed, 2, &o, &bad));
    CHECK(last_error_has("\"global\"") && last_error_has("clock"));
    ratomic_stack_member both[1] = {{"x", per_ip, d2}};
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_new_members(both, 1, &o, &bad));
    CHECK(last_error_has("both"));
    ratomic_stack_member neither[2] = {{"ip", per_ip, NULL}, {"x", NULL, NULL}};
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_new_members(neither, 2, &o, &bad));
    CHECK(last_error_has("members[i].limiter"));
    ratomic_stack_member unnamed[1] = {{NULL, NULL, d2}};
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_new_members(unnamed, 1, &o, &bad));
    CHECK(last_error_has("members[i].name"));
    ratomic_stack_member twice[2] = {{"a", NULL, d2}, {"a", per_ip, NULL}};
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_new_members(twice, 2, &o, &bad));
    ratomic_stack_member empty_name[1] = {{"", NULL, d2}};
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_new_members(empty_name, 1, &o, &bad));
    ratomic_stack_member not_utf8[1] = {{"\xff", NULL, d2}};
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_new_members(not_utf8, 1, &o, &bad));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_new_members(members, 0, &o, &bad));
    ratomic_stack_member many[17];
    char names[17][16];
    for (int i = 0; i < 17; i++) {
        snprintf(names[i], sizeof names[i], "m%d", i);
        many[i] = (ratomic_stack_member){names[i], NULL, d2};
    }
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_new_members(many, 17, &o, &bad));
    CHECK_OK(ratomic_stack_new_members(many, 16, &o, &bad)); /* 16 is the most */
    ratomic_stack_free(bad);
    bad = NULL;
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_new_members(NULL, 2, &o, &bad));
    CHECK(last_error_has("members must not be NULL"));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_new_members(members, 2, &o, NULL));
    CHECK(bad == NULL);

    /* A monotonic direct member with a monotonic stack is fine. */
    ratomic_stack_member mono[1] = {{"global", NULL, other_clock}};
    CHECK_OK(ratomic_stack_new_members(mono, 1, NULL, &bad));
    ratomic_key none[1] = {{NULL, 0}};
    CHECK_OK(ratomic_stack_allow(bad, none, 1, 1, &d, e, 1, &len));
    CHECK(d.allowed && d.remaining == 3 && d.limit == 4);
    ratomic_stack_free(bad);

    ratomic_direct_free(d2);
    ratomic_stack_free(s);
    ratomic_limiter_free(per_ip);
    ratomic_direct_free(other_clock);
}

/* Issue 39: a direct bucket on the coarse clock (options.clock_source),
 * the cheapest decision the library has: exact as on the default clock. */
static void coarse_clock(void) {
    ratomic_options o;
    memset(&o, 0, sizeof o);
    o.clock_source = RATOMIC_CLOCK_COARSE;
    ratomic_direct *b = NULL;
    CHECK_OK(ratomic_direct_token_bucket_new(3, 1.0 / 3600.0, &o, &b)); /* no refill in a test */
    ratomic_decision d;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(ratomic_direct_allow(b, 1, &d));
        CHECK(d.allowed);
    }
    CHECK_OK(ratomic_direct_allow(b, 1, &d));
    CHECK(!d.allowed);
    ratomic_direct_free(b);
    o.clock_source = 2; /* no such clock: refused as by every constructor */
    b = NULL;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_direct_token_bucket_new(3, 1.0, &o, &b));
    CHECK(b == NULL);
}

int main(void) {
    gcra_equations();
    clock_and_acquire();
    errors();
    headers();
    stack_member();
    coarse_clock();
    return finish("test_direct");
}
