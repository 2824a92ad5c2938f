//! The token bucket (GCRA) limiters: keyed and direct.

use crate::algorithm::gcra::Gcra;
use crate::clock::{Clock, MonotonicClock};
use crate::error::Error;
use crate::limit::base::Builder;
use crate::limit::direct::Direct;
use crate::limit::keyed::Keyed;
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
///
/// # Operations
///
/// A `TokenBucket` is a [`Keyed`](crate::Keyed) limiter: every call below is
/// documented, with an example, on [`Keyed`](crate::Keyed)'s page. Keys are
/// byte strings (`&str`, `String`, `&[u8]`) unless the builder's
/// `.keys::<K>()` picks `u64` or an IP address type; times (`now`) are
/// nanoseconds on the limiter's clock.
///
/// | call | what it does |
/// |---|---|
/// | [`allow(key)`](crate::Keyed::allow) | takes one unit; a denial is a [`Decision`](crate::Decision) with `allowed == false`, not an error. For `u64` and IP keys it returns the `Decision` itself |
/// | [`allow_n(key, n)`](crate::Keyed::allow_n) | takes `n` units; an error, changing nothing, if `n` exceeds the limit |
/// | [`allow_at(key, n, now)`](crate::Keyed::allow_at) | `allow_n` at a time you give |
/// | [`allow_many(pairs)`](crate::Keyed::allow_many), [`allow_many_at`](crate::Keyed::allow_many_at) | many `(key, n)` calls at one clock reading, all checked before any is decided |
/// | [`peek(key)`](crate::Keyed::peek), [`peek_n`](crate::Keyed::peek_n), [`peek_at`](crate::Keyed::peek_at) | what the matching `allow` would answer, changing nothing |
/// | [`refund(key, n)`](crate::Keyed::refund), [`refund_at`](crate::Keyed::refund_at) | gives `n` back, never above full |
/// | [`reset(key)`](crate::Keyed::reset), [`reset_at`](crate::Keyed::reset_at) | forgets the key: it is full again |
/// | [`acquire(key, n, timeout)`](crate::Keyed::acquire), [`acquire_with`](crate::Keyed::acquire_with) | waits out denials: blocking, or async on any runtime |
/// | [`check(key, n)`](crate::Keyed::check) | checks a call's arguments without making it |
/// | [`quota()`](crate::Keyed::quota) | the [`Quota`]: burst and refill |
/// | [`limit()`](crate::Keyed::limit), [`algorithm()`](crate::Keyed::algorithm) | the most a key holds; the rule, which prints with its units |
/// | [`len()`](crate::Keyed::len), [`is_empty()`](crate::Keyed::is_empty), [`gc()`](crate::Keyed::gc), [`gc_at`](crate::Keyed::gc_at), [`memory_bytes()`](crate::Keyed::memory_bytes) | keys held; dropping keys that are full again (no decision changes); memory held |
/// | [`clock()`](crate::Keyed::clock), [`now()`](crate::Keyed::now), [`max_key_len()`](crate::Keyed::max_key_len) | the clock and its reading; the longest byte key accepted |
/// | [`TokenBucket::new(quota)`](TokenBucket::new), [`TokenBucket::builder(rate)`](TokenBucket::builder) | make one (a `Quota`, a `Rate` or a rate string such as `"10/s"`) |
pub type TokenBucket<K = [u8], C = MonotonicClock> = Keyed<Gcra, K, C>;

/// One token bucket for all traffic: no key, no lookup.
///
/// ```
/// use ratomic::{DirectTokenBucket, Quota};
///
/// let limiter = DirectTokenBucket::new(Quota::per_second(100)?);
/// assert!(limiter.allow().allowed);
/// # Ok::<(), ratomic::Error>(())
/// ```
///
/// # Operations
///
/// A `DirectTokenBucket` is a [`Direct`] limiter: every call below is
/// documented on [`Direct`]'s page.
///
/// | call | what it does |
/// |---|---|
/// | [`allow()`](Direct::allow), [`allow_n(n)`](Direct::allow_n), [`allow_at(n, now)`](Direct::allow_at) | takes one or `n` tokens (now, or at a time you give in ns on the clock) |
/// | [`peek()`](Direct::peek), [`peek_at(n, now)`](Direct::peek_at) | what `allow` would answer, changing nothing |
/// | [`refund(n)`](Direct::refund), [`refund_at`](Direct::refund_at), [`reset()`](Direct::reset) | gives tokens back (never above full); makes the bucket full |
/// | [`acquire(n, timeout)`](Direct::acquire), [`acquire_with`](Direct::acquire_with) | waits out denials: blocking, or async on any runtime |
/// | [`quota()`](Direct::quota), [`limit()`](Direct::limit), [`algorithm()`](Direct::algorithm), [`clock()`](Direct::clock), [`now()`](Direct::now) | what it enforces, and its clock |
/// | [`DirectTokenBucket::new(quota)`](DirectTokenBucket::new), [`with_clock(quota, clock)`](Direct::with_clock) | make one |
pub type DirectTokenBucket<C = MonotonicClock> = Direct<Gcra, C>;

impl TokenBucket {
    /// A token bucket per byte-string key with the default clock and options.
    ///
    /// ```
    /// use ratomic::{Quota, TokenBucket};
    ///
    /// let limiter = TokenBucket::new(Quota::parse("100/min")?);
    /// assert!(limiter.allow("user:1")?.allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
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
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("10/s").build()?;
    /// assert_eq!(limiter.quota().capacity(), 10);
    /// assert_eq!(limiter.quota().emission_interval(), Duration::from_millis(100));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.algorithm().quota()
    }
}

impl DirectTokenBucket {
    /// A full bucket for `quota` on the default clock.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, Quota};
    ///
    /// let limiter = DirectTokenBucket::new(Quota::parse("100/s")?.with_burst(10)?);
    /// assert_eq!(limiter.allow().remaining, 9);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        Direct::with_algorithm(Gcra::new(quota), MonotonicClock::new())
    }
}

impl<C: Clock> Direct<Gcra, C> {
    /// A full bucket for `quota` on `clock`.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectTokenBucket::with_clock(Quota::parse("1/s")?, clock.clone());
    /// assert!(limiter.allow().allowed && !limiter.allow().allowed);
    /// clock.advance(std::time::Duration::from_secs(1));
    /// assert!(limiter.allow().allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        Direct::with_algorithm(Gcra::new(quota), clock)
    }

    /// The quota this limiter enforces.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, Quota};
    ///
    /// let limiter = DirectTokenBucket::new(Quota::parse("100/s")?);
    /// assert_eq!(limiter.quota().capacity(), 100);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.algorithm().quota()
    }
}
