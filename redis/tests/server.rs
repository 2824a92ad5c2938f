//! ratomic-redis against a real redis-server (started by run-tests.sh, or by
//! the test itself where it must kill one): parity with the in-memory
//! engine, concurrency, NOSCRIPT, batches, TTLs and faults.

mod support;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use proptest::prelude::*;
use ratomic::{Decision, Quota, Rate, Rule};
use ratomic_redis::{
    BlockingRedisLimiter, Error, FailurePolicy, Limits, MultiDecision, Options, RedisLimiter, RedisRule, Source,
};
use redis::aio::ConnectionManager;
use redis::Commands;

const US: u64 = 1_000; // ns

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap())
}

/// One connection to the shared server for the whole test binary.
fn manager() -> ConnectionManager {
    static M: OnceLock<ConnectionManager> = OnceLock::new();
    M.get_or_init(|| runtime().block_on(ConnectionManager::new(redis::Client::open(support::url()).unwrap())).unwrap())
        .clone()
}

/// A generous timeout: this host's VM has been seen to stop for up to 9 s
/// (the kernel logs a workqueue lockup), and a call that overlaps such a
/// pause is no failure of the limiter. Tests of timeouts set their own.
fn options() -> Options {
    Options { timeout: Duration::from_secs(60), ..Options::default() }
}

/// A limiter over `rules` under a fresh prefix; its keys outlive the test
/// (the `*_at` times below run far faster than the server's clock).
fn limiter(name: &str, rules: &[(&str, Rule)]) -> RedisLimiter {
    let limits = Limits::new(rules.iter().map(|(n, r)| (*n, *r)))
        .unwrap()
        .with_prefix(support::prefix(name))
        .unwrap()
        .with_ttl_floor(Duration::from_secs(3600));
    RedisLimiter::new(manager(), limits, options())
}

fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    runtime().block_on(f)
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
}

const KEYS: [&str; 3] = ["a", "b", "c}{"];

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
    ];
    prop::collection::vec(step, 1..40)
}

/// The in-memory answer as Redis gives it: waits in whole µs, rounded up
/// (only the sliding window's exact waits are not whole µs here).
fn entries_of(d: &ratomic::MultiDecision<'_>) -> (Decision, Vec<Decision>) {
    (in_micros(d.decision), d.entries().map(|e| in_micros(e.decision)).collect())
}

fn in_micros(d: Decision) -> Decision {
    let up = |t: Duration| Duration::from_micros(t.as_nanos().div_ceil(1000) as u64);
    Decision { retry_after: up(d.retry_after), reset_after: up(d.reset_after), ..d }
}

fn entries_of_redis(d: &MultiDecision) -> (Decision, Vec<Decision>) {
    assert_eq!(d.source, Source::Redis);
    (d.decision, d.entries().map(|(_, e)| e).collect())
}

/// Runs `steps` through the in-memory engine and through Redis at the same
/// explicit times (whole µs) and compares every decision, field by field.
fn parity(name: &str, rules: &[(&str, Rule)], steps: &[Step]) -> Result<(), TestCaseError> {
    for (_, r) in rules {
        if let RedisRule::TokenBucket { interval_us, .. } = RedisRule::from_rule(r).unwrap() {
            let Rule::TokenBucket(g) = r else { unreachable!() };
            prop_assert_eq!(interval_us * US, g.quota().emission_interval_nanos(), "T must be whole µs for parity");
        }
    }
    let core = ratomic::Limiter::new(rules.iter().map(|(n, r)| (*n, *r))).unwrap();
    let redis = limiter(name, rules);
    let base: u64 = 1_700_000_000_000_000; // µs: a Unix time, so windows are far from index 0
    let mut now = base;
    for (i, step) in steps.iter().enumerate() {
        let t = now * US;
        match step {
            Step::Advance(us) => now += us,
            Step::Back(us) => now = (now - us).max(base),
            Step::Allow(k, cost) => {
                let want = entries_of(&core.allow_at(KEYS[*k], *cost, t).unwrap());
                let got = entries_of_redis(&block(redis.allow_at(KEYS[*k], *cost, t)).unwrap());
                prop_assert_eq!(got, want, "step {} {:?}", i, step);
            }
            Step::Peek(k, cost) => {
                let want = entries_of(&core.peek_at(KEYS[*k], *cost, t).unwrap());
                let got = entries_of_redis(&block(redis.peek_at(KEYS[*k], *cost, t)).unwrap());
                prop_assert_eq!(got, want, "step {} {:?}", i, step);
            }
            Step::Refund(k, tokens) => {
                core.refund_at(KEYS[*k], *tokens, t).unwrap();
                block(redis.refund_at(KEYS[*k], *tokens, t)).unwrap();
            }
            Step::Reset(k) => {
                core.reset_at(KEYS[*k], t).unwrap();
                block(redis.reset(KEYS[*k])).unwrap();
            }
            Step::Many(reqs) => {
                let reqs: Vec<(&str, u64)> = reqs.iter().map(|(k, c)| (KEYS[*k], *c)).collect();
                let want: Vec<_> = reqs.iter().map(|(k, c)| entries_of(&core.allow_at(*k, *c, t).unwrap())).collect();
                let got: Vec<_> = block(redis.allow_many_at(&reqs, t)).unwrap().iter().map(entries_of_redis).collect();
                prop_assert_eq!(got, want, "step {} {:?}", i, step);
            }
        }
    }
    Ok(())
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

/// 100 tasks on 4 connections race on a bucket of 50 (refill: one token an
/// hour): exactly 50 pass.
#[test]
fn hundred_tasks_on_four_connections_get_exactly_the_burst() {
    let rule = Rule::token_bucket(Quota::new(50, 1.0 / 3600.0).unwrap());
    let prefix = support::prefix("race");
    let granted = block(async {
        let mut limiters = Vec::new();
        for _ in 0..4 {
            let conn = ConnectionManager::new(redis::Client::open(support::url()).unwrap()).await.unwrap();
            let limits = Limits::single(rule).unwrap().with_prefix(prefix.clone()).unwrap();
            limiters.push(RedisLimiter::new(conn, limits, options()));
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
            std::process::Command::new(env!("CARGO_BIN_EXE_race_worker"))
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
    // Every grant took its cost from both limits, and nothing else did.
    assert_eq!(spent, 20 - window.remaining);
    assert_eq!(spent, 30 - bucket.remaining);
    assert!(window.remaining <= 1, "the window is (nearly) used up: {window:?}");
}

// -------------------------------------------------------- script and TTLs

#[test]
fn calls_survive_a_script_flush() {
    let l = limiter("noscript", &[("limit", Rule::parse("5/s").unwrap())]);
    assert!(block(l.allow_at("k", 1, 1_000_000 * US)).unwrap().allowed());
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut support::conn()).unwrap();
    let d = block(l.allow_at("k", 1, 1_000_000 * US)).unwrap();
    assert_eq!(d.decision.remaining, 3, "the call ran once after the reload");
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut support::conn()).unwrap();
    let ds = block(l.allow_many_at(&[("k", 1), ("k", 1), ("j", 1)], 1_000_000 * US)).unwrap();
    let left: Vec<u64> = ds.iter().map(|d| d.decision.remaining).collect();
    assert_eq!(left, [2, 1, 4], "each batch call ran exactly once");
}

#[test]
fn keys_expire_when_full_again_and_denials_write_nothing() {
    // T = 6 s: three tokens spent at the server's time refill in 18 s (long
    // enough that the key is still there when a loaded machine reads it).
    let limits = Limits::single(Rule::parse("10/min").unwrap()).unwrap().with_prefix(support::prefix("ttl")).unwrap();
    let key = limits.key(b"k");
    let l = RedisLimiter::new(manager(), limits, options());
    assert!(block(l.allow_n("k", 3)).unwrap().allowed());
    let mut c = support::conn();
    let pttl: i64 = c.pttl(&key).unwrap();
    assert!(pttl > 0 && pttl <= 18_000, "PTTL {pttl}");
    // A bucket drained for a day keeps its key for a day.
    let day = Limits::single(Rule::parse("2/d").unwrap()).unwrap().with_prefix(support::prefix("ttl")).unwrap();
    let dkey = day.key(b"k");
    let l = RedisLimiter::new(manager(), day, options());
    assert!(block(l.allow_n("k", 2)).unwrap().allowed());
    let pttl: i64 = c.pttl(&dkey).unwrap();
    assert!(pttl > 86_400_000 - 60_000 && pttl <= 86_400_000, "PTTL {pttl}");
    let before: Vec<(String, String)> = c.hgetall(&dkey).unwrap();
    let d = block(l.allow("k")).unwrap();
    assert!(!d.allowed() && d.decision.retry_after > Duration::ZERO);
    let after: Vec<(String, String)> = c.hgetall(&dkey).unwrap();
    assert_eq!(before, after, "a denial writes nothing");
    // Refunding everything leaves a full bucket: the key lives 1 ms more.
    block(l.refund("k", 2)).unwrap();
    let pttl: i64 = c.pttl(&dkey).unwrap();
    assert!(pttl <= 1, "PTTL {pttl}");
    // A fixed window's key lives to the end of its window: 45 s at 15 s in,
    // at least the floor.
    let minute = Limits::single(Rule::fixed_window(Rate::new(5, Duration::from_secs(60)).unwrap()).unwrap()).unwrap();
    let minute = minute.with_prefix(support::prefix("ttl")).unwrap();
    let mkey = minute.key(b"k");
    let l = RedisLimiter::new(manager(), minute.clone(), options());
    let t = (28_333_333 * 60 + 15) * 1_000_000 * US; // a Unix time, 15 s into a minute
    assert!(block(l.allow_at("k", 2, t)).unwrap().allowed());
    let pttl: i64 = c.pttl(&mkey).unwrap();
    assert!(pttl > 44_000 && pttl <= 45_000, "PTTL {pttl}");
    let floored = RedisLimiter::new(manager(), minute.with_ttl_floor(Duration::from_secs(100)), options());
    assert!(block(floored.allow_at("k", 1, t)).unwrap().allowed());
    let pttl: i64 = c.pttl(&mkey).unwrap();
    assert!(pttl > 99_000 && pttl <= 100_000, "PTTL {pttl}");
    let d = block(floored.peek_at("k", 2, t)).unwrap();
    assert_eq!((d.allowed(), d.decision.remaining), (true, 0), "three of five spent, two asked");
}

#[test]
fn reset_forgets_and_peek_changes_nothing() {
    let l = limiter("reset", &[("limit", Rule::parse("2/h").unwrap())]);
    let t = 5_000_000 * US;
    assert!(block(l.allow_at("k", 2, t)).unwrap().allowed());
    for _ in 0..3 {
        let d = block(l.peek_at("k", 1, t)).unwrap();
        assert!(!d.allowed());
        assert_eq!(d.decision.retry_after, Duration::from_secs(1800));
    }
    block(l.reset("k")).unwrap();
    assert_eq!(block(l.peek_at("k", 0, t)).unwrap().decision.remaining, 2);
}

#[test]
fn allow_many_is_one_pipeline_in_request_order() {
    let l = limiter("many", &[("limit", Rule::parse("3/h").unwrap())]);
    let reqs: Vec<(String, u64)> = (0..16).map(|i| (format!("k{}", i % 4), 1)).collect();
    let ds = block(l.allow_many(&reqs)).unwrap();
    let allowed: Vec<bool> = ds.iter().map(MultiDecision::allowed).collect();
    let want: Vec<bool> = (0..16).map(|i| i / 4 < 3).collect();
    assert_eq!(allowed, want);
    // An invalid request fails the whole batch, naming it; nothing changes.
    let bad = [("k0", 1), ("k1", 4)];
    let err = block(l.allow_many(&bad)).unwrap_err();
    assert!(matches!(err, Error::Invalid(ratomic::Error::InvalidRequest { index: 1, .. })), "{err}");
    assert_eq!(block(l.peek("k0", 0)).unwrap().decision.remaining, 0);
}

#[test]
fn acquire_waits_out_retry_after_within_its_deadline() {
    // A token an hour: the second call's wait is beyond its 1 ms deadline
    // however long the machine stalls between the two.
    let hourly = limiter("acquire-hourly", &[("limit", Rule::parse("1/h").unwrap())]);
    assert!(block(hourly.acquire("k", 1, Duration::ZERO)).unwrap().is_some());
    assert!(block(hourly.acquire("k", 1, Duration::from_millis(1))).unwrap().is_none(), "the wait is ~1 h");
    // A token every 2 s: drained, then waited for within the deadline.
    let l = limiter("acquire", &[("limit", Rule::parse("1/2s").unwrap())]);
    assert!(block(l.acquire("k", 1, Duration::ZERO)).unwrap().is_some());
    let d = block(l.acquire("k", 1, Duration::from_secs(10))).unwrap().expect("granted after waiting");
    assert!(d.allowed());
}

// ------------------------------------------------------------- bad input

#[test]
fn bad_input_gets_the_in_memory_errors_and_sends_nothing() {
    let server = support::Server::start();
    let limits = Limits::single(Rule::parse("5/s").unwrap()).unwrap();
    let l = BlockingRedisLimiter::connect(&server.url(), limits, options()).unwrap();
    let core = ratomic::TokenBucket::new(Quota::parse("5/s").unwrap());
    let calls = || evalsha_calls(&server);
    assert_eq!(l.allow_n("k", 6).unwrap_err(), Error::Invalid(core.allow_n("k", 6).unwrap_err()));
    let long = vec![b'x'; 2000];
    assert_eq!(l.allow_n(&long, 1).unwrap_err(), Error::Invalid(core.allow_n(&long[..], 1).unwrap_err()));
    assert_eq!(l.allow_at("k", 1, u64::MAX).unwrap_err(), Error::Invalid(core.allow_at("k", 1, u64::MAX).unwrap_err()));
    assert!(l.peek("k", 9).is_err());
    assert_eq!(calls(), 0, "nothing reached the server");
    assert!(l.allow_n("k", 1).unwrap().allowed());
    assert!(calls() >= 1, "a valid call does");
}

// ----------------------------------------------------------------- faults

fn fault_limits(name: &str) -> Limits {
    Limits::single(Rule::parse("2/h").unwrap()).unwrap().with_prefix(support::prefix(name)).unwrap()
}

/// A killed server refuses a call at once, so the failure tests wait for
/// Redis as long as a loaded machine may need (a call that should reach it,
/// before the kill or after the restart, must not time out on a stall).
fn policy(policy: FailurePolicy) -> Options {
    Options { policy, breaker_cooldown: Duration::from_millis(50), ..options() }
}

/// A stopped server (SIGSTOP) answers nothing: only the timeout ends a call
/// to it, so tests of one wait this long (each such call costs it), and
/// calls that should reach Redis get that long to do so on a loaded machine.
const STOPPED_TIMEOUT: Duration = Duration::from_secs(3);

/// Peeks at `key` until Redis answers (at most ~10 s of polling).
fn until_redis(l: &RedisLimiter, key: &str) -> MultiDecision {
    for _ in 0..1000 {
        if let Ok(d) = block(l.peek(key, 0)) {
            if d.source == Source::Redis {
                return d;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the limiter never reached Redis again");
}

/// Redis killed mid-run and restarted: while it is down each policy answers
/// as chosen (the fallback within its own limits), and afterwards calls
/// reach the new server (which has forgotten the script: NOSCRIPT path).
#[test]
fn a_killed_server_gets_the_policy_then_calls_recover_after_restart() {
    let mut server = support::Server::start();
    let connect = |p| block(RedisLimiter::connect(&server.url(), fault_limits("restart"), policy(p))).unwrap();
    let fallback = connect(FailurePolicy::Fallback);
    let open = connect(FailurePolicy::FailOpen);
    let closed = connect(FailurePolicy::FailClosed { retry_after: Duration::from_secs(3) });
    let strict = connect(FailurePolicy::ReturnError);
    for l in [&fallback, &open, &closed, &strict] {
        assert_eq!(block(l.allow("up")).unwrap().source, Source::Redis);
    }

    server.kill();
    // The fallback decides locally, by the same rule: 2 of 5 pass.
    let local: Vec<MultiDecision> = (0..5).map(|_| block(fallback.allow("down")).unwrap()).collect();
    assert!(local.iter().all(|d| d.source == Source::Fallback), "{local:?}");
    assert_eq!(local.iter().filter(|d| d.allowed()).count(), 2);
    let d = block(open.allow("down")).unwrap();
    assert!(d.allowed() && d.source == Source::Policy);
    let d = block(closed.allow("down")).unwrap();
    assert!(!d.allowed() && d.source == Source::Policy);
    assert_eq!(d.decision.retry_after, Duration::from_secs(3));
    let err = block(strict.allow("down")).unwrap_err();
    assert!(err.is_backend(), "{err:?}");
    // Bad input is still an error, never a policy decision.
    assert!(matches!(block(open.allow_n("down", 3)), Err(Error::Invalid(_))));

    server.restart();
    for l in [&fallback, &open, &closed, &strict] {
        assert_eq!(until_redis(l, "after").decision.remaining, 2);
    }
    // The restarted server starts empty: 2 per key again, exactly.
    let passed = (0..4).filter(|_| block(strict.allow("after")).unwrap().allowed()).count();
    assert_eq!(passed, 2);
}

/// A paused server (SIGSTOP): calls time out, then work again after SIGCONT.
#[test]
fn a_paused_server_times_out_then_recovers() {
    let server = support::Server::start();
    let o = Options { timeout: STOPPED_TIMEOUT, ..policy(FailurePolicy::ReturnError) };
    let l = block(RedisLimiter::connect(&server.url(), fault_limits("pause"), o)).unwrap();
    assert!(block(l.allow("k")).unwrap().allowed());
    server.signal("-STOP");
    let err = block(l.allow("k")).unwrap_err();
    assert!(matches!(err, Error::Timeout | Error::Connection(_)), "{err:?}");
    server.signal("-CONT");
    // The timed-out call was already sent: the server may have run it when
    // it woke. Whichever, the bucket of 2 never passes more than 2.
    let left = until_redis(&l, "k").decision.remaining;
    assert!(left <= 1, "{left}");
    let later = (0..3).filter(|_| block(l.allow("k")).unwrap().allowed()).count() as u64;
    assert_eq!(later, left);
}

#[test]
fn wrong_urls_refused_connections_and_servers_that_are_not_redis_are_clear_errors() {
    let limits = || fault_limits("urls");
    let o = policy(FailurePolicy::ReturnError);
    let err = BlockingRedisLimiter::connect("http://127.0.0.1:1/", limits(), o).unwrap_err();
    assert!(matches!(err, Error::Connection(_)), "{err:?}");
    let err = BlockingRedisLimiter::connect("not a url", limits(), o).unwrap_err();
    assert!(matches!(err, Error::Connection(_)), "{err:?}");
    let refused = format!("redis://127.0.0.1:{}/", support::free_port());
    let err = BlockingRedisLimiter::connect(&refused, limits(), o).unwrap_err();
    assert!(matches!(err, Error::Connection(_) | Error::Timeout), "{err:?}");
    // An HTTP server, not Redis: it answers garbage and hangs up.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let http = std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming().take(3) {
            let mut s = stream.unwrap();
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n");
        }
    });
    let err = BlockingRedisLimiter::connect(&format!("redis://127.0.0.1:{port}/"), limits(), o).unwrap_err();
    assert!(err.is_backend(), "{err:?}");
    drop(http);
}

// ---------------------------------------------------------------- cluster

/// On a 3-node cluster: keys spread over the nodes, each key's limits stay
/// in one hash (one slot), multi-limit calls are all or nothing, batches
/// over keys on different nodes work, and a script flush on every node is
/// survived.
#[test]
fn a_three_node_cluster_spreads_keys_and_keeps_each_keys_limits_in_one_slot() {
    let urls = support::cluster_urls();
    let url_refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let rules = [
        ("burst", Rule::token_bucket(Quota::new(3, 1.0 / 3600.0).unwrap())),
        ("window", Rule::sliding_window(Rate::parse("2/h").unwrap()).unwrap()),
    ];
    let limits = Limits::new(rules).unwrap().with_prefix(support::prefix("cluster")).unwrap();
    let l = block(RedisLimiter::connect_cluster(&url_refs, limits.clone(), options())).unwrap();

    // Which node owns which slot range.
    let mut plain = redis::Client::open(urls[0].as_str()).unwrap().get_connection().unwrap();
    let slots: Vec<(i64, i64, Vec<redis::Value>)> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut plain).unwrap();
    let node_of = |slot: u16| {
        slots.iter().position(|(lo, hi, _)| (*lo..=*hi).contains(&i64::from(slot))).expect("every slot is served")
    };
    let keys: Vec<String> = (0..24).map(|i| format!("user:{i}")).collect();
    let nodes: std::collections::HashSet<usize> =
        keys.iter().map(|k| node_of(ratomic_redis::keys::hash_slot(&limits.key(k.as_bytes())))).collect();
    assert_eq!(nodes.len(), 3, "24 keys land on all 3 nodes");

    // All or nothing per key: the window (2) is the tightest.
    for k in &keys {
        let passed = (0..4).filter(|_| block(l.allow(k)).unwrap().allowed()).count();
        assert_eq!(passed, 2, "{k}");
        let d = block(l.peek(k, 0)).unwrap();
        assert_eq!((d.get("burst").unwrap().remaining, d.get("window").unwrap().remaining), (1, 0));
    }
    // Each key's state is one hash on the node that owns its slot.
    for (i, url) in urls.iter().enumerate() {
        let mut c = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
        for k in &keys {
            let rk = limits.key(k.as_bytes());
            let slot = ratomic_redis::keys::hash_slot(&rk);
            let owner = slots.iter().position(|(lo, hi, _)| (*lo..=*hi).contains(&i64::from(slot))).unwrap();
            let node_port = match &slots[owner].2[1] {
                redis::Value::Int(p) => *p,
                other => panic!("{other:?}"),
            };
            if url.ends_with(&format!(":{node_port}/")) {
                let n: i64 = redis::cmd("HLEN").arg(&rk).query(&mut c).unwrap();
                assert_eq!(n, 2, "both limits of {k} in one hash on node {i}");
            }
        }
    }

    // A batch over keys on all three nodes, after every node forgot the script.
    for url in &urls {
        let mut c = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
    }
    let fresh: Vec<(String, u64)> = (0..12).map(|i| (format!("batch:{i}"), 1)).collect();
    let ds = block(l.allow_many(&fresh)).unwrap();
    assert!(ds.iter().all(|d| d.allowed() && d.decision.remaining == 1), "{ds:?}");
}

// ------------------------------------------- deny cache and circuit breaker

fn evalsha_calls(server: &support::Server) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(&mut server.conn()).unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .map(|l| l.split(['=', ',']).nth(1).unwrap().parse().unwrap())
        .unwrap_or(0)
}

/// A key Redis denied is answered locally, for the same cost, until its
/// retry_after ends; a reset through the limiter forgets it.
#[test]
fn denied_keys_are_answered_locally_until_their_retry_after() {
    let server = support::Server::start();
    let l = block(RedisLimiter::connect(&server.url(), fault_limits("deny"), options())).unwrap();
    assert!(block(l.allow("k")).unwrap().allowed());
    assert!(block(l.allow("k")).unwrap().allowed());
    let denied = block(l.allow("k")).unwrap();
    assert!(!denied.allowed() && denied.source == Source::Redis);
    let before = evalsha_calls(&server);
    for _ in 0..100 {
        let d = block(l.allow("k")).unwrap();
        assert!(!d.allowed() && d.source == Source::DenyCache);
        assert!(d.decision.retry_after > Duration::ZERO && d.decision.retry_after <= denied.decision.retry_after);
    }
    assert_eq!(evalsha_calls(&server), before, "100 over-limit calls, no round trip");
    // Another cost, or an explicit time, asks Redis.
    assert_eq!(block(l.allow_n("k", 2)).unwrap().source, Source::Redis);
    assert_eq!(block(l.allow_at("k", 1, 1_000 * US)).unwrap().source, Source::Redis);
    block(l.reset("k")).unwrap();
    let d = block(l.allow("k")).unwrap();
    assert!(d.allowed() && d.source == Source::Redis);
    // Turned off, every call goes to Redis.
    let off = Options { deny_cache: 0, ..options() };
    let l = block(RedisLimiter::connect(&server.url(), fault_limits("nocache"), off)).unwrap();
    let sources: Vec<Source> = (0..4).map(|_| block(l.allow("k")).unwrap().source).collect();
    assert_eq!(sources, [Source::Redis; 4]);
}

/// After `breaker_threshold` failures in a row the policy answers without
/// calling Redis, even once the server is back, until the cool-down ends.
#[test]
fn the_breaker_stops_calling_a_failing_server_for_its_cooldown() {
    let mut server = support::Server::start();
    let o = Options {
        policy: FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) },
        breaker_threshold: 2,
        breaker_cooldown: Duration::from_secs(3600),
        deny_cache: 0,
        ..options()
    };
    let l = block(RedisLimiter::connect(&server.url(), fault_limits("breaker"), o)).unwrap();
    assert_eq!(block(l.allow("k")).unwrap().source, Source::Redis);
    server.kill();
    for _ in 0..2 {
        assert_eq!(block(l.allow("k")).unwrap().source, Source::Policy);
    }
    assert!(l.breaker_open());
    server.restart();
    let calls = evalsha_calls(&server);
    for _ in 0..20 {
        let d = block(l.allow("k")).unwrap();
        assert!(!d.allowed() && d.source == Source::Policy);
    }
    assert_eq!(evalsha_calls(&server), calls, "an open breaker sends nothing");
    // Bad input is still refused as bad input.
    assert!(matches!(block(l.allow_n("k", 9)), Err(Error::Invalid(_))));
}

/// A stopped server (SIGSTOP): one call that took the breaker's failure
/// time opens it, whatever `breaker_threshold` says, so later calls are
/// answered at once instead of each waiting out its timeout.
#[test]
fn a_failure_that_took_the_failure_time_opens_the_breaker_at_once() {
    let server = support::Server::start();
    let o = Options {
        timeout: STOPPED_TIMEOUT,
        policy: FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) },
        breaker_threshold: 100,
        breaker_cooldown: Duration::from_secs(3600),
        breaker_failure_time: STOPPED_TIMEOUT - Duration::from_millis(500),
        deny_cache: 0,
        ..Options::default()
    };
    let l = block(RedisLimiter::connect(&server.url(), fault_limits("breaker-time"), o)).unwrap();
    assert_eq!(block(l.allow("k")).unwrap().source, Source::Redis);
    let before = evalsha_calls(&server);
    server.signal("-STOP");
    assert_eq!(block(l.allow("k")).unwrap().source, Source::Policy);
    assert!(l.breaker_open(), "one timeout of 3 s took the 2.5 s allowed");
    for _ in 0..20 {
        assert_eq!(block(l.allow("k")).unwrap().source, Source::Policy);
    }
    server.signal("-CONT");
    // The one timed-out call was sent (the server may run it on waking); no other.
    assert!(evalsha_calls(&server) <= before + 1, "{} after {before}", evalsha_calls(&server));
}

/// A cluster node going away: keys on the surviving nodes are still decided
/// by Redis; keys on the dead node get the failure policy, within the
/// timeout, and never a panic or a hang.
#[test]
fn a_cluster_node_going_away_leaves_the_others_serving() {
    let mut nodes = support::own_cluster();
    let urls: Vec<String> = nodes.iter().map(support::Server::url).collect();
    let url_refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    // A call for the dead node ends by the timeout (the cluster client does
    // not give up on the node by itself): each costs STOPPED_TIMEOUT, so 3
    // of them are made. The calls for the others get as long to answer.
    let o = Options {
        timeout: STOPPED_TIMEOUT,
        policy: FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) },
        breaker_threshold: 0,
        deny_cache: 0,
        ..options()
    };
    let limits = fault_limits("node-gone");
    let l = block(RedisLimiter::connect_cluster(&url_refs, limits.clone(), o)).unwrap();
    let keys: Vec<String> = (0..30).map(|i| format!("user:{i}")).collect();
    for k in &keys {
        assert_eq!(block(l.allow(k)).unwrap().source, Source::Redis);
    }
    // Which node serves which key.
    let slots: Vec<(i64, i64, Vec<redis::Value>)> =
        redis::cmd("CLUSTER").arg("SLOTS").query(&mut nodes[0].conn()).unwrap();
    let port_of = |k: &str| {
        let slot = i64::from(ratomic_redis::keys::hash_slot(&limits.key(k.as_bytes())));
        let (_, _, node) = slots.iter().find(|(lo, hi, _)| (*lo..=*hi).contains(&slot)).unwrap();
        match &node[1] {
            redis::Value::Int(p) => *p as u16,
            other => panic!("{other:?}"),
        }
    };
    let gone = nodes[2].port;
    nodes[2].kill();
    let (mut served, mut refused) = (0, 0);
    for k in &keys {
        if port_of(k) == gone && refused == 3 {
            continue;
        }
        let d = block(l.allow(k)).unwrap();
        if port_of(k) == gone {
            assert_eq!(d.source, Source::Policy, "{k} lives on the dead node");
            assert!(!d.allowed());
            refused += 1;
        } else {
            assert_eq!(d.source, Source::Redis, "{k} lives on a surviving node");
            assert!(d.allowed(), "second call on a bucket of 2");
            served += 1;
        }
    }
    assert!(served > 0 && refused > 0, "{served} served, {refused} refused");
}

// ---------------------------------------------------------------- leases

/// Checks that in every interval of stamps `[a, b]` (µs) the tokens granted
/// are at most `B + (b − a)/T`, exactly (the suffix-maximum scan of core's
/// stress tests, one token a grant).
fn check_token_bucket(what: &str, stamps: &mut [u64], burst: u64, t: u64) {
    stamps.sort_unstable();
    let n = stamps.len();
    let t = i128::from(t);
    // suffix[i] = max over j ≥ i of ((j + 1)·T − t_j).
    let mut suffix = vec![i128::MIN; n + 1];
    for j in (0..n).rev() {
        suffix[j] = suffix[j + 1].max((j as i128 + 1) * t - i128::from(stamps[j]));
    }
    for i in 0..n {
        let worst = suffix[i] - i as i128 * t + i128::from(stamps[i]); // (count)·T − (t_j − t_i)
        assert!(
            worst <= i128::from(burst) * t,
            "{what}: more than B + (b − a)/T granted in an interval from {}",
            stamps[i]
        );
    }
}

struct LeaseRun {
    /// Each key's grant stamps.
    stamps: std::collections::HashMap<String, Vec<u64>>,
    local: u64,
    trips: u64,
    errors: u64,
}

impl LeaseRun {
    fn granted(&self) -> usize {
        self.stamps.values().map(Vec::len).sum()
    }

    /// Every key's grants, checked in every interval.
    fn check(&mut self, what: &str, burst: u64, t: u64) {
        for (key, stamps) in &mut self.stamps {
            check_token_bucket(&format!("{what}, key {key}"), stamps, burst, t);
        }
    }
}

/// A lease race: `processes` workers of `threads` threads, `calls` calls
/// each, on a bucket of `burst` refilling `per_sec` a second: on one hot
/// key, or on `keys` keys picked at random.
struct Race {
    processes: usize,
    threads: u64,
    calls: u64,
    burst: u64,
    per_sec: u64,
    keys: Option<u64>,
}

/// What happens to a race midway, once the first worker has printed this
/// many grants.
enum Midway<'a> {
    Nothing,
    /// SIGKILL the first worker: its leases are neither spent nor given back.
    KillWorker(usize),
    /// SIGKILL the server and start it again on the same port (the workers'
    /// calls fail meanwhile; they go on).
    RestartServer(usize, &'a mut support::Server),
}

/// Runs a race's workers against `url`.
fn lease_race(url: &str, prefix: &str, mode: &str, race: Race, midway: Midway<'_>) -> LeaseRun {
    use std::io::{BufRead, BufReader};
    let mut workers: Vec<_> = (0..race.processes)
        .map(|_| {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_lease_worker"));
            cmd.args([url, prefix, mode]);
            cmd.args([race.threads, race.calls, race.burst, race.per_sec].map(|v| v.to_string()));
            if let Some(keys) = race.keys {
                cmd.arg(keys.to_string());
            }
            cmd.stdout(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    // Every worker's output read as it comes (none blocks on a full pipe);
    // the first's reader says when it has seen `at` grants.
    let at = match &midway {
        Midway::Nothing => usize::MAX,
        Midway::KillWorker(n) | Midway::RestartServer(n, _) => *n,
    };
    let (reached, midway_point) = std::sync::mpsc::channel::<()>();
    let readers: Vec<_> = workers
        .iter_mut()
        .enumerate()
        .map(|(i, w)| {
            let out = w.stdout.take().unwrap();
            let reached = reached.clone();
            std::thread::spawn(move || {
                let mut lines = Vec::new();
                for line in BufReader::new(out).lines() {
                    let line = line.unwrap();
                    if line.starts_with("G ") {
                        lines.push(line);
                        if i == 0 && lines.len() == at {
                            let _ = reached.send(());
                        }
                    } else {
                        lines.push(line);
                    }
                }
                lines
            })
        })
        .collect();
    drop(reached);
    let killing = matches!(midway, Midway::KillWorker(_));
    if midway_point.recv().is_ok() {
        match midway {
            Midway::KillWorker(_) => workers[0].kill().unwrap(),
            Midway::RestartServer(_, server) => {
                server.kill();
                server.restart();
            }
            Midway::Nothing => {}
        }
    }
    let mut run = LeaseRun { stamps: Default::default(), local: 0, trips: 0, errors: 0 };
    for (i, (mut w, reader)) in workers.into_iter().zip(readers).enumerate() {
        let status = w.wait().unwrap();
        let killed = i == 0 && killing;
        assert!(status.success() || killed, "worker {i}: {status}");
        for line in reader.join().unwrap() {
            let words: Vec<&str> = line.split(' ').collect();
            match words[..] {
                ["G", key, stamp] => run.stamps.entry(key.to_owned()).or_default().push(stamp.parse().unwrap()),
                ["S", local, trips, errors] => {
                    run.local += local.parse::<u64>().unwrap();
                    run.trips += trips.parse::<u64>().unwrap();
                    run.errors += errors.parse::<u64>().unwrap();
                }
                _ => panic!("unexpected worker output {line:?}"),
            }
        }
    }
    run
}

/// Four processes of four threads each on one hot key, leases on, every
/// call stamped with the host's monotonic clock (one timeline for all of
/// them): the grants conform to the bucket in every interval, exactly; and
/// most calls are answered from leases.
#[test]
fn leases_from_four_processes_never_over_grant_in_any_interval() {
    // 50 tokens, 20,000 a second (T = 50 µs, whole µs as Redis needs).
    let mut run = lease_race(
        &support::url(),
        &support::prefix("lease-caller"),
        "caller",
        Race { processes: 4, threads: 4, calls: 3_000, burst: 50, per_sec: 20_000, keys: None },
        Midway::Nothing,
    );
    assert!(run.granted() > 50, "granted more than the burst over time: {}", run.granted());
    run.check("four processes, leases", 50, 50);
    assert!(run.local > 0, "some calls were answered from a lease ({} local, {} round trips)", run.local, run.trips);
}

/// The same with one process killed (SIGKILL) mid-run, holding a lease: the
/// survivors and the fleet stay within the bound (the killed process's
/// leased tokens are lost until their time passes, never granted twice).
#[test]
fn leases_with_a_process_killed_mid_run_never_over_grant() {
    let mut run = lease_race(
        &support::url(),
        &support::prefix("lease-kill"),
        "caller",
        Race { processes: 4, threads: 2, calls: 3_000, burst: 50, per_sec: 20_000, keys: None },
        Midway::KillWorker(20),
    );
    run.check("a process killed", 50, 50);
}

/// Leases at the server's time: over the whole run, the fleet is granted at
/// most B + (elapsed)/T, elapsed read from the server before and after.
#[test]
fn leases_at_the_server_s_time_never_over_grant_over_a_run() {
    let time = || {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut support::conn()).unwrap();
        s * 1_000_000 + us
    };
    let start = time();
    let run = lease_race(
        &support::url(),
        &support::prefix("lease-server"),
        "server",
        Race { processes: 4, threads: 4, calls: 2_000, burst: 50, per_sec: 20_000, keys: None },
        Midway::Nothing,
    );
    let elapsed = time() - start;
    let most = 50 + elapsed / 50;
    assert!(run.granted() as u64 <= most, "{} granted in {elapsed} µs, at most {most}", run.granted());
    assert!(run.local > 0, "some calls were answered from a lease ({} local, {} round trips)", run.local, run.trips);
}

/// Four processes of two threads on 1,000 keys (each call picks one at
/// random), leases on, every call stamped with the host's monotonic clock:
/// every key's grants conform to its bucket in every interval.
#[test]
fn leases_from_four_processes_on_a_thousand_keys_never_over_grant() {
    // 5 tokens, 100 a second (T = 10 ms) per key.
    let mut run = lease_race(
        &support::url(),
        &support::prefix("lease-keys"),
        "caller",
        Race { processes: 4, threads: 2, calls: 4_000, burst: 5, per_sec: 100, keys: Some(1_000) },
        Midway::Nothing,
    );
    assert!(run.stamps.len() > 900, "most keys were granted: {}", run.stamps.len());
    run.check("four processes, 1,000 keys, leases", 5, 10_000);
    assert!(run.local > 0, "some calls were answered from a lease ({} local, {} round trips)", run.local, run.trips);
}

/// A hot key and 1,000 keys, with the server SIGKILLed and restarted
/// mid-run: persisted (every write on disk before its reply), it comes back
/// with every bucket and lease fence it answered for, and the grants — the
/// leases' held through the restart, Redis's before and after — still
/// conform in every interval. The buckets refill slower than the server
/// restarts (1 s and 5 s from empty to full), so a server that forgot them
/// (no persistence) would grant a full burst again: this fails then.
#[test]
fn leases_across_a_redis_restart_never_over_grant() {
    let mut server = support::Server::start_persistent();
    let url = server.url();
    let mut hot = lease_race(
        &url,
        &support::prefix("lease-restart-hot"),
        "caller",
        Race { processes: 4, threads: 2, calls: 3_000, burst: 100, per_sec: 100, keys: None },
        Midway::RestartServer(30, &mut server),
    );
    assert!(hot.errors > 0, "the calls made while the server was down failed");
    assert!(hot.granted() > 30);
    hot.check("a hot key across a restart", 100, 10_000);
    let mut keys = lease_race(
        &url,
        &support::prefix("lease-restart-keys"),
        "caller",
        Race { processes: 4, threads: 2, calls: 4_000, burst: 5, per_sec: 1, keys: Some(1_000) },
        Midway::RestartServer(1_000, &mut server),
    );
    assert!(keys.errors > 0, "the calls made while the server was down failed");
    keys.check("1,000 keys across a restart", 5, 1_000_000);
}

fn leasing(name: &str, rule: Rule) -> RedisLimiter {
    let limits = Limits::single(rule).unwrap().with_prefix(support::prefix(name)).unwrap();
    RedisLimiter::try_new(manager(), limits, Options { lease: ratomic_redis::Lease::Auto, ..options() }).unwrap()
}

/// A lease's unused tokens go back with `give_back`; while it is held, a
/// refund or a reset through another limiter never frees the slots it
/// holds; and a batch, a peek or a limiter without leases see the fleet's
/// state.
#[test]
fn leases_are_given_back_and_refunds_and_resets_leave_their_slots_alone() {
    // 40 tokens, one an hour: nothing refills during the test. Leases of at
    // most 40 / 8 = 5 tokens.
    let rule = Rule::token_bucket(Quota::new(40, 1.0 / 3600.0).unwrap());
    let a = leasing("lease-give", rule);
    let other = RedisLimiter::new(manager(), a.limits().clone(), options());
    let remaining = || block(other.peek("k", 0)).unwrap().decision.remaining;
    assert_eq!(block(a.allow("k")).unwrap().source, Source::Redis, "a key seen once takes no lease");
    let d = block(a.allow("k")).unwrap();
    assert_eq!(d.source, Source::Redis);
    // The second call took a lease of 2 (a key's first lease; half of the
    // 38 left would allow 19): the fleet has 36 left.
    assert_eq!(remaining(), 36);
    assert_eq!(a.driver().leases_held(), 1);
    // A refund elsewhere cannot move the bucket back into the lease.
    block(other.refund("k", 5)).unwrap();
    assert_eq!(remaining(), 36, "a refund stops at the lease's end");
    // Nor can a reset.
    block(other.reset("k")).unwrap();
    assert_eq!(remaining(), 36, "a reset keeps what the leases hold");
    // One of the lease's tokens is granted locally; the other goes back.
    assert_eq!(block(a.allow("k")).unwrap().source, Source::Lease);
    assert_eq!(block(a.give_back()).unwrap(), 1);
    assert_eq!(remaining(), 37);
    assert_eq!(a.driver().leases_held(), 0);
    // A lease given back when someone has been granted since cannot be.
    let _ = block(a.allow("k")).unwrap(); // takes a lease again
    assert_eq!(a.driver().leases_held(), 1);
    let left = remaining();
    assert!(block(other.allow("k")).unwrap().allowed());
    assert_eq!(block(a.give_back()).unwrap(), 0, "a slot granted after the lease: nothing to give back");
    assert_eq!(remaining(), left - 1);
}

/// An explicit lease size with a window limit is refused at construction;
/// `Lease::Auto` takes no lease there.
#[test]
fn leases_are_refused_for_windows_when_asked_for_explicitly() {
    let limits = Limits::new([("w", Rule::fixed_window(Rate::parse("10/s").unwrap()).unwrap())]).unwrap();
    let err =
        RedisLimiter::try_new(manager(), limits.clone(), Options { lease: ratomic_redis::Lease::Max(4), ..options() })
            .unwrap_err();
    assert!(err.to_string().contains("token bucket"), "{err}");
    let auto =
        RedisLimiter::try_new(manager(), limits, Options { lease: ratomic_redis::Lease::Auto, ..options() }).unwrap();
    assert_eq!(auto.driver().lease_max(), None);
}

// ---------------------------------------------------------------- coalescing

/// A server's count of `name` in `INFO stats` (e.g. `total_reads_processed`:
/// the read events it handled, one per round trip that reached it).
fn stat(conn: &mut redis::Connection, name: &str) -> u64 {
    stat_in(conn, "stats", name)
}

fn stat_in(conn: &mut redis::Connection, section: &str, name: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg(section).query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(':')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in INFO {section}"))
}

/// `INFO commandstats`: the `EVALSHA` calls the server ran.
fn evalshas(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|v| v.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

struct Burst {
    granted: usize,
    errors: Vec<Error>,
    reads: u64,
    evalshas: u64,
}

/// 1,000 calls at once on a bucket of 500 on `server`, through one limiter
/// with the default options but `lease` and a timeout a loaded machine
/// cannot reach (50 ms could pass during a stall and fail calls): what came
/// back, and what the server counted.
fn thousand_at_once(server: &support::Server, lease: ratomic_redis::Lease) -> Burst {
    let limits = Limits::single(Rule::token_bucket(Quota::new(500, 1.0 / 3600.0).unwrap()))
        .unwrap()
        .with_prefix(support::prefix("coalesce"))
        .unwrap();
    let l = block(RedisLimiter::connect(&server.url(), limits, Options { lease, ..options() })).unwrap();
    assert!(block(l.peek("warm-up", 1)).unwrap().allowed(), "the script is loaded");
    let mut admin = server.conn();
    let (reads, calls) = (stat(&mut admin, "total_reads_processed"), evalshas(&mut admin));
    let outcomes: Vec<Result<bool, Error>> = block(async {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..1_000 {
            let l = l.clone();
            set.spawn(async move { l.allow("hot").await.map(|d| d.allowed()) });
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            out.push(r.unwrap());
        }
        out
    });
    let evalshas = evalshas(&mut admin) - calls;
    Burst {
        granted: outcomes.iter().filter(|r| matches!(r, Ok(true))).count(),
        errors: outcomes.into_iter().filter_map(Result::err).collect(),
        reads: stat(&mut admin, "total_reads_processed") - reads - 2, // less our two INFOs
        evalshas,
    }
}

/// 1,000 calls in flight at once on a bucket of 500, through one limiter
/// with the default options (but the timeout): exactly 500 granted, no
/// error, and the server counts far fewer round trips than calls, on one
/// connection. With leases, the calls that wait for a
/// round trip that brings their key a lease are answered from it: far
/// fewer script calls than decisions too.
#[test]
fn a_thousand_calls_in_flight_share_round_trips_and_get_exactly_the_burst() {
    let server = support::Server::start();
    let plain = thousand_at_once(&server, ratomic_redis::Lease::Off);
    assert!(plain.errors.is_empty(), "{} errors, e.g. {:?}", plain.errors.len(), plain.errors.first());
    assert_eq!(plain.granted, 500);
    assert!(plain.reads < 100, "{} round trips reached the server for 1,000 calls", plain.reads);
    let leased = thousand_at_once(&server, ratomic_redis::Lease::Auto);
    assert!(leased.errors.is_empty(), "{} errors, e.g. {:?}", leased.errors.len(), leased.errors.first());
    assert_eq!(leased.granted, 500);
    assert!(leased.evalshas < 100, "{} script calls for 1,000 decisions", leased.evalshas);
    // One key: each round trip carries at most its one lease call, however
    // the calls were scheduled — waiters are answered by the lease or the
    // deny cache, not sent one script call each when the bucket runs out.
    assert!(
        leased.evalshas <= leased.reads,
        "{} script calls in {} round trips on one key",
        leased.evalshas,
        leased.reads
    );
    let mut admin = server.conn();
    let clients = stat_in(&mut admin, "clients", "connected_clients");
    assert!(clients <= 3, "{clients} connections: one per limiter and this test's");
}

// ---------------------------------------------------------------- idle leases

/// What leases left idle cost the rest of a fleet, on one hot key.
#[derive(Debug)]
struct Idle {
    /// Grants the leasing processes made before going idle.
    workers: u64,
    /// Leases they held when idle (one per key and process at most).
    held: u64,
    /// Tokens the rest of the fleet (a limiter without leases) could then
    /// take, all at once.
    rest: u64,
    /// Limits the idle processes' give-backs returned tokens to, and the
    /// tokens the rest could take after them.
    given_back: u64,
    rest_after: u64,
}

/// `processes` real processes of two threads, `calls` calls each, take
/// leases (`Lease::Max(max)`, or `Lease::Auto` for `None`) on one hot key of
/// a bucket of `burst` that refills one token an hour (nothing refills and
/// no slot passes during the test: every token is accounted for), then go
/// idle holding them. The rest of the fleet takes every token it can; the
/// idle processes give their leases back (`give_first`: before that); the
/// rest takes again.
fn idle_leases(name: &str, processes: usize, calls: u64, burst: u64, max: Option<u64>, give_first: bool) -> Idle {
    use std::io::{BufRead, BufReader, Write};
    let prefix = support::prefix(name);
    let url = support::url();
    let mode = max.map_or_else(|| "idle".to_owned(), |m| format!("idle:{m}"));
    let mut workers: Vec<_> = (0..processes)
        .map(|_| {
            std::process::Command::new(env!("CARGO_BIN_EXE_lease_worker"))
                .args([&url, &prefix, &mode, "2", &calls.to_string(), &burst.to_string(), "0.0002777777777777778"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut outs: Vec<_> = workers.iter_mut().map(|w| BufReader::new(w.stdout.take().unwrap()).lines()).collect();
    let mut idle = Idle { workers: 0, held: 0, rest: 0, given_back: 0, rest_after: 0 };
    // Every worker's grants, up to the line that says it is idle.
    for out in &mut outs {
        loop {
            let line = out.next().expect("the worker goes idle").unwrap();
            match line.split(' ').collect::<Vec<_>>()[..] {
                ["G", ..] => idle.workers += 1,
                ["S", ..] => {}
                ["I", held] => {
                    idle.held += held.parse::<u64>().unwrap();
                    break;
                }
                _ => panic!("unexpected worker output {line:?}"),
            }
        }
    }
    type Lines = std::io::Lines<BufReader<std::process::ChildStdout>>;
    let give = |workers: &mut [std::process::Child], outs: &mut [Lines]| {
        let mut back = 0;
        for (w, out) in workers.iter_mut().zip(outs.iter_mut()) {
            writeln!(w.stdin.as_mut().unwrap(), "give").unwrap();
            let line = out.next().expect("the worker answers").unwrap();
            back += line.strip_prefix("B ").expect("B <given back>").parse::<u64>().unwrap();
        }
        back
    };
    let take_all = || {
        // A limiter of its own each time: its deny cache would answer the
        // second round from the first one's denial.
        let rule = Rule::token_bucket(Quota::new(burst, 1.0 / 3600.0).unwrap());
        let limits = Limits::single(rule).unwrap().with_prefix(prefix.as_str()).unwrap();
        let rest = RedisLimiter::new(manager(), limits, options());
        let mut n = 0;
        while block(rest.allow("hot")).unwrap().allowed() {
            n += 1;
        }
        n
    };
    if give_first {
        idle.given_back = give(&mut workers, &mut outs);
        idle.rest = take_all();
    } else {
        idle.rest = take_all();
        idle.given_back = give(&mut workers, &mut outs);
        idle.rest_after = take_all();
    }
    for mut w in workers {
        drop(w.stdin.take()); // end of input: the worker exits
        assert!(w.wait().unwrap().success());
    }
    idle
}

/// The price of leases, measured: processes that took leases on a hot key
/// and went idle withhold from the rest of the fleet at most `processes ×
/// max` tokens (`max` an eighth of the burst under `Lease::Auto`), and the
/// fleet together is never granted more than the bucket holds. A give-back
/// returns a lease's unused tokens only while nothing was granted on the
/// key after it (the bucket's state is one number: the last lease alone can
/// be taken back): given back before the rest takes, the last lease comes
/// back; after, none does, and its tokens wait for their slots' time.
#[test]
fn idle_leases_withhold_at_most_processes_times_the_largest_lease() {
    let (processes, burst) = (4u64, 4_000u64);
    for (max, bound) in [(None, processes * (burst / 8)), (Some(50), processes * 50)] {
        for give_first in [false, true] {
            let run = idle_leases("idle-lease", processes as usize, 150, burst, max, give_first);
            let withheld = burst - run.workers - run.rest;
            eprintln!(
                "idle leases: {processes} processes, burst {burst}, lease {}, give-back {}: {} granted to them, \
                 {} leases held, {} tokens withheld from the rest (bound {bound}), {} limits given back, \
                 {} more to the rest after",
                max.map_or_else(|| "auto".to_owned(), |m| m.to_string()),
                if give_first { "first" } else { "after" },
                run.workers,
                run.held,
                withheld,
                run.given_back,
                run.rest_after,
            );
            assert!(run.held <= processes, "at most one lease per key and process: {run:?}");
            assert!(run.workers + run.rest + run.rest_after <= burst, "over-granted: {run:?}");
            assert!(withheld <= bound, "{withheld} tokens withheld, more than {bound}: {run:?}");
            if !give_first {
                assert!(withheld > 0, "the idle processes held leases: {run:?}");
                assert_eq!((run.given_back, run.rest_after), (0, 0), "nothing comes back after the rest took: {run:?}");
            }
        }
    }
}
