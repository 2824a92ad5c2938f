//! Time: the default monotonic clock, the Rust `ManualClock`, or any Python
//! callable that returns seconds.

use pyo3::prelude::*;
use pyo3::types::PyFloat;

use ratomic::Clock;

use crate::error::{argument_type, invalid_argument, type_name};
use crate::key::{nanos_to_seconds, number, seconds_to_nanos, MAX_NANOS};

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
        let secs = match start {
            Some(s) => number(s, "start")?,
            None => 0.0,
        };
        let ns = seconds_to_nanos(py, secs, "start")?;
        Ok(ManualClock { inner: ratomic::ManualClock::starting_at(ns) })
    }

    /// Moves time forward by `seconds` (finite, ≥ 0).
    fn advance(&self, py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<()> {
        let ns = seconds_to_nanos(py, number(seconds, "seconds")?, "seconds")?;
        // Saturate at the engine's range rather than wrap.
        let room = MAX_NANOS - self.inner.now().min(MAX_NANOS);
        self.inner.advance_nanos(ns.min(room));
        Ok(())
    }

    /// Sets the time to `seconds` (forward or back; finite, ≥ 0).
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

/// A float as Python's `repr` writes it (`0.1`, `1.0`, `1e-09`).
pub fn py_float_repr(x: f64) -> String {
    Python::attach(|py| PyFloat::new(py, x).repr().map(|r| r.to_string())).unwrap_or_else(|_| x.to_string())
}

/// Where a limiter gets the time.
pub enum Time {
    /// The engine's own monotonic clock, read inside the call.
    Monotonic,
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
            return Ok(Time::Monotonic);
        };
        if let Ok(manual) = clock.cast::<ManualClock>() {
            return Ok(Time::Manual(manual.get().inner.clone(), clock.clone().unbind()));
        }
        if !clock.is_callable() {
            return Err(argument_type(
                clock.py(),
                format!(
                    "clock must be a callable returning seconds (or a ratomic.ManualClock), not {}",
                    type_name(clock)
                ),
            ));
        }
        Ok(Time::Callable(clock.clone().unbind()))
    }

    /// The time now, in nanoseconds, for the `*_at` methods. A callable that
    /// raises propagates its exception; one that returns something other
    /// than a number raises `ArgumentTypeError` (a `TypeError`); a negative
    /// or non-finite number raises `InvalidArgumentError`.
    #[inline]
    pub fn now(&self, py: Python<'_>, monotonic: impl FnOnce() -> u64) -> PyResult<u64> {
        match self {
            Time::Monotonic => Ok(monotonic()),
            Time::Manual(c, _) => Ok(c.now().min(MAX_NANOS)),
            Time::Callable(f) => read_callable(py, f),
        }
    }

    /// The object to show as the `clock` attribute.
    pub fn to_object(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match self {
            Time::Monotonic => py.None(),
            Time::Manual(_, obj) => obj.clone_ref(py),
            Time::Callable(f) => f.clone_ref(py),
        })
    }

    /// Whether this is the default clock (calls can read it in Rust).
    #[inline]
    pub fn is_monotonic(&self) -> bool {
        matches!(self, Time::Monotonic)
    }
}

fn read_callable(py: Python<'_>, f: &Py<PyAny>) -> PyResult<u64> {
    let value = f.bind(py).call0()?;
    let secs = if let Ok(x) = value.cast::<PyFloat>() {
        x.value()
    } else if value.is_instance_of::<pyo3::types::PyInt>() && !value.is_instance_of::<pyo3::types::PyBool>() {
        value.extract::<f64>()?
    } else {
        return Err(argument_type(
            py,
            format!("the clock returned {}, expected a number of seconds", type_name(&value)),
        ));
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(invalid_argument(
            py,
            format!("the clock returned {secs}, expected a finite number of seconds ≥ 0"),
        ));
    }
    Ok(((secs * 1e9).round() as u64).min(MAX_NANOS))
}
