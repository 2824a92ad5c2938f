//! The limiters behind the rules: one ratomic keyed limiter per distinct
//! rate (`requests_per_unit` per `unit`), shared by every rule with that
//! rate; a descriptor is one key of its rule's limiter.
//!
//! A reload keeps the limiter of every rate the new configuration still
//! has, so unchanged limits keep their state; a rate that disappears drops
//! its limiter with the old configuration.

use std::collections::HashMap;
use std::sync::Arc;

use ratomic::{Decision, FixedWindow, Options, Rate, SlidingWindow, TokenBucket};

use crate::config::Unit;

/// Which of ratomic's algorithms the rules use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Algorithm {
    /// Windows of one unit (what envoyproxy/ratelimit counts): at most
    /// `requests_per_unit` per window, up to twice that around a boundary.
    FixedWindow,
    /// The sliding-window counter: no double burst at a boundary.
    SlidingWindow,
    /// A token bucket of `requests_per_unit` refilled over one unit.
    TokenBucket,
}

/// One rate's limiter.
#[derive(Debug)]
pub enum RateLimiter {
    /// See [`Algorithm::FixedWindow`].
    Fixed(FixedWindow),
    /// See [`Algorithm::SlidingWindow`].
    Sliding(SlidingWindow),
    /// See [`Algorithm::TokenBucket`].
    Bucket(TokenBucket),
    /// Any of them, its state in Redis or Valkey (`ratomic-redis`).
    Redis(ratomic_redis::RedisLimiter),
    /// Any of them, its state in PostgreSQL (`ratomic-postgres`).
    Postgres(ratomic_postgres::PostgresLimiter),
}

/// A limiter could not decide: its backend (Redis, PostgreSQL) failed and the failure
/// policy is to report it. The text is for the operator's log only.
#[derive(Debug)]
pub struct BackendError(pub String);

impl From<ratomic::Error> for BackendError {
    fn from(e: ratomic::Error) -> Self {
        BackendError(e.to_string())
    }
}

impl From<ratomic_redis::Error> for BackendError {
    fn from(e: ratomic_redis::Error) -> Self {
        BackendError(e.to_string())
    }
}

impl From<ratomic_postgres::Error> for BackendError {
    fn from(e: ratomic_postgres::Error) -> Self {
        BackendError(e.to_string())
    }
}

impl RateLimiter {
    /// Builds the in-process limiter for `rate` (in memory or a shared file).
    pub fn from_rate(algorithm: Algorithm, rate: Rate, options: Options) -> ratomic::Result<Self> {
        Ok(match algorithm {
            Algorithm::FixedWindow => RateLimiter::Fixed(FixedWindow::builder(rate).options(options).build()?),
            Algorithm::SlidingWindow => RateLimiter::Sliding(SlidingWindow::builder(rate).options(options).build()?),
            Algorithm::TokenBucket => {
                RateLimiter::Bucket(TokenBucket::builder(ratomic::Quota::from_rate(rate)?).options(options).build()?)
            }
        })
    }

    /// Takes `cost` from `key`'s budget; a denial is a decision. With it,
    /// whether it was answered from a lease (the backend's tokens granted here).
    pub async fn allow(&self, key: &[u8], cost: u64) -> Result<(Decision, bool), BackendError> {
        Ok(match self {
            RateLimiter::Fixed(l) => (l.allow_n(key, cost)?, false),
            RateLimiter::Sliding(l) => (l.allow_n(key, cost)?, false),
            RateLimiter::Bucket(l) => (l.allow_n(key, cost)?, false),
            RateLimiter::Redis(l) => {
                let d = l.allow_n(key, cost).await?;
                (d.decision, d.source == ratomic_redis::Source::Lease)
            }
            RateLimiter::Postgres(l) => {
                let d = l.allow_n(key, cost).await?;
                (d.decision, d.source == ratomic_postgres::Source::Lease)
            }
        })
    }

    /// Gives the unused tokens of this limiter's leases back to Redis or
    /// PostgreSQL; how many limits took tokens back (0 in memory).
    pub async fn give_back(&self) -> Result<usize, BackendError> {
        match self {
            RateLimiter::Redis(l) => Ok(l.give_back().await?),
            RateLimiter::Postgres(l) => Ok(l.give_back().await?),
            _ => Ok(0),
        }
    }

    /// Gives back the unused tokens of every lease `limiters` hold (at
    /// shutdown, or for rates a reload dropped); how many limits took
    /// tokens back. A failure is logged: those tokens come back when their
    /// time passes.
    pub async fn give_back_all<L: AsRef<RateLimiter>>(limiters: impl IntoIterator<Item = L>) -> usize {
        let mut back = 0;
        for limiter in limiters {
            match limiter.as_ref().give_back().await {
                Ok(n) => back += n,
                Err(BackendError(e)) => tracing::warn!(error = %e, "leases not given back; they end with their time"),
            }
        }
        back
    }

    /// What `allow` would answer, changing nothing.
    pub async fn peek(&self, key: &[u8], cost: u64) -> Result<Decision, BackendError> {
        Ok(match self {
            RateLimiter::Fixed(l) => l.peek_n(key, cost)?,
            RateLimiter::Sliding(l) => l.peek_n(key, cost)?,
            RateLimiter::Bucket(l) => l.peek_n(key, cost)?,
            RateLimiter::Redis(l) => l.peek(key, cost).await?.decision,
            RateLimiter::Postgres(l) => l.peek(key, cost).await?.decision,
        })
    }

    /// Gives `tokens` back to `key`, never above full.
    pub async fn refund(&self, key: &[u8], tokens: u64) -> Result<(), BackendError> {
        match self {
            RateLimiter::Fixed(l) => l.refund(key, tokens)?,
            RateLimiter::Sliding(l) => l.refund(key, tokens)?,
            RateLimiter::Bucket(l) => l.refund(key, tokens)?,
            RateLimiter::Redis(l) => {
                l.refund(key, tokens).await?;
            }
            RateLimiter::Postgres(l) => {
                l.refund(key, tokens).await?;
            }
        }
        Ok(())
    }
}

/// The limiters of one configuration, by rate.
pub type Limiters = HashMap<(u32, Unit), Arc<RateLimiter>>;

/// Where the limiters keep their keys: in this process, or in one shared
/// file per rate in a directory, so that every `ratomic serve` of the host
/// given the same directory shares the state (core's shared-file store).
#[derive(Clone, Debug, Default)]
pub struct Storage {
    /// The directory of the shared files, or `None` for memory.
    pub state_dir: Option<std::path::PathBuf>,
    /// Redis or Valkey, if the state lives there.
    pub redis: Option<Redis>,
    /// PostgreSQL, if the state lives there.
    pub postgres: Option<Postgres>,
}

/// Where in PostgreSQL the state lives, and what to do when it fails.
#[derive(Clone, Debug)]
pub struct Postgres {
    /// A `postgresql://` URL or a `key=value` conninfo.
    pub conninfo: String,
    /// Prefix of every row's key space (each rate adds its own part).
    pub prefix: String,
    /// Timeout, failure policy, breaker, connections.
    pub options: ratomic_postgres::Options,
}

/// Where in Redis the state lives, and what to do when it fails.
#[derive(Clone, Debug)]
pub struct Redis {
    /// `redis://host:port/db`.
    pub url: String,
    /// Prefix of every key (each rate adds its own part).
    pub prefix: String,
    /// Timeout, failure policy, breaker.
    pub options: ratomic_redis::Options,
}

impl Storage {
    /// The limiter for `rate`, named `name` (in a file's name, or a Redis
    /// key's prefix).
    pub async fn limiter(
        &self,
        algorithm: Algorithm,
        rate: Rate,
        options: &Options,
        name: &str,
    ) -> Result<RateLimiter, BackendError> {
        if let Some(pg) = &self.postgres {
            let limits = ratomic_postgres::Limits::single(rule_of(algorithm, rate).map_err(BackendError)?)?
                .with_prefix(format!("{}{name}", pg.prefix))?;
            return Ok(RateLimiter::Postgres(
                ratomic_postgres::PostgresLimiter::connect(&pg.conninfo, limits, pg.options).await?,
            ));
        }
        let Some(redis) = &self.redis else {
            return Ok(RateLimiter::from_rate(algorithm, rate, self.options(options, name))?);
        };
        let Some(limits) = self.check(algorithm, rate).map_err(BackendError)? else {
            return Err(BackendError("no Redis limits for a Redis storage".into()));
        };
        let limits = limits.with_prefix(format!("{}{name}:", redis.prefix))?;
        Ok(RateLimiter::Redis(ratomic_redis::RedisLimiter::connect(&redis.url, limits, redis.options).await?))
    }

    /// Whether `rate` can be served by `algorithm` on this storage, without
    /// opening anything (a window packs its count in one word, so the
    /// largest limit depends on the window; Redis allows less than memory).
    /// For Redis, the limits to connect with.
    pub fn check(&self, algorithm: Algorithm, rate: Rate) -> Result<Option<ratomic_redis::Limits>, String> {
        if self.postgres.is_some() {
            let rule = rule_of(algorithm, rate)?;
            return ratomic_postgres::Limits::single(rule).map(|_| None).map_err(|e| e.to_string());
        }
        if self.redis.is_none() {
            return RateLimiter::from_rate(algorithm, rate, Options::default().max_keys(1))
                .map(|_| None)
                .map_err(|e| e.to_string());
        }
        ratomic_redis::Limits::single(rule_of(algorithm, rate)?).map(Some).map_err(|e| e.to_string())
    }

    /// `options` for the limiter named `name` (a file name's stem).
    pub fn options(&self, options: &Options, name: &str) -> Options {
        match &self.state_dir {
            Some(dir) => options.clone().shared_file(dir.join(format!("{name}.ratomic"))),
            None => options.clone(),
        }
    }
}

/// `algorithm`'s rule for `rate`.
fn rule_of(algorithm: Algorithm, rate: Rate) -> Result<ratomic::Rule, String> {
    match algorithm {
        Algorithm::FixedWindow => ratomic::Rule::fixed_window(rate),
        Algorithm::SlidingWindow => ratomic::Rule::sliding_window(rate),
        Algorithm::TokenBucket => ratomic::Quota::from_rate(rate).map(ratomic::Rule::token_bucket),
    }
    .map_err(|e| e.to_string())
}

/// The stem of a rate's shared file: the algorithm and the rate.
pub fn file_stem(algorithm: Algorithm, requests_per_unit: u64, period: std::time::Duration) -> String {
    let algo = match algorithm {
        Algorithm::FixedWindow => "fixed-window",
        Algorithm::SlidingWindow => "sliding-window",
        Algorithm::TokenBucket => "token-bucket",
    };
    format!("{algo}-{requests_per_unit}-per-{}ms", period.as_millis())
}

/// Builds the limiters for `rates`, taking each from `old` when it is
/// there (a reload), so that its keys keep their state. A rate of 0
/// refuses every call and needs no limiter.
pub async fn build(
    rates: &[(u32, Unit, String)],
    old: Option<&Limiters>,
    algorithm: Algorithm,
    options: &Options,
    storage: &Storage,
) -> Result<Limiters, BackendError> {
    let mut out = Limiters::new();
    for (rpu, unit, origin) in rates {
        let (rpu, unit) = (*rpu, *unit);
        if rpu == 0 {
            continue;
        }
        let limiter = match old.and_then(|o| o.get(&(rpu, unit))) {
            Some(l) => l.clone(),
            None => {
                let stem = format!("rls-{}", file_stem(algorithm, u64::from(rpu), unit.duration()));
                // An error names the rule it comes from: a rate too large for
                // the algorithm or the backend, a shared file or a server
                // that cannot be reached.
                let at = |e: String| BackendError(format!("{origin}: {rpu} per {}: {e}", unit.name()));
                let rate = Rate::new(u64::from(rpu), unit.duration()).map_err(|e| at(e.to_string()))?;
                Arc::new(storage.limiter(algorithm, rate, options, &stem).await.map_err(|BackendError(e)| at(e))?)
            }
        };
        out.insert((rpu, unit), limiter);
    }
    Ok(out)
}
