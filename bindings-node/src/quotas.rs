//! `Quotas`: token buckets whose quota comes with each call (core's
//! `ratomic::Quotas`), for per-customer quotas read from a database.

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratomic::{Gcra, Quota, Quotas, Rule};

use crate::clock::{ms_to_ns, ns_to_ms, FaceClock, NativeClock};
use crate::decision;
use crate::env::EnvState;
use crate::error::{whole, JsFailure, Res};
use crate::headers::{self, DecisionIn};
use crate::key::with_key;
use crate::rule::{self, RuleSpec, StoreOptions};

/// Token buckets whose quota is given with each call, one bucket per
/// (quota, key), all in one bounded store.
#[napi]
pub struct NativeQuotas {
    inner: Quotas<FaceClock>,
}

/// A call's quota: a token-bucket rule spec (a window is refused).
fn quota_of(spec: &RuleSpec) -> Res<Quota> {
    match rule::rule(spec)? {
        Rule::TokenBucket(g) => Ok(g.quota()),
        _ => Err(JsFailure::type_error(
            "ERR_RATOMIC_INVALID_ARGUMENT",
            "Quotas takes token-bucket quotas (a rate string such as \"100/min\" or { capacity, refillPerSec }), \
             not a window",
        )),
    }
}

/// What a call does with its (quota, key).
#[derive(Clone, Copy)]
enum Op {
    Allow(f64),
    Peek(f64),
    Refund(f64),
    Reset,
}

impl NativeQuotas {
    fn time(&self, now_ms: Option<f64>) -> Res<u64> {
        now_ms.map_or_else(|| Ok(self.inner.now()), ms_to_ns)
    }

    /// Runs `op`; an allow or a peek writes its decision into the hot
    /// path's `out` and returns `allowed`.
    fn run(&self, env: &Env, key: Unknown<'_>, spec: &RuleSpec, op: Op, now_ms: Option<f64>) -> Result<bool> {
        let run = || -> Res<bool> {
            let q = quota_of(spec)?;
            let now = self.time(now_ms)?;
            let (env_raw, key) = (env.raw(), key.raw());
            // SAFETY: env and key are live values of the call in progress.
            let d = unsafe {
                with_key(
                    env_raw,
                    key,
                    || self.inner.max_key_len(),
                    |k| -> Res<_> {
                        Ok(match op {
                            Op::Allow(cost) => Some(self.inner.allow_at(k, &q, crate::error::cost(cost)?, now)?),
                            Op::Peek(cost) => Some(self.inner.peek_at(k, &q, crate::error::cost(cost)?, now)?),
                            Op::Refund(tokens) => {
                                self.inner.refund_at(k, &q, whole("tokens", tokens, 0)?, now)?;
                                None
                            }
                            Op::Reset => {
                                self.inner.reset_at(k, &q, now)?;
                                None
                            }
                        })
                    },
                )
            }??;
            let Some(d) = d else { return Ok(true) };
            // SAFETY: env is the live environment of this call; the slice is
            // used only here.
            let state = unsafe { EnvState::of(env_raw)? };
            // SAFETY: as above.
            let out = unsafe { state.out(env_raw)? };
            Ok(decision::write(out, &d))
        };
        run().map_err(|e| e.into_napi(env))
    }
}

#[napi]
impl NativeQuotas {
    /// Buckets stored as `options` say, on the JavaScript clock `clock`
    /// (none: the monotonic clock).
    #[napi(constructor)]
    pub fn new(env: Env, options: Option<StoreOptions>, clock: Option<&NativeClock>) -> Result<Self> {
        let build = || -> Res<Self> {
            let options = rule::options(&options.unwrap_or_default())?;
            Ok(NativeQuotas { inner: Quotas::with_options(FaceClock::new(clock), options)? })
        };
        build().map_err(|e| e.into_napi(&env))
    }

    /// Takes `cost` from `key`'s bucket under `quota` at `nowMs` (default:
    /// the native clock); writes the decision into `out`, returns `allowed`.
    #[napi(ts_args_type = "key: string | Uint8Array, quota: RuleSpec, cost: number, nowMs?: number")]
    pub fn allow(&self, env: Env, key: Unknown<'_>, quota: RuleSpec, cost: f64, now_ms: Option<f64>) -> Result<bool> {
        self.run(&env, key, &quota, Op::Allow(cost), now_ms)
    }

    /// Answers like `allow`, changing nothing.
    #[napi(ts_args_type = "key: string | Uint8Array, quota: RuleSpec, cost: number, nowMs?: number")]
    pub fn peek(&self, env: Env, key: Unknown<'_>, quota: RuleSpec, cost: f64, now_ms: Option<f64>) -> Result<bool> {
        self.run(&env, key, &quota, Op::Peek(cost), now_ms)
    }

    /// Gives `tokens` back to `key`'s bucket under `quota` (never above full).
    #[napi(ts_args_type = "key: string | Uint8Array, quota: RuleSpec, tokens: number, nowMs?: number")]
    pub fn refund(&self, env: Env, key: Unknown<'_>, quota: RuleSpec, tokens: f64, now_ms: Option<f64>) -> Result<()> {
        self.run(&env, key, &quota, Op::Refund(tokens), now_ms).map(drop)
    }

    /// Forgets `key`'s bucket under `quota`: it is full again.
    #[napi(ts_args_type = "key: string | Uint8Array, quota: RuleSpec, nowMs?: number")]
    pub fn reset(&self, env: Env, key: Unknown<'_>, quota: RuleSpec, now_ms: Option<f64>) -> Result<()> {
        self.run(&env, key, &quota, Op::Reset, now_ms).map(drop)
    }

    /// The HTTP header fields for `decision` (made under `quota`), the limit
    /// named `name`, as `Name: value\r\n` lines.
    #[napi]
    pub fn headers(
        &self,
        env: Env,
        decision: DecisionIn,
        quota: RuleSpec,
        name: String,
        format: u32,
    ) -> Result<String> {
        let run = || -> Res<_> {
            let g = Gcra::new(quota_of(&quota)?);
            headers::with_single(&name, &g, &decision, headers::fields(format))
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// The RFC 9457 problem document for a 429 answering `decision`, or null.
    #[napi]
    pub fn problem(&self, env: Env, decision: DecisionIn, quota: RuleSpec, name: String) -> Result<Option<String>> {
        let run = || -> Res<_> {
            let g = Gcra::new(quota_of(&quota)?);
            headers::with_single(&name, &g, &decision, headers::problem)
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Buckets held, across all quotas.
    #[napi]
    pub fn size(&self) -> f64 {
        self.inner.len() as f64
    }

    /// Drops every bucket that is full again at `nowMs`; returns how many.
    #[napi]
    pub fn gc(&self, env: Env, now_ms: Option<f64>) -> Result<f64> {
        let run = || -> Res<f64> { Ok(self.inner.gc_at(self.time(now_ms)?)? as f64) };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Bytes of memory the store holds.
    #[napi]
    pub fn memory_bytes(&self) -> f64 {
        self.inner.memory_bytes() as f64
    }

    /// The longest key accepted, in bytes.
    #[napi(getter)]
    pub fn max_key_len(&self) -> f64 {
        self.inner.max_key_len() as f64
    }

    /// The native monotonic clock, in milliseconds.
    #[napi]
    pub fn now_ms(&self) -> f64 {
        ns_to_ms(self.inner.now())
    }
}
