//! Time sources. A limiter reads its clock once per call, as nanoseconds
//! since the clock's own epoch.
//!
//! # Why [`MonotonicClock`] is the default
//!
//! Measured on the 2-core x86-64 CI machine (`cargo run --release -p
//! ratomic-benches --bin clocks`, figures in `BENCHMARKS.md`):
//!
//! | clock | cost per read | monotonic | resolution |
//! |---|---|---|---|
//! | `std::time::Instant` (`CLOCK_MONOTONIC`, vDSO) | ~22 ns | guaranteed by the OS | 1 ns |
//! | `CLOCK_MONOTONIC_COARSE` | ~6 ns | guaranteed by the OS | 4 ms (one kernel tick) |
//! | raw TSC (`rdtsc`, what `quanta` reads) | ~9 ns | **not guaranteed** across cores | ~0.4 ns |
//!
//! The coarse clock is cheap but a 4 ms step would make a `1000/s` bucket
//! refill four tokens at a time, so it cannot be the default. The TSC is
//! cheap and fine-grained but is not synchronised across cores on every
//! machine (governor issue #299, quanta issue #111): a thread that migrates
//! sees time jump back, and a limiter then denies callers it should allow.
//! `Instant` is the only source that is both exact and truly monotonic, so it
//! is the default; its cost is paid once per call. Tests and callers that
//! already hold a timestamp use [`ManualClock`] or the `*_at` methods, which
//! read no clock at all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// A source of time for a limiter: nanoseconds since an arbitrary epoch.
///
/// The engine never grants more because a clock stepped back (SPEC §4.1), but
/// a clock that jumps back makes limiters deny more than they should until it
/// catches up, so production clocks should be monotonic.
///
/// Readings are clamped to `2^63 − 1` ns (about 292 years after the epoch).
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's epoch.
    fn now(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

/// The default clock: [`std::time::Instant`]. Truly monotonic, nanosecond
/// resolution.
///
/// Every `MonotonicClock` in a process shares one epoch (the moment the
/// first was made), so readings from different limiters are on one
/// timeline: a [`Stack`](crate::Stack) can pass one `now` to all its members.
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    epoch: Instant,
}

impl MonotonicClock {
    /// The process's monotonic clock.
    pub fn new() -> Self {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        MonotonicClock { epoch: *EPOCH.get_or_init(Instant::now) }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> u64 {
        let d = Instant::now().saturating_duration_since(self.epoch);
        // Whole-u64 arithmetic: `as_nanos()` would go through u128.
        d.as_secs().wrapping_mul(1_000_000_000).wrapping_add(u64::from(d.subsec_nanos()))
    }
}

/// A clock that moves only when told to: for tests and simulations.
///
/// Clones share the same time, so one handle can drive a limiter from a test
/// (or from many threads) while the limiter holds another.
///
/// ```
/// use std::time::Duration;
/// use ratomic::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let handle = clock.clone();
/// handle.advance(Duration::from_millis(1500));
/// assert_eq!(clock.now(), 1_500_000_000);
/// ```
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    ns: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at time 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock at `ns` nanoseconds.
    pub fn starting_at(ns: u64) -> Self {
        ManualClock { ns: Arc::new(AtomicU64::new(ns)) }
    }

    /// Moves time forward by `by` (saturating).
    pub fn advance(&self, by: Duration) {
        self.advance_nanos(u64::try_from(by.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Moves time forward by `ns` nanoseconds (saturating).
    pub fn advance_nanos(&self, ns: u64) {
        let _ = self.ns.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| Some(t.saturating_add(ns)));
    }

    /// Sets the time, forward or back.
    pub fn set_nanos(&self, ns: u64) {
        self.ns.store(ns, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.ns.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_never_goes_back() {
        let c = MonotonicClock::new();
        let mut last = c.now();
        for _ in 0..10_000 {
            let t = c.now();
            assert!(t >= last);
            last = t;
        }
    }

    #[test]
    fn monotonic_clocks_share_one_timeline() {
        let a = MonotonicClock::new();
        let b = std::thread::spawn(MonotonicClock::new).join().unwrap();
        assert_eq!(a.epoch, b.epoch);
        let ta = a.now();
        assert!(b.now() >= ta);
    }

    #[test]
    fn manual_clock_is_shared_and_saturates() {
        let c = ManualClock::starting_at(5);
        let d = c.clone();
        d.advance(Duration::from_nanos(10));
        assert_eq!(c.now(), 15);
        c.advance(Duration::MAX);
        assert_eq!(d.now(), u64::MAX);
        c.set_nanos(3);
        assert_eq!(d.now(), 3);
    }
}
