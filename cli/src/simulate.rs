//! `ratomic simulate`: push a workload through the engine and report what
//! it granted, second by second and in summary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ratomic::{Clock, Limiter, ManualClock, MonotonicClock};

use crate::format;
use crate::limits::{self, Algo, Limit, LimitSpec};
use crate::stats::{self, Burst};
use crate::workload::{Arrival, Workload};

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

/// One Redis limiter per lane, each under a prefix of its own. The
/// simulated clock runs far faster than the server's, so keys are kept an
/// hour at least (see `Limits::with_ttl_floor`) and reset after the run.
fn redis_lanes(url: &str, plans: &[Vec<Limit>]) -> Result<Vec<ratomic_redis::BlockingRedisLimiter>, String> {
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
enum Remote {
    Redis(Vec<ratomic_redis::BlockingRedisLimiter>),
    Postgres(Vec<ratomic_postgres::BlockingPostgresLimiter>),
}

impl Remote {
    /// Lane `i`'s decision at `now`, recorded in its lane.
    #[allow(clippy::too_many_arguments)]
    fn allow_at(
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
    fn reset(&self, keys: &[Vec<u8>]) -> Result<(), String> {
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
fn postgres_lanes(
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

impl SimReport {
    /// Requests offered.
    pub fn offered(&self) -> u64 {
        self.offered_bins.iter().sum()
    }

    /// Length of the run in seconds.
    pub fn seconds(&self) -> f64 {
        self.workload.duration_ns as f64 / 1e9
    }

    /// The spans the "largest burst" figures are measured over: one emission
    /// interval of the tightest limit, one second, and each limit's period.
    pub fn burst_spans(&self) -> Vec<u64> {
        let limits = &self.lanes[0].limits;
        let mut spans: Vec<u64> = limits.iter().map(|l| l.emission_interval_ns()).min().into_iter().collect();
        spans.push(1_000_000_000);
        spans.extend(limits.iter().map(|l| l.rate.period_nanos()));
        spans.retain(|&s| s <= self.workload.duration_ns.max(1_000_000_000));
        spans.sort_unstable();
        spans.dedup();
        spans
    }

    /// The report as text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_header(&mut out);
        out.push('\n');
        if self.lanes.len() == 1 {
            self.render_bins_single(&mut out);
            out.push('\n');
            self.render_summary_single(&mut out);
        } else {
            self.render_bins_compare(&mut out);
            out.push('\n');
            if self.render_zoom(&mut out) {
                out.push('\n');
            }
            self.render_summary_compare(&mut out);
        }
        out
    }

    fn render_header(&self, out: &mut String) {
        let c = &self.config;
        let w = &self.workload;
        if self.lanes.len() == 1 {
            out.push_str("ratomic simulate\n");
            let limits = &self.lanes[0].limits;
            for (i, l) in limits.iter().enumerate() {
                out.push_str(&format!("  {:<9} {}\n", if i == 0 { "limit" } else { "" }, l.describe()));
            }
            if limits.len() > 1 {
                out.push_str(&format!("  {:<9} all or nothing: a request passes only if every limit allows it\n", ""));
            }
        } else {
            out.push_str("ratomic simulate: the same traffic through each algorithm, side by side\n");
            for lane in &self.lanes {
                for (i, l) in lane.limits.iter().enumerate() {
                    out.push_str(&format!("  {:<15} {}\n", if i == 0 { lane.label() } else { "" }, l.describe()));
                }
            }
        }
        let pad = if self.lanes.len() == 1 { 9 } else { 15 };
        let arrival = match w.arrival {
            Arrival::Uniform => "uniform".to_string(),
            Arrival::Poisson => format!("poisson (seed {})", w.seed),
            Arrival::Bursty => format!(
                "bursty: {} requests straddling every other {} window boundary, quiet between",
                format::count((c.rps * 2.0 * w.boundary_ns as f64 / 1e9).round().max(2.0) as u64),
                format::nanos(w.boundary_ns)
            ),
        };
        let defaulted =
            if self.arrival_defaulted && self.lanes.len() > 1 { " (the default when comparing)" } else { "" };
        out.push_str(&format!(
            "  {:<pad$} {} requests/s for {}, {arrival}{defaulted}\n",
            "traffic",
            fmt_num(c.rps),
            format::nanos(w.duration_ns)
        ));
        let keys = if w.keys == 1 {
            "1 key".to_string()
        } else {
            format!("{} keys (each limited on its own)", format::count(w.keys.into()))
        };
        out.push_str(&format!("  {:<pad$} {keys}, cost {} per request\n", "", c.cost));
        let clock = if c.realtime {
            format!("real (monotonic clock, paced in real time: took {})", format::duration(self.wall))
        } else if let Some(url) = &c.redis {
            format!(
                "simulated (manual clock, decided on Redis at {url}: took {} of real time)",
                format::duration(self.wall)
            )
        } else if c.postgres.is_some() {
            format!(
                "simulated (manual clock, decided on PostgreSQL: took {} of real time)",
                format::duration(self.wall)
            )
        } else {
            format!("simulated (manual clock: took {} of real time)", format::duration(self.wall))
        };
        out.push_str(&format!("  {:<pad$} {clock}\n", "clock"));
    }

    fn bin_label(&self, i: usize) -> String {
        let start = i as u64 * self.bin_ns;
        if self.bin_ns.is_multiple_of(1_000_000_000) {
            format!("{}s", start / 1_000_000_000)
        } else {
            format!("{:.1}s", start as f64 / 1e9)
        }
    }

    fn render_bins_single(&self, out: &mut String) {
        const WIDTH: u64 = 40;
        let lane = &self.lanes[0];
        let multi = lane.limits.len() > 1;
        let max = self.offered_bins.iter().copied().max().unwrap_or(1).max(1);
        let label_w = (0..self.offered_bins.len()).map(|i| self.bin_label(i).len()).max().unwrap_or(2).max(4);
        let mut head = format!("  {:>label_w$}  offered  allowed  denied", "from");
        let by_w: Vec<usize> = lane.limits.iter().map(|l| l.name.len().max(4) + 3).collect();
        if multi {
            for (l, w) in lane.limits.iter().zip(&by_w) {
                head.push_str(&format!("  {:>w$}", format!("by {}", l.name)));
            }
        }
        head.push_str(&format!("   {} allowed {} denied", '█', '░'));
        out.push_str(&head);
        out.push('\n');
        for i in 0..self.offered_bins.len() {
            let (a, d) = (lane.allowed_bins[i], lane.denied_bins[i]);
            let mut row = format!("  {:>label_w$}  {:>7}  {:>7}  {:>6}", self.bin_label(i), self.offered_bins[i], a, d);
            if multi {
                for (n, w) in lane.denied_by_bins[i].iter().zip(&by_w) {
                    row.push_str(&format!("  {n:>w$}"));
                }
            }
            row.push_str("   ");
            row.push_str(&bar(a, max, WIDTH, '█'));
            row.push_str(&bar(d, max, WIDTH, '░'));
            out.push_str(row.trim_end());
            out.push('\n');
        }
    }

    fn render_summary_single(&self, out: &mut String) {
        let lane = &self.lanes[0];
        let c = &self.config;
        let secs = self.seconds();
        let offered = self.offered();
        let (allowed, denied) = (lane.allowed(), lane.denied());
        let keys = u64::from(self.workload.keys);
        let line = |out: &mut String, label: &str, figure: String, rest: String| {
            out.push_str(format!("  {label:<14} {figure:>7} {rest}").trim_end());
            out.push('\n');
        };
        out.push_str("summary\n");
        line(out, "offered", format::count(offered), format!("requests  {}", format::per_sec(offered as f64 / secs)));
        let per_key = if keys > 1 { " per key" } else { "" };
        let granted = format::per_sec((allowed * c.cost) as f64 / secs / keys as f64);
        let tokens = if c.cost > 1 { format!(" ({} tokens)", format::count(allowed * c.cost)) } else { String::new() };
        line(
            out,
            "allowed",
            format::count(allowed),
            format!("requests{tokens}  {granted}{per_key} vs {}", configured(&lane.limits)),
        );
        if let [l] = &lane.limits[..] {
            if l.algo == Algo::TokenBucket {
                // GCRA grants at most B + floor((d − 1)/T) tokens in [0, d): the
                // burst at once, then one per emission interval, counted from t = 0.
                let bound = l.capacity() + self.workload.duration_ns.saturating_sub(1) / l.emission_interval_ns();
                line(
                    out,
                    "",
                    String::new(),
                    format!(
                        "          = the burst of {} up front + one token every {}: at most {}{per_key} in {}",
                        l.capacity(),
                        format::nanos(l.emission_interval_ns()),
                        format::count(bound),
                        format::nanos(self.workload.duration_ns)
                    ),
                );
            }
        }
        let pct = if offered > 0 { denied as f64 * 100.0 / offered as f64 } else { 0.0 };
        line(out, "denied", format::count(denied), format!("requests  {pct:.0}% of offered"));
        if lane.limits.len() > 1 {
            let by: Vec<String> = lane
                .limits
                .iter()
                .zip(lane.denied_by())
                .map(|(l, n)| format!("{} {}", l.name, format::count(n)))
                .collect();
            line(
                out,
                "denied by",
                String::new(),
                format!("{}  (one denial can count for several limits)", by.join(" · ")),
            );
        }
        line(out, "retry_after", String::new(), retry_line(&lane.retry_ns));
        for (i, &span) in self.burst_spans().iter().enumerate() {
            let b = lane.max_in_span(span);
            let label = if i == 0 { "largest burst" } else { "" };
            line(
                out,
                label,
                format::count(b.count),
                format!("within {:<6} {}", format::nanos(span), self.span_note(lane, span, b)),
            );
        }
    }

    /// What a "largest burst" figure means for a single limit.
    fn span_note(&self, lane: &Lane, span: u64, b: Burst) -> String {
        let [l] = &lane.limits[..] else {
            return String::new();
        };
        let mut notes = Vec::new();
        if span == l.emission_interval_ns() {
            notes.push("one emission interval".to_string());
        }
        if span == l.rate.period_nanos() {
            notes.push(format!("limit {} per {}", l.rate.count(), format::nanos(span)));
        }
        if l.algo == Algo::TokenBucket && b.count > 0 {
            let refills = (span - 1) / l.emission_interval_ns();
            notes.push(if refills == 0 {
                format!("a token bucket's bound: the burst, {}", l.capacity())
            } else {
                format!(
                    "a token bucket's bound: burst {} + {refills} refill{} = {}",
                    l.capacity(),
                    if refills == 1 { "" } else { "s" },
                    l.capacity() + refills
                )
            });
        }
        if notes.is_empty() {
            String::new()
        } else {
            format!("({})", notes.join("; "))
        }
    }

    fn render_bins_compare(&self, out: &mut String) {
        const WIDTH: u64 = 20;
        let max = self.lanes.iter().flat_map(|l| l.allowed_bins.iter().copied()).max().unwrap_or(1).max(1);
        let label_w = (0..self.offered_bins.len()).map(|i| self.bin_label(i).len()).max().unwrap_or(2).max(4);
        let col = WIDTH as usize + 7;
        let mut head = format!("  {:>label_w$}  offered", "from");
        for lane in &self.lanes {
            head.push_str(&format!("  {:<col$}", format!("{} allowed", lane.label())));
        }
        out.push_str(head.trim_end());
        out.push('\n');
        for i in 0..self.offered_bins.len() {
            let mut row = format!("  {:>label_w$}  {:>7}", self.bin_label(i), self.offered_bins[i]);
            for lane in &self.lanes {
                let a = lane.allowed_bins[i];
                row.push_str(&format!("  {a:>5} {:<w$}", bar(a, max, WIDTH, '█'), w = WIDTH as usize));
            }
            out.push_str(row.trim_end());
            out.push('\n');
        }
    }

    /// The fixed window's largest burst, if it went over the limit: the
    /// window length, the limit, the burst, and the boundary it straddles.
    fn fixed_window_overshoot(&self) -> Option<(u64, u64, Burst, u64)> {
        let fixed = self.lanes.iter().find(|l| l.algo == Algo::FixedWindow)?;
        let limit =
            fixed.limits.iter().filter(|l| l.algo == Algo::FixedWindow).min_by_key(|l| l.rate.period_nanos())?;
        let window = limit.rate.period_nanos();
        let b = fixed.max_in_span(window);
        (b.count > limit.rate.count()).then(|| (window, limit.rate.count(), b, (b.last_ns / window) * window))
    }

    /// A close-up of the fixed window's double burst: grants around the
    /// boundary in fiftieths of a window. Returns whether it printed anything.
    fn render_zoom(&self, out: &mut String) -> bool {
        const WIDTH: u64 = 20;
        let Some((window, _, _, boundary)) = self.fixed_window_overshoot() else { return false };
        let step = (window / 50).max(1);
        let start = boundary.saturating_sub(5 * step);
        let rows: Vec<(u64, Vec<u64>)> = (0..10)
            .map(|i| {
                let lo = start + i * step;
                let counts = self
                    .lanes
                    .iter()
                    .map(|l| {
                        l.grants.iter().map(|g| g.iter().filter(|&&t| t >= lo && t < lo + step).count() as u64).sum()
                    })
                    .collect();
                (lo, counts)
            })
            .collect();
        let max = rows.iter().flat_map(|(_, c)| c.iter().copied()).max().unwrap_or(1).max(1);
        out.push_str(&format!(
            "close-up: requests allowed around the window boundary at {}, {} per row\n",
            format::instant(boundary),
            format::nanos(step)
        ));
        let col = WIDTH as usize + 7;
        let mut head = format!("  {:>8}", "from");
        for lane in &self.lanes {
            head.push_str(&format!("  {:<col$}", lane.label()));
        }
        out.push_str(head.trim_end());
        out.push('\n');
        for (lo, counts) in rows {
            if lo == boundary {
                out.push_str(&format!(
                    "  {:>8}  {}\n",
                    "",
                    "╌".repeat((col + 2) * self.lanes.len() - 2) + " window boundary"
                ));
            }
            let mut row = format!("  {:>8}", format::instant(lo));
            for n in counts {
                row.push_str(&format!("  {n:>5} {:<w$}", bar(n, max, WIDTH, '█'), w = WIDTH as usize));
            }
            out.push_str(row.trim_end());
            out.push('\n');
        }
        true
    }

    fn render_summary_compare(&self, out: &mut String) {
        let secs = self.seconds();
        let keys = u64::from(self.workload.keys);
        let cost = self.config.cost;
        let col = self.lanes.iter().map(|l| l.label().len()).max().unwrap_or(12) + 2;
        let spans = self.burst_spans();
        let first = &self.lanes[0].limits;
        out.push_str(&format!(
            "summary: {} requests offered ({}), {}\n",
            format::count(self.offered()),
            format::per_sec(self.offered() as f64 / secs),
            configured(first)
        ));
        let mut head = format!("  {:<22}", "");
        for lane in &self.lanes {
            head.push_str(&format!("{:>col$}", lane.label()));
        }
        out.push_str(&head);
        out.push('\n');
        let row = |out: &mut String, name: &str, cells: Vec<String>, note: &str| {
            let mut r = format!("  {name:<22}");
            for c in cells {
                r.push_str(&format!("{c:>col$}"));
            }
            if !note.is_empty() {
                r.push_str("   ");
                r.push_str(note);
            }
            out.push_str(&r);
            out.push('\n');
        };
        row(out, "allowed", self.lanes.iter().map(|l| format::count(l.allowed())).collect(), "");
        let per_key = if keys > 1 { " per key" } else { "" };
        row(
            out,
            &format!("granted rate{per_key}"),
            self.lanes.iter().map(|l| format::per_sec((l.allowed() * cost) as f64 / secs / keys as f64)).collect(),
            "",
        );
        row(out, "denied", self.lanes.iter().map(|l| format::count(l.denied())).collect(), "");
        for &span in &spans {
            let note = first
                .iter()
                .find(|l| l.rate.period_nanos() == span)
                .map(|l| format!("limit {} per {}", l.rate.count(), format::nanos(span)))
                .unwrap_or_default();
            row(
                out,
                &format!("max within any {}", format::nanos(span)),
                self.lanes.iter().map(|l| format::count(l.max_in_span(span).count)).collect(),
                &note,
            );
        }
        for (name, p) in [("retry_after p50", 50.0), ("retry_after p99", 99.0)] {
            row(
                out,
                name,
                self.lanes
                    .iter()
                    .map(|l| stats::percentile(&l.retry_ns, p).map_or("-".into(), format::nanos))
                    .collect(),
                "",
            );
        }
        out.push('\n');
        self.render_boundary_verdict(out);
    }

    /// Says in words whether the fixed window's double burst showed up.
    fn render_boundary_verdict(&self, out: &mut String) {
        let Some(fixed) = self.lanes.iter().find(|l| l.algo == Algo::FixedWindow) else { return };
        let Some(limit) =
            fixed.limits.iter().filter(|l| l.algo == Algo::FixedWindow).min_by_key(|l| l.rate.period_nanos())
        else {
            return;
        };
        let window = limit.rate.period_nanos();
        let others: Vec<String> = self
            .lanes
            .iter()
            .filter(|l| l.algo != Algo::FixedWindow)
            .map(|l| format!("{} at most {}", l.label(), l.max_in_span(window).count))
            .collect();
        let others = if others.is_empty() {
            String::new()
        } else {
            format!("\n  In any {} span: {}.", format::nanos(window), others.join(", "))
        };
        match self.fixed_window_overshoot() {
            Some((window, count, b, boundary)) => out.push_str(&format!(
                "  fixed-window granted {} requests to one key between {} and {} ({}), across the\n  \
                 window boundary at {}: {:.1}× its limit of {} per {}.{others}\n",
                b.count,
                format::instant(b.first_ns),
                format::instant(b.last_ns),
                format::nanos(b.last_ns - b.first_ns),
                format::instant(boundary),
                b.count as f64 / count as f64,
                count,
                format::nanos(window),
            )),
            None => out.push_str(&format!(
                "  fixed-window never exceeded {} per {} here: this traffic did not crowd a window boundary\n  \
                 (try --arrival bursty).{others}\n",
                limit.rate.count(),
                format::nanos(window)
            )),
        }
    }
}

/// "configured 10/s", or for several limits each and the tightest.
fn configured(limits: &[Limit]) -> String {
    match limits {
        [l] if l.rate.period_nanos() == 1_000_000_000 => format!("{} configured", l.rate),
        [l] => format!("{} configured (= {})", l.rate, format::per_sec(l.rate.per_sec())),
        _ => {
            let tight = limits.iter().min_by(|a, b| a.rate.per_sec().total_cmp(&b.rate.per_sec())).expect("limits");
            let sustained = if tight.rate.period_nanos() == 1_000_000_000 {
                tight.rate.to_string()
            } else {
                format!("{} = {}", tight.rate, format::per_sec(tight.rate.per_sec()))
            };
            format!(
                "{} configured (sustained at most {sustained}, by {})",
                limits.iter().map(|l| l.name.as_str()).collect::<Vec<_>>().join(" + "),
                tight.name
            )
        }
    }
}

fn retry_line(sorted: &[u64]) -> String {
    match (stats::percentile(sorted, 50.0), stats::percentile(sorted, 99.0)) {
        (Some(p50), Some(p99)) => format!(
            "p50 {} · p99 {} · max {}  (how long a denied request had to wait; {} denials)",
            format::nanos(p50),
            format::nanos(p99),
            format::nanos(*sorted.last().expect("non-empty")),
            format::count(sorted.len() as u64)
        ),
        _ => "no denials".into(),
    }
}

/// A bar of `n` out of `max`, `width` cells at most; anything above zero shows at least one cell.
fn bar(n: u64, max: u64, width: u64, cell: char) -> String {
    let cells = if n == 0 { 0 } else { ((n * width + max / 2) / max).max(1) };
    cell.to_string().repeat(cells as usize)
}

fn fmt_num(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(rates: &[&str], algos: &[Algo]) -> SimConfig {
        SimConfig {
            specs: rates.iter().map(|r| r.parse().unwrap()).collect(),
            algos: algos.to_vec(),
            bursts: vec![],
            rps: 50.0,
            seconds: 10.0,
            keys: 1,
            cost: 1,
            arrival: None,
            seed: 42,
            realtime: false,
            redis: None,
            postgres: None,
        }
    }

    #[test]
    fn default_run_grants_exactly_what_gcra_allows() {
        let r = run(config(&["10/s"], &[Algo::TokenBucket])).unwrap();
        let lane = &r.lanes[0];
        // Requests every 20 ms. The full bucket grants the first 10 (0–180 ms);
        // tokens refill from t = 0, one every 100 ms, so the two that came back
        // meanwhile pass at 200 and 220 ms, then one at 300, 400, …, 9900 ms.
        // That is GCRA's bound B + floor((d − 1)/T) = 10 + 99, met exactly.
        assert_eq!(lane.allowed(), 10 + 2 + 97);
        assert_eq!(lane.allowed() + lane.denied(), 500);
        assert_eq!(lane.allowed_bins[..3], [19, 10, 10]);
        assert_eq!(lane.max_in_span(1_000_000_000).count, 19);
        assert_eq!(lane.max_in_span(100_000_000).count, 5);
    }

    #[test]
    fn fixed_window_doubles_at_the_boundary_and_the_others_do_not() {
        let r = run(config(&["10/s"], &Algo::ALL)).unwrap();
        assert_eq!(r.workload.arrival, Arrival::Bursty);
        let by = |a| r.lanes.iter().find(|l| l.algo == a).unwrap().max_in_span(1_000_000_000).count;
        assert_eq!(by(Algo::FixedWindow), 20);
        assert!(by(Algo::TokenBucket) <= 11, "{}", by(Algo::TokenBucket));
        assert!(by(Algo::SlidingWindow) <= 11, "{}", by(Algo::SlidingWindow));
    }

    #[test]
    fn multi_limit_counts_denials_per_limit() {
        let r = run(SimConfig { seconds: 20.0, ..config(&["10/s", "fw:100/m"], &[Algo::TokenBucket]) }).unwrap();
        let lane = &r.lanes[0];
        assert_eq!(lane.allowed(), 100, "the minute's 100 run out within 20 s");
        let by = lane.denied_by();
        assert!(by[0] > 0 && by[1] > 0, "{by:?}");
    }

    #[test]
    fn cost_above_the_limit_is_refused_up_front() {
        let e = run(SimConfig { cost: 11, ..config(&["10/s"], &[Algo::TokenBucket]) }).unwrap_err();
        assert!(e.contains("cost 11 exceeds the limit 10"), "{e}");
    }

    #[test]
    fn too_many_requests_are_refused() {
        let e = run(SimConfig { rps: 1e9, ..config(&["10/s"], &[Algo::TokenBucket]) }).unwrap_err();
        assert!(e.contains("at most 10,000,000"), "{e}");
        // A burst concentrates two windows of traffic: counted up front too.
        let bursty = SimConfig {
            rps: 100.0,
            seconds: 90_000.0,
            arrival: Some(Arrival::Bursty),
            ..config(&["1/d"], &[Algo::TokenBucket])
        };
        assert!(run(bursty).unwrap_err().contains("at most 10,000,000"));
    }

    #[test]
    fn runs_longer_than_a_year_are_refused() {
        let e = run(SimConfig { seconds: 4e7, rps: 1e-3, ..config(&["10/s"], &[Algo::TokenBucket]) }).unwrap_err();
        assert!(e.contains("at most 31536000"), "{e}");
    }

    #[test]
    fn bins_are_seconds_up_to_a_minute() {
        assert_eq!(bin_width(10_000_000_000), 1_000_000_000);
        assert_eq!(bin_width(500_000_000), 100_000_000);
        assert_eq!(bin_width(600_000_000_000), 10_000_000_000);
        assert!(bin_width(u64::MAX / 2) > 0);
    }

    #[test]
    fn bars_scale_and_never_hide_a_nonzero_count() {
        assert_eq!(bar(0, 50, 40, '#'), "");
        assert_eq!(bar(50, 50, 40, '#').len(), 40);
        assert_eq!(bar(1, 1000, 40, '#').len(), 1);
    }
}
