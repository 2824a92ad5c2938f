//! Property tests for the token bucket.
//!
//! (a) Differential: random sequences of operations over a few keys give
//!     exactly the decisions of a reference model written independently of
//!     GCRA — a classic token bucket holding its credit in nanoseconds, under
//!     a `Mutex<HashMap>`, exact integer arithmetic.
//! (b) Conformance: in any interval of length d, the tokens granted to a key
//!     are ≤ B + d/T, whatever else happens (gc, eviction under max_keys).
//!
//! Case counts: `PROPTEST_CASES` (CI runs a bounded count; run by hand with
//! e.g. `PROPTEST_CASES=20000 cargo test --release --test proptest_token_bucket`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use proptest::prelude::*;
use ratomic::{Decision, Error, Eviction, ManualClock, Quota, Rate, TokenBucket};

/// The reference: per key, `credit` ns of tokens (τ when full) as of `last`.
struct Model {
    b: u64,
    t: u64,
    keys: Mutex<HashMap<Vec<u8>, (u64, u64)>>,
}

impl Model {
    fn tau(&self) -> u64 {
        self.b * self.t
    }

    /// Credit of `key` at `now`, refilled lazily and capped at τ.
    fn credit(&self, keys: &HashMap<Vec<u8>, (u64, u64)>, key: &[u8], now: u64) -> u64 {
        match keys.get(key) {
            None => self.tau(),
            Some(&(credit, last)) => (credit + (now - last)).min(self.tau()),
        }
    }

    fn decide(&self, key: &[u8], cost: u64, now: u64, consume: bool) -> Result<Decision, Error> {
        if cost > self.b {
            return Err(Error::CostExceedsLimit { cost, limit: self.b });
        }
        let mut keys = self.keys.lock().unwrap();
        let credit = self.credit(&keys, key, now);
        let need = cost * self.t;
        let ns = Duration::from_nanos;
        if credit >= need {
            let left = credit - need;
            if consume && cost > 0 {
                keys.insert(key.to_vec(), (left, now));
            }
            Ok(Decision {
                allowed: true,
                remaining: left / self.t,
                limit: self.b,
                retry_after: Duration::ZERO,
                reset_after: ns(self.tau() - left),
            })
        } else {
            Ok(Decision {
                allowed: false,
                remaining: credit / self.t,
                limit: self.b,
                retry_after: ns(need - credit),
                reset_after: ns(self.tau() - credit),
            })
        }
    }

    fn refund(&self, key: &[u8], tokens: u64, now: u64) {
        let mut keys = self.keys.lock().unwrap();
        if keys.contains_key(key) {
            let credit = self.credit(&keys, key, now);
            let back = tokens.saturating_mul(self.t);
            keys.insert(key.to_vec(), (credit.saturating_add(back).min(self.tau()), now));
        }
    }

    fn reset(&self, key: &[u8]) {
        self.keys.lock().unwrap().remove(key);
    }
}

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    Allow(usize, u64),
    Peek(usize, u64),
    Refund(usize, u64),
    Reset(usize),
    Gc,
}

const KEYS: [&[u8]; 4] = [b"a", b"b", b"", b"a-key-long-enough-to-live-on-the-heap"];

fn op(b: u64, t: u64) -> impl Strategy<Value = Op> {
    let key = 0..KEYS.len();
    let cost = 0..=b + 1;
    prop_oneof![
        4 => (0..=3 * t).prop_map(Op::Advance),
        6 => (key.clone(), cost.clone()).prop_map(|(k, c)| Op::Allow(k, c)),
        2 => (key.clone(), cost).prop_map(|(k, c)| Op::Peek(k, c)),
        1 => (key.clone(), 0..=b).prop_map(|(k, n)| Op::Refund(k, n)),
        1 => key.prop_map(Op::Reset),
        1 => Just(Op::Gc),
    ]
}

fn quota_and_ops() -> impl Strategy<Value = (u64, u64, Vec<Op>)> {
    (1..=8u64, 1..=1_000u64).prop_flat_map(|(b, t)| (Just(b), Just(t), prop::collection::vec(op(b, t), 1..200)))
}

/// Runs `ops` (allows and gc only: refunds and resets give tokens back on
/// purpose) on a limiter holding at most `max_keys` keys; every grant per key.
fn run_evicting(b: u64, t: u64, ops: &[Op], max_keys: usize, eviction: Eviction) -> Vec<Vec<(u64, u64)>> {
    let clock = ManualClock::new();
    let limiter =
        TokenBucket::builder(quota(b, t)).clock(clock.clone()).max_keys(max_keys).eviction(eviction).build().unwrap();
    let mut grants: Vec<Vec<(u64, u64)>> = vec![Vec::new(); KEYS.len()];
    for op in ops {
        match *op {
            Op::Advance(ns) => clock.advance_nanos(ns),
            Op::Allow(k, cost) | Op::Peek(k, cost) if cost <= b => {
                let now = limiter.now();
                if limiter.allow_n(KEYS[k], cost).unwrap().allowed {
                    grants[k].push((now, cost));
                }
            }
            Op::Gc => {
                limiter.gc().unwrap();
            }
            _ => {}
        }
    }
    grants
}

/// Whether grants (in stamp order) stay within `B + d/T + slack(a, b)` tokens
/// over every interval `[a, b]` of stamps, `d = b − a`.
fn conforms(g: &[(u64, u64)], b: u64, t: u64, slack: impl Fn(u64, u64) -> u64) -> bool {
    (0..g.len()).all(|i| {
        let mut sum = 0;
        (i..g.len()).all(|j| {
            sum += g[j].1;
            sum * t <= (b + slack(g[i].0, g[j].0)) * t + (g[j].0 - g[i].0)
        })
    })
}

fn quota(b: u64, t: u64) -> Quota {
    // Through a rate so that T is exactly `t` ns.
    Quota::from_rate(Rate::new(b, Duration::from_nanos(b * t)).unwrap()).unwrap()
}

proptest! {
    #[test]
    fn decisions_match_the_reference_model((b, t, ops) in quota_and_ops()) {
        let clock = ManualClock::starting_at(1_000_000);
        let limiter = TokenBucket::builder(quota(b, t)).clock(clock.clone()).shards(1).build().unwrap();
        prop_assert_eq!(limiter.quota().emission_interval_nanos(), t);
        let model = Model { b, t, keys: Mutex::new(HashMap::new()) };
        for op in ops {
            let now = limiter.now();
            match op {
                Op::Advance(ns) => clock.advance_nanos(ns),
                Op::Allow(k, cost) => prop_assert_eq!(limiter.allow_n(KEYS[k], cost), model.decide(KEYS[k], cost, now, true)),
                Op::Peek(k, cost) => prop_assert_eq!(limiter.peek_n(KEYS[k], cost), model.decide(KEYS[k], cost, now, false)),
                Op::Refund(k, n) => {
                    limiter.refund(KEYS[k], n).unwrap();
                    model.refund(KEYS[k], n, now);
                }
                Op::Reset(k) => {
                    limiter.reset(KEYS[k]).unwrap();
                    model.reset(KEYS[k]);
                }
                Op::Gc => {
                    limiter.gc().unwrap();
                }
            }
        }
    }

    #[test]
    fn strict_eviction_never_grants_more_than_burst_plus_rate_times_time(
        (b, t, ops) in quota_and_ops(),
        max_keys in 1..=4usize,
    ) {
        // Small max_keys: keys keep evicting each other. Under the strict
        // policy conformance must hold for every key regardless.
        let grants = run_evicting(b, t, &ops, max_keys, Eviction::Strict);
        for g in &grants {
            prop_assert!(conforms(g, b, t, |_, _| 0), "granted {:?} (B = {}, T = {})", g, b, t);
        }
    }

    #[test]
    fn fair_eviction_over_grants_at_most_a_limit_per_eviction(
        (b, t, ops) in quota_and_ops(),
        max_keys in 1..=4usize,
    ) {
        // Under the fair policy a key evicted before it refilled may come
        // back full (its summary displaced): at most B extra per eviction.
        // An eviction of a key needs another key stored in its place, so
        // over any interval a key's grants stay within B + d/T plus B for
        // each call on another key in that interval — and exactly within
        // B + d/T when no more keys are in use than max_keys holds.
        let grants = run_evicting(b, t, &ops, max_keys, Eviction::Fair);
        let keys_used = grants.iter().filter(|g| !g.is_empty()).count();
        for (k, g) in grants.iter().enumerate() {
            let others = |from: u64, to: u64| -> u64 {
                grants.iter().enumerate().filter(|&(j, _)| j != k)
                    .map(|(_, h)| h.iter().filter(|&&(s, _)| from <= s && s <= to).count() as u64).sum()
            };
            let slack = |from: u64, to: u64| if keys_used <= max_keys { 0 } else { b * others(from, to) };
            prop_assert!(conforms(g, b, t, slack), "key {}: granted {:?} (B = {}, T = {})", k, g, b, t);
        }
    }
}
