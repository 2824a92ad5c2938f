//! The answer to one call (SPEC §2).

use std::time::Duration;

/// The answer to one call, the same shape in every face of ratomic.
///
/// ```
/// use ratomic::{Quota, TokenBucket};
///
/// let limiter = TokenBucket::new(Quota::per_second(2)?);
/// let d = limiter.allow("user:1")?;
/// assert!(d.allowed);
/// assert_eq!((d.remaining, d.limit), (1, 2));
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "a Decision says whether the call was allowed"]
pub struct Decision {
    /// The cost was granted and consumed.
    pub allowed: bool,
    /// Whole tokens this key still has right after the call (rounded down).
    pub remaining: u64,
    /// The most this key can ever hold (capacity, burst or window limit).
    pub limit: u64,
    /// Zero when allowed. When denied, strictly positive: the wait after which
    /// the same call would pass if nothing else consumes meanwhile.
    pub retry_after: Duration,
    /// The wait until the key is full again if nothing consumes.
    pub reset_after: Duration,
}

impl Decision {
    /// `retry_after` in nanoseconds.
    #[inline]
    pub fn retry_after_nanos(&self) -> u64 {
        duration_nanos(self.retry_after)
    }

    /// `reset_after` in nanoseconds.
    #[inline]
    pub fn reset_after_nanos(&self) -> u64 {
        duration_nanos(self.reset_after)
    }

    #[inline]
    pub(crate) fn allowed(remaining: u64, limit: u64, reset_after_ns: u64) -> Self {
        Decision {
            allowed: true,
            remaining,
            limit,
            retry_after: Duration::ZERO,
            reset_after: Duration::from_nanos(reset_after_ns),
        }
    }

    #[inline]
    pub(crate) fn denied(remaining: u64, limit: u64, retry_after_ns: u64, reset_after_ns: u64) -> Self {
        debug_assert!(retry_after_ns > 0, "a denial must carry a positive retry_after");
        Decision {
            allowed: false,
            remaining,
            limit,
            retry_after: Duration::from_nanos(retry_after_ns),
            reset_after: Duration::from_nanos(reset_after_ns),
        }
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
