//! `Stack`: limiters on different keys (per IP, per user, global) decided
//! all or nothing in one call, by core's `Stack`.

use std::ptr;
use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;
use ratomic::headers::Policy;
use ratomic::{Stack, StackMember};

use crate::clock::{ms_to_ns, ns_to_ms, FaceClock, NativeClock};
use crate::decision;
use crate::env::EnvState;
use crate::error::status;
use crate::error::{whole, JsFailure, Res};
use crate::headers::{self, DecisionIn, EntryIn};
use crate::key::owned_key;

/// A limiter as a stack member (made by a limiter handle's `member()`).
#[napi]
pub struct NativeMember {
    member: Arc<dyn StackMember>,
}

impl NativeMember {
    pub fn new(member: Arc<dyn StackMember>) -> Self {
        NativeMember { member }
    }
}

/// Several limiters, each on its own key, decided all or nothing: a call
/// passes only if every member allows it; then every member is charged,
/// otherwise none is.
#[napi]
pub struct NativeStack {
    stack: Stack<FaceClock>,
    /// One header policy per member, built with the stack; or why there is
    /// none (a `Limiter` member), thrown by `headers` / `problem` only, so
    /// a stack that never formats headers may hold a `Limiter`.
    policies: Res<Vec<Policy>>,
}

/// Core's refusal of a member on another clock, in JavaScript's words.
fn clock_mismatch(e: ratomic::Error) -> JsFailure {
    match e {
        ratomic::Error::InvalidArgument { name: "member", value, .. } => JsFailure::range(
            "ERR_RATOMIC_INVALID_ARGUMENT",
            format!(
                "stack member {value} reads another clock than the stack: the stack reads one clock per call and \
                 passes that time to every member, so every member must have the same clock (the same ManualClock \
                 or function, or none for all) and the stack's `clock` option, if given, must be that clock"
            ),
        ),
        other => other.into(),
    }
}

/// Core's refusal to describe a `Limiter` member in headers, in
/// JavaScript's words: a `TypeError`, the member being of the wrong kind.
fn no_policy(e: ratomic::Error) -> JsFailure {
    match e {
        ratomic::Error::InvalidArgument { name: "stack member", value, .. } => JsFailure::type_error(
            "ERR_RATOMIC_INVALID_ARGUMENT",
            format!(
                "stack member {value} is a Limiter: its limits have no single header policy, so the stack's \
                 headers() and problem() cannot describe it (make each of its limits its own member)"
            ),
        ),
        other => other.into(),
    }
}

#[napi]
impl NativeStack {
    /// A stack of `members`, in order, named by `names` (same length), that
    /// reads the JavaScript clock `clock` (none: the monotonic clock). A
    /// member whose clock is not the stack's is an error: the stack reads one
    /// clock and passes its time to every member.
    #[napi(constructor)]
    pub fn new(env: Env, names: Vec<String>, members: Vec<&NativeMember>, clock: Option<&NativeClock>) -> Result<Self> {
        if names.len() != members.len() {
            return Err(
                JsFailure::type_error("ERR_RATOMIC_INVALID_ARGUMENT", "each stack member needs a name").into_napi(&env)
            );
        }
        let mut builder = Stack::builder().clock(FaceClock::new(clock));
        for (name, m) in names.into_iter().zip(members) {
            builder = builder.member_dyn(name, m.member.clone());
        }
        let stack = builder.build().map_err(|e| clock_mismatch(e).into_napi(&env))?;
        let policies = stack.policies().map_err(no_policy);
        Ok(NativeStack { stack, policies })
    }

    /// Charges `cost` to every member, member `i` on `keys[i]`, all or
    /// nothing, at `nowMs` (default: the stack's clock); writes the decision
    /// into the hot path's `out` and returns `allowed`.
    #[napi(ts_args_type = "keys: Array<string | Uint8Array>, cost: number, nowMs?: number")]
    pub fn allow(&self, env: Env, keys: Unknown<'_>, cost: f64, now_ms: Option<f64>) -> Result<bool> {
        self.decide(&env, keys, cost, now_ms, false)
    }

    /// Answers like `allow` and changes nothing.
    #[napi(ts_args_type = "keys: Array<string | Uint8Array>, cost: number, nowMs?: number")]
    pub fn peek(&self, env: Env, keys: Unknown<'_>, cost: f64, now_ms: Option<f64>) -> Result<bool> {
        self.decide(&env, keys, cost, now_ms, true)
    }

    /// Gives `tokens` back to every member, each on its key (never above full).
    #[napi(ts_args_type = "keys: Array<string | Uint8Array>, tokens: number, nowMs?: number")]
    pub fn refund(&self, env: Env, keys: Unknown<'_>, tokens: f64, now_ms: Option<f64>) -> Result<()> {
        let run = || -> Res<()> {
            let (keys, now) = (self.keys(&env, keys)?, self.time(now_ms)?);
            Ok(self.stack.refund_at(&keys, whole("tokens", tokens, 0)?, now)?)
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Forgets every member's key: each is full again.
    #[napi(ts_args_type = "keys: Array<string | Uint8Array>, nowMs?: number")]
    pub fn reset(&self, env: Env, keys: Unknown<'_>, now_ms: Option<f64>) -> Result<()> {
        let run = || -> Res<()> {
            let (keys, now) = (self.keys(&env, keys)?, self.time(now_ms)?);
            Ok(self.stack.reset_at(&keys, now)?)
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// The HTTP header fields for `decision` (one of this stack's: its
    /// combined fields and its `entries`, one per member), as `Name: value\r\n`
    /// lines. A stack with a `Limiter` member throws a `TypeError` naming it.
    #[napi]
    pub fn headers(&self, env: Env, decision: DecisionIn, entries: Vec<EntryIn>, format: u32) -> Result<String> {
        self.with_headers(&decision, &entries, headers::fields(format)).map_err(|e| e.into_napi(&env))
    }

    /// The RFC 9457 problem document for a 429 answering `decision`, naming
    /// the members that denied; null when it was allowed.
    #[napi]
    pub fn problem(&self, env: Env, decision: DecisionIn, entries: Vec<EntryIn>) -> Result<Option<String>> {
        self.with_headers(&decision, &entries, headers::problem).map_err(|e| e.into_napi(&env))
    }

    /// The member names, in order.
    #[napi(getter)]
    pub fn names(&self) -> Vec<String> {
        self.stack.names().map(str::to_owned).collect()
    }

    /// The stack's monotonic clock, in milliseconds.
    #[napi]
    pub fn now_ms(&self) -> f64 {
        ns_to_ms(self.stack.now())
    }
}

impl NativeStack {
    fn with_headers<T>(
        &self,
        decision: &DecisionIn,
        entries: &[EntryIn],
        f: impl FnOnce(&ratomic::headers::Headers<'_>) -> T,
    ) -> Res<T> {
        let policies = self.policies.as_ref().map_err(JsFailure::clone)?;
        headers::with_policies(policies, "member", "stack", decision, entries, f)
    }

    fn time(&self, now_ms: Option<f64>) -> Res<u64> {
        now_ms.map_or_else(|| Ok(self.stack.now()), ms_to_ns)
    }

    /// The keys of a call: an array of strings or Buffers.
    fn keys(&self, env: &Env, keys: Unknown<'_>) -> Res<Vec<Vec<u8>>> {
        let (env, keys) = (env.raw(), keys.raw());
        let mut is_array = false;
        let mut len = 0u32;
        // SAFETY: env and keys are live values of the call in progress, throughout.
        unsafe {
            status(sys::napi_is_array(env, keys, &mut is_array), "napi_is_array")?;
            if !is_array {
                return Err(JsFailure::type_error(
                    "ERR_RATOMIC_INVALID_ARGUMENT",
                    "keys must be an array with one key per member",
                ));
            }
            status(sys::napi_get_array_length(env, keys, &mut len), "napi_get_array_length")?;
            (0..len)
                .map(|i| {
                    let mut key = ptr::null_mut();
                    status(sys::napi_get_element(env, keys, i, &mut key), "napi_get_element")?;
                    // Each member checks its own key length.
                    owned_key(env, key, usize::MAX)
                })
                .collect()
        }
    }

    fn decide(&self, env: &Env, keys: Unknown<'_>, cost: f64, now_ms: Option<f64>, peek: bool) -> Result<bool> {
        let run = || -> Res<bool> {
            let (keys, cost, now) = (self.keys(env, keys)?, crate::error::cost(cost)?, self.time(now_ms)?);
            let d = if peek { self.stack.peek_at(&keys, cost, now)? } else { self.stack.allow_at(&keys, cost, now)? };
            // SAFETY: env is the live environment of this call; the slice is
            // used only here.
            let state = unsafe { EnvState::of(env.raw())? };
            // SAFETY: as above.
            let out = unsafe { state.out(env.raw())? };
            Ok(decision::write_multi(out, &d))
        };
        run().map_err(|e| e.into_napi(env))
    }
}
