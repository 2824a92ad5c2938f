//! `TokenBucket`: a GCRA token bucket per key (a `Keyed` limiter).

use pyo3::prelude::*;

use ratomic::{Quota, Rule};

use crate::error::CoreResultExt;
use crate::key::whole_from;
use crate::keyed::Keyed;
use crate::rule::{quota, with_capacity};
use crate::store::StoreArgs;

/// A token bucket per key (GCRA, the generic cell rate algorithm): bursts of
/// `capacity`, refilled at `refill_per_sec` tokens a second. A key starts
/// full; a call of cost `n` passes if the key holds `n` tokens, and takes
/// them.
#[pyclass(frozen, extends = Keyed, module = "ratomic", name = "TokenBucket")]
pub struct TokenBucket {
    quota: Quota,
}

impl TokenBucket {
    fn build(
        py: Python<'_>,
        quota: Quota,
        clock: Option<&Bound<'_, PyAny>>,
        store: StoreArgs<'_, '_>,
    ) -> PyResult<(Self, Keyed)> {
        let keyed = Keyed::new(py, Rule::token_bucket(quota), clock, store.options()?)?;
        Ok((TokenBucket { quota }, keyed))
    }
}

#[pymethods]
impl TokenBucket {
    /// `TokenBucket(10, 2.5)`: capacity 10, 2.5 tokens a second.
    /// `TokenBucket("10/s")`: a rate string, capacity = count.
    /// `TokenBucket(50, "10/s")`: capacity 50, refilled at 10 a second.
    #[new]
    #[pyo3(signature = (
        capacity, refill_per_sec=None, *, clock=None, max_keys=None, max_key_len=None, max_key_bytes=None, reserve_keys=None,
        eviction=None, shared_file=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        capacity: &Bound<'_, PyAny>,
        refill_per_sec: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        max_key_len: Option<&Bound<'_, PyAny>>,
        max_key_bytes: Option<&Bound<'_, PyAny>>,
        reserve_keys: Option<&Bound<'_, PyAny>>,
        eviction: Option<&Bound<'_, PyAny>>,
        shared_file: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(Self, Keyed)> {
        let store = StoreArgs { max_keys, max_key_len, max_key_bytes, reserve_keys, eviction, shared_file };
        Self::build(py, quota(capacity, refill_per_sec)?, clock, store)
    }

    /// A bucket from a rate string: `TokenBucket.from_rate("10/s")` holds 10
    /// and refills one every 100 ms; `burst=` sets a different capacity at
    /// the same refill rate.
    #[staticmethod]
    #[pyo3(signature = (
        rate, *, burst=None, clock=None, max_keys=None, max_key_len=None, max_key_bytes=None, reserve_keys=None, eviction=None, shared_file=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn from_rate(
        py: Python<'_>,
        rate: &str,
        burst: Option<&Bound<'_, PyAny>>,
        clock: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        max_key_len: Option<&Bound<'_, PyAny>>,
        max_key_bytes: Option<&Bound<'_, PyAny>>,
        reserve_keys: Option<&Bound<'_, PyAny>>,
        eviction: Option<&Bound<'_, PyAny>>,
        shared_file: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Self>> {
        let mut q = Quota::parse(rate).py_err(py)?;
        if let Some(b) = burst.filter(|b| !b.is_none()) {
            q = with_capacity(q, b, whole_from(b, "burst", 1)?, "burst")?;
        }
        let store = StoreArgs { max_keys, max_key_len, max_key_bytes, reserve_keys, eviction, shared_file };
        Py::new(py, Self::build(py, q, clock, store)?)
    }

    /// The most tokens a key holds (the burst).
    #[getter]
    fn capacity(&self) -> u64 {
        self.quota.capacity()
    }

    /// Tokens refilled per second.
    #[getter]
    fn refill_per_sec(&self) -> f64 {
        self.quota.refill_per_sec()
    }
}
