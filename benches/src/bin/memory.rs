//! Memory per live key at 1M keys: the growth of the process's resident set
//! (`/proc/self/statm`) while a limiter takes in 1,000,000 distinct keys,
//! divided by the number of keys. ratomic and governor (keyed, its default
//! DashMap store), each with `u64` keys and with 16-byte string keys.
//!
//! Each case runs in a fresh child process (this same binary, re-run with the
//! case's name) so that memory freed by one case cannot be reused by the next.
//! The key arrays are made before the first measurement, so they are not
//! counted; keys a limiter copies into its own store are.
//!
//! `cargo run --release -p ratomic-benches --bin memory`

use std::process::Command;

use governor::RateLimiter;
use ratomic::{ManualClock, TokenBucket};
use ratomic_benches::{governor_huge, ratomic_huge, str_keys, u64_keys};

const KEYS: usize = 1_000_000;
const CASES: [&str; 4] = ["ratomic-u64", "ratomic-str16", "governor-u64", "governor-str16"];

/// Resident set size in bytes.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm (Linux only)");
    let pages: usize = statm.split_whitespace().nth(1).and_then(|f| f.parse().ok()).expect("statm's second field");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    pages * page
}

/// Runs one case in this process; prints `case bytes_per_key extra`.
fn run(case: &str) {
    let u = u64_keys(KEYS, 31);
    let s = str_keys(KEYS, 32);
    let before = rss();
    let extra = match case {
        "ratomic-u64" => {
            // A stopped clock keeps every key "not full", so all stay live.
            let l = TokenBucket::builder(ratomic_huge()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
            u.iter().for_each(|k| assert!(l.allow(k).unwrap().allowed));
            assert_eq!(l.len(), KEYS);
            let after = rss();
            report(case, before, after, format!("memory_bytes() = {:.1} B/key", l.memory_bytes() as f64 / KEYS as f64));
            return;
        }
        "ratomic-str16" => {
            let l = TokenBucket::builder(ratomic_huge()).clock(ManualClock::new()).build().unwrap();
            s.iter().for_each(|k| assert!(l.allow(k.as_str()).unwrap().allowed));
            assert_eq!(l.len(), KEYS);
            let after = rss();
            report(case, before, after, format!("memory_bytes() = {:.1} B/key", l.memory_bytes() as f64 / KEYS as f64));
            return;
        }
        "governor-u64" => {
            let l = RateLimiter::keyed(governor_huge());
            u.iter().for_each(|k| assert!(l.check_key(k).is_ok()));
            assert_eq!(l.len(), KEYS);
            (rss(), String::from("DashMap<u64, InMemoryState>"))
        }
        "governor-str16" => {
            let l = RateLimiter::keyed(governor_huge());
            s.iter().for_each(|k| assert!(l.check_key(k).is_ok()));
            assert_eq!(l.len(), KEYS);
            (rss(), String::from("DashMap<String, InMemoryState>; each key a heap String"))
        }
        other => panic!("unknown case {other:?}; cases: {CASES:?}"),
    };
    report(case, before, extra.0, extra.1);
}

fn report(case: &str, before: usize, after: usize, note: String) {
    println!("{case}\t{:.1}\t{note}", after.saturating_sub(before) as f64 / KEYS as f64);
}

fn main() {
    if let Some(case) = std::env::args().nth(1) {
        run(&case);
        return;
    }
    let exe = std::env::current_exe().expect("path of this binary");
    println!("| case ({KEYS} live keys) | bytes per key (RSS delta) | note |");
    println!("|---|---:|---|");
    for case in CASES {
        let out = Command::new(&exe).arg(case).output().expect("run a case in a child process");
        assert!(out.status.success(), "{case} failed: {}", String::from_utf8_lossy(&out.stderr));
        let line = String::from_utf8_lossy(&out.stdout);
        let mut f = line.trim().splitn(3, '\t');
        let (name, bytes, note) = (f.next().unwrap_or(case), f.next().unwrap_or("?"), f.next().unwrap_or(""));
        println!("| {name} | {bytes} | {note} |");
    }
}
