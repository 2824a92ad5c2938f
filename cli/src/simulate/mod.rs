//! `ratomic simulate`: push a workload through the engine and report what
//! it granted, second by second and in summary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratomic::{Clock, Limiter, ManualClock, MonotonicClock};

use crate::format;
use crate::limits::{self, Algo, Limit, LimitSpec};
use crate::stats::{self, Burst};
use crate::workload::{Arrival, Workload};

mod remote;
mod render;
#[cfg(test)]
mod tests;

use remote::{postgres_lanes, redis_lanes, Remote};

/// The most requests one simulation offers (memory and patience).
pub const MAX_REQUESTS: u64 = 10_000_000;

/// The longest simulation, in seconds: a year (a bound on patience and on
/// the per-second table, not on the engine).
pub const MAX_SECONDS: f64 = 31_536_000.0;

/// Everything a simulation needs, as the command line gave it.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// One per `--rate`: several make an all-or-nothing multi-limit.
    pub specs: Vec<LimitSpec>,
    /// The algorithms to compare (one, or all three).
    pub algos: Vec<Algo>,
    /// `--burst` values.
    pub bursts: Vec<u64>,
    /// Mean requests per second (all keys together).
    pub rps: f64,
    /// Length of the run, in seconds.
    pub seconds: f64,
    /// Number of distinct keys.
    pub keys: u32,
    /// Tokens each request asks for.
    pub cost: u64,
    /// Arrival pattern; `None` picks the default (bursty when comparing algorithms).
    pub arrival: Option<Arrival>,
    /// Seed for the random parts of the workload.
    pub seed: u64,
    /// Use the real clock and pace requests in real time.
    pub realtime: bool,
    /// Run the limiters on this Redis server (`redis://host:port/db`)
    /// instead of in memory, at the same explicit times.
    pub redis: Option<String>,
    /// Run the limiters on this PostgreSQL database (a `postgresql://` URL
    /// or `key=value` conninfo) instead, the same way.
    pub postgres: Option<String>,
}

/// One algorithm's run over the traffic.
#[derive(Clone, Debug)]
pub struct Lane {
    /// The algorithm the lane's limits default to.
    pub algo: Algo,
    /// Its limits, in `--rate` order.
    pub limits: Vec<Limit>,
    /// Requests allowed per time bin.
    pub allowed_bins: Vec<u64>,
    /// Requests denied per time bin.
    pub denied_bins: Vec<u64>,
    /// Per time bin, per limit: denials that limit took part in.
    pub denied_by_bins: Vec<Vec<u64>>,
    /// Per key: when its requests were granted (ns from the start).
    pub grants: Vec<Vec<u64>>,
    /// `retry_after` of every denial, sorted (ns).
    pub retry_ns: Vec<u64>,
}

impl Lane {
    /// Requests allowed.
    pub fn allowed(&self) -> u64 {
        self.allowed_bins.iter().sum()
    }

    /// Requests denied.
    pub fn denied(&self) -> u64 {
        self.denied_bins.iter().sum()
    }

    /// Per limit: denials it took part in over the whole run.
    pub fn denied_by(&self) -> Vec<u64> {
        (0..self.limits.len()).map(|i| self.denied_by_bins.iter().map(|b| b[i]).sum()).collect()
    }

    /// The most requests one key was granted within any span of `span_ns`.
    pub fn max_in_span(&self, span_ns: u64) -> Burst {
        stats::max_in_span_per_key(&self.grants, span_ns)
    }

    /// The name used in reports.
    pub fn label(&self) -> &'static str {
        self.algo.name()
    }
}

/// The outcome of a simulation.
#[derive(Clone, Debug)]
pub struct SimReport {
    /// The configuration that ran.
    pub config: SimConfig,
    /// The traffic that was offered.
    pub workload: Workload,
    /// Whether the arrival pattern was picked by default.
    pub arrival_defaulted: bool,
    /// Width of one time bin (ns).
    pub bin_ns: u64,
    /// Requests offered per bin.
    pub offered_bins: Vec<u64>,
    /// One lane per algorithm.
    pub lanes: Vec<Lane>,
    /// Wall-clock time the run took.
    pub wall: Duration,
}

/// A limiter over byte keys on a shared, dynamically chosen clock. Every lane
/// is a `Limiter`, even with one limit: its decisions are those of the plain
/// `TokenBucket` / `FixedWindow` / `SlidingWindow`, and it names who denied.
type SimLimiter = Limiter<[u8], Arc<dyn Clock>>;

/// Runs a simulation. Errors are usage errors, with a message for the user.
pub fn run(config: SimConfig) -> Result<SimReport, String> {
    if !(config.seconds.is_finite() && config.seconds > 0.0 && config.seconds <= MAX_SECONDS) {
        return Err(format!("--seconds must be above 0 and at most {MAX_SECONDS} (a year), got {}", config.seconds));
    }
    if !(config.rps.is_finite() && config.rps > 0.0) {
        return Err(format!("--rps must be a positive number, got {}", config.rps));
    }
    limits::check_bursts(&config.specs, &config.algos, &config.bursts)?;
    let plans =
        config.algos.iter().map(|&a| limits::plan(&config.specs, a, &config.bursts)).collect::<Result<Vec<_>, _>>()?;

    let duration_ns = ((config.seconds * 1e9).round() as u64).max(1);
    let arrival_defaulted = config.arrival.is_none();
    let arrival = config.arrival.unwrap_or(if config.algos.len() > 1 { Arrival::Bursty } else { Arrival::Uniform });
    let boundary_ns = plans[0].iter().map(|l| l.rate.period_nanos()).min().unwrap_or(1_000_000_000);
    let workload =
        Workload { rps: config.rps, duration_ns, keys: config.keys.max(1), arrival, seed: config.seed, boundary_ns };
    let expected = workload.expected_requests();
    if expected > MAX_REQUESTS {
        // The count in words a user can check against the flags: past 64
        // bits it would read as the saturated 18,446,744,073,709,551,615.
        let shown = if expected == u64::MAX {
            format!("about {:e}", config.rps * config.seconds)
        } else {
            format::count(expected)
        };
        return Err(format!(
            "--rps {} × --seconds {} is {shown} requests; a simulation offers at most {}",
            config.rps,
            config.seconds,
            format::count(MAX_REQUESTS)
        ));
    }
    let requests = workload.generate();
    if requests.is_empty() {
        return Err(match arrival {
            Arrival::Bursty => format!(
                "bursty traffic fires around every other window boundary, and the first is at {}: \
                 use a longer --seconds or another --arrival",
                format::nanos(boundary_ns)
            ),
            _ => format!("--rps {} for {}s offers no request: raise --rps or --seconds", config.rps, config.seconds),
        });
    }

    let manual = ManualClock::new();
    let clock: Arc<dyn Clock> =
        if config.realtime { Arc::new(MonotonicClock::new()) } else { Arc::new(manual.clone()) };
    let limiters = plans
        .iter()
        .map(|limits| {
            let builder = limits.iter().fold(Limiter::builder(), |b, l| b.limit(l.name.clone(), l.rule));
            builder.clock(Arc::clone(&clock)).build().map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<SimLimiter>, _>>()?;

    let keys: Vec<Vec<u8>> = (0..workload.keys).map(|k| format!("key-{k}").into_bytes()).collect();
    let remote = match (&config.redis, &config.postgres) {
        (Some(_), Some(_)) => return Err("--redis and --postgres: pick one backend".to_owned()),
        (Some(_), None) | (None, Some(_)) if config.realtime => {
            let flag = if config.redis.is_some() { "--redis" } else { "--postgres" };
            return Err(format!("{flag} runs at simulated times: drop --realtime"));
        }
        (Some(url), None) => Some(Remote::Redis(redis_lanes(url, &plans)?)),
        (None, Some(url)) => Some(Remote::Postgres(postgres_lanes(url, &plans)?)),
        (None, None) => None,
    };
    // Misuse (a cost above a limit) is an error before any traffic flows.
    for limiter in &limiters {
        let _checked =
            limiter.peek_at(&keys[0][..], config.cost, 0).map_err(|e| format!("--cost {}: {e}", config.cost))?;
    }

    let bin_ns = bin_width(duration_ns);
    let nbins = duration_ns.div_ceil(bin_ns) as usize;
    let mut offered_bins = vec![0u64; nbins];
    let mut lanes: Vec<Lane> = plans
        .into_iter()
        .zip(&config.algos)
        .map(|(limits, &algo)| Lane {
            algo,
            allowed_bins: vec![0; nbins],
            denied_bins: vec![0; nbins],
            denied_by_bins: vec![vec![0; limits.len()]; nbins],
            grants: vec![Vec::new(); keys.len()],
            retry_ns: Vec::new(),
            limits,
        })
        .collect();

    let wall = Instant::now();
    let origin = clock.now();
    for req in &requests {
        let now = if config.realtime {
            let target = origin + req.at_ns;
            let current = clock.now();
            if target > current {
                std::thread::sleep(Duration::from_nanos(target - current));
            }
            clock.now()
        } else {
            manual.set_nanos(req.at_ns);
            clock.now()
        };
        let t = now - origin;
        let bin = ((t / bin_ns) as usize).min(nbins - 1);
        offered_bins[bin] += 1;
        let key = &keys[req.key as usize][..];
        for (i, (lane, limiter)) in lanes.iter_mut().zip(&limiters).enumerate() {
            if let Some(remote) = &remote {
                remote.allow_at(i, key, config.cost, now, lane, bin, t, req.key)?;
            } else {
                let d = limiter.allow_at(key, config.cost, now).map_err(|e| e.to_string())?;
                lane.record(bin, t, req.key, d.decision, d.entries().map(|e| e.decision.allowed));
            }
        }
    }
    if let Some(remote) = &remote {
        // Leave nothing behind on the user's server.
        remote.reset(&keys)?;
    }
    for lane in &mut lanes {
        lane.retry_ns.sort_unstable();
    }
    Ok(SimReport { config, workload, arrival_defaulted, bin_ns, offered_bins, lanes, wall: wall.elapsed() })
}

impl Lane {
    /// Counts one decision in its time bin.
    fn record(&mut self, bin: usize, t: u64, key: u32, d: ratomic::Decision, allowed: impl Iterator<Item = bool>) {
        if d.allowed {
            self.allowed_bins[bin] += 1;
            self.grants[key as usize].push(t);
        } else {
            self.denied_bins[bin] += 1;
            self.retry_ns.push(d.retry_after_nanos());
            for (i, ok) in allowed.enumerate() {
                if !ok {
                    self.denied_by_bins[bin][i] += 1;
                }
            }
        }
    }
}

/// One-second rows for runs up to a minute; wider rows for longer runs,
/// narrower for runs shorter than a second.
fn bin_width(duration_ns: u64) -> u64 {
    const S: u64 = 1_000_000_000;
    if duration_ns < S {
        return S / 10;
    }
    if duration_ns <= 60 * S {
        return S;
    }
    [2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 21_600, 43_200, 86_400]
        .into_iter()
        .map(|s| s * S)
        .find(|&w| duration_ns.div_ceil(w) <= 60)
        .unwrap_or_else(|| duration_ns.div_ceil(60))
}
