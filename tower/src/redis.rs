//! A Redis-backed limiter behind the layer (feature `redis`): its decision
//! and refund are awaited.

use std::sync::Arc;

use ratomic::headers::Policy;

use crate::config::Throttle;
use crate::fields::{Entries, Heads};
use crate::key::Keys;
use crate::limiter::{sealed, Call, DecideError, Decided, IntoRateLimiter, RateLimiter, Refunded};

/// A Redis-backed limiter with its policies: one named after the layer's
/// `name` when it holds a single rule (`Limits::single`), else one per
/// named limit.
#[derive(Debug)]
pub struct Redis<C> {
    limiter: ratomic_redis::RedisLimiter<C>,
    heads: Arc<Heads>,
    single: bool,
    /// Answers of the limiter's own failure policy, reported.
    by_policy: Arc<Throttle>,
}

fn heads(limits: &ratomic_redis::Limits, single_name: &str) -> ratomic::Result<Arc<Heads>> {
    let single = is_single(limits);
    let policies = limits
        .names()
        .zip(limits.core_rules())
        .map(|(n, r)| Policy::of(if single { single_name } else { n }, r))
        .collect::<ratomic::Result<Vec<_>>>()?;
    Ok(Arc::new(Heads::new(policies)?))
}

fn is_single(limits: &ratomic_redis::Limits) -> bool {
    let mut names = limits.names();
    matches!((names.next(), names.next()), (Some(ratomic_redis::SINGLE), None))
}

fn owned(keys: Keys<'_>) -> Result<Vec<u8>, DecideError> {
    match keys {
        Keys::One(k) => Ok(k.to_vec()),
        Keys::Each(_) => Err("per-member keys need a Stack behind the layer".into()),
    }
}

impl<C> sealed::Sealed for Redis<C> {}

impl<C> RateLimiter for Redis<C>
where
    C: ratomic_redis::redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn decide(&self, call: Call<'_>) -> Decided {
        let key = match owned(call.keys) {
            Ok(k) => k,
            Err(e) => return Decided::Now(Err(e)),
        };
        let (limiter, heads, by_policy, cost, format) =
            (self.limiter.clone(), self.heads.clone(), self.by_policy.clone(), call.cost, call.format);
        Decided::Later(Box::pin(async move {
            let d = limiter.allow_n(&key, cost).await?;
            if matches!(d.source, ratomic_redis::Source::Policy | ratomic_redis::Source::Fallback) {
                if let Some(more) = by_policy.due() {
                    tracing::warn!(
                        target: "ratomic_tower",
                        source = ?d.source,
                        more,
                        "the limiter's Redis is failing; its own failure policy answers"
                    );
                }
            }
            let entries: Entries = d.entries().enumerate().map(|(i, (_, e))| (i, e)).collect();
            Ok(heads.verdict(&entries, d.decision, format))
        }))
    }

    fn refund(&self, keys: Keys<'_>, cost: u64, _: usize) -> Refunded {
        let key = match owned(keys) {
            Ok(k) => k,
            Err(e) => return Refunded::Now(Err(e)),
        };
        let limiter = self.limiter.clone();
        Refunded::Later(Box::pin(async move { Ok(limiter.refund(&key, cost).await?) }))
    }

    fn set_name(&mut self, name: &str) -> ratomic::Result<()> {
        if self.single {
            self.heads = heads(self.limiter.limits(), name)?;
        }
        Ok(())
    }
}

impl<C> IntoRateLimiter for ratomic_redis::RedisLimiter<C>
where
    C: ratomic_redis::redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    type Limiter = Redis<C>;
    fn into_rate_limiter(self) -> ratomic::Result<Redis<C>> {
        let heads = heads(self.limits(), "default")?;
        let single = is_single(self.limits());
        Ok(Redis { limiter: self, heads, single, by_policy: Arc::default() })
    }
}
