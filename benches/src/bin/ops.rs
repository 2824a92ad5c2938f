//! Runs one benchmark scenario `n` times inside a single non-inlined function,
//! `measured`, so that a profiler can count what one call costs without the
//! set-up: e.g. instructions per call with callgrind,
//!
//! ```text
//! cargo build --release -p ratomic-benches --bin ops
//! valgrind --tool=callgrind --toggle-collect='*measured*' \
//!     target/release/ops ratomic-hot-u64 1000000
//! callgrind_annotate callgrind.out.<pid>
//! ```
//!
//! Scenarios mirror `benches/vs_governor.rs` (manual clocks unless the name
//! says `default`) and `benches/algorithms.rs`. Run without arguments for the
//! list.

use std::hint::black_box;
use std::time::Duration;

use governor::clock::FakeRelativeClock;
use governor::RateLimiter;
use ratomic::{DirectTokenBucket, FixedWindow, Limiter, ManualClock, Quota, Rate, Rule, SlidingWindow, TokenBucket};
use ratomic_benches::{governor_huge, ratomic_huge, str_keys, u64_keys, Cycle};

const SCENARIOS: &[&str] = &[
    "ratomic-direct",
    "governor-direct",
    "ratomic-hot-u64",
    "governor-hot-u64",
    "ratomic-hot-u64-default",
    "governor-hot-u64-default",
    "ratomic-hot-str16",
    "governor-hot-str16",
    "ratomic-keys100k-u64",
    "governor-keys100k-u64",
    "ratomic-keys1m-str16",
    "governor-keys1m-str16",
    "ratomic-insert-u64",
    "governor-insert-u64",
    "ratomic-insert-str16",
    "governor-insert-str16",
    "alg-token-bucket",
    "alg-fixed-window",
    "alg-sliding-window",
    "alg-limiter-tb+fw",
    "ratomic-limiter2-hot-u64",
    "ratomic-limiter2-hot-u64-default",
    "ratomic-limiter3-hot-u64-default",
    "ratomic-limiter2-peek-u64-default",
    "ratomic-hot-bytes13-default",
    "ratomic-hot-bytes13-at",
    "ratomic-hot-bytes13-at-decision",
    "ratomic-hot-bytes32-at",
    "ratomic-limiter2-hot-bytes13-at",
    "ratomic-limiter2-hot-bytes13-at-decision",
    "ratomic-limiter2-peek-bytes13-at",
];

/// `rounds`' two-limit limiter (two token buckets that never deny), on the
/// default clock.
fn limiter2_u64() -> Limiter<u64> {
    Limiter::builder()
        .keys::<u64>()
        .limit("burst", Rule::token_bucket(ratomic_huge()))
        .limit("sustained", Rule::token_bucket(ratomic_huge()))
        .build()
        .unwrap()
}

/// `ffi_vs_rust.rs`'s two-limit limiter, on byte keys such as [`BYTES13`].
fn limiter2_bytes() -> Limiter<[u8]> {
    Limiter::builder()
        .keys::<[u8]>()
        .limit("a", Rule::parse("1000000000000000/second").unwrap())
        .limit("b", Rule::parse("2000000000000000/second").unwrap())
        .build()
        .unwrap()
}

/// The C bench's hot key: 13 bytes.
const BYTES13: &[u8] = b"user:00000000";
/// A 32-byte key, as API keys are: stored on the heap.
const BYTES32: &[u8] = b"sk_live_0123456789abcdef01234567";

/// The profiled loop: `n` calls of `call`.
#[inline(never)]
fn measured(n: usize, mut call: impl FnMut(usize) -> bool) -> usize {
    let mut allowed = 0;
    for i in 0..n {
        allowed += usize::from(black_box(call(i)));
    }
    allowed
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(scenario), n) = (args.next(), args.next().and_then(|n| n.parse::<usize>().ok()).unwrap_or(1_000_000))
    else {
        eprintln!("usage: ops <scenario> [n]\nscenarios: {}", SCENARIOS.join(", "));
        std::process::exit(2);
    };
    let step = 10_000u64; // algorithms: simulated 10 µs between calls
    let alg_quota = || Quota::new(1000, 200_000.0).unwrap();
    let alg_rate = || Rate::new(200_000, Duration::from_secs(1)).unwrap();
    let hot = 42u64;
    let hot_s = String::from("0123456789abcdef");
    let allowed = match scenario.as_str() {
        "ratomic-direct" => {
            let l = DirectTokenBucket::with_clock(ratomic_huge(), ManualClock::new());
            measured(n, |_| l.allow().allowed)
        }
        "governor-direct" => {
            let l = RateLimiter::direct_with_clock(governor_huge(), FakeRelativeClock::default());
            measured(n, |_| l.check().is_ok())
        }
        "ratomic-hot-u64" => {
            let l = TokenBucket::builder(ratomic_huge()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
            measured(n, |_| l.allow(&hot).allowed)
        }
        "governor-hot-u64" => {
            let l = RateLimiter::dashmap_with_clock(governor_huge(), FakeRelativeClock::default());
            measured(n, |_| l.check_key(&hot).is_ok())
        }
        "ratomic-hot-u64-default" => {
            let l = TokenBucket::builder(ratomic_huge()).keys::<u64>().build().unwrap();
            measured(n, |_| l.allow(&hot).allowed)
        }
        "governor-hot-u64-default" => {
            let l = RateLimiter::keyed(governor_huge());
            measured(n, |_| l.check_key(&hot).is_ok())
        }
        "ratomic-hot-str16" => {
            let l = TokenBucket::builder(ratomic_huge()).clock(ManualClock::new()).build().unwrap();
            measured(n, |_| l.allow(hot_s.as_str()).unwrap().allowed)
        }
        "governor-hot-str16" => {
            let l = RateLimiter::dashmap_with_clock(governor_huge(), FakeRelativeClock::default());
            measured(n, |_| l.check_key(&hot_s).is_ok())
        }
        "ratomic-keys100k-u64" => {
            let keys = u64_keys(100_000, 1);
            let l = TokenBucket::builder(ratomic_huge()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
            keys.iter().for_each(|k| assert!(l.allow(k).allowed));
            let mut c = Cycle::new(&keys, 0);
            measured(n, |_| l.allow(c.next_key()).allowed)
        }
        "governor-keys100k-u64" => {
            let keys = u64_keys(100_000, 1);
            let l = RateLimiter::dashmap_with_clock(governor_huge(), FakeRelativeClock::default());
            keys.iter().for_each(|k| assert!(l.check_key(k).is_ok()));
            let mut c = Cycle::new(&keys, 0);
            measured(n, |_| l.check_key(c.next_key()).is_ok())
        }
        "ratomic-keys1m-str16" => {
            let keys = str_keys(1_000_000, 1);
            let l = TokenBucket::builder(ratomic_huge()).clock(ManualClock::new()).build().unwrap();
            keys.iter().for_each(|k| assert!(l.allow(k.as_str()).unwrap().allowed));
            let mut c = Cycle::new(&keys, 0);
            measured(n, |_| l.allow(c.next_key().as_str()).unwrap().allowed)
        }
        "governor-keys1m-str16" => {
            let keys = str_keys(1_000_000, 1);
            let l = RateLimiter::dashmap_with_clock(governor_huge(), FakeRelativeClock::default());
            keys.iter().for_each(|k| assert!(l.check_key(k).is_ok()));
            let mut c = Cycle::new(&keys, 0);
            measured(n, |_| l.check_key(c.next_key()).is_ok())
        }
        "ratomic-insert-u64" => {
            let keys = u64_keys(n, 3);
            let l = TokenBucket::builder(ratomic_huge()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
            measured(n, |i| l.allow(&keys[i]).allowed)
        }
        "governor-insert-u64" => {
            let keys = u64_keys(n, 3);
            let l = RateLimiter::dashmap_with_clock(governor_huge(), FakeRelativeClock::default());
            measured(n, |i| l.check_key(&keys[i]).is_ok())
        }
        "ratomic-insert-str16" => {
            let keys = str_keys(n, 3);
            let l = TokenBucket::builder(ratomic_huge()).clock(ManualClock::new()).build().unwrap();
            measured(n, |i| l.allow(keys[i].as_str()).unwrap().allowed)
        }
        "governor-insert-str16" => {
            let keys = str_keys(n, 3);
            let l = RateLimiter::dashmap_with_clock(governor_huge(), FakeRelativeClock::default());
            measured(n, |i| l.check_key(&keys[i]).is_ok())
        }
        "alg-token-bucket" => {
            let l = TokenBucket::builder(alg_quota()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
            measured(n, |i| l.allow_at(&hot, 1, i as u64 * step).unwrap().allowed)
        }
        "alg-fixed-window" => {
            let l = FixedWindow::builder(alg_rate()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
            measured(n, |i| l.allow_at(&hot, 1, i as u64 * step).unwrap().allowed)
        }
        "alg-sliding-window" => {
            let l = SlidingWindow::builder(alg_rate()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
            measured(n, |i| l.allow_at(&hot, 1, i as u64 * step).unwrap().allowed)
        }
        "alg-limiter-tb+fw" => {
            let l = Limiter::builder()
                .limit("burst", Rule::token_bucket(alg_quota()))
                .limit("window", Rule::fixed_window(alg_rate()).unwrap())
                .keys::<u64>()
                .clock(ManualClock::new())
                .build()
                .unwrap();
            measured(n, |i| l.allow_at(&hot, 1, i as u64 * step).unwrap().allowed())
        }
        "ratomic-limiter2-hot-u64" => {
            // `rounds`' limiter2-hot on a manual clock: compare with ratomic-hot-u64.
            let l = Limiter::builder()
                .keys::<u64>()
                .limit("burst", Rule::token_bucket(ratomic_huge()))
                .limit("sustained", Rule::token_bucket(ratomic_huge()))
                .clock(ManualClock::new())
                .build()
                .unwrap();
            measured(n, |_| l.allow(&hot).allowed())
        }
        "ratomic-limiter2-hot-u64-default" => {
            // `rounds`' limiter2-hot as it runs (the default clock): compare
            // with ratomic-hot-u64-default.
            let l = limiter2_u64();
            measured(n, |_| l.allow(&hot).allowed())
        }
        "ratomic-limiter2-peek-u64-default" => {
            let l = limiter2_u64();
            let _ = l.allow(&hot); // stored: a peek on an absent key answers from its shard
            measured(n, |_| l.peek(&hot).allowed())
        }
        "ratomic-limiter3-hot-u64-default" => {
            // Three limits (a call kept out of line since the two-limit
            // call's answers stopped going through the store's loop).
            let l = Limiter::builder()
                .keys::<u64>()
                .limit("second", Rule::token_bucket(ratomic_huge()))
                .limit("minute", Rule::token_bucket(ratomic_huge()))
                .limit("hour", Rule::token_bucket(ratomic_huge()))
                .build()
                .unwrap();
            measured(n, |_| l.allow(&hot).allowed())
        }
        "ratomic-hot-bytes13-at-decision" => {
            // As `ffi_vs_rust.rs`'s Rust side keeps it: the decision
            // copied out whole.
            let l = TokenBucket::new(Quota::new(1_000_000_000_000_000, 1e9).unwrap());
            measured(n, |_| black_box(l.allow_at(black_box(BYTES13), 1, 1000).unwrap()).allowed)
        }
        "ratomic-hot-bytes32-at" => {
            // A key too long to store inline (an API key): the slot keeps
            // the block's address and the probe compares the block's bytes.
            let l = TokenBucket::new(Quota::new(1_000_000_000_000_000, 1e9).unwrap());
            measured(n, |_| l.allow_at(black_box(BYTES32), 1, 1000).unwrap().allowed)
        }
        "ratomic-hot-bytes13-default" | "ratomic-hot-bytes13-at" => {
            // The Rust side of `ffi-c/benches/ffi_vs_rust.rs`'s hot key (a
            // 13-byte key, the library's clock or one fixed time): compare
            // with a C program's `ratomic_allow` / `ratomic_allow_at` loop.
            let l = TokenBucket::new(Quota::new(1_000_000_000_000_000, 1e9).unwrap());
            if scenario.ends_with("-at") {
                measured(n, |_| l.allow_at(black_box(BYTES13), 1, 1000).unwrap().allowed)
            } else {
                measured(n, |_| l.allow_n(black_box(BYTES13), 1).unwrap().allowed)
            }
        }
        "ratomic-limiter2-hot-bytes13-at-decision" => {
            // As `ffi_vs_rust.rs`'s Rust side keeps it: the combined
            // decision copied out whole.
            let l = limiter2_bytes();
            measured(n, |_| black_box(l.allow_at(black_box(BYTES13), 1, 1000).unwrap().decision).allowed)
        }
        "ratomic-limiter2-peek-bytes13-at" => {
            let l = limiter2_bytes();
            let _ = l.allow_at(BYTES13, 1, 1000); // stored: a peek on an absent key answers from its shard
            measured(n, |_| l.peek_at(black_box(BYTES13), 1, 1000).unwrap().allowed())
        }
        "ratomic-limiter2-hot-bytes13-at" => {
            // The Rust side of `ffi_vs_rust.rs`'s two-limit hot key at one time.
            let l = limiter2_bytes();
            measured(n, |_| l.allow_at(black_box(BYTES13), 1, 1000).unwrap().allowed())
        }
        other => {
            eprintln!("unknown scenario {other:?}\nscenarios: {}", SCENARIOS.join(", "));
            std::process::exit(2);
        }
    };
    println!("{scenario}: {allowed} of {n} calls allowed");
}
