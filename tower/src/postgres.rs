//! A PostgreSQL-backed limiter behind the layer (feature `postgres`): its
//! decision and refund are awaited, as a Redis-backed one's.

use std::sync::Arc;

use crate::config::Throttle;
use crate::fields::{Entries, Heads};
use crate::key::Keys;
use crate::limiter::{sealed, Call, Decided, IntoRateLimiter, RateLimiter, Refunded};
use crate::remote::{self, owned};

/// A PostgreSQL-backed limiter with its policies: one named after the
/// layer's `name` when it holds a single rule (`Limits::single`), else one
/// per named limit.
#[derive(Debug)]
pub struct Postgres {
    limiter: ratomic_postgres::PostgresLimiter,
    heads: Arc<Heads>,
    single: bool,
    /// Answers of the limiter's own failure policy, reported.
    by_policy: Arc<Throttle>,
}

fn heads(limits: &ratomic_postgres::Limits, single_name: &str) -> ratomic::Result<Arc<Heads>> {
    remote::heads(
        limits.names(),
        limits.core_rules(),
        remote::is_single(limits.names(), ratomic_postgres::SINGLE),
        single_name,
    )
}

impl sealed::Sealed for Postgres {}

impl RateLimiter for Postgres {
    fn decide(&self, call: Call<'_>) -> Decided {
        let key = match owned(call.keys) {
            Ok(k) => k,
            Err(e) => return Decided::Now(Err(e)),
        };
        let (limiter, heads, by_policy, cost, format) =
            (self.limiter.clone(), self.heads.clone(), self.by_policy.clone(), call.cost, call.format);
        Decided::Later(Box::pin(async move {
            let d = limiter.allow_n(&key, cost).await?;
            if matches!(d.source, ratomic_postgres::Source::Policy | ratomic_postgres::Source::Fallback) {
                remote::report_policy(&by_policy, "PostgreSQL", &d.source);
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
        Refunded::Later(Box::pin(async move { Ok(limiter.refund(&key, cost).await.map(drop)?) }))
    }

    fn set_name(&mut self, name: &str) -> ratomic::Result<()> {
        if self.single {
            self.heads = heads(self.limiter.limits(), name)?;
        }
        Ok(())
    }
}

impl IntoRateLimiter for ratomic_postgres::PostgresLimiter {
    type Limiter = Postgres;
    fn into_rate_limiter(self) -> ratomic::Result<Postgres> {
        let heads = heads(self.limits(), "default")?;
        let single = remote::is_single(self.limits().names(), ratomic_postgres::SINGLE);
        Ok(Postgres { limiter: self, heads, single, by_policy: Arc::default() })
    }
}
