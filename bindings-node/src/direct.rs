//! `DirectTokenBucket`: one token bucket for all traffic, no key — core's
//! `DirectTokenBucket`. Its calls go through the hot path's keyless
//! functions (`allowDirect`, `opDirect` in [`hot`](crate::hot)); this
//! handle registers it there and does the cold rest.

use std::sync::Arc;

use napi::bindgen_prelude::*;
use napi_derive::napi;
use ratomic::{Gcra, Rule, StackMember};

use crate::clock::{ns_to_ms, FaceClock, NativeClock};
use crate::env::Registered;
use crate::error::{JsFailure, Res};
use crate::headers::{self, DecisionIn, PolicyCache};
use crate::rule::{self, RuleInfo, RuleSpec, StoreOptions};
use crate::shared;
use crate::stack::NativeMember;

pub use crate::env::{DirectBucket, DirectHandle as Handle};

/// A handle to a direct bucket, registered in this thread's hot-path table
/// (its keyless part) under `id` for as long as the handle lives.
#[napi]
pub struct NativeDirect {
    bucket: Registered<Handle>,
    /// The policy last asked for by `headers`/`problem`, built once per name.
    policy: PolicyCache,
}

impl NativeDirect {
    fn register(env: &Env, bucket: Handle) -> Result<Self> {
        Ok(NativeDirect { bucket: Registered::new(env, bucket)?, policy: Default::default() })
    }

    /// A token bucket's algorithm from `spec` (rate checks are core's).
    fn gcra(spec: &RuleSpec) -> Res<Gcra> {
        match rule::rule(spec)? {
            Rule::TokenBucket(g) => Ok(g),
            _ => Err(JsFailure::type_error(
                "ERR_RATOMIC_INVALID_ARGUMENT",
                format!("a DirectTokenBucket is a token bucket, not a {:?}", spec.algorithm),
            )),
        }
    }
}

#[napi]
impl NativeDirect {
    /// A full bucket of the token-bucket `rule`, whose calls are given the
    /// readings of the JavaScript clock `clock` (none: the monotonic clock).
    /// Out-of-range numbers and bad rate strings throw a `RangeError`.
    #[napi(constructor)]
    pub fn new(env: Env, rule: RuleSpec, clock: Option<&NativeClock>) -> Result<Self> {
        let gcra = Self::gcra(&rule).map_err(|e| e.into_napi(&env))?;
        Self::register(&env, Arc::new(DirectBucket::with_algorithm(gcra, FaceClock::new(clock))))
    }

    /// The process-wide bucket called `name`, made from `rule` on first
    /// use, on the monotonic clock: every worker thread that asks for the
    /// same name gets a handle to the same bucket. Another configuration, or
    /// another kind of limiter, under the same name throws an `Error` with
    /// code `ERR_RATOMIC_SHARED_CONFLICT`.
    #[napi(factory)]
    pub fn shared(env: Env, name: String, rule: RuleSpec) -> Result<Self> {
        let bucket = shared::get_or_make(&name, vec![rule.clone()], StoreOptions::default(), || {
            Ok(DirectBucket::with_algorithm(Self::gcra(&rule)?, FaceClock::default()))
        })
        .map_err(|e| e.into_napi(&env))?;
        Self::register(&env, bucket)
    }

    /// The bucket's id in this thread's hot-path table of direct buckets.
    #[napi(getter)]
    pub fn id(&self) -> u32 {
        self.bucket.id
    }

    /// The rule, as `TokenBucket`'s constructors accept it.
    #[napi(getter)]
    pub fn rule(&self) -> RuleInfo {
        rule::info(&Rule::from(*self.bucket.algorithm()))
    }

    /// The rule with its units, as core prints it (`"token bucket 100 per 1s"`).
    #[napi(getter)]
    pub fn description(&self) -> String {
        self.bucket.algorithm().to_string()
    }

    /// The bucket's monotonic clock, in milliseconds.
    #[napi]
    pub fn now_ms(&self) -> f64 {
        ns_to_ms(self.bucket.now())
    }

    /// The HTTP header fields for a decision of this bucket (its five
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
        self.policy
            .with(&name, self.bucket.algorithm(), |p| headers::with_policy(p, &d, headers::fields(format)))
            .map_err(|e| e.into_napi(&env))
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
        self.policy
            .with(&name, self.bucket.algorithm(), |p| headers::with_policy(p, &d, headers::problem))
            .map_err(|e| e.into_napi(&env))
    }

    /// This bucket as a member of a `Stack` (core ignores its key).
    #[napi]
    pub fn member(&self) -> NativeMember {
        NativeMember::new(self.bucket.clone() as Arc<dyn StackMember>)
    }
}
