//! One rule of several: the algorithms a [`Limiter`](crate::Limiter) can mix.

use crate::algorithm::gcra::Gcra;
use crate::algorithm::window::{FixedWindowCounter, SlidingWindowCounter};
use crate::algorithm::{sealed, Algorithm};
use crate::decision::Verdict;
use crate::error::{Error, Result};
use crate::quota::Quota;
use crate::rate::Rate;

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
    /// A GCRA token bucket.
    TokenBucket(Gcra),
    /// A fixed window counter.
    FixedWindow(FixedWindowCounter),
    /// A sliding window counter.
    SlidingWindow(SlidingWindowCounter),
}

impl Rule {
    /// A token bucket for `quota`.
    ///
    /// ```
    /// use ratomic::{Algorithm, Quota, Rule};
    ///
    /// let rule = Rule::token_bucket(Quota::per_second(10)?.with_burst(20)?);
    /// assert_eq!(rule.limit(), 20);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn token_bucket(quota: Quota) -> Self {
        Rule::TokenBucket(Gcra::new(quota))
    }

    /// A fixed window: `rate.count()` per `rate.period()`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::{Algorithm, Rate, Rule};
    ///
    /// let rule = Rule::fixed_window(Rate::parse("1000/d")?)?;
    /// assert_eq!((rule.limit(), rule.window()), (1000, Duration::from_secs(86_400)));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn fixed_window(rate: Rate) -> Result<Self> {
        Ok(Rule::FixedWindow(FixedWindowCounter::new(rate)?))
    }

    /// A sliding window: `rate.count()` per `rate.period()`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::{Algorithm, Rate, Rule};
    ///
    /// let rule = Rule::sliding_window(Rate::parse("100/h")?)?;
    /// assert_eq!((rule.limit(), rule.window()), (100, Duration::from_secs(3600)));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn sliding_window(rate: Rate) -> Result<Self> {
        Ok(Rule::SlidingWindow(SlidingWindowCounter::new(rate)?))
    }

    /// A token bucket from a rate string: `"10/s"` is a burst of 10 refilled
    /// over a second.
    ///
    /// ```
    /// use ratomic::{Quota, Rule};
    ///
    /// assert_eq!(Rule::parse("10/s")?, Rule::token_bucket(Quota::parse("10/s")?));
    /// assert!(Rule::parse("10/fortnight").is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn parse(rate: &str) -> Result<Self> {
        Ok(Rule::token_bucket(Quota::parse(rate)?))
    }
}

/// Several limits in one string, in the notation of Python's `limits`
/// (slowapi, Flask-Limiter): `"10/second;1000/day"`, separated by `;`, `,`
/// or `|`. Each is a token bucket (as [`Rule::parse`]) named by its rate
/// string as written, trimmed — the names a [`Limiter`](crate::Limiter)
/// reports its limits by. Empty pieces are skipped; a string with no rate,
/// a rate that does not parse (the error quotes that rate) or the same name
/// twice is an error.
///
/// ```
/// use ratomic::{parse_limits, Limiter, Rule};
///
/// let limits = parse_limits("10/second; 1000 per day")?;
/// assert_eq!(limits, vec![("10/second".to_owned(), Rule::parse("10/s")?), ("1000 per day".to_owned(), Rule::parse("1000/d")?)]);
/// let limiter = Limiter::new(limits)?;
/// assert_eq!(limiter.names().collect::<Vec<_>>(), ["10/second", "1000 per day"]);
/// assert!(parse_limits("10/s;10/s").is_err());
/// # Ok::<(), ratomic::Error>(())
/// ```
pub fn parse_limits(input: &str) -> Result<Vec<(String, Rule)>> {
    let mut limits: Vec<(String, Rule)> = Vec::new();
    for piece in input.split([';', ',', '|']).map(str::trim).filter(|p| !p.is_empty()) {
        if limits.iter().any(|(name, _)| name == piece) {
            return Err(Error::invalid("limits", format!("{input:?}"), format!("{piece:?} is given twice")));
        }
        limits.push((piece.to_owned(), Rule::parse(piece)?));
    }
    if limits.is_empty() {
        return Err(Error::InvalidRate { input: input.to_owned(), reason: "no rate in it" });
    }
    Ok(limits)
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

/// The rule with its unit: `token bucket 10 per 1s`, `fixed window 5 per
/// 60ms`, `sliding window 100 per 1h`.
///
/// ```
/// use ratomic::{Quota, Rate, Rule};
///
/// assert_eq!(Rule::parse("10/s")?.to_string(), "token bucket 10 per 1s");
/// assert_eq!(Rule::token_bucket(Quota::parse("10/s")?.with_burst(50)?).to_string(), "token bucket 50 per 5s");
/// assert_eq!(Rule::parse("3/s")?.to_string(), "token bucket 3 per 1s"); // T = 333,333,333 ns
/// assert_eq!(Rule::token_bucket(Quota::new(10, 3.0)?).to_string(), "token bucket 10, refill 3/s");
/// assert_eq!(Rule::token_bucket(Quota::new(2, 0.25)?).to_string(), "token bucket 2 per 8s");
/// assert_eq!(Rule::token_bucket(Quota::new(1, 1e-9)?).to_string(), "token bucket 1 per 1000000000s");
/// assert_eq!(Rule::fixed_window(Rate::parse("5/60ms")?)?.to_string(), "fixed window 5 per 60ms");
/// assert_eq!(Rule::sliding_window(Rate::parse("100 per hour")?)?.to_string(), "sliding window 100 per 1h");
/// # Ok::<(), ratomic::Error>(())
/// ```
impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        dispatch!(self, a => a.fmt(f))
    }
}

impl sealed::Sealed for Rule {}

impl Rule {
    /// [`Algorithm::decide`], always inlined, for the multi-limit charge
    /// loop: out of line, its answer comes back through memory and that
    /// loop read it back wider than it was written, a stalled store forward
    /// (a two-limit call took 48 ns instead of 38). Not the default: in the
    /// single-rule call the faces make, inlining it everywhere cost 3 ns.
    #[inline(always)]
    pub(crate) fn decide_inlined(&self, state: u64, now: u64, cost: u64) -> (Verdict, Option<u64>) {
        dispatch!(self, a => a.decide(state, now, cost))
    }
}

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
        self.decide_inlined(state, now, cost)
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

#[cfg(test)]
mod tests {
    use super::parse_limits;
    use crate::error::Error;

    #[test]
    fn parse_limits_quotes_what_is_wrong() {
        match parse_limits("10/s; 5/fortnight") {
            Err(Error::InvalidRate { input, .. }) => assert_eq!(input, "5/fortnight"),
            other => panic!("{other:?}"),
        }
        for empty in ["", " ; ,|"] {
            let err = parse_limits(empty).unwrap_err().to_string();
            assert!(err.contains("no rate in it"), "{err}");
        }
        let err = parse_limits("10/s,10/s").unwrap_err().to_string();
        assert_eq!(err, r#"invalid limits: "10/s,10/s" ("10/s" is given twice)"#);
        let three = parse_limits("10/second|100 per minute,;1000/day").unwrap();
        assert_eq!(
            three.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["10/second", "100 per minute", "1000/day"]
        );
    }
}
