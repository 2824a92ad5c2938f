//! Time: the clock every native limiter reads, tagged with the JavaScript
//! clock it was given, and clock readings from milliseconds to nanoseconds.
//!
//! A JavaScript clock (a function returning milliseconds, or a
//! `ManualClock`) is read in JavaScript and its reading passed to every
//! call, so the native limiter itself always reads the process's monotonic
//! clock. What it keeps of the JavaScript clock is its identity, as core's
//! [`ClockId`]: a `Stack` then refuses, in core, members whose clocks
//! differ.

use std::sync::Arc;

use napi_derive::napi;
use ratomic::{Clock, ClockId, CoarseClock, MonotonicClock, MAX_TIME};

use crate::error::{JsFailure, Res};

/// The identity of one JavaScript clock: its address is the clock's
/// [`ClockId`] (not zero-sized, so every tag has its own address).
#[derive(Debug)]
struct Tag(#[allow(dead_code)] u8);

/// The clock of a native limiter: the monotonic clock (or, opted into, the
/// coarse one), and the JavaScript clock (if any) whose readings the
/// limiter's calls are given.
#[derive(Clone, Debug, Default)]
pub struct FaceClock {
    monotonic: MonotonicClock,
    /// Read `CoarseClock` natively instead of `monotonic`.
    coarse: bool,
    js: Option<Arc<Tag>>,
}

impl FaceClock {
    /// The clock of a limiter given `js` (none: the monotonic clock; the
    /// coarse clock's identity: the coarse clock, read natively).
    pub fn new(js: Option<&NativeClock>) -> Self {
        match js {
            Some(c) if c.coarse => FaceClock { monotonic: MonotonicClock::new(), coarse: true, js: None },
            _ => FaceClock { monotonic: MonotonicClock::new(), coarse: false, js: js.map(|c| c.tag.clone()) },
        }
    }
}

impl Clock for FaceClock {
    #[inline]
    fn now(&self) -> u64 {
        if self.coarse {
            CoarseClock::new().now()
        } else {
            self.monotonic.now()
        }
    }

    /// The coarse clock reads the monotonic timeline: its limiters share a
    /// `Stack` or a shared file with the default clock's.
    fn id(&self) -> ClockId {
        match &self.js {
            None => ClockId::MONOTONIC,
            Some(tag) => ClockId::of(&**tag),
        }
    }
}

/// The native identity of one JavaScript clock. `ratomic.js` makes one per
/// clock object and passes it to every limiter built with that clock, so
/// limiters on the same JavaScript clock have the same `ClockId`; the one
/// of a `CoarseClock` ([`NativeClock::coarse`]) makes the limiter read the
/// coarse clock natively.
#[napi]
pub struct NativeClock {
    tag: Arc<Tag>,
    coarse: bool,
}

#[napi]
impl NativeClock {
    /// A new identity, distinct from every other.
    #[napi(constructor)]
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        NativeClock { tag: Arc::new(Tag(0)), coarse: false }
    }

    /// The coarse clock's: limiters given it read `CLOCK_MONOTONIC_COARSE`
    /// natively, on the monotonic timeline.
    #[napi(factory)]
    pub fn coarse() -> Self {
        NativeClock { tag: Arc::new(Tag(0)), coarse: true }
    }

    /// The coarse clock's reading, in milliseconds on the host's monotonic
    /// timeline.
    #[napi]
    pub fn coarse_now_ms() -> f64 {
        ns_to_ms(CoarseClock::new().now())
    }

    /// The coarse clock's resolution (the kernel's tick), in milliseconds.
    #[napi]
    pub fn coarse_resolution_ms() -> f64 {
        CoarseClock::new().resolution().as_secs_f64() * 1e3
    }
}

/// A clock reading in milliseconds as nanoseconds on the limiter's timeline.
///
/// Negative, NaN or past core's [`MAX_TIME`] is an error that changes no
/// state: never clamped.
#[inline]
pub fn ms_to_ns(ms: f64) -> Res<u64> {
    let ns = ms * 1e6;
    // `MAX_TIME` (2^62 − 1) is not a double; 2^62 is, and every double below it
    // rounds to a time of at most `MAX_TIME`.
    if ns >= 0.0 && ns < (MAX_TIME + 1) as f64 {
        Ok((ns.round() as u64).min(MAX_TIME))
    } else {
        Err(bad_reading(ms))
    }
}

#[cold]
fn bad_reading(ms: f64) -> JsFailure {
    JsFailure::range(
        "ERR_RATOMIC_INVALID_CLOCK",
        format!(
            "invalid clock reading: {} ms (a time must be a number of milliseconds >= 0 and at most 2^62 − 1 ns, \
             {} ms, after the clock's epoch)",
            crate::error::js_number(ms),
            MAX_TIME as f64 / 1e6
        ),
    )
}

/// Nanoseconds as milliseconds, the unit of every JavaScript duration.
#[inline]
pub fn ns_to_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}
