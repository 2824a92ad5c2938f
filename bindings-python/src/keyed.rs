//! The keyed limiters — `TokenBucket`, `FixedWindow`, `SlidingWindow` —
//! which share every operation, as the core's `Keyed` does.
//!
//! Calls keep the GIL: one takes well under a microsecond and never
//! blocks, and releasing and re-taking the GIL would cost more than the
//! call itself. The core is lock-free per key, so many threads calling one
//! limiter stay exact.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

use ratomic::{Algorithm, Keyed};

use crate::clock::Time;
use crate::decision::Decision;
use crate::error::{argument_type, type_name, CoreResultExt};
use crate::key::{key_bytes, whole};

/// What every keyed class holds: the core limiter (shared, so a `Stack` can
/// hold it too) and where it gets the time.
pub struct KeyedCore<A: Algorithm> {
    pub inner: Arc<Keyed<A>>,
    pub time: Time,
}

impl<A: Algorithm> KeyedCore<A> {
    #[inline]
    pub fn now(&self, py: Python<'_>) -> PyResult<u64> {
        self.time.now(py, || self.inner.now())
    }

    #[inline]
    pub fn allow(&self, py: Python<'_>, key: &Bound<'_, PyAny>, cost: u64) -> PyResult<Decision> {
        let key = key_bytes(key)?;
        let result = if self.time.is_monotonic() {
            self.inner.allow_n(key, cost)
        } else {
            self.inner.allow_at(key, cost, self.now(py)?)
        };
        result.map(Decision).py_err(py)
    }

    #[inline]
    pub fn peek(&self, py: Python<'_>, key: &Bound<'_, PyAny>, cost: u64) -> PyResult<Decision> {
        let key = key_bytes(key)?;
        let result = if self.time.is_monotonic() {
            self.inner.peek_n(key, cost)
        } else {
            self.inner.peek_at(key, cost, self.now(py)?)
        };
        result.map(Decision).py_err(py)
    }

    pub fn refund(&self, py: Python<'_>, key: &Bound<'_, PyAny>, tokens: u64) -> PyResult<()> {
        let key = key_bytes(key)?;
        let now = self.now(py)?;
        self.inner.refund_at(key, tokens, now).py_err(py)
    }

    pub fn reset(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = key_bytes(key)?;
        let now = self.now(py)?;
        self.inner.reset_at(key, now).py_err(py)
    }

    /// Every request is checked before any is decided, so a bad one raises
    /// with nothing charged; then all are decided at one clock reading.
    pub fn allow_many(&self, py: Python<'_>, requests: &Bound<'_, PyAny>) -> PyResult<Vec<Decision>> {
        let items = requests_of(requests)?;
        let mut parsed: Vec<(&[u8], u64)> = Vec::with_capacity(items.len());
        for (key, cost) in &items {
            let bytes = key_bytes(key)?;
            let cost = match cost {
                Some(c) => whole(c, "cost")?,
                None => 1,
            };
            check_call(bytes, cost, self.inner.limit(), self.inner.max_key_len()).py_err(py)?;
            parsed.push((bytes, cost));
        }
        let now = self.now(py)?;
        parsed.iter().map(|&(key, cost)| self.inner.allow_at(key, cost, now).map(Decision).py_err(py)).collect()
    }

    pub fn gc(&self, py: Python<'_>) -> PyResult<usize> {
        self.inner.gc_at(self.now(py)?).py_err(py)
    }
}

/// The checks the core makes before touching any state, made up front for
/// a batch.
pub fn check_call(key: &[u8], cost: u64, limit: u64, max_key_len: usize) -> Result<(), ratomic::Error> {
    if cost > limit {
        return Err(ratomic::Error::CostExceedsLimit { cost, limit });
    }
    if key.len() > max_key_len {
        return Err(ratomic::Error::KeyTooLong { len: key.len(), max: max_key_len });
    }
    Ok(())
}

/// One `allow_many` request: a key and its cost (None: 1).
pub type Request<'py> = (Bound<'py, PyAny>, Option<Bound<'py, PyAny>>);

/// The items of an `allow_many` argument: each a key (cost 1) or a
/// `(key, cost)` pair.
pub fn requests_of<'py>(requests: &Bound<'py, PyAny>) -> PyResult<Vec<Request<'py>>> {
    let py = requests.py();
    if requests.is_instance_of::<PyString>() || requests.is_instance_of::<pyo3::types::PyBytes>() {
        return Err(argument_type(
            py,
            "allow_many takes an iterable of keys or (key, cost) pairs, not a single key".to_owned(),
        ));
    }
    let mut out = Vec::with_capacity(requests.len().unwrap_or(0));
    for item in requests.try_iter()? {
        let item = item?;
        if item.is_instance_of::<PyTuple>() || item.is_instance_of::<PyList>() {
            if item.len()? != 2 {
                return Err(argument_type(
                    py,
                    format!(
                        "each request must be a key or a (key, cost) pair, not a {}-item {}",
                        item.len()?,
                        type_name(&item)
                    ),
                ));
            }
            out.push((item.get_item(0)?, Some(item.get_item(1)?)));
        } else {
            out.push((item, None));
        }
    }
    Ok(out)
}

/// The `#[pymethods]` every keyed class shares, plus the class's own
/// (`$extra`: constructors and getters).
macro_rules! keyed_class {
    ($ty:ident, { $($extra:tt)* }) => {
        #[pyo3::pymethods]
        impl $ty {
            /// Takes `cost` (default 1) from `key` if it has that much.
            /// A denial is a falsy `Decision`, never an exception.
            #[pyo3(signature = (key, cost = $crate::key::Cost::ONE), text_signature = "($self, key, cost=1)")]
            #[inline]
            fn allow(
                &self,
                py: pyo3::Python<'_>,
                key: &pyo3::Bound<'_, pyo3::PyAny>,
                cost: $crate::key::Cost,
            ) -> pyo3::PyResult<$crate::decision::Decision> {
                self.core.allow(py, key, cost.0)
            }

            /// What `allow(key, cost)` would answer, changing nothing.
            /// `peek(key, 0)` reports the key's state as it is.
            #[pyo3(signature = (key, cost = $crate::key::Cost::ONE), text_signature = "($self, key, cost=1)")]
            fn peek(
                &self,
                py: pyo3::Python<'_>,
                key: &pyo3::Bound<'_, pyo3::PyAny>,
                cost: $crate::key::Cost,
            ) -> pyo3::PyResult<$crate::decision::Decision> {
                self.core.peek(py, key, cost.0)
            }

            /// Gives `tokens` back to `key` (never above full).
            fn refund(
                &self,
                py: pyo3::Python<'_>,
                key: &pyo3::Bound<'_, pyo3::PyAny>,
                tokens: &pyo3::Bound<'_, pyo3::PyAny>,
            ) -> pyo3::PyResult<()> {
                let tokens = $crate::key::whole(tokens, "tokens")?;
                self.core.refund(py, key, tokens)
            }

            /// Forgets `key`: it is full again.
            fn reset(&self, py: pyo3::Python<'_>, key: &pyo3::Bound<'_, pyo3::PyAny>) -> pyo3::PyResult<()> {
                self.core.reset(py, key)
            }

            /// Decides many requests at one clock reading: each item is a
            /// key (cost 1) or a `(key, cost)` pair. Every item is checked
            /// first, so a bad one raises with nothing charged.
            fn allow_many(
                &self,
                py: pyo3::Python<'_>,
                requests: &pyo3::Bound<'_, pyo3::PyAny>,
            ) -> pyo3::PyResult<Vec<$crate::decision::Decision>> {
                self.core.allow_many(py, requests)
            }

            /// Drops every key whose bucket is full again (no later decision
            /// changes); returns how many. Optional: the same work happens,
            /// amortised, inside calls.
            fn gc(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<usize> {
                self.core.gc(py)
            }

            /// Bytes of key-slot memory held.
            fn memory_bytes(&self) -> usize {
                self.core.inner.memory_bytes()
            }

            /// Keys held (call `gc()` first for an exact count of keys being limited).
            fn __len__(&self) -> usize {
                self.core.inner.len()
            }

            /// The most a key can hold: the largest cost a call may ask.
            #[getter]
            fn limit(&self) -> u64 {
                self.core.inner.limit()
            }

            /// The longest key accepted, in bytes.
            #[getter]
            fn max_key_len(&self) -> usize {
                self.core.inner.max_key_len()
            }

            /// The clock given to the constructor (None: the monotonic default).
            #[getter]
            fn clock(&self, py: pyo3::Python<'_>) -> pyo3::PyResult<pyo3::Py<pyo3::PyAny>> {
                self.core.time.to_object(py)
            }

            /// This limiter's rule, for building a `Limiter`.
            #[getter]
            fn rule(&self) -> $crate::rule::Rule {
                $crate::rule::Rule(ratomic::Rule::from(*self.core.inner.algorithm()))
            }

            fn __repr__(&self) -> String {
                let rule = $crate::rule::rule_repr(&ratomic::Rule::from(*self.core.inner.algorithm()));
                let args = rule.split_once('(').map_or("", |(_, a)| a.trim_end_matches(')'));
                format!("{}({}, keys={})", stringify!($ty), args, self.core.inner.len())
            }

            $($extra)*
        }
    };
}

pub(crate) use keyed_class;
