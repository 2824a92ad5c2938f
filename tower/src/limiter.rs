//! The limiters the layer holds: each ratomic limiter with its policies
//! prepared once, deciding a request's key(s) and giving a refund back.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ratomic::headers::Policy;
use ratomic::{Algorithm, Clock, Decision, Keyed, Limiter, Quota, Quotas, Stack};
use smallvec::SmallVec;

use crate::fields::{Entries, Format, Heads, Verdict};
use crate::key::Keys;

/// Why a request could not be judged (a key too long, a cost above the
/// limit, Redis failing under `FailurePolicy::ReturnError`).
pub type DecideError = Box<dyn std::error::Error + Send + Sync>;

/// A future the layer awaits (a Redis round trip).
pub type Pending<T> = Pin<Box<dyn Future<Output = Result<T, DecideError>> + Send>>;

/// A limiter's answer: at once (in memory) or to await (Redis).
// Boxing the verdict would cost the in-memory path an allocation a request.
#[allow(clippy::large_enum_variant)]
pub enum Decided {
    /// Decided without waiting.
    Now(Result<Verdict, DecideError>),
    /// A decision still to come.
    Later(Pending<Verdict>),
}

impl std::fmt::Debug for Decided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decided::Now(r) => f.debug_tuple("Now").field(r).finish(),
            Decided::Later(_) => f.write_str("Later(..)"),
        }
    }
}

/// A refund: done (in memory) or to await (Redis).
pub enum Refunded {
    /// Given back already.
    Now(Result<(), DecideError>),
    /// Still to give back.
    Later(Pending<()>),
}

impl std::fmt::Debug for Refunded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refunded::Now(r) => f.debug_tuple("Now").field(r).finish(),
            Refunded::Later(_) => f.write_str("Later(..)"),
        }
    }
}

/// One request as a limiter sees it.
#[derive(Debug)]
pub struct Call<'a> {
    pub(crate) keys: Keys<'a>,
    pub(crate) cost: u64,
    /// The request's head, when a function of the user's needs it.
    pub(crate) parts: Option<&'a http::request::Parts>,
    pub(crate) format: Format,
}

/// A set-up mistake found on a request (a quota [`Plans`] does not
/// declare): a 500 for the client, reported once for the operator.
#[derive(Debug)]
pub(crate) struct SetUp(pub(crate) &'static str);

impl std::fmt::Display for SetUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for SetUp {}

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A limiter the layer can use: a single-rule keyed limiter ([`Keyed`]:
/// `TokenBucket`, `FixedWindow`, `SlidingWindow`, `Keyed<Rule>`, in memory
/// or on a shared file), a multi-limit [`Limiter`], a [`Stack`], per-request
/// quotas ([`Plans`] on a [`Quotas`]), or (feature `redis`) a Redis-backed
/// one. Made by [`IntoRateLimiter`]; not implemented outside this crate.
pub trait RateLimiter: sealed::Sealed + Send + Sync + 'static {
    /// Decides the call and formats its fields.
    #[doc(hidden)]
    fn decide(&self, call: Call<'_>) -> Decided;
    /// Gives back what an admitted call was charged.
    #[doc(hidden)]
    fn refund(&self, keys: Keys<'_>, cost: u64, plan: usize) -> Refunded;
    /// Names a single rule's policy (multi-limit limiters name their own).
    #[doc(hidden)]
    fn set_name(&mut self, name: &str) -> ratomic::Result<()>;
    /// A [`Stack`]'s number of members: how many keys
    /// [`KeyBy::per_member`](crate::KeyBy::per_member) must give. `None`
    /// for every other limiter.
    #[doc(hidden)]
    fn members(&self) -> Option<usize> {
        None
    }
    /// Whether [`decide`](Self::decide) needs the request's `Parts`.
    #[doc(hidden)]
    fn needs_parts(&self) -> bool {
        false
    }
}

/// Turns a ratomic limiter into what the layer holds.
pub trait IntoRateLimiter {
    /// The layer's form of the limiter.
    type Limiter: RateLimiter;
    /// Converts, naming a single rule `"default"`.
    fn into_rate_limiter(self) -> ratomic::Result<Self::Limiter>;
}

fn one_key(keys: Keys<'_>) -> Result<&[u8], DecideError> {
    match keys {
        Keys::One(k) => Ok(k),
        Keys::Each(_) => Err("per-member keys need a Stack behind the layer".into()),
    }
}

fn done(r: Result<(), DecideError>) -> Refunded {
    Refunded::Now(r)
}

/// A set-up error naming the parameter, the value and what to do.
pub(crate) fn invalid(name: &'static str, value: String, reason: &'static str) -> ratomic::Error {
    ratomic::Error::InvalidArgument { name, value, reason: reason.into() }
}

/// A single-rule limiter with its policy.
#[derive(Debug)]
pub struct Single<A: Algorithm, C: Clock> {
    limiter: Keyed<A, [u8], C>,
    heads: Heads,
}

impl<A: Algorithm, C: Clock> sealed::Sealed for Single<A, C> {}

impl<A: Algorithm, C: Clock + 'static> RateLimiter for Single<A, C> {
    #[inline(always)]
    fn decide(&self, call: Call<'_>) -> Decided {
        let run = || -> Result<Verdict, DecideError> {
            let d = self.limiter.allow_n(one_key(call.keys)?, call.cost)?;
            Ok(self.heads.verdict(&[(0, d)], d, call.format))
        };
        Decided::Now(run())
    }
    fn refund(&self, keys: Keys<'_>, cost: u64, _: usize) -> Refunded {
        done(one_key(keys).and_then(|k| Ok(self.limiter.refund(k, cost)?)))
    }
    fn set_name(&mut self, name: &str) -> ratomic::Result<()> {
        self.heads = Heads::new(vec![Policy::of(name, self.limiter.algorithm())?])?;
        Ok(())
    }
}

impl<A: Algorithm, C: Clock + 'static> IntoRateLimiter for Keyed<A, [u8], C> {
    type Limiter = Single<A, C>;
    fn into_rate_limiter(self) -> ratomic::Result<Single<A, C>> {
        let heads = Heads::new(vec![Policy::of("default", self.algorithm())?])?;
        Ok(Single { limiter: self, heads })
    }
}

fn entries(d: impl Iterator<Item = (usize, Decision)>) -> Entries {
    d.collect()
}

/// A multi-limit limiter with its policies.
#[derive(Debug)]
pub struct Multi<C: Clock> {
    limiter: Limiter<[u8], C>,
    heads: Heads,
}

impl<C: Clock> sealed::Sealed for Multi<C> {}

impl<C: Clock + 'static> RateLimiter for Multi<C> {
    fn decide(&self, call: Call<'_>) -> Decided {
        let run = || -> Result<Verdict, DecideError> {
            let d = self.limiter.allow_n(one_key(call.keys)?, call.cost)?;
            Ok(self.heads.verdict(&entries(d.entries().map(|e| (e.index, e.decision))), d.decision, call.format))
        };
        Decided::Now(run())
    }
    fn refund(&self, keys: Keys<'_>, cost: u64, _: usize) -> Refunded {
        done(one_key(keys).and_then(|k| Ok(self.limiter.refund(k, cost)?)))
    }
    fn set_name(&mut self, _name: &str) -> ratomic::Result<()> {
        Ok(())
    }
}

impl<C: Clock + 'static> IntoRateLimiter for Limiter<[u8], C> {
    type Limiter = Multi<C>;
    fn into_rate_limiter(self) -> ratomic::Result<Multi<C>> {
        let heads = Heads::new(Policy::for_limiter(&self)?)?;
        Ok(Multi { limiter: self, heads })
    }
}

/// A [`Stack`] with one policy per member.
#[derive(Debug)]
pub struct StackOf<C: Clock> {
    stack: Stack<C>,
    heads: Heads,
}

impl<C: Clock> sealed::Sealed for StackOf<C> {}

impl<C: Clock> StackOf<C> {
    /// Every member on one key (a direct member ignores it), or one each.
    fn with_keys<T>(&self, keys: Keys<'_>, f: impl FnOnce(&[&[u8]]) -> T) -> T {
        match keys {
            Keys::One(k) => f(&SmallVec::<[&[u8]; 4]>::from_elem(k, self.heads.len())),
            Keys::Each(each) => f(&each.iter().map(Vec::as_slice).collect::<SmallVec<[&[u8]; 4]>>()),
        }
    }
}

impl<C: Clock + 'static> RateLimiter for StackOf<C> {
    fn decide(&self, call: Call<'_>) -> Decided {
        Decided::Now(self.with_keys(call.keys, |keys| {
            let d = self.stack.allow_n(keys, call.cost)?;
            Ok(self.heads.verdict(&entries(d.entries().map(|e| (e.index, e.decision))), d.decision, call.format))
        }))
    }
    fn refund(&self, keys: Keys<'_>, cost: u64, _: usize) -> Refunded {
        done(self.with_keys(keys, |keys| self.stack.refund(keys, cost).map_err(Into::into)))
    }
    fn set_name(&mut self, _name: &str) -> ratomic::Result<()> {
        Ok(())
    }
    fn members(&self) -> Option<usize> {
        Some(self.heads.len())
    }
}

/// Each member named as in the stack; a `Limiter` member (several limits,
/// no one policy) is an error naming it.
impl<C: Clock + 'static> IntoRateLimiter for Stack<C> {
    type Limiter = StackOf<C>;
    fn into_rate_limiter(self) -> ratomic::Result<StackOf<C>> {
        let heads = Heads::new(self.policies()?)?;
        Ok(StackOf { stack: self, heads })
    }
}

type ChooseFn = dyn Fn(&http::request::Parts) -> Option<Quota> + Send + Sync;

/// A [`Quotas`] limiter behind the layer: each request's quota chosen by a
/// function of the request (say the customer's plan, looked up by its API
/// key), among named plans declared at set-up, each with its policy.
///
/// A request the function gives no quota is refused with a 400, like one
/// without a key; a quota no plan declares is a set-up mistake: a 500,
/// reported once.
///
/// ```
/// use http::HeaderName;
/// use ratomic::{Quota, Quotas};
/// use ratomic_tower::{KeyBy, Plans, RateLimitLayer};
///
/// let (free, pro) = (Quota::parse("10/min")?, Quota::parse("1000/min")?);
/// let plans = Plans::new(Quotas::new(), move |parts| {
///     let key = parts.headers.get("x-api-key")?;
///     Some(if key.as_bytes().starts_with(b"pro-") { pro } else { free })
/// })
/// .plan("free", free)?
/// .plan("pro", pro)?;
/// let layer = RateLimitLayer::new(plans).key(KeyBy::header(HeaderName::from_static("x-api-key")));
/// # Ok::<(), ratomic::Error>(())
/// ```
pub struct Plans<C: Clock> {
    quotas: Quotas<C>,
    choose: Arc<ChooseFn>,
    plans: Vec<(Quota, Heads)>,
}

impl<C: Clock + std::fmt::Debug> std::fmt::Debug for Plans<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plans").field("quotas", &self.quotas).field("plans", &self.plans.len()).finish_non_exhaustive()
    }
}

impl<C: Clock> Plans<C> {
    /// `quotas`, with each request's quota chosen by `choose`.
    pub fn new(
        quotas: Quotas<C>,
        choose: impl Fn(&http::request::Parts) -> Option<Quota> + Send + Sync + 'static,
    ) -> Self {
        Plans { quotas, choose: Arc::new(choose), plans: Vec::new() }
    }

    /// Declares a plan: the quota `choose` may give, named `name` in the
    /// header fields. Errors on a name a Structured Field String cannot
    /// carry, or a quota already declared.
    pub fn plan(mut self, name: &str, quota: Quota) -> ratomic::Result<Self> {
        if self.plans.iter().any(|(q, _)| *q == quota) {
            return Err(invalid("plan", format!("{name:?}"), "its quota is already declared by another plan"));
        }
        self.plans.push((quota, Heads::of_quota(name, &quota)?));
        Ok(self)
    }
}

impl<C: Clock> sealed::Sealed for Plans<C> {}

impl<C: Clock + 'static> RateLimiter for Plans<C> {
    fn decide(&self, call: Call<'_>) -> Decided {
        let run = || -> Result<Verdict, DecideError> {
            let key = one_key(call.keys)?;
            let parts = call.parts.ok_or("the quota function needs the request's head")?;
            let quota = (self.choose)(parts).ok_or("the quota function gave this request no quota")?;
            let Some(plan) = self.plans.iter().position(|(q, _)| *q == quota) else {
                return Err(Box::new(SetUp(
                    "the quota function chose a quota no plan declares: declare each with Plans::plan(name, quota)",
                )));
            };
            let d = self.quotas.allow_n(key, &quota, call.cost)?;
            let mut v = self.plans[plan].1.verdict(&[(0, d)], d, call.format);
            v.plan = plan;
            Ok(v)
        };
        Decided::Now(run())
    }
    fn needs_parts(&self) -> bool {
        true
    }
    fn refund(&self, keys: Keys<'_>, cost: u64, plan: usize) -> Refunded {
        let run = || -> Result<(), DecideError> {
            let (quota, _) = self.plans.get(plan).ok_or("a refund of a plan not declared")?;
            Ok(self.quotas.refund(one_key(keys)?, quota, cost)?)
        };
        done(run())
    }
    fn set_name(&mut self, _name: &str) -> ratomic::Result<()> {
        Ok(())
    }
}

impl<C: Clock + 'static> IntoRateLimiter for Plans<C> {
    type Limiter = Plans<C>;
    fn into_rate_limiter(self) -> ratomic::Result<Plans<C>> {
        if self.plans.is_empty() {
            return Err(invalid("plans", "[]".into(), "declare at least one with Plans::plan(name, quota)"));
        }
        Ok(self)
    }
}
