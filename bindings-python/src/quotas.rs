//! `Quotas`: token buckets whose quota comes with each call (core's
//! `ratomic::Quotas`), for per-customer quotas read from a database.

use pyo3::prelude::*;
use pyo3::types::PyString;

use ratomic::{Gcra, Quota, Rule as CoreRule};

use crate::clock::Time;
use crate::decision::Decision;
use crate::error::{argument_type, invalid_argument, type_name, CoreResultExt};
use crate::headers::{self, Fields};
use crate::key::{key_bytes, whole, Cost};
use crate::rule::Rule;
use crate::store::StoreArgs;

/// Token buckets whose quota is given with each call, one bucket per
/// (quota, key), all in one bounded store.
#[pyclass(frozen, module = "ratomic", name = "Quotas")]
pub struct Quotas {
    inner: ratomic::Quotas<Time>,
}

/// A call's quota: a rate string (`"100/min"`: burst = count) or a
/// token-bucket `Rule` (`Rule.token_bucket(50, "10/s")`).
fn quota_arg(obj: &Bound<'_, PyAny>) -> PyResult<Quota> {
    let py = obj.py();
    if let Ok(s) = obj.cast::<PyString>() {
        return Quota::parse(&s.to_cow()?).py_err(py);
    }
    if let Ok(r) = obj.cast::<Rule>() {
        return match r.get().0 {
            CoreRule::TokenBucket(g) => Ok(g.quota()),
            _ => Err(invalid_argument(
                py,
                "Quotas takes token-bucket quotas (a rate string such as \"100/min\" or Rule.token_bucket(...)), \
                 not a window rule"
                    .to_owned(),
            )),
        };
    }
    Err(argument_type(
        py,
        format!(
            "a quota must be a rate string such as \"100/min\" or a ratomic.Rule.token_bucket(...), not {}",
            type_name(obj)
        ),
    ))
}

impl Quotas {
    #[inline]
    fn now(&self, py: Python<'_>) -> PyResult<u64> {
        self.inner.clock().read(py)
    }
}

#[pymethods]
impl Quotas {
    /// `Quotas(clock=None, max_keys=None, max_key_len=None, max_key_bytes=None, reserve_keys=None, eviction=None, shared_file=None)`.
    #[new]
    #[pyo3(signature = (*, clock=None, max_keys=None, max_key_len=None, max_key_bytes=None, reserve_keys=None, eviction=None, shared_file=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        clock: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        max_key_len: Option<&Bound<'_, PyAny>>,
        max_key_bytes: Option<&Bound<'_, PyAny>>,
        reserve_keys: Option<&Bound<'_, PyAny>>,
        eviction: Option<&Bound<'_, PyAny>>,
        shared_file: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let options =
            StoreArgs { max_keys, max_key_len, max_key_bytes, reserve_keys, eviction, shared_file }.options()?;
        let inner = ratomic::Quotas::with_options(Time::from_arg(clock)?, options).py_err(py)?;
        Ok(Quotas { inner })
    }

    /// Takes `cost` (default 1) from `key`'s bucket under `quota`.
    #[pyo3(signature = (key, quota, cost = Cost::ONE), text_signature = "($self, key, quota, cost=1)")]
    fn allow(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        quota: &Bound<'_, PyAny>,
        cost: Cost,
    ) -> PyResult<Decision> {
        let (key, quota) = (key_bytes(key)?, quota_arg(quota)?);
        self.inner.allow_at(key, &quota, cost.0, self.now(py)?).map(Decision::memory).py_err(py)
    }

    /// What `allow(key, quota, cost)` would answer, changing nothing.
    #[pyo3(signature = (key, quota, cost = Cost::ONE), text_signature = "($self, key, quota, cost=1)")]
    fn peek(&self, py: Python<'_>, key: &Bound<'_, PyAny>, quota: &Bound<'_, PyAny>, cost: Cost) -> PyResult<Decision> {
        let (key, quota) = (key_bytes(key)?, quota_arg(quota)?);
        self.inner.peek_at(key, &quota, cost.0, self.now(py)?).map(Decision::memory).py_err(py)
    }

    /// Gives `tokens` back to `key`'s bucket under `quota` (never above full).
    fn refund(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        quota: &Bound<'_, PyAny>,
        tokens: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (key, quota, tokens) = (key_bytes(key)?, quota_arg(quota)?, whole(tokens, "tokens")?);
        self.inner.refund_at(key, &quota, tokens, self.now(py)?).py_err(py)
    }

    /// Forgets `key`'s bucket under `quota`: it is full again.
    fn reset(&self, py: Python<'_>, key: &Bound<'_, PyAny>, quota: &Bound<'_, PyAny>) -> PyResult<()> {
        let (key, quota) = (key_bytes(key)?, quota_arg(quota)?);
        self.inner.reset_at(key, &quota, self.now(py)?).py_err(py)
    }

    /// The HTTP header fields for `decision` (a decision under `quota`),
    /// as `Keyed.headers` gives them.
    #[pyo3(signature = (decision, quota, *, name = "default", legacy = false, draft = "draft-11"))]
    fn headers(
        &self,
        py: Python<'_>,
        decision: PyRef<'_, Decision>,
        quota: &Bound<'_, PyAny>,
        name: &str,
        legacy: bool,
        draft: &str,
    ) -> PyResult<Fields> {
        let g = Gcra::new(quota_arg(quota)?);
        headers::with_single(py, name, &g, decision.0, headers::fields(py, draft, legacy)?)
    }

    /// The problem document for a 429 answering `decision` under `quota`.
    #[pyo3(signature = (decision, quota, *, name = "default"))]
    fn problem(
        &self,
        py: Python<'_>,
        decision: PyRef<'_, Decision>,
        quota: &Bound<'_, PyAny>,
        name: &str,
    ) -> PyResult<Option<String>> {
        let g = Gcra::new(quota_arg(quota)?);
        headers::with_single(py, name, &g, decision.0, headers::problem)
    }

    /// Drops every bucket that is full again; returns how many.
    fn gc(&self, py: Python<'_>) -> PyResult<usize> {
        self.inner.gc_at(self.now(py)?).py_err(py)
    }

    /// Bytes of memory the store holds.
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    /// Buckets held, across all quotas.
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The longest key accepted, in bytes.
    #[getter]
    fn max_key_len(&self) -> usize {
        self.inner.max_key_len()
    }

    /// The clock given to the constructor (None: the monotonic default).
    #[getter]
    fn clock(&self, py: Python<'_>) -> Py<PyAny> {
        self.inner.clock().to_object(py)
    }

    fn __repr__(&self) -> String {
        format!("Quotas(keys={})", self.inner.len())
    }
}
