//! Churn of long keys through a full store: every call brings a new
//! 40-byte key (stored out of line, in a heap block) to a limiter whose
//! `max_keys` (10,000) it has long since reached, so every call also evicts
//! a key and retires its block, and shards rebuild every few hundred keys.
//! The path an attacker rotating long keys drives; what it costs depends
//! on how the store frees memory (the epoch, `core/src/store/epoch.rs`), so this
//! is the bench to run when that changes. Prints ns per call.
//!
//! ```sh
//! cargo run --release -p ratomic-benches --bin churn [CALLS] [THREADS]   # defaults 2000000 1
//! ```

use std::fmt::Write;
use std::time::Instant;

use ratomic::{ManualClock, Options, Quota, TokenBucket};

fn main() {
    let mut args = std::env::args().skip(1);
    let calls: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(2_000_000);
    let threads: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(1).max(1);
    let limiter = TokenBucket::builder(Quota::new(10, 1.0).expect("quota"))
        .clock(ManualClock::new())
        .options(Options::default().max_keys(10_000))
        .build()
        .expect("limiter");
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let limiter = &limiter;
            s.spawn(move || {
                let mut key = String::with_capacity(48);
                for i in 0..calls / threads {
                    key.clear();
                    write!(key, "api-key-{t:02}-{i:029}").expect("a String takes any write");
                    assert_eq!(key.len(), 40);
                    assert!(limiter.allow(key.as_str()).expect("a 40-byte key").allowed, "a new key has its burst");
                }
            });
        }
    });
    let ns = start.elapsed().as_nanos() as f64 / calls as f64;
    assert!(limiter.len() <= 10_000, "max_keys holds");
    println!("{ns:.1} ns a call, {threads} thread(s), {calls} new 40-byte keys through max_keys 10,000");
}
