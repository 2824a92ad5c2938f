//! Memory per live key, swept over the number of keys: the growth of the
//! process's resident set (`/proc/self/statm`) while a limiter takes in `n`
//! distinct keys, divided by `n`. ratomic and governor (keyed, its default
//! DashMap store) with `u64` keys at 100k, 200k, … 1M keys (both grow their
//! tables in steps, so one size alone says little), and with 16-byte string
//! keys at 1M.
//!
//! Each case runs in a fresh child process (this same binary, re-run with the
//! case's name and key count) so that memory freed by one case cannot be
//! reused by the next. The key arrays are made before the first measurement,
//! so they are not counted; keys a limiter copies into its own store are.
//!
//! `cargo run --release -p ratomic-benches --bin memory`

use std::process::Command;

use governor::RateLimiter;
use ratomic::{ManualClock, TokenBucket};
use ratomic_benches::{governor_huge, ratomic_huge, str_keys, u64_keys};

const CASES: [&str; 4] = ["ratomic-u64", "ratomic-str16", "governor-u64", "governor-str16"];

/// Resident set size in bytes.
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm (Linux only)");
    let pages: usize = statm.split_whitespace().nth(1).and_then(|f| f.parse().ok()).expect("statm's second field");
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    pages * page
}

/// Runs one case with `n` keys in this process; prints `case bytes_per_key extra`.
fn run(case: &str, n: usize) {
    let u = if case.ends_with("u64") { u64_keys(n, 31) } else { Vec::new() };
    let s = if case.ends_with("str16") { str_keys(n, 32) } else { Vec::new() };
    let before = rss();
    let extra = match case {
        "ratomic-u64" => {
            // A stopped clock keeps every key "not full", so all stay live.
            let l = TokenBucket::builder(ratomic_huge()).keys::<u64>().clock(ManualClock::new()).build().unwrap();
            u.iter().for_each(|k| assert!(l.allow(k).allowed));
            assert_eq!(l.len(), n);
            let after = rss();
            report(case, n, before, after, format!("memory_bytes() = {:.1} B/key", l.memory_bytes() as f64 / n as f64));
            return;
        }
        "ratomic-str16" => {
            let l = TokenBucket::builder(ratomic_huge()).clock(ManualClock::new()).build().unwrap();
            s.iter().for_each(|k| assert!(l.allow(k.as_str()).unwrap().allowed));
            assert_eq!(l.len(), n);
            let after = rss();
            report(case, n, before, after, format!("memory_bytes() = {:.1} B/key", l.memory_bytes() as f64 / n as f64));
            return;
        }
        "governor-u64" => {
            let l = RateLimiter::keyed(governor_huge());
            u.iter().for_each(|k| assert!(l.check_key(k).is_ok()));
            assert_eq!(l.len(), n);
            (rss(), String::from("DashMap<u64, InMemoryState>"))
        }
        "governor-str16" => {
            let l = RateLimiter::keyed(governor_huge());
            s.iter().for_each(|k| assert!(l.check_key(k).is_ok()));
            assert_eq!(l.len(), n);
            (rss(), String::from("DashMap<String, InMemoryState>; each key a heap String"))
        }
        other => panic!("unknown case {other:?}; cases: {CASES:?}"),
    };
    report(case, n, before, extra.0, extra.1);
}

fn report(case: &str, n: usize, before: usize, after: usize, note: String) {
    println!("{case}\t{:.1}\t{note}", after.saturating_sub(before) as f64 / n as f64);
}

/// Runs `case` with `n` keys in a fresh child process: (bytes per key, note).
fn child(exe: &std::path::Path, case: &str, n: usize) -> (String, String) {
    let out = Command::new(exe).arg(case).arg(n.to_string()).output().expect("run a case in a child process");
    assert!(out.status.success(), "{case} failed: {}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8_lossy(&out.stdout);
    let mut f = line.trim().splitn(3, '\t');
    let _name = f.next();
    (f.next().unwrap_or("?").to_string(), f.next().unwrap_or("").to_string())
}

fn main() {
    let mut args = std::env::args().skip(1);
    if let Some(case) = args.next() {
        let n = args.next().map_or(1_000_000, |n| n.parse().expect("a key count"));
        run(&case, n);
        return;
    }
    let exe = std::env::current_exe().expect("path of this binary");
    println!("| `u64` keys | ratomic B/key (RSS delta) | governor B/key | ratio | ratomic `memory_bytes()` |");
    println!("|---:|---:|---:|---:|---|");
    for n in (1..=10).map(|k| k * 100_000) {
        let (r, note) = child(&exe, "ratomic-u64", n);
        let (g, _) = child(&exe, "governor-u64", n);
        let ratio = match (r.parse::<f64>(), g.parse::<f64>()) {
            (Ok(r), Ok(g)) if g > 0.0 => format!("{:.2}", r / g),
            _ => "?".into(),
        };
        println!("| {n} | {r} | {g} | {ratio} | {note} |");
    }
    println!();
    println!("| case (1,000,000 live keys) | bytes per key (RSS delta) | note |");
    println!("|---|---:|---|");
    for case in ["ratomic-str16", "governor-str16"] {
        let (b, note) = child(&exe, case, 1_000_000);
        println!("| {case} | {b} | {note} |");
    }
}
