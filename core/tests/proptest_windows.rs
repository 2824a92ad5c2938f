//! Property tests for the windows and the multi-limit `Limiter`.
//!
//! Differential: each rule against a reference model that keeps the full
//! window number (no packing) and finds `retry_after` / `reset_after` by
//! searching time for the first moment the call would pass / the count is
//! zero, rather than by the closed forms the engine uses. A `Limiter` of
//! random rules against the composition of the models: allowed iff every
//! model allows, then every model is charged.
//!
//! Conformance: a fixed window never grants more than `limit` in one
//! window; a sliding window never more than `limit` in one window nor
//! `2·limit` in any span of one window length.

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use ratomic::{Decision, Error, Eviction, FixedWindow, Limiter, ManualClock, Quota, Rate, Rule, SlidingWindow};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Bucket,
    Fixed,
    Sliding,
}

/// One reference rule: limit `l`, window (or emission interval) `w` ns.
#[derive(Clone, Debug)]
struct Model {
    kind: Kind,
    l: u64,
    w: u64,
    // key -> (window number, prev, cur) for windows; (credit ns, last) for buckets
    state: HashMap<Vec<u8>, (u64, u64, u64)>,
}

impl Model {
    fn new(kind: Kind, l: u64, w: u64) -> Self {
        Model { kind, l, w, state: HashMap::new() }
    }

    /// (prev, cur) counting at time t, for windows.
    fn counts(&self, key: &[u8], t: u64) -> (u64, u64) {
        let w = t / self.w;
        match self.state.get(key) {
            Some(&(sw, p, c)) if sw == w => (if self.kind == Kind::Sliding { p } else { 0 }, c),
            Some(&(sw, _, c)) if self.kind == Kind::Sliding && sw + 1 == w => (c, 0),
            _ => (0, 0),
        }
    }

    /// Room numerator: L·W − prev·(W − offset) − cur·W, for windows.
    fn room(&self, prev: u64, cur: u64, t: u64) -> i128 {
        let w = self.w as i128;
        self.l as i128 * w - prev as i128 * (w - (t % self.w) as i128) - cur as i128 * w
    }

    fn credit(&self, key: &[u8], t: u64) -> u64 {
        let tau = self.l * self.w;
        self.state.get(key).map_or(tau, |&(credit, last, _)| (credit + (t - last)).min(tau))
    }

    fn passes(&self, key: &[u8], t: u64, n: u64) -> bool {
        match self.kind {
            Kind::Bucket => self.credit(key, t) >= n * self.w,
            _ => {
                let (p, c) = self.counts(key, t);
                self.room(p, c + n, t) >= 0
            }
        }
    }

    fn is_zero(&self, key: &[u8], t: u64) -> bool {
        match self.kind {
            Kind::Bucket => self.credit(key, t) == self.l * self.w,
            _ => {
                self.counts(key, t) == (0, 0)
                    || self.room(self.counts(key, t).0, self.counts(key, t).1, t) == (self.l * self.w) as i128
            }
        }
    }

    fn remaining(&self, key: &[u8], t: u64) -> u64 {
        match self.kind {
            Kind::Bucket => self.credit(key, t) / self.w,
            _ => {
                let (p, c) = self.counts(key, t);
                (self.room(p, c, t).max(0) / self.w as i128) as u64
            }
        }
    }

    /// Smallest d in [lo, hi] with f(d), by binary search (f is monotone).
    fn search(lo: u64, hi: u64, f: impl Fn(u64) -> bool) -> u64 {
        let (mut lo, mut hi) = (lo, hi);
        assert!(f(hi), "search bound too small");
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if f(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    fn charge(&mut self, key: &[u8], t: u64, n: u64) {
        if n == 0 {
            return;
        }
        match self.kind {
            Kind::Bucket => {
                let c = self.credit(key, t);
                self.state.insert(key.to_vec(), (c - n * self.w, t, 0));
            }
            _ => {
                let (p, c) = self.counts(key, t);
                self.state.insert(key.to_vec(), (t / self.w, p, c + n));
            }
        }
    }

    /// The decision for `n` at `t`, charging if `consume` and it passes.
    fn decide(&mut self, key: &[u8], t: u64, n: u64, consume: bool) -> Decision {
        let horizon = 3 * self.w * self.l.max(1) + 3 * self.w;
        let ns = Duration::from_nanos;
        if self.passes(key, t, n) {
            let mut after = self.clone();
            after.charge(key, t, n);
            let remaining = after.remaining(key, t);
            let reset = Self::search(0, horizon, |d| after.is_zero(key, t + d));
            if consume {
                *self = after;
            }
            Decision { allowed: true, remaining, limit: self.l, retry_after: Duration::ZERO, reset_after: ns(reset) }
        } else {
            let retry = Self::search(1, horizon, |d| self.passes(key, t + d, n));
            let reset = Self::search(0, horizon, |d| self.is_zero(key, t + d));
            Decision {
                allowed: false,
                remaining: self.remaining(key, t),
                limit: self.l,
                retry_after: ns(retry),
                reset_after: ns(reset),
            }
        }
    }

    fn rule(&self) -> Rule {
        let rate = Rate::new(self.l, Duration::from_nanos(self.l * self.w)).unwrap();
        match self.kind {
            Kind::Bucket => Rule::token_bucket(Quota::from_rate(rate).unwrap()),
            Kind::Fixed => Rule::fixed_window(Rate::new(self.l, Duration::from_nanos(self.w)).unwrap()).unwrap(),
            Kind::Sliding => Rule::sliding_window(Rate::new(self.l, Duration::from_nanos(self.w)).unwrap()).unwrap(),
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    Allow(usize, u64),
    Peek(usize, u64),
}

const KEYS: [&[u8]; 3] = [b"a", b"b", b"c"];

fn ops(max_cost: u64, max_step: u64) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            3 => (0..=max_step).prop_map(Op::Advance),
            5 => (0..KEYS.len(), 0..=max_cost).prop_map(|(k, c)| Op::Allow(k, c)),
            1 => (0..KEYS.len(), 0..=max_cost).prop_map(|(k, c)| Op::Peek(k, c)),
        ],
        1..150,
    )
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::Bucket), Just(Kind::Fixed), Just(Kind::Sliding)]
}

fn window_case() -> impl Strategy<Value = (Kind, u64, u64, Vec<Op>)> {
    (prop_oneof![Just(Kind::Fixed), Just(Kind::Sliding)], 1..=6u64, 32..=200u64)
        .prop_flat_map(|(k, l, w)| (Just(k), Just(l), Just(w), ops(l, 2 * w)))
}

proptest! {
    #[test]
    fn windows_match_the_reference_model((kind, l, w, ops) in window_case()) {
        let clock = ManualClock::starting_at(10_000);
        let rate = Rate::new(l, Duration::from_nanos(w)).unwrap();
        let fixed = FixedWindow::builder(rate).clock(clock.clone()).build().unwrap();
        let sliding = SlidingWindow::builder(rate).clock(clock.clone()).build().unwrap();
        let mut model = Model::new(kind, l, w);
        for op in ops {
            let t = fixed.now();
            let (k, cost, consume) = match op {
                Op::Advance(d) => { clock.advance_nanos(d); continue; }
                Op::Allow(k, c) => (k, c, true),
                Op::Peek(k, c) => (k, c, false),
            };
            let got = match (kind, consume) {
                (Kind::Fixed, true) => fixed.allow_n(KEYS[k], cost),
                (Kind::Fixed, false) => fixed.peek_n(KEYS[k], cost),
                (_, true) => sliding.allow_n(KEYS[k], cost),
                (_, false) => sliding.peek_n(KEYS[k], cost),
            };
            prop_assert_eq!(got, Ok(model.decide(KEYS[k], t, cost, consume)), "{:?} at {}", op, t);
        }
    }

    #[test]
    fn limiter_matches_the_composed_models(
        rules in prop::collection::vec((kind(), 1..=5u64, 32..=100u64), 1..=3),
        steps in ops(5, 300),
    ) {
        let clock = ManualClock::starting_at(10_000);
        let mut models: Vec<Model> = rules.iter().map(|&(k, l, w)| Model::new(k, l, w)).collect();
        let limiter = models.iter().enumerate()
            .fold(Limiter::builder(), |b, (i, m)| b.limit(format!("r{i}"), m.rule()))
            .clock(clock.clone()).build().unwrap();
        let smallest = rules.iter().map(|r| r.1).min().unwrap();
        for op in steps {
            let t = limiter.now();
            let (k, cost, consume) = match op {
                Op::Advance(d) => { clock.advance_nanos(d); continue; }
                Op::Allow(k, c) => (k, c, true),
                Op::Peek(k, c) => (k, c, false),
            };
            let got = if consume { limiter.allow_n(KEYS[k], cost) } else { limiter.peek_n(KEYS[k], cost) };
            if cost > smallest {
                prop_assert_eq!(got.unwrap_err(), Error::CostExceedsLimit { cost, limit: smallest });
                continue;
            }
            let got = got.unwrap();
            let all = models.iter().all(|m| m.passes(KEYS[k], t, cost));
            let expected: Vec<Decision> = models
                .iter_mut()
                .map(|m| {
                    if all || !m.passes(KEYS[k], t, cost) {
                        m.decide(KEYS[k], t, cost, consume && all)
                    } else {
                        // A denied call charges no limit: one that would
                        // have allowed it answers for its state as it stands.
                        m.decide(KEYS[k], t, 0, false)
                    }
                })
                .collect();
            prop_assert_eq!(got.allowed(), all);
            let entries: Vec<Decision> = got.entries().map(|e| e.decision).collect();
            prop_assert_eq!(&entries, &expected, "{:?} at {}", op, t);
            prop_assert_eq!(got.decision.remaining, expected.iter().map(|d| d.remaining).min().unwrap());
        }
    }

    #[test]
    fn windows_never_grant_more_than_their_bound((kind, l, w, ops) in window_case()) {
        let clock = ManualClock::new();
        let rate = Rate::new(l, Duration::from_nanos(w)).unwrap();
        // Three keys, room for two: they keep evicting each other, and the
        // strict policy must still never grant more than a window allows.
        let fixed = FixedWindow::builder(rate).clock(clock.clone()).max_keys(2).eviction(Eviction::Strict);
        let sliding = SlidingWindow::builder(rate).clock(clock.clone()).max_keys(2).eviction(Eviction::Strict);
        let (fixed, sliding) = (fixed.build().unwrap(), sliding.build().unwrap());
        let mut grants: Vec<Vec<(u64, u64)>> = vec![Vec::new(); KEYS.len()];
        for op in ops {
            match op {
                Op::Advance(d) => clock.advance_nanos(d),
                Op::Allow(k, cost) | Op::Peek(k, cost) => {
                    let t = fixed.now();
                    let d = if kind == Kind::Fixed { fixed.allow_n(KEYS[k], cost) } else { sliding.allow_n(KEYS[k], cost) };
                    if d.unwrap().allowed { grants[k].push((t, cost)); }
                }
            }
        }
        for g in &grants {
            let mut per_window: HashMap<u64, u64> = HashMap::new();
            for &(t, c) in g { *per_window.entry(t / w).or_default() += c; }
            prop_assert!(per_window.values().all(|&n| n <= l), "{:?}", per_window);
            if kind == Kind::Sliding {
                for i in 0..g.len() {
                    let span: u64 = g[i..].iter().take_while(|(t, _)| *t < g[i].0 + w).map(|(_, c)| c).sum();
                    prop_assert!(span <= 2 * l);
                }
            }
        }
    }
}
