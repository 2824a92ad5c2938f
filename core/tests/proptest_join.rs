//! Property tests for the join that forgetting relies on.
//!
//! When the store forgets a key (a full bucket on `gc`, or any key evicted
//! under `max_keys` with the strict policy), it joins the key's state into a
//! summary that a key it no longer holds answers from. That is only safe if
//! the join is at least as restrictive as every state joined into it, at
//! every time a call may still carry — including times *before* the states
//! were written (a thread that read the clock before a concurrent forget, or
//! a caller of the `*_at` API whose times are not monotonic).
//!
//! For every algorithm: two states reached by random calls at random
//! (unordered) times are joined, then asked at random times before, among
//! and after those calls, for random costs. The join never allows a call
//! either state denies, never holds more than either, and is
//! idle (forgettable) whenever both are.

use std::time::Duration;

use proptest::prelude::*;
use ratomic::{Algorithm, FixedWindowCounter, Gcra, Quota, Rate, SlidingWindowCounter};

/// A state reached from a new key by `calls` of `(time, cost)`, in order.
fn reach<A: Algorithm>(alg: &A, calls: &[(u64, u64)]) -> u64 {
    calls.iter().fold(A::PRISTINE, |s, &(t, c)| alg.decide(s, t, c.min(alg.limit())).1.unwrap_or(s))
}

fn never_more_generous<A: Algorithm>(
    alg: &A,
    a: &[(u64, u64)],
    b: &[(u64, u64)],
    probes: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    let (sa, sb) = (reach(alg, a), reach(alg, b));
    let j = alg.join(sa, sb);
    prop_assert_eq!(alg.join(sb, sa), j, "the join is symmetric");
    for &(t, cost) in probes {
        let cost = cost.min(alg.limit());
        let ask = |s| alg.decide(s, t, cost).0.decision();
        let (dj, da, db) = (ask(j), ask(sa), ask(sb));
        prop_assert!(
            !dj.allowed || (da.allowed && db.allowed),
            "join allows cost {} at {}, a state alone does not: a {:?} b {:?} join {:?}",
            cost,
            t,
            da,
            db,
            dj
        );
        // What each holds (a decision's `remaining` is after the cost when
        // allowed, before it when denied, so compare at cost 0).
        let holds = |s| alg.decide(s, t, 0).0.decision().remaining;
        let (hj, ha, hb) = (holds(j), holds(sa), holds(sb));
        prop_assert!(hj <= ha.min(hb), "join holds {} at {}, a state alone {} / {}", hj, t, ha, hb);
        if alg.idle_after(sa, t) == 0 && alg.idle_after(sb, t) == 0 {
            prop_assert_eq!(alg.idle_after(j, t), 0, "both idle at {} but the join is not", t);
        }
    }
    Ok(())
}

/// Calls at random times in `[base, base + span)`, in random order.
fn calls(base: u64, span: u64, max_cost: u64) -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((base..base + span, 0..=max_cost), 0..12)
}

/// Probe times from well before the calls to well after.
fn probes(base: u64, span: u64, max_cost: u64) -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((base.saturating_sub(span)..base + 3 * span, 0..=max_cost), 1..40)
}

const BASE: u64 = 1_000_000;

proptest! {
    #[test]
    fn token_bucket_join_bounds_both_at_every_time(
        (b, t) in (1..=6u64, 1..=50u64),
        a in calls(BASE, 600, 6), c in calls(BASE, 600, 6), p in probes(BASE, 600, 6),
    ) {
        let g = Gcra::new(Quota::from_rate(Rate::new(b, Duration::from_nanos(b * t)).unwrap()).unwrap());
        never_more_generous(&g, &a, &c, &p)?;
    }

    #[test]
    fn fixed_window_join_bounds_both_at_every_time(
        (l, w) in (1..=6u64, 32..=100u64),
        a in calls(BASE, 600, 6), c in calls(BASE, 600, 6), p in probes(BASE, 600, 6),
    ) {
        let f = FixedWindowCounter::new(Rate::new(l, Duration::from_nanos(w)).unwrap()).unwrap();
        never_more_generous(&f, &a, &c, &p)?;
    }

    #[test]
    fn sliding_window_join_bounds_both_at_every_time(
        (l, w) in (1..=6u64, 32..=100u64),
        a in calls(BASE, 600, 6), c in calls(BASE, 600, 6), p in probes(BASE, 600, 6),
    ) {
        let s = SlidingWindowCounter::new(Rate::new(l, Duration::from_nanos(w)).unwrap()).unwrap();
        never_more_generous(&s, &a, &c, &p)?;
    }

    /// A window key idle for any length of time reads as idle: never denied,
    /// and forgettable (the old packing wrapped its window index, so a key
    /// idle past its horizon could read as busy for years).
    #[test]
    fn an_idle_window_key_is_never_denied(
        window_ms in 1..=86_400_000u64,
        fraction in 1..=1000u64,
        start in 0..(1u64 << 40),
        idle in 2..(1u64 << 61),
    ) {
        let window = Duration::from_millis(window_ms);
        let w = window_ms * 1_000_000;
        for (max, sliding) in [(SlidingWindowCounter::max_limit(window), true), (FixedWindowCounter::max_limit(window), false)] {
            let limit = (max / 1000 * fraction).clamp(1, max);
            let rate = Rate::new(limit, window).unwrap();
            let t = (start + idle.saturating_mul(w).min((1 << 62) - 1 - start)).max(start + 2 * w);
            let (remaining, idle_after) = if sliding {
                let s = SlidingWindowCounter::new(rate).unwrap();
                let state = s.decide(0, start, limit).1.unwrap();
                (s.decide(state, t, 0).0.decision().remaining, s.idle_after(state, t))
            } else {
                let f = FixedWindowCounter::new(rate).unwrap();
                let state = f.decide(0, start, limit).1.unwrap();
                (f.decide(state, t, 0).0.decision().remaining, f.idle_after(state, t))
            };
            prop_assert_eq!((remaining, idle_after), (limit, 0), "limit {} per {:?}, asked at {}", limit, window, t);
        }
    }
}
