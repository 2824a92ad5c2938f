//! The sliding-window limiter.

use std::time::Duration;

use crate::base::Builder;
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::key::Key;
use crate::keyed::Keyed;
use crate::rate::Rate;
use crate::store::Options;
use crate::window::SlidingWindowCounter;

/// At most `limit` calls per key in any window of length `window`, by the
/// counter approximation: the current window's count plus the
/// previous window's count weighted by how much of it the sliding window
/// still covers, computed exactly in integers.
///
/// Smooths the double burst of a [`FixedWindow`](crate::FixedWindow) at a
/// window boundary with the same memory (one `u64` per key). It is an
/// approximation of a true sliding log: `BENCHMARKS.md` measures how often it
/// disagrees with an exact log on random and bursty traffic.
///
/// ```
/// use std::time::Duration;
/// use ratomic::{ManualClock, SlidingWindow};
///
/// let clock = ManualClock::new();
/// let limiter = SlidingWindow::builder("2/min").clock(clock.clone()).build()?;
/// assert!(limiter.allow("ip:1")?.allowed);
/// assert!(limiter.allow("ip:1")?.allowed);
/// let d = limiter.allow("ip:1")?;
/// assert!(!d.allowed);
/// // Both calls count until the window ends; then they fade out over the
/// // next minute, and one call fits once half of it has passed.
/// assert_eq!(d.retry_after, Duration::from_secs(90));
/// # Ok::<(), ratomic::Error>(())
/// ```
pub type SlidingWindow<K = [u8], C = MonotonicClock> = Keyed<SlidingWindowCounter, K, C>;

impl SlidingWindow {
    /// `limit` calls per `window` per byte-string key, default clock and options.
    pub fn new(limit: u64, window: Duration) -> Result<Self> {
        Self::from_rate(Rate::new(limit, window)?)
    }

    /// `rate.count()` calls per `rate.period()`.
    pub fn from_rate(rate: Rate) -> Result<Self> {
        Keyed::with_algorithm(SlidingWindowCounter::new(rate)?, MonotonicClock::new(), Options::default())
    }

    /// Starts building a sliding-window limiter for `rate`: a [`Rate`] or a rate
    /// string such as `"100/min"`. Never fails: an invalid rate (or a limit
    /// too large for the window, see [`SlidingWindowCounter::max_limit`]) comes out of
    /// [`build`](Builder::build), with the options' errors.
    pub fn builder<R>(rate: R) -> Builder<SlidingWindowCounter>
    where
        R: TryInto<Rate>,
        Error: From<R::Error>,
    {
        Builder::new(rate.try_into().map_err(Error::from).and_then(SlidingWindowCounter::new))
    }
}

impl<K: ?Sized + Key, C: Clock> Keyed<SlidingWindowCounter, K, C> {
    /// The window length.
    pub fn window(&self) -> Duration {
        self.algorithm().window()
    }
}
