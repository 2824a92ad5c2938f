//! `Quotas`: token buckets whose quota comes with each call. Each
//! (quota, key) pair must answer exactly as a `TokenBucket` of that quota
//! would; bad calls change nothing.

use std::time::Duration;

use proptest::prelude::*;
use ratomic::{Error, ManualClock, Quota, Quotas, TokenBucket};

fn quotas() -> Quotas<ManualClock> {
    Quotas::builder().clock(ManualClock::new()).build().unwrap()
}

#[test]
fn each_quota_is_its_own_bucket_on_the_same_key() {
    let l = quotas();
    let small = Quota::parse("2/s").unwrap();
    let big = Quota::parse("5/s").unwrap();
    assert!(l.allow_n("k", &small, 2).unwrap().allowed);
    assert!(!l.allow("k", &small).unwrap().allowed);
    // The same key under another quota has a bucket of its own, full.
    let d = l.allow("k", &big).unwrap();
    assert!(d.allowed);
    assert_eq!((d.remaining, d.limit), (4, 5));
    assert_eq!(l.len(), 2);
    let d = l.peek("k", &small).unwrap();
    assert_eq!((d.allowed, d.retry_after), (false, Duration::from_millis(500)));
}

#[test]
fn refund_reset_gc_and_acquire() {
    let l = quotas();
    let q = Quota::parse("4/s").unwrap();
    assert!(l.allow_n("k", &q, 4).unwrap().allowed);
    l.refund("k", &q, 1).unwrap();
    assert_eq!(l.peek_at("k", &q, 0, 0).unwrap().remaining, 1);
    l.reset("k", &q).unwrap();
    assert_eq!(l.peek_at("k", &q, 0, 0).unwrap().remaining, 4);
    assert!(l.allow_n("k", &q, 4).unwrap().allowed);
    let d = l.acquire("k", &q, 1, None).unwrap();
    assert!(d.allowed);
    assert_eq!(l.now(), 250_000_000, "waited one token on the manual clock");
    l.clock().advance(Duration::from_secs(1));
    assert_eq!(l.gc().unwrap(), 1, "the bucket is full again and dropped");
    assert!(l.is_empty());
}

#[test]
fn bad_calls_are_refused_and_change_nothing() {
    let l = Quotas::builder().clock(ManualClock::new()).max_key_len(8).build().unwrap();
    let q = Quota::parse("3/s").unwrap();
    assert!(matches!(l.allow_n("k", &q, 4), Err(Error::CostExceedsLimit { cost: 4, limit: 3 })));
    assert!(matches!(l.allow("123456789", &q), Err(Error::KeyTooLong { len: 9, max: 8 })));
    assert!(l.allow_at("k", &q, 1, u64::MAX).is_err(), "a time past MAX_TIME");
    assert!(l.is_empty());
    assert_eq!(l.max_key_len(), 8);
    assert!(l.allow("12345678", &q).unwrap().allowed, "a key of exactly max_key_len is fine");
}

proptest! {
    /// Any sequence of calls, each with one of three quotas, on a few keys:
    /// every answer is what a `TokenBucket` of that quota gives for that key.
    #[test]
    fn answers_as_a_token_bucket_per_quota(
        calls in prop::collection::vec((0usize..3, 0u8..4, 0u64..4, 0u64..3_000_000_000, 0u8..10), 1..200)
    ) {
        let specs = [Quota::parse("3/s").unwrap(), Quota::parse("10/2s").unwrap(), Quota::new(4, 0.5).unwrap()];
        let l = quotas();
        let refs: Vec<TokenBucket<[u8], ManualClock>> = specs
            .iter()
            .map(|q| TokenBucket::builder(*q).clock(ManualClock::new()).build().unwrap())
            .collect();
        let mut now = 0u64;
        for (q, key, cost, step, op) in calls {
            now += step;
            let key = [key];
            let cost = cost.min(specs[q].capacity());
            match op {
                0 => {
                    l.refund_at(&key, &specs[q], cost, now).unwrap();
                    refs[q].refund_at(&key, cost, now).unwrap();
                }
                1 => {
                    l.reset_at(&key, &specs[q], now).unwrap();
                    refs[q].reset_at(&key, now).unwrap();
                }
                2 => prop_assert_eq!(l.peek_at(&key, &specs[q], cost, now).unwrap(), refs[q].peek_at(&key, cost, now).unwrap()),
                3 => prop_assert_eq!(l.gc_at(now).is_ok(), refs[q].gc_at(now).is_ok()),
                _ => prop_assert_eq!(l.allow_at(&key, &specs[q], cost, now).unwrap(), refs[q].allow_at(&key, cost, now).unwrap()),
            }
        }
    }
}

#[test]
fn customers_under_their_quota_stay_as_the_store_grows() {
    // A per-customer quota of 1000/s with bursts of 1000 (a window of 1 s):
    // each customer is back under it, its bucket full, when a pass of 0.1 s
    // returns to it. They stay in the store instead of being inserted again
    // at every return; once idle for longer than the window they go at the
    // next growth.
    let clock = ManualClock::new();
    let limiter = Quotas::builder().clock(clock.clone()).build().unwrap();
    let plan = Quota::new(1000, 1000.0).unwrap();
    let customers: Vec<String> = (0..20_000).map(|i| format!("customer:{i}")).collect();
    for _pass in 0..3 {
        for c in &customers {
            assert_eq!(limiter.allow(c, &plan).unwrap().remaining, 999, "full on every return");
            clock.advance_nanos(5_000);
        }
    }
    assert_eq!(limiter.len(), customers.len());
    clock.advance(Duration::from_secs(2));
    for i in 0..40_000 {
        let _ = limiter.allow(&format!("newcomer:{i}"), &plan).unwrap();
        clock.advance_nanos(5_000);
    }
    assert_eq!(limiter.len(), 40_000, "the idle customers are gone, the newcomers stay");
}
