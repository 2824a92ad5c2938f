//! `FixedWindow` and `SlidingWindow`: window counters per key.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::clock::Time;
use crate::error::CoreResultExt;
use crate::key::nanos_to_seconds;
use crate::keyed::{keyed_class, KeyedCore};
use crate::rule::{options, rate};

macro_rules! window_class {
    ($ty:ident, $counter:ty, $doc:literal) => {
        #[doc = $doc]
        #[pyclass(frozen, module = "ratomic")]
        pub struct $ty {
            pub(crate) core: KeyedCore<$counter>,
        }

        impl crate::fastcall::HasKeyed for $ty {
            type A = $counter;
            fn keyed(&self) -> &KeyedCore<$counter> {
                &self.core
            }
        }

        keyed_class!($ty, {
            /// `(100, 60.0)`: 100 calls per 60-second window; or a rate
            /// string: `("100/min")`.
            #[new]
            #[pyo3(signature = (limit, window=None, *, clock=None, max_keys=None, max_key_len=None))]
            fn new(
                py: Python<'_>,
                limit: &Bound<'_, PyAny>,
                window: Option<&Bound<'_, PyAny>>,
                clock: Option<&Bound<'_, PyAny>>,
                max_keys: Option<&Bound<'_, PyAny>>,
                max_key_len: Option<&Bound<'_, PyAny>>,
            ) -> PyResult<Self> {
                let rate = rate(limit, window)?;
                let time = Time::from_arg(clock)?;
                let counter = <$counter>::new(rate).py_err(py)?;
                let inner = ratomic::Keyed::with_algorithm(
                    counter,
                    ratomic::MonotonicClock::new(),
                    options(max_keys, max_key_len)?,
                )
                .py_err(py)?;
                Ok($ty { core: KeyedCore { inner: Arc::new(inner), time } })
            }

            /// The window length, in seconds.
            #[getter]
            fn window(&self) -> f64 {
                nanos_to_seconds(u64::try_from(self.core.inner.window().as_nanos()).unwrap_or(u64::MAX))
            }
        });
    };
}

window_class!(
    FixedWindow,
    ratomic::FixedWindowCounter,
    "At most `limit` calls per key in each window of `window` seconds, windows aligned to the clock's epoch (SPEC §4.2)."
);
window_class!(
    SlidingWindow,
    ratomic::SlidingWindowCounter,
    "At most `limit` calls per key in any `window` seconds, by the sliding-window counter approximation (SPEC §4.3)."
);
