/* What a C user reads: each error's message, pinned word for word (it names
 * the parameter as the header spells it, the value as given and what is
 * accepted); limiters that print their rule with its unit
 * (ratomic_describe); and limiters made from one limits-style string
 * (ratomic_multi_limiter_from_rates). */
#include "common.h"

/* The call returns `code` and leaves exactly `message` as this thread's
 * last error. */
#define CHECK_MESSAGE(code, message, call)                                   \
    do {                                                                     \
        CHECK_RC(code, call);                                                \
        CHECK(last_error_is(message));                                       \
    } while (0)

static int last_error_is(const char *expected) {
    char msg[1024];
    size_t len = 0;
    CHECK_OK(ratomic_last_error_message(msg, sizeof msg, &len));
    if (strcmp(msg, expected) == 0 && len == strlen(expected)) return 1;
    fprintf(stderr, "last error:\n  \"%s\"\nexpected:\n  \"%s\"\n", msg, expected);
    return 0;
}

/* ratomic_describe into a buffer that fits, with the length asked first. */
static int describes_as(const ratomic_limiter *l, const char *expected) {
    size_t need = 0, len = 0;
    char buf[256];
    CHECK_OK(ratomic_describe(l, NULL, 0, &need));
    CHECK(need == strlen(expected) && need < sizeof buf);
    CHECK_OK(ratomic_describe(l, buf, need + 1, &len));
    if (len == need && strcmp(buf, expected) == 0) return 1;
    fprintf(stderr, "described as \"%s\", expected \"%s\"\n", buf, expected);
    return 0;
}

static void null_pointers_name_the_parameter(void) {
    ratomic_limiter *l = NULL;
    ratomic_decision d;
    CHECK_MESSAGE(RATOMIC_NULL_ARGUMENT, "out must not be NULL", ratomic_token_bucket_new(10, 1.0, NULL, NULL));
    CHECK_MESSAGE(RATOMIC_NULL_ARGUMENT, "rate must not be NULL", ratomic_token_bucket_from_rate(NULL, NULL, &l));
    CHECK_MESSAGE(RATOMIC_NULL_ARGUMENT, "limits must not be NULL", ratomic_multi_limiter_from_rates(NULL, NULL, &l));
    CHECK_MESSAGE(RATOMIC_NULL_ARGUMENT, "limiter must not be NULL", ratomic_allow(NULL, KEY("k"), 1, &d));
    CHECK_OK(ratomic_token_bucket_new(10, 1.0, NULL, &l));
    CHECK_MESSAGE(RATOMIC_NULL_ARGUMENT, "decision must not be NULL", ratomic_allow(l, KEY("k"), 1, NULL));
    CHECK_MESSAGE(RATOMIC_NULL_ARGUMENT, "key must not be NULL", ratomic_allow(l, NULL, 3, 1, &d));
    size_t len = 99;
    CHECK_MESSAGE(RATOMIC_NULL_ARGUMENT, "len must not be NULL", ratomic_describe(l, NULL, 0, NULL));
    CHECK_MESSAGE(RATOMIC_NULL_ARGUMENT, "buf must not be NULL", ratomic_describe(l, NULL, 8, &len));
    CHECK(len == 99);
    ratomic_limiter_free(l);
}

static void arguments_out_of_range_name_the_parameter_value_and_range(void) {
    ratomic_limiter *l = NULL;
    CHECK_MESSAGE(RATOMIC_INVALID_ARGUMENT, "invalid capacity: 0 (must be at least 1)",
                  ratomic_token_bucket_new(0, 1.0, NULL, &l));
    CHECK_MESSAGE(RATOMIC_INVALID_ARGUMENT,
                  "invalid refill_per_sec: -1.5 (must be a finite number greater than 0)",
                  ratomic_token_bucket_new(10, -1.5, NULL, &l));
    CHECK_MESSAGE(RATOMIC_INVALID_ARGUMENT, "invalid limit: 0 (must be at least 1)",
                  ratomic_fixed_window_new(0, NS_PER_SEC, NULL, &l));
    CHECK_MESSAGE(RATOMIC_INVALID_ARGUMENT,
                  "invalid window_ns: 0 (a window's length in nanoseconds must be from 1 to 2^63 − 1)",
                  ratomic_sliding_window_new(5, 0, NULL, &l));
    CHECK_MESSAGE(RATOMIC_INVALID_ARGUMENT,
                  "invalid window_ns: 18446744073709551615 (a window's length in nanoseconds must be from 1 to "
                  "2^63 − 1)",
                  ratomic_fixed_window_new(5, UINT64_MAX, NULL, &l));
    CHECK_MESSAGE(RATOMIC_INVALID_ARGUMENT,
                  "invalid limit: 40000 (is too large for a sliding window of 1s: at most 32767 (a window's whole "
                  "index and two counts share 64 bits); use a longer window, a fixed window or a token bucket)",
                  ratomic_sliding_window_new(40000, NS_PER_SEC, NULL, &l));
    uint64_t max = 0;
    CHECK_MESSAGE(RATOMIC_INVALID_ARGUMENT,
                  "unknown algorithm: 7 (expected RATOMIC_ALGORITHM_TOKEN_BUCKET (0), "
                  "RATOMIC_ALGORITHM_FIXED_WINDOW (1) or RATOMIC_ALGORITHM_SLIDING_WINDOW (2))",
                  ratomic_window_max_limit(7, NS_PER_SEC, &max));
    ratomic_options o;
    memset(&o, 0, sizeof o);
    o.eviction = 9;
    CHECK_MESSAGE(RATOMIC_INVALID_ARGUMENT,
                  "unknown eviction: 9 (expected RATOMIC_EVICTION_FAIR (0) or RATOMIC_EVICTION_STRICT (1))",
                  ratomic_token_bucket_new(10, 1.0, &o, &l));
    CHECK(l == NULL && max == 0);

    memset(&o, 0, sizeof o);
    o.max_key_len = 8;
    CHECK_OK(ratomic_token_bucket_new(10, 1.0, &o, &l));
    ratomic_decision d;
    CHECK_MESSAGE(RATOMIC_KEY_TOO_LONG, "key is 10 bytes long; the limit is 8 bytes (the limiter's max_key_len option)",
                  ratomic_allow(l, KEY("0123456789"), 1, &d));
    CHECK_MESSAGE(RATOMIC_COST_EXCEEDS_LIMIT, "cost 11 exceeds the limit 10: this call could never be allowed",
                  ratomic_allow(l, KEY("k"), 11, &d));
    CHECK_MESSAGE(RATOMIC_INVALID_ARGUMENT,
                  "invalid now_ns: 4611686018427387904 (must be at most RATOMIC_MAX_TIME, 2^62 − 1 ns (about 146 "
                  "years after the clock's zero))",
                  ratomic_allow_at(l, KEY("k"), 1, RATOMIC_MAX_TIME + 1, &d));
    ratomic_limit_info info;
    CHECK_MESSAGE(RATOMIC_INVALID_ARGUMENT, "invalid index: 1 (must be below 1, this limiter's number of limits)",
                  ratomic_limit_get(l, 1, &info));
    char small[4];
    size_t len = 99;
    /* "token bucket 10 per 10s": 10 tokens at 1 a second. */
    CHECK_MESSAGE(RATOMIC_BUFFER_TOO_SMALL, "buf holds 4 bytes; the text with its NUL needs 24",
                  ratomic_describe(l, small, sizeof small, &len));
    CHECK(len == 99);
    CHECK(describes_as(l, "token bucket 10 per 10s"));
    ratomic_limiter_free(l);
}

static void rate_strings_quote_the_input_and_say_what_is_accepted(void) {
    ratomic_limiter *l = NULL;
    CHECK_MESSAGE(RATOMIC_INVALID_RATE,
                  "invalid rate \"10/fortnight\": unknown unit (use ms, s/sec/second, m/min/minute, h/hr/hour, "
                  "d/day, month (30 days) or year (360 days), plurals accepted, words in any letter case; or ns, "
                  "us) (expected \"<count>/<period>\" or \"<count> per <period>\", e.g. \"10/s\", \"100/min\", "
                  "\"3/250ms\", \"5 per minute\")",
                  ratomic_token_bucket_from_rate("10/fortnight", NULL, &l));
    CHECK_RC(RATOMIC_INVALID_RATE, ratomic_fixed_window_from_rate("0/s", NULL, &l));
    CHECK(last_error_has("invalid rate \"0/s\": the count must be at least 1"));
    CHECK_RC(RATOMIC_INVALID_RATE, ratomic_sliding_window_from_rate("99999999999999999999/s", NULL, &l));
    CHECK(last_error_has("the count is too large (at most 18446744073709551615)"));
    /* Several rates are one multi-limit limiter's, and the message says so. */
    CHECK_RC(RATOMIC_INVALID_RATE, ratomic_token_bucket_from_rate("10/s;1000/day", NULL, &l));
    CHECK(last_error_has("this is several rates"));
    CHECK(l == NULL);
}

static void limiters_print_their_rule_with_its_unit(void) {
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_token_bucket_from_rate("10/s", NULL, &l));
    CHECK(describes_as(l, "token bucket 10 per 1s"));
    ratomic_limiter_free(l);
    /* A burst of 50 refilled at 10 a second is full again after 5 s. */
    CHECK_OK(ratomic_token_bucket_new(50, 10.0, NULL, &l));
    CHECK(describes_as(l, "token bucket 50 per 5s"));
    ratomic_limiter_free(l);
    CHECK_OK(ratomic_fixed_window_new(5, 60 * 1000 * 1000, NULL, &l)); /* 60 ms in ns */
    CHECK(describes_as(l, "fixed window 5 per 60ms"));
    ratomic_limiter_free(l);
    CHECK_OK(ratomic_sliding_window_from_rate("100 per hour", NULL, &l));
    CHECK(describes_as(l, "sliding window 100 per 1h"));
    ratomic_limiter_free(l);
    ratomic_limit_spec two[2] = {{"burst", "10/s", RATOMIC_ALGORITHM_TOKEN_BUCKET},
                                 {"daily", "1000/day", RATOMIC_ALGORITHM_FIXED_WINDOW}};
    CHECK_OK(ratomic_multi_limiter_new(two, 2, NULL, &l));
    CHECK(describes_as(l, "burst: token bucket 10 per 1s; daily: fixed window 1000 per 1d"));
    ratomic_limiter_free(l);

    ratomic_direct *b = NULL;
    CHECK_OK(ratomic_direct_token_bucket_from_rate("5 per minute", NULL, &b));
    char buf[64];
    size_t len = 0;
    CHECK_OK(ratomic_direct_describe(b, buf, sizeof buf, &len));
    CHECK(strcmp(buf, "token bucket 5 per 1m") == 0 && len == strlen(buf));
    CHECK_MESSAGE(RATOMIC_NULL_ARGUMENT, "direct must not be NULL", ratomic_direct_describe(NULL, buf, sizeof buf, &len));
    ratomic_direct_free(b);
}

static void a_limits_string_makes_a_multi_limit_limiter(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_multi_limiter_from_rates(" 4/second; 6 per minute ", &o, &l));
    size_t count = 0;
    CHECK_OK(ratomic_limit_count(l, &count));
    CHECK(count == 2);
    /* Each limit is named by its rate as written, trimmed. */
    ratomic_limit_info info;
    CHECK_OK(ratomic_limit_get(l, 0, &info));
    CHECK(strcmp(info.name, "4/second") == 0 && info.algorithm == RATOMIC_ALGORITHM_TOKEN_BUCKET &&
          info.limit == 4 && info.period_ns == NS_PER_SEC);
    CHECK_OK(ratomic_limit_get(l, 1, &info));
    CHECK(strcmp(info.name, "6 per minute") == 0 && info.limit == 6 && info.period_ns == 60 * NS_PER_SEC);
    CHECK(describes_as(l, "4/second: token bucket 4 per 1s; 6 per minute: token bucket 6 per 1m"));

    /* All or nothing: 4 pass at once, the 5th is denied by the burst. */
    ratomic_decision d;
    ratomic_limit_decision e[2];
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_OK(ratomic_allow(l, KEY("ip"), 1, &d));
        CHECK(d.allowed);
    }
    CHECK_OK(ratomic_allow_detailed(l, KEY("ip"), 1, &d, e, 2, &n));
    CHECK(!d.allowed && n == 2 && !e[0].decision.allowed && e[1].decision.allowed);
    CHECK(strcmp(e[0].name, "4/second") == 0);
    /* A second later the burst is back but only 2 of the minute's 6 remain. */
    manual_clock_advance(&clock, NS_PER_SEC);
    CHECK_OK(ratomic_allow(l, KEY("ip"), 2, &d));
    CHECK(d.allowed && d.remaining == 0);
    CHECK_OK(ratomic_allow_detailed(l, KEY("ip"), 1, &d, e, 2, &n));
    CHECK(!d.allowed && e[0].decision.allowed && !e[1].decision.allowed);
    CHECK(strcmp(e[1].name, "6 per minute") == 0);
    ratomic_limiter_free(l);

    /* Separators ',' and '|' as limits accepts; one rate makes one limit. */
    CHECK_OK(ratomic_multi_limiter_from_rates("1/s, 2/m | 3/h", NULL, &l));
    CHECK_OK(ratomic_limit_count(l, &count));
    CHECK(count == 3);
    ratomic_limiter_free(l);
    CHECK_OK(ratomic_multi_limiter_from_rates("10/s", NULL, &l));
    CHECK_OK(ratomic_limit_count(l, &count));
    CHECK(count == 1);
    CHECK(describes_as(l, "token bucket 10 per 1s"));
    ratomic_limiter_free(l);

    /* The most limits a limiter holds (16) decide calls: a full limit set
     * once overflowed the set check. */
    CHECK_OK(ratomic_multi_limiter_from_rates(
        "2/s;3/s;4/s;5/s;6/s;7/s;8/s;9/s;10/s;11/s;12/s;13/s;14/s;15/s;16/s;17/s", NULL, &l));
    CHECK_OK(ratomic_limit_count(l, &count));
    CHECK(count == 16);
    CHECK_OK(ratomic_allow(l, KEY("k"), 2, &d));
    CHECK(d.allowed && d.remaining == 0 && d.limit == 2);
    CHECK_OK(ratomic_allow(l, KEY("k"), 1, &d));
    CHECK(!d.allowed);
    ratomic_limiter_free(l);
}

static void a_bad_limits_string_is_refused_with_its_reason(void) {
    ratomic_limiter *l = NULL;
    CHECK_RC(RATOMIC_INVALID_RATE, ratomic_multi_limiter_from_rates("10/second;1000/fortnight", NULL, &l));
    CHECK(last_error_has("invalid rate \"1000/fortnight\": unknown unit"));
    CHECK_MESSAGE(RATOMIC_INVALID_RATE,
                  "invalid rate \" ; \": no rate in it (expected \"<count>/<period>\" or \"<count> per "
                  "<period>\", e.g. \"10/s\", \"100/min\", \"3/250ms\", \"5 per minute\")",
                  ratomic_multi_limiter_from_rates(" ; ", NULL, &l));
    CHECK_MESSAGE(RATOMIC_INVALID_ARGUMENT, "invalid limits: \"10/s;10/s\" (\"10/s\" is given twice)",
                  ratomic_multi_limiter_from_rates("10/s;10/s", NULL, &l));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT,
             ratomic_multi_limiter_from_rates("1/s;2/s;3/s;4/s;5/s;6/s;7/s;8/s;9/s;10/s;11/s;12/s;13/s;14/s;15/s;"
                                              "16/s;17/s",
                                              NULL, &l));
    CHECK(last_error_has("holds 17 rates; a multi-limit limiter holds between 1 and 16"));
    /* RATOMIC_MAX_LIMITS is that bound: 16 rates make a limiter. */
    CHECK(RATOMIC_MAX_LIMITS == 16);
    CHECK_OK(ratomic_multi_limiter_from_rates("1/s;2/s;3/s;4/s;5/s;6/s;7/s;8/s;9/s;10/s;11/s;12/s;13/s;14/s;15/s;16/s",
                                              NULL, &l));
    size_t count = 0;
    CHECK_OK(ratomic_limit_count(l, &count));
    CHECK(count == RATOMIC_MAX_LIMITS);
    ratomic_limiter_free(l);
    l = NULL;
    CHECK_MESSAGE(RATOMIC_INVALID_RATE, "limits is not valid UTF-8",
                  ratomic_multi_limiter_from_rates("10/s;\xff", NULL, &l));
    CHECK_MESSAGE(RATOMIC_NULL_ARGUMENT, "out must not be NULL",
                  ratomic_multi_limiter_from_rates("10/s", NULL, NULL));
    CHECK(l == NULL);
}

int main(void) {
    null_pointers_name_the_parameter();
    arguments_out_of_range_name_the_parameter_value_and_range();
    rate_strings_quote_the_input_and_say_what_is_accepted();
    limiters_print_their_rule_with_its_unit();
    a_limits_string_makes_a_multi_limit_limiter();
    a_bad_limits_string_is_refused_with_its_reason();
    return finish("test_messages");
}
