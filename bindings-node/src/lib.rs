//! The native half of the `ratomic` Node package.
//!
//! `ratomic.js` is the public API; this crate gives it handles to core's
//! limiters — [`NativeKeyed`] (core's `Keyed<Rule>`: a token bucket or a
//! window), [`NativeLimiter`] (core's `Limiter`, through a `LimitSet`),
//! [`NativeStack`], [`NativeDirect`] (core's keyless `DirectTokenBucket`)
//! — and the raw hot-path functions of [`hot`]. It converts
//! types, maps errors and reads clocks; every decision is core's. `napi
//! build` generates `index.js` (the loader) and `index.d.ts` (these docs, as
//! TypeScript) from it.
//!
//! Files pair with core's modules: `keyed.rs`, `limiter.rs`, `stack.rs`, `direct.rs`,
//! `rule.rs`, `clock.rs`, `key.rs`, `decision.rs`, `error.rs`; `batch.rs`
//! is `allow_many`, `shared.rs` the process-wide registry, `hot.rs` the
//! calls that must be fast.

#![allow(missing_debug_implementations)] // napi-rs generates types without Debug

mod batch;
mod clock;
mod decision;
mod direct;
mod env;
mod error;
mod headers;
mod hot;
mod key;
mod keyed;
mod limiter;
mod postgres;
mod quotas;
mod redis;
mod rule;
mod shared;
mod stack;

pub use clock::NativeClock;
pub use direct::NativeDirect;
pub use hot::hot_path;
pub use keyed::NativeKeyed;
pub use limiter::NativeLimiter;
pub use postgres::{NativePostgres, NativePostgresBatch, NativePostgresCall};
pub use redis::{NativeRedis, NativeRedisBatch};
pub use rule::{parse_limits, RuleInfo, RuleSpec, StoreOptions};
pub use stack::{NativeMember, NativeStack};

/// An empty native call: the benchmark's floor for crossing into Rust.
/// Left out of the typings and the loader's named exports: not for users
/// (benchmark/bench.js reads it off the binding object).
#[napi_derive::napi(skip_typescript)]
pub fn noop() {}
