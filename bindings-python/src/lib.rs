//! `ratomic._ratomic`: the Python face of ratomic, re-exported by the
//! `ratomic` package (`python/ratomic/__init__.py`).
//!
//! One file per core module it wraps: `token_bucket.rs` and `window.rs`
//! (over the shared `keyed.rs`), `limiter.rs`, `stack.rs`, `clock.rs`,
//! `decision.rs`, `rule.rs`; `error.rs` maps core errors to Python
//! exceptions and `key.rs` reads keys and numbers from Python objects.

// Python sees these types through their `__repr__`; a Rust `Debug` would
// only duplicate it.
#![allow(missing_debug_implementations)]

use pyo3::prelude::*;

mod clock;
mod decision;
mod direct;
mod error;
mod fastcall;
mod key;
mod keyed;
mod limiter;
mod rule;
mod stack;
mod token_bucket;
mod window;

#[pymodule]
fn _ratomic(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<decision::Decision>()?;
    m.add_class::<decision::MultiDecision>()?;
    m.add_class::<clock::ManualClock>()?;
    m.add_class::<rule::Rule>()?;
    m.add_class::<token_bucket::TokenBucket>()?;
    m.add_class::<window::FixedWindow>()?;
    m.add_class::<window::SlidingWindow>()?;
    m.add_class::<direct::DirectTokenBucket>()?;
    m.add_class::<limiter::Limiter>()?;
    m.add_class::<limiter::LimitSet>()?;
    m.add_class::<stack::Stack>()?;
    error::Exceptions::register(m)?;
    let py = m.py();
    fastcall::install::<token_bucket::TokenBucket>(py)?;
    fastcall::install::<window::FixedWindow>(py)?;
    fastcall::install::<window::SlidingWindow>(py)?;
    Ok(())
}
