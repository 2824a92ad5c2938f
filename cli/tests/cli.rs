//! The `ratomic` binary, run as a user runs it.

use std::process::{Command, Output};

fn ratomic(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratomic")).args(args).output().expect("the ratomic binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

/// Runs and expects success; returns stdout.
fn ok(args: &[&str]) -> String {
    let o = ratomic(args);
    assert!(o.status.success(), "ratomic {args:?} failed: {}\n{}", o.status, stderr(&o));
    stdout(&o)
}

/// Runs and expects a usage error (exit 2) without a panic; returns stderr.
fn usage_error(args: &[&str]) -> String {
    let o = ratomic(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "ratomic {args:?}: {}\nstderr: {err}\nstdout: {}", o.status, stdout(&o));
    assert!(!err.contains("panicked"), "ratomic {args:?} panicked: {err}");
    assert!(err.starts_with("error: "), "{err}");
    err
}

/// The figure after `label` on the summary line that starts with it.
fn summary_figure(out: &str, label: &str) -> u64 {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in\n{out}"));
    let figure = line.trim_start()[label.len()..].split_whitespace().next().expect("a figure");
    figure.replace(',', "").parse().unwrap_or_else(|_| panic!("{line:?}"))
}

/// The cells of the (last) table row that starts with `label`.
fn table_row(out: &str, label: &str) -> Vec<String> {
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} row in\n{out}"));
    line.trim_start()[label.len()..].split_whitespace().map(str::to_owned).collect()
}

/// How many requests an independent GCRA (the contract's equations, exact integers) grants
/// to requests arriving at `times` (ns) with capacity `b` and interval `t`.
fn gcra_grants(times: impl Iterator<Item = u64>, b: u64, t: u64) -> u64 {
    let tau = b * t;
    let mut tat = 0u64;
    let mut granted = 0;
    for now in times {
        let new = tat.max(now) + t;
        if new - now <= tau {
            tat = new;
            granted += 1;
        }
    }
    granted
}

#[test]
fn default_simulation_grants_exactly_what_gcra_allows() {
    let out = ok(&["simulate", "--rate", "10/s", "--rps", "50", "--seconds", "10"]);
    // 50 rps for 10 s: a request every 20 ms, 500 in all.
    let expected = gcra_grants((0..500).map(|i| i * 20_000_000), 10, 100_000_000);
    // The burst of 10 at 0–180 ms, the two tokens refilled meanwhile at 200 and
    // 220 ms, then one every 100 ms from 300 to 9900 ms: B + floor((d − 1)/T).
    assert_eq!(expected, 10 + 99);
    assert_eq!(summary_figure(&out, "allowed"), expected, "\n{out}");
    assert_eq!(summary_figure(&out, "offered"), 500);
    assert_eq!(summary_figure(&out, "denied"), 500 - expected);
    assert!(out.contains("10.9/s vs 10/s configured"), "{out}");
    assert!(out.contains("at most 109 in 10s"), "{out}");
    for part in ["summary", "retry_after", "p50 ", "p99 ", "largest burst", "token bucket 10/s: burst 10"] {
        assert!(out.contains(part), "no {part:?} in\n{out}");
    }
    // Second by second: the burst shows in the first row, then exactly the rate.
    let rows: Vec<&str> =
        out.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()) && l.contains('█')).collect();
    assert_eq!(rows.len(), 10, "{out}");
    assert!(rows[0].split_whitespace().collect::<Vec<_>>()[..4] == ["0s", "50", "19", "31"], "{}", rows[0]);
    assert!(rows[1..].iter().all(|r| r.split_whitespace().nth(2) == Some("10")), "{out}");
}

#[test]
fn simulation_is_deterministic_given_the_seed() {
    let args = ["simulate", "--rate", "5/s", "--arrival", "poisson", "--seed", "7", "--keys", "3", "--seconds", "5"];
    let strip = |s: String| s.lines().filter(|l| !l.contains("clock")).collect::<Vec<_>>().join("\n");
    let a = strip(ok(&args));
    assert_eq!(a, strip(ok(&args)));
    let mut other = args;
    other[6] = "8";
    assert_ne!(a, strip(ok(&other)));
    assert!(a.contains("3 keys (each limited on its own)"), "{a}");
}

#[test]
fn multi_rate_output_names_the_limits_and_who_denied() {
    let out = ok(&["simulate", "--rate", "10/s", "--rate", "100/min", "--rps", "20", "--seconds", "20"]);
    for part in ["token bucket 10/s", "token bucket 100/m", "all or nothing", "by 10/s", "by 100/m", "denied by"] {
        assert!(out.contains(part), "no {part:?} in\n{out}");
    }
    // The minute's 100 tokens plus the refills within 20 s (one per 600 ms).
    assert_eq!(summary_figure(&out, "allowed"), 133, "\n{out}");
    let denied_by = out.lines().find(|l| l.trim_start().starts_with("denied by")).unwrap();
    assert!(denied_by.contains("10/s 100") && denied_by.contains("100/m 169"), "{denied_by}");
}

#[test]
fn mixed_algorithms_in_one_limiter() {
    let out = ok(&["simulate", "--rate", "5/s", "--rate", "fixed-window:20/m", "--burst", "8", "--seconds", "10"]);
    assert!(out.contains("token bucket 5/s: burst 8"), "{out}");
    assert!(out.contains("fixed window 20/m: 20 per 1m window"), "{out}");
    assert_eq!(summary_figure(&out, "allowed"), 20, "the fixed window's 20 a minute bind first\n{out}");
}

#[test]
fn all_algorithms_show_the_fixed_windows_double_burst() {
    let out = ok(&["simulate", "--rate", "10/s", "--algorithm", "all"]);
    assert!(out.contains("bursty"), "comparing defaults to bursty traffic\n{out}");
    let max = table_row(&out, "max within any 1s");
    let [tb, fw, sw]: [u64; 3] = [0, 1, 2].map(|i| max[i].parse().unwrap());
    assert_eq!(fw, 20, "a fixed window grants twice its limit across a boundary\n{out}");
    assert!(tb <= 11 && sw <= 11, "token bucket {tb} and sliding window {sw} stay near the limit\n{out}");
    assert!(out.contains("2.0× its limit of 10 per 1s"), "{out}");
    assert!(out.contains("close-up") && out.contains("window boundary"), "{out}");
}

#[test]
fn uniform_traffic_does_not_crowd_a_boundary() {
    let out = ok(&["simulate", "--rate", "10/s", "--algorithm", "all", "--arrival", "uniform"]);
    assert!(out.contains("fixed-window never exceeded 10 per 1s"), "{out}");
    assert!(!out.contains("close-up"), "{out}");
}

#[test]
fn window_algorithms_run_alone() {
    let out = ok(&["simulate", "--rate", "10/s", "--algorithm", "fixed-window"]);
    assert!(out.contains("fixed window 10/s"), "{out}");
    assert_eq!(summary_figure(&out, "allowed"), 100, "10 in each of ten windows\n{out}");
    let out = ok(&["simulate", "--rate", "10/s", "--algorithm", "sliding-window"]);
    assert!(out.contains("sliding window 10/s"), "{out}");
    // Under steady saturation the weighted previous window keeps the counter
    // a little below the limit: never above 10 a window.
    let allowed = summary_figure(&out, "allowed");
    assert!((85..=100).contains(&allowed), "{allowed}\n{out}");
}

#[test]
fn cost_counts_tokens() {
    let out = ok(&["simulate", "--rate", "10/s", "--cost", "5", "--seconds", "2"]);
    assert!(out.contains("tokens"), "{out}");
}

#[test]
fn realtime_paces_requests_on_the_real_clock() {
    let started = std::time::Instant::now();
    let out = ok(&["simulate", "--rate", "5/s", "--rps", "40", "--seconds", "0.3", "--realtime"]);
    let took = started.elapsed();
    assert!(took >= std::time::Duration::from_millis(250), "paced in real time: {took:?}");
    assert!(out.contains("real (monotonic clock"), "{out}");
    // 12 requests paced over 0.3 s: the burst of 5 passes, and at most one
    // more per 200 ms refill over however long the run really took (a loaded
    // machine stretches it), never more.
    assert_eq!(summary_figure(&out, "offered"), 12, "{out}");
    let allowed = summary_figure(&out, "allowed");
    let refills = took.as_millis() as u64 / 200;
    assert!(allowed >= 5 && allowed <= 5 + refills, "{allowed} allowed in {took:?}\n{out}");
}

#[test]
fn bad_rates_quote_the_input_with_the_engines_message() {
    // Past 64 bits, the count is the flags' product, not a saturated u64.
    let err = usage_error(&["simulate", "--rps", "1e30"]);
    assert!(err.contains("--rps 1000000000000000000000000000000 × --seconds 10 is about 1e31 requests"), "{err}");
    assert!(!err.contains("18,446,744,073,709,551,615"), "{err}");
    let err = usage_error(&["simulate", "--rate", "10/x"]);
    assert!(err.contains("invalid rate \"10/x\": unknown unit"), "{err}");
    let err = usage_error(&["simulate", "--rate", "0/s"]);
    assert!(err.contains("invalid rate \"0/s\""), "{err}");
    let err = usage_error(&["bench", "--rate", "ten/s"]);
    assert!(err.contains("invalid rate \"ten/s\""), "{err}");
    let err = usage_error(&["simulate", "--rate", "leaky:10/s"]);
    assert!(err.contains("unknown algorithm \"leaky\""), "{err}");
}

#[test]
fn bad_flags_exit_2_with_a_message_and_no_panic() {
    let cases: &[(&[&str], &str)] = &[
        (&["simulate", "--rps", "0"], "greater than 0"),
        (&["simulate", "--rps", "NaN"], "greater than 0"),
        (&["simulate", "--seconds", "-1"], "--seconds"),
        (&["simulate", "--keys", "0"], "--keys"),
        (&["simulate", "--cost", "11"], "cost 11 exceeds the limit 10"),
        (&["simulate", "--burst", "0"], "invalid capacity: 0"),
        (&["simulate", "--algorithm", "fixed-window", "--burst", "5"], "--burst applies only to token-bucket"),
        (&["simulate", "--rate", "10/s", "--rate", "10/s"], "is used twice"),
        (&["simulate", "--algorithm", "leaky-bucket"], "leaky-bucket"),
        (&["simulate", "--rps", "1000000000", "--seconds", "100"], "at most 10,000,000"),
        (&["simulate", "--rate", "1/h", "--arrival", "bursty"], "first is at 1h"),
        (&["simulate", "--frobnicate"], "--frobnicate"),
        (&["bench", "--threads", "0"], "--threads"),
        (&["bench", "--seconds", "0"], "greater than 0"),
        (&["bench", "--lease", "auto"], "--redis"),
        (&["bench", "--redis", "redis://127.0.0.1:1/", "--lease", "0"], "must be off, auto or the most tokens"),
        (&["bench", "--redis", "redis://127.0.0.1:1/", "--lease", "sometimes"], "must be off, auto or the most tokens"),
        (&["launch"], "launch"),
    ];
    for (args, needle) in cases {
        let err = usage_error(args);
        assert!(err.contains(needle), "ratomic {args:?}: no {needle:?} in {err}");
    }
    let o = ratomic(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("Usage"), "{}", stderr(&o));
}

#[test]
fn help_documents_every_flag_with_examples() {
    let top = ok(&["--help"]);
    assert!(top.contains("simulate") && top.contains("bench") && top.contains("Examples"), "{top}");
    let sim = ok(&["simulate", "--help"]);
    for flag in [
        "--rate",
        "--algorithm",
        "--burst",
        "--rps",
        "--seconds",
        "--keys",
        "--cost",
        "--arrival",
        "--seed",
        "--realtime",
        "Examples",
    ] {
        assert!(sim.contains(flag), "simulate --help lacks {flag}\n{sim}");
    }
    let bench = ok(&["bench", "--help"]);
    for flag in ["--threads", "--keys", "--seconds", "--algorithm", "--rate", "--redis", "--lease", "Examples"] {
        assert!(bench.contains(flag), "bench --help lacks {flag}\n{bench}");
    }
    assert!(ok(&["--version"]).starts_with("ratomic "));
}

#[test]
fn bench_runs_briefly_and_prints_throughput() {
    let out = ok(&["bench", "--seconds", "0.2", "--threads", "2", "--keys", "100"]);
    for part in ["ops/s total", "ops/s per thread", "allowed", "denied", "2 threads, 100 keys", "token-bucket"] {
        assert!(out.contains(part), "no {part:?} in\n{out}");
    }
    let row = table_row(&out, "token-bucket ");
    assert!(row[0].parse::<f64>().unwrap() > 0.0, "{row:?}");
    // stdout is a pipe here: no progress bar escapes on either stream.
    assert!(!out.contains('\u{1b}'), "{out:?}");
}

#[test]
fn bench_all_and_multi_limit() {
    let out = ok(&["bench", "--seconds", "0.1", "--threads", "1", "--algorithm", "all"]);
    for algo in ["token-bucket", "fixed-window", "sliding-window"] {
        let row = table_row(&out, &format!("{algo} "));
        assert!(row[0].parse::<f64>().is_ok_and(|x| x > 0.0), "{algo}: {row:?}\n{out}");
    }
    let out = ok(&["bench", "--seconds", "0.1", "--threads", "1", "--rate", "10/s", "--rate", "1000/h"]);
    assert!(out.contains("token bucket 1000/h"), "{out}");
}

#[test]
fn simulate_redis_refuses_bad_urls_and_realtime_with_a_message() {
    let err = usage_error(&["simulate", "--redis", "http://127.0.0.1:1/"]);
    assert!(err.contains("--redis"), "{err}");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let err = usage_error(&["simulate", "--redis", &format!("redis://127.0.0.1:{port}/")]);
    assert!(err.contains("--redis"), "{err}");
    let err = usage_error(&["simulate", "--realtime", "--redis", "redis://127.0.0.1:1/"]);
    assert!(err.contains("drop --realtime"), "{err}");
}

#[test]
fn simulate_postgres_refuses_bad_urls_realtime_and_two_backends_with_a_message() {
    let err = usage_error(&["simulate", "--postgres", "not a conninfo = ="]);
    assert!(err.contains("--postgres"), "{err}");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let err = usage_error(&["simulate", "--postgres", &format!("postgresql://u:secret@127.0.0.1:{port}/db")]);
    assert!(err.contains("--postgres: cannot connect") && !err.contains("secret"), "{err}");
    let err = usage_error(&["simulate", "--realtime", "--postgres", "postgresql://127.0.0.1:1/db"]);
    assert!(err.contains("drop --realtime"), "{err}");
    let err = usage_error(&["simulate", "--redis", "redis://127.0.0.1:1/", "--postgres", "postgresql://127.0.0.1:1/"]);
    assert!(err.contains("cannot be used with"), "{err}");
    let err = usage_error(&["bench", "--postgres", &format!("postgresql://127.0.0.1:{port}/db"), "--seconds", "0.01"]);
    assert!(err.contains("--postgres: cannot connect"), "{err}");
}

#[test]
fn bench_batch_must_be_sensible() {
    let err = usage_error(&["bench", "--batch", "0", "--seconds", "0.01"]);
    assert!(err.contains("--batch"), "{err}");
    let err = usage_error(&["bench", "--redis", "http://127.0.0.1:1/", "--seconds", "0.01"]);
    assert!(err.contains("--redis"), "{err}");
}
