//! Several named limits on one key (`Limiter`): core's `Limiter`, seen
//! through a `LimitSet` (all its limits, or a selection).

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratomic::{Limiter, StackMember};

use crate::batch::{Requests, Unread};
use crate::clock::{ms_to_ns, ns_to_ms, FaceClock, NativeClock};
use crate::decision;
use crate::env::{Registered, Target};
use crate::error::{JsFailure, Res};
use crate::headers::{self, DecisionIn, EntryIn};
use crate::rule::{self, RuleInfo, RuleSpec, StoreOptions};
use crate::shared;
use crate::stack::NativeMember;

pub use crate::env::{MultiLimiter, View};

impl Target for View {
    #[inline]
    fn max_key_len(&self) -> usize {
        self.limiter.max_key_len()
    }

    #[inline]
    fn now(&self) -> u64 {
        self.limiter.now()
    }

    #[inline]
    fn allow(&self, key: &[u8], cost: u64, now: u64, out: &mut [f64]) -> ratomic::Result<bool> {
        Ok(decision::write_multi(out, &self.limiter.select(self.set).allow_at(key, cost, now)?))
    }

    fn peek(&self, key: &[u8], cost: u64, now: u64, out: &mut [f64]) -> ratomic::Result<bool> {
        Ok(decision::write_multi(out, &self.limiter.select(self.set).peek_at(key, cost, now)?))
    }

    fn refund(&self, key: &[u8], tokens: u64, now: u64) -> ratomic::Result<()> {
        self.limiter.select(self.set).refund_at(key, tokens, now)
    }

    fn reset(&self, key: &[u8], now: u64) -> ratomic::Result<()> {
        // Resetting a key forgets it for every limit, whichever the view selects.
        self.limiter.reset_at(key, now)
    }

    fn allow_many(&self, requests: std::result::Result<Requests, Unread>, now: u64, all: &mut Vec<f64>) -> Res<()> {
        let view = self.limiter.select(self.set);
        let requests = requests.map_err(|u| u.first_invalid(|k, c| view.check(k, c)))?;
        let mut decisions = Vec::new();
        view.allow_many_at(requests.pairs(), now, &mut decisions)?;
        for d in &decisions {
            decision::append(all, |out| decision::write_multi(out, d));
        }
        Ok(())
    }
}

/// A handle to a `Limiter` (or a selection of its limits), registered in
/// this thread's hot-path table under `id` for as long as the handle lives.
#[napi]
pub struct NativeLimiter {
    view: Registered<View>,
}

impl NativeLimiter {
    fn register(env: &Env, view: View) -> Result<Self> {
        Ok(NativeLimiter { view: Registered::new(env, view)? })
    }

    fn build(rules: &[RuleSpec], options: &StoreOptions, clock: FaceClock) -> Res<MultiLimiter> {
        let mut builder = Limiter::builder().options(rule::options(options)?).clock(clock);
        for r in rules {
            builder = builder.limit(r.name.clone().unwrap_or_default(), rule::rule(r)?);
        }
        Ok(builder.build()?)
    }

    fn whole(env: &Env, limiter: Arc<MultiLimiter>) -> Result<Self> {
        let set = limiter.all_limits();
        Self::register(env, View { limiter, set })
    }

    fn time(&self, now_ms: Option<f64>) -> Res<u64> {
        now_ms.map_or_else(|| Ok(self.view.limiter.now()), ms_to_ns)
    }
}

fn unknown_limit(e: ratomic::Error) -> JsFailure {
    match e {
        ratomic::Error::InvalidArgument { .. } => JsFailure::range("ERR_RATOMIC_UNKNOWN_LIMIT", e.to_string()),
        other => other.into(),
    }
}

#[napi]
impl NativeLimiter {
    /// A limiter of the named `rules` (each with its `name`), decided all or
    /// nothing, storing keys as `options` say, whose calls are given the
    /// readings of the JavaScript clock `clock` (none: the monotonic clock).
    #[napi(constructor)]
    pub fn new(
        env: Env,
        rules: Vec<RuleSpec>,
        options: Option<StoreOptions>,
        clock: Option<&NativeClock>,
    ) -> Result<Self> {
        let limiter =
            Self::build(&rules, &options.unwrap_or_default(), FaceClock::new(clock)).map_err(|e| e.into_napi(&env))?;
        Self::whole(&env, Arc::new(limiter))
    }

    /// The process-wide limiter called `name` (see `NativeKeyed.shared`).
    #[napi(factory)]
    pub fn shared(env: Env, name: String, rules: Vec<RuleSpec>, options: Option<StoreOptions>) -> Result<Self> {
        let options = options.unwrap_or_default();
        let limiter = shared::get_or_make(&name, rules.clone(), options.clone(), || {
            Self::build(&rules, &options, FaceClock::default())
        })
        .map_err(|e| e.into_napi(&env))?;
        Self::whole(&env, limiter)
    }

    /// The handle's id in this thread's hot-path table.
    #[napi(getter)]
    pub fn id(&self) -> u32 {
        self.view.id
    }

    /// The set of limits with these names, as a bitmask (bit `i` for limit
    /// `i`). An unknown name or no name throws a `RangeError`
    /// (`ERR_RATOMIC_UNKNOWN_LIMIT`).
    #[napi]
    pub fn limit_bits(&self, env: Env, names: Vec<String>) -> Result<u32> {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        match self.view.limiter.limit_set(&names) {
            Ok(set) => Ok(u32::from(set.bits())),
            Err(e) => Err(unknown_limit(e).into_napi(&env)),
        }
    }

    /// A handle to the same limiter whose calls are subject only to the
    /// limits in `bits` (see `limitBits`).
    #[napi]
    pub fn select(&self, env: Env, bits: u32) -> Result<NativeLimiter> {
        let l = &self.view.limiter;
        let set = u16::try_from(bits)
            .map_err(|_| ratomic::Error::InvalidArgument {
                name: "limit set",
                value: format!("{bits:#x}"),
                reason: "was made for another limiter".into(),
            })
            .and_then(|bits| l.limit_set_from_bits(bits))
            .map_err(|e| unknown_limit(e).into_napi(&env))?;
        Self::register(&env, View { limiter: l.clone(), set })
    }

    /// The limits this handle's calls are subject to, as a bitmask.
    #[napi(getter)]
    pub fn bits(&self) -> u32 {
        u32::from(self.view.set.bits())
    }

    /// The limit names, in order.
    #[napi(getter)]
    pub fn names(&self) -> Vec<String> {
        self.view.limiter.names().map(str::to_owned).collect()
    }

    /// The rules, in the order of `names`.
    #[napi(getter)]
    pub fn rules(&self) -> Vec<RuleInfo> {
        self.view.limiter.rules().iter().map(rule::info).collect()
    }

    /// The limits this handle's calls are subject to, each named and with
    /// its rule in its units, as core prints it:
    /// `"burst": token bucket 5 per 1s, "daily": fixed window 1000 per 1d`.
    #[napi(getter)]
    pub fn description(&self) -> String {
        let l = &self.view.limiter;
        let limits = l.names().zip(l.rules()).enumerate().filter(|(i, _)| self.view.set.contains(*i));
        limits.map(|(_, (name, rule))| format!("{name:?}: {rule}")).collect::<Vec<_>>().join(", ")
    }

    /// The HTTP header fields for `decision` (one of this limiter's: its
    /// combined fields and its `entries`), as `Name: value\r\n` lines.
    #[napi]
    pub fn headers(&self, env: Env, decision: DecisionIn, entries: Vec<EntryIn>, format: u32) -> Result<String> {
        let l = &self.view.limiter;
        headers::with_multi(l.names(), l.rules(), &decision, &entries, headers::fields(format))
            .map_err(|e| e.into_napi(&env))
    }

    /// The RFC 9457 problem document for a 429 answering `decision`, naming
    /// the limits that denied; null when it was allowed.
    #[napi]
    pub fn problem(&self, env: Env, decision: DecisionIn, entries: Vec<EntryIn>) -> Result<Option<String>> {
        let l = &self.view.limiter;
        headers::with_multi(l.names(), l.rules(), &decision, &entries, headers::problem).map_err(|e| e.into_napi(&env))
    }

    /// Keys currently held.
    #[napi]
    pub fn size(&self) -> f64 {
        self.view.limiter.len() as f64
    }

    /// Drops every key all of whose limits are full again at `nowMs`
    /// (default: the limiter's clock); returns how many.
    #[napi]
    pub fn gc(&self, env: Env, now_ms: Option<f64>) -> Result<f64> {
        let run = || -> Res<f64> { Ok(self.view.limiter.gc_at(self.time(now_ms)?)? as f64) };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Bytes of memory the limiter's store holds.
    #[napi]
    pub fn memory_bytes(&self) -> f64 {
        self.view.limiter.memory_bytes() as f64
    }

    /// The longest key accepted, in bytes.
    #[napi(getter)]
    pub fn max_key_len(&self) -> f64 {
        self.view.limiter.max_key_len() as f64
    }

    /// The limiter's monotonic clock, in milliseconds.
    #[napi]
    pub fn now_ms(&self) -> f64 {
        ns_to_ms(self.view.limiter.now())
    }

    /// This limiter as a member of a `Stack`: the whole limiter only.
    #[napi]
    pub fn member(&self, env: Env) -> Result<NativeMember> {
        if self.view.set != self.view.limiter.all_limits() {
            return Err(JsFailure::type_error(
                "ERR_RATOMIC_INVALID_ARGUMENT",
                "a selection of a Limiter cannot be a stack member; pass the whole Limiter",
            )
            .into_napi(&env));
        }
        Ok(NativeMember::new(self.view.limiter.clone() as Arc<dyn StackMember>))
    }
}
