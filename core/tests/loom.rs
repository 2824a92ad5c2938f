//! loom models of every CAS protocol in the engine.
//!
//! Threads read their own clocks: a model gives each thread its own `now`
//! (a thread that read the clock earlier, or a caller of the `*_at` API), so
//! calls stamped out of order race, as they do in production. Assertions
//! are the conformance bound over the grants each model records, or exact
//! outcomes where the model pins them.
//!
//! Run with (CI uses a preemption bound of 2):
//! `RUSTFLAGS="--cfg ratomic_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p ratomic --release --test loom`
#![cfg(ratomic_loom)]

use loom::sync::Arc;
use loom::thread;
use ratomic::{DirectTokenBucket, Gcra, Keyed, MonotonicClock, Options, Quota, Rate, TokenBucket};
use std::time::Duration;

type Bucket = Keyed<Gcra, [u8], MonotonicClock>;

/// A bucket of `b` tokens, one token per 10 ns, one shard, as small as a model needs.
fn bucket(b: u64, max_keys: usize) -> Arc<Bucket> {
    let quota = Quota::from_rate(Rate::new(b, Duration::from_nanos(10 * b)).unwrap()).unwrap();
    Arc::new(
        TokenBucket::with_algorithm(
            Gcra::new(quota),
            MonotonicClock::new(),
            Options::default().shards(1).max_keys(max_keys),
        )
        .unwrap(),
    )
}

fn allowed(l: &Bucket, key: &str, now: u64) -> bool {
    l.allow_at(key, 1, now).unwrap().allowed
}

#[test]
fn concurrent_allows_on_a_new_key_grant_exactly_capacity() {
    loom::model(|| {
        let l = bucket(2, 16);
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let l = l.clone();
                thread::spawn(move || allowed(&l, "k", 0))
            })
            .collect();
        let granted = handles.into_iter().map(|h| h.join().unwrap()).filter(|&a| a).count();
        assert_eq!(granted, 2);
    });
}

#[test]
fn concurrent_allows_on_an_existing_key_grant_exactly_what_is_left() {
    loom::model(|| {
        let l = bucket(3, 16);
        assert!(allowed(&l, "k", 0));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let l = l.clone();
                thread::spawn(move || allowed(&l, "k", 0))
            })
            .collect();
        let granted = handles.into_iter().map(|h| h.join().unwrap()).filter(|&a| a).count();
        assert_eq!(granted, 2);
    });
}

#[test]
fn refund_racing_allow_conserves_tokens() {
    loom::model(|| {
        let l = bucket(1, 16);
        assert!(allowed(&l, "k", 0)); // empty now
        let r = {
            let l = l.clone();
            thread::spawn(move || l.refund_at("k", 1, 0).unwrap())
        };
        let a = {
            let l = l.clone();
            thread::spawn(move || allowed(&l, "k", 0))
        };
        r.join().unwrap();
        let got = a.join().unwrap();
        // Either the allow saw the refunded token (and took it), or it came
        // first, was denied, and the token is still there.
        let left = l.peek_at("k", 0, 0).unwrap().remaining;
        assert_eq!(left, if got { 0 } else { 1 });
    });
}

#[test]
fn reset_racing_allow_is_linearizable() {
    loom::model(|| {
        let l = bucket(1, 16);
        assert!(allowed(&l, "k", 0));
        let r = {
            let l = l.clone();
            thread::spawn(move || l.reset_at("k", 0).unwrap())
        };
        let a = {
            let l = l.clone();
            thread::spawn(move || allowed(&l, "k", 0))
        };
        r.join().unwrap();
        let got = a.join().unwrap();
        let left = l.peek_at("k", 0, 0).unwrap().remaining;
        // allow before reset: denied, then full (1). After: granted, empty (0).
        assert_eq!(left, if got { 0 } else { 1 });
    });
}

#[test]
fn gc_racing_a_stale_allow_never_grants_more() {
    // The key is empty until t = 10. A gc at t = 10 drops it (it is full then)
    // while an allow that read the clock at t = 5 runs: that allow must be
    // denied whether it runs before or after the drop.
    loom::model(|| {
        let l = bucket(1, 16);
        assert!(allowed(&l, "k", 0));
        let g = {
            let l = l.clone();
            thread::spawn(move || l.gc_at(10).unwrap())
        };
        let a = {
            let l = l.clone();
            thread::spawn(move || allowed(&l, "k", 5))
        };
        assert_eq!(g.join().unwrap(), 1);
        assert!(!a.join().unwrap());
        assert!(allowed(&l, "k", 10));
    });
}

#[test]
fn eviction_under_max_keys_racing_allow_never_grants_more() {
    // max_keys = 1: a new key evicts the drained one. The drained key must
    // stay drained whether its allow runs before or after the eviction.
    loom::model(|| {
        let l = bucket(1, 1);
        assert!(allowed(&l, "victim", 0));
        let e = {
            let l = l.clone();
            thread::spawn(move || {
                let _ = l.allow_at("other", 1, 0).unwrap();
            })
        };
        let a = {
            let l = l.clone();
            thread::spawn(move || allowed(&l, "victim", 0))
        };
        e.join().unwrap();
        assert!(!a.join().unwrap());
        assert!(l.len() <= 1);
    });
}

#[test]
fn concurrent_inserts_of_different_keys_lose_nothing() {
    // Two keys inserted concurrently into one shard, forcing a rebuild, while
    // a third key is being charged: every charge lands.
    loom::model(|| {
        let l = bucket(2, 16);
        assert!(allowed(&l, "c", 0));
        let handles: Vec<_> = ["a", "b", "c"]
            .into_iter()
            .map(|k| {
                let l = l.clone();
                thread::spawn(move || allowed(&l, k, 0))
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap());
        }
        for k in ["a", "b"] {
            assert_eq!(l.peek_at(k, 0, 0).unwrap().remaining, 1);
        }
        assert_eq!(l.peek_at("c", 0, 0).unwrap().remaining, 0);
    });
}

#[test]
fn direct_bucket_grants_exactly_capacity() {
    loom::model(|| {
        let quota = Quota::from_rate(Rate::new(2, Duration::from_nanos(20)).unwrap()).unwrap();
        let b = Arc::new(DirectTokenBucket::with_clock(quota, MonotonicClock::new()));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || b.allow_at(1, 0).unwrap().allowed)
            })
            .collect();
        let granted = handles.into_iter().map(|h| h.join().unwrap()).filter(|&a| a).count();
        assert_eq!(granted, 2);
    });
}

fn rule(b: u64) -> ratomic::Rule {
    ratomic::Rule::token_bucket(Quota::from_rate(Rate::new(b, Duration::from_nanos(10 * b)).unwrap()).unwrap())
}

fn limiter(limits: &[(&str, ratomic::Rule)]) -> Arc<ratomic::Limiter<[u8], MonotonicClock>> {
    let b = limits.iter().fold(ratomic::Limiter::builder(), |b, (n, r)| b.limit(*n, *r));
    Arc::new(b.shards(1).build().unwrap())
}

#[test]
fn concurrent_multi_limit_calls_never_over_grant() {
    // a holds 2, b holds 1: whatever the interleaving, exactly one of two
    // calls passes (the one that gets b), and afterwards the limits hold
    // exactly what that one call took.
    loom::model(|| {
        let l = limiter(&[("a", rule(2)), ("b", rule(1))]);
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let l = l.clone();
                thread::spawn(move || l.allow_at("k", 1, 0).unwrap().allowed())
            })
            .collect();
        let granted = handles.into_iter().map(|h| h.join().unwrap()).filter(|&a| a).count();
        assert_eq!(granted, 1);
        let now = l.peek_at("k", 0, 0).unwrap();
        assert_eq!(now.get("a").unwrap().remaining, 1);
        assert_eq!(now.get("b").unwrap().remaining, 0);
    });
}

#[test]
fn a_denied_multi_limit_call_leaves_every_limit_as_it_found_it() {
    // b is drained, so the all-limits call is always denied and must give a
    // back; a call on a alone races with that give-back. It may be denied
    // spuriously (it saw a charged), but a is never over-granted, and once
    // both calls are done a holds exactly what the a-only call took.
    loom::model(|| {
        let l = limiter(&[("a", rule(1)), ("b", rule(1))]);
        let only_b = l.limit_set(&["b"]).unwrap();
        assert!(l.select(only_b).allow_at("k", 1, 0).unwrap().allowed());
        let both = {
            let l = l.clone();
            thread::spawn(move || l.allow_at("k", 1, 0).unwrap().allowed())
        };
        let only_a = {
            let l = l.clone();
            thread::spawn(move || {
                let a = l.limit_set(&["a"]).unwrap();
                l.select(a).allow_at("k", 1, 0).unwrap().allowed()
            })
        };
        assert!(!both.join().unwrap());
        let got = only_a.join().unwrap();
        let a_left = l.peek_at("k", 0, 0).unwrap().get("a").unwrap().remaining;
        assert_eq!(a_left, if got { 0 } else { 1 });
    });
}

#[test]
fn concurrent_stack_calls_never_over_grant_and_give_back_exactly() {
    // Two callers on the same IP (2 tokens) and different users (1 token
    // each, but bob's is already spent): alice can pass, bob never can, and
    // bob's give-back must leave the IP bucket exactly as alice left it.
    loom::model(|| {
        // The stack shares its members through std's Arc (not a sync
        // primitive loom needs to see); the buckets inside are loom's.
        let unwrap = |b: Arc<Bucket>| std::sync::Arc::new(Arc::try_unwrap(b).ok().unwrap());
        let ip = unwrap(bucket(2, 16));
        let user = unwrap(bucket(1, 16));
        assert!(allowed(&user, "bob", 0));
        let stack =
            Arc::new(ratomic::Stack::builder().member("ip", ip.clone()).member("user", user.clone()).build().unwrap());
        let calls: Vec<_> = ["alice", "bob"]
            .into_iter()
            .map(|who| {
                let s = stack.clone();
                thread::spawn(move || s.allow_at(&["1.2.3.4", who], 1, 0).unwrap().allowed())
            })
            .collect();
        let results: Vec<bool> = calls.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(results, [true, false]);
        assert_eq!(ip.peek_at("1.2.3.4", 0, 0).unwrap().remaining, 1);
        assert_eq!(user.peek_at("alice", 0, 0).unwrap().remaining, 0);
    });
}

fn three_callers_on_a_limit_of_two<A: ratomic::Algorithm>(alg: A) {
    let l = Arc::new(
        Keyed::<_, [u8], _>::with_algorithm(alg, MonotonicClock::new(), Options::default().shards(1)).unwrap(),
    );
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let l = l.clone();
            thread::spawn(move || l.allow_at("k", 1, 10).unwrap().allowed)
        })
        .collect();
    assert_eq!(handles.into_iter().map(|h| h.join().unwrap()).filter(|&a| a).count(), 2);
}

#[test]
fn concurrent_fixed_window_calls_grant_exactly_the_limit() {
    let rate = Rate::new(2, Duration::from_nanos(100)).unwrap();
    loom::model(move || three_callers_on_a_limit_of_two(ratomic::FixedWindowCounter::new(rate).unwrap()));
}

#[test]
fn concurrent_sliding_window_calls_grant_exactly_the_limit() {
    let rate = Rate::new(2, Duration::from_nanos(100)).unwrap();
    loom::model(move || three_callers_on_a_limit_of_two(ratomic::SlidingWindowCounter::new(rate).unwrap()));
}

#[test]
fn a_stale_window_call_never_overwrites_a_later_window() {
    // Window 10 ns, limit 1. B counts in window 1 (t = 15); A read the clock
    // in window 0 (t = 5). If B ran first, A is counted in window 1 and
    // denied; either way window 1 holds exactly B's call.
    loom::model(|| {
        let rate = Rate::new(1, Duration::from_nanos(10)).unwrap();
        let l = Arc::new(
            Keyed::<_, [u8], _>::with_algorithm(
                ratomic::FixedWindowCounter::new(rate).unwrap(),
                MonotonicClock::new(),
                Options::default().shards(1),
            )
            .unwrap(),
        );
        let a = {
            let l = l.clone();
            thread::spawn(move || l.allow_at("k", 1, 5).unwrap().allowed)
        };
        let b = {
            let l = l.clone();
            thread::spawn(move || l.allow_at("k", 1, 15).unwrap().allowed)
        };
        let _ = a.join().unwrap();
        assert!(b.join().unwrap());
        assert_eq!(l.peek_at("k", 0, 15).unwrap().remaining, 0);
    });
}

/// Checks the token-bucket bound over `(stamp, cost)` grants: in every
/// interval `[a, b]` of stamps, at most `B + (b − a)/T` tokens.
fn conforms(grants: &[(u64, u64)], burst: u64, t: u64) -> bool {
    grants.iter().all(|&(a, _)| {
        grants.iter().all(|&(b, _)| {
            let inside: u64 = grants.iter().filter(|&&(s, _)| a <= s && s <= b).map(|&(_, c)| c).sum();
            b < a || inside * t <= (b - a) + burst * t
        })
    })
}

#[test]
fn calls_with_their_own_clock_readings_conform() {
    // Burst 2, one token per 10 ns; three calls stamped 0, 14 and 7 race.
    loom::model(|| {
        let l = bucket(2, 16);
        let handles: Vec<_> = [0u64, 14, 7]
            .into_iter()
            .map(|now| {
                let l = l.clone();
                thread::spawn(move || (now, allowed(&l, "k", now)))
            })
            .collect();
        let mut grants: Vec<(u64, u64)> =
            handles.into_iter().map(|h| h.join().unwrap()).filter(|&(_, a)| a).map(|(t, _)| (t, 1)).collect();
        // A fourth call at the latest stamp sees everything before it.
        if allowed(&l, "k", 14) {
            grants.push((14, 1));
        }
        assert!(conforms(&grants, 2, 10), "{grants:?}");
    });
}

/// The give-back race of the adversarial review, as a model: limit `a`
/// (burst 1, T = 10 ns) is charged by a call stamped 0 that limit `b` may
/// then deny (a racing call takes b's one token), while a call subject to
/// `a` alone is stamped 20 — after `a` has refilled, so its `max(TAT, now)`
/// absorbs the first call's charge. Giving that charge back must not erase
/// the second call's: a third call at 20 is then denied.
#[test]
fn a_limiter_give_back_never_erases_a_later_call_s_charge() {
    loom::model(|| {
        let l = limiter(&[("a", rule(1)), ("b", rule(1))]);
        let both = {
            let l = l.clone();
            thread::spawn(move || l.allow_at("k", 1, 0).unwrap().allowed())
        };
        let b_thief = {
            let l = l.clone();
            thread::spawn(move || {
                let b = l.limit_set(&["b"]).unwrap();
                l.select(b).allow_at("k", 1, 0).unwrap().allowed()
            })
        };
        let later = {
            let l = l.clone();
            thread::spawn(move || {
                let a = l.limit_set(&["a"]).unwrap();
                l.select(a).allow_at("k", 1, 20).unwrap().allowed()
            })
        };
        let got_both = both.join().unwrap();
        let got_b = b_thief.join().unwrap();
        let got_later = later.join().unwrap();
        assert!(got_both ^ got_b, "b's one token went to exactly one of them");
        let a = l.limit_set(&["a"]).unwrap();
        let third = l.select(a).allow_at("k", 1, 20).unwrap().allowed();
        let mut grants = vec![];
        if got_both {
            grants.push((0, 1));
        }
        if got_later {
            grants.push((20, 1));
        }
        if third {
            grants.push((20, 1));
        }
        assert!(conforms(&grants, 1, 10), "limit a granted {grants:?}");
    });
}

/// The same race through a [`Stack`]: the IP's bucket is charged first by a
/// call whose user bucket a racing call may drain, while another caller on
/// the IP alone is stamped later.
#[test]
fn a_stack_give_back_never_erases_a_later_call_s_charge() {
    loom::model(|| {
        let unwrap = |b: Arc<Bucket>| std::sync::Arc::new(Arc::try_unwrap(b).ok().unwrap());
        let ip = unwrap(bucket(1, 16));
        let user = unwrap(bucket(1, 16));
        let stack =
            Arc::new(ratomic::Stack::builder().member("ip", ip.clone()).member("user", user.clone()).build().unwrap());
        let call = {
            let s = stack.clone();
            thread::spawn(move || s.allow_at(&["1.2.3.4", "alice"], 1, 0).unwrap().allowed())
        };
        let thief = {
            let user = user.clone();
            thread::spawn(move || allowed(&user, "alice", 0))
        };
        let later = {
            let ip = ip.clone();
            thread::spawn(move || allowed(&ip, "1.2.3.4", 20))
        };
        let (got_call, got_thief, got_later) = (call.join().unwrap(), thief.join().unwrap(), later.join().unwrap());
        assert!(got_call ^ got_thief, "alice's one token went to exactly one of them");
        let third = allowed(&ip, "1.2.3.4", 20);
        let grants: Vec<(u64, u64)> =
            [(got_call, 0), (got_later, 20), (third, 20)].into_iter().filter(|g| g.0).map(|g| (g.1, 1)).collect();
        assert!(conforms(&grants, 1, 10), "the IP granted {grants:?}");
    });
}
