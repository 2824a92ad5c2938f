//! A single-rule limiter (token bucket, fixed window, sliding window): core's
//! `Keyed<Rule>`, the one type for any of them.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratomic::{Keyed, StackMember};

use crate::batch::{Requests, Unread};
use crate::clock::{ms_to_ns, ns_to_ms, FaceClock, NativeClock};
use crate::decision;
use crate::env::{Registered, Target};
use crate::error::Res;
use crate::headers::{self, DecisionIn, PolicyCache};
use crate::rule::{self, RuleInfo, RuleSpec, StoreOptions};
use crate::shared;
use crate::stack::NativeMember;
use ratomic::headers::Policy;

pub use crate::env::{KeyedHandle as Handle, KeyedRule};

impl Target for Handle {
    #[inline]
    fn max_key_len(&self) -> usize {
        Keyed::max_key_len(self)
    }

    #[inline]
    fn now(&self) -> u64 {
        Keyed::now(self)
    }

    #[inline]
    fn allow(&self, key: &[u8], cost: u64, now: u64, out: &mut [f64]) -> ratomic::Result<bool> {
        Ok(decision::write(out, &self.allow_at(key, cost, now)?))
    }

    fn peek(&self, key: &[u8], cost: u64, now: u64, out: &mut [f64]) -> ratomic::Result<bool> {
        Ok(decision::write(out, &self.peek_at(key, cost, now)?))
    }

    fn refund(&self, key: &[u8], tokens: u64, now: u64) -> ratomic::Result<()> {
        self.refund_at(key, tokens, now)
    }

    fn reset(&self, key: &[u8], now: u64) -> ratomic::Result<()> {
        self.reset_at(key, now)
    }

    fn allow_many(&self, requests: std::result::Result<Requests, Unread>, now: u64, all: &mut Vec<f64>) -> Res<()> {
        let requests = requests.map_err(|u| u.first_invalid(|k, c| self.check(k, c)))?;
        let mut decisions = Vec::new();
        self.allow_many_at(requests.pairs(), now, &mut decisions)?;
        for d in &decisions {
            decision::append(all, |out| decision::write(out, d));
        }
        Ok(())
    }
}

/// A handle to a single-rule limiter, registered in this thread's hot-path
/// table under `id` for as long as the handle lives.
#[napi]
pub struct NativeKeyed {
    limiter: Registered<Handle>,
    /// The policy last asked for by `headers`/`problem`, built once per name.
    policy: PolicyCache,
}

impl NativeKeyed {
    fn register(env: &Env, limiter: Handle) -> Result<Self> {
        Ok(NativeKeyed { limiter: Registered::new(env, limiter)?, policy: Default::default() })
    }

    fn build(rule: &RuleSpec, options: &StoreOptions, clock: FaceClock) -> Res<KeyedRule> {
        Ok(Keyed::with_algorithm(rule::rule(rule)?, clock, rule::options(options)?)?)
    }

    fn time(&self, now_ms: Option<f64>) -> Res<u64> {
        now_ms.map_or_else(|| Ok(self.limiter.now()), ms_to_ns)
    }

    /// `f` of this limiter's policy named `name`.
    fn with_policy<T>(&self, name: &str, f: impl FnOnce(&Policy) -> Res<T>) -> Res<T> {
        self.policy.with(name, self.limiter.algorithm(), f)
    }
}

#[napi]
impl NativeKeyed {
    /// A limiter of `rule`, storing keys as `options` say, whose calls are
    /// given the readings of the JavaScript clock `clock` (none: the
    /// monotonic clock). Out-of-range numbers and bad rate strings throw a
    /// `RangeError`.
    #[napi(constructor)]
    pub fn new(env: Env, rule: RuleSpec, options: Option<StoreOptions>, clock: Option<&NativeClock>) -> Result<Self> {
        let limiter =
            Self::build(&rule, &options.unwrap_or_default(), FaceClock::new(clock)).map_err(|e| e.into_napi(&env))?;
        Self::register(&env, Arc::new(limiter))
    }

    /// The process-wide limiter called `name`, made from `rule` and `options`
    /// on first use, on the monotonic clock: every worker thread that asks
    /// for the same name gets a handle to the same limiter. A different
    /// configuration under the same name throws an `Error` with code
    /// `ERR_RATOMIC_SHARED_CONFLICT`.
    #[napi(factory)]
    pub fn shared(env: Env, name: String, rule: RuleSpec, options: Option<StoreOptions>) -> Result<Self> {
        let options = options.unwrap_or_default();
        let limiter = shared::get_or_make(&name, vec![rule.clone()], options.clone(), || {
            Self::build(&rule, &options, FaceClock::default())
        })
        .map_err(|e| e.into_napi(&env))?;
        Self::register(&env, limiter)
    }

    /// The limiter's id in this thread's hot-path table.
    #[napi(getter)]
    pub fn id(&self) -> u32 {
        self.limiter.id
    }

    /// Keys currently held (a key full again may count until `gc` drops it).
    #[napi]
    pub fn size(&self) -> f64 {
        self.limiter.len() as f64
    }

    /// Drops every key that is full again at `nowMs` (default: the
    /// limiter's clock); returns how many. Decisions do not change.
    #[napi]
    pub fn gc(&self, env: Env, now_ms: Option<f64>) -> Result<f64> {
        let run = || -> Res<f64> { Ok(self.limiter.gc_at(self.time(now_ms)?)? as f64) };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Bytes of memory the limiter's store holds.
    #[napi]
    pub fn memory_bytes(&self) -> f64 {
        self.limiter.memory_bytes() as f64
    }

    /// The longest key accepted, in bytes.
    #[napi(getter)]
    pub fn max_key_len(&self) -> f64 {
        self.limiter.max_key_len() as f64
    }

    /// The rule, as the constructors accept it.
    #[napi(getter)]
    pub fn rule(&self) -> RuleInfo {
        rule::info(self.limiter.algorithm())
    }

    /// The rule with its units, as core prints it (`"fixed window 5 per 60ms"`).
    #[napi(getter)]
    pub fn description(&self) -> String {
        self.limiter.algorithm().to_string()
    }

    /// The limiter's monotonic clock, in milliseconds.
    #[napi]
    pub fn now_ms(&self) -> f64 {
        ns_to_ms(self.limiter.now())
    }

    /// The HTTP header fields for a decision of this limiter (its five
    /// fields, positionally), the limit named `name`, as `Name: value\r\n`
    /// lines.
    #[napi]
    #[allow(clippy::too_many_arguments)] // a decision's fields, flattened
    pub fn headers(
        &self,
        env: Env,
        allowed: bool,
        remaining: f64,
        limit: f64,
        retry_after_ms: f64,
        reset_after_ms: f64,
        name: String,
        format: u32,
    ) -> Result<String> {
        let d = DecisionIn { allowed, remaining, limit, retry_after_ms, reset_after_ms };
        self.with_policy(&name, |p| headers::with_policy(p, &d, headers::fields(format))).map_err(|e| e.into_napi(&env))
    }

    /// The RFC 9457 problem document for a 429 answering the decision, or null.
    #[napi]
    #[allow(clippy::too_many_arguments)] // a decision's fields, flattened
    pub fn problem(
        &self,
        env: Env,
        allowed: bool,
        remaining: f64,
        limit: f64,
        retry_after_ms: f64,
        reset_after_ms: f64,
        name: String,
    ) -> Result<Option<String>> {
        let d = DecisionIn { allowed, remaining, limit, retry_after_ms, reset_after_ms };
        self.with_policy(&name, |p| headers::with_policy(p, &d, headers::problem)).map_err(|e| e.into_napi(&env))
    }

    /// This limiter as a member of a `Stack`.
    #[napi]
    pub fn member(&self) -> NativeMember {
        NativeMember::new(self.limiter.clone() as Arc<dyn StackMember>)
    }
}
