//! `ratomic bench`: in-process throughput of the engine on the real clock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use ratomic::{Keyed, Limiter, MonotonicClock, Options, Rule};

use crate::format;
use crate::limits::{self, Algo, Limit, LimitSpec};
use crate::rng::SplitMix64;

/// Calls between two looks at the stop flag: enough to make the check free.
const BATCH: u64 = 256;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// The limits (several make a multi-limit `Limiter`).
    pub specs: Vec<LimitSpec>,
    /// The algorithms to measure, one after the other.
    pub algos: Vec<Algo>,
    /// `--burst` values.
    pub bursts: Vec<u64>,
    /// Worker threads.
    pub threads: usize,
    /// Distinct keys, picked uniformly at random by each call.
    pub keys: u64,
    /// Seconds per algorithm.
    pub seconds: f64,
    /// Show a progress bar (on stderr).
    pub progress: bool,
    /// Measure limiters on this Redis server instead of in memory.
    pub redis: Option<String>,
    /// Measure limiters on this PostgreSQL database instead of in memory.
    pub postgres: Option<String>,
    /// Requests per call: 1 is `allow`, more is `allow_many` (one pipeline on Redis).
    pub batch: usize,
    /// Whether the Redis or PostgreSQL limiter leases tokens (see
    /// `ratomic::backend::Lease`, which both re-export).
    pub lease: ratomic_redis::Lease,
}

/// One algorithm's measurement.
#[derive(Clone, Debug)]
pub struct BenchResult {
    /// The algorithm the limits default to.
    pub algo: Algo,
    /// Its limits.
    pub limits: Vec<Limit>,
    /// Calls made by each thread.
    pub per_thread: Vec<u64>,
    /// Calls allowed (all threads).
    pub allowed: u64,
    /// Calls denied (all threads).
    pub denied: u64,
    /// How long the threads ran.
    pub elapsed: Duration,
}

impl BenchResult {
    /// Calls made (all threads).
    pub fn ops(&self) -> u64 {
        self.per_thread.iter().sum()
    }

    /// Calls per second, all threads together.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops() as f64 / self.elapsed.as_secs_f64()
    }

    /// Calls per second, per thread (mean).
    pub fn ops_per_sec_per_thread(&self) -> f64 {
        self.ops_per_sec() / self.per_thread.len() as f64
    }
}

/// Runs the benchmark; errors are usage errors.
pub fn run(config: &BenchConfig) -> Result<Vec<BenchResult>, String> {
    if !(config.seconds.is_finite() && config.seconds > 0.0 && config.seconds <= 3_600.0) {
        return Err(format!("--seconds must be a number above 0 and at most 3600, got {}", config.seconds));
    }
    limits::check_bursts(&config.specs, &config.algos, &config.bursts)?;
    let plans =
        config.algos.iter().map(|&a| limits::plan(&config.specs, a, &config.bursts)).collect::<Result<Vec<_>, _>>()?;
    if !(1..=10_000).contains(&config.batch) {
        return Err(format!("--batch must be between 1 and 10000, got {}", config.batch));
    }
    let duration = Duration::from_secs_f64(config.seconds);
    plans
        .into_iter()
        .zip(&config.algos)
        .enumerate()
        .map(|(lane, (limits, &algo))| {
            if let Some(url) = &config.redis {
                let remote = RedisDecide::connect(url, lane, &limits, config.lease)?;
                let (per_thread, allowed, denied, elapsed) = measure(config, duration, algo, &remote);
                return Ok(BenchResult { algo, limits, per_thread, allowed, denied, elapsed });
            }
            if let Some(url) = &config.postgres {
                let remote = PostgresDecide::connect(url, lane, &limits, config.threads, config.lease)?;
                let (per_thread, allowed, denied, elapsed) = measure(config, duration, algo, &remote);
                remote.clean_up();
                return Ok(BenchResult { algo, limits, per_thread, allowed, denied, elapsed });
            }
            let (per_thread, allowed, denied, elapsed) = match &limits[..] {
                [one] => match one.rule {
                    Rule::TokenBucket(a) => measure(config, duration, algo, &keyed(a)?),
                    Rule::FixedWindow(a) => measure(config, duration, algo, &keyed(a)?),
                    Rule::SlidingWindow(a) => measure(config, duration, algo, &keyed(a)?),
                    _ => measure(config, duration, algo, &multi(&limits)?),
                },
                _ => measure(config, duration, algo, &multi(&limits)?),
            };
            Ok(BenchResult { algo, limits, per_thread, allowed, denied, elapsed })
        })
        .collect()
}

/// The one-algorithm keyed limiter a user with one limit would pick.
fn keyed<A: ratomic::Algorithm>(alg: A) -> Result<Keyed<A, u64, MonotonicClock>, String> {
    Keyed::with_algorithm(alg, MonotonicClock::new(), Options::default()).map_err(|e| e.to_string())
}

fn multi(limits: &[Limit]) -> Result<Limiter<u64>, String> {
    limits
        .iter()
        .fold(Limiter::builder(), |b, l| b.limit(l.name.clone(), l.rule))
        .keys::<u64>()
        .build()
        .map_err(|e| e.to_string())
}

/// Something the benchmark can call: one decision for a `u64` key.
trait Decide: Sync {
    fn decide(&self, key: u64) -> bool;

    /// Decisions for several keys; how many were allowed.
    fn decide_many(&self, keys: &[u64]) -> u64 {
        keys.iter().map(|&k| u64::from(self.decide(k))).sum()
    }
}

/// A limiter on Redis, shared by the threads (their calls are pipelined on
/// one connection). Its deny cache is off, so every call is a round trip.
struct RedisDecide(ratomic_redis::BlockingRedisLimiter);

impl RedisDecide {
    fn connect(url: &str, lane: usize, limits: &[Limit], lease: ratomic_redis::Lease) -> Result<Self, String> {
        let run = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let rules = ratomic_redis::Limits::new(limits.iter().map(|l| (l.name.clone(), l.rule)))
            .and_then(|l| l.with_prefix(format!("ratomic-bench:{}:{run}:{lane}:", std::process::id())))
            .map_err(|e| format!("--redis: {e}"))?;
        let options = ratomic_redis::Options {
            timeout: Duration::from_secs(5),
            deny_cache: 0,
            lease,
            ..ratomic_redis::Options::default()
        };
        ratomic_redis::BlockingRedisLimiter::connect(url, rules, options)
            .map(RedisDecide)
            .map_err(|e| format!("--redis {url}: {e}"))
    }
}

impl Decide for RedisDecide {
    fn decide(&self, key: u64) -> bool {
        matches!(self.0.allow_n(key.to_le_bytes(), 1), Ok(d) if d.allowed())
    }

    fn decide_many(&self, keys: &[u64]) -> u64 {
        let requests: Vec<([u8; 8], u64)> = keys.iter().map(|k| (k.to_le_bytes(), 1)).collect();
        match self.0.allow_many(&requests) {
            Ok(ds) => ds.iter().filter(|d| d.allowed()).count() as u64,
            Err(_) => 0,
        }
    }
}

/// A limiter on PostgreSQL, shared by the threads (one connection per
/// thread, up to 16). Its deny cache is off, so every call is a round trip.
struct PostgresDecide(ratomic_postgres::BlockingPostgresLimiter);

impl PostgresDecide {
    fn connect(
        conninfo: &str,
        lane: usize,
        limits: &[Limit],
        threads: usize,
        lease: ratomic_postgres::Lease,
    ) -> Result<Self, String> {
        let run = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let rules = ratomic_postgres::Limits::new(limits.iter().map(|l| (l.name.clone(), l.rule)))
            .and_then(|l| l.with_prefix(format!("ratomic-bench:{}:{run}:{lane}", std::process::id())))
            .map_err(|e| format!("--postgres: {e}"))?;
        let options = ratomic_postgres::Options {
            timeout: Duration::from_secs(5),
            deny_cache: 0,
            connections: threads.clamp(1, 16),
            lease,
            ..ratomic_postgres::Options::default()
        };
        ratomic_postgres::BlockingPostgresLimiter::connect(conninfo, rules, options)
            .map(PostgresDecide)
            .map_err(|e| format!("--postgres: cannot connect: {e}"))
    }

    /// Removes the run's rows (all of them: far in the future, every key
    /// is full again).
    fn clean_up(&self) {
        let _ = self.0.give_back();
        let _ = self.0.gc_at(ratomic::MAX_TIME);
    }
}

impl Decide for PostgresDecide {
    fn decide(&self, key: u64) -> bool {
        matches!(self.0.allow_n(key.to_le_bytes(), 1), Ok(d) if d.allowed())
    }

    fn decide_many(&self, keys: &[u64]) -> u64 {
        let requests: Vec<([u8; 8], u64)> = keys.iter().map(|k| (k.to_le_bytes(), 1)).collect();
        match self.0.allow_many(&requests) {
            Ok(ds) => ds.iter().filter(|d| d.allowed()).count() as u64,
            Err(_) => 0,
        }
    }
}

impl<A: ratomic::Algorithm + Sync> Decide for Keyed<A, u64, MonotonicClock> {
    #[inline]
    fn decide(&self, key: u64) -> bool {
        self.allow(&key).allowed
    }
}

impl Decide for Limiter<u64> {
    #[inline]
    fn decide(&self, key: u64) -> bool {
        self.allow(&key).allowed()
    }
}

fn measure(
    config: &BenchConfig,
    duration: Duration,
    algo: Algo,
    limiter: &dyn Decide,
) -> (Vec<u64>, u64, u64, Duration) {
    let threads = config.threads.max(1);
    let stop = AtomicBool::new(false);
    let start_line = Barrier::new(threads + 1);
    let bar = progress_bar(config.progress, duration, algo);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, start_line) = (&stop, &start_line);
                s.spawn(move || {
                    let mut rng = SplitMix64::new(0x5EED ^ t as u64);
                    let (mut calls, mut allowed) = (0u64, 0u64);
                    // Round trips are slow: look at the stop flag after each on Redis.
                    let rounds = if config.redis.is_some() || config.postgres.is_some() { 1 } else { BATCH };
                    let mut keys = vec![0u64; config.batch];
                    start_line.wait();
                    // At least one round before looking at the flag: a thread
                    // the machine did not run before the stop (a stall of a
                    // loaded machine can outlast a short run) still measures.
                    loop {
                        for _ in 0..rounds {
                            if config.batch == 1 {
                                allowed += u64::from(limiter.decide(rng.below(config.keys)));
                            } else {
                                keys.iter_mut().for_each(|k| *k = rng.below(config.keys));
                                allowed += limiter.decide_many(&keys);
                            }
                        }
                        calls += rounds * config.batch as u64;
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    (calls, allowed)
                })
            })
            .collect();
        start_line.wait();
        let started = Instant::now();
        loop {
            let elapsed = started.elapsed();
            if elapsed >= duration {
                break;
            }
            bar.set_position(elapsed.as_millis() as u64);
            std::thread::sleep((duration - elapsed).min(Duration::from_millis(50)));
        }
        stop.store(true, Ordering::Relaxed);
        let results: Vec<(u64, u64)> =
            workers.into_iter().map(|w| w.join().expect("a bench thread panicked")).collect();
        let elapsed = started.elapsed();
        bar.finish_and_clear();
        let allowed = results.iter().map(|r| r.1).sum::<u64>();
        let calls: Vec<u64> = results.iter().map(|r| r.0).collect();
        let denied = calls.iter().sum::<u64>() - allowed;
        (calls, allowed, denied, elapsed)
    })
}

fn progress_bar(visible: bool, duration: Duration, algo: Algo) -> ProgressBar {
    let target = if visible { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
    let bar = ProgressBar::with_draw_target(Some(duration.as_millis() as u64), target);
    if let Ok(style) = ProgressStyle::with_template("  {prefix:<15} [{bar:40}] {percent:>3}%") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(algo.name());
    bar
}

/// The report as text.
pub fn render(config: &BenchConfig, results: &[BenchResult]) -> String {
    let mut out = String::from("ratomic bench\n");
    for r in results {
        for (i, l) in r.limits.iter().enumerate() {
            let head = if i > 0 {
                ""
            } else if results.len() > 1 {
                r.algo.name()
            } else {
                "limit"
            };
            out.push_str(&format!("  {head:<15} {}\n", l.describe()));
        }
    }
    out.push_str(&format!(
        "  {:<15} {} thread{}, {} key{} (u64, one picked at random per call), {} per algorithm, real clock\n\n",
        "load",
        config.threads,
        if config.threads == 1 { "" } else { "s" },
        format::count(config.keys),
        if config.keys == 1 { "" } else { "s" },
        format::nanos(Duration::from_secs_f64(config.seconds).as_nanos() as u64),
    ));
    if let Some(url) = &config.redis {
        let how = if config.batch == 1 {
            "one round trip per call".to_owned()
        } else {
            format!("allow_many of {} per pipeline", config.batch)
        };
        let how = match config.lease {
            ratomic_redis::Lease::Off => how,
            ratomic_redis::Lease::Max(n) => format!("{how} (leases of up to {n} tokens)"),
            _ => format!("{how} (leases, auto)"),
        };
        out.push_str(&format!(
            "  {:<15} Redis at {url}: {how}, server time, deny cache off

",
            "backend"
        ));
    } else if config.postgres.is_some() {
        // No connection string here: it may carry a password.
        let how = if config.batch == 1 {
            "one statement per call".to_owned()
        } else {
            format!("allow_many of {} per statement", config.batch)
        };
        let how = match config.lease {
            ratomic_postgres::Lease::Off => how,
            ratomic_postgres::Lease::Max(n) => format!("{how} (leases of up to {n} tokens)"),
            _ => format!("{how} (leases, auto)"),
        };
        out.push_str(&format!(
            "  {:<15} PostgreSQL: {how}, server time, deny cache off, {} connection{}\n\n",
            "backend",
            config.threads.clamp(1, 16),
            if config.threads == 1 { "" } else { "s" }
        ));
    } else if config.batch > 1 {
        out.push_str(&format!(
            "  {:<15} allow_many of {} per call

",
            "batch", config.batch
        ));
    }
    out.push_str(&format!(
        "  {:<15} {:>12} {:>18} {:>11} {:>14} {:>14}\n",
        "algorithm", "ops/s total", "ops/s per thread", "ns per op", "allowed", "denied"
    ));
    for r in results {
        let per_thread = r.ops_per_sec_per_thread();
        out.push_str(&format!(
            "  {:<15} {:>12} {:>18} {:>11} {:>14} {:>14}\n",
            r.algo.name(),
            format::ops(r.ops_per_sec()).trim_end(),
            format::ops(per_thread).trim_end(),
            format!("{:.0} ns", 1e9 / per_thread),
            format::count(r.allowed),
            format::count(r.denied),
        ));
    }
    out.push_str(&format!(
        "\n  {} calls in all. Each thread's time per call includes picking a random key (a few ns).\n",
        format::count(results.iter().map(BenchResult::ops).sum())
    ));
    out
}
