//! `ratomic._ratomic`: the Python face of ratomic, re-exported by the
//! `ratomic` package (`python/ratomic/__init__.py`).
//!
//! One file per core module it wraps, under the same name: `keyed.rs`
//! (every single-rule limiter's operations) with `token_bucket.rs`,
//! `fixed_window.rs` and `sliding_window.rs` (their constructors),
//! `limiter.rs`, `quotas.rs`, `stack.rs`, `direct.rs`, `clock.rs`, `decision.rs`,
//! `rule.rs`, `store.rs` (the store options), `http.rs` (what the HTTP
//! middlewares write for a decision), `key.rs` (keys, and the other
//! arguments read from Python objects) and `error.rs` (core errors as
//! Python exceptions). The face holds no decision logic: it converts
//! types, maps errors and reads clocks.

// Python sees these types through their `__repr__`; a Rust `Debug` would
// only duplicate it.
#![allow(missing_debug_implementations)]

use pyo3::prelude::*;

mod clock;
mod decision;
mod direct;
mod error;
mod fixed_window;
mod headers;
mod http;
mod key;
mod keyed;
mod limiter;
mod postgres;
mod quotas;
mod redis;
mod rule;
mod sliding_window;
mod stack;
mod store;
mod token_bucket;

#[pymodule]
fn _ratomic(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("PROBLEM_CONTENT_TYPE", ratomic::headers::PROBLEM_CONTENT_TYPE)?;
    m.add_class::<decision::Decision>()?;
    m.add_class::<decision::MultiDecision>()?;
    m.add_class::<clock::ManualClock>()?;
    m.add_class::<clock::CoarseClock>()?;
    m.add_class::<rule::Rule>()?;
    m.add_class::<keyed::Keyed>()?;
    m.add_class::<token_bucket::TokenBucket>()?;
    m.add_class::<fixed_window::FixedWindow>()?;
    m.add_class::<sliding_window::SlidingWindow>()?;
    m.add_class::<direct::DirectTokenBucket>()?;
    m.add_class::<limiter::Limiter>()?;
    m.add_class::<limiter::LimitSet>()?;
    m.add_class::<stack::Stack>()?;
    m.add_class::<quotas::Quotas>()?;
    m.add_class::<redis::RedisDriver>()?;
    m.add_class::<redis::RedisCall>()?;
    m.add_class::<postgres::PostgresDriver>()?;
    m.add_class::<postgres::PostgresCall>()?;
    m.add_class::<postgres::PostgresBatch>()?;
    m.add_class::<http::HttpFields>()?;
    error::Exceptions::register(m)?;
    Ok(())
}
