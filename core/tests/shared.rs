//! The shared store across real processes: this test binary runs itself
//! as the workers (`worker` below does nothing unless started by a test
//! with `RATOMIC_SHM_ROLE` set), hammering one file; the parent checks
//! every recorded grant against the limits, SIGKILLs workers mid-traffic,
//! and checks the file's safe-open refusals.
#![cfg(all(target_os = "linux", not(ratomic_loom)))]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use proptest::prelude::*;
use ratomic::{Error, Eviction, FixedWindow, Limiter, ManualClock, Quota, Rate, Rule, SlidingWindow, TokenBucket};

/// 50 tokens, one more every hour: no test here lasts long enough for a
/// refill, so every key grants exactly its burst in total.
fn quota() -> Quota {
    Quota::from_rate(Rate::new(50, Duration::from_secs(3600 * 50)).unwrap()).unwrap()
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ratomic-shm-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// What a worker builds: `kind` names the limiter.
enum Built {
    Bucket(TokenBucket<[u8]>),
    Window(FixedWindow<[u8]>),
    Multi(Limiter<[u8]>),
}

fn build(kind: &str, path: &Path, max_keys: usize) -> Result<Built, Error> {
    Ok(match kind {
        "bucket" => Built::Bucket(TokenBucket::builder(quota()).max_keys(max_keys).shared_file(path).build()?),
        "bucket60" => Built::Bucket(
            TokenBucket::builder(Quota::per_second(60).unwrap()).max_keys(max_keys).shared_file(path).build()?,
        ),
        "window" => Built::Window(
            FixedWindow::builder(Rate::new(50, Duration::from_secs(3600)).unwrap())
                .max_keys(max_keys)
                .shared_file(path)
                .build()?,
        ),
        "multi" => Built::Multi(
            Limiter::builder()
                .limit("burst", Rule::token_bucket(Quota::per_second(1000).unwrap()))
                .limit("slow", Rule::token_bucket(quota()))
                .max_keys(max_keys)
                .shared_file(path)
                .build()?,
        ),
        other => panic!("unknown kind {other}"),
    })
}

impl Built {
    fn allow(&self, key: &str) -> bool {
        match self {
            Built::Bucket(l) => l.allow(key).unwrap().allowed,
            Built::Window(l) => l.allow(key).unwrap().allowed,
            Built::Multi(l) => l.allow(key).unwrap().allowed(),
        }
    }
    fn fingerprints(&self) -> Vec<u64> {
        match self {
            Built::Bucket(l) => l.shared_fingerprints(),
            Built::Window(l) => l.shared_fingerprints(),
            Built::Multi(l) => l.shared_fingerprints(),
        }
        .expect("a shared store")
    }
}

/// The worker: `RATOMIC_SHM_ROLE=kind:path:keys:calls:max_keys`. Prints
/// "ready", then one line per grant ("g <key>"), flushed before the next
/// call, then "done".
#[test]
fn worker() {
    let Ok(role) = std::env::var("RATOMIC_SHM_ROLE") else { return };
    let parts: Vec<&str> = role.split(':').collect();
    let (kind, path, keys, calls, max_keys) = (
        parts[0],
        Path::new(parts[1]),
        parts[2].parse::<usize>().unwrap(),
        parts[3].parse::<usize>().unwrap(),
        parts[4].parse::<usize>().unwrap(),
    );
    let limiter = build(kind, path, max_keys).unwrap();
    use std::io::Write;
    let out = std::io::stdout();
    let mut out = out.lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    let seed = std::process::id() as usize;
    for n in 0..calls {
        let k = (n.wrapping_mul(2654435761) ^ seed) % keys;
        let key = format!("key{k}");
        if limiter.allow(&key) {
            writeln!(out, "g {key}").unwrap();
            out.flush().unwrap();
        }
    }
    writeln!(out, "done").unwrap();
}

fn spawn(role: String) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "worker", "--nocapture", "--test-threads=1"])
        .env("RATOMIC_SHM_ROLE", role)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Reads a worker's grants; `kill_after` grants, SIGKILLs it first.
fn collect(mut child: Child, kill_after: Option<usize>) -> (Vec<String>, bool) {
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut grants = Vec::new();
    let mut done = false;
    for line in out.lines() {
        let line = line.unwrap();
        if let Some(key) = line.strip_prefix("g ") {
            grants.push(key.to_owned());
            if kill_after.is_some_and(|n| grants.len() >= n) {
                child.kill().unwrap(); // SIGKILL
                break;
            }
        } else if line == "done" {
            done = true;
        }
    }
    // Lines already written by a killed worker are still counted.
    let status = child.wait().unwrap();
    if kill_after.is_none() {
        assert!(status.success(), "worker failed: {status}");
    }
    (grants, done)
}

fn count(grants: &[String]) -> std::collections::HashMap<String, usize> {
    let mut m = std::collections::HashMap::new();
    for g in grants {
        *m.entry(g.clone()).or_insert(0) += 1;
    }
    m
}

fn race_one_key(kind: &str) {
    let path = dir(kind).join(format!("{kind}.ratomic"));
    let _ = std::fs::remove_file(&path);
    let workers: Vec<Child> = (0..8).map(|_| spawn(format!("{kind}:{}:1:200:1000", path.display()))).collect();
    let total: usize = workers.into_iter().map(|c| collect(c, None).0.len()).sum();
    assert_eq!(total, 50, "{kind}: 8 processes racing on one key of capacity 50");
    let l = build(kind, &path, 1000).unwrap();
    assert!(!l.allow("key0"), "the key is empty in the parent too");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn eight_processes_on_one_key_of_a_bucket_get_exactly_its_burst() {
    race_one_key("bucket");
}

#[test]
fn eight_processes_on_one_key_of_a_fixed_window_get_exactly_its_limit() {
    race_one_key("window");
}

#[test]
fn eight_processes_on_one_key_of_a_two_limit_limiter_get_exactly_the_tighter() {
    race_one_key("multi");
}

#[test]
fn workers_killed_mid_traffic_leave_the_table_usable_and_no_key_over_granted() {
    let path = dir("kill").join("kill.ratomic");
    let _ = std::fs::remove_file(&path);
    let keys = 40;
    let role = || format!("bucket:{}:{keys}:400:1000", path.display());
    let mut all = Vec::new();
    // Rounds of four workers, two of them SIGKILLed mid-traffic each round.
    for round in 0..6 {
        let children: Vec<Child> = (0..4).map(|_| spawn(role())).collect();
        for (i, c) in children.into_iter().enumerate() {
            let kill = (i % 2 == 0).then_some(3 + round * 7 + i);
            all.extend(collect(c, kill).0);
        }
    }
    // Survivors drain every key: nothing is stuck, and the totals hold.
    let children: Vec<Child> = (0..2).map(|_| spawn(format!("bucket:{}:{keys}:4000:1000", path.display()))).collect();
    for c in children {
        let (grants, done) = collect(c, None);
        assert!(done);
        all.extend(grants);
    }
    for (key, n) in count(&all) {
        assert!(n <= 50, "{key} granted {n} times, more than its burst of 50");
    }
    let l = build("bucket", &path, 1000).unwrap();
    for k in 0..keys {
        assert!(!l.allow(&format!("key{k}")), "key{k} was drained");
    }
    let mut fps = l.fingerprints();
    let n = fps.len();
    fps.sort_unstable();
    fps.dedup();
    assert_eq!(fps.len(), n, "a key is held twice");
    assert_eq!(n, keys, "every key held once");
    if let Built::Bucket(b) = &l {
        assert_eq!(b.gc().unwrap(), 0, "nothing idle: every bucket is empty");
        assert_eq!(b.len(), keys);
    }
    std::fs::remove_file(&path).unwrap();
}

fn refusal(r: Result<Built, Error>) -> String {
    match r {
        Ok(_) => panic!("opened"),
        Err(e) => e.to_string(),
    }
}

/// `u64` and `Ipv4Addr` keys are stored alike but mean different things:
/// a file made for one refuses the other (192.0.2.1 is not id 3221225985).
#[test]
fn a_file_for_one_key_type_refuses_another_stored_alike() {
    let d = dir("key-type");
    let path = d.join("ids.ratomic");
    let _ = std::fs::remove_file(&path);
    let ids = ratomic::TokenBucket::builder("5/min").keys::<u64>().shared_file(&path).build().unwrap();
    assert!(ids.allow(&3_221_225_985).allowed);
    let ips = ratomic::TokenBucket::builder("5/min").keys::<std::net::Ipv4Addr>().shared_file(&path).build();
    let e = ips.map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("different rule, key type"), "{e}");
    let again = ratomic::TokenBucket::builder("5/min").keys::<u64>().shared_file(&path).build().unwrap();
    // One token taken by the first: a peek answers as a call would, 3 left after it.
    assert_eq!(again.peek(&3_221_225_985).remaining, 3, "the same limiter shares the key");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_file_is_refused_with_a_clear_error_when_it_does_not_fit() {
    let d = dir("refuse");
    let path = d.join("rule.ratomic");
    let _ = std::fs::remove_file(&path);
    let first = build("bucket", &path, 1000).unwrap();
    assert!(first.allow("a"));
    // Another rule, another max_keys, another limiter kind.
    for (kind, max) in [("bucket60", 1000), ("bucket", 2000), ("window", 1000)] {
        let e = refusal(build(kind, &path, max));
        assert!(e.contains("different rule"), "{kind}: {e}");
    }
    // The same limiter opens it and shares the key.
    let second = build("bucket", &path, 1000).unwrap();
    assert_eq!((0..60).filter(|_| second.allow("a")).count(), 49);

    // A symbolic link.
    let link = d.join("link.ratomic");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&path, &link).unwrap();
    assert!(refusal(build("bucket", &link, 1000)).contains("symbolic link"));

    // A truncated file.
    let short = d.join("short.ratomic");
    std::fs::copy(&path, &short).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&short).unwrap();
    f.set_len(4096).unwrap();
    assert!(refusal(build("bucket", &short, 1000)).contains("truncated"));
    f.set_len(100).unwrap();
    assert!(refusal(build("bucket", &short, 1000)).contains("truncated"));

    // A file that is not ours.
    let junk = d.join("junk.ratomic");
    std::fs::write(&junk, vec![7u8; 8192]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(refusal(build("bucket", &junk, 1000)).contains("not a ratomic"));

    // A file from another boot: its boot id (header bytes 32..48) differs.
    let old = d.join("old.ratomic");
    std::fs::copy(&path, &old).unwrap();
    let mut bytes = std::fs::read(&old).unwrap();
    bytes[32] ^= 0xff;
    std::fs::write(&old, &bytes).unwrap();
    assert!(refusal(build("bucket", &old, 1000)).contains("booted"));

    // A file owned by another user (only root can make one).
    // SAFETY: no preconditions.
    if unsafe { libc_geteuid() } == 0 {
        let theirs = d.join("theirs.ratomic");
        std::fs::copy(&path, &theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        assert!(refusal(build("bucket", &theirs, 1000)).contains("another user"));
    }

    // Readable by others.
    let open = d.join("open.ratomic");
    std::fs::copy(&path, &open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert!(refusal(build("bucket", &open, 1000)).contains("other users"));

    // Created 0600.
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let _ = std::fs::remove_dir_all(&d);
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

// ---- parity with the in-process store, in one process ----------------------

#[derive(Clone, Debug)]
enum Op {
    Allow(u8, u64),
    Peek(u8, u64),
    Refund(u8, u64),
    Reset(u8),
    Gc,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..4, 0u64..4).prop_map(|(k, c)| Op::Allow(k, c)),
        2 => (0u8..4, 0u64..4).prop_map(|(k, c)| Op::Peek(k, c)),
        1 => (0u8..4, 1u64..3).prop_map(|(k, c)| Op::Refund(k, c)),
        1 => (0u8..4).prop_map(Op::Reset),
        1 => Just(Op::Gc),
    ]
}

fn temp_file(tag: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir("parity").join(format!("{tag}-{n}.ratomic"));
    let _ = std::fs::remove_file(&path);
    path
}

/// Runs `ops` at non-decreasing times (`steps`, ns) through `a` (in
/// process) and `b` (shared), every field of every answer equal.
macro_rules! parity {
    ($a:expr, $b:expr, $ops:expr, $steps:expr, $allow:ident, $eq:expr) => {{
        let (a, b) = ($a, $b);
        let mut now = 0u64;
        for (op, step) in $ops.iter().zip($steps.iter()) {
            now += step;
            match *op {
                Op::Allow(k, c) => {
                    let (x, y) = (a.$allow(&[k], c, now).unwrap(), b.$allow(&[k], c, now).unwrap());
                    prop_assert!($eq(&x, &y), "allow {k} {c} at {now}: {x:?} vs {y:?}");
                }
                Op::Peek(k, c) => {
                    prop_assert_eq!(a.peek_at(&[k], c, now).unwrap(), b.peek_at(&[k], c, now).unwrap());
                }
                Op::Refund(k, c) => {
                    prop_assert_eq!(a.refund_at(&[k], c, now).unwrap(), b.refund_at(&[k], c, now).unwrap());
                }
                Op::Reset(k) => {
                    a.reset_at(&[k], now).unwrap();
                    b.reset_at(&[k], now).unwrap();
                }
                Op::Gc => {
                    a.gc_at(now).unwrap();
                    b.gc_at(now).unwrap();
                }
            }
        }
    }};
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_shared_bucket_answers_as_one_in_process(
        ops in prop::collection::vec(op(), 1..80),
        steps in prop::collection::vec(prop_oneof![Just(0u64), 0u64..300_000_000, 0u64..3_000_000_000], 80),
    ) {
        let q = Quota::per_second(5).unwrap();
        let a = TokenBucket::builder(q).clock(ManualClock::new()).build().unwrap();
        let path = temp_file("bucket");
        let b = TokenBucket::builder(q).clock(ManualClock::new()).max_keys(64).shared_file(&path).build().unwrap();
        parity!(&a, &b, ops, steps, allow_at, |x: &ratomic::Decision, y: &ratomic::Decision| x == y);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_shared_sliding_window_answers_as_one_in_process(
        ops in prop::collection::vec(op(), 1..80),
        steps in prop::collection::vec(prop_oneof![Just(0u64), 0u64..300_000_000, 0u64..3_000_000_000], 80),
    ) {
        let r = Rate::new(5, Duration::from_secs(1)).unwrap();
        let a = SlidingWindow::builder(r).clock(ManualClock::new()).build().unwrap();
        let path = temp_file("sliding");
        let b = SlidingWindow::builder(r).clock(ManualClock::new()).max_keys(64).shared_file(&path).build().unwrap();
        parity!(&a, &b, ops, steps, allow_at, |x: &ratomic::Decision, y: &ratomic::Decision| x == y);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_shared_two_limit_limiter_answers_as_one_in_process(
        ops in prop::collection::vec(op(), 1..80),
        steps in prop::collection::vec(prop_oneof![Just(0u64), 0u64..300_000_000, 0u64..3_000_000_000], 80),
    ) {
        let build = |file: Option<&Path>| {
            let b = Limiter::builder()
                .limit("second", Rule::token_bucket(Quota::per_second(4).unwrap()))
                .limit("minute", Rule::fixed_window(Rate::new(9, Duration::from_secs(10)).unwrap()).unwrap())
                .clock(ManualClock::new())
                .max_keys(64);
            match file {
                Some(f) => b.shared_file(f).build().unwrap(),
                None => b.build().unwrap(),
            }
        };
        let path = temp_file("multi");
        let (a, b) = (build(None), build(Some(&path)));
        parity!(&a, &b, ops, steps, allow_at, |x: &ratomic::MultiDecision, y: &ratomic::MultiDecision| format!("{x:?}") == format!("{y:?}"));
        std::fs::remove_file(&path).unwrap();
    }
}

/// Honest churn far beyond `max_keys`, one process: the table never holds
/// more than `max_keys` keys, and under `Strict` no key is ever granted more
/// than its bucket allows, however often it is evicted.
#[test]
fn churn_beyond_max_keys_stays_bounded_and_strict_never_over_grants() {
    for eviction in [Eviction::Fair, Eviction::Strict] {
        let path = temp_file("churn");
        let l = TokenBucket::builder(Quota::per_hour(3).unwrap())
            .clock(ManualClock::new())
            .max_keys(256)
            .eviction(eviction)
            .shared_file(&path)
            .build()
            .unwrap();
        let mut granted = std::collections::HashMap::<u32, u32>::new();
        for n in 0..20_000u32 {
            // 2,000 keys, each asked 10 times over ten seconds: never refilled.
            let k = n.wrapping_mul(2_654_435_761) % 2000;
            if l.allow_at(&k.to_le_bytes(), 1, u64::from(n) * 500_000).unwrap().allowed {
                *granted.entry(k).or_default() += 1;
            }
            assert!(l.len() <= 256, "{eviction:?}: {} keys held", l.len());
        }
        let over: u32 = granted.values().map(|&g| g.saturating_sub(3)).sum();
        if eviction == Eviction::Strict {
            assert_eq!(over, 0, "Strict granted {over} more than the buckets hold");
        }
        let mut fps = l.shared_fingerprints().unwrap();
        let n = fps.len();
        fps.sort_unstable();
        fps.dedup();
        assert_eq!(fps.len(), n, "a key is held twice");
        std::fs::remove_file(&path).unwrap();
    }
}

/// Two `Quotas` limiters on one file (as two processes would build them)
/// share every (quota, key) bucket.
#[test]
fn quotas_share_their_buckets_through_a_file() {
    let path = temp_file("quotas");
    let build =
        || ratomic::Quotas::builder().clock(ManualClock::new()).max_keys(64).shared_file(&path).build().unwrap();
    let (a, b) = (build(), build());
    let three = Quota::per_minute(3).unwrap();
    let five = Quota::per_minute(5).unwrap();
    let granted =
        |l: &ratomic::Quotas<ManualClock>, q: &Quota| (0..4).filter(|_| l.allow("acme", q).unwrap().allowed).count();
    assert_eq!(granted(&a, &three) + granted(&b, &three), 3);
    assert_eq!(granted(&b, &five) + granted(&a, &five), 5, "another quota: another bucket");
    std::fs::remove_file(&path).unwrap();
}
