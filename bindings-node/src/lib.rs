//! The native half of the `ratomic` Node package.
//!
//! `ratomic.js` is the public API; this module gives it one class,
//! [`NativeLimiter`], a handle to a core limiter of any kind, and the raw
//! hot-path functions of [`hot`]. `napi build` generates `index.js` (the
//! loader) and `index.d.ts` (these docs, as TypeScript) from it.

#![allow(missing_debug_implementations)] // napi-rs generates types without Debug

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use napi::bindgen_prelude::*;
use napi::JsValue;
use napi_derive::napi;

mod engine;
mod error;
mod hot;
mod spec;
mod stack;

use engine::Engine;
use error::JsFailure;
pub use spec::{LimiterSpec, RuleSpec};
pub use stack::NativeStack;

/// Length of the `Float64Array` a handle writes its decisions into.
#[napi]
pub const OUT_LEN: u32 = engine::OUT_LEN as u32;

/// A handle to one native limiter (token bucket, fixed window, sliding
/// window, or several named limits), on the monotonic clock; every call also
/// accepts an explicit clock reading.
#[napi]
pub struct NativeLimiter {
    engine: Arc<Engine>,
}

/// Process-wide limiters by name, with the spec each was created from.
type Registry = Mutex<HashMap<String, (LimiterSpec, Arc<Engine>)>>;

/// Process-wide limiters shared by every worker thread, by name.
fn registry() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Default::default)
}

impl NativeLimiter {
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }
}

#[napi]
impl NativeLimiter {
    /// Builds a limiter from a checked specification.
    ///
    /// Throws a `RangeError` (code `ERR_RATOMIC_INVALID_ARGUMENT` or
    /// `ERR_RATOMIC_INVALID_RATE`) for out-of-range numbers or a bad rate string.
    #[napi(constructor)]
    pub fn new(env: Env, spec: LimiterSpec) -> Result<Self> {
        let engine = spec::build(&spec).map_err(|e| e.into_napi(&env))?;
        Ok(NativeLimiter { engine: Arc::new(engine) })
    }

    /// The process-wide limiter called `name`, created from `spec` on first
    /// use; every worker thread that asks for the same name gets a handle to
    /// the same limiter. Asking again with a different `spec` throws an
    /// `Error` with code `ERR_RATOMIC_SHARED_CONFLICT`.
    #[napi(factory)]
    pub fn shared(env: Env, name: String, spec: LimiterSpec) -> Result<Self> {
        let mut map = registry().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((existing, engine)) = map.get(&name) {
            if *existing != spec {
                return Err(JsFailure::error(
                    "ERR_RATOMIC_SHARED_CONFLICT",
                    format!(
                        "a shared limiter named {name:?} already exists with a different configuration \
                         ({}; asked for {}): use the same arguments or another name",
                        spec::describe(existing),
                        spec::describe(&spec),
                    ),
                )
                .into_napi(&env));
            }
            return Ok(NativeLimiter { engine: engine.clone() });
        }
        let engine = Arc::new(spec::build(&spec).map_err(|e| e.into_napi(&env))?);
        map.insert(name, (spec, engine.clone()));
        Ok(NativeLimiter { engine })
    }

    /// A handle to the same limiter whose calls are subject only to the
    /// named limits (multi-limit limiters only). Unknown names throw a
    /// `RangeError`.
    #[napi]
    pub fn select(&self, env: Env, names: Vec<String>) -> Result<NativeLimiter> {
        let Engine::Multi(limiter, _) = &*self.engine else {
            return Err(JsFailure::type_error(
                "ERR_RATOMIC_INVALID_ARGUMENT",
                "only a Limiter has named limits to select",
            )
            .into_napi(&env));
        };
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let set = limiter.limit_set(&names).map_err(|e| match e {
            ratomic::Error::InvalidArgument { .. } => {
                JsFailure::range("ERR_RATOMIC_UNKNOWN_LIMIT", e.to_string()).into_napi(&env)
            }
            other => JsFailure::from(other).into_napi(&env),
        })?;
        Ok(NativeLimiter { engine: Arc::new(Engine::Multi(limiter.clone(), set)) })
    }

    /// The hot function `allow(key, cost?, nowMs?) => boolean`: charges
    /// `cost` (default 1) to `key` and writes `[remaining, limit,
    /// retryAfterMs, resetAfterMs, entryCount, ...entries]` into `out` (a
    /// `Float64Array` of `OUT_LEN`). Without `nowMs`, or with `nowMs < 0`, it
    /// reads the limiter's monotonic clock.
    ///
    /// `out` must stay attached for the function's life: never transfer its
    /// `ArrayBuffer` (ratomic.js keeps it private for that reason).
    #[napi(
        ts_args_type = "out: Float64Array",
        ts_return_type = "(key: string | Uint8Array, cost?: number, nowMs?: number) => boolean"
    )]
    pub fn bind_allow<'env>(&self, env: &'env Env, out: Unknown<'env>) -> Result<Unknown<'env>> {
        self.bind(env, out, 0)
    }

    /// The function `op(code, key, cost, nowMs) => boolean` for the colder
    /// operations: 1 peek (writes into `out` like `allow`), 2 refund `cost`
    /// tokens, 3 reset the key.
    #[napi(
        ts_args_type = "out: Float64Array",
        ts_return_type = "(code: number, key: string | Uint8Array, cost: number, nowMs: number) => boolean"
    )]
    pub fn bind_op<'env>(&self, env: &'env Env, out: Unknown<'env>) -> Result<Unknown<'env>> {
        self.bind(env, out, 1)
    }

    fn bind<'env>(&self, env: &'env Env, out: Unknown<'env>, which: u32) -> Result<Unknown<'env>> {
        // SAFETY: env and out belong to the napi-rs call in progress.
        let f = unsafe { hot::create(env.raw(), self.engine.clone(), out.raw(), which) };
        match f {
            // SAFETY: `v` is a function value just created in this env.
            Ok(v) => Ok(unsafe { Unknown::from_raw_unchecked(env.raw(), v) }),
            Err(e) => Err(e.into_napi(env)),
        }
    }

    /// Number of live keys (keys whose state differs from full).
    #[napi]
    pub fn size(&self) -> f64 {
        self.engine.len() as f64
    }

    /// Drops every key that is full again at `nowMs` (the limiter's own
    /// clock when negative); returns how many were dropped. Decisions do not
    /// change: a full bucket carries no information.
    #[napi]
    pub fn gc(&self, env: Env, now_ms: f64) -> Result<f64> {
        let now =
            if now_ms < 0.0 { self.engine.now() } else { hot::ms_to_ns(now_ms).map_err(|e| e.into_napi(&env))? };
        let n = self.engine.gc_at(now).map_err(|e| JsFailure::from(e).into_napi(&env))?;
        Ok(n as f64)
    }

    /// The limit names of a multi-limit limiter, in order (empty otherwise).
    #[napi(getter)]
    pub fn names(&self) -> Vec<String> {
        self.engine.names()
    }

    /// The longest key accepted, in bytes.
    #[napi(getter)]
    pub fn max_key_len(&self) -> f64 {
        self.engine.max_key_len() as f64
    }

    /// The limiter's monotonic clock, in milliseconds.
    #[napi]
    pub fn now_ms(&self) -> f64 {
        self.engine.now() as f64 / 1e6
    }
}

/// An empty native call, the floor the benchmark compares against.
#[napi]
pub fn noop() {}
