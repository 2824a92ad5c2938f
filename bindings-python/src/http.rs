//! `_HttpFields`: the header fields and problem body an HTTP middleware
//! writes for a decision, with the limiter's header policies made once
//! (core's `headers::Policy`: the `RateLimit-Policy` items formatted at
//! set-up, not per request), in the form the server takes: ASGI's
//! lower-case `bytes` pairs, or WSGI's `str` pairs. One native call per
//! response. Core writes every value; this file only moves them.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use ratomic::headers::{Draft, Headers, Policy};

use crate::decision::{Decision, MultiDecision, Names};
use crate::direct::DirectTokenBucket;
use crate::error::{argument_type, core_error, invalid_argument, type_name, CoreResultExt};
use crate::headers::draft_named;
use crate::keyed::Keyed;
use crate::limiter::Limiter;
use crate::stack::Stack;

/// Every field name core writes, made into the server's form once.
const FIELD_NAMES: [&str; 9] = [
    "RateLimit-Policy",
    "RateLimit",
    "RateLimit-Limit",
    "RateLimit-Remaining",
    "RateLimit-Reset",
    "Retry-After",
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
];

/// The fields a middleware writes for one limiter: `fields(decision)` and
/// `problem(decision)` (internal to `ratomic._http`).
#[pyclass(frozen, module = "ratomic._ratomic", name = "_HttpFields")]
pub struct HttpFields {
    policies: Vec<Policy>,
    /// A `Limiter`'s or `Stack`'s names (its decisions must be its own), or
    /// None for one rule.
    names: Option<Names>,
    draft: Draft,
    legacy: bool,
    standard: bool,
    asgi: bool,
    /// `FIELD_NAMES` in the server's form (lower-case bytes, or str).
    field_names: Vec<Py<PyAny>>,
}

impl HttpFields {
    fn headers<'a>(&'a self, py: Python<'_>, decision: &Bound<'_, PyAny>) -> PyResult<Headers<'a>> {
        match &self.names {
            None => {
                let d = decision.cast::<Decision>().map_err(|_| {
                    argument_type(py, format!("decision must be a Decision, not {}", type_name(decision)))
                })?;
                Ok(Headers::single(&self.policies[0], d.get().0))
            }
            Some(names) => {
                let d = decision.cast::<MultiDecision>().map_err(|_| {
                    argument_type(py, format!("decision must be a MultiDecision, not {}", type_name(decision)))
                })?;
                let d = d.get();
                if !Arc::ptr_eq(d.names(), names) {
                    return Err(invalid_argument(py, "decision is not one of this limiter's".to_owned()));
                }
                let (entries, combined) = d.parts();
                Headers::from_parts(&self.policies, entries.iter().copied(), combined).py_err(py)
            }
        }
    }
}

#[pymethods]
impl HttpFields {
    /// For `limiter` (a `Keyed`, `DirectTokenBucket`, `Limiter` or `Stack`):
    /// the one rule named `name`, or every limit or member under its own
    /// name; the standard fields in `draft`'s form (none with
    /// `standard=False`), the `X-RateLimit-*` ones with `legacy`; bytes
    /// pairs with lower-case names with `asgi`, else str pairs.
    #[new]
    #[pyo3(signature = (limiter, *, name = "default", draft = "draft-11", legacy = false, standard = true, asgi = true))]
    fn new(
        py: Python<'_>,
        limiter: &Bound<'_, PyAny>,
        name: &str,
        draft: &str,
        legacy: bool,
        standard: bool,
        asgi: bool,
    ) -> PyResult<Self> {
        let (policies, names) = if let Ok(k) = limiter.cast::<Keyed>() {
            (vec![Policy::of(name, k.get().inner.algorithm()).py_err(py)?], None)
        } else if let Ok(d) = limiter.cast::<DirectTokenBucket>() {
            (vec![Policy::of(name, d.get().inner.algorithm()).py_err(py)?], None)
        } else if let Ok(l) = limiter.cast::<Limiter>() {
            let l = l.get();
            let policies = l
                .inner
                .names()
                .zip(l.inner.rules())
                .map(|(n, r)| Policy::of(n, r))
                .collect::<ratomic::Result<Vec<_>>>()
                .py_err(py)?;
            (policies, Some(l.names.clone()))
        } else if let Ok(s) = limiter.cast::<Stack>() {
            let s = s.get();
            let policies = s.policies.as_ref().map_err(|e| core_error(py, e.clone()))?.clone();
            (policies, Some(s.names.clone()))
        } else {
            return Err(argument_type(
                py,
                format!(
                    "limiter must be a TokenBucket, FixedWindow, SlidingWindow, DirectTokenBucket, Limiter or Stack, not {}",
                    type_name(limiter)
                ),
            ));
        };
        let field_names = FIELD_NAMES
            .iter()
            .map(|n| {
                if asgi {
                    PyBytes::new(py, n.to_ascii_lowercase().as_bytes()).into_any().unbind()
                } else {
                    PyString::intern(py, n).into_any().unbind()
                }
            })
            .collect();
        Ok(HttpFields { policies, names, draft: draft_named(py, draft)?, legacy, standard, asgi, field_names })
    }

    /// The fields a response answering `decision` carries, in order.
    fn fields<'py>(&self, py: Python<'py>, decision: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let h = self.headers(py, decision)?;
        let out = PyList::empty(py);
        for (name, value) in h.fields_in(self.draft, self.legacy) {
            if !self.standard && name.starts_with("RateLimit") {
                continue; // Retry-After and X-RateLimit-* stay
            }
            let i = FIELD_NAMES.iter().position(|n| *n == name);
            let name = match i {
                Some(i) => self.field_names[i].bind(py).clone(),
                None if self.asgi => PyBytes::new(py, name.to_ascii_lowercase().as_bytes()).into_any(),
                None => PyString::new(py, name).into_any(),
            };
            let value = if self.asgi {
                PyBytes::new(py, value.as_bytes()).into_any()
            } else {
                PyString::new(py, &value).into_any()
            };
            out.append(PyTuple::new(py, [name, value])?)?;
        }
        Ok(out)
    }

    /// The RFC 9457 problem document (JSON) for a 429 answering
    /// `decision`; None when it was allowed.
    fn problem(&self, py: Python<'_>, decision: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        Ok(self.headers(py, decision)?.problem_json())
    }
}
