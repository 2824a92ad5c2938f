//! Rules (quotas and window rates) from Python arguments, and the `Rule`
//! class a `Limiter` is built from.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyString;

use ratomic::{Quota, Rate};

use crate::clock::{py_float_repr, seconds_to_nanos};
use crate::error::{argument_type, type_name, CoreResultExt};
use crate::key::{number, whole};

/// A token-bucket quota from `(capacity, refill_per_sec)`:
/// - `("10/s", None)`: a rate string, burst = count;
/// - `(10, 2.5)`: capacity and tokens per second;
/// - `(50, "10/s")`: capacity 50, refilled at the rate's pace.
pub fn quota(capacity: &Bound<'_, PyAny>, refill_per_sec: Option<&Bound<'_, PyAny>>) -> PyResult<Quota> {
    let py = capacity.py();
    let refill = refill_per_sec.filter(|r| !r.is_none());
    if let Ok(rate) = capacity.cast::<PyString>() {
        if refill.is_some() {
            return Err(argument_type(
                py,
                "give either a rate string (TokenBucket(\"10/s\")) or capacity and refill_per_sec \
                 (TokenBucket(10, 10.0)), not both"
                    .to_owned(),
            ));
        }
        return Quota::parse(&rate.to_cow()?).py_err(py);
    }
    let capacity = whole(capacity, "capacity")?;
    let Some(refill) = refill else {
        return Err(argument_type(
            py,
            "refill_per_sec is missing: give TokenBucket(capacity, refill_per_sec) or a rate string such as \"10/s\""
                .to_owned(),
        ));
    };
    if let Ok(rate) = refill.cast::<PyString>() {
        return Quota::parse(&rate.to_cow()?).and_then(|q| q.with_burst(capacity)).py_err(py);
    }
    Quota::new(capacity, number(refill, "refill_per_sec")?).py_err(py)
}

/// A window rate from `(limit, window)`: `("100/min", None)`, or
/// `(100, 60.0)` with the window in seconds.
pub fn rate(limit: &Bound<'_, PyAny>, window: Option<&Bound<'_, PyAny>>) -> PyResult<Rate> {
    let py = limit.py();
    let window = window.filter(|w| !w.is_none());
    if let Ok(rate) = limit.cast::<PyString>() {
        if window.is_some() {
            return Err(argument_type(
                py,
                "give either a rate string (\"100/min\") or limit and window (100, 60.0), not both".to_owned(),
            ));
        }
        return Rate::parse(&rate.to_cow()?).py_err(py);
    }
    let count = whole(limit, "limit")?;
    let Some(window) = window else {
        return Err(argument_type(
            py,
            "window is missing: give (limit, window_seconds) or a rate string such as \"100/min\"".to_owned(),
        ));
    };
    if window.is_instance_of::<PyString>() {
        return Err(argument_type(
            py,
            format!(
                "window must be a number of seconds, not str; for a rate string write \"{count}/{}\" as the only argument",
                window.str().map(|s| s.to_string()).unwrap_or_default()
            ),
        ));
    }
    // Core checks the rate: a limit of at least 1, a window longer than
    // zero and at most 2^63 − 1 ns.
    let window = seconds_to_nanos(py, number(window, "window")?, "window")?;
    Rate::new(count, Duration::from_nanos(window)).py_err(py)
}

/// One limit of a `Limiter`: a token bucket, a fixed window or a sliding
/// window. A bare rate string stands for `Rule.token_bucket(rate)`.
#[pyclass(frozen, eq, module = "ratomic", name = "Rule")]
#[derive(Clone, PartialEq)]
pub struct Rule(pub ratomic::Rule);

#[pymethods]
impl Rule {
    /// A token bucket: `Rule.token_bucket("10/s")`, `Rule.token_bucket(10, 2.5)`
    /// or `Rule.token_bucket(50, "10/s")` (as `TokenBucket` takes them).
    #[staticmethod]
    #[pyo3(signature = (capacity, refill_per_sec=None))]
    fn token_bucket(capacity: &Bound<'_, PyAny>, refill_per_sec: Option<&Bound<'_, PyAny>>) -> PyResult<Rule> {
        Ok(Rule(ratomic::Rule::token_bucket(quota(capacity, refill_per_sec)?)))
    }

    /// A fixed window: `Rule.fixed_window("1000/day")` or `Rule.fixed_window(1000, 86400.0)`.
    #[staticmethod]
    #[pyo3(signature = (limit, window=None))]
    fn fixed_window(limit: &Bound<'_, PyAny>, window: Option<&Bound<'_, PyAny>>) -> PyResult<Rule> {
        let r = rate(limit, window)?;
        ratomic::Rule::fixed_window(r).map(Rule).py_err(limit.py())
    }

    /// A sliding window: `Rule.sliding_window("100/h")` or `Rule.sliding_window(100, 3600.0)`.
    #[staticmethod]
    #[pyo3(signature = (limit, window=None))]
    fn sliding_window(limit: &Bound<'_, PyAny>, window: Option<&Bound<'_, PyAny>>) -> PyResult<Rule> {
        let r = rate(limit, window)?;
        ratomic::Rule::sliding_window(r).map(Rule).py_err(limit.py())
    }

    /// `"token_bucket"`, `"fixed_window"` or `"sliding_window"`.
    #[getter]
    fn kind(&self) -> &'static str {
        match self.0 {
            ratomic::Rule::TokenBucket(_) => "token_bucket",
            ratomic::Rule::FixedWindow(_) => "fixed_window",
            ratomic::Rule::SlidingWindow(_) => "sliding_window",
            _ => "unknown",
        }
    }

    /// The most a key can hold under this rule (capacity or window limit).
    #[getter]
    fn limit(&self) -> u64 {
        use ratomic::Algorithm;
        self.0.limit()
    }

    fn __repr__(&self) -> String {
        rule_repr(&self.0)
    }
}

/// `Rule.token_bucket(10, 10.0)` and so on: a repr that rebuilds the rule.
pub fn rule_repr(rule: &ratomic::Rule) -> String {
    match rule {
        ratomic::Rule::TokenBucket(g) => {
            let q = g.quota();
            format!("Rule.token_bucket({}, {})", q.capacity(), py_float_repr(q.refill_per_sec()))
        }
        ratomic::Rule::FixedWindow(f) => {
            format!("Rule.fixed_window({}, {})", window_count(rule), py_float_repr(f.window().as_secs_f64()))
        }
        ratomic::Rule::SlidingWindow(s) => {
            format!("Rule.sliding_window({}, {})", window_count(rule), py_float_repr(s.window().as_secs_f64()))
        }
        other => format!("{other:?}"),
    }
}

fn window_count(rule: &ratomic::Rule) -> u64 {
    use ratomic::Algorithm;
    rule.limit()
}

/// A `Rule` from a `Limiter`'s limits: a `Rule` or a rate string.
pub fn rule_arg(obj: &Bound<'_, PyAny>) -> PyResult<ratomic::Rule> {
    if let Ok(r) = obj.cast::<Rule>() {
        return Ok(r.get().0);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return ratomic::Rule::parse(&s.to_cow()?).py_err(obj.py());
    }
    Err(argument_type(
        obj.py(),
        format!("a limit must be a rate string such as \"10/s\" or a ratomic.Rule, not {}", type_name(obj)),
    ))
}
