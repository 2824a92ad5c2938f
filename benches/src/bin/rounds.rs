//! ratomic against governor 0.10 (and against its own floors), measured in
//! interleaved rounds inside one process, so both sides of every ratio see
//! the same machine.
//!
//! For each scenario the two sides are given the same number of calls per
//! batch (calibrated so a batch takes ~30 ms), then timed R times each,
//! alternately: round 0 runs ratomic then the other side, round 1 the other
//! side then ratomic, and so on. The table shows each side's median ns per
//! call over the rounds, and the median, minimum and maximum of the per-round
//! ratios (ratomic ÷ other; lower is better). A preemption spoils one round
//! and the median drops it, which criterion's one-function-after-the-other
//! timing (`benches/vs_governor.rs`) cannot do on a shared machine.
//!
//! Both crates run on their default clocks (ratomic `MonotonicClock`,
//! governor `DefaultClock`, quanta's TSC clock), except the `-manual` rows
//! (ratomic `ManualClock`, governor `FakeRelativeClock`: time never moves).
//! Quotas and keys are the criterion benches' (see `lib.rs`): throughput
//! scenarios never deny, the `deny` ones use 1000/s with bursts of 50,
//! drained first.
//!
//! Scenarios, with what "other" is:
//! - `insert-u64`, `insert-str16`: 100k new keys (u64, 16-byte strings) into
//!   an empty keyed limiter, growth included, building and dropping the
//!   limiter excluded. Other: governor (`DashMap`). `insert-*-reserved`:
//!   the same into limiters given room for the 100k keys up front
//!   (ratomic's `reserve_keys`; governor on a `DashMap::with_capacity`).
//! - `2threads-hot`: two threads at once on one u64 key; wall time per call
//!   per thread. Other: governor.
//! - `keys1m-str16`, `keys100k-u64`: every key already present, visited in
//!   random order. Other: governor.
//! - `keys100k-u64-manual`: `keys100k-u64` with time held still (ratomic
//!   `ManualClock`, governor `FakeRelativeClock`): the stores alone.
//!   `keys100k-clock-ratomic`, `-governor`, `-quanta`: each crate on its
//!   default clock (and ratomic on quanta's reading) ÷ the same crate on its
//!   fixed clock: the clock read's share of a lookup (issue 39).
//! - `keys100k-returning`: 100k keys each back under its limit (its bucket
//!   full again) when the cycle returns to it. Other: governor.
//! - `direct-allow`, `direct-deny` (and `-manual`): one unkeyed bucket,
//!   `DirectTokenBucket` against governor's direct limiter.
//! - `direct-allow-coarse`, `hot-coarse`: a direct bucket and one hot `u64`
//!   key on ratomic's opt-in `CoarseClock` against governor on its default
//!   clock (targets 0.5 and 0.6, issue 39).
//! - `direct-allow-cached`, `hot-cached`: the same on ratomic's opt-in
//!   `CachedClock`, with its thread refreshing it every millisecond while
//!   the rounds run; each also gives a row against governor on its own
//!   opt-in clock of the kind, `QuantaUpkeepClock` (a thread updating it
//!   every millisecond): `direct-allow-upkeep`, `hot-upkeep`.
//! - `floor`: `DirectTokenBucket::allow` on `MonotonicClock` against the
//!   least any limiter on that clock can do: one `MonotonicClock::now` read
//!   and one GCRA compare-and-swap on an `AtomicU64`, written inline here.
//! - `limiter2-hot`, `limiter2-100k`: a `Limiter` with two token-bucket
//!   limits against a single `TokenBucket`, u64 keys (ratomic vs ratomic).
//! - `many64-100k`: `allow_many` in batches of 64 against single calls, per
//!   request, 100k u64 keys (ratomic vs ratomic).
//!
//! ```sh
//! # the workspace's release profile (codegen-units = 1, lto = "thin")
//! cargo run --release -p ratomic-benches --bin rounds [ROUNDS] [--batch-ms MS] [SCENARIO…]
//! # cargo's default release profile: override exactly what the workspace sets
//! CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
//!     cargo run --release -p ratomic-benches --bin rounds
//! ```
//!
//! `ROUNDS` (default 15) can also be given as `RATOMIC_ROUNDS`, the batch
//! length (default 30 ms) as `RATOMIC_BATCH_MS`. Scenario arguments keep
//! only the scenarios whose names contain one of them. The table goes to
//! stdout; progress goes to stderr.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::clock::FakeRelativeClock;
use governor::RateLimiter;
use ratomic::{
    CachedClock, Clock, CoarseClock, DirectTokenBucket, Limiter, ManualClock, MonotonicClock, Quota, Rule, TokenBucket,
};
use ratomic_benches::{
    governor_deny, governor_huge, median, ratomic_deny, ratomic_huge, str_keys, time_inserts, two_threads, u64_keys,
    Cycle,
};

const DEFAULT_ROUNDS: usize = 15;
const DEFAULT_BATCH_MS: u64 = 30;

/// One side of a comparison: runs `n` calls and returns how long they took.
type Side<'a> = Box<dyn FnMut(u64) -> Duration + 'a>;

/// A side that makes `n` calls of `call` in a loop.
fn looping<'a>(mut call: impl FnMut() -> bool + 'a) -> Side<'a> {
    Box::new(move |n| {
        let start = Instant::now();
        for _ in 0..n {
            black_box(call());
        }
        start.elapsed()
    })
}

struct Config {
    rounds: usize,
    batch: Duration,
    only: Vec<String>,
}

impl Config {
    fn from_args() -> Config {
        let env_num = |name: &str| {
            std::env::var(name).ok().map(|v| v.parse::<u64>().unwrap_or_else(|_| panic!("{name} must be a number")))
        };
        let mut rounds = env_num("RATOMIC_ROUNDS").map_or(DEFAULT_ROUNDS, |r| r as usize);
        let mut batch_ms = env_num("RATOMIC_BATCH_MS").unwrap_or(DEFAULT_BATCH_MS);
        let mut only = Vec::new();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            if arg == "--batch-ms" {
                batch_ms = args.next().and_then(|v| v.parse().ok()).expect("--batch-ms takes a number of milliseconds");
            } else if arg == "-h" || arg == "--help" {
                eprintln!("usage: rounds [ROUNDS] [--batch-ms MS] [SCENARIO…]");
                std::process::exit(0);
            } else if let Ok(r) = arg.parse::<usize>() {
                rounds = r;
            } else {
                only.push(arg);
            }
        }
        assert!(rounds > 0, "at least one round");
        assert!(batch_ms > 0, "batches of at least 1 ms");
        Config { rounds, batch: Duration::from_millis(batch_ms), only }
    }

    fn wants(&self, scenario: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| scenario.contains(o.as_str()))
    }
}

/// One line of the table.
struct Row {
    name: &'static str,
    other: &'static str,
    target: f64,
    calls: u64,
    ratomic_ns: f64,
    other_ns: f64,
    ratio: f64,
    ratio_min: f64,
    ratio_max: f64,
}

/// Calls per batch: a multiple of `unit` such that the two sides' batches
/// take `batch` on average.
fn calibrate(ratomic: &mut Side<'_>, other: &mut Side<'_>, unit: u64, batch: Duration) -> u64 {
    let mut n = unit * 1000u64.div_ceil(unit);
    loop {
        let spent = ratomic(n) + other(n);
        if spent >= batch / 4 || n >= 1 << 40 {
            let per_call = spent.as_secs_f64() / (2 * n) as f64;
            let want = (batch.as_secs_f64() / per_call.max(1e-12)) as u64;
            return want.div_ceil(unit).max(1) * unit;
        }
        n *= 4;
    }
}

/// Times the two sides in alternating order, `cfg.rounds` times.
fn compare(
    cfg: &Config,
    name: &'static str,
    other_name: &'static str,
    target: f64,
    unit: u64,
    mut ratomic: Side<'_>,
    mut other: Side<'_>,
) -> Row {
    let n = calibrate(&mut ratomic, &mut other, unit, cfg.batch);
    eprint!("{name}: {n} calls a batch, {} rounds ", cfg.rounds);
    // One untimed batch each, at the real size.
    ratomic(n);
    other(n);
    let (mut r_ns, mut o_ns, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..cfg.rounds {
        let (r, o) = if round % 2 == 0 {
            let r = ratomic(n);
            (r, other(n))
        } else {
            let o = other(n);
            (ratomic(n), o)
        };
        let (r, o) = (r.as_nanos() as f64 / n as f64, o.as_nanos() as f64 / n as f64);
        r_ns.push(r);
        o_ns.push(o);
        ratios.push(r / o);
        eprint!(".");
    }
    let ratio_min = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let ratio_max = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let row = Row {
        name,
        other: other_name,
        target,
        calls: n,
        ratomic_ns: median(r_ns),
        other_ns: median(o_ns),
        ratio: median(ratios),
        ratio_min,
        ratio_max,
    };
    eprintln!(" {:.1} vs {:.1} ns, ratio {:.2}", row.ratomic_ns, row.other_ns, row.ratio);
    row
}

// ---- the scenarios ------------------------------------------------------------

/// `insert-*`: 100k new keys into an empty limiter, each side building (and
/// dropping) a limiter per 100k keys outside the timing.
fn inserts<K: Sync, R, G>(
    cfg: &Config,
    name: &'static str,
    keys: &[K],
    make_r: impl Fn() -> R,
    call_r: impl Fn(&R, &K) -> bool,
    make_g: impl Fn() -> G,
    call_g: impl Fn(&G, &K) -> bool,
) -> Row {
    // Every first call on a key must be allowed, or this would time denials.
    let r = make_r();
    assert!(keys.iter().all(|k| call_r(&r, k)));
    drop(r);
    let g = make_g();
    assert!(keys.iter().all(|k| call_g(&g, k)));
    drop(g);
    let ratomic = Box::new(|n| time_inserts(n, keys, &make_r, |l, i| call_r(l, &keys[i])));
    let governor = Box::new(|n| time_inserts(n, keys, &make_g, |l, i| call_g(l, &keys[i])));
    compare(cfg, name, "governor", 0.7, keys.len() as u64, ratomic, governor)
}

/// `keys*`: every key present in both limiters, visited in random order.
fn present<K, R, G>(
    cfg: &Config,
    (name, other, target): (&'static str, &'static str, f64),
    keys: &[K],
    (r, call_r): (&R, impl Fn(&R, &K) -> bool),
    (g, call_g): (&G, impl Fn(&G, &K) -> bool),
) -> Row {
    assert!(keys.iter().all(|k| call_r(r, k)), "the set-up is allowed");
    assert!(keys.iter().all(|k| call_g(g, k)), "the set-up is allowed");
    let (mut rc, mut gc) = (Cycle::new(keys, 0), Cycle::new(keys, 0));
    let row = compare(
        cfg,
        name,
        other,
        target,
        1,
        looping(|| call_r(r, rc.next_key())),
        looping(|| call_g(g, gc.next_key())),
    );
    assert!(call_r(r, &keys[0]) && call_g(g, &keys[0]), "every timed call was allowed");
    row
}

fn insert_u64(cfg: &Config) -> Row {
    let keys = u64_keys(100_000, 3);
    inserts(
        cfg,
        "insert-u64",
        &keys,
        || TokenBucket::builder(ratomic_huge()).keys::<u64>().build().expect("limiter"),
        |l, k| l.allow(k).allowed,
        || RateLimiter::dashmap(governor_huge()),
        |l, k| l.check_key(k).is_ok(),
    )
}

fn insert_str16(cfg: &Config) -> Row {
    let keys = str_keys(100_000, 3);
    inserts(
        cfg,
        "insert-str16",
        &keys,
        || TokenBucket::builder(ratomic_huge()).build().expect("limiter"),
        |l, k| l.allow(k.as_str()).expect("valid call").allowed,
        || RateLimiter::dashmap(governor_huge()),
        |l, k| l.check_key(k).is_ok(),
    )
}

/// `insert-u64-reserved`, `insert-str16-reserved`: the same inserts into
/// limiters given room for the 100k keys up front: ratomic's `reserve_keys`,
/// governor on a `DashMap` made `with_capacity` (through `RateLimiter::new`).
fn insert_u64_reserved(cfg: &Config) -> Row {
    let keys = u64_keys(100_000, 3);
    let n = keys.len();
    let mut row = inserts(
        cfg,
        "insert-u64-reserved",
        &keys,
        || TokenBucket::builder(ratomic_huge()).keys::<u64>().reserve_keys(n).build().expect("limiter"),
        |l, k| l.allow(k).allowed,
        || -> governor::DefaultKeyedRateLimiter<u64> { governor_sized(n) },
        |l, k| l.check_key(k).is_ok(),
    );
    row.other = "governor, pre-sized";
    row
}

fn insert_str16_reserved(cfg: &Config) -> Row {
    let keys = str_keys(100_000, 3);
    let n = keys.len();
    let mut row = inserts(
        cfg,
        "insert-str16-reserved",
        &keys,
        || TokenBucket::builder(ratomic_huge()).reserve_keys(n).build().expect("limiter"),
        |l, k| l.allow(k.as_str()).expect("valid call").allowed,
        || -> governor::DefaultKeyedRateLimiter<String> { governor_sized(n) },
        |l, k| l.check_key(k).is_ok(),
    );
    row.other = "governor, pre-sized";
    row
}

/// Governor's keyed limiter on a `DashMap` with room for `n` keys.
fn governor_sized<K: std::hash::Hash + Eq + Clone>(n: usize) -> governor::DefaultKeyedRateLimiter<K> {
    RateLimiter::new(
        governor_huge(),
        dashmap::DashMap::with_capacity_and_hasher(n, Default::default()),
        governor::clock::DefaultClock::default(),
    )
}

fn two_threads_hot(cfg: &Config) -> Row {
    let keys = u64_keys(1, 5);
    let r = TokenBucket::builder(ratomic_huge()).keys::<u64>().build().expect("limiter");
    let g = RateLimiter::dashmap(governor_huge());
    assert!(r.allow(&keys[0]).allowed && g.check_key(&keys[0]).is_ok());
    let r_call = |k: &u64| r.allow(k).allowed;
    let g_call = |k: &u64| g.check_key(k).is_ok();
    let row = compare(
        cfg,
        "2threads-hot",
        "governor",
        0.8,
        1,
        Box::new(|n| two_threads(n, &keys, r_call)),
        Box::new(|n| two_threads(n, &keys, g_call)),
    );
    assert!(r_call(&keys[0]) && g_call(&keys[0]), "every timed call was allowed");
    row
}

fn keys1m_str16(cfg: &Config) -> Row {
    let keys = str_keys(1_000_000, 1);
    let r = TokenBucket::builder(ratomic_huge()).build().expect("limiter");
    let g = RateLimiter::dashmap(governor_huge());
    let row = present(
        cfg,
        ("keys1m-str16", "governor", 0.6),
        &keys,
        (&r, |l: &TokenBucket, k: &String| l.allow(k.as_str()).expect("valid call").allowed),
        (&g, |l: &governor::DefaultKeyedRateLimiter<String>, k: &String| l.check_key(k).is_ok()),
    );
    assert_eq!(r.len(), keys.len(), "every key stayed in ratomic's store");
    row
}

fn keys100k_u64(cfg: &Config) -> Row {
    let keys = u64_keys(100_000, 1);
    let r = TokenBucket::builder(ratomic_huge()).keys::<u64>().build().expect("limiter");
    let g = RateLimiter::dashmap(governor_huge());
    let row = present(
        cfg,
        ("keys100k-u64", "governor", 0.6),
        &keys,
        (&r, |l: &TokenBucket<u64>, k: &u64| l.allow(k).allowed),
        (&g, |l: &governor::DefaultKeyedRateLimiter<u64>, k: &u64| l.check_key(k).is_ok()),
    );
    assert_eq!(r.len(), keys.len(), "every key stayed in ratomic's store");
    row
}

/// `keys100k-u64-manual`, `keys100k-clock-ratomic`, `keys100k-clock-governor`
/// (issue 39's breakdown): the `keys100k-u64` lookup with the clock taken
/// out. `-manual` is ratomic on `ManualClock` against governor on
/// `FakeRelativeClock` (time never moves: the store alone); the `-clock`
/// rows are each crate on its default clock ÷ the same crate on its fixed
/// clock, so `ratio - 1` is the clock read's share of that crate's call.
/// `keys100k-clock-quanta`: ratomic on a clock that is governor's (quanta's
/// TSC reading scaled to ns) ÷ ratomic on `ManualClock`: whether the gap is
/// in `MonotonicClock`'s reading or in how the lookup waits on it.
struct QuantaNs(quanta::Clock, quanta::Instant);

impl Clock for QuantaNs {
    #[inline]
    fn now(&self) -> u64 {
        (self.0.now() - self.1).as_nanos() as u64
    }
}

fn keys100k_clock(cfg: &Config, which: &'static str) -> Row {
    let keys = u64_keys(100_000, 1);
    let rm = TokenBucket::builder(ratomic_huge()).keys::<u64>().clock(ManualClock::new()).build().expect("limiter");
    let gm = RateLimiter::dashmap_with_clock(governor_huge(), FakeRelativeClock::default());
    let r_manual = |l: &TokenBucket<u64, ManualClock>, k: &u64| l.allow(k).allowed;
    type FakeKeyed = governor::RateLimiter<
        u64,
        governor::state::keyed::DashMapStateStore<u64>,
        FakeRelativeClock,
        governor::middleware::NoOpMiddleware<governor::nanos::Nanos>,
    >;
    let g_fake = |l: &FakeKeyed, k: &u64| l.check_key(k).is_ok();
    match which {
        "manual" => present(cfg, ("keys100k-u64-manual", "governor", 0.6), &keys, (&rm, r_manual), (&gm, g_fake)),
        "quanta" => {
            let q = quanta::Clock::new();
            let q0 = q.now();
            let r = TokenBucket::builder(ratomic_huge()).keys::<u64>().clock(QuantaNs(q, q0)).build().expect("limiter");
            present(
                cfg,
                ("keys100k-clock-quanta", "ratomic on ManualClock", f64::INFINITY),
                &keys,
                (&r, |l: &TokenBucket<u64, QuantaNs>, k: &u64| l.allow(k).allowed),
                (&rm, r_manual),
            )
        }
        "ratomic" => {
            let r = TokenBucket::builder(ratomic_huge()).keys::<u64>().build().expect("limiter");
            present(
                cfg,
                ("keys100k-clock-ratomic", "ratomic on ManualClock", f64::INFINITY),
                &keys,
                (&r, |l: &TokenBucket<u64>, k: &u64| l.allow(k).allowed),
                (&rm, r_manual),
            )
        }
        _ => {
            let g = RateLimiter::dashmap(governor_huge());
            present(
                cfg,
                ("keys100k-clock-governor", "governor on FakeRelativeClock", f64::INFINITY),
                &keys,
                (&g, |l: &governor::DefaultKeyedRateLimiter<u64>, k: &u64| l.check_key(k).is_ok()),
                (&gm, g_fake),
            )
        }
    }
}

/// `keys100k-returning`: 100k u64 keys each under its limit, so that its
/// bucket is full again by the time the cycle comes back to it (1000/s,
/// bursts of 1000: one token back every millisecond; a cycle takes
/// milliseconds). The common case in production — most clients well under
/// their limit — and the one where ratomic's store forgets a key when it
/// grows (a full bucket carries no information) and inserts it again when
/// the client returns, while governor keeps every key.
fn keys100k_returning(cfg: &Config) -> Row {
    let keys = u64_keys(100_000, 4);
    let r = TokenBucket::builder(Quota::new(1000, 1000.0).expect("quota")).keys::<u64>().build().expect("limiter");
    let gq = governor::Quota::per_second(std::num::NonZeroU32::new(1000).expect("non-zero"));
    let g = RateLimiter::dashmap(gq);
    present(
        cfg,
        ("keys100k-returning", "governor", 0.6),
        &keys,
        (&r, |l: &TokenBucket<u64>, k: &u64| l.allow(k).allowed),
        (&g, |l: &governor::DefaultKeyedRateLimiter<u64>, k: &u64| l.check_key(k).is_ok()),
    )
}

/// `many64-100k`: `allow_many` in batches of 64 against 64 single calls,
/// on 100k present u64 keys, per request (ratomic vs ratomic): what a
/// batch saves (one epoch pin for the batch, one clock reading).
fn many64_100k(cfg: &Config) -> Row {
    let keys = u64_keys(100_000, 12);
    let tb = TokenBucket::builder(ratomic_huge()).keys::<u64>().build().expect("limiter");
    assert!(keys.iter().all(|k| tb.allow(k).allowed), "the set-up is allowed");
    let (tb, all) = (&tb, &keys);
    let (mut out, mut at) = (Vec::with_capacity(64), 0usize);
    let many: Side<'_> = Box::new(move |n| {
        let start = Instant::now();
        for _ in 0..n / 64 {
            if at + 64 > all.len() {
                at = 0;
            }
            out.clear();
            tb.allow_many_at(all[at..at + 64].iter().map(|k| (k, 1)), tb.now(), &mut out).expect("valid requests");
            black_box(&out);
            at += 64;
        }
        start.elapsed()
    });
    let mut single = Cycle::new(&keys, 0);
    let row = compare(
        cfg,
        "many64-100k",
        "64 single calls",
        1.0,
        64,
        many,
        looping(|| tb.allow(black_box(single.next_key())).allowed),
    );
    assert_eq!(tb.len(), keys.len(), "every key stayed in the store");
    row
}

/// `direct-allow` / `direct-deny`, on the default clocks or (`manual`) on
/// clocks that never move.
fn direct(cfg: &Config, deny: bool, manual: bool) -> Row {
    let name = match (deny, manual) {
        (false, false) => "direct-allow",
        (true, false) => "direct-deny",
        (false, true) => "direct-allow-manual",
        (true, true) => "direct-deny-manual",
    };
    let (rq, gq) = if deny { (ratomic_deny(), governor_deny()) } else { (ratomic_huge(), governor_huge()) };
    if manual {
        let r = DirectTokenBucket::with_clock(rq, ManualClock::new());
        let g = RateLimiter::direct_with_clock(gq, FakeRelativeClock::default());
        direct_pair(cfg, name, deny, || r.allow().allowed, || g.check().is_ok())
    } else {
        let r = DirectTokenBucket::new(rq);
        let g = RateLimiter::direct(gq);
        direct_pair(cfg, name, deny, || r.allow().allowed, || g.check().is_ok())
    }
}

/// `direct-allow-coarse` / `hot-coarse`: ratomic on the opt-in
/// `CoarseClock` against governor on its default clock (a direct bucket,
/// and one hot `u64` key of a keyed limiter), every call allowed.
fn coarse(cfg: &Config, keyed: bool) -> Row {
    let name = if keyed { "hot-coarse" } else { "direct-allow-coarse" };
    cheap_clock(cfg, name, keyed, CoarseClock::new())
}

/// `direct-allow-cached` / `hot-cached`: the same on the opt-in
/// `CachedClock`, refreshed every millisecond by its thread meanwhile; and
/// (`direct-allow-upkeep` / `hot-upkeep`) the same ratomic calls against
/// governor on its own opt-in clock of the kind, `QuantaUpkeepClock`,
/// refreshed every millisecond by its thread (no target of the issue's:
/// ≤ 1.0, no slower than the peer's own cached clock). The ratomic side is
/// one closure timed against both, so the compiler inlines it (or not) the
/// same way for both rows: a second call site of the same limiter type
/// measured 20 ns a hot call against 14–16 ns inlined.
fn cached(cfg: &Config, keyed: bool) -> Vec<Row> {
    use governor::clock::QuantaUpkeepClock;
    let clock = CachedClock::new();
    let _refresher = clock.refresh_every(Duration::from_millis(1)).expect("the refresher thread");
    let upkeep = QuantaUpkeepClock::from_interval(Duration::from_millis(1)).expect("governor's upkeep thread");
    if keyed {
        let r = TokenBucket::builder(ratomic_huge()).keys::<u64>().clock(clock).build().expect("limiter");
        let g = RateLimiter::dashmap(governor_huge());
        let gu = RateLimiter::dashmap_with_clock(governor_huge(), upkeep);
        let rc = || r.allow(black_box(&7)).allowed;
        let (gc, guc) = (|| g.check_key(black_box(&7)).is_ok(), || gu.check_key(black_box(&7)).is_ok());
        assert!(rc() && gc() && guc(), "the set-up is allowed");
        let rows = vec![
            compare(cfg, "hot-cached", "governor", 0.6, 1, looping(rc), looping(gc)),
            compare(cfg, "hot-upkeep", "governor on QuantaUpkeepClock", 1.0, 1, looping(rc), looping(guc)),
        ];
        assert!(rc() && gc() && guc(), "every timed call was allowed");
        rows
    } else {
        let r = DirectTokenBucket::with_clock(ratomic_huge(), clock);
        let g = RateLimiter::direct(governor_huge());
        let gu = RateLimiter::direct_with_clock(governor_huge(), upkeep);
        let rc = || r.allow().allowed;
        let (gc, guc) = (|| g.check().is_ok(), || gu.check().is_ok());
        let rows = vec![
            compare(cfg, "direct-allow-cached", "governor", 0.5, 1, looping(rc), looping(gc)),
            compare(cfg, "direct-allow-upkeep", "governor on QuantaUpkeepClock", 1.0, 1, looping(rc), looping(guc)),
        ];
        assert!(rc() && gc() && guc(), "every timed call was allowed");
        rows
    }
}

fn cheap_clock<C: Clock + 'static>(cfg: &Config, name: &'static str, keyed: bool, clock: C) -> Row {
    if keyed {
        let r = TokenBucket::builder(ratomic_huge()).keys::<u64>().clock(clock).build().expect("limiter");
        let g = RateLimiter::dashmap(governor_huge());
        let (rc, gc) = (|| r.allow(black_box(&7)).allowed, || g.check_key(black_box(&7)).is_ok());
        assert!(rc() && gc(), "the set-up is allowed");
        let row = compare(cfg, name, "governor", 0.6, 1, looping(rc), looping(gc));
        assert!(rc() && gc(), "every timed call was allowed");
        row
    } else {
        let r = DirectTokenBucket::with_clock(ratomic_huge(), clock);
        let g = RateLimiter::direct(governor_huge());
        let (rc, gc) = (|| r.allow().allowed, || g.check().is_ok());
        let row = compare(cfg, name, "governor", 0.5, 1, looping(rc), looping(gc));
        assert!(rc() && gc(), "every timed call was allowed");
        row
    }
}

fn direct_pair(cfg: &Config, name: &'static str, deny: bool, r: impl Fn() -> bool, g: impl Fn() -> bool) -> Row {
    if deny {
        while r() {}
        while g() {}
    }
    let row = compare(cfg, name, "governor", 0.9, 1, looping(&r), looping(&g));
    if !deny {
        assert!(r() && g(), "every timed call was allowed");
    }
    row
}

/// The least a token bucket on `MonotonicClock` can do per call: read the
/// clock once, then one GCRA step (`tat = max(TAT, now)`, pass iff
/// `tat + T − now ≤ τ`) stored with a compare-and-swap.
struct Floor {
    clock: MonotonicClock,
    tat: AtomicU64,
    /// Nanoseconds per token.
    t: u64,
    /// Capacity × `t`.
    tau: u64,
}

impl Floor {
    fn new(quota: Quota) -> Floor {
        let t = quota.emission_interval_nanos();
        Floor { clock: MonotonicClock::new(), tat: AtomicU64::new(0), t, tau: quota.capacity() * t }
    }

    #[inline]
    fn allow(&self) -> bool {
        let now = Clock::now(&self.clock);
        let mut seen = self.tat.load(Ordering::Relaxed);
        loop {
            let next = seen.max(now) + self.t;
            if next - now > self.tau {
                return false;
            }
            match self.tat.compare_exchange_weak(seen, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => seen = actual,
            }
        }
    }
}

fn floor(cfg: &Config) -> Row {
    let r = DirectTokenBucket::new(black_box(ratomic_huge()));
    let f = Floor::new(black_box(ratomic_huge()));
    let r_call = || r.allow().allowed;
    let row = compare(cfg, "floor", "clock read + CAS", 1.1, 1, looping(r_call), looping(|| f.allow()));
    assert!(r_call() && f.allow(), "every timed call was allowed");
    row
}

/// `limiter2-*`: a `Limiter` with two token-bucket limits against one
/// `TokenBucket`, both on u64 keys and `MonotonicClock`.
fn limiter2(cfg: &Config, name: &'static str, n: usize) -> Row {
    let keys = u64_keys(n, 11);
    let tb = TokenBucket::builder(ratomic_huge()).keys::<u64>().build().expect("limiter");
    let li = Limiter::builder()
        .keys::<u64>()
        .limit("burst", Rule::token_bucket(ratomic_huge()))
        .limit("sustained", Rule::token_bucket(ratomic_huge()))
        .build()
        .expect("limiter");
    let li_call = |k: &u64| li.allow(k).allowed();
    let tb_call = |k: &u64| tb.allow(k).allowed;
    assert!(keys.iter().all(|k| li_call(k) && tb_call(k)), "the set-up is allowed");
    let (mut lc, mut tc) = (Cycle::new(&keys, 0), Cycle::new(&keys, 0));
    let row = compare(
        cfg,
        name,
        "TokenBucket",
        1.6,
        1,
        looping(|| li_call(black_box(lc.next_key()))),
        looping(|| tb_call(black_box(tc.next_key()))),
    );
    assert!(li_call(&keys[0]) && tb_call(&keys[0]), "every timed call was allowed");
    assert_eq!((li.len(), tb.len()), (n, n), "every key stayed in the stores");
    row
}

// ---- the report ---------------------------------------------------------------

/// How this binary was built, as far as it can tell: the profile's
/// optimisation settings come from the environment cargo compiled it in.
fn build_info() -> String {
    if cfg!(debug_assertions) {
        return "debug build (no `--release`): these figures mean nothing".into();
    }
    let lto = option_env!("CARGO_PROFILE_RELEASE_LTO");
    let cgu = option_env!("CARGO_PROFILE_RELEASE_CODEGEN_UNITS");
    let setting = |value: Option<&str>, workspace: &str| match value {
        Some(v) => format!("{v} (environment override)"),
        None => format!("{workspace} (workspace `[profile.release]`)"),
    };
    let kind = match (lto, cgu) {
        (None, None) => "the workspace's release profile",
        (Some("false"), Some("16")) => "cargo's default release profile (workspace settings overridden)",
        _ => "a modified release profile",
    };
    format!("`--release`, {kind}: lto = {}, codegen-units = {}", setting(lto, "\"thin\""), setting(cgu, "1"))
}

/// A command's first line of output, if it runs.
fn first_line(cmd: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(cmd).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").trim().to_owned())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() {
    let cfg = Config::from_args();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load_before = load_average();
    let started = Instant::now();

    type Scenario = (&'static str, fn(&Config) -> Vec<Row>);
    let scenarios: [Scenario; 24] = [
        ("insert-u64", |c| vec![insert_u64(c)]),
        ("insert-str16", |c| vec![insert_str16(c)]),
        ("insert-u64-reserved", |c| vec![insert_u64_reserved(c)]),
        ("insert-str16-reserved", |c| vec![insert_str16_reserved(c)]),
        ("2threads-hot", |c| vec![two_threads_hot(c)]),
        ("keys1m-str16", |c| vec![keys1m_str16(c)]),
        ("keys100k-u64", |c| vec![keys100k_u64(c)]),
        ("keys100k-returning", |c| vec![keys100k_returning(c)]),
        ("keys100k-u64-manual", |c| vec![keys100k_clock(c, "manual")]),
        ("keys100k-clock-ratomic", |c| vec![keys100k_clock(c, "ratomic")]),
        ("keys100k-clock-governor", |c| vec![keys100k_clock(c, "governor")]),
        ("keys100k-clock-quanta", |c| vec![keys100k_clock(c, "quanta")]),
        ("direct-allow", |c| vec![direct(c, false, false)]),
        ("direct-deny", |c| vec![direct(c, true, false)]),
        ("direct-allow-manual", |c| vec![direct(c, false, true)]),
        ("direct-deny-manual", |c| vec![direct(c, true, true)]),
        ("direct-allow-coarse", |c| vec![coarse(c, false)]),
        ("hot-coarse", |c| vec![coarse(c, true)]),
        ("direct-allow-cached", |c| cached(c, false)),
        ("hot-cached", |c| cached(c, true)),
        ("floor", |c| vec![floor(c)]),
        ("limiter2-hot", |c| vec![limiter2(c, "limiter2-hot", 1)]),
        ("limiter2-100k", |c| vec![limiter2(c, "limiter2-100k", 100_000)]),
        ("many64-100k", |c| vec![many64_100k(c)]),
    ];
    let rows: Vec<Row> = scenarios.iter().filter(|(name, _)| cfg.wants(name)).flat_map(|(_, run)| run(&cfg)).collect();

    println!("# ratomic in interleaved rounds\n");
    println!(
        "{} rounds a scenario, batches of ~{} ms, ratio = ratomic ÷ other per round (lower is better).",
        cfg.rounds,
        cfg.batch.as_millis()
    );
    println!(
        "Build: {}; rustc: {}; ratomic-benches {}.",
        build_info(),
        first_line("rustc", &["-V"]).unwrap_or_else(|| "unknown".into()),
        env!("CARGO_PKG_VERSION")
    );
    if let Some(commit) = first_line("git", &["rev-parse", "--short", "HEAD"]) {
        println!("Commit (of the working directory): `{commit}`.");
    }
    println!(
        "Machine: {cores} cores, load average {load_before} at the start, {} at the end; {:.0} s in all.\n",
        load_average(),
        started.elapsed().as_secs_f64()
    );
    println!("| scenario | ratomic ns | other ns | ratio median | ratio min–max | target |");
    println!("|---|---:|---:|---:|---:|---|");
    for r in &rows {
        let verdict = if r.ratio <= r.target { "met" } else { "**not met**" };
        println!(
            "| {} | {:.1} | {:.1} | {:.2} | {:.2}–{:.2} | ≤ {} {verdict} |",
            r.name, r.ratomic_ns, r.other_ns, r.ratio, r.ratio_min, r.ratio_max, r.target
        );
    }
    println!();
    println!("\"other\" and calls per batch, by scenario:");
    for r in &rows {
        let ratomic = match r.name {
            "floor" => "`DirectTokenBucket`",
            n if n.starts_with("limiter2") => "two-limit `Limiter`",
            _ => "ratomic",
        };
        println!("- `{}`: {ratomic} vs {}, {} calls a batch", r.name, r.other, r.calls);
    }
}
