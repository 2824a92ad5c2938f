//! The answer to one call, the same shape for every limiter and every face.

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
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, Quota};
    ///
    /// let limiter = DirectTokenBucket::new(Quota::parse("1/s")?);
    /// let _ = limiter.allow();
    /// let d = limiter.peek();
    /// assert!(!d.allowed);
    /// assert!(d.retry_after_nanos() > 0 && d.retry_after_nanos() <= 1_000_000_000);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn retry_after_nanos(&self) -> u64 {
        duration_nanos(self.retry_after)
    }

    /// `reset_after` in nanoseconds.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, Quota};
    ///
    /// let limiter = DirectTokenBucket::new(Quota::parse("1/s")?);
    /// assert_eq!(limiter.peek_at(0, 0)?.reset_after_nanos(), 0, "full: nothing to wait for");
    /// assert_eq!(limiter.allow_at(1, 0)?.reset_after_nanos(), 1_000_000_000);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn reset_after_nanos(&self) -> u64 {
        duration_nanos(self.reset_after)
    }
}

/// A decision as the engine computes it, its durations in nanoseconds: what
/// algorithms return, converted to a [`Decision`] once, at the API edge
/// (multi-limit calls combine several without converting each).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub(crate) allowed: bool,
    pub(crate) remaining: u64,
    pub(crate) limit: u64,
    pub(crate) retry_ns: u64,
    pub(crate) reset_ns: u64,
}

impl Verdict {
    #[inline]
    pub(crate) fn allowed(remaining: u64, limit: u64, reset_after_ns: u64) -> Self {
        Verdict { allowed: true, remaining, limit, retry_ns: 0, reset_ns: reset_after_ns }
    }

    #[inline]
    pub(crate) fn denied(remaining: u64, limit: u64, retry_after_ns: u64, reset_after_ns: u64) -> Self {
        debug_assert!(retry_after_ns > 0, "a denial must carry a positive retry_after");
        Verdict { allowed: false, remaining, limit, retry_ns: retry_after_ns, reset_ns: reset_after_ns }
    }

    /// The public form.
    #[inline]
    pub fn decision(self) -> Decision {
        Decision {
            allowed: self.allowed,
            remaining: self.remaining,
            limit: self.limit,
            retry_after: Duration::from_nanos(self.retry_ns),
            reset_after: Duration::from_nanos(self.reset_ns),
        }
    }

    /// As [`Decision::allowed`].
    #[inline]
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// As [`Decision::remaining`].
    #[inline]
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// As [`Decision::limit`].
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// `retry_after` in nanoseconds (as [`Decision::retry_after_nanos`]).
    #[inline]
    pub fn retry_after_nanos(&self) -> u64 {
        self.retry_ns
    }

    /// `reset_after` in nanoseconds (as [`Decision::reset_after_nanos`]).
    #[inline]
    pub fn reset_after_nanos(&self) -> u64 {
        self.reset_ns
    }
}

fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
