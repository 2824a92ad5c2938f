/* ratomic_headers / ratomic_problem_json: HTTP fields and problem bodies,
 * formatted by core; sizing by a NULL buffer; errors touch nothing. */
#include "common.h"

int main(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    ratomic_limiter *tb = NULL;
    CHECK_OK(ratomic_token_bucket_from_rate("2/s", &o, &tb));
    ratomic_decision d;
    char buf[512];
    size_t len = 0;

    CHECK_OK(ratomic_allow(tb, KEY("ip"), 1, &d));
    CHECK_OK(ratomic_headers(tb, "per-ip", &d, NULL, 0, false, buf, sizeof buf, &len));
    CHECK(strcmp(buf, "RateLimit-Policy: \"per-ip\";q=2;w=1\r\nRateLimit: \"per-ip\";r=1;t=1\r\n") == 0);
    CHECK(len == strlen(buf));
    CHECK_OK(ratomic_problem_json(tb, NULL, &d, NULL, 0, buf, sizeof buf, &len));
    CHECK(len == 0 && buf[0] == 0); /* allowed: no problem */

    /* Sizing: NULL buffer, length only; then exactly that much room. */
    CHECK_OK(ratomic_allow(tb, KEY("ip"), 1, &d));
    CHECK_OK(ratomic_allow(tb, KEY("ip"), 1, &d));
    CHECK(!d.allowed);
    size_t need = 0;
    CHECK_OK(ratomic_headers(tb, NULL, &d, NULL, 0, true, NULL, 0, &need));
    char *exact = malloc(need + 1);
    CHECK_OK(ratomic_headers(tb, NULL, &d, NULL, 0, true, exact, need + 1, &len));
    CHECK(len == need);
    CHECK(strstr(exact, "Retry-After: 1\r\n") != NULL);     /* 500 ms, rounded up */
    CHECK(strstr(exact, "X-RateLimit-Remaining: 0\r\n") != NULL);
    CHECK(strstr(exact, "\"default\";r=0") != NULL);
    /* One byte short: an error, the buffer untouched. */
    memset(exact, 'x', need + 1);
    len = 77;
    CHECK_RC(RATOMIC_BUFFER_TOO_SMALL, ratomic_headers(tb, NULL, &d, NULL, 0, true, exact, need, &len));
    CHECK(last_error_has("bytes")); /* about buf, not an entries array */
    CHECK(exact[0] == 'x' && len == 77);
    free(exact);
    CHECK_OK(ratomic_problem_json(tb, "per-ip", &d, NULL, 0, buf, sizeof buf, &len));
    CHECK(strstr(buf, "\"status\":429") != NULL && strstr(buf, "\"violated-policies\":[\"per-ip\"]") != NULL);

    /* A multi-limit limiter: the entries name the limits, and who denied. */
    ratomic_limit_spec limits[2] = {
        {"burst", "2/s", RATOMIC_ALGORITHM_TOKEN_BUCKET},
        {"daily", "100/day", RATOMIC_ALGORITHM_FIXED_WINDOW},
    };
    ratomic_limiter *l = NULL;
    CHECK_OK(ratomic_multi_limiter_new(limits, 2, &o, &l));
    ratomic_limit_decision e[2];
    size_t n = 0;
    CHECK_OK(ratomic_allow_detailed(l, KEY("k"), 2, &d, e, 2, &n));
    CHECK_OK(ratomic_allow_detailed(l, KEY("k"), 1, &d, e, 2, &n));
    CHECK(!d.allowed);
    CHECK_OK(ratomic_headers(l, NULL, &d, e, n, false, buf, sizeof buf, &len));
    CHECK(strstr(buf, "RateLimit-Policy: \"burst\";q=2;w=1, \"daily\";q=100;w=86400\r\n") != NULL);
    CHECK_OK(ratomic_problem_json(l, NULL, &d, e, n, buf, sizeof buf, &len));
    CHECK(strstr(buf, "\"violated-policies\":[\"burst\"]") != NULL);

    /* Errors, nothing written. */
    len = 77;
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_headers(tb, "", &d, NULL, 0, false, buf, sizeof buf, &len));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_headers(tb, "caf\xc3\xa9", &d, NULL, 0, false, buf, sizeof buf, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_headers(NULL, NULL, &d, NULL, 0, false, buf, sizeof buf, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_headers(tb, NULL, NULL, NULL, 0, false, buf, sizeof buf, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_headers(tb, NULL, &d, NULL, 0, false, NULL, 10, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_headers(tb, NULL, &d, NULL, 0, false, buf, sizeof buf, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_headers(l, NULL, &d, NULL, 2, false, buf, sizeof buf, &len));
    ratomic_limit_decision stranger = e[0];
    stranger.name = "hourly";
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_headers(l, NULL, &d, &stranger, 1, false, buf, sizeof buf, &len));
    CHECK(len == 77);

    /* A stack: an item per member, named as the member; a denial charges
     * none, so the other members report what they still have. */
    ratomic_limiter *per_ip = NULL;
    ratomic_direct *global = NULL;
    CHECK_OK(ratomic_token_bucket_from_rate("2/s", &o, &per_ip));
    CHECK_OK(ratomic_direct_token_bucket_from_rate("1000/s", &o, &global));
    ratomic_stack_member members[2] = {{"ip", per_ip, NULL}, {"global", NULL, global}};
    ratomic_stack *s = NULL;
    CHECK_OK(ratomic_stack_new_members(members, 2, &o, &s));
    ratomic_key keys[2] = {{(const uint8_t *)"10.0.0.1", 8}, {NULL, 0}};
    ratomic_limit_decision se[2];
    CHECK_OK(ratomic_stack_allow(s, keys, 2, 1, &d, se, 2, &n));
    CHECK_OK(ratomic_stack_headers(s, &d, se, n, false, buf, sizeof buf, &len));
    CHECK(strcmp(buf, "RateLimit-Policy: \"ip\";q=2;w=1, \"global\";q=1000;w=1\r\n"
                      "RateLimit: \"ip\";r=1;t=1, \"global\";r=999;t=1\r\n") == 0);
    CHECK_OK(ratomic_stack_problem_json(s, &d, se, n, buf, sizeof buf, &len));
    CHECK(len == 0 && buf[0] == 0);
    CHECK_OK(ratomic_stack_allow(s, keys, 2, 1, &d, se, 2, &n));
    CHECK_OK(ratomic_stack_allow(s, keys, 2, 1, &d, se, 2, &n));
    CHECK(!d.allowed);
    CHECK_OK(ratomic_stack_headers(s, &d, se, n, true, buf, sizeof buf, &len));
    CHECK(strstr(buf, "RateLimit: \"ip\";r=0;t=1, \"global\";r=998;t=1\r\nRetry-After: 1\r\n") != NULL);
    CHECK(strstr(buf, "X-RateLimit-Remaining: 0\r\n") != NULL);
    CHECK_OK(ratomic_stack_problem_json(s, &d, se, n, buf, sizeof buf, &len));
    CHECK(strstr(buf, "\"violated-policies\":[\"ip\"]") != NULL);
    len = 77;
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_headers(NULL, &d, se, n, false, buf, sizeof buf, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_headers(s, &d, NULL, 2, false, buf, sizeof buf, &len));
    ratomic_limit_decision stray = se[0];
    stray.name = "user";
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_headers(s, &d, &stray, 1, false, buf, sizeof buf, &len));
    CHECK(last_error_has("member of this stack"));
    CHECK(len == 77);
    /* A multi-limit member has no one policy: an error naming it. */
    ratomic_stack_member with_limiter[2] = {{"ip", per_ip, NULL}, {"user", l, NULL}};
    ratomic_stack *s2 = NULL;
    CHECK_OK(ratomic_stack_new_members(with_limiter, 2, &o, &s2));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_headers(s2, &d, se, n, false, buf, sizeof buf, &len));
    CHECK(last_error_has("\"user\""));
    ratomic_stack_free(s);
    ratomic_stack_free(s2);
    ratomic_direct_free(global);
    ratomic_limiter_free(per_ip);

    ratomic_limiter_free(tb);
    ratomic_limiter_free(l);
    return finish("test_headers");
}
