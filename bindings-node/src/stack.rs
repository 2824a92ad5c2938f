//! `Stack`: limiters on different keys (per IP, per user, global) decided
//! all or nothing in one call.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;

use crate::engine::{write_entries, OUT_LEN};
use crate::error::{whole, JsFailure};
use crate::hot::ms_to_ns;
use crate::NativeLimiter;

/// Several limiters, each on its own key, decided all or nothing: a call
/// passes only if every member allows it; then every member is charged,
/// otherwise none is.
#[napi]
pub struct NativeStack {
    stack: Arc<ratomic::Stack>,
    names: Vec<String>,
}

#[napi]
impl NativeStack {
    /// A stack of `members`, in order, named by `names` (same length). A
    /// `Limiter` member must be the whole limiter, not a selection.
    #[napi(constructor)]
    pub fn new(env: Env, names: Vec<String>, members: Vec<&NativeLimiter>) -> Result<Self> {
        let fail = |e: JsFailure| e.into_napi(&env);
        if names.len() != members.len() || names.is_empty() {
            return Err(fail(JsFailure::type_error(
                "ERR_RATOMIC_INVALID_ARGUMENT",
                "a Stack needs at least one member, each with a name",
            )));
        }
        let mut builder = ratomic::Stack::builder();
        for (name, member) in names.iter().zip(&members) {
            let Some(m) = member.engine().as_member() else {
                return Err(fail(JsFailure::type_error(
                    "ERR_RATOMIC_INVALID_ARGUMENT",
                    format!("stack member {name:?} is a selection of a Limiter; pass the whole Limiter"),
                )));
            };
            builder = builder.member_dyn(name.clone(), m);
        }
        let stack = builder.build().map_err(|e| fail(e.into()))?;
        Ok(NativeStack { stack: Arc::new(stack), names })
    }

    /// Charges `cost` to every member, each on its own key (`keys[i]` for
    /// member `i`), all or nothing, at `nowMs` (the monotonic clock when
    /// negative). Returns `[allowed, remaining, limit, retryAfterMs,
    /// resetAfterMs, entryCount, ...entries]` as in `NativeLimiter.bindAllow`.
    #[napi]
    pub fn allow(&self, env: Env, keys: Vec<Either<String, Buffer>>, cost: f64, now_ms: f64) -> Result<Vec<f64>> {
        self.call(&env, keys, cost, now_ms, false)
    }

    /// Answers like `allow` and changes nothing.
    #[napi]
    pub fn peek(&self, env: Env, keys: Vec<Either<String, Buffer>>, cost: f64, now_ms: f64) -> Result<Vec<f64>> {
        self.call(&env, keys, cost, now_ms, true)
    }

    /// The member names, in order.
    #[napi(getter)]
    pub fn names(&self) -> Vec<String> {
        self.names.clone()
    }

    fn call(
        &self,
        env: &Env,
        keys: Vec<Either<String, Buffer>>,
        cost: f64,
        now_ms: f64,
        peek: bool,
    ) -> Result<Vec<f64>> {
        let run = || -> std::result::Result<Vec<f64>, JsFailure> {
            if keys.len() != self.names.len() {
                return Err(JsFailure::type_error(
                    "ERR_RATOMIC_INVALID_ARGUMENT",
                    format!(
                        "this stack takes {} keys ({}), got {}",
                        self.names.len(),
                        self.names.join(", "),
                        keys.len()
                    ),
                ));
            }
            let cost = whole("cost", cost, 0)?;
            let now = if now_ms < 0.0 { self.stack.now() } else { ms_to_ns(now_ms)? };
            let keys: Vec<&[u8]> = keys
                .iter()
                .map(|k| match k {
                    Either::A(s) => s.as_bytes(),
                    Either::B(b) => &b[..],
                })
                .collect();
            let d = if peek { self.stack.peek_at(&keys, cost, now)? } else { self.stack.allow_at(&keys, cost, now)? };
            let mut out = vec![0.0; 1 + OUT_LEN];
            out[0] = f64::from(u8::from(d.allowed()));
            write_entries(&mut out[1..], |name| self.names.iter().position(|n| n == name), &d);
            let used = 1 + crate::engine::slot::FIRST_ENTRY + crate::engine::slot::ENTRY_LEN * d.entries().len();
            out.truncate(used);
            Ok(out)
        };
        run().map_err(|e| e.into_napi(env))
    }
}
