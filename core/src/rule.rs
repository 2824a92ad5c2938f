//! One rule of several: the algorithms a [`Limiter`](crate::Limiter) can mix.

use crate::algorithm::{sealed, Algorithm};
use crate::decision::Verdict;
use crate::error::Result;
use crate::gcra::Gcra;
use crate::quota::Quota;
use crate::rate::Rate;
use crate::window::{FixedWindowCounter, SlidingWindowCounter};

/// A rate-limiting rule: any of the algorithms, as one type, so a
/// [`Limiter`](crate::Limiter) can hold a token bucket and a window side by
/// side on the same key.
///
/// ```
/// use ratomic::{Quota, Rate, Rule};
///
/// let burst = Rule::token_bucket(Quota::parse("10/s")?);
/// let daily = Rule::fixed_window(Rate::parse("1000/d")?)?;
/// let hourly = Rule::sliding_window(Rate::parse("100/h")?)?;
/// assert_eq!(Rule::parse("10/s")?, burst); // a bare rate string is a token bucket
/// # let _ = (daily, hourly);
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Rule {
    /// A GCRA token bucket (SPEC §4.1).
    TokenBucket(Gcra),
    /// A fixed window counter (SPEC §4.2).
    FixedWindow(FixedWindowCounter),
    /// A sliding window counter (SPEC §4.3).
    SlidingWindow(SlidingWindowCounter),
}

impl Rule {
    /// A token bucket for `quota`.
    pub fn token_bucket(quota: Quota) -> Self {
        Rule::TokenBucket(Gcra::new(quota))
    }

    /// A fixed window: `rate.count()` per `rate.period()`.
    pub fn fixed_window(rate: Rate) -> Result<Self> {
        Ok(Rule::FixedWindow(FixedWindowCounter::new(rate)?))
    }

    /// A sliding window: `rate.count()` per `rate.period()`.
    pub fn sliding_window(rate: Rate) -> Result<Self> {
        Ok(Rule::SlidingWindow(SlidingWindowCounter::new(rate)?))
    }

    /// A token bucket from a rate string: `"10/s"` is a burst of 10 refilled
    /// over a second.
    pub fn parse(rate: &str) -> Result<Self> {
        Ok(Rule::token_bucket(Quota::parse(rate)?))
    }
}

impl From<Quota> for Rule {
    fn from(quota: Quota) -> Self {
        Rule::token_bucket(quota)
    }
}

impl From<Gcra> for Rule {
    fn from(g: Gcra) -> Self {
        Rule::TokenBucket(g)
    }
}

impl From<FixedWindowCounter> for Rule {
    fn from(f: FixedWindowCounter) -> Self {
        Rule::FixedWindow(f)
    }
}

impl From<SlidingWindowCounter> for Rule {
    fn from(s: SlidingWindowCounter) -> Self {
        Rule::SlidingWindow(s)
    }
}

macro_rules! dispatch {
    ($self:ident, $a:ident => $e:expr) => {
        match $self {
            Rule::TokenBucket($a) => $e,
            Rule::FixedWindow($a) => $e,
            Rule::SlidingWindow($a) => $e,
        }
    };
}

impl sealed::Sealed for Rule {}

impl Algorithm for Rule {
    // Every algorithm's pristine state is 0 (checked below).
    const PRISTINE: u64 = 0;

    #[inline]
    fn limit(&self) -> u64 {
        dispatch!(self, a => a.limit())
    }

    fn window(&self) -> std::time::Duration {
        dispatch!(self, a => Algorithm::window(a))
    }

    #[inline]
    fn decide(&self, state: u64, now: u64, cost: u64) -> (Verdict, Option<u64>) {
        dispatch!(self, a => a.decide(state, now, cost))
    }

    #[inline]
    fn refund(&self, state: u64, now: u64, tokens: u64) -> Option<u64> {
        dispatch!(self, a => a.refund(state, now, tokens))
    }

    #[inline]
    fn idle_after(&self, state: u64, now: u64) -> u64 {
        dispatch!(self, a => a.idle_after(state, now))
    }

    #[inline]
    fn join(&self, a: u64, b: u64) -> u64 {
        dispatch!(self, r => r.join(a, b))
    }
}

const _: () = assert!(
    Gcra::PRISTINE == Rule::PRISTINE
        && FixedWindowCounter::PRISTINE == Rule::PRISTINE
        && SlidingWindowCounter::PRISTINE == Rule::PRISTINE
);
