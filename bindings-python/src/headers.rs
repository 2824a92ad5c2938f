//! HTTP header fields and problem bodies from decisions: core's
//! `ratomic::headers`, reached through each limiter's `headers()` and
//! `problem()` methods. Nothing is formatted here.

use pyo3::prelude::*;

use ratomic::headers::{Headers, Policy};
use ratomic::{Algorithm, Decision, Rule};

use crate::decision::MultiDecision;
use crate::error::CoreResultExt;

/// `(name, value)` pairs, in the order a response should carry them.
pub type Fields = Vec<(&'static str, String)>;

/// The fields (`legacy`: with the `X-RateLimit-*` ones) of a headers value.
pub fn fields(legacy: bool) -> impl FnOnce(&Headers<'_>) -> Fields {
    move |h| h.fields(legacy)
}

/// The problem body of a headers value (None when allowed).
pub fn problem(h: &Headers<'_>) -> Option<String> {
    h.problem_json()
}

/// `f` of the headers of a single limit's decision, the limit named `name`.
pub fn with_single<T>(
    py: Python<'_>,
    name: &str,
    alg: &impl Algorithm,
    d: Decision,
    f: impl FnOnce(&Headers<'_>) -> T,
) -> PyResult<T> {
    let p = Policy::of(name, alg).py_err(py)?;
    let h = Headers::single(&p, d);
    Ok(f(&h))
}

/// `f` of the headers of a multi-limit decision of a limiter whose limits
/// are `names` / `rules`, listing the limits the call was subject to.
pub fn with_multi<'a, T>(
    py: Python<'_>,
    names: impl Iterator<Item = &'a str>,
    rules: &[Rule],
    d: &MultiDecision,
    f: impl FnOnce(&Headers<'_>) -> T,
) -> PyResult<T> {
    let policies = names.zip(rules).map(|(n, r)| Policy::of(n, r)).collect::<ratomic::Result<Vec<_>>>().py_err(py)?;
    let (entries, combined) = d.parts();
    let h = Headers::from_parts(&policies, entries.iter().copied(), combined).py_err(py)?;
    Ok(f(&h))
}
