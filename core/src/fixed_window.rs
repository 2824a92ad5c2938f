//! The fixed-window limiter.

use std::time::Duration;

use crate::base::Builder;
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::keyed::Keyed;
use crate::rate::Rate;
use crate::store::Options;
use crate::window::FixedWindowCounter;

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
pub type FixedWindow<K = [u8], C = MonotonicClock> = Keyed<FixedWindowCounter, K, C>;

impl FixedWindow {
    /// `limit` calls per `window` per byte-string key, default clock and options.
    pub fn new(limit: u64, window: Duration) -> Result<Self> {
        Self::from_rate(Rate::new(limit, window)?)
    }

    /// `rate.count()` calls per `rate.period()`.
    pub fn from_rate(rate: Rate) -> Result<Self> {
        Keyed::with_algorithm(FixedWindowCounter::new(rate)?, MonotonicClock::new(), Options::default())
    }

    /// Starts building a fixed-window limiter for `rate`: a [`Rate`] or a rate
    /// string such as `"100/min"`. Never fails: an invalid rate (or a limit
    /// too large for the window, see [`FixedWindowCounter::max_limit`]) comes out of
    /// [`build`](Builder::build), with the options' errors.
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
    pub fn window(&self) -> Duration {
        self.algorithm().window()
    }
}
