//! A process of the server tests' lease races (built only with the
//! `server-tests` feature):
//!
//! `pg_lease_worker URL PREFIX MODE THREADS CALLS BURST PER_SEC [KEYS]`
//!
//! calls `allow` CALLS times from each of THREADS threads, on a token bucket
//! of BURST refilling PER_SEC a second, leases on: on key "hot", or with
//! KEYS, on keys "k0" … "k<KEYS-1>", each call picking one at random. MODE
//! `caller` stamps every call with `CLOCK_MONOTONIC` (one timeline for every
//! process of the host: the grants can be checked exactly); `server` calls
//! at the server's time. Prints a line `G <key> <µs>` per grant as it is
//! made (the stamp in `caller` mode, 0 otherwise; flushed, so a process
//! killed mid-run leaves its grants behind), then `S <answered from a
//! lease> <round trips> <errors>`. A call that fails (the server is down or
//! restarting) is counted and the thread goes on. Gives its leases back at
//! the end.
//!
//! MODE `restart:<policy>` (`error`, `closed` or `fallback`: the limiter's
//! failure policy `ReturnError`, `FailClosed` or `Fallback`) is `caller`
//! for a run across a server crash: a call answered by the policy (an error,
//! or `Source::Policy` / `Source::Fallback`) is counted as an error and does
//! not count towards CALLS, so every thread goes on until the server is
//! back and has answered CALLS calls (or leases have); a fallback grant is
//! printed as a grant. Prints `R` once connected. A thread that sees only failures for 60 s gives up
//! (exit status 3).
//!
//! MODE `idle` or `idle:<n>` (leases of at most n tokens, `Lease::Max(n)`;
//! `Lease::Auto` otherwise) calls at the server's time, then, instead of
//! giving its leases back, prints `S …` and `I <leases held>` and goes idle
//! holding them: it reads stdin, and gives them back on a line `give`
//! (printing `B <limits given back>`), then exits on end of input. PER_SEC
//! may be a fraction (e.g. 0.001).

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ratomic::{Clock, MonotonicClock, Quota, Rule};
use ratomic_postgres::{BlockingPostgresLimiter, FailurePolicy, Lease, Limits, Options, Source};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (url, prefix, mode, threads, calls, burst, per_sec, keys) = match &args[..] {
        [_, url, prefix, mode, threads, calls, burst, per_sec] => {
            (url, prefix, mode, threads, calls, burst, per_sec, None)
        }
        [_, url, prefix, mode, threads, calls, burst, per_sec, keys] => {
            (url, prefix, mode, threads, calls, burst, per_sec, Some(keys))
        }
        _ => {
            eprintln!("usage: pg_lease_worker URL PREFIX caller|server THREADS CALLS BURST PER_SEC [KEYS]");
            std::process::exit(2);
        }
    };
    let n = |s: &str| s.parse::<u64>().expect("a number");
    let keys = keys.map(|k| n(k));
    let restart = mode.strip_prefix("restart:");
    let policy = match restart {
        None | Some("error") => FailurePolicy::ReturnError,
        Some("closed") => FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) },
        Some("fallback") => FailurePolicy::Fallback,
        Some(other) => {
            eprintln!("pg_lease_worker: unknown failure policy {other:?} (error, closed or fallback)");
            std::process::exit(2);
        }
    };
    let caller = mode == "caller" || restart.is_some();
    let idle = mode.strip_prefix("idle");
    let lease = match idle {
        Some(max) if !max.is_empty() => Lease::Max(n(max.trim_start_matches(':'))),
        _ => Lease::Auto,
    };
    let per_sec = per_sec.parse::<f64>().expect("a rate");
    let rule = Rule::token_bucket(Quota::new(n(burst), per_sec).expect("a valid quota"));
    let limits = Limits::single(rule).and_then(|l| l.with_prefix(prefix.as_str())).expect("valid limits");
    // This host's VM has been seen to stop for up to 9 s (the kernel logs a
    // workqueue lockup): a call that overlaps such a pause is no failure of
    // the limiter, so the bound is generous unless the run crashes the
    // server on purpose (its calls then fail at once on refused connections).
    let timeout = Duration::from_secs(if restart.is_some() { 5 } else { 60 });
    let options = Options { timeout, lease, policy, ..Options::default() };
    let limiter = BlockingPostgresLimiter::connect(url, limits, options).expect("connected");
    if restart.is_some() {
        // Connected: the server may be crashed from now on.
        println!("R");
        std::io::stdout().flush().unwrap();
    }
    let clock = MonotonicClock::new();
    let (local, trips, errors) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let out = Mutex::new(std::io::stdout());
    std::thread::scope(|s| {
        for thread in 0..n(threads) {
            let (limiter, clock, out) = (&limiter, &clock, &out);
            let (local, trips, errors) = (&local, &trips, &errors);
            s.spawn(move || {
                // xorshift64*, seeded per process and thread.
                let mut seed = (u64::from(std::process::id()) << 16 | thread) | 1;
                let mut pick = move |k: u64| {
                    seed ^= seed >> 12;
                    seed ^= seed << 25;
                    seed ^= seed >> 27;
                    seed.wrapping_mul(0x2545_f491_4f6c_dd1d) % k
                };
                let (mut answered, mut failing_since) = (0, None);
                while answered < n(calls) {
                    let key = keys.map_or_else(|| "hot".to_owned(), |k| format!("k{}", pick(k)));
                    let began = std::time::SystemTime::now();
                    let (d, stamp) = if caller {
                        let now = clock.now();
                        (limiter.allow_at(&key, 1, now), now / 1000)
                    } else {
                        (limiter.allow_n(&key, 1), 0)
                    };
                    let d = match d {
                        Err(e) if restart.is_none() => {
                            answered += 1;
                            if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                                // The test fails on any error: say which.
                                let since = began.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                                eprintln!(
                                    "pg_lease_worker: a call on {key} begun at {:.3} s (Unix time) failed: {e}",
                                    since.as_secs_f64()
                                );
                            }
                            std::thread::sleep(Duration::from_millis(1)); // the server is restarting
                            continue;
                        }
                        Ok(d) if !matches!(d.source, Source::Policy | Source::Fallback) => {
                            answered += 1;
                            failing_since = None;
                            d
                        }
                        // Answered by the failure policy: the server is down
                        // or restarting. A fallback grant is a grant.
                        failed => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            if failed.is_ok_and(|d| d.allowed()) {
                                let mut out = out.lock().unwrap();
                                writeln!(out, "G {key} {stamp}").unwrap();
                                out.flush().unwrap();
                            }
                            let since = *failing_since.get_or_insert_with(std::time::Instant::now);
                            if since.elapsed() > Duration::from_secs(60) {
                                eprintln!("pg_lease_worker: the server has not answered for 60 s");
                                std::process::exit(3);
                            }
                            std::thread::sleep(Duration::from_millis(1));
                            continue;
                        }
                    };
                    match d.source {
                        Source::Lease => local.fetch_add(1, Ordering::Relaxed),
                        _ => trips.fetch_add(1, Ordering::Relaxed),
                    };
                    if d.allowed() {
                        let mut out = out.lock().unwrap();
                        writeln!(out, "G {key} {stamp}").unwrap();
                        out.flush().unwrap();
                    }
                }
            });
        }
    });
    if idle.is_some() {
        // Idle, holding whatever leases it has: the others see what they
        // cost until told to give them back.
        println!(
            "S {} {} {}",
            local.load(Ordering::Relaxed),
            trips.load(Ordering::Relaxed),
            errors.load(Ordering::Relaxed)
        );
        println!("I {}", limiter.inner().driver().leases_held());
        std::io::stdout().flush().unwrap();
        for line in std::io::stdin().lines() {
            if line.unwrap().trim() == "give" {
                println!("B {}", limiter.give_back().expect("given back"));
                std::io::stdout().flush().unwrap();
            }
        }
        return;
    }
    let _ = limiter.give_back();
    println!(
        "S {} {} {}",
        local.load(Ordering::Relaxed),
        trips.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed)
    );
}
