//! How closely the sliding-window counter (docs/CONTRACT.md §4.3) follows an exact
//! sliding log, on random and bursty traffic.
//!
//! Two measures, on the same request streams:
//!
//! - **Same history**: at every request, the counter's formula is applied to
//!   the history the exact log admitted, and the two decisions compared: the
//!   error of the approximation itself. A *false admit* is a request the
//!   counter would allow and the log denies; a *false deny* the reverse.
//! - **End to end**: the counter (ratomic's `SlidingWindow`) and the log each
//!   decide the stream with their own state; how many each admits in all,
//!   and the most the counter admitted in any one-window span (the log never
//!   exceeds the limit).
//!
//! `cargo run --release -p ratomic-benches --bin sliding_accuracy`

use std::collections::VecDeque;
use std::time::Duration;

use ratomic::{ManualClock, Rate, SlidingWindow};

/// An exact sliding log: admits a request iff fewer than `limit` requests
/// were admitted in the last `window` ns.
struct Log {
    limit: usize,
    window: u64,
    admitted: VecDeque<u64>,
}

impl Log {
    fn allow(&mut self, t: u64) -> bool {
        while self.admitted.front().is_some_and(|&a| a + self.window <= t) {
            self.admitted.pop_front();
        }
        let ok = self.admitted.len() < self.limit;
        if ok {
            self.admitted.push_back(t);
        }
        ok
    }
}

/// xorshift64*: deterministic runs.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Exponential gap with the given mean.
    fn exp(&mut self, mean: f64) -> u64 {
        (-(1.0 - self.unit()).ln() * mean) as u64
    }
}

struct Outcome {
    requests: u64,
    log_admits: u64,
    false_admits: u64,
    false_denies: u64,
    counter_admits: u64,
    counter_peak: usize,
}

fn run(limit: u64, window: Duration, arrivals: &[u64]) -> Outcome {
    let w = window.as_nanos() as u64;
    let mut o =
        Outcome { requests: 0, log_admits: 0, false_admits: 0, false_denies: 0, counter_admits: 0, counter_peak: 0 };

    // Same history: the counter's estimate computed from the log's admits.
    let mut log = Log { limit: limit as usize, window: w, admitted: VecDeque::new() };
    let mut per_window: std::collections::HashMap<u64, u64> = Default::default();
    for &t in arrivals {
        let (k, x) = (t / w, t % w);
        let prev = per_window.get(&(k.wrapping_sub(1))).copied().unwrap_or(0);
        let cur = per_window.get(&k).copied().unwrap_or(0);
        let approx = u128::from(prev) * u128::from(w - x) + u128::from(cur + 1) * u128::from(w)
            <= u128::from(limit) * u128::from(w);
        let exact = log.allow(t);
        if exact {
            *per_window.entry(k).or_default() += 1;
        }
        o.requests += 1;
        o.log_admits += u64::from(exact);
        o.false_admits += u64::from(approx && !exact);
        o.false_denies += u64::from(!approx && exact);
    }

    // End to end: ratomic's SlidingWindow on its own.
    let clock = ManualClock::new();
    let counter =
        SlidingWindow::builder(Rate::new(limit, window).unwrap()).unwrap().clock(clock.clone()).build().unwrap();
    let mut recent: VecDeque<u64> = VecDeque::new();
    for &t in arrivals {
        clock.set_nanos(t);
        if counter.allow("k").unwrap().allowed {
            o.counter_admits += 1;
            recent.push_back(t);
            while recent.front().is_some_and(|&a| a + w <= t) {
                recent.pop_front();
            }
            o.counter_peak = o.counter_peak.max(recent.len());
        }
    }
    o
}

/// A traffic pattern: arrival times (ns) drawn from the generator.
type Pattern = Box<dyn Fn(&mut Rng) -> Vec<u64>>;

fn main() {
    let window = Duration::from_secs(1);
    let w = window.as_nanos() as f64;
    let limit = 100u64;
    let horizon = 2_000u64 * window.as_nanos() as u64; // 2000 windows
    println!("# sliding-window counter vs exact sliding log, limit {limit} per {window:?}, 2000 windows\n");
    println!("| traffic | requests | same history: false admits | false denies | end to end: log admits | counter admits | counter's most in one window |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let patterns: Vec<(&str, Pattern)> = vec![
        ("Poisson, 0.8× limit", Box::new(move |r| poisson(r, 0.8 * limit as f64 / w, horizon))),
        ("Poisson, 1.0× limit", Box::new(move |r| poisson(r, 1.0 * limit as f64 / w, horizon))),
        ("Poisson, 1.5× limit", Box::new(move |r| poisson(r, 1.5 * limit as f64 / w, horizon))),
        ("Poisson, 3× limit", Box::new(move |r| poisson(r, 3.0 * limit as f64 / w, horizon))),
        ("bursts: 150 in 50 ms, every ~1.3 s", Box::new(move |r| bursty(r, 150, 0.05 * w, 1.3 * w, horizon))),
        ("bursts: 60 in 10 ms, every ~0.4 s", Box::new(move |r| bursty(r, 60, 0.01 * w, 0.4 * w, horizon))),
    ];
    for (name, gen) in patterns {
        let mut rng = Rng(0x5EED_1234_ABCD_0001);
        let arrivals = gen(&mut rng);
        let o = run(limit, window, &arrivals);
        let pct = |n: u64| 100.0 * n as f64 / o.requests as f64;
        println!(
            "| {name} | {} | {} ({:.3}%) | {} ({:.3}%) | {} | {} ({:+.2}%) | {} |",
            o.requests,
            o.false_admits,
            pct(o.false_admits),
            o.false_denies,
            pct(o.false_denies),
            o.log_admits,
            o.counter_admits,
            100.0 * (o.counter_admits as f64 - o.log_admits as f64) / o.log_admits as f64,
            o.counter_peak,
        );
    }
}

/// Poisson arrivals at `rate` per ns until `horizon`.
fn poisson(r: &mut Rng, rate: f64, horizon: u64) -> Vec<u64> {
    let mut t = 0u64;
    let mut out = Vec::new();
    loop {
        t += r.exp(1.0 / rate).max(1);
        if t >= horizon {
            return out;
        }
        out.push(t);
    }
}

/// Bursts of `n` requests spread uniformly over `spread` ns, burst starts
/// separated by exponential gaps of mean `gap` ns.
fn bursty(r: &mut Rng, n: usize, spread: f64, gap: f64, horizon: u64) -> Vec<u64> {
    let mut start = 0u64;
    let mut out = Vec::new();
    loop {
        start += r.exp(gap).max(1);
        if start >= horizon {
            out.sort_unstable();
            return out;
        }
        out.extend((0..n).map(|_| start + (r.unit() * spread) as u64));
    }
}
