//! `SlidingWindow`: a sliding-window counter per key (a `Keyed` limiter).

use std::time::Duration;

use pyo3::prelude::*;

use ratomic::Rule;

use crate::error::CoreResultExt;
use crate::keyed::Keyed;
use crate::rule::rate;
use crate::store::StoreArgs;

/// At most `limit` calls per key in any `window_secs` seconds, by the
/// sliding-window counter approximation: the current window's count plus
/// the previous window's, weighted by how much of it still overlaps the
/// last `window_secs` seconds.
#[pyclass(frozen, extends = Keyed, module = "ratomic", name = "SlidingWindow")]
pub struct SlidingWindow {
    window: Duration,
}

#[pymethods]
impl SlidingWindow {
    /// `(100, 60.0)`: 100 calls per 60-second window (`window_secs`, in
    /// seconds); or a rate string: `("100/min")`.
    #[new]
    #[pyo3(signature = (
        limit, window_secs=None, *, clock=None, max_keys=None, max_key_len=None, max_key_bytes=None, reserve_keys=None, eviction=None, shared_file=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        limit: &Bound<'_, PyAny>,
        window_secs: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        max_key_len: Option<&Bound<'_, PyAny>>,
        max_key_bytes: Option<&Bound<'_, PyAny>>,
        reserve_keys: Option<&Bound<'_, PyAny>>,
        eviction: Option<&Bound<'_, PyAny>>,
        shared_file: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(Self, Keyed)> {
        let rate = rate(limit, window_secs)?;
        let rule = Rule::sliding_window(rate).py_err(py)?;
        let store = StoreArgs { max_keys, max_key_len, max_key_bytes, reserve_keys, eviction, shared_file };
        Ok((SlidingWindow { window: rate.period() }, Keyed::new(py, rule, clock, store.options()?)?))
    }

    /// The window length, in seconds.
    #[getter]
    fn window_secs(&self) -> f64 {
        self.window.as_secs_f64()
    }
}
