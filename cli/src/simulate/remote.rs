//! The limiters of a run on a server (`--redis`, `--postgres`): one per lane.

use std::time::Duration;

use crate::limits::Limit;

use super::Lane;

/// One Redis limiter per lane, each under a prefix of its own. The
/// simulated clock runs far faster than the server's, so keys are kept an
/// hour at least (see `Limits::with_ttl_floor`) and reset after the run.
pub(super) fn redis_lanes(url: &str, plans: &[Vec<Limit>]) -> Result<Vec<ratomic_redis::BlockingRedisLimiter>, String> {
    let run = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let options = ratomic_redis::Options { timeout: Duration::from_secs(5), ..Default::default() };
    plans
        .iter()
        .enumerate()
        .map(|(i, limits)| {
            let limits = ratomic_redis::Limits::new(limits.iter().map(|l| (l.name.clone(), l.rule)))
                .and_then(|l| l.with_prefix(format!("ratomic-simulate:{}:{run}:{i}:", std::process::id())))
                .map_err(|e| format!("--redis: {e}"))?
                .with_ttl_floor(Duration::from_secs(3600));
            ratomic_redis::BlockingRedisLimiter::connect(url, limits, options)
                .map_err(|e| format!("--redis {url}: {e}"))
        })
        .collect()
}

/// The limiters of a run on a server: one per lane.
pub(super) enum Remote {
    Redis(Vec<ratomic_redis::BlockingRedisLimiter>),
    Postgres(Vec<ratomic_postgres::BlockingPostgresLimiter>),
}

impl Remote {
    /// Lane `i`'s decision at `now`, recorded in its lane.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn allow_at(
        &self,
        i: usize,
        key: &[u8],
        cost: u64,
        now: u64,
        lane: &mut Lane,
        bin: usize,
        t: u64,
        k: u32,
    ) -> Result<(), String> {
        match self {
            Remote::Redis(l) => {
                let d = l[i].allow_at(key, cost, now).map_err(|e| format!("--redis: {e}"))?;
                lane.record(bin, t, k, d.decision, d.entries().map(|(_, e)| e.allowed));
            }
            Remote::Postgres(l) => {
                let d = l[i].allow_at(key, cost, now).map_err(|e| format!("--postgres: {e}"))?;
                lane.record(bin, t, k, d.decision, d.entries().map(|(_, e)| e.allowed));
            }
        }
        Ok(())
    }

    /// Forgets every key of the run.
    pub(super) fn reset(&self, keys: &[Vec<u8>]) -> Result<(), String> {
        match self {
            Remote::Redis(ls) => {
                for l in ls {
                    for key in keys {
                        l.reset(key).map_err(|e| format!("--redis: {e}"))?;
                    }
                }
            }
            Remote::Postgres(ls) => {
                for l in ls {
                    for key in keys {
                        l.reset(key).map_err(|e| format!("--postgres: {e}"))?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// One PostgreSQL limiter per lane, each under a prefix of its own; its
/// rows are reset after the run.
pub(super) fn postgres_lanes(
    conninfo: &str,
    plans: &[Vec<Limit>],
) -> Result<Vec<ratomic_postgres::BlockingPostgresLimiter>, String> {
    let run = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let options = ratomic_postgres::Options { timeout: Duration::from_secs(5), connections: 1, ..Default::default() };
    plans
        .iter()
        .enumerate()
        .map(|(i, limits)| {
            let limits = ratomic_postgres::Limits::new(limits.iter().map(|l| (l.name.clone(), l.rule)))
                .and_then(|l| l.with_prefix(format!("ratomic-simulate:{}:{run}:{i}", std::process::id())))
                .map_err(|e| format!("--postgres: {e}"))?;
            ratomic_postgres::BlockingPostgresLimiter::connect(conninfo, limits, options)
                .map_err(|e| format!("--postgres: cannot connect: {e}"))
        })
        .collect()
}
