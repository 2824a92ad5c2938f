//! Time: the default monotonic clock, the opt-in `CoarseClock`, the Rust
//! `ManualClock`, or any Python
//! callable that returns seconds, as one `ratomic::Clock` ([`Time`]) that
//! every limiter of this face is built with. Core thus knows which timeline
//! each limiter reads, and refuses a `Stack` whose members read different
//! ones; and every time reaches core unclamped, so core's bound
//! (`ratomic::MAX_TIME`) is the only one.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt};

use ratomic::{Clock, ClockId, MAX_TIME};

use crate::error::{argument_type, invalid_argument, py_float_repr, type_name};
use crate::key::{as_given, number};

/// A clock that moves only when told to, for tests and simulations.
///
/// Implemented in Rust: a limiter given a `ManualClock` reads it natively
/// (no Python call). Any number of limiters can share one clock. The clock
/// is also a callable returning seconds, so it can drive anything that
/// takes a `clock=` callable.
#[pyclass(frozen, module = "ratomic", name = "ManualClock")]
#[derive(Clone)]
pub struct ManualClock {
    pub(crate) inner: ratomic::ManualClock,
}

#[pymethods]
impl ManualClock {
    /// A clock at `start` seconds (default 0).
    #[new]
    #[pyo3(signature = (start=None), text_signature = "(start=0.0)")]
    fn new(py: Python<'_>, start: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let ns = match start {
            Some(s) => seconds_to_nanos(py, number(s, "start")?, "start")?,
            None => 0,
        };
        Ok(ManualClock { inner: ratomic::ManualClock::starting_at(ns) })
    }

    /// Moves time forward by `seconds` (≥ 0). A limiter refuses to read a
    /// time past 2^62 − 1 ns (about 146 years).
    fn advance(&self, py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.advance_nanos(seconds_to_nanos(py, number(seconds, "seconds")?, "seconds")?);
        Ok(())
    }

    /// Sets the time to `seconds` (forward or back; ≥ 0).
    fn set(&self, py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.set_nanos(seconds_to_nanos(py, number(seconds, "seconds")?, "seconds")?);
        Ok(())
    }

    /// The time, in seconds.
    fn now(&self) -> f64 {
        nanos_to_seconds(self.inner.now())
    }

    /// The time, in whole nanoseconds.
    fn now_ns(&self) -> u64 {
        self.inner.now()
    }

    /// The time, in seconds: a `ManualClock` is itself a clock callable.
    fn __call__(&self) -> f64 {
        self.now()
    }

    fn __repr__(&self) -> String {
        format!("ManualClock(now={})", py_float_repr(self.now()))
    }
}

/// The opt-in coarse clock: the kernel's `CLOCK_MONOTONIC_COARSE` on Linux,
/// the same timeline as the default clock, read several times more cheaply
/// but in steps of one kernel tick (`resolution`, typically 4 ms).
///
/// Pass it as `clock=` to any limiter: it is read natively (no Python call),
/// and works with `shared_file=` and in a `Stack` beside limiters on the
/// default clock. A limiter on it never grants more than its limit over
/// the clock's own time; against real time, at most `rate × resolution`
/// more over any span (4 tokens for 1000/s on a 4 ms tick). Where that
/// matters, keep the default clock.
#[pyclass(frozen, module = "ratomic", name = "CoarseClock")]
#[derive(Clone)]
pub struct CoarseClock {
    inner: ratomic::CoarseClock,
}

#[pymethods]
impl CoarseClock {
    #[new]
    fn new() -> Self {
        CoarseClock { inner: ratomic::CoarseClock::new() }
    }

    /// The time, in seconds on the host's monotonic timeline.
    fn now(&self) -> f64 {
        nanos_to_seconds(self.inner.now())
    }

    /// The time, in whole nanoseconds.
    fn now_ns(&self) -> u64 {
        self.inner.now()
    }

    /// How far apart its readings step, in seconds (the kernel's tick).
    #[getter]
    fn resolution(&self) -> f64 {
        self.inner.resolution().as_secs_f64()
    }

    /// The time, in seconds: a `CoarseClock` is itself a clock callable.
    fn __call__(&self) -> f64 {
        self.now()
    }

    fn __repr__(&self) -> String {
        format!("CoarseClock(resolution={})", py_float_repr(self.resolution()))
    }
}

/// The latest time a limiter takes, in the words of every error about it.
const LATEST: &str = "4611686018.427387903 seconds: 2^62 − 1 ns, about 146 years after the clock's epoch";

/// Seconds from Python as whole nanoseconds, rounded to the nearest: the one
/// conversion of a duration into the engine's unit.
///
/// NaN, infinities, negative numbers and numbers of 2^64 ns or more (about
/// 584 years) are `InvalidArgumentError`s naming `name` and quoting the
/// value: nothing is clamped into range, and no error ever shows a
/// saturated 18446744073709551615 for a value the user did not give.
pub fn seconds_to_nanos(py: Python<'_>, secs: f64, name: &str) -> PyResult<u64> {
    // 2^64 is a float; every float below it rounds to a u64.
    const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
    if !secs.is_finite() || secs < 0.0 {
        return Err(invalid_argument(
            py,
            format!("invalid {name}: {} (must be a finite number of seconds ≥ 0)", py_float_repr(secs)),
        ));
    }
    let ns = (secs * 1e9).round();
    if ns >= TWO_POW_64 {
        return Err(invalid_argument(
            py,
            format!(
                "invalid {name}: {} (must be at most 18446744073.709551615 seconds: 2^64 − 1 ns, about 584 years)",
                py_float_repr(secs)
            ),
        ));
    }
    Ok(ns as u64)
}

/// A time (a clock reading, `now`) from Python seconds as nanoseconds:
/// NaN, infinities, negative numbers and times past `ratomic::MAX_TIME` are
/// `InvalidArgumentError`s naming `name` and quoting `shown()`, the value as
/// the user gave it.
pub fn time_to_nanos(py: Python<'_>, secs: f64, name: &str, shown: impl FnOnce() -> String) -> PyResult<u64> {
    if secs.is_nan() || secs < 0.0 {
        return Err(invalid_argument(
            py,
            format!("invalid {name}: {} (must be a finite number of seconds ≥ 0)", shown()),
        ));
    }
    // 2^62 is a float; every float below it rounds to at most MAX_TIME.
    let ns = (secs * 1e9).round();
    if ns < (MAX_TIME + 1) as f64 {
        return Ok((ns as u64).min(MAX_TIME));
    }
    Err(too_late(py, name, &shown()))
}

#[cold]
fn too_late(py: Python<'_>, name: &str, shown: &str) -> PyErr {
    invalid_argument(py, format!("invalid {name}: {shown} (a time must be at most {LATEST})"))
}

/// Nanoseconds as float seconds: the one conversion back (a `Duration`
/// from core reads as `as_secs_f64`).
#[inline]
pub fn nanos_to_seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// Where a limiter gets the time: the `ratomic::Clock` of every limiter in
/// this face.
pub enum Time {
    /// The engine's own monotonic clock, read inside the call.
    Monotonic(ratomic::MonotonicClock),
    /// The opt-in coarse clock, read natively (and the Python object, to
    /// hand back as the limiter's `clock`).
    Coarse(ratomic::CoarseClock, Py<PyAny>),
    /// A ratomic `ManualClock`, read natively (and the Python object, to
    /// hand back as the limiter's `clock`).
    Manual(ratomic::ManualClock, Py<PyAny>),
    /// A Python callable returning seconds.
    Callable(Py<PyAny>),
}

impl Time {
    /// From the `clock=` argument: None, a `ManualClock`, or a callable.
    pub fn from_arg(clock: Option<&Bound<'_, PyAny>>) -> PyResult<Time> {
        let Some(clock) = clock.filter(|c| !c.is_none()) else {
            return Ok(Time::Monotonic(ratomic::MonotonicClock::new()));
        };
        if let Ok(manual) = clock.cast::<ManualClock>() {
            return Ok(Time::Manual(manual.get().inner.clone(), clock.clone().unbind()));
        }
        if let Ok(coarse) = clock.cast::<CoarseClock>() {
            return Ok(Time::Coarse(coarse.get().inner, clock.clone().unbind()));
        }
        if !clock.is_callable() {
            return Err(argument_type(
                clock.py(),
                format!(
                    "clock must be a callable returning seconds (or a ratomic.ManualClock or ratomic.CoarseClock), not {}",
                    type_name(clock)
                ),
            ));
        }
        Ok(Time::Callable(clock.clone().unbind()))
    }

    /// The time now, in nanoseconds, for the core's `*_at` methods, which
    /// refuse a time past `ratomic::MAX_TIME`. A callable that raises
    /// propagates its exception; one that returns something other than a
    /// number raises `ArgumentTypeError` (a `TypeError`); NaN or a negative
    /// number raises `InvalidArgumentError`.
    #[inline]
    pub fn read(&self, py: Python<'_>) -> PyResult<u64> {
        match self {
            Time::Monotonic(c) => Ok(c.now()),
            Time::Coarse(c, _) => Ok(c.now()),
            Time::Manual(c, _) => match c.now() {
                ns if ns <= MAX_TIME => Ok(ns),
                // Moved past the last time: quoted in seconds, as it was set.
                ns => Err(too_late(py, "clock reading", &py_float_repr(nanos_to_seconds(ns)))),
            },
            Time::Callable(f) => read_callable(py, f),
        }
    }

    /// The object to show as the `clock` attribute (None: the monotonic default).
    pub fn to_object(&self, py: Python<'_>) -> Py<PyAny> {
        match self {
            Time::Monotonic(_) => py.None(),
            Time::Coarse(_, obj) | Time::Manual(_, obj) => obj.clone_ref(py),
            Time::Callable(f) => f.clone_ref(py),
        }
    }

    /// Another handle on the same clock.
    pub fn clone_ref(&self, py: Python<'_>) -> Time {
        match self {
            Time::Monotonic(c) => Time::Monotonic(*c),
            Time::Coarse(c, obj) => Time::Coarse(*c, obj.clone_ref(py)),
            Time::Manual(c, obj) => Time::Manual(c.clone(), obj.clone_ref(py)),
            Time::Callable(f) => Time::Callable(f.clone_ref(py)),
        }
    }
}

/// What core sees. This face reads the time itself ([`Time::read`]) and
/// calls core's `*_at` methods, so a Python clock's exception reaches the
/// caller; `now` here serves only core code that reads the clock on its own.
impl Clock for Time {
    #[inline]
    fn now(&self) -> u64 {
        match self {
            Time::Monotonic(c) => c.now(),
            Time::Coarse(c, _) => c.now(),
            Time::Manual(c, _) => c.now(),
            // A failed reading is reported as unraisable and gives a time
            // past MAX_TIME, which core refuses, changing nothing.
            Time::Callable(f) => Python::attach(|py| {
                read_callable(py, f).unwrap_or_else(|e| {
                    e.write_unraisable(py, None);
                    u64::MAX
                })
            }),
        }
    }

    fn sleep(&self, d: Duration) {
        match self {
            Time::Manual(c, _) => c.sleep(d),
            _ => std::thread::sleep(d),
        }
    }

    /// Limiters share a timeline when they share the monotonic default, one
    /// `ManualClock`, or one callable object.
    fn id(&self) -> ClockId {
        match self {
            Time::Monotonic(c) => c.id(),
            Time::Coarse(c, _) => c.id(),
            Time::Manual(c, _) => c.id(),
            // SAFETY: an empty slice at the object's address reads nothing
            // (any non-null, aligned pointer makes a valid empty slice); it
            // only gives `ClockId::of` the address. The object outlives the
            // limiter holding this `Time`, so no other object can take the
            // address meanwhile.
            Time::Callable(f) => ClockId::of(unsafe { std::slice::from_raw_parts(f.as_ptr().cast::<u8>(), 0) }),
        }
    }
}

fn read_callable(py: Python<'_>, f: &Py<PyAny>) -> PyResult<u64> {
    let value = f.bind(py).call0()?;
    let secs = if let Ok(x) = value.cast::<PyFloat>() {
        x.value()
    } else if value.is_instance_of::<PyInt>() && !value.is_instance_of::<pyo3::types::PyBool>() {
        // An int too large for a float is past every time: infinity, refused
        // below quoting the int itself.
        value.extract::<f64>().unwrap_or(f64::INFINITY)
    } else {
        return Err(argument_type(
            py,
            format!("the clock returned {}, expected a number of seconds", type_name(&value)),
        ));
    };
    time_to_nanos(py, secs, "clock reading", || as_given(&value))
}
