//! `DirectTokenBucket`: one token bucket for all traffic, no key.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::clock::Time;
use crate::decision::Decision;
use crate::error::CoreResultExt;
use crate::headers::{self, Fields};
use crate::key::{whole, Cost};
use crate::rule::{quota, Rule};

/// The core bucket, on this face's clock.
pub type Core = ratomic::DirectTokenBucket<Time>;

/// One token bucket for everything (a global limit): no key, no lookup.
/// Takes its arguments as `TokenBucket` does, without the key options.
#[pyclass(frozen, module = "ratomic", name = "DirectTokenBucket")]
pub struct DirectTokenBucket {
    /// Shared, so a `Stack` can hold it too.
    pub(crate) inner: Arc<Core>,
}

impl DirectTokenBucket {
    fn now(&self, py: Python<'_>) -> PyResult<u64> {
        self.inner.clock().read(py)
    }
}

#[pymethods]
impl DirectTokenBucket {
    /// `DirectTokenBucket(100, 50.0)`, `DirectTokenBucket("1000/s")` or
    /// `DirectTokenBucket(200, "100/s")`.
    #[new]
    #[pyo3(signature = (capacity, refill_per_sec=None, *, clock=None))]
    fn new(
        capacity: &Bound<'_, PyAny>,
        refill_per_sec: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let q = quota(capacity, refill_per_sec)?;
        let time = Time::from_arg(clock)?;
        Ok(DirectTokenBucket { inner: Arc::new(Core::with_clock(q, time)) })
    }

    /// Takes `cost` (default 1) if the bucket has that much.
    #[pyo3(signature = (cost = Cost::ONE), text_signature = "($self, cost=1)")]
    fn allow(&self, py: Python<'_>, cost: Cost) -> PyResult<Decision> {
        let now = self.now(py)?;
        self.inner.allow_at(cost.0, now).map(Decision::memory).py_err(py)
    }

    /// What `allow(cost)` would answer, changing nothing.
    #[pyo3(signature = (cost = Cost::ONE), text_signature = "($self, cost=1)")]
    fn peek(&self, py: Python<'_>, cost: Cost) -> PyResult<Decision> {
        let now = self.now(py)?;
        self.inner.peek_at(cost.0, now).map(Decision::memory).py_err(py)
    }

    /// Gives `tokens` back (never above full).
    fn refund(&self, py: Python<'_>, tokens: &Bound<'_, PyAny>) -> PyResult<()> {
        let tokens = whole(tokens, "tokens")?;
        let now = self.now(py)?;
        self.inner.refund_at(tokens, now).py_err(py)
    }

    /// Fills the bucket again.
    fn reset(&self) {
        self.inner.reset();
    }

    /// The most the bucket holds: the largest cost a call may ask.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit()
    }

    /// The bucket's capacity (burst).
    #[getter]
    fn capacity(&self) -> u64 {
        self.inner.quota().capacity()
    }

    /// Tokens refilled per second.
    #[getter]
    fn refill_per_sec(&self) -> f64 {
        self.inner.quota().refill_per_sec()
    }

    /// The clock given to the constructor (None: the monotonic default).
    #[getter]
    fn clock(&self, py: Python<'_>) -> Py<PyAny> {
        self.inner.clock().to_object(py)
    }

    /// This bucket's rule, for building a `Limiter`.
    #[getter]
    fn rule(&self) -> Rule {
        Rule(ratomic::Rule::from(*self.inner.algorithm()))
    }

    /// The HTTP header fields for `decision`, as `Keyed.headers` gives them.
    #[pyo3(signature = (decision, *, name = "default", legacy = false, draft = "draft-11"))]
    fn headers(
        &self,
        py: Python<'_>,
        decision: PyRef<'_, Decision>,
        name: &str,
        legacy: bool,
        draft: &str,
    ) -> PyResult<Fields> {
        headers::with_single(py, name, self.inner.algorithm(), decision.0, headers::fields(py, draft, legacy)?)
    }

    /// The problem document for a 429 answering `decision`, as `Keyed.problem`.
    #[pyo3(signature = (decision, *, name = "default"))]
    fn problem(&self, py: Python<'_>, decision: PyRef<'_, Decision>, name: &str) -> PyResult<Option<String>> {
        headers::with_single(py, name, self.inner.algorithm(), decision.0, headers::problem)
    }

    /// `DirectTokenBucket(token bucket 10 per 1s)`: the rule with its unit.
    fn __repr__(&self) -> String {
        format!("DirectTokenBucket({})", self.inner.algorithm())
    }
}
