//! `Keyed`: any single-rule limiter — core's `Keyed<Rule>` — and the base
//! class of `TokenBucket`, `FixedWindow` and `SlidingWindow`, which add
//! only their constructors and getters. Every operation lives here, once.
//!
//! Calls keep the GIL: one takes well under a microsecond and never
//! blocks, and releasing and re-taking the GIL would cost more than the
//! call itself. The core is lock-free per key, so many threads calling one
//! limiter stay exact.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use ratomic::{Options, Rule};

use crate::clock::Time;
use crate::decision::Decision;
use crate::error::{argument_type, core_error, in_batch, type_name, CoreResultExt};
use crate::headers::{self, Fields};
use crate::key::{key_bytes, whole, Cost};

/// The core limiter every keyed class holds.
pub type Core = ratomic::Keyed<Rule, [u8], Time>;

/// A limiter with one rule and a state per key: the base class of
/// `TokenBucket`, `FixedWindow` and `SlidingWindow` (built through them).
#[pyclass(frozen, subclass, module = "ratomic", name = "Keyed")]
pub struct Keyed {
    /// Shared, so a `Stack` can hold it too.
    pub(crate) inner: Arc<Core>,
}

impl Keyed {
    /// A limiter for `rule`, reading `clock` (the `clock=` argument).
    pub fn new(py: Python<'_>, rule: Rule, clock: Option<&Bound<'_, PyAny>>, options: Options) -> PyResult<Self> {
        let inner = ratomic::Keyed::with_algorithm(rule, Time::from_arg(clock)?, options).py_err(py)?;
        Ok(Keyed { inner: Arc::new(inner) })
    }

    #[inline]
    fn now(&self, py: Python<'_>) -> PyResult<u64> {
        self.inner.clock().read(py)
    }
}

#[pymethods]
impl Keyed {
    /// Takes `cost` (default 1) from `key` if it has that much.
    /// A denial is a falsy `Decision`, never an exception.
    #[pyo3(signature = (key, cost = Cost::ONE), text_signature = "($self, key, cost=1)")]
    #[inline]
    fn allow(&self, py: Python<'_>, key: &Bound<'_, PyAny>, cost: Cost) -> PyResult<Decision> {
        let key = key_bytes(key)?;
        self.inner.allow_at(key, cost.0, self.now(py)?).map(Decision::memory).py_err(py)
    }

    /// What `allow(key, cost)` would answer, changing nothing.
    /// `peek(key, 0)` reports the key's state as it is.
    #[pyo3(signature = (key, cost = Cost::ONE), text_signature = "($self, key, cost=1)")]
    fn peek(&self, py: Python<'_>, key: &Bound<'_, PyAny>, cost: Cost) -> PyResult<Decision> {
        let key = key_bytes(key)?;
        self.inner.peek_at(key, cost.0, self.now(py)?).map(Decision::memory).py_err(py)
    }

    /// Gives `tokens` back to `key` (never above full).
    fn refund(&self, py: Python<'_>, key: &Bound<'_, PyAny>, tokens: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = key_bytes(key)?;
        let tokens = whole(tokens, "tokens")?;
        self.inner.refund_at(key, tokens, self.now(py)?).py_err(py)
    }

    /// Forgets `key`: it is full again.
    fn reset(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = key_bytes(key)?;
        self.inner.reset_at(key, self.now(py)?).py_err(py)
    }

    /// Decides many requests at one clock reading: each item is a key (cost
    /// 1) or a `(key, cost)` pair. Every item is checked first: if one is
    /// invalid, the error (its `index` set) names the first invalid one,
    /// and nothing is charged.
    fn allow_many(&self, py: Python<'_>, requests: &Bound<'_, PyAny>) -> PyResult<Vec<Decision>> {
        let items = batch(requests, |key, cost| self.inner.check(key, cost))?;
        let requests = keys_of(&items)?;
        let mut out = Vec::with_capacity(requests.len());
        self.inner.allow_many_at(requests.iter().copied(), self.now(py)?, &mut out).py_err(py)?;
        Ok(out.into_iter().map(Decision::memory).collect())
    }

    /// Drops every key whose bucket is full again (no later decision
    /// changes); returns how many. Optional: inside calls, when the store
    /// grows, a key is dropped once it has been full for its limit's window.
    fn gc(&self, py: Python<'_>) -> PyResult<usize> {
        self.inner.gc_at(self.now(py)?).py_err(py)
    }

    /// The HTTP header fields for `decision` (a decision of this limiter),
    /// as `(name, value)` pairs: `RateLimit-Policy` and `RateLimit` (the
    /// limit named `name`), `Retry-After` on a denial (whole seconds,
    /// rounded up, never 0), and with `legacy=True` the `X-RateLimit-*`
    /// fields. `draft` is the IETF draft the standard fields follow:
    /// `"draft-11"` (the default) or `"draft-8"` (the same fields), or the
    /// earlier forms `"draft-7"` (`RateLimit-Policy: 100;w=60`,
    /// `RateLimit: limit=100, remaining=99, reset=42`) and `"draft-6"`
    /// (`RateLimit-Policy` and `RateLimit-Limit`, `-Remaining`, `-Reset`).
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

    /// The RFC 9457 problem document (JSON) for a 429 answering `decision`,
    /// or None when it was allowed.
    #[pyo3(signature = (decision, *, name = "default"))]
    fn problem(&self, py: Python<'_>, decision: PyRef<'_, Decision>, name: &str) -> PyResult<Option<String>> {
        headers::with_single(py, name, self.inner.algorithm(), decision.0, headers::problem)
    }

    /// Bytes of memory the store holds: its slots, keys longer than 23
    /// bytes, and the summaries of evicted keys.
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    /// Keys held (call `gc()` first for an exact count of keys being limited).
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The most a key can hold: the largest cost a call may ask.
    #[getter]
    fn limit(&self) -> u64 {
        self.inner.limit()
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

    /// This limiter's rule, for building a `Limiter`.
    #[getter]
    fn rule(&self) -> crate::rule::Rule {
        crate::rule::Rule(*self.inner.algorithm())
    }

    /// `FixedWindow(fixed window 5 per 1m, keys=0)`: the rule with its unit
    /// and the keys held.
    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let inner = &slf.get().inner;
        Ok(format!("{}({}, keys={})", slf.get_type().name()?, inner.algorithm(), inner.len()))
    }
}

/// The requests of an `allow_many` argument, each a key (cost 1) or a
/// `(key, cost)` pair, as `(key, cost)`: every key a str or bytes with a
/// UTF-8 form, every cost a whole number. When request `j` is not, the
/// error is that of the first request core's `check` refuses before `j`, if
/// any, else `j`'s own: either way it names the first invalid request, as
/// core does for the requests it checks.
pub fn batch<'py>(
    requests: &Bound<'py, PyAny>,
    check: impl Fn(&[u8], u64) -> ratomic::Result<()>,
) -> PyResult<Vec<(Bound<'py, PyAny>, u64)>> {
    let py = requests.py();
    if requests.is_instance_of::<PyString>() || requests.is_instance_of::<PyBytes>() {
        return Err(argument_type(
            py,
            "allow_many takes an iterable of keys or (key, cost) pairs, not a single key".to_owned(),
        ));
    }
    let mut out: Vec<(Bound<'py, PyAny>, u64)> = Vec::with_capacity(requests.len().unwrap_or(0));
    for (j, item) in requests.try_iter()?.enumerate() {
        match request(item?) {
            Ok(r) => out.push(r),
            Err(err) => {
                for (i, (key, cost)) in out.iter().enumerate() {
                    if let Err(error) = check(key_bytes(key)?, *cost) {
                        return Err(core_error(
                            py,
                            ratomic::Error::InvalidRequest { index: i, error: Box::new(error) },
                        ));
                    }
                }
                return Err(in_batch(py, j, err));
            }
        }
    }
    Ok(out)
}

/// One request: a key, or a `(key, cost)` pair (a tuple or a list).
fn request(item: Bound<'_, PyAny>) -> PyResult<(Bound<'_, PyAny>, u64)> {
    let (key, cost) = if item.is_instance_of::<PyTuple>() || item.is_instance_of::<PyList>() {
        if item.len()? != 2 {
            return Err(argument_type(
                item.py(),
                format!(
                    "each request must be a key or a (key, cost) pair, not a {}-item {}",
                    item.len()?,
                    type_name(&item)
                ),
            ));
        }
        (item.get_item(0)?, whole(&item.get_item(1)?, "cost")?)
    } else {
        (item, 1)
    };
    key_bytes(&key)?;
    Ok((key, cost))
}

/// The requests' keys as bytes, borrowed from the request objects.
pub fn keys_of<'a>(items: &'a [(Bound<'_, PyAny>, u64)]) -> PyResult<Vec<(&'a [u8], u64)>> {
    items.iter().map(|(key, cost)| Ok((key_bytes(key)?, *cost))).collect()
}
