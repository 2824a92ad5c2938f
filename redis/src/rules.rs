//! Rules as the script runs them: whole microseconds, every value exact in
//! a Lua double.
//!
//! The in-memory engine counts nanoseconds in 64-bit integers; Lua numbers
//! are doubles, exact only below 2^53. The script therefore works in whole
//! microseconds (2^53 µs is 285 years), and a rule is converted once, here:
//!
//! - a token bucket's emission interval `T` is rounded **up** to whole
//!   microseconds (at least 1 µs), so Redis never refills faster than the
//!   in-memory engine: `"7/s"` (T = 142,857,142 ns) refills one token every
//!   142,858 µs. Rates whose `T` is whole microseconds (every rate of at most
//!   one call per µs over a period of whole ms with a count that divides it)
//!   decide exactly as in memory. `B·T` must stay below 2^51 µs (71 years).
//! - a window's length must be whole microseconds (every rate string is),
//!   and `limit × window` in µs must stay below 2^53 (e.g. at most 104,249
//!   per day, 2,501,999 per hour).
//! - times passed to the `*_at` forms are rounded down to whole µs; waits
//!   the script computes are whole µs, rounded up where the exact wait is
//!   not (the sliding window's), so a caller who waits them is never early.

use std::time::Duration;

use ratomic::{Algorithm, Error, Rule};

/// Largest `B·T` (µs) of a token bucket on Redis.
pub const MAX_TAU_MICROS: u64 = 1 << 51;
/// Largest `limit × window` (µs) of a window on Redis.
pub const MAX_WINDOW_PRODUCT: u64 = 1 << 53;

/// One rule in the script's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisRule {
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

impl RedisRule {
    /// The rule in the script's terms, or the reason it cannot be run
    /// exactly there (an [`Error::InvalidArgument`] naming the field).
    ///
    /// ```
    /// use ratomic::Rule;
    /// use ratomic_redis::RedisRule;
    ///
    /// let r = RedisRule::from_rule(&Rule::parse("10/s")?)?;
    /// assert_eq!(r, RedisRule::TokenBucket { interval_us: 100_000, capacity: 10 });
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn from_rule(rule: &Rule) -> Result<Self, Error> {
        match rule {
            Rule::TokenBucket(g) => {
                let q = g.quota();
                let interval_us = q.emission_interval_nanos().div_ceil(1000).max(1);
                let capacity = q.capacity();
                match capacity.checked_mul(interval_us) {
                    Some(tau) if tau <= MAX_TAU_MICROS => Ok(RedisRule::TokenBucket { interval_us, capacity }),
                    _ => Err(invalid(
                        "capacity",
                        capacity,
                        "is too large for this refill rate on Redis: capacity × emission interval must stay below \
                         2^51 µs (71 years)",
                    )),
                }
            }
            Rule::FixedWindow(f) => {
                let (window_us, limit) = window(f.window(), f.limit())?;
                Ok(RedisRule::FixedWindow { window_us, limit })
            }
            Rule::SlidingWindow(s) => {
                let (window_us, limit) = window(s.window(), s.limit())?;
                Ok(RedisRule::SlidingWindow { window_us, limit })
            }
            other => Err(invalid("rule", format!("{other:?}"), "is not supported on Redis")),
        }
    }

    /// The most a key can hold; the largest cost a call may ask.
    pub fn limit(&self) -> u64 {
        match *self {
            RedisRule::TokenBucket { capacity, .. } => capacity,
            RedisRule::FixedWindow { limit, .. } | RedisRule::SlidingWindow { limit, .. } => limit,
        }
    }

    /// The script's kind letter and two parameters.
    pub(crate) fn script_args(&self) -> (&'static str, u64, u64) {
        match *self {
            RedisRule::TokenBucket { interval_us, capacity } => ("g", interval_us, capacity),
            RedisRule::FixedWindow { window_us, limit } => ("f", window_us, limit),
            RedisRule::SlidingWindow { window_us, limit } => ("s", window_us, limit),
        }
    }

    /// How long a key drained by this rule takes to be full again: the
    /// longest TTL the script can set for it (before any floor).
    pub fn longest_idle(&self) -> Duration {
        Duration::from_micros(match *self {
            RedisRule::TokenBucket { interval_us, capacity } => interval_us * capacity,
            RedisRule::FixedWindow { window_us, .. } => window_us,
            RedisRule::SlidingWindow { window_us, .. } => 2 * window_us,
        })
    }
}

fn window(window: Duration, limit: u64) -> Result<(u64, u64), Error> {
    let ns = window.as_nanos();
    if !ns.is_multiple_of(1000) {
        return Err(invalid("window", format!("{window:?}"), "must be a whole number of microseconds on Redis"));
    }
    let window_us = u64::try_from(ns / 1000).unwrap_or(u64::MAX);
    match limit.checked_mul(window_us) {
        Some(p) if p <= MAX_WINDOW_PRODUCT => Ok((window_us, limit)),
        _ => Err(invalid(
            "limit",
            limit,
            format!(
                "is too large for a window of {window:?} on Redis: limit × window must stay below 2^53 µs (at most {})",
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
        let r = RedisRule::from_rule(&Rule::parse("7/s").unwrap()).unwrap();
        assert_eq!(r, RedisRule::TokenBucket { interval_us: 142_858, capacity: 7 });
        let r = RedisRule::from_rule(&Rule::token_bucket(Quota::new(5, 1e12).unwrap())).unwrap();
        assert_eq!(r, RedisRule::TokenBucket { interval_us: 1, capacity: 5 });
        let r = RedisRule::from_rule(&Rule::parse("3/250ms").unwrap()).unwrap();
        assert_eq!(r, RedisRule::TokenBucket { interval_us: 83_334, capacity: 3 });
    }

    #[test]
    fn rules_beyond_exact_lua_arithmetic_are_refused_naming_the_field() {
        let huge = Rule::token_bucket(Quota::new(1 << 33, 1.0).unwrap());
        match RedisRule::from_rule(&huge) {
            Err(Error::InvalidArgument { name: "capacity", .. }) => {}
            other => panic!("{other:?}"),
        }
        let daily = Rule::fixed_window(Rate::parse("200000/d").unwrap()).unwrap();
        let err = RedisRule::from_rule(&daily).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { name: "limit", .. }), "{err}");
        assert!(err.to_string().contains("at most 104249"), "{err}");
        assert!(RedisRule::from_rule(&Rule::fixed_window(Rate::parse("104249/d").unwrap()).unwrap()).is_ok());
        let odd = Rule::sliding_window(Rate::new(3, Duration::from_nanos(1500)).unwrap()).unwrap();
        let err = RedisRule::from_rule(&odd).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { name: "window", .. }), "{err}");
    }

    #[test]
    fn windows_keep_their_length_and_limit() {
        let r = RedisRule::from_rule(&Rule::sliding_window(Rate::parse("100/min").unwrap()).unwrap()).unwrap();
        assert_eq!(r, RedisRule::SlidingWindow { window_us: 60_000_000, limit: 100 });
        assert_eq!(r.limit(), 100);
        assert_eq!(r.longest_idle(), Duration::from_secs(120));
    }
}
