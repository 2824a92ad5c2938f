//! `TokenBucket`: a GCRA token bucket per key.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::clock::Time;
use crate::error::CoreResultExt;
use crate::keyed::{keyed_class, KeyedCore};
use crate::rule::{options, quota};

/// A token bucket per key (GCRA, SPEC §4.1): bursts of `capacity`, refilled
/// at `refill_per_sec` tokens a second.
#[pyclass(frozen, module = "ratomic", name = "TokenBucket")]
pub struct TokenBucket {
    pub(crate) core: KeyedCore<ratomic::Gcra>,
}

impl TokenBucket {
    fn build(
        py: Python<'_>,
        q: ratomic::Quota,
        clock: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        max_key_len: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let time = Time::from_arg(clock)?;
        let inner = ratomic::TokenBucket::builder(q).options(options(max_keys, max_key_len)?).build().py_err(py)?;
        Ok(TokenBucket { core: KeyedCore { inner: Arc::new(inner), time } })
    }
}

impl crate::fastcall::HasKeyed for TokenBucket {
    type A = ratomic::Gcra;
    fn keyed(&self) -> &KeyedCore<ratomic::Gcra> {
        &self.core
    }
}

keyed_class!(TokenBucket, {
    /// `TokenBucket(10, 2.5)`: capacity 10, 2.5 tokens a second.
    /// `TokenBucket("10/s")`: a rate string, capacity = count.
    /// `TokenBucket(50, "10/s")`: capacity 50, refilled at 10 a second.
    #[new]
    #[pyo3(signature = (capacity, refill_per_sec=None, *, clock=None, max_keys=None, max_key_len=None))]
    fn new(
        py: Python<'_>,
        capacity: &Bound<'_, PyAny>,
        refill_per_sec: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        max_key_len: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        Self::build(py, quota(capacity, refill_per_sec)?, clock, max_keys, max_key_len)
    }

    /// A bucket from a rate string: `TokenBucket.from_rate("10/s")` holds 10
    /// and refills one every 100 ms; `burst=` sets a different capacity at
    /// the same refill rate.
    #[staticmethod]
    #[pyo3(signature = (rate, *, burst=None, clock=None, max_keys=None, max_key_len=None))]
    fn from_rate(
        py: Python<'_>,
        rate: &str,
        burst: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        max_key_len: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut q = ratomic::Quota::parse(rate).py_err(py)?;
        if let Some(b) = burst.filter(|b| !b.is_none()) {
            q = q.with_burst(crate::key::whole(b, "burst")?).py_err(py)?;
        }
        Self::build(py, q, clock, max_keys, max_key_len)
    }

    /// The most tokens a key holds (the burst).
    #[getter]
    fn capacity(&self) -> u64 {
        self.core.inner.quota().capacity()
    }

    /// Tokens refilled per second.
    #[getter]
    fn refill_per_sec(&self) -> f64 {
        self.core.inner.quota().refill_per_sec()
    }
});
