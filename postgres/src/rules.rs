//! Rules as the SQL functions run them: whole microseconds in `bigint`.
//!
//! The in-memory engine counts nanoseconds; the SQL works in whole
//! microseconds (PostgreSQL's own resolution), in 64-bit integers, never in
//! floating point. A rule is converted once, here:
//!
//! - a token bucket's emission interval `T` is rounded **up** to whole
//!   microseconds (at least 1 µs), so the database never refills faster than
//!   the in-memory engine: `"7/s"` (T = 142,857,142 ns) refills one token
//!   every 142,858 µs. Rates whose `T` is whole microseconds decide exactly
//!   as in memory. `B·T` must stay below 2^61 µs.
//! - a window's length must be whole microseconds (every rate string is),
//!   and `limit × window` in µs must stay below 2^61.
//! - times passed to the `*_at` forms are rounded down to whole µs; waits
//!   are whole µs, rounded up where the exact wait is not (the sliding
//!   window's), so a caller who waits them is never early.
//!
//! Beyond those bounds the functions would overflow `bigint`, which
//! PostgreSQL reports as an error rather than wrapping: the bounds make
//! that error unreachable.

use std::time::Duration;

use ratomic::{Algorithm, Error, Rule};

/// Largest `B·T` (µs) of a token bucket.
pub const MAX_TAU_MICROS: u64 = 1 << 61;
/// Largest `limit × window` (µs) of a window.
pub const MAX_WINDOW_PRODUCT: u64 = 1 << 61;

/// One rule in the SQL functions' terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PgRule {
    /// A GCRA token bucket.
    TokenBucket {
        /// `T` in µs, rounded up.
        interval_us: u64,
        /// `B`.
        capacity: u64,
    },
    /// A fixed window counter.
    FixedWindow {
        /// Window length in µs.
        window_us: u64,
        /// Calls per window.
        limit: u64,
    },
    /// A sliding window counter.
    SlidingWindow {
        /// Window length in µs.
        window_us: u64,
        /// Calls per sliding window.
        limit: u64,
    },
}

impl PgRule {
    /// The rule in the SQL functions' terms, or the reason it cannot be run
    /// exactly there (an [`Error::InvalidArgument`] naming the field).
    ///
    /// ```
    /// use ratomic::Rule;
    /// use ratomic_postgres::PgRule;
    ///
    /// let r = PgRule::from_rule(&Rule::parse("10/s")?)?;
    /// assert_eq!(r, PgRule::TokenBucket { interval_us: 100_000, capacity: 10 });
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn from_rule(rule: &Rule) -> Result<Self, Error> {
        match rule {
            Rule::TokenBucket(g) => {
                let q = g.quota();
                let interval_us = q.emission_interval_nanos().div_ceil(1000).max(1);
                let capacity = q.capacity();
                match capacity.checked_mul(interval_us) {
                    Some(tau) if tau <= MAX_TAU_MICROS => Ok(PgRule::TokenBucket { interval_us, capacity }),
                    _ => Err(invalid(
                        "capacity",
                        capacity,
                        "is too large for this refill rate on PostgreSQL: capacity × emission interval must stay \
                         below 2^61 µs",
                    )),
                }
            }
            Rule::FixedWindow(f) => {
                let (window_us, limit) = window(f.window(), f.limit())?;
                Ok(PgRule::FixedWindow { window_us, limit })
            }
            Rule::SlidingWindow(s) => {
                let (window_us, limit) = window(s.window(), s.limit())?;
                Ok(PgRule::SlidingWindow { window_us, limit })
            }
            other => Err(invalid("rule", format!("{other:?}"), "is not supported on PostgreSQL")),
        }
    }

    /// The most a key can hold; the largest cost a call may ask.
    pub fn limit(&self) -> u64 {
        match *self {
            PgRule::TokenBucket { capacity, .. } => capacity,
            PgRule::FixedWindow { limit, .. } | PgRule::SlidingWindow { limit, .. } => limit,
        }
    }

    /// The functions' kind letter and two parameters.
    pub(crate) fn sql_args(&self) -> (char, i64, i64) {
        // Both parameters are below 2^61 (checked in from_rule).
        match *self {
            PgRule::TokenBucket { interval_us, capacity } => ('g', interval_us as i64, capacity as i64),
            PgRule::FixedWindow { window_us, limit } => ('f', window_us as i64, limit as i64),
            PgRule::SlidingWindow { window_us, limit } => ('s', window_us as i64, limit as i64),
        }
    }

    /// How long a key drained by this rule takes to be full again.
    pub fn longest_idle(&self) -> Duration {
        Duration::from_micros(match *self {
            PgRule::TokenBucket { interval_us, capacity } => interval_us * capacity,
            PgRule::FixedWindow { window_us, .. } => window_us,
            PgRule::SlidingWindow { window_us, .. } => 2 * window_us,
        })
    }
}

fn window(window: Duration, limit: u64) -> Result<(u64, u64), Error> {
    let ns = window.as_nanos();
    if ns % 1000 != 0 {
        return Err(invalid("window", format!("{window:?}"), "must be a whole number of microseconds on PostgreSQL"));
    }
    let window_us = u64::try_from(ns / 1000).unwrap_or(u64::MAX);
    match limit.checked_mul(window_us) {
        Some(p) if p <= MAX_WINDOW_PRODUCT => Ok((window_us, limit)),
        _ => Err(invalid(
            "limit",
            limit,
            format!(
                "is too large for a window of {window:?} on PostgreSQL: limit × window must stay below 2^61 µs (at \
                 most {})",
                MAX_WINDOW_PRODUCT / window_us.max(1)
            ),
        )),
    }
}

fn invalid(name: &'static str, value: impl ToString, reason: impl Into<std::borrow::Cow<'static, str>>) -> Error {
    Error::InvalidArgument { name, value: value.to_string(), reason: reason.into() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratomic::{Quota, Rate};

    #[test]
    fn token_bucket_intervals_round_up_to_whole_microseconds() {
        let r = PgRule::from_rule(&Rule::parse("7/s").unwrap()).unwrap();
        assert_eq!(r, PgRule::TokenBucket { interval_us: 142_858, capacity: 7 });
        let r = PgRule::from_rule(&Rule::token_bucket(Quota::new(5, 1e12).unwrap())).unwrap();
        assert_eq!(r, PgRule::TokenBucket { interval_us: 1, capacity: 5 });
    }

    #[test]
    fn windows_of_fractional_microseconds_are_refused_naming_the_field() {
        // The in-memory engine's own bound (capacity·T in 63 bits of ns) is
        // tighter than bigint µs: every bucket it accepts runs here.
        let big = Rule::token_bucket(Quota::new(1 << 20, 1.0 / 8000.0).unwrap());
        assert!(PgRule::from_rule(&big).is_ok());
        let odd = Rule::sliding_window(Rate::new(3, Duration::from_nanos(1500)).unwrap()).unwrap();
        let err = PgRule::from_rule(&odd).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { name: "window", .. }), "{err}");
        // Daily windows far beyond what Lua's doubles allow on Redis.
        assert!(PgRule::from_rule(&Rule::fixed_window(Rate::parse("200000/d").unwrap()).unwrap()).is_ok());
    }
}
