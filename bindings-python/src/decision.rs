//! `Decision` and `MultiDecision`: immutable answers, truthy when allowed.

use std::fmt::Write;

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use crate::clock::nanos_to_seconds;
use crate::error::py_float_repr;

/// Who answered a call: the `source` of a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// An in-memory (or shared-file) limiter.
    Memory,
    /// The Redis script.
    Redis,
    /// The PostgreSQL function.
    Postgres,
    /// A local limiter, because Redis failed.
    Fallback,
    /// The failure policy (`on_error="allow"` or `"deny"`).
    Policy,
    /// The local deny cache of Redis denials.
    DenyCache,
    /// A lease: tokens this process took from Redis or PostgreSQL earlier,
    /// granted here.
    Lease,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Memory => "memory",
            Source::Redis => "redis",
            Source::Postgres => "postgres",
            Source::Fallback => "fallback",
            Source::Policy => "policy",
            Source::DenyCache => "deny_cache",
            Source::Lease => "lease",
        }
    }
}

impl From<ratomic_redis::Source> for Source {
    fn from(s: ratomic_redis::Source) -> Self {
        match s {
            ratomic_redis::Source::Redis => Source::Redis,
            ratomic_redis::Source::Fallback => Source::Fallback,
            ratomic_redis::Source::DenyCache => Source::DenyCache,
            ratomic_redis::Source::Lease => Source::Lease,
            _ => Source::Policy,
        }
    }
}

impl From<ratomic_postgres::Source> for Source {
    fn from(s: ratomic_postgres::Source) -> Self {
        match s {
            ratomic_postgres::Source::Postgres => Source::Postgres,
            ratomic_postgres::Source::Fallback => Source::Fallback,
            ratomic_postgres::Source::DenyCache => Source::DenyCache,
            ratomic_postgres::Source::Lease => Source::Lease,
            _ => Source::Policy,
        }
    }
}

/// The answer to one call: `allowed`, `remaining`, `limit`, `retry_after`
/// and `reset_after` (seconds). Immutable; truthy exactly when allowed.
///
/// Holds the core decision as is (durations in nanoseconds), so making one
/// costs a small allocation and no conversion; the float seconds are
/// computed when read. Equality and hashing compare the answer, not its
/// `source`.
#[pyclass(frozen, eq, hash, module = "ratomic", name = "Decision")]
#[derive(Clone, Copy)]
pub struct Decision(pub ratomic::Decision, pub Source);

impl Decision {
    /// An in-memory limiter's answer.
    #[inline]
    pub fn memory(d: ratomic::Decision) -> Self {
        Decision(d, Source::Memory)
    }
}

impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for Decision {}

impl std::hash::Hash for Decision {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

#[pymethods]
impl Decision {
    /// Whether the cost was granted and consumed.
    #[getter]
    fn allowed(&self) -> bool {
        self.0.allowed
    }

    /// Whole tokens the key still has right after the call.
    #[getter]
    fn remaining(&self) -> u64 {
        self.0.remaining
    }

    /// The most the key can ever hold (capacity, burst or window limit).
    #[getter]
    fn limit(&self) -> u64 {
        self.0.limit
    }

    /// Seconds to wait before the same call would pass: 0.0 when allowed,
    /// strictly positive when denied.
    #[getter]
    fn retry_after(&self) -> f64 {
        nanos_to_seconds(self.0.retry_after_nanos())
    }

    /// Seconds until the key is full again if nothing consumes.
    #[getter]
    fn reset_after(&self) -> f64 {
        nanos_to_seconds(self.0.reset_after_nanos())
    }

    /// `retry_after` in whole nanoseconds (exact).
    #[getter]
    fn retry_after_ns(&self) -> u64 {
        self.0.retry_after_nanos()
    }

    /// `reset_after` in whole nanoseconds (exact).
    #[getter]
    fn reset_after_ns(&self) -> u64 {
        self.0.reset_after_nanos()
    }

    /// Who answered: `"memory"` (an in-memory or shared-file limiter),
    /// `"redis"`, `"fallback"` (a local limiter, Redis having failed),
    /// `"policy"` (`on_error="allow"`/`"deny"`), `"deny_cache"` or
    /// `"lease"` (tokens this process leased from Redis, granted here).
    #[getter]
    fn source(&self) -> &'static str {
        self.1.name()
    }

    fn __bool__(&self) -> bool {
        self.0.allowed
    }

    fn __repr__(&self) -> String {
        let mut s = String::with_capacity(96);
        write_fields(&mut s, "Decision", &self.0);
        write_source(&mut s, self.1);
        s.push(')');
        s
    }
}

fn write_fields(s: &mut String, class: &str, d: &ratomic::Decision) {
    let _ = write!(
        s,
        "{class}(allowed={}, remaining={}, limit={}, retry_after={}, reset_after={}",
        if d.allowed { "True" } else { "False" },
        d.remaining,
        d.limit,
        py_float_repr(nanos_to_seconds(d.retry_after_nanos())),
        py_float_repr(nanos_to_seconds(d.reset_after_nanos())),
    );
}

/// `, source=...` when not in memory (an in-memory decision's repr is
/// unchanged).
fn write_source(s: &mut String, source: Source) {
    if source != Source::Memory {
        let _ = write!(s, ", source={:?}", source.name());
    }
}

/// A limiter's limit (or a stack's member) names, in order, as Rust and
/// as Python strings (made once, when the limiter is built).
pub type Names = std::sync::Arc<[(Box<str>, Py<PyString>)]>;

/// Makes [`Names`] from names in order.
pub fn make_names<'a>(py: Python<'_>, names: impl Iterator<Item = &'a str>) -> Names {
    names.map(|n| (Box::from(n), PyString::intern(py, n).unbind())).collect()
}

/// The answer to a `Limiter` or `Stack` call: the combined decision (allowed
/// only if every limit allowed; the fewest `remaining`; on a denial, the
/// longest `retry_after` among the limits that denied) and one `Decision` per
/// limit (or stack member) it was subject to.
/// Immutable; truthy exactly when allowed (by every limit).
#[pyclass(frozen, module = "ratomic", name = "MultiDecision")]
pub struct MultiDecision {
    decision: ratomic::Decision,
    /// (index into `names`, decision), in the limiter's order.
    entries: Vec<(usize, ratomic::Decision)>,
    names: Names,
    source: Source,
}

impl MultiDecision {
    /// From a core multi-decision of the limiter whose names are `names`.
    pub fn from_core(d: &ratomic::MultiDecision<'_>, names: &Names) -> Self {
        let entries = d.entries().map(|e| (e.index, e.decision)).collect();
        MultiDecision { decision: d.decision, entries, names: names.clone(), source: Source::Memory }
    }

    /// From a Redis-backed limiter's answer (`names` in its order).
    pub fn from_redis(d: &ratomic_redis::MultiDecision, names: &Names) -> Self {
        let entries = d.entries().enumerate().map(|(i, (_, e))| (i, e)).collect();
        MultiDecision { decision: d.decision, entries, names: names.clone(), source: d.source.into() }
    }

    pub fn from_postgres(d: &ratomic_postgres::MultiDecision, names: &Names) -> Self {
        let entries = d.entries().enumerate().map(|(i, (_, e))| (i, e)).collect();
        MultiDecision { decision: d.decision, entries, names: names.clone(), source: d.source.into() }
    }

    /// The same answer, from `source`.
    pub fn with_source(&self, source: Source) -> Self {
        MultiDecision { decision: self.decision, entries: self.entries.clone(), names: self.names.clone(), source }
    }

    /// The `(index, decision)` entries and the combined decision.
    pub fn parts(&self) -> (&[(usize, ratomic::Decision)], ratomic::Decision) {
        (&self.entries, self.decision)
    }

    /// The names of the limiter (or stack) that made it, in its order.
    pub fn names(&self) -> &Names {
        &self.names
    }

    fn named(&self) -> impl Iterator<Item = (&(Box<str>, Py<PyString>), &ratomic::Decision)> {
        self.entries.iter().map(|(i, d)| (&self.names[*i], d))
    }
}

#[pymethods]
impl MultiDecision {
    /// Whether every limit allowed the call (and all were charged).
    #[getter]
    fn allowed(&self) -> bool {
        self.decision.allowed
    }

    /// The smallest remaining among the limits.
    #[getter]
    fn remaining(&self) -> u64 {
        self.decision.remaining
    }

    /// The limit of the limit with the least remaining.
    #[getter]
    fn limit(&self) -> u64 {
        self.decision.limit
    }

    /// The largest wait among the limits that denied (0.0 when allowed).
    #[getter]
    fn retry_after(&self) -> f64 {
        nanos_to_seconds(self.decision.retry_after_nanos())
    }

    /// The largest reset_after among the limits.
    #[getter]
    fn reset_after(&self) -> f64 {
        nanos_to_seconds(self.decision.reset_after_nanos())
    }

    /// The combined answer as a plain `Decision`.
    #[getter]
    fn decision(&self) -> Decision {
        Decision(self.decision, self.source)
    }

    /// Who answered (see `Decision.source`).
    #[getter]
    fn source(&self) -> &'static str {
        self.source.name()
    }

    /// `{name: Decision}` for every limit the call was subject to, in order.
    /// On a denial nothing was consumed: a limit that denied says when to
    /// retry, one that would have allowed says what it still has.
    #[getter]
    fn entries<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for ((_, name), d) in self.named() {
            dict.set_item(name.bind(py), Decision(*d, self.source))?;
        }
        Ok(dict)
    }

    /// The names of the limits that denied the call (empty when allowed).
    #[getter]
    fn denied_by<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let denied: Vec<_> = self.named().filter(|(_, d)| !d.allowed).map(|((_, n), _)| n.bind(py)).collect();
        PyTuple::new(py, denied)
    }

    /// The named limit's `Decision`; `KeyError` if the call was not subject to it.
    fn __getitem__(&self, name: &str) -> PyResult<Decision> {
        self.get(name).ok_or_else(|| PyKeyError::new_err(name.to_owned()))
    }

    /// The named limit's `Decision`, or None.
    fn get(&self, name: &str) -> Option<Decision> {
        self.named().find(|((n, _), _)| **n == *name).map(|(_, d)| Decision(*d, self.source))
    }

    fn __contains__(&self, name: &Bound<'_, PyAny>) -> bool {
        name.cast::<PyString>().ok().and_then(|n| n.to_cow().ok()).is_some_and(|n| self.get(&n).is_some())
    }

    fn __len__(&self) -> usize {
        self.entries.len()
    }

    fn __bool__(&self) -> bool {
        self.decision.allowed
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let mut s = String::with_capacity(128);
        write_fields(&mut s, "MultiDecision", &self.decision);
        s.push_str(", denied_by=(");
        let denied: Vec<String> = self
            .named()
            .filter(|(_, d)| !d.allowed)
            .map(|((_, n), _)| n.bind(py).repr().map(|r| r.to_string()).unwrap_or_default())
            .collect();
        s.push_str(&denied.join(", "));
        if denied.len() == 1 {
            s.push(',');
        }
        s.push(')');
        write_source(&mut s, self.source);
        s.push(')');
        s
    }
}
