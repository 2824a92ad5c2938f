//! HTTP header fields and problem bodies from decisions: core's
//! `ratomic::headers`, reached through each limiter's `headers()` and
//! `problem()` methods. Nothing is formatted here.

use pyo3::prelude::*;

use ratomic::headers::{Draft, Headers, Policy};
use ratomic::{Algorithm, Decision, Rule};

use crate::decision::{self, MultiDecision, Source};
use crate::error::{invalid_argument, CoreResultExt};

/// `(name, value)` pairs, in the order a response should carry them.
pub type Fields = Vec<(&'static str, String)>;

/// The fields of a headers value: the standard ones as the draft named
/// `draft` writes them, and with `legacy` the `X-RateLimit-*` ones. An
/// `InvalidArgumentError` if `draft` names no draft ratomic writes.
pub fn fields(py: Python<'_>, draft: &str, legacy: bool) -> PyResult<impl FnOnce(&Headers<'_>) -> Fields> {
    let draft = draft_named(py, draft)?;
    Ok(move |h: &Headers<'_>| h.fields_in(draft, legacy))
}

/// The draft every `headers(draft=...)` takes by name: `"draft-11"` (the
/// default), `"draft-8"` (whose fields are draft 11's), `"draft-7"` or
/// `"draft-6"`, the names Node's `headers({ draft })` takes.
pub(crate) fn draft_named(py: Python<'_>, name: &str) -> PyResult<Draft> {
    match name {
        "draft-11" | "draft-8" => Ok(Draft::Draft11),
        "draft-7" => Ok(Draft::Draft7),
        "draft-6" => Ok(Draft::Draft6),
        other => Err(invalid_argument(
            py,
            format!("invalid draft: {other:?} (must be \"draft-11\", \"draft-8\", \"draft-7\" or \"draft-6\")"),
        )),
    }
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
    with_policies(py, &policies, d, f)
}

/// `f` of the headers of a decision of a limiter in a shared backend
/// (`ratomic.redis`, `ratomic.postgres`) of `rules` as given: a
/// `MultiDecision` of named limits `names` (`multi`), else a `Decision` of
/// the one rule, its limit named `name`.
pub fn with_backend<'a, T>(
    py: Python<'_>,
    multi: bool,
    names: impl Iterator<Item = &'a str>,
    rules: &[Rule],
    decision: &Bound<'_, PyAny>,
    name: &str,
    f: impl FnOnce(&Headers<'_>) -> T,
) -> PyResult<T> {
    if multi {
        let d = decision.cast::<MultiDecision>()?.borrow();
        with_multi(py, names, rules, &d, f)
    } else {
        let d = decision.cast::<decision::Decision>()?.borrow();
        with_single(py, name, &rules[0], d.0, f)
    }
}

/// Checks `name` as the name of a single rule's limit in the header fields
/// (a middleware's set-up, before any request).
pub fn check_name(py: Python<'_>, rule: &Rule, name: &str) -> PyResult<()> {
    Policy::of(name, rule).py_err(py).map(drop)
}

/// A local limiter's decision (a backend's `on_error` limiter), marked as
/// the fallback's.
pub fn fallback(py: Python<'_>, decision: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    if let Ok(d) = decision.cast::<decision::Decision>() {
        return Ok(Py::new(py, decision::Decision(d.get().0, Source::Fallback))?.into_any());
    }
    let d = decision.cast::<MultiDecision>()?;
    Ok(Py::new(py, d.get().with_source(Source::Fallback))?.into_any())
}

/// `f` of the headers of a multi-limit decision whose entries index
/// `policies` (a `Limiter`'s limits or a `Stack`'s members, in order).
pub fn with_policies<T>(
    py: Python<'_>,
    policies: &[Policy],
    d: &MultiDecision,
    f: impl FnOnce(&Headers<'_>) -> T,
) -> PyResult<T> {
    let (entries, combined) = d.parts();
    let h = Headers::from_parts(policies, entries.iter().copied(), combined).py_err(py)?;
    Ok(f(&h))
}
