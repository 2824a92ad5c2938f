//! A process of the server tests' lease races (built only with the
//! `server-tests` feature):
//!
//! `lease_worker URL PREFIX MODE THREADS CALLS BURST PER_SEC`
//!
//! calls `allow` on key "hot" CALLS times from each of THREADS threads, on a
//! token bucket of BURST refilling PER_SEC a second, leases on. MODE
//! `caller` stamps every call with `CLOCK_MONOTONIC` (one timeline for
//! every process of the host: the grants can be checked exactly); `server`
//! calls at the server's time. Prints a line `G <µs>` per grant as it is
//! made (the stamp in `caller` mode, 0 otherwise; flushed, so a process
//! killed mid-run leaves its grants behind), then `S <answered from a
//! lease> <round trips>`. Gives its leases back at the end.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ratomic::{Clock, MonotonicClock, Quota, Rule};
use ratomic_redis::{BlockingRedisLimiter, Lease, Limits, Options, Source};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, prefix, mode, threads, calls, burst, per_sec] = &args[..] else {
        eprintln!("usage: lease_worker URL PREFIX caller|server THREADS CALLS BURST PER_SEC");
        std::process::exit(2);
    };
    let n = |s: &str| s.parse::<u64>().expect("a number");
    let caller = mode == "caller";
    let rule = Rule::token_bucket(Quota::new(n(burst), n(per_sec) as f64).expect("a valid quota"));
    let limits = Limits::single(rule).and_then(|l| l.with_prefix(prefix.as_str())).expect("valid limits");
    let options = Options { timeout: Duration::from_secs(5), lease: Lease::Auto, ..Options::default() };
    let limiter = BlockingRedisLimiter::connect(url, limits, options).expect("connected");
    let clock = MonotonicClock::new();
    let (local, trips) = (AtomicU64::new(0), AtomicU64::new(0));
    let out = Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        for _ in 0..n(threads) {
            s.spawn(|| {
                for _ in 0..n(calls) {
                    let (d, stamp) = if caller {
                        let now = clock.now();
                        (limiter.allow_at("hot", 1, now).expect("a decision"), now / 1000)
                    } else {
                        (limiter.allow_n("hot", 1).expect("a decision"), 0)
                    };
                    match d.source {
                        Source::Lease => local.fetch_add(1, Ordering::Relaxed),
                        _ => trips.fetch_add(1, Ordering::Relaxed),
                    };
                    if d.allowed() {
                        let mut out = out.lock().unwrap();
                        writeln!(out, "G {stamp}").unwrap();
                        out.flush().unwrap();
                    }
                }
            });
        }
    });
    limiter.give_back().expect("leases given back");
    println!("S {} {}", local.load(Ordering::Relaxed), trips.load(Ordering::Relaxed));
}
