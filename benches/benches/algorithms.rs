//! The algorithms side by side (issue 3): `TokenBucket`, `FixedWindow`,
//! `SlidingWindow` and a two-limit `Limiter` (token bucket + fixed window),
//! on one hot key and on 100k keys; and `allow_many` of 64 pairs against 64
//! single calls.
//!
//! All calls use the explicit-time form (`allow_at`) with `now` moving 10 µs
//! per call (a simulated 100k calls a second), so the figures are the
//! algorithms and the store, not a clock, and the windows roll over as they
//! would in service. The limits are set so that every call is allowed (the
//! full path: read, decide, CAS write):
//! token bucket 200k/s with bursts of 1000; windows 200,000 per second.
//! Keys are `u64` (`.keys::<u64>()`), all present before timing starts.
//! The batch groups use a quota that never denies (burst 2^32 − 1) on a clock
//! stopped at 0, so `allow_many` (which reads the clock) and the explicit
//! forms decide the same way.
//!
//! `cargo bench -p ratomic-benches --bench algorithms`

use std::hint::black_box;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use ratomic::{FixedWindow, Limiter, ManualClock, Quota, Rate, Rule, SlidingWindow, TokenBucket};
use ratomic_benches::{ratomic_huge, u64_keys, Cycle};

/// Simulated time between two calls.
const STEP_NS: u64 = 10_000;

fn quota() -> Quota {
    Quota::new(1000, 200_000.0).unwrap()
}
fn rate() -> Rate {
    Rate::new(200_000, Duration::from_secs(1)).unwrap()
}

/// Times `call(key, now)` over `keys` in order, `now` moving `STEP_NS` a call,
/// after putting every key in at time 0 and checking the path is the allowed one.
fn bench_one(g: &mut BenchmarkGroup<'_, WallTime>, name: &str, keys: &[u64], call: impl Fn(&u64, u64) -> bool) {
    keys.iter().for_each(|k| assert!(call(k, 0)));
    let mut now = 0;
    let mut cycle = Cycle::new(keys, 0);
    for _ in 0..200_000 {
        now += STEP_NS;
        assert!(call(cycle.next_key(), now), "{name} denied: the bench must time the allow path");
    }
    g.bench_function(name, |b| {
        b.iter(|| {
            now += STEP_NS;
            black_box(call(cycle.next_key(), now))
        })
    });
}

fn per_algorithm(c: &mut Criterion) {
    for (label, n) in [("hot", 1), ("keys100k", 100_000)] {
        let keys = u64_keys(n, 11);
        let mut g = c.benchmark_group(format!("alg/{label}"));
        let tb = TokenBucket::builder(quota()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
        bench_one(&mut g, "token-bucket", &keys, |k, now| tb.allow_at(k, 1, now).unwrap().allowed);
        drop(tb);
        let fw = FixedWindow::builder(rate()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
        bench_one(&mut g, "fixed-window", &keys, |k, now| fw.allow_at(k, 1, now).unwrap().allowed);
        drop(fw);
        let sw = SlidingWindow::builder(rate()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
        bench_one(&mut g, "sliding-window", &keys, |k, now| sw.allow_at(k, 1, now).unwrap().allowed);
        drop(sw);
        let lim = Limiter::builder()
            .limit("burst", Rule::token_bucket(quota()))
            .limit("window", Rule::fixed_window(rate()).unwrap())
            .keys::<u64>()
            .clock(ManualClock::new())
            .build()
            .unwrap();
        bench_one(&mut g, "limiter-tb+fw", &keys, |k, now| lim.allow_at(k, 1, now).unwrap().allowed());
        g.finish();
    }
}

fn batches(c: &mut Criterion) {
    const BATCH: usize = 64;
    for (label, n) in [("hot", 1), ("keys100k", 100_000)] {
        // A hot-key batch is 64 pairs on the same key.
        let keys: Vec<u64> = if n == 1 { vec![u64_keys(1, 11)[0]; BATCH] } else { u64_keys(n, 12) };
        // A quota that never denies, on a clock stopped at 0: all three forms
        // decide at the same time and take the allow path.
        let tb = TokenBucket::builder(ratomic_huge()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
        keys.iter().for_each(|k| assert!(tb.allow_at(k, 1, 0).unwrap().allowed));
        let chunks = keys.len() / BATCH;
        let mut g = c.benchmark_group(format!("batch64/{label}"));
        let (now, mut i) = (0u64, 0usize);
        g.bench_function("64 x allow_at", |b| {
            b.iter(|| {
                i = (i + 1) % chunks;
                for k in &keys[i * BATCH..(i + 1) * BATCH] {
                    black_box(tb.allow_at(k, 1, now).unwrap().allowed);
                }
            })
        });
        let mut out = Vec::with_capacity(BATCH);
        g.bench_function("allow_many_at (buffer reused)", |b| {
            b.iter(|| {
                i = (i + 1) % chunks;
                out.clear();
                tb.allow_many_at(keys[i * BATCH..(i + 1) * BATCH].iter().map(|k| (k, 1)), now, &mut out).unwrap();
                black_box(&out);
            })
        });
        g.bench_function("allow_many (new Vec, clock read)", |b| {
            b.iter(|| {
                i = (i + 1) % chunks;
                black_box(tb.allow_many(keys[i * BATCH..(i + 1) * BATCH].iter().map(|k| (k, 1))))
            })
        });
        g.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = per_algorithm, batches
}
criterion_main!(benches);
