//! The fixed-window limiter.

use std::time::Duration;

use crate::algorithm::window::FixedWindowCounter;
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::limit::base::Builder;
use crate::limit::keyed::Keyed;
use crate::rate::Rate;
use crate::store::key::Key;
use crate::store::Options;

/// At most `limit` calls per key in each window of length `window`, windows
/// aligned to the clock's epoch.
///
/// The simplest rule to explain, and the cheapest; but a client can make
/// `limit` calls at the end of one window and `limit` more at the start of
/// the next: up to twice the limit in a short span. `ratomic simulate
/// --algorithm fixed-window` shows it; [`SlidingWindow`](crate::SlidingWindow)
/// and [`TokenBucket`](crate::TokenBucket) do not have that double burst.
///
/// ```
/// use std::time::Duration;
/// use ratomic::{FixedWindow, ManualClock};
///
/// let clock = ManualClock::new();
/// let limiter = FixedWindow::builder("2/min").clock(clock.clone()).build()?;
/// assert!(limiter.allow("ip:1")?.allowed);
/// assert!(limiter.allow("ip:1")?.allowed);
/// let d = limiter.allow("ip:1")?;
/// assert!(!d.allowed);
/// assert_eq!(d.retry_after, Duration::from_secs(60)); // the next window
/// # Ok::<(), ratomic::Error>(())
/// ```
///
/// # Operations
///
/// A `FixedWindow` is a [`Keyed`](crate::Keyed) limiter: every call below is
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
/// | [`window()`](crate::Keyed::window) | the window's length |
/// | [`limit()`](crate::Keyed::limit), [`algorithm()`](crate::Keyed::algorithm) | the most a key holds; the rule, which prints with its units |
/// | [`len()`](crate::Keyed::len), [`is_empty()`](crate::Keyed::is_empty), [`gc()`](crate::Keyed::gc), [`gc_at`](crate::Keyed::gc_at), [`memory_bytes()`](crate::Keyed::memory_bytes) | keys held; dropping keys that are full again (no decision changes); memory held |
/// | [`clock()`](crate::Keyed::clock), [`now()`](crate::Keyed::now), [`max_key_len()`](crate::Keyed::max_key_len) | the clock and its reading; the longest byte key accepted |
/// | [`FixedWindow::new(limit, window)`](FixedWindow::new), [`from_rate`](FixedWindow::from_rate), [`FixedWindow::builder(rate)`](FixedWindow::builder) | make one (a `Rate` or a rate string such as `"100/min"`) |
pub type FixedWindow<K = [u8], C = MonotonicClock> = Keyed<FixedWindowCounter, K, C>;

impl FixedWindow {
    /// `limit` calls per `window` per byte-string key, default clock and options.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::FixedWindow;
    ///
    /// let limiter = FixedWindow::new(100, Duration::from_secs(60))?;
    /// assert_eq!(limiter.limit(), 100);
    /// assert!(FixedWindow::new(0, Duration::from_secs(60)).is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn new(limit: u64, window: Duration) -> Result<Self> {
        Self::from_rate(Rate::new(limit, window)?)
    }

    /// `rate.count()` calls per `rate.period()`.
    ///
    /// ```
    /// use ratomic::{FixedWindow, Rate};
    ///
    /// let limiter = FixedWindow::from_rate(Rate::parse("100 per minute")?)?;
    /// assert_eq!(limiter.allow("k")?.remaining, 99);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn from_rate(rate: Rate) -> Result<Self> {
        Keyed::with_algorithm(FixedWindowCounter::new(rate)?, MonotonicClock::new(), Options::default())
    }

    /// Starts building a fixed-window limiter for `rate`: a [`Rate`] or a rate
    /// string such as `"100/min"`. Never fails: an invalid rate (or a limit
    /// too large for the window, see [`FixedWindowCounter::max_limit`]) comes out of
    /// [`build`](Builder::build), with the options' errors.
    ///
    /// ```
    /// use ratomic::{FixedWindow, ManualClock};
    ///
    /// let limiter = FixedWindow::builder("100/min").clock(ManualClock::new()).max_keys(10_000).build()?;
    /// assert_eq!(limiter.allow("k")?.limit, 100);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn builder<R>(rate: R) -> Builder<FixedWindowCounter>
    where
        R: TryInto<Rate>,
        Error: From<R::Error>,
    {
        Builder::new(rate.try_into().map_err(Error::from).and_then(FixedWindowCounter::new))
    }
}

impl<K: ?Sized + Key, C: Clock> Keyed<FixedWindowCounter, K, C> {
    /// The window length.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::FixedWindow;
    ///
    /// assert_eq!(FixedWindow::builder("5/10s").build()?.window(), Duration::from_secs(10));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn window(&self) -> Duration {
        self.algorithm().window()
    }
}
