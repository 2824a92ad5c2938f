//! The token bucket (GCRA) limiters: keyed and direct.

use crate::base::Builder;
use crate::clock::{Clock, MonotonicClock};
use crate::direct::Direct;
use crate::error::Error;
use crate::gcra::Gcra;
use crate::keyed::Keyed;
use crate::quota::Quota;
use crate::store::Options;

/// A token bucket per key, as GCRA: exact integer time, no refill step.
///
/// A key holds up to `B` tokens (the quota's burst) and gets one back every
/// `T` (its emission interval); a call for `n` tokens passes if the key has
/// them. A fresh key passes exactly `B` calls in a row; a clock that steps
/// back never grants more. The equations are in
/// [the contract](https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md#41-tokenbucket--gcra-normative).
///
/// Each key's state is one `AtomicU64` (its theoretical arrival time),
/// changed by a compare-and-swap loop that reads the clock once and writes
/// nothing on a denial. Keys live in a bounded store that drops full buckets
/// without changing any later decision (see [`Options`]).
///
/// ```
/// use std::time::Duration;
/// use ratomic::{ManualClock, Quota, TokenBucket};
///
/// let clock = ManualClock::new();
/// let limiter = TokenBucket::builder(Quota::new(3, 1.0)?).clock(clock.clone()).build()?;
///
/// for _ in 0..3 {
///     assert!(limiter.allow("alice")?.allowed);
/// }
/// let denied = limiter.allow("alice")?;
/// assert!(!denied.allowed);
/// assert_eq!(denied.retry_after, Duration::from_secs(1));
/// assert!(limiter.allow("bob")?.allowed); // keys are independent
///
/// clock.advance(Duration::from_secs(1)); // one token back
/// assert!(limiter.allow("alice")?.allowed);
/// # Ok::<(), ratomic::Error>(())
/// ```
pub type TokenBucket<K = [u8], C = MonotonicClock> = Keyed<Gcra, K, C>;

/// One token bucket for all traffic: no key, no lookup.
///
/// ```
/// use ratomic::{DirectTokenBucket, Quota};
///
/// let limiter = DirectTokenBucket::new(Quota::per_second(100)?);
/// assert!(limiter.allow()?.allowed);
/// # Ok::<(), ratomic::Error>(())
/// ```
pub type DirectTokenBucket<C = MonotonicClock> = Direct<Gcra, C>;

impl TokenBucket {
    /// A token bucket per byte-string key with the default clock and options.
    pub fn new(quota: Quota) -> Self {
        Self::with_algorithm(Gcra::new(quota), MonotonicClock::new(), Options::default())
            .expect("the default options are valid")
    }

    /// Starts building a token bucket per key for `quota`: a [`Quota`], a
    /// [`Rate`](crate::Rate) (a burst of its count, refilled over its period)
    /// or a rate string such as `"10/s"`. Never fails: an invalid rate comes
    /// out of [`build`](Builder::build), with the options' errors.
    ///
    /// ```
    /// use ratomic::{Quota, TokenBucket};
    ///
    /// let a = TokenBucket::builder("10/s").build()?;
    /// let b = TokenBucket::builder(Quota::per_second(10)?).build()?;
    /// assert_eq!(a.quota(), b.quota());
    /// assert!(TokenBucket::builder("10/fortnight").build().is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn builder<Q>(quota: Q) -> Builder<Gcra>
    where
        Q: TryInto<Quota>,
        Error: From<Q::Error>,
    {
        Builder::new(quota.try_into().map(Gcra::new).map_err(Error::from))
    }
}

impl<K: ?Sized + crate::Key, C: Clock> Keyed<Gcra, K, C> {
    /// The quota this limiter enforces.
    pub fn quota(&self) -> Quota {
        self.algorithm().quota()
    }
}

impl DirectTokenBucket {
    /// A full bucket for `quota` on the default clock.
    pub fn new(quota: Quota) -> Self {
        Direct::with_algorithm(Gcra::new(quota), MonotonicClock::new())
    }
}

impl<C: Clock> Direct<Gcra, C> {
    /// A full bucket for `quota` on `clock`.
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Direct::with_algorithm(Gcra::new(quota), clock)
    }

    /// The quota this limiter enforces.
    pub fn quota(&self) -> Quota {
        self.algorithm().quota()
    }
}
