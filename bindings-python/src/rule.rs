//! Rules (quotas and window rates) from Python arguments, and the `Rule`
//! class a `Limiter` is built from.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyString;

use ratomic::{Quota, Rate};

use crate::error::py_float_repr;
use crate::error::{argument_type, invalid_argument, type_name, CoreResultExt};
use crate::key::{as_given, number, whole_from};

/// The longest duration the engine holds: 2^63 − 1 ns (about 292 years).
const MAX_NANOS: u64 = (1 << 63) - 1;

/// A token-bucket quota from `(capacity, refill_per_sec)`:
/// - `("10/s", None)`: a rate string, burst = count;
/// - `(10, 2.5)`: capacity and tokens per second;
/// - `(50, "10/s")`: capacity 50, refilled at the rate's pace.
///
/// Each number is checked here, so its error names the parameter, the
/// value as written and the accepted range.
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
    let capacity_n = whole_from(capacity, "capacity", 1)?;
    let Some(refill) = refill else {
        return Err(argument_type(
            py,
            "refill_per_sec is missing: give TokenBucket(capacity, refill_per_sec) or a rate string such as \"10/s\""
                .to_owned(),
        ));
    };
    let pace = if let Ok(rate) = refill.cast::<PyString>() {
        Quota::parse(&rate.to_cow()?).py_err(py)?
    } else {
        refill_arg(refill)?
    };
    with_capacity(pace, capacity, capacity_n, "capacity")
}

/// A refill rate in tokens per second, as a one-token quota: finite and
/// large enough that one token refills within 2^63 − 1 ns.
fn refill_arg(obj: &Bound<'_, PyAny>) -> PyResult<Quota> {
    let x = number(obj, "refill_per_sec")?;
    let min = 1e9 / MAX_NANOS as f64;
    match Quota::new(1, x) {
        Ok(q) if x > min => Ok(q),
        _ => Err(invalid_argument(
            obj.py(),
            format!(
                "invalid refill_per_sec: {} (must be a finite number of tokens per second greater than {}: \
                 one token per 2^63 − 1 ns, about 292 years)",
                as_given(obj),
                py_float_repr(min)
            ),
        )),
    }
}

/// `pace` with a burst of `capacity` (the argument `obj`, named `name`):
/// the burst must refill within 2^63 − 1 ns at that pace.
pub fn with_capacity(pace: Quota, obj: &Bound<'_, PyAny>, capacity: u64, name: &str) -> PyResult<Quota> {
    pace.with_burst(capacity).map_err(|_| {
        let max = MAX_NANOS / pace.emission_interval_nanos();
        invalid_argument(
            obj.py(),
            format!(
                "invalid {name}: {} (must be a whole number from 1 to {max} at {} tokens per second: \
                 a full refill must take at most 2^63 − 1 ns, about 292 years)",
                as_given(obj),
                py_float_repr(pace.refill_per_sec())
            ),
        )
    })
}

/// A window rate from `(limit, window_secs)`: `("100/min", None)`, or
/// `(100, 60.0)` with the window in seconds.
pub fn rate(limit: &Bound<'_, PyAny>, window_secs: Option<&Bound<'_, PyAny>>) -> PyResult<Rate> {
    let py = limit.py();
    let window = window_secs.filter(|w| !w.is_none());
    if let Ok(rate) = limit.cast::<PyString>() {
        if window.is_some() {
            return Err(argument_type(
                py,
                "give either a rate string (\"100/min\") or limit and window_secs (100, 60.0), not both".to_owned(),
            ));
        }
        return Rate::parse(&rate.to_cow()?).py_err(py);
    }
    let count = whole_from(limit, "limit", 1)?;
    let Some(window) = window else {
        return Err(argument_type(
            py,
            "window_secs is missing: give (limit, window_secs) or a rate string such as \"100/min\"".to_owned(),
        ));
    };
    if window.is_instance_of::<PyString>() {
        // A bare number ("60") is seconds: suggest the string that parses.
        let period = window.str().map(|s| s.to_string()).unwrap_or_default();
        let period = period.trim();
        let unit = if !period.is_empty() && period.bytes().all(|b| b.is_ascii_digit()) { "s" } else { "" };
        return Err(argument_type(
            py,
            format!(
                "window_secs must be a number of seconds, not str: {}; for a rate string write \"{count}/{period}{unit}\" \
                 as the only argument",
                as_given(window),
            ),
        ));
    }
    let secs = number(window, "window_secs")?;
    // Seconds become whole nanoseconds, rounded to the nearest: from 1 ns
    // to 2^63 − 1 ns.
    let ns = (secs * 1e9).round();
    // `MAX_NANOS as f64` rounds up to 2^63: below it, every float is at
    // most 2^63 − 1024.
    if !(ns >= 1.0 && ns < MAX_NANOS as f64) {
        return Err(invalid_argument(
            py,
            format!(
                "invalid window_secs: {} (must be a number of seconds from 1e-09 to 9223372036.854775807: \
                 1 ns to 2^63 − 1 ns, about 292 years)",
                as_given(window)
            ),
        ));
    }
    Rate::new(count, Duration::from_nanos(ns as u64)).py_err(py)
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
    #[pyo3(signature = (limit, window_secs=None))]
    fn fixed_window(limit: &Bound<'_, PyAny>, window_secs: Option<&Bound<'_, PyAny>>) -> PyResult<Rule> {
        let r = rate(limit, window_secs)?;
        ratomic::Rule::fixed_window(r).map(Rule).py_err(limit.py())
    }

    /// A sliding window: `Rule.sliding_window("100/h")` or `Rule.sliding_window(100, 3600.0)`.
    #[staticmethod]
    #[pyo3(signature = (limit, window_secs=None))]
    fn sliding_window(limit: &Bound<'_, PyAny>, window_secs: Option<&Bound<'_, PyAny>>) -> PyResult<Rule> {
        let r = rate(limit, window_secs)?;
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

    /// `Rule.fixed_window(5, window_secs=60.0)`: a repr that rebuilds the rule.
    fn __repr__(&self) -> String {
        rule_repr(&self.0)
    }

    /// `fixed window 5 per 1m`: the rule with its unit, as every face prints it.
    fn __str__(&self) -> String {
        self.0.to_string()
    }
}

/// `Rule.token_bucket(10, refill_per_sec=10.0)`, `Rule.fixed_window(5,
/// window_secs=60.0)`: a repr that rebuilds the rule, its units named.
pub fn rule_repr(rule: &ratomic::Rule) -> String {
    match rule {
        ratomic::Rule::TokenBucket(g) => {
            let q = g.quota();
            format!("Rule.token_bucket({}, refill_per_sec={})", q.capacity(), py_float_repr(q.refill_per_sec()))
        }
        ratomic::Rule::FixedWindow(f) => {
            let secs = py_float_repr(f.window().as_secs_f64());
            format!("Rule.fixed_window({}, window_secs={secs})", window_count(rule))
        }
        ratomic::Rule::SlidingWindow(s) => {
            let secs = py_float_repr(s.window().as_secs_f64());
            format!("Rule.sliding_window({}, window_secs={secs})", window_count(rule))
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
