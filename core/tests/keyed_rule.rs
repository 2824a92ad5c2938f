//! `Keyed<Rule>`, the one limiter type for a rule chosen at run time (what
//! every face uses), answers exactly as the `Keyed` of the algorithm inside
//! the rule: the same decisions, errors and refunds, call for call, at any
//! times (going back included), in batches (the rule's side through the
//! verdicts the C ABI takes) and in a `Stack`.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use ratomic::{
    Algorithm, FixedWindowCounter, Gcra, Keyed, ManualClock, Options, Quota, Rate, Rule, SlidingWindowCounter, Stack,
};

#[derive(Clone, Debug)]
enum Op {
    Allow(u8, u64),
    Peek(u8, u64),
    Refund(u8, u64),
    Reset(u8),
    Many(Vec<(u8, u64)>),
    Stack(u8, u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, 0u64..6).prop_map(|(k, c)| Op::Allow(k, c)),
        1 => (0u8..4, 0u64..6).prop_map(|(k, c)| Op::Peek(k, c)),
        1 => (0u8..4, 0u64..6).prop_map(|(k, c)| Op::Refund(k, c)),
        1 => (0u8..4).prop_map(Op::Reset),
        1 => prop::collection::vec((0u8..4, 0u64..6), 0..5).prop_map(Op::Many),
        1 => (0u8..4, 0u64..6).prop_map(|(k, c)| Op::Stack(k, c)),
    ]
}

fn key(k: u8) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

/// Runs `ops` (each at its time) on `Keyed<Rule>` and on `Keyed<A>`, which
/// must enforce the same rule, and compares every answer.
fn same_answers<A: Algorithm + Copy>(rule: Rule, alg: A, ops: &[(u64, Op)]) {
    let clock = ManualClock::new();
    let options = Options::default().max_keys(64);
    let dynamic = Arc::new(Keyed::with_algorithm(rule, clock.clone(), options.clone()).unwrap());
    let typed = Arc::new(Keyed::with_algorithm(alg, clock.clone(), options).unwrap());
    let d_stack = Stack::builder().member("m", dynamic.clone()).clock(clock.clone()).build().unwrap();
    let t_stack = Stack::builder().member("m", typed.clone()).clock(clock.clone()).build().unwrap();
    for (now, op) in ops {
        let now = *now;
        match op {
            Op::Allow(k, c) => {
                assert_eq!(dynamic.allow_at(&key(*k), *c, now), typed.allow_at(&key(*k), *c, now), "{op:?}")
            }
            Op::Peek(k, c) => {
                assert_eq!(dynamic.peek_at(&key(*k), *c, now), typed.peek_at(&key(*k), *c, now), "{op:?}")
            }
            Op::Refund(k, c) => {
                assert_eq!(dynamic.refund_at(&key(*k), *c, now), typed.refund_at(&key(*k), *c, now), "{op:?}")
            }
            Op::Reset(k) => assert_eq!(dynamic.reset_at(&key(*k), now), typed.reset_at(&key(*k), now), "{op:?}"),
            Op::Many(requests) => {
                let keys: Vec<_> = requests.iter().map(|(k, c)| (key(*k), *c)).collect();
                let (mut d, mut t) = (Vec::new(), Vec::new());
                // The rule's side through the verdicts the C ABI writes (the
                // same batch, answered in nanoseconds); the typed side
                // through `allow_many_at`.
                let d_result = dynamic.allow_many_verdicts_at(keys.iter().map(|(k, c)| (k.as_slice(), *c)), now, |v| {
                    d.push(v.decision())
                });
                let t_result = typed.allow_many_at(keys.iter().map(|(k, c)| (k.as_slice(), *c)), now, &mut t);
                assert_eq!((d_result, d), (t_result, t), "{op:?}");
            }
            Op::Stack(k, c) => {
                let (d, t) = (d_stack.allow_at(&[key(*k)], *c, now), t_stack.allow_at(&[key(*k)], *c, now));
                assert_eq!(d.map(|d| d.decision), t.map(|d| d.decision), "{op:?}");
            }
        }
    }
}

/// Times mostly moving forward, sometimes back.
fn timed_ops() -> impl Strategy<Value = Vec<(u64, Op)>> {
    prop::collection::vec((0u64..3_000, any::<bool>(), op()), 1..60).prop_map(|steps| {
        let mut now = 1_000_000u64;
        steps
            .into_iter()
            .map(|(step, back, op)| {
                now = if back { now.saturating_sub(step) } else { now + step * 1_000 };
                (now, op)
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn token_bucket_rule_answers_as_gcra(capacity in 1u64..6, interval in 1u64..5_000_000, ops in timed_ops()) {
        let quota = Quota::from_rate(Rate::new(capacity, Duration::from_nanos(capacity * interval)).unwrap()).unwrap();
        same_answers(Rule::token_bucket(quota), Gcra::new(quota), &ops);
    }

    #[test]
    fn fixed_window_rule_answers_as_its_counter(limit in 1u64..6, window in 1u64..5_000_000, ops in timed_ops()) {
        let rate = Rate::new(limit, Duration::from_nanos(window)).unwrap();
        // As for the sliding window below: a window of 1-3 ns holds too few counts.
        match (Rule::fixed_window(rate), FixedWindowCounter::new(rate)) {
            (Ok(rule), Ok(counter)) => same_answers(rule, counter, &ops),
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "the rule and the counter disagree on {rate:?}: {a:?} vs {b:?}"),
        }
    }

    #[test]
    fn sliding_window_rule_answers_as_its_counter(limit in 1u64..6, window in 1u64..5_000_000, ops in timed_ops()) {
        let rate = Rate::new(limit, Duration::from_nanos(window)).unwrap();
        // A window of a few ns holds fewer counts than `limit` in its packing
        // (29 ns: at most 3): the rule and the counter refuse it alike.
        match (Rule::sliding_window(rate), SlidingWindowCounter::new(rate)) {
            (Ok(rule), Ok(counter)) => same_answers(rule, counter, &ops),
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "the rule and the counter disagree on {rate:?}: {a:?} vs {b:?}"),
        }
    }
}
