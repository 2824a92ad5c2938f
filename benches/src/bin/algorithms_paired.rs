//! The issue-3 ratios (each window and a two-limit `Limiter` against a
//! `TokenBucket`) measured interleaved, so both sides of a ratio see the same
//! machine: each round runs a chunk of calls on the token bucket, then the
//! same number on the other algorithm, and the figure is the median over all
//! rounds of the per-round ratio. A preemption spoils one round, and the
//! median drops it; criterion's group-by-group timing (`benches/algorithms.rs`)
//! cannot do that on a shared machine, where a neighbour's load moves between
//! one function's samples and the next.
//!
//! Same set-up as `benches/algorithms.rs`: `u64` keys, explicit time moving
//! 10 µs a call, every call allowed (token bucket 200k/s burst 1000; windows
//! 200,000 a second; the `Limiter` is that token bucket plus that fixed window).
//!
//! `cargo run --release -p ratomic-benches --bin algorithms_paired [seconds per pair]`

use std::hint::black_box;
use std::time::{Duration, Instant};

use ratomic::{FixedWindow, Limiter, ManualClock, Quota, Rate, Rule, SlidingWindow, TokenBucket};
use ratomic_benches::{u64_keys, Cycle};

const STEP_NS: u64 = 10_000;
const CHUNK: usize = 512;

fn quota() -> Quota {
    Quota::new(1000, 200_000.0).expect("valid quota")
}

fn rate() -> Rate {
    Rate::new(200_000, Duration::from_secs(1)).expect("valid rate")
}

/// One call under test: `(key, now) -> allowed`.
type Call<'a> = Box<dyn Fn(&u64, u64) -> bool + 'a>;

/// One side of a pair: its own keys cursor and simulated time.
struct Side<'a> {
    cycle: Cycle<'a, u64>,
    now: u64,
    call: Call<'a>,
}

impl<'a> Side<'a> {
    fn new(keys: &'a [u64], call: impl Fn(&u64, u64) -> bool + 'a) -> Self {
        keys.iter().for_each(|k| assert!(call(k, 0), "the set-up must be allowed"));
        Side { cycle: Cycle::new(keys, 0), now: 0, call: Box::new(call) }
    }

    /// Nanoseconds per call over one chunk.
    fn chunk(&mut self) -> f64 {
        let start = Instant::now();
        for _ in 0..CHUNK {
            self.now += STEP_NS;
            let allowed = (self.call)(self.cycle.next_key(), self.now);
            assert!(black_box(allowed), "the bench must time the allow path");
        }
        start.elapsed().as_nanos() as f64 / CHUNK as f64
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// (median ns of the base, median ns of the other, median of per-round other ÷ base, rounds)
fn pair(base: &mut Side<'_>, other: &mut Side<'_>, budget: Duration) -> (f64, f64, f64, usize) {
    for _ in 0..200 {
        base.chunk();
        other.chunk();
    }
    let (mut b, mut o, mut r) = (Vec::new(), Vec::new(), Vec::new());
    let start = Instant::now();
    while start.elapsed() < budget {
        let tb = base.chunk();
        let alg = other.chunk();
        b.push(tb);
        o.push(alg);
        r.push(alg / tb);
    }
    let rounds = r.len();
    (median(b), median(o), median(r), rounds)
}

fn main() {
    let seconds: f64 = std::env::args().nth(1).map_or(3.0, |s| s.parse().expect("seconds per pair, a number"));
    let budget = Duration::from_secs_f64(seconds);
    println!("# issue-3 ratios, interleaved chunks of {CHUNK} calls, {seconds} s per pair\n");
    println!("| keys | algorithm | TokenBucket ns (median) | algorithm ns (median) | ÷ TokenBucket (median of rounds) | target | rounds |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (label, n) in [("one hot key", 1), ("100k keys", 100_000)] {
        let keys = u64_keys(n, 11);
        let tb = TokenBucket::builder(quota()).keys::<u64>().clock(ManualClock::new()).build().expect("limiter");
        let fw = FixedWindow::builder(rate()).keys::<u64>().clock(ManualClock::new()).build().expect("limiter");
        let sw = SlidingWindow::builder(rate()).keys::<u64>().clock(ManualClock::new()).build().expect("limiter");
        let li = Limiter::builder()
            .keys::<u64>()
            .limit("burst", Rule::token_bucket(quota()))
            .limit("window", Rule::fixed_window(rate()).expect("rule"))
            .clock(ManualClock::new())
            .build()
            .expect("limiter");
        let others: [(&str, f64, Call<'_>); 3] = [
            ("FixedWindow", 1.2, Box::new(|k, now| fw.allow_at(k, 1, now).expect("valid call").allowed)),
            ("SlidingWindow", 1.2, Box::new(|k, now| sw.allow_at(k, 1, now).expect("valid call").allowed)),
            ("Limiter (TB + FW)", 1.6, Box::new(|k, now| li.allow_at(k, 1, now).expect("valid call").allowed())),
        ];
        let mut base = Side::new(&keys, |k, now| tb.allow_at(k, 1, now).expect("valid call").allowed);
        for (name, target, call) in others {
            let mut other = Side::new(&keys, call);
            let (b, o, r, rounds) = pair(&mut base, &mut other, budget);
            let verdict = if r <= target { "met" } else { "**not met**" };
            println!("| {label} | {name} | {b:.1} | {o:.1} | {r:.2} | ≤ {target} ({verdict}) | {rounds} |");
        }
    }
}
