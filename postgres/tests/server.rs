//! ratomic-postgres against a real PostgreSQL (started by run-tests.sh, or
//! by the test itself where it must stop one): parity with the in-memory
//! engine, concurrency, batches, gc and faults.

mod support;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use proptest::prelude::*;
use ratomic::{Decision, Quota, Rate, Rule};
use ratomic_postgres::{
    BlockingPostgresLimiter, Error, FailurePolicy, Limits, MultiDecision, Options, PgRule, PostgresLimiter, Source,
};

const US: u64 = 1_000; // ns

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap())
}

fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    runtime().block_on(f)
}

fn options() -> Options {
    Options { timeout: Duration::from_secs(5), connections: 2, ..Options::default() }
}

/// A limiter over `rules` under a fresh prefix on the shared server.
fn limiter(name: &str, rules: &[(&str, Rule)]) -> PostgresLimiter {
    limiter_with(name, rules, options())
}

fn limiter_with(name: &str, rules: &[(&str, Rule)], options: Options) -> PostgresLimiter {
    let limits = Limits::new(rules.iter().map(|(n, r)| (*n, *r))).unwrap().with_prefix(support::prefix(name)).unwrap();
    block(PostgresLimiter::connect(&support::url(), limits, options)).unwrap()
}

/// The shared server's rows of `prefix`: (key, state, xmin).
fn rows(prefix: &str) -> Vec<(Vec<u8>, Vec<i64>, String)> {
    block(async {
        let c = support::plain(&support::url()).await;
        c.query("SELECT key, state, xmin::text FROM ratomic_v1_state WHERE prefix = $1 ORDER BY key", &[&prefix])
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    })
}

// ---------------------------------------------------------------- parity

#[derive(Clone, Debug)]
enum Step {
    Advance(u64),
    Back(u64),
    Allow(usize, u64),
    Peek(usize, u64),
    Refund(usize, u64),
    Reset(usize),
    Many(Vec<(usize, u64)>),
    Gc,
}

const KEYS: [&str; 3] = ["a", "b", "c}{\u{0}"];

fn steps(max_cost: u64) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        3 => (0u64..400_000).prop_map(Step::Advance),
        1 => (0u64..50_000).prop_map(Step::Back),
        1 => (0u64..5).prop_map(|ms| Step::Advance(ms * 1000)),
        8 => (0..KEYS.len(), 0..=max_cost).prop_map(|(k, c)| Step::Allow(k, c)),
        2 => (0..KEYS.len(), 0..=max_cost).prop_map(|(k, c)| Step::Peek(k, c)),
        2 => (0..KEYS.len(), 0..=max_cost + 2).prop_map(|(k, c)| Step::Refund(k, c)),
        1 => (0..KEYS.len()).prop_map(Step::Reset),
        1 => prop::collection::vec((0..KEYS.len(), 0..=max_cost), 1..6).prop_map(Step::Many),
        1 => Just(Step::Gc),
    ];
    prop::collection::vec(step, 1..40)
}

/// The in-memory answer as the SQL gives it: waits in whole µs, rounded up
/// (only the sliding window's exact waits are not whole µs here).
fn entries_of(d: &ratomic::MultiDecision<'_>) -> (Decision, Vec<Decision>) {
    (in_micros(d.decision), d.entries().map(|e| in_micros(e.decision)).collect())
}

fn in_micros(d: Decision) -> Decision {
    let up = |t: Duration| Duration::from_micros(t.as_nanos().div_ceil(1000) as u64);
    Decision { retry_after: up(d.retry_after), reset_after: up(d.reset_after), ..d }
}

fn entries_of_pg(d: &MultiDecision) -> (Decision, Vec<Decision>) {
    assert_eq!(d.source, Source::Postgres);
    (d.decision, d.entries().map(|(_, e)| e).collect())
}

/// Runs `steps` through the in-memory engine and through PostgreSQL at the
/// same explicit times (whole µs) and compares every decision, field by
/// field. A `gc` at the current time must change no later decision (calls
/// after it are stamped no earlier than it: the in-memory engine forgets
/// nothing here).
fn parity(name: &str, rules: &[(&str, Rule)], steps: &[Step]) -> Result<(), TestCaseError> {
    for (_, r) in rules {
        if let PgRule::TokenBucket { interval_us, .. } = PgRule::from_rule(r).unwrap() {
            let Rule::TokenBucket(g) = r else { unreachable!() };
            prop_assert_eq!(interval_us * US, g.quota().emission_interval_nanos(), "T must be whole µs for parity");
        }
    }
    let core = ratomic::Limiter::new(rules.iter().map(|(n, r)| (*n, *r))).unwrap();
    let pg = shared_limiter(name, rules);
    let base: u64 = 1_700_000_000_000_000; // µs: a Unix time, so windows are far from index 0
    let mut now = base;
    // The earliest time a step may go back to (the last gc's).
    let mut floor = base;
    for (i, step) in steps.iter().enumerate() {
        let t = now * US;
        match step {
            Step::Advance(us) => now += us,
            Step::Back(us) => now = (now - us).max(floor),
            Step::Allow(k, cost) => {
                let want = entries_of(&core.allow_at(KEYS[*k], *cost, t).unwrap());
                let got = entries_of_pg(&block(pg.allow_at(KEYS[*k], *cost, t)).unwrap());
                prop_assert_eq!(got, want, "step {} {:?}", i, step);
            }
            Step::Peek(k, cost) => {
                let want = entries_of(&core.peek_at(KEYS[*k], *cost, t).unwrap());
                let got = entries_of_pg(&block(pg.peek_at(KEYS[*k], *cost, t)).unwrap());
                prop_assert_eq!(got, want, "step {} {:?}", i, step);
            }
            Step::Refund(k, tokens) => {
                core.refund_at(KEYS[*k], *tokens, t).unwrap();
                block(pg.refund_at(KEYS[*k], *tokens, t)).unwrap();
            }
            Step::Reset(k) => {
                core.reset_at(KEYS[*k], t).unwrap();
                block(pg.reset(KEYS[*k])).unwrap();
            }
            Step::Many(reqs) => {
                let reqs: Vec<(&str, u64)> = reqs.iter().map(|(k, c)| (KEYS[*k], *c)).collect();
                let want: Vec<_> = reqs.iter().map(|(k, c)| entries_of(&core.allow_at(*k, *c, t).unwrap())).collect();
                let got: Vec<_> = block(pg.allow_many_at(&reqs, t)).unwrap().iter().map(entries_of_pg).collect();
                prop_assert_eq!(got, want, "step {} {:?}", i, step);
            }
            Step::Gc => {
                block(pg.gc_at(t)).unwrap();
                floor = now;
            }
        }
    }
    Ok(())
}

/// One connection pool for the parity cases (a connection per case would
/// cost more than the case).
fn shared_limiter(name: &str, rules: &[(&str, Rule)]) -> PostgresLimiter {
    limiter(name, rules)
}

fn gcra_rule() -> impl Strategy<Value = Rule> {
    (1u64..=6, prop::sample::select(vec![1_000u64, 20_000, 150_000, 1_000_000]))
        .prop_map(|(cap, t_us)| Rule::token_bucket(Quota::new(cap, 1e6 / t_us as f64).unwrap()))
}

fn window() -> impl Strategy<Value = Duration> {
    prop::sample::select(vec![10u64, 100, 1000, 1500]).prop_map(Duration::from_millis)
}

proptest! {
    #[test]
    fn parity_token_bucket((rule, s) in gcra_rule().prop_flat_map(|r| (Just(r), steps(6)))) {
        let cap = ratomic::Algorithm::limit(&rule);
        let s: Vec<Step> = s.into_iter().map(|st| clamp(st, cap)).collect();
        parity("tb", &[("limit", rule)], &s)?;
    }

    #[test]
    fn parity_fixed_window(limit in 1u64..=6, w in window(), s in steps(6)) {
        let rule = Rule::fixed_window(Rate::new(limit, w).unwrap()).unwrap();
        let s: Vec<Step> = s.into_iter().map(|st| clamp(st, limit)).collect();
        parity("fw", &[("limit", rule)], &s)?;
    }

    #[test]
    fn parity_sliding_window(limit in 1u64..=6, w in window(), s in steps(6)) {
        let rule = Rule::sliding_window(Rate::new(limit, w).unwrap()).unwrap();
        let s: Vec<Step> = s.into_iter().map(|st| clamp(st, limit)).collect();
        parity("sw", &[("limit", rule)], &s)?;
    }

    #[test]
    fn parity_multi_limit(
        tb in gcra_rule(),
        fl in 2u64..=8, fw in window(),
        sl in 2u64..=8, sw in window(),
        s in steps(8),
    ) {
        let rules = [
            ("burst", tb),
            ("fixed", Rule::fixed_window(Rate::new(fl, fw).unwrap()).unwrap()),
            ("sliding", Rule::sliding_window(Rate::new(sl, sw).unwrap()).unwrap()),
        ];
        let max = rules.iter().map(|(_, r)| ratomic::Algorithm::limit(r)).min().unwrap();
        let s: Vec<Step> = s.into_iter().map(|st| clamp(st, max)).collect();
        parity("multi", &rules, &s)?;
    }
}

/// Costs above the limit are an error (tested elsewhere); keep parity runs
/// to valid costs.
fn clamp(step: Step, max: u64) -> Step {
    match step {
        Step::Allow(k, c) => Step::Allow(k, c.min(max)),
        Step::Peek(k, c) => Step::Peek(k, c.min(max)),
        Step::Many(r) => Step::Many(r.into_iter().map(|(k, c)| (k, c.min(max))).collect()),
        s => s,
    }
}

// ----------------------------------------------------------- concurrency

fn hourly_50() -> Rule {
    Rule::token_bucket(Quota::new(50, 1.0 / 3600.0).unwrap())
}

/// 100 tasks on 4 limiters (8 connections) race on a bucket of 50 (refill:
/// one token an hour), at the server's clock: exactly 50 pass.
#[test]
fn hundred_tasks_on_four_limiters_get_exactly_the_burst() {
    let prefix = support::prefix("race");
    let granted = block(async {
        let mut limiters = Vec::new();
        for _ in 0..4 {
            let limits = Limits::single(hourly_50()).unwrap().with_prefix(prefix.clone()).unwrap();
            limiters.push(PostgresLimiter::connect(&support::url(), limits, options()).await.unwrap());
        }
        let tasks: Vec<_> = (0..100)
            .map(|i| {
                let l = limiters[i % 4].clone();
                tokio::spawn(async move { l.allow("shared").await.unwrap().allowed() })
            })
            .collect();
        let mut granted = 0;
        for t in tasks {
            granted += usize::from(t.await.unwrap());
        }
        granted
    });
    assert_eq!(granted, 50);
}

/// Four processes race on one bucket of 50, 40 calls each: exactly 50 pass.
#[test]
fn four_processes_get_exactly_the_burst() {
    let prefix = support::prefix("processes");
    let workers: Vec<_> = (0..4)
        .map(|_| {
            std::process::Command::new(env!("CARGO_BIN_EXE_pg_race_worker"))
                .args([support::url(), prefix.clone(), "40".to_owned()])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let granted: u64 = workers
        .into_iter()
        .map(|w| {
            let out = w.wait_with_output().unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap().trim().parse::<u64>().unwrap()
        })
        .sum();
    assert_eq!(granted, 50);
}

/// Several limits under a race: no limit is ever charged beyond itself, and
/// the tightest decides how many pass.
#[test]
fn multi_limit_races_never_over_grant_any_limit() {
    let rules = [
        ("bucket", Rule::token_bucket(Quota::new(30, 1.0 / 3600.0).unwrap())),
        ("window", Rule::fixed_window(Rate::parse("20/h").unwrap()).unwrap()),
    ];
    let l = Arc::new(limiter("multi-race", &rules));
    let spent = block(async {
        let tasks: Vec<_> = (0..100)
            .map(|i| {
                let l = l.clone();
                let cost = 1 + (i % 2) as u64;
                tokio::spawn(async move { (l.allow_n("k", cost).await.unwrap().allowed(), cost) })
            })
            .collect();
        let mut spent = 0;
        for t in tasks {
            let (allowed, cost) = t.await.unwrap();
            spent += if allowed { cost } else { 0 };
        }
        spent
    });
    let after = block(l.peek("k", 0)).unwrap();
    let (window, bucket) = (after.get("window").unwrap(), after.get("bucket").unwrap());
    assert_eq!(spent, 20 - window.remaining);
    assert_eq!(spent, 30 - bucket.remaining);
    assert!(window.remaining <= 1, "the window is (nearly) used up: {window:?}");
}

/// Batches that name the same keys in opposite orders, at once, on 8
/// connections: each locks its rows in key order, so none waits for
/// another in a cycle (PostgreSQL would abort one with a deadlock error),
/// and every key is charged exactly once per grant.
#[test]
fn concurrent_batches_never_deadlock_and_never_over_grant() {
    let rule = Rule::token_bucket(Quota::new(1000, 1.0 / 3600.0).unwrap());
    let l = limiter_with("batches", &[("limit", rule)], Options { connections: 8, ..options() });
    const KEYS: [&str; 6] = ["u", "v", "w", "x", "y", "z"];
    let granted = block(async {
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let l = l.clone();
                tokio::spawn(async move {
                    let mut keys: Vec<(&str, u64)> = KEYS.iter().map(|k| (*k, 1)).collect();
                    if i % 2 == 1 {
                        keys.reverse();
                    }
                    let ds = l.allow_many(&keys).await.unwrap();
                    ds.iter().filter(|d| d.allowed()).count()
                })
            })
            .collect();
        let mut granted = 0;
        for t in tasks {
            granted += t.await.unwrap();
        }
        granted
    });
    assert_eq!(granted, 6 * 200, "200 calls per key, 1000 each: all pass");
    for k in KEYS {
        assert_eq!(block(l.peek(k, 0)).unwrap().decision.remaining, 800, "key {k}");
    }
}

// ------------------------------------------------- writes, peeks and gc

#[test]
fn denials_and_peeks_write_nothing() {
    let l = limiter("writes", &[("limit", Rule::parse("2/d").unwrap())]);
    let prefix = l.limits().prefix().to_owned();
    assert!(block(l.peek("k", 1)).unwrap().allowed());
    assert!(rows(&prefix).is_empty(), "a peek of a new key makes no row");
    assert!(block(l.allow_n("k", 2)).unwrap().allowed());
    let before = rows(&prefix);
    assert_eq!(before.len(), 1);
    let d = block(l.allow("k")).unwrap();
    assert!(!d.allowed() && d.decision.retry_after > Duration::ZERO);
    let _ = block(l.peek("k", 1)).unwrap();
    assert_eq!(rows(&prefix), before, "a denial and a peek leave the row's version as it was");
    // The next denial comes from the deny cache (same key and cost).
    assert_eq!(block(l.allow("k")).unwrap().source, Source::DenyCache);
}

#[test]
fn gc_removes_only_rows_that_are_full_again() {
    let l = limiter("gc", &[("limit", Rule::parse("10/s").unwrap())]);
    let prefix = l.limits().prefix().to_owned();
    let t0 = 1_700_000_000_000_000 * US;
    assert!(block(l.allow_at("soon", 1, t0)).unwrap().allowed()); // full at t0 + 100 ms
    assert!(block(l.allow_at("later", 5, t0)).unwrap().allowed()); // full at t0 + 500 ms
    block(l.gc_at(t0 + 100_000 * US)).unwrap();
    let left: Vec<Vec<u8>> = rows(&prefix).into_iter().map(|r| r.0).collect();
    assert_eq!(left, [b"later".to_vec()]);
    // The later key still counts its calls; the removed one is full.
    assert_eq!(block(l.peek_at("later", 0, t0 + 100_000 * US)).unwrap().decision.remaining, 6);
    assert_eq!(block(l.peek_at("soon", 0, t0 + 100_000 * US)).unwrap().decision.remaining, 10);
}

/// A refund at a time before the stored window leaves counts of zero in a
/// window that has not started yet: the row is not full until it starts
/// (a call stamped before it still counts in it, its waits running to that
/// window's end), so a gc before then keeps it. Found by the parity test.
#[test]
fn gc_keeps_a_window_that_has_not_started() {
    let l = limiter("gc-window", &[("limit", Rule::fixed_window(Rate::parse("2/10ms").unwrap()).unwrap())]);
    let core = ratomic::Limiter::new([("limit", Rule::fixed_window(Rate::parse("2/10ms").unwrap()).unwrap())]).unwrap();
    let start = 1_700_000_000_010_000 * US; // a window's first µs
    let before = start - US;
    for (at, step) in [(start, "allow"), (before, "refund"), (before, "gc"), (before, "allow"), (start, "allow")] {
        match step {
            "allow" => {
                let want = entries_of(&core.allow_at("k", 1, at).unwrap());
                assert_eq!(entries_of_pg(&block(l.allow_at("k", 1, at)).unwrap()), want, "{step} at {at}");
            }
            "refund" => {
                core.refund_at("k", 1, at).unwrap();
                block(l.refund_at("k", 1, at)).unwrap();
            }
            _ => {
                assert_eq!(block(l.gc_at(at)).unwrap(), 0, "the row is not full before its window starts");
            }
        }
    }
}

// ------------------------------------------------------------ bad input

#[test]
fn bad_input_is_refused_before_any_round_trip() {
    let server = support::Server::start();
    let options = Options { policy: FailurePolicy::FailOpen, breaker_threshold: 1, ..options() };
    let limits = Limits::single(Rule::parse("5/s").unwrap()).unwrap();
    let l = BlockingPostgresLimiter::connect(&server.url(), limits, options).unwrap();
    assert!(l.allow_many(&[("a", 1), ("b", 1)]).unwrap().iter().all(|d| d.source == Source::Postgres));
    // A batch with one bad request charges nothing.
    let err = l.allow_many(&[("a", 1), ("b", 6)]).unwrap_err();
    assert!(matches!(err, Error::Invalid(ratomic::Error::InvalidRequest { index: 1, .. })), "{err}");
    assert_eq!(l.peek("a", 0).unwrap().decision.remaining, 4);
    server.stop();
    // With the server gone, a bad call is still the caller's error: it never
    // reached the policy (which would have allowed it) nor the breaker.
    assert!(matches!(l.allow_n("a", 6), Err(Error::Invalid(ratomic::Error::CostExceedsLimit { .. }))));
    assert!(matches!(l.allow_n(vec![b'x'; 1025], 1), Err(Error::Invalid(ratomic::Error::KeyTooLong { .. }))));
    assert!(matches!(l.allow_at("a", 1, 1 << 62), Err(Error::Invalid(_))));
    assert!(!l.inner().breaker_open());
    let d = l.allow("a").unwrap();
    assert_eq!(d.source, Source::Policy, "a good call meets the dead server and the policy");
}

// --------------------------------------------------------------- faults

/// The server stops and comes back: calls meanwhile are answered by the
/// policy (here a local fallback, then fail closed), and the state kept in
/// the database is there when it returns.
#[test]
fn a_stopped_server_is_answered_by_the_policy_and_recovered_from() {
    let server = support::Server::start();
    let options = Options {
        policy: FailurePolicy::Fallback,
        breaker_threshold: 2,
        breaker_cooldown: Duration::from_millis(50),
        timeout: Duration::from_secs(2),
        ..options()
    };
    let limits = Limits::single(Rule::parse("5/h").unwrap()).unwrap();
    let l = BlockingPostgresLimiter::connect(&server.url(), limits, options).unwrap();
    for _ in 0..2 {
        assert_eq!(l.allow("k").unwrap().source, Source::Postgres);
    }
    server.stop();
    for _ in 0..3 {
        let d = l.allow("k").unwrap();
        assert_eq!(d.source, Source::Fallback, "{d:?}");
    }
    assert!(l.inner().breaker_open());
    server.restart();
    std::thread::sleep(Duration::from_millis(60)); // the breaker's cool-down (real time: the breaker's own clock)
    let back = loop {
        let d = l.allow("k").unwrap();
        if d.source == Source::Postgres {
            break d;
        }
        assert_eq!(d.source, Source::Fallback);
        std::thread::sleep(Duration::from_millis(60));
    };
    assert_eq!(back.decision.remaining, 2, "the two calls before the stop were kept; fallback grants were local");
}

#[test]
fn a_stopped_server_fails_closed_or_returns_the_error_as_asked() {
    let server = support::Server::start();
    let limits = || Limits::single(Rule::parse("5/h").unwrap()).unwrap();
    let closed = Options { policy: FailurePolicy::FailClosed { retry_after: Duration::from_secs(7) }, ..options() };
    let c = BlockingPostgresLimiter::connect(&server.url(), limits(), closed).unwrap();
    let e = BlockingPostgresLimiter::connect(&server.url(), limits(), options()).unwrap();
    assert!(c.allow("k").unwrap().allowed());
    server.stop();
    let d = c.allow("k").unwrap();
    assert!(!d.allowed() && d.source == Source::Policy);
    assert_eq!(d.decision.retry_after, Duration::from_secs(7));
    assert!(e.allow("k").unwrap_err().is_backend());
}

/// The limiter's connection is killed with pg_terminate_backend: the call
/// that meets the dead connection is answered by the policy or, if the
/// close was already seen, by a new connection; later calls reach the
/// server and find the state it kept.
#[test]
fn a_terminated_backend_is_answered_by_the_policy_and_reconnected() {
    let name = support::prefix("terminate").replace(':', "_");
    let url = format!("{}?application_name={name}", support::url());
    let limits = Limits::single(Rule::parse("5/h").unwrap()).unwrap().with_prefix(name.clone()).unwrap();
    let options = Options {
        policy: FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) },
        connections: 1,
        ..options()
    };
    let l = block(PostgresLimiter::connect(&url, limits, options)).unwrap();
    assert_eq!(block(l.allow("k")).unwrap().decision.remaining, 4);
    let killed: i64 = block(async {
        let c = support::plain(&support::url()).await;
        let r = c
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
                &[&name],
            )
            .await
            .unwrap();
        r.get(0)
    });
    assert_eq!(killed, 1);
    let d = block(l.allow("k")).unwrap();
    assert!(
        (d.source == Source::Policy && !d.allowed()) || (d.source == Source::Postgres && d.decision.remaining == 3),
        "{d:?}"
    );
    let charged = u64::from(d.source == Source::Postgres);
    let next = block(l.allow("k")).unwrap();
    assert_eq!(next.source, Source::Postgres);
    assert_eq!(next.decision.remaining, 3 - charged);
}

/// A call stuck behind a row lock past the limiter's timeout: the policy
/// answers (fail closed), the server cancels the statement (the
/// connection's statement_timeout), and nothing is charged for it.
#[test]
fn a_statement_timeout_is_answered_by_the_policy_and_charges_nothing() {
    let name = support::prefix("timeout").replace(':', "_");
    let url = format!("{}?application_name={name}", support::url());
    let options = Options {
        policy: FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) },
        timeout: Duration::from_millis(300),
        connections: 1,
        ..Options::default()
    };
    let limits = Limits::single(Rule::parse("5/h").unwrap()).unwrap().with_prefix(name.clone()).unwrap();
    let l = block(PostgresLimiter::connect(&url, limits, options)).unwrap();
    assert_eq!(block(l.allow("k")).unwrap().decision.remaining, 4);
    block(async {
        let mut c = support::plain(&support::url()).await;
        let tx = c.transaction().await.unwrap();
        tx.execute("SELECT 1 FROM ratomic_v1_state WHERE prefix = $1 FOR UPDATE", &[&name]).await.unwrap();
        let d = l.allow("k").await.unwrap();
        assert_eq!((d.source, d.allowed()), (Source::Policy, false), "{d:?}");
        // The lock is held until the server has cancelled the statement.
        let watch = support::plain(&support::url()).await;
        for i in 0.. {
            assert!(i < 3000, "the server did not cancel the statement in 30 s (no statement_timeout?)");
            let row = watch
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active'",
                    &[&name],
                )
                .await
                .unwrap();
            if row.get::<_, i64>(0) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tx.commit().await.unwrap();
    });
    let d = block(l.peek("k", 0)).unwrap();
    assert_eq!((d.source, d.decision.remaining), (Source::Postgres, 4), "the timed-out call charged nothing");
    assert_eq!(block(l.allow("k")).unwrap().decision.remaining, 3);
}

// ------------------------------------------------------------ operations

#[test]
fn acquire_waits_for_the_token_within_the_deadline() {
    // An hour's wait is beyond any deadline here: nothing is taken.
    let hourly = limiter("acquire", &[("limit", Rule::parse("1/h").unwrap())]);
    // A full refill takes 1 s: within the deadline, however slow the machine.
    let fast = limiter("acquire", &[("limit", Rule::parse("10/s").unwrap())]);
    block(async {
        assert!(hourly.allow("k").await.unwrap().allowed());
        assert!(hourly.acquire("k", 1, Duration::from_secs(5)).await.unwrap().is_none());
        assert!(fast.allow_n("k", 10).await.unwrap().allowed());
        let d = fast.acquire("k", 10, Duration::from_secs(5)).await.unwrap().expect("ten tokens within 5 s");
        assert!(d.allowed() && d.source == Source::Postgres);
    });
}

#[test]
fn refund_and_reset_give_tokens_back() {
    let l = limiter("refund", &[("limit", Rule::parse("5/h").unwrap())]);
    block(async {
        assert!(l.allow_n("k", 4).await.unwrap().allowed());
        assert_eq!(l.refund("k", 2).await.unwrap(), 1);
        assert_eq!(l.peek("k", 0).await.unwrap().decision.remaining, 3);
        assert_eq!(l.refund("k", 99).await.unwrap(), 1);
        assert_eq!(l.peek("k", 0).await.unwrap().decision.remaining, 5, "never above full");
        assert!(l.allow_n("k", 5).await.unwrap().allowed());
        l.reset("k").await.unwrap();
        assert_eq!(l.peek("k", 0).await.unwrap().decision.remaining, 5);
    });
}
