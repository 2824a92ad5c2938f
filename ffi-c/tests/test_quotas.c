/* ratomic_quotas: token buckets whose quota comes with each call, one
 * bucket per (quota, key). Every answer must equal a token bucket of that
 * quota; every bad call must change nothing. */
#include "common.h"

int main(void) {
    manual_clock clock = {0};
    ratomic_options o = manual_clock_options(&clock);
    o.max_key_len = 8;
    ratomic_quotas *q = NULL;
    ratomic_limiter *ref = NULL;
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_quotas_new(&o, NULL));
    CHECK_OK(ratomic_quotas_new(&o, &q));
    CHECK_OK(ratomic_token_bucket_new(3, 1.0, &o, &ref));

    const ratomic_quota three = {3, 1.0};
    const ratomic_quota ten = {10, 5.0};
    ratomic_decision d, r;

    /* The same answers as a token bucket of the same quota, step by step. */
    for (int i = 0; i < 6; i++) {
        CHECK_OK(ratomic_quotas_allow(q, KEY("k"), &three, 1, &d));
        CHECK_OK(ratomic_allow(ref, KEY("k"), 1, &r));
        CHECK(d.allowed == r.allowed && d.remaining == r.remaining && d.limit == r.limit &&
              d.retry_after_ns == r.retry_after_ns && d.reset_after_ns == r.reset_after_ns);
        manual_clock_advance(&clock, NS_PER_SEC / 4);
    }
    /* Another quota on the same key is another bucket, full. */
    CHECK_OK(ratomic_quotas_allow(q, KEY("k"), &ten, 4, &d));
    CHECK(d.allowed && d.remaining == 6 && d.limit == 10);

    /* Peek, refund, reset. */
    uint64_t now = atomic_load(&clock.now_ns);
    CHECK_OK(ratomic_quotas_peek_at(q, KEY("k"), &ten, 0, now, &d));
    CHECK(d.remaining == 6);
    CHECK_OK(ratomic_quotas_refund_at(q, KEY("k"), &ten, 2, now));
    CHECK_OK(ratomic_quotas_peek(q, KEY("k"), &ten, 0, &d));
    CHECK(d.remaining == 8);
    CHECK_OK(ratomic_quotas_reset_at(q, KEY("k"), &ten, now));
    CHECK_OK(ratomic_quotas_peek_at(q, KEY("k"), &ten, 0, now, &d));
    CHECK(d.remaining == 10);

    /* Bad calls: an error, no state changed, *decision untouched. */
    size_t dropped = 99, held = 99;
    CHECK_OK(ratomic_quotas_gc_at(q, now + 100 * NS_PER_SEC, &dropped, &held));
    CHECK(held == 0);
    ratomic_decision untouched;
    memset(&untouched, 0xAB, sizeof untouched);
    d = untouched;
    const ratomic_quota zero = {0, 1.0};
    const ratomic_quota nan_rate = {3, 0.0 / 0.0};
    const ratomic_quota negative = {3, -1.0};
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_quotas_allow(q, KEY("k"), &zero, 1, &d));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_quotas_allow(q, KEY("k"), &nan_rate, 1, &d));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_quotas_allow(q, KEY("k"), &negative, 1, &d));
    CHECK_RC(RATOMIC_COST_EXCEEDS_LIMIT, ratomic_quotas_allow(q, KEY("k"), &three, 4, &d));
    CHECK_RC(RATOMIC_KEY_TOO_LONG, ratomic_quotas_allow(q, KEY("123456789"), &three, 1, &d));
    CHECK_RC(RATOMIC_INVALID_ARGUMENT, ratomic_quotas_allow_at(q, KEY("k"), &three, 1, RATOMIC_MAX_TIME + 1, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_quotas_allow(NULL, KEY("k"), &three, 1, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_quotas_allow(q, KEY("k"), NULL, 1, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_quotas_allow(q, KEY("k"), &three, 1, NULL));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_quotas_allow(q, NULL, 1, &three, 1, &d));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_quotas_refund_at(q, KEY("k"), NULL, 1, now));
    CHECK_RC(RATOMIC_NULL_ARGUMENT, ratomic_quotas_gc_at(NULL, now, NULL, NULL));
    CHECK(memcmp(&d, &untouched, sizeof d) == 0);
    CHECK_OK(ratomic_quotas_gc_at(q, now, NULL, &held));
    CHECK(held == 0);

    ratomic_quotas_free(q);
    ratomic_quotas_free(NULL);
    ratomic_limiter_free(ref);
    return finish("test_quotas");
}
