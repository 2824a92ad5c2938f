//! The shared-memory store (`Options::shared_file`) against the same limiter
//! in process, from 1, 2 and 4 processes at once, in interleaved rounds.
//!
//! Each round starts `P` worker processes (this binary again) for one side:
//! every worker builds its own limiter — in process, or on one file shared
//! by all `P` — inserts the scenario's keys, waits until every worker is
//! ready, then makes the same number of calls and reports its ns per call.
//! A round's figure is the workers' mean; sides alternate (in process
//! first in even rounds, shared first in odd ones), and the table gives
//! each side's median over the rounds and the median, minimum and maximum
//! of the per-round ratios (shared ÷ in process; lower is better).
//!
//! Scenarios (token bucket of 1,000,000,000/s: never denies):
//! - `hot`: one 16-byte key, every worker on it (the shared side's workers
//!   contend on one state word, as in-process threads of one limiter would;
//!   the in-process side's workers each have their own).
//! - `keys100k`: 100,000 16-byte keys present, visited in random order.
//! - `limiter2`: a two-limit `Limiter`, 100,000 keys.
//!
//! Then the file's size per key at `max_keys` = 1,000,000 (one limit), and
//! the bytes actually allocated once 1,000,000 keys are in it.
//!
//! ```sh
//! cargo run --release -p ratomic-benches --bin shared [ROUNDS] [--dir DIR] [--max-keys N]
//! ```
//!
//! Both sides are built with `max_keys` = N (default 2^18 = 262,144). The
//! in-process store sizes its tables to the keys it holds; the file's table
//! is `2 × max_keys` slots, fixed: for one limit, 12.6 MB at the default
//! and 6.3 MB at `--max-keys 131072`, which each call reads at a random slot.
//!
//! The file goes in `DIR` (default: `$XDG_RUNTIME_DIR`, else `/dev/shm`, else
//! the temporary directory) — a tmpfs, as the docs advise.

use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use ratomic::{Limiter, Quota, Rule, TokenBucket};
use ratomic_benches::{median, str_keys, Cycle};

const CALLS: u64 = 2_000_000;
const KEYS: usize = 100_000;
const DEFAULT_MAX_KEYS: usize = 1 << 18;

enum Built {
    Bucket(TokenBucket),
    Multi(Limiter),
}

fn build(scenario: &str, file: Option<&Path>, max_keys: usize) -> Built {
    let q = Quota::per_second(1_000_000_000).unwrap();
    match scenario {
        "limiter2" => {
            let b = Limiter::builder()
                .limit("a", Rule::token_bucket(q))
                .limit("b", Rule::token_bucket(Quota::per_second(500_000_000).unwrap()))
                .max_keys(max_keys);
            Built::Multi(match file {
                Some(f) => b.shared_file(f).build().unwrap(),
                None => b.build().unwrap(),
            })
        }
        _ => {
            let b = TokenBucket::builder(q).max_keys(max_keys);
            Built::Bucket(match file {
                Some(f) => b.shared_file(f).build().unwrap(),
                None => b.build().unwrap(),
            })
        }
    }
}

impl Built {
    #[inline]
    fn allow(&self, key: &str) -> bool {
        match self {
            Built::Bucket(l) => l.allow(key).unwrap().allowed,
            Built::Multi(l) => l.allow(key).unwrap().allowed(),
        }
    }
}

/// A worker: `RATOMIC_SHARED_WORKER=scenario:max_keys:file-or-dash`. Prints `ready`,
/// waits for a line on stdin, makes `CALLS` calls, prints ns per call.
fn worker(role: &str) {
    let (scenario, rest) = role.split_once(':').unwrap();
    let (max_keys, file) = rest.split_once(':').unwrap();
    let max_keys = max_keys.parse().unwrap();
    let file = (file != "-").then(|| PathBuf::from(file));
    let l = build(scenario, file.as_deref(), max_keys);
    let keys = if scenario == "hot" { vec!["0123456789abcdef".to_owned()] } else { str_keys(KEYS, 7) };
    for k in &keys {
        l.allow(k);
    }
    let mut cycle = Cycle::new(&keys, std::process::id() as usize);
    println!("ready");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let start = Instant::now();
    for _ in 0..CALLS {
        black_box(l.allow(cycle.next_key()));
    }
    let ns = start.elapsed().as_nanos() as f64 / CALLS as f64;
    println!("{ns}");
}

/// One round of one side: `p` workers at once; their mean ns per call.
fn round(scenario: &str, p: usize, file: Option<&Path>, max_keys: usize) -> f64 {
    if let Some(f) = file {
        let _ = std::fs::remove_file(f);
        // The first opener creates the file; the others must not race its
        // creation with a different view of the size (they wait on its lock).
        build(scenario, Some(f), max_keys);
    }
    let role = format!("{scenario}:{max_keys}:{}", file.map_or("-".into(), |f| f.display().to_string()));
    let mut children: Vec<_> = (0..p)
        .map(|_| {
            Command::new(std::env::current_exe().unwrap())
                .env("RATOMIC_SHARED_WORKER", &role)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut outs: Vec<_> = children.iter_mut().map(|c| BufReader::new(c.stdout.take().unwrap())).collect();
    for o in &mut outs {
        let mut l = String::new();
        o.read_line(&mut l).unwrap();
        assert_eq!(l.trim(), "ready");
    }
    for c in &mut children {
        writeln!(c.stdin.as_mut().unwrap(), "go").unwrap();
    }
    let mut total = 0.0;
    for o in &mut outs {
        let mut l = String::new();
        o.read_line(&mut l).unwrap();
        total += l.trim().parse::<f64>().unwrap();
    }
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    total / p as f64
}

fn main() {
    if let Ok(role) = std::env::var("RATOMIC_SHARED_WORKER") {
        worker(&role);
        return;
    }
    const USAGE: &str = "usage: shared [ROUNDS] [--dir DIR] [--max-keys N]";
    let mut rounds = 7;
    let mut dir = None;
    let mut max_keys = DEFAULT_MAX_KEYS;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--dir" => dir = Some(PathBuf::from(args.next().expect(USAGE))),
            "--max-keys" => max_keys = args.next().and_then(|n| n.parse().ok()).expect(USAGE),
            _ => rounds = a.parse().expect(USAGE),
        }
    }
    let dir = dir.unwrap_or_else(|| {
        std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|d| d.is_dir())
            .or_else(|| Some(PathBuf::from("/dev/shm")).filter(|d| d.is_dir()))
            .unwrap_or_else(std::env::temp_dir)
    });
    let file = dir.join(format!("ratomic-bench-{}.shm", std::process::id()));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "shared store vs in process: {rounds} rounds, {CALLS} calls per worker, max_keys {max_keys}, file in {}, {cpus} CPUs",
        dir.display()
    );
    println!();
    println!(
        "| scenario | processes | in process (ns/call) | shared (ns/call) | shared ÷ in process: median | min | max |"
    );
    println!("|---|---|---|---|---|---|---|");
    for scenario in ["hot", "keys100k", "limiter2"] {
        for p in [1, 2, 4] {
            let (mut local, mut shared, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
            for r in 0..rounds {
                eprint!("\r{scenario} ×{p}: round {}/{rounds}   ", r + 1);
                let (l, s) = if r % 2 == 0 {
                    let l = round(scenario, p, None, max_keys);
                    (l, round(scenario, p, Some(&file), max_keys))
                } else {
                    let s = round(scenario, p, Some(&file), max_keys);
                    (round(scenario, p, None, max_keys), s)
                };
                local.push(l);
                shared.push(s);
                ratios.push(s / l);
            }
            let (lo, hi) = ratios.iter().fold((f64::MAX, 0f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
            println!(
                "| {scenario} | {p} | {:.1} | {:.1} | {:.2} | {lo:.2} | {hi:.2} |",
                median(local),
                median(shared),
                median(ratios)
            );
        }
    }
    eprintln!();
    let _ = std::fs::remove_file(&file);

    // The file at max_keys = 1M: its size, and what 1M keys allocate.
    let l = TokenBucket::builder(Quota::per_second(1_000_000_000).unwrap())
        .max_keys(1_000_000)
        .shared_file(&file)
        .build()
        .unwrap();
    let size = std::fs::metadata(&file).unwrap().len();
    let keys = str_keys(1_000_000, 11);
    let start = Instant::now();
    for k in &keys {
        let _ = l.allow(k).unwrap();
    }
    let fill = start.elapsed();
    use std::os::unix::fs::MetadataExt;
    let allocated = std::fs::metadata(&file).unwrap().blocks() * 512;
    println!();
    println!("| max_keys 1M, one limit | bytes | per key |");
    println!("|---|---|---|");
    println!("| file size | {size} | {:.1} |", size as f64 / 1e6);
    println!("| allocated with 1M keys held ({} held) | {allocated} | {:.1} |", l.len(), allocated as f64 / 1e6);
    println!("| time to insert 1M keys | {:.0} ns per key | |", fill.as_nanos() as f64 / 1e6);
    drop(l);
    std::fs::remove_file(&file).unwrap();
}
