//! Time sources. A limiter reads its clock once per call, as nanoseconds
//! since the clock's own epoch.
//!
//! # Why [`MonotonicClock`] reads time the way it does
//!
//! Three sources were measured on the 2-core x86-64 CI machine (`cargo run
//! --release -p ratomic-benches --bin clocks`; figures in `BENCHMARKS.md`):
//!
//! | clock | cost per read | monotonic | resolution |
//! |---|---|---|---|
//! | `std::time::Instant` (`CLOCK_MONOTONIC`, vDSO) | 2–3× a TSC read | guaranteed by the OS | 1 ns |
//! | `CLOCK_MONOTONIC_COARSE` | about half a TSC read | guaranteed by the OS | 4 ms (one kernel tick) |
//! | raw TSC (`rdtsc`, what `quanta` and governor read) | the cheapest exact source | **not guaranteed** across cores | < 1 ns |
//!
//! The coarse clock is cheap but a 4 ms step would make a `1000/s` bucket
//! refill four tokens at a time, so it cannot be the default. The raw TSC is
//! cheap and fine-grained but not synchronised across cores on every
//! machine (governor issue #299, quanta issue #111): a thread that migrates
//! sees time jump back, and a limiter then denies callers it should allow.
//! `Instant` is exact and truly monotonic but costs more than the rest of a
//! limiter call.
//!
//! So [`MonotonicClock`] is `Instant`, read through the TSC only where that
//! is safe: when the kernel itself trusts the TSC, each thread extrapolates
//! from an `Instant` reading it re-takes every millisecond, with a scale
//! biased slow, so a reading is never ahead of `Instant`, never more than a
//! fraction of a microsecond behind it, and never goes back (details on the
//! type). It costs about one TSC read. Tests and callers that already hold a
//! timestamp use [`ManualClock`] or the `*_at` methods, which read no clock
//! at all.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::error::{Error, Result};

/// The last valid time, in nanoseconds since a clock's epoch: `2^62 − 1`
/// (about 146 years). A clock reading or an `*_at` time beyond it is an error
/// that changes no state; it is never clamped.
///
/// ```
/// use ratomic::{TokenBucket, MAX_TIME};
///
/// let limiter = TokenBucket::builder("1/s").build()?;
/// assert!(limiter.allow_at("k", 1, MAX_TIME).is_ok());
/// assert!(limiter.allow_at("k", 1, MAX_TIME + 1).is_err());
/// # Ok::<(), ratomic::Error>(())
/// ```
pub const MAX_TIME: u64 = (1 << 62) - 1;

/// `now` if it is a valid time (at most [`MAX_TIME`]), else the error every
/// `*_at` method returns for it: for a face that reads a clock itself and
/// must refuse a reading past the bound with the same error, without
/// calling a limiter.
///
/// ```
/// use ratomic::{check_time, Error, MAX_TIME};
///
/// assert_eq!(check_time(MAX_TIME)?, MAX_TIME);
/// assert!(matches!(check_time(MAX_TIME + 1), Err(Error::InvalidArgument { name: "now", .. })));
/// # Ok::<(), ratomic::Error>(())
/// ```
pub fn check_time(now: u64) -> Result<u64> {
    checked(now)
}

/// `now` if it is a valid time, else the error every face reports.
#[inline]
pub(crate) fn checked(now: u64) -> Result<u64> {
    if now <= MAX_TIME {
        Ok(now)
    } else {
        Err(bad_time(now))
    }
}

#[cold]
fn bad_time(now: u64) -> Error {
    Error::invalid("now", now, "a time must be at most 2^62 − 1 ns (about 146 years after the clock's epoch)")
}

/// Which timeline a [`Clock`] reads: two clocks with the same id give the
/// same readings. A [`Stack`](crate::Stack) refuses members whose clocks'
/// ids differ from its own, since it passes one reading to all of them.
///
/// ```
/// use ratomic::{Clock, ClockId, ManualClock, MonotonicClock};
///
/// assert_eq!(MonotonicClock::new().id(), ClockId::MONOTONIC);
/// let clock = ManualClock::new();
/// assert_eq!(clock.clone().id(), clock.id(), "clones share one timeline");
/// assert_ne!(ManualClock::new().id(), clock.id());
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClockId(usize);

impl ClockId {
    /// The timeline every [`MonotonicClock`] reads.
    ///
    /// ```
    /// use ratomic::{Clock, ClockId, MonotonicClock};
    ///
    /// assert_eq!(MonotonicClock::new().id(), ClockId::MONOTONIC);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub const MONOTONIC: ClockId = ClockId(0);

    /// The id of one particular object's timeline: its address. Clocks that
    /// share state through a pointer (as [`ManualClock`]'s clones do) should
    /// pass that pointer, so that every clone has the same id.
    ///
    /// ```
    /// use ratomic::ClockId;
    ///
    /// let (a, b) = (1u8, 2u8);
    /// assert_eq!(ClockId::of(&a), ClockId::of(&a));
    /// assert_ne!(ClockId::of(&a), ClockId::of(&b));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn of<T: ?Sized>(object: &T) -> ClockId {
        ClockId((object as *const T).cast::<()>() as usize)
    }
}

/// A source of time for a limiter: nanoseconds since an arbitrary epoch.
///
/// The engine never grants more because a clock stepped back, but
/// a clock that jumps back makes limiters deny more than they should until it
/// catches up, so production clocks should be monotonic. Readings must stay
/// at or below [`MAX_TIME`] (about 146 years): a call that returns a
/// `Result` reports a later reading as an error and changes nothing; the
/// calls that cannot otherwise fail (`allow` and `peek` on `u64` and IP keys
/// and on a [`DirectTokenBucket`](crate::DirectTokenBucket)) panic with the
/// reading instead, as a broken contract.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use ratomic::{Clock, TokenBucket};
///
/// /// Time read from a counter the application advances (say, a simulation's).
/// struct Ticks(AtomicU64);
///
/// impl Clock for Ticks {
///     fn now(&self) -> u64 {
///         self.0.load(Ordering::Relaxed) * 1_000_000 // one tick is a millisecond
///     }
/// }
///
/// let limiter = TokenBucket::builder("1/s").clock(Ticks(AtomicU64::new(0))).build()?;
/// assert!(limiter.allow("k")?.allowed);
/// assert!(!limiter.allow("k")?.allowed);
/// limiter.clock().0.store(1_000, Ordering::Relaxed);
/// assert!(limiter.allow("k")?.allowed, "a second of ticks later");
/// # Ok::<(), ratomic::Error>(())
/// ```
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's epoch.
    fn now(&self) -> u64;

    /// Waits `d` on this clock's timeline: what a blocking `acquire` does
    /// between tries. Sleeps the thread by default; [`ManualClock`] moves
    /// itself forward instead, so tests never sleep.
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }

    /// Which timeline the clock reads (see [`ClockId`]). By default the
    /// clock's own address: only the clock itself is known to agree with it.
    fn id(&self) -> ClockId {
        ClockId::of(self)
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
    fn sleep(&self, d: Duration) {
        (**self).sleep(d);
    }
    fn id(&self) -> ClockId {
        (**self).id()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
    fn sleep(&self, d: Duration) {
        (**self).sleep(d);
    }
    fn id(&self) -> ClockId {
        (**self).id()
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
    fn sleep(&self, d: Duration) {
        (**self).sleep(d);
    }
    fn id(&self) -> ClockId {
        (**self).id()
    }
}

/// The default clock: the kernel's `CLOCK_MONOTONIC` (through
/// [`std::time::Instant`]), read cheaply. Truly monotonic, nanosecond
/// resolution, and never ahead of `Instant`.
///
/// On Linux a reading is `CLOCK_MONOTONIC` in nanoseconds (time since
/// boot), the same timeline in every process of the host: limiters in
/// different processes sharing one file
/// ([`Options::shared_file`](crate::Options::shared_file)) agree on time,
/// and a [`Stack`](crate::Stack) can pass one `now` to all its members.
/// Elsewhere every `MonotonicClock` in a process shares one epoch (the
/// moment the first was made).
///
/// # How it reads time
///
/// On x86-64 Linux, when the kernel itself uses the TSC as its clocksource
/// (it does so only after checking that the TSC is invariant and
/// synchronised across CPUs), each thread keeps an *anchor*: an `Instant`
/// reading and the TSC at that moment. A reading is the anchor plus the TSC
/// ticks since, scaled by a rate measured once per process and deliberately
/// biased 0.025 % slow, and the anchor is re-read from `Instant` at least
/// every millisecond. So:
///
/// - over any span longer than a millisecond it runs at exactly the kernel's
///   rate (no drift: a limiter never grants more than on `Instant`);
/// - within a millisecond it lags `Instant` by at most a few hundred
///   nanoseconds, never leads it (lagging can only deny, never over-grant);
/// - each thread's readings never go back (a jump back, e.g. after a
///   migration to a CPU whose TSC disagrees, forces a re-anchor and the
///   reading is held at the last one until time catches up).
///
/// Everywhere else (other CPUs or systems, a kernel that distrusts the TSC,
/// a scale that fails its sanity check), it is `Instant` itself.
///
/// ```
/// use ratomic::{Clock, MonotonicClock, TokenBucket};
///
/// // The default: a limiter built without .clock(..) reads it.
/// let limiter = TokenBucket::builder("10/s").build()?;
/// let clock: &MonotonicClock = limiter.clock();
/// assert!(clock.now() <= limiter.now());
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    source: &'static source::Source,
}

impl MonotonicClock {
    /// The process's monotonic clock. The first call in a process measures
    /// the TSC rate (about a millisecond); later calls are free.
    ///
    /// ```
    /// use ratomic::{Clock, MonotonicClock};
    ///
    /// let clock = MonotonicClock::new();
    /// let (t1, t2) = (clock.now(), clock.now());
    /// assert!(t2 >= t1);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn new() -> Self {
        static SOURCE: OnceLock<source::Source> = OnceLock::new();
        MonotonicClock { source: SOURCE.get_or_init(source::Source::new) }
    }

    /// Whether this process reads time through the TSC (see the type's docs)
    /// rather than calling `Instant::now` every time.
    ///
    /// ```
    /// use ratomic::MonotonicClock;
    ///
    /// // Either way the readings are monotonic; this only says how they are made.
    /// let _fast: bool = MonotonicClock::new().uses_tsc();
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn uses_tsc(&self) -> bool {
        self.source.uses_tsc()
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
        self.source.now()
    }

    /// Every `MonotonicClock` reads one timeline.
    fn id(&self) -> ClockId {
        ClockId::MONOTONIC
    }
}

/// A cheaper, coarser reading of the same timeline as [`MonotonicClock`]:
/// the kernel's `CLOCK_MONOTONIC_COARSE` on Linux, the time of the last
/// scheduler tick. Opt in where the clock read is a large part of a
/// decision (a direct bucket, a hot key); the default stays
/// [`MonotonicClock`].
///
/// # What it costs and what it changes
///
/// - A reading is a few loads from the kernel's shared page (the vDSO; no
///   TSC read, no scaling): several times cheaper than a `MonotonicClock` reading where
///   the TSC is slow to read, as under most hypervisors (`cargo run
///   --release -p ratomic-benches --bin clocks` measures both on your host).
/// - Its resolution is one tick, [`resolution`](Self::resolution): 1–10 ms
///   (4 ms on a kernel with `HZ=250`). Between ticks time stands still, so a
///   bucket refills in steps of `rate × tick`, and a caller that waits
///   exactly `retry_after` may come back up to one tick too early.
/// - **Exactness holds in the clock's own time**: whatever the interleaving,
///   a key never grants more than `burst + rate × t` over `t` of the clock's
///   readings. A reading never leads the kernel's `CLOCK_MONOTONIC` and lags
///   it by one tick at most (unless the kernel's ticks themselves are held
///   up, as a stalled virtual machine's can be), so over a span `d` of real
///   time a key grants at most `burst + rate × (d + tick)`: at most
///   `rate × tick` more than a perfect clock would allow (4 tokens for
///   1,000/s on a 4 ms tick), however long the span. Where that matters,
///   keep the default clock.
/// - It reads the same timeline as [`MonotonicClock`] (its [`ClockId`] is
///   [`ClockId::MONOTONIC`]): processes sharing a file may mix the two, and
///   so may the members of a [`Stack`](crate::Stack). A coarse reading is
///   at most one tick behind a fine one, which the engine treats as a call
///   stamped a little earlier: it can only deny more, never grant more (a
///   coarse call just after a fine one on the same key may be denied the
///   key's last token, which comes back within the tick).
///
/// Elsewhere than Linux it is [`MonotonicClock`] itself.
///
/// ```
/// use ratomic::{Clock, CoarseClock, DirectTokenBucket, MonotonicClock, Quota};
///
/// let clock = CoarseClock::new();
/// assert!(clock.resolution() <= std::time::Duration::from_millis(10));
/// assert_eq!(clock.id(), MonotonicClock::new().id(), "one timeline");
///
/// let bucket = DirectTokenBucket::with_clock(Quota::parse("1000/s")?, CoarseClock::new());
/// assert!(bucket.allow().allowed);
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct CoarseClock {
    _private: (),
}

impl CoarseClock {
    /// The coarse monotonic clock (free to make: it has no state).
    ///
    /// ```
    /// use ratomic::{Clock, CoarseClock};
    ///
    /// let clock = CoarseClock::new();
    /// let (t1, t2) = (clock.now(), clock.now());
    /// assert!(t2 >= t1);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub const fn new() -> Self {
        CoarseClock { _private: () }
    }

    /// How far apart its readings step: the kernel's tick on Linux (what
    /// `clock_getres(CLOCK_MONOTONIC_COARSE)` says), one nanosecond
    /// elsewhere (where it is [`MonotonicClock`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::CoarseClock;
    ///
    /// assert!(CoarseClock::new().resolution() >= Duration::from_nanos(1));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn resolution(&self) -> Duration {
        #[cfg(target_os = "linux")]
        {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC_COARSE
            // exists on every Linux since 2.6.32.
            if unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) } == 0 {
                return Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32).max(Duration::from_nanos(1));
            }
            Duration::from_nanos(1)
        }
        #[cfg(not(target_os = "linux"))]
        {
            Duration::from_nanos(1)
        }
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> u64 {
        #[cfg(target_os = "linux")]
        {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `ts` is a valid, writable timespec, and
            // CLOCK_MONOTONIC_COARSE exists on every Linux this builds for:
            // the call cannot fail.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
            (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
        }
        #[cfg(not(target_os = "linux"))]
        {
            MonotonicClock::new().now()
        }
    }

    /// The timeline of [`MonotonicClock`], read coarsely.
    fn id(&self) -> ClockId {
        ClockId::MONOTONIC
    }
}

/// The cheapest clock: a reading kept in memory and moved forward by
/// whoever refreshes it — your own loop calling [`refresh`](Self::refresh),
/// or a thread you start with [`refresh_every`](Self::refresh_every). A
/// limiter's call then reads time with one relaxed load, no system call and
/// no TSC. Opt in where the clock read is most of a decision (a direct
/// bucket, a hot key) and a resolution of your refresh interval is fine;
/// the default stays [`MonotonicClock`].
///
/// # What it costs and what it changes
///
/// - A reading is one load of a shared word; a refresh is one
///   [`MonotonicClock`] reading and one atomic maximum, so the readings of
///   all clones never go back.
/// - **Time moves only when refreshed.** Between refreshes it stands still,
///   so a bucket refills in steps of `rate × interval`, and a caller that
///   waits exactly `retry_after` may come back up to one interval too
///   early. If nothing refreshes it (the thread was never started, or is
///   starved), time stops: limiters on it stop refilling and deny once
///   their tokens are spent. ratomic starts no thread unless you call
///   [`refresh_every`](Self::refresh_every). A blocking `acquire` refreshes
///   the clock as it sleeps; an async `acquire_with` sleeps on your
///   runtime's timer, which does not, so give it a refreshed clock.
/// - **Exactness holds in the clock's own time**: whatever the
///   interleaving, a key never grants more than `burst + rate × t` over `t`
///   of the clock's readings. A reading never leads the kernel's
///   `CLOCK_MONOTONIC`; it lags it by how long ago the last refresh was (one
///   interval, plus however long the refreshing thread waited to run). Over
///   a span `d` of real time a key therefore grants at most
///   `burst + rate × (d + lag)`, where `lag` is the clock's lag when the
///   span began: `rate × interval` more than a perfect clock while the
///   refresher keeps up (1 token for 1,000/s refreshed every millisecond).
///   Where that matters, keep the default clock.
/// - It reads the same timeline as [`MonotonicClock`] (its [`ClockId`] is
///   [`ClockId::MONOTONIC`]): processes sharing a file may mix the two, and
///   so may the members of a [`Stack`](crate::Stack). A cached reading is
///   behind a fine one, which the engine treats as a call stamped a little
///   earlier: it can only deny more, never grant more.
///
/// Clones share one reading: refresh any of them and every limiter built
/// with a clone sees it.
///
/// ```
/// use std::time::Duration;
/// use ratomic::{CachedClock, Clock, DirectTokenBucket, MonotonicClock, Quota};
///
/// let clock = CachedClock::new();
/// // A thread that refreshes it every millisecond, until `refresher` is dropped.
/// let refresher = clock.refresh_every(Duration::from_millis(1))?;
/// let bucket = DirectTokenBucket::with_clock(Quota::parse("1000/s")?, clock.clone());
/// assert!(bucket.allow().allowed);
/// assert_eq!(clock.id(), MonotonicClock::new().id(), "one timeline");
/// drop(refresher); // stops and joins the thread
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct CachedClock {
    shared: Arc<CachedTime>,
}

/// The reading, on a cache line of its own: limiters on many threads read
/// it while one thread writes it.
#[derive(Debug)]
#[repr(align(128))]
struct CachedTime {
    ns: AtomicU64,
}

impl CachedClock {
    /// A clock holding the current [`MonotonicClock`] reading, which stays
    /// until something refreshes it.
    ///
    /// ```
    /// use ratomic::{CachedClock, Clock};
    ///
    /// let clock = CachedClock::new();
    /// assert_eq!(clock.now(), clock.now(), "still until refreshed");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn new() -> Self {
        CachedClock { shared: Arc::new(CachedTime { ns: AtomicU64::new(MonotonicClock::new().now()) }) }
    }

    /// Moves the reading up to the current [`MonotonicClock`] time, and
    /// returns the reading (never lower than before: refreshes from several
    /// threads keep the latest). Call it from your own loop — once per event
    /// loop turn, per accepted batch of requests — or let
    /// [`refresh_every`](Self::refresh_every) do it.
    ///
    /// ```
    /// use ratomic::{CachedClock, Clock, MonotonicClock};
    ///
    /// let clock = CachedClock::new();
    /// let before = clock.now();
    /// let t = clock.refresh();
    /// assert!(before <= t && t == clock.now() && t <= MonotonicClock::new().now());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refresh(&self) -> u64 {
        let now = MonotonicClock::new().now();
        self.shared.ns.fetch_max(now, Ordering::Relaxed).max(now)
    }

    /// Starts a thread (named `ratomic-clock`) that refreshes this clock
    /// every `interval` until the returned [`Refresher`] is dropped; the
    /// drop stops the thread and waits for it. The clock's resolution is
    /// then `interval` (plus scheduling delay on a loaded machine).
    ///
    /// # Errors
    ///
    /// An error of kind [`InvalidInput`](std::io::ErrorKind::InvalidInput)
    /// for an interval of zero or over an hour, or the operating system's
    /// if the thread cannot be started.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::{CachedClock, Clock};
    ///
    /// let clock = CachedClock::new();
    /// let refresher = clock.refresh_every(Duration::from_micros(500))?;
    /// assert_eq!(refresher.interval(), Duration::from_micros(500));
    /// assert!(clock.refresh_every(Duration::ZERO).is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn refresh_every(&self, interval: Duration) -> std::io::Result<Refresher> {
        if interval.is_zero() || interval > Duration::from_secs(3600) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("a CachedClock refresh interval of {interval:?}: give 1 ns to 1 hour (1 ms is typical)"),
            ));
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (clock, stopped) = (self.clone(), Arc::clone(&stop));
        let thread = std::thread::Builder::new().name("ratomic-clock".into()).spawn(move || {
            while !stopped.load(Ordering::Acquire) {
                clock.refresh();
                std::thread::park_timeout(interval);
            }
        })?;
        Ok(Refresher { stop, thread: Some(thread), interval })
    }
}

impl Default for CachedClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for CachedClock {
    #[inline]
    fn now(&self) -> u64 {
        self.shared.ns.load(Ordering::Relaxed)
    }

    /// Refreshes the clock, then sleeps the thread: a blocking `acquire`
    /// waiting on a clock nothing else refreshes still wakes to a later
    /// time.
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
        self.refresh();
    }

    /// The timeline of [`MonotonicClock`], read from memory.
    fn id(&self) -> ClockId {
        ClockId::MONOTONIC
    }
}

/// The thread [`CachedClock::refresh_every`] started. Dropping it stops the
/// thread and waits for it to end (at most one interval).
#[derive(Debug)]
#[must_use = "dropping the Refresher stops the thread that refreshes the clock"]
pub struct Refresher {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    interval: Duration,
}

impl Refresher {
    /// How often the thread refreshes the clock.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::CachedClock;
    ///
    /// let refresher = CachedClock::new().refresh_every(Duration::from_millis(2))?;
    /// assert_eq!(refresher.interval(), Duration::from_millis(2));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

impl Drop for Refresher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod cached_tests {
    use std::time::{Duration, Instant};

    use super::{CachedClock, Clock, MonotonicClock};

    /// Four threads refreshing and reading one clock (through clones): no
    /// reading leads the kernel's clock read after it, none goes back on a
    /// thread, and a refresh never lowers the reading another thread made.
    /// (Another thread's `MonotonicClock` reading may be a few hundred ns
    /// behind a refresh, as readings of two threads on that clock are: each
    /// extrapolates from its own anchor.)
    #[cfg(target_os = "linux")]
    #[test]
    fn readings_never_lead_the_kernel_and_never_go_back() {
        let clock = CachedClock::new();
        std::thread::scope(|s| {
            for i in 0..4 {
                let clock = clock.clone();
                s.spawn(move || {
                    let mut last = 0;
                    for j in 0..100_000u32 {
                        let t = if (i + j) % 3 == 0 { clock.refresh() } else { clock.now() };
                        let kernel = super::source::instant_nanos(Instant::now()); // CLOCK_MONOTONIC on Linux
                        assert!(t <= kernel, "reading {t} leads the kernel's clock");
                        assert!(t >= last, "went back from {last} to {t}");
                        last = t;
                    }
                });
            }
        });
    }

    /// Without a refresh, time stands still; `refresh_every`'s thread moves
    /// it, and once the `Refresher` is dropped (its thread joined), it
    /// stands still again.
    #[test]
    fn a_refresher_moves_time_until_dropped() {
        let clock = CachedClock::new();
        let start = clock.now();
        let fine = MonotonicClock::new();
        while fine.now() < start + 2_000_000 {
            std::hint::spin_loop();
        }
        assert_eq!(clock.now(), start, "nothing refreshed it: time stood still");
        let refresher = clock.refresh_every(Duration::from_micros(200)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while clock.now() == start {
            assert!(Instant::now() < deadline, "the refresher never moved the clock");
            std::thread::yield_now();
        }
        drop(refresher);
        let stopped = clock.now();
        let later = fine.now() + 2_000_000;
        while fine.now() < later {
            std::hint::spin_loop();
        }
        assert_eq!(clock.now(), stopped, "the thread ended with its Refresher");
    }

    #[test]
    fn an_interval_of_zero_or_over_an_hour_is_refused() {
        let clock = CachedClock::new();
        for bad in [Duration::ZERO, Duration::from_secs(3601)] {
            let e = clock.refresh_every(bad).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
            assert!(e.to_string().contains("1 ns to 1 hour"), "{e}");
        }
        assert!(clock.refresh_every(Duration::from_secs(3600)).is_ok());
    }

    /// A blocking `acquire` on a clock nothing refreshes still gets its
    /// token: the clock's `sleep` refreshes it.
    #[test]
    fn acquire_on_a_clock_nothing_refreshes_still_ends() {
        let clock = CachedClock::new();
        let bucket = crate::DirectTokenBucket::with_clock(crate::Quota::parse("1000/s").unwrap(), clock);
        while bucket.allow().allowed {}
        assert!(bucket.acquire(1, None).unwrap().allowed);
    }
}

mod source {
    use std::time::Instant;

    /// Now on the kernel's monotonic timeline, in nanoseconds. On Linux,
    /// `CLOCK_MONOTONIC` itself (what `Instant::now` reads): nanoseconds
    /// since boot, the same in every process of the host, so limiters in
    /// different processes sharing a file (`Options::shared_file`) agree on
    /// time. Elsewhere, nanoseconds since `epoch` (this process's first
    /// clock).
    #[inline]
    pub(super) fn instant_nanos(epoch: Instant) -> u64 {
        #[cfg(target_os = "linux")]
        {
            let _ = epoch;
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `ts` is a valid, writable timespec, and CLOCK_MONOTONIC
            // exists on every Linux: the call cannot fail.
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
            (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
        }
        #[cfg(not(target_os = "linux"))]
        {
            let d = Instant::now().saturating_duration_since(epoch);
            // Whole-u64 arithmetic: `as_nanos()` would go through u128.
            d.as_secs().wrapping_mul(1_000_000_000).wrapping_add(u64::from(d.subsec_nanos()))
        }
    }

    #[derive(Debug)]
    pub(super) struct Source {
        epoch: Instant,
        tsc: Option<tsc::Scale>,
    }

    impl Source {
        pub(super) fn new() -> Self {
            let epoch = Instant::now();
            Source { epoch, tsc: tsc::Scale::calibrate(epoch) }
        }

        pub(super) fn uses_tsc(&self) -> bool {
            self.tsc.is_some()
        }

        #[inline]
        pub(super) fn now(&self) -> u64 {
            match &self.tsc {
                Some(scale) => scale.now(self.epoch),
                None => instant_nanos(self.epoch),
            }
        }
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux", not(ratomic_loom), not(miri)))]
    mod tsc {
        use std::cell::Cell;
        use std::time::{Duration, Instant};

        use super::instant_nanos;

        /// Fixed-point ns per tick: `ns = ticks * mult >> SHIFT`.
        const SHIFT: u32 = 32;
        /// How much slower than measured the scale runs, so that a reading
        /// stays behind `Instant` between anchors (1 / 4000 = 0.025 %).
        const SLOW: f64 = 1.0 - 1.0 / 4000.0;

        #[inline]
        fn rdtsc() -> u64 {
            // SAFETY: `rdtsc` exists on every x86-64 CPU and has no
            // preconditions; it only reads the time-stamp counter.
            #[allow(unused_unsafe)]
            unsafe {
                core::arch::x86_64::_rdtsc()
            }
        }

        thread_local! {
            /// (TSC at the anchor, ns at the anchor, this thread's last reading)
            static ANCHOR: Cell<(u64, u64, u64)> = const { Cell::new((0, 0, 0)) };
        }

        #[derive(Debug)]
        pub(super) struct Scale {
            mult: u64,
            /// Ticks in one millisecond: the longest a reading extrapolates.
            max_ticks: u64,
        }

        impl Scale {
            /// Measures the TSC against `Instant` for about a millisecond,
            /// if the kernel trusts the TSC; `None` otherwise.
            pub(super) fn calibrate(epoch: Instant) -> Option<Scale> {
                let source =
                    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource").ok()?;
                if source.trim() != "tsc" {
                    return None;
                }
                // A pair (ns, tick) taken as close together as we can: the
                // tightest of a few tries (a try the hypervisor interrupted
                // has a wide gap and loses).
                let pair = || {
                    (0..16)
                        .map(|_| {
                            let t0 = rdtsc();
                            let ns = instant_nanos(epoch);
                            let t1 = rdtsc();
                            (t1.wrapping_sub(t0), ns, t0 / 2 + t1 / 2)
                        })
                        .min_by_key(|&(gap, _, _)| gap)
                        .map(|(_, ns, tick)| (ns, tick))
                        .expect("sixteen tries")
                };
                let (ns0, tick0) = pair();
                while instant_nanos(epoch).saturating_sub(ns0) < 1_000_000 {
                    std::hint::spin_loop();
                }
                let (ns1, tick1) = pair();
                let (ns, ticks) = (ns1.checked_sub(ns0)?, tick1.checked_sub(tick0)?);
                let ns_per_tick = ns as f64 / ticks as f64;
                // Sanity: a TSC between 100 MHz and 20 GHz.
                if !(0.05..=10.0).contains(&ns_per_tick) {
                    return None;
                }
                let mult = (ns_per_tick * SLOW * (1u64 << SHIFT) as f64) as u64;
                let max_ticks = (Duration::from_millis(1).as_nanos() as f64 / ns_per_tick) as u64;
                Some(Scale { mult, max_ticks })
            }

            #[inline]
            pub(super) fn now(&self, epoch: Instant) -> u64 {
                ANCHOR.with(|cell| {
                    let (tick0, ns0, last) = cell.get();
                    let ticks = rdtsc().wrapping_sub(tick0);
                    let (tick0, ns0, t) = if ticks <= self.max_ticks {
                        // max_ticks · mult < 2^64 for any TSC the sanity check admits.
                        (tick0, ns0, ns0 + ((ticks * self.mult) >> SHIFT))
                    } else {
                        self.anchor(epoch)
                    };
                    let t = t.max(last);
                    cell.set((tick0, ns0, t));
                    t
                })
            }

            #[cold]
            fn anchor(&self, epoch: Instant) -> (u64, u64, u64) {
                // `Instant` first, the TSC after: the anchor's tick is late
                // if anything, so extrapolations from it stay behind.
                let ns = instant_nanos(epoch);
                (rdtsc(), ns, ns)
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Every reading lies between `Instant` just before (less the
        /// anchor's slack) and `Instant` just after: never ahead of the
        /// kernel, never far behind, on every thread at once.
        #[test]
        fn readings_never_lead_instant_and_lag_little() {
            let source: &'static Source = Box::leak(Box::new(Source::new()));
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        let mut last = 0;
                        for i in 0..200_000u32 {
                            let before = instant_nanos(source.epoch);
                            let t = source.now();
                            let after = instant_nanos(source.epoch);
                            assert!(t <= after, "reading {t} leads Instant {after}");
                            assert!(t + 100_000 >= before, "reading {t} lags Instant {before} by > 100 µs");
                            assert!(t >= last, "went back from {last} to {t}");
                            last = t;
                            if i % 50_000 == 0 {
                                std::thread::yield_now(); // invite a migration
                            }
                        }
                    });
                }
            });
        }

        /// A coarse reading never leads the kernel's `CLOCK_MONOTONIC` read
        /// after it, and never goes back on a thread.
        #[test]
        fn coarse_readings_never_lead_the_kernel_and_never_go_back() {
            let epoch = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        let (clock, mut last) = (crate::CoarseClock::new(), 0);
                        for _ in 0..200_000u32 {
                            let t = crate::Clock::now(&clock);
                            let after = instant_nanos(epoch);
                            assert!(!cfg!(target_os = "linux") || t <= after, "reading {t} leads the kernel's {after}");
                            assert!(t >= last, "went back from {last} to {t}");
                            last = t;
                        }
                    });
                }
            });
        }

        #[test]
        fn uses_tsc_only_where_the_kernel_does() {
            let kernel = std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource");
            let kernel_tsc =
                cfg!(all(target_arch = "x86_64", target_os = "linux")) && kernel.is_ok_and(|k| k.trim() == "tsc");
            if !kernel_tsc {
                assert!(!Source::new().uses_tsc());
            }
        }
    }

    #[cfg(not(all(target_arch = "x86_64", target_os = "linux", not(ratomic_loom), not(miri))))]
    mod tsc {
        use std::time::Instant;

        #[derive(Debug)]
        pub(super) enum Scale {}

        impl Scale {
            pub(super) fn calibrate(_epoch: Instant) -> Option<Scale> {
                None
            }

            pub(super) fn now(&self, _epoch: Instant) -> u64 {
                match *self {}
            }
        }
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
    ///
    /// ```
    /// use ratomic::{Clock, ManualClock};
    ///
    /// assert_eq!(ManualClock::new().now(), 0);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock at `ns` nanoseconds.
    ///
    /// ```
    /// use ratomic::{Clock, ManualClock};
    ///
    /// assert_eq!(ManualClock::starting_at(5_000).now(), 5_000);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn starting_at(ns: u64) -> Self {
        ManualClock { ns: Arc::new(AtomicU64::new(ns)) }
    }

    /// Moves time forward by `by` (saturating).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_millis(2));
    /// assert_eq!(clock.now(), 2_000_000);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn advance(&self, by: Duration) {
        self.advance_nanos(u64::try_from(by.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Moves time forward by `ns` nanoseconds (saturating).
    ///
    /// ```
    /// use ratomic::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::starting_at(u64::MAX - 1);
    /// clock.advance_nanos(10);
    /// assert_eq!(clock.now(), u64::MAX, "saturates");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn advance_nanos(&self, ns: u64) {
        let _ = self.ns.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| Some(t.saturating_add(ns)));
    }

    /// Sets the time, forward or back.
    ///
    /// ```
    /// use ratomic::{Clock, ManualClock};
    ///
    /// let clock = ManualClock::starting_at(100);
    /// clock.set_nanos(40); // back in time: a limiter never grants more for it
    /// assert_eq!(clock.now(), 40);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn set_nanos(&self, ns: u64) {
        self.ns.store(ns, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.ns.load(Ordering::Relaxed)
    }

    /// Simulated waiting: moves the clock (every clone of it) forward by `d`.
    fn sleep(&self, d: Duration) {
        self.advance(d);
    }

    /// Every clone shares one timeline.
    fn id(&self) -> ClockId {
        ClockId::of(&*self.ns)
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
        assert!(std::ptr::eq(a.source, b.source));
        let ta = a.now();
        // Another thread's reading may lag by the anchor's slack, never more.
        assert!(b.now() + 2_000_000 >= ta);
    }

    #[test]
    fn check_time_accepts_up_to_max_time_and_refuses_past_it_as_every_at_call_does() {
        assert_eq!(check_time(0).unwrap(), 0);
        assert_eq!(check_time(MAX_TIME).unwrap(), MAX_TIME);
        for t in [MAX_TIME + 1, u64::MAX] {
            let e = check_time(t).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { name: "now", .. }), "{e:?}");
            assert_eq!(Err(e), checked(t));
        }
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
