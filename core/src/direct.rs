//! A single bucket: one limit for everything, no key lookup.

use std::fmt;

use crate::algorithm::{cas_charge, cas_decide, cas_refund, peek, restore, Algorithm, Charge};
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::Result;
use crate::rate::MAX_NANOS;
use crate::sync::{AtomicU64, Ordering};

/// One limit with one state word: the cheapest limiter there is, for a
/// global limit (all traffic to a backend, one outbound API quota).
///
/// Used through its alias [`DirectTokenBucket`](crate::DirectTokenBucket).
/// Safe to share between threads.
pub struct Direct<A: Algorithm, C: Clock = MonotonicClock> {
    alg: A,
    state: AtomicU64,
    clock: C,
}

impl<A: Algorithm, C: Clock> Direct<A, C> {
    /// A full bucket running `algorithm` on `clock`.
    pub fn with_algorithm(algorithm: A, clock: C) -> Self {
        Direct { alg: algorithm, state: AtomicU64::new(A::PRISTINE), clock }
    }

    /// The algorithm this limiter enforces.
    pub fn algorithm(&self) -> &A {
        &self.alg
    }

    /// The limiter's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The clock's reading now, as the `*_at` methods expect it.
    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.now().min(MAX_NANOS)
    }

    /// The most the bucket can hold.
    pub fn limit(&self) -> u64 {
        self.alg.limit()
    }

    /// Takes one token if there is one.
    #[inline]
    pub fn allow(&self) -> Decision {
        cas_decide(&self.alg, &self.state, self.now(), 1).decision()
    }

    /// Takes `cost` tokens if there are that many. Errors (changing nothing)
    /// if `cost` exceeds the limit.
    #[inline]
    pub fn allow_n(&self, cost: u64) -> Result<Decision> {
        self.allow_at(cost, self.now())
    }

    /// [`allow_n`](Self::allow_n) at time `now`.
    #[inline]
    pub fn allow_at(&self, cost: u64, now: u64) -> Result<Decision> {
        self.alg.check_cost(cost)?;
        Ok(cas_decide(&self.alg, &self.state, now, cost).decision())
    }

    /// What `allow` would answer, changing nothing.
    #[inline]
    pub fn peek(&self) -> Decision {
        peek(&self.alg, &self.state, self.now(), 1).decision()
    }

    /// What `allow_n(cost)` would answer at `now`, changing nothing.
    #[inline]
    pub fn peek_at(&self, cost: u64, now: u64) -> Result<Decision> {
        self.alg.check_cost(cost)?;
        Ok(peek(&self.alg, &self.state, now, cost).decision())
    }

    /// Gives `tokens` back, never filling above full.
    pub fn refund(&self, tokens: u64) {
        self.refund_at(tokens, self.now());
    }

    /// [`refund`](Self::refund) at time `now`.
    pub fn refund_at(&self, tokens: u64, now: u64) {
        cas_refund(&self.alg, &self.state, now, tokens);
    }

    /// Makes the bucket full again.
    pub fn reset(&self) {
        self.state.store(A::PRISTINE, Ordering::Relaxed);
    }
}

impl<A: Algorithm, C: Clock> Direct<A, C> {
    /// A call's charge for a [`Stack`](crate::Stack), with its receipt.
    pub(crate) fn charge_at(&self, cost: u64, now: u64) -> Result<(Decision, Option<Charge>)> {
        self.alg.check_cost(cost)?;
        let (verdict, charge) = cas_charge(&self.alg, &self.state, now, cost);
        Ok((verdict.decision(), charge))
    }

    /// Takes back a charge made by [`charge_at`](Self::charge_at), exactly.
    pub(crate) fn give_back_at(&self, charge: Charge) {
        restore(&self.state, charge);
    }
}

impl<A: Algorithm + fmt::Debug, C: Clock + fmt::Debug> fmt::Debug for Direct<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Direct").field("algorithm", &self.alg).field("clock", &self.clock).finish_non_exhaustive()
    }
}
