/* ratomic_stack: limiters on different keys, all or nothing, naming who
 * denied; refund, reset and acquire; members kept alive by the stack; every
 * bad call refused with nothing changed. */
#include "common.h"

/* A manual clock whose sleep moves it forward (acquire never sleeps). */
static void manual_sleep(void *user_data, uint64_t ns) {
    manual_clock_advance((manual_clock *)user_data, ns);
}

#define K(s) {(const uint8_t *)(s), sizeof(s) - 1}

int main(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    o.clock_sleep = manual_sleep;
    ratomic_limiter *per_ip = NULL, *per_user = NULL, *other_clock = NULL;
    CHECK_OK(ratomic_token_bucket_from_rate("3/s", &o, &per_ip));
    CHECK_OK(ratomic_fixed_window_new(2, NS_PER_SEC, &o, &per_user));
    CHECK_OK(ratomic_token_bucket_from_rate("3/s", NULL, &other_clock)); /* the monotonic clock */

    const char *names[2] = {"ip", "user"};
    const ratomic_limiter *members[2] = {per_ip, per_user};
    ratomic_stack *s = NULL;
    CHECK_OK(ratomic_stack_new(names, members, 2, &o, &s));
    size_t n = 0;
    CHECK_OK(ratomic_stack_member_count(s, &n));
    CHECK(n == 2);

    /* Each member's rules, by name, in order; the length asked first. */
    const char *described = "ip: token bucket 3 per 1s; user: fixed window 2 per 1s";
    char text[256];
    size_t need = 0, got = 0;
    CHECK_OK(ratomic_stack_describe(s, NULL, 0, &need));
    CHECK(need == strlen(described));
    CHECK_OK(ratomic_stack_describe(s, text, need + 1, &got));
    CHECK(got == need && strcmp(text, described) == 0);
    CHECK_RC(RATOMIC_BUFFER_TOO_SMALL, ratomic_stack_describe(s, text, need, &got));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_describe(NULL, text, sizeof text, &got));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_describe(s, text, sizeof text, NULL));

    /* A member with several limits is shown in brackets; a direct bucket as
     * ratomic_direct_describe shows it. */
    ratomic_limiter *two = NULL;
    ratomic_direct *global = NULL;
    CHECK_OK(ratomic_multi_limiter_from_rates("2/s; 1000/day", &o, &two));
    CHECK_OK(ratomic_direct_token_bucket_from_rate("100/s", &o, &global));
    ratomic_stack_member three[3] = {
        {.name = "ip", .limiter = per_ip}, {.name = "user", .limiter = two}, {.name = "global", .direct = global}};
    ratomic_stack *with_direct = NULL;
    CHECK_OK(ratomic_stack_new_members(three, 3, &o, &with_direct));
    CHECK_OK(ratomic_stack_describe(with_direct, text, sizeof text, &got));
    CHECK(strcmp(text, "ip: token bucket 3 per 1s; user: [2/s: token bucket 2 per 1s, 1000/day: token bucket 1000 "
                       "per 1d]; global: token bucket 100 per 1s") == 0);
    ratomic_stack_free(with_direct);
    ratomic_limiter_free(two);
    ratomic_direct_free(global);

    /* The stack holds its members: freeing a handle leaves the stack whole. */
    ratomic_limiter_free(per_user);
    per_user = NULL;

    ratomic_key keys[2] = {K("10.0.0.1"), K("alice")};
    ratomic_decision d;
    ratomic_limit_decision e[2];
    size_t len = 0;
    CHECK_OK(ratomic_stack_allow(s, keys, 2, 1, &d, e, 2, &len));
    CHECK(d.allowed && len == 2 && strcmp(e[0].name, "ip") == 0 && strcmp(e[1].name, "user") == 0);
    CHECK(e[0].decision.remaining == 2 && e[1].decision.remaining == 1);
    CHECK_OK(ratomic_stack_allow(s, keys, 2, 1, &d, e, 2, &len));
    CHECK(d.allowed);

    /* The user's window is spent: the call is denied, by "user" alone, and
     * the ip bucket is not charged for it. */
    CHECK_OK(ratomic_stack_allow(s, keys, 2, 1, &d, e, 2, &len));
    CHECK(!d.allowed && !e[1].decision.allowed && e[0].decision.allowed);
    ratomic_decision ip;
    CHECK_OK(ratomic_peek(per_ip, KEY("10.0.0.1"), 0, &ip));
    CHECK(ip.remaining == 1);

    /* Peek changes nothing; refund and reset reach every member. */
    uint64_t now = atomic_load(&clock.now_ns);
    CHECK_OK(ratomic_stack_peek_at(s, keys, 2, 1, now, &d, e, 2, &len));
    CHECK(!d.allowed);
    CHECK_OK(ratomic_stack_refund_at(s, keys, 2, 1, now));
    CHECK_OK(ratomic_peek(per_ip, KEY("10.0.0.1"), 0, &ip));
    CHECK(ip.remaining == 2);
    CHECK_OK(ratomic_stack_allow_at(s, keys, 2, 1, now, &d, e, 2, &len));
    CHECK(d.allowed);
    CHECK_OK(ratomic_stack_reset_at(s, keys, 2, now));
    CHECK_OK(ratomic_peek(per_ip, KEY("10.0.0.1"), 0, &ip));
    CHECK(ip.remaining == 3);

    /* acquire waits out the user's window on the manual clock. */
    CHECK_OK(ratomic_stack_allow(s, keys, 2, 2, &d, e, 2, &len));
    CHECK(d.allowed);
    CHECK_OK(ratomic_stack_acquire(s, keys, 2, 1, 0, &d, e, 2, &len));
    CHECK(!d.allowed); /* timeout 0: the denial, without waiting */
    CHECK(atomic_load(&clock.now_ns) == now);
    CHECK_OK(ratomic_stack_acquire(s, keys, 2, 1, RATOMIC_NO_TIMEOUT, &d, e, 2, &len));
    CHECK(d.allowed && atomic_load(&clock.now_ns) == NS_PER_SEC);

    /* Bad calls: an error, outputs untouched. */
    ratomic_decision untouched;
    memset(&untouched, 0xAB, sizeof untouched);
    d = untouched;
    len = 77;
    ratomic_key one[1] = {K("x")};
    ratomic_key null_key[2] = {{NULL, 3}, K("alice")};
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_allow(s, one, 1, 1, &d, e, 2, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_allow(s, null_key, 2, 1, &d, e, 2, &len));
    CHECK_RC(RATOMIC_BUFFER_TOO_SMALL, ratomic_stack_allow(s, keys, 2, 1, &d, e, 1, &len));
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_stack_allow(s, keys, 2, 3, &d, e, 2, &len));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_allow_at(s, keys, 2, 1, RATOMIC_MAX_TIME + 1, &d, e, 2, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_allow(NULL, keys, 2, 1, &d, e, 2, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_allow(s, NULL, 2, 1, &d, e, 2, &len));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_allow(s, keys, 2, 1, NULL, e, 2, &len));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_refund_at(s, one, 1, 1, now));
    CHECK(memcmp(&d, &untouched, sizeof d) == 0 && len == 77);
    CHECK_OK(ratomic_peek(per_ip, KEY("10.0.0.1"), 0, &ip));
    CHECK(ip.remaining == 2); /* only the acquire's charge */

    /* Building: a member on another clock, repeated names, NULLs. */
    ratomic_stack *bad = NULL;
    const ratomic_limiter *mixed[2] = {per_ip, other_clock};
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_new(names, mixed, 2, &o, &bad));
    const char *same[2] = {"a", "a"};
    const ratomic_limiter *twice[2] = {per_ip, per_ip};
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_new(same, twice, 2, &o, &bad));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_stack_new(names, members, 0, &o, &bad));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_new(NULL, members, 2, &o, &bad));
    const ratomic_limiter *with_null[2] = {per_ip, NULL};
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_new(names, with_null, 2, &o, &bad));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_stack_new(names, members, 2, &o, NULL));
    CHECK(bad == NULL);

    /* Monotonic members with a monotonic stack are fine. */
    const char *solo[1] = {"global"};
    const ratomic_limiter *mono[1] = {other_clock};
    CHECK_OK(ratomic_stack_new(solo, mono, 1, NULL, &bad));
    ratomic_stack_free(bad);

    ratomic_stack_free(s);
    ratomic_stack_free(NULL);
    ratomic_limiter_free(per_ip);
    ratomic_limiter_free(other_clock);
    return finish("test_stack");
}
