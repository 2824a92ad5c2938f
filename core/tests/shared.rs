//! The shared store across real processes: this test binary runs itself
//! as the workers (`worker` and `task` below do nothing unless started by a
//! test with `RATOMIC_SHM_ROLE` or `RATOMIC_SHM_TASK` set), hammering one
//! file; the parent checks every recorded grant against the limits,
//! SIGKILLs and SIGSTOPs workers mid-traffic, fills a real tmpfs, and
//! checks the file's safe-open refusals.
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
fn a_file_in_use_is_refused_with_a_clear_error_when_it_does_not_fit() {
    let d = dir("refuse");
    let path = d.join("rule.ratomic");
    let _ = std::fs::remove_file(&path);
    let first = build("bucket", &path, 1000).unwrap();
    assert!(first.allow("a"));
    // Another rule, another max_keys, another limiter kind, while `first` uses it.
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

    // A file in use, truncated under its users.
    let short = d.join("short.ratomic");
    let _ = std::fs::remove_file(&short);
    let user = build("bucket", &short, 1000).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&short).unwrap();
    f.set_len(4096 * 4).unwrap();
    let e = refusal(build("bucket", &short, 1000));
    assert!(e.contains("truncated") && e.contains("in use"), "{e}");
    f.set_len(100).unwrap();
    assert!(refusal(build("bucket", &short, 1000)).contains("truncated"));
    drop(user); // untouched since the truncation: it would fault

    // A file that is not ours, in use or not: never overwritten.
    let junk = d.join("junk.ratomic");
    std::fs::write(&junk, vec![7u8; 8192]).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&junk, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(refusal(build("bucket", &junk, 1000)).contains("not a ratomic"));
    assert_eq!(std::fs::read(&junk).unwrap(), vec![7u8; 8192], "left as it was");

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

/// A file nobody uses is made anew for whichever limiter opens it — after a
/// change of limit, a truncation, a reboot — its old keys gone.
#[test]
fn a_file_nobody_uses_is_made_anew_for_the_limiter_that_opens_it() {
    let d = dir("anew");
    let path = d.join("rule.ratomic");
    let _ = std::fs::remove_file(&path);
    let first = build("bucket", &path, 1000).unwrap();
    assert!(first.allow("a"));
    drop(first);
    // Another rule, then another max_keys: each starts afresh.
    let other = build("bucket60", &path, 1000).unwrap();
    assert_eq!((0..70).filter(|_| other.allow("a")).count(), 60, "a new rule, a new bucket");
    drop(other);
    let bigger = build("bucket", &path, 2000).unwrap();
    assert_eq!((0..60).filter(|_| bigger.allow("a")).count(), 50);
    drop(bigger);

    // Truncated.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(4096 * 4).unwrap();
    let again = build("bucket", &path, 1000).unwrap();
    assert_eq!((0..60).filter(|_| again.allow("a")).count(), 50);
    drop(again);

    // Made before the last boot: its boot id (header bytes 32..48) differs.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[32] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let after_boot = build("bucket", &path, 1000).unwrap();
    assert_eq!((0..60).filter(|_| after_boot.allow("a")).count(), 50, "times from another boot are dropped");
    let _ = std::fs::remove_dir_all(&d);
}

unsafe extern "C" {
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
        // A shared file reads the host's clock; the calls give their own times.
        let b = TokenBucket::builder(q).max_keys(64).shared_file(&path).build().unwrap();
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
        let b = SlidingWindow::builder(r).max_keys(64).shared_file(&path).build().unwrap();
        parity!(&a, &b, ops, steps, allow_at, |x: &ratomic::Decision, y: &ratomic::Decision| x == y);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_shared_two_limit_limiter_answers_as_one_in_process(
        ops in prop::collection::vec(op(), 1..80),
        steps in prop::collection::vec(prop_oneof![Just(0u64), 0u64..300_000_000, 0u64..3_000_000_000], 80),
    ) {
        let builder = || {
            Limiter::builder()
                .limit("second", Rule::token_bucket(Quota::per_second(4).unwrap()))
                .limit("minute", Rule::fixed_window(Rate::new(9, Duration::from_secs(10)).unwrap()).unwrap())
                .max_keys(64)
        };
        let path = temp_file("multi");
        let a = builder().clock(ManualClock::new()).build().unwrap();
        let b = builder().shared_file(&path).build().unwrap();
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
    let build = || ratomic::Quotas::builder().max_keys(64).shared_file(&path).build().unwrap();
    let (a, b) = (build(), build());
    // Per hour: no test lasts the 20 minutes a token takes to refill.
    let three = Quota::per_hour(3).unwrap();
    let five = Quota::per_hour(5).unwrap();
    let granted = |l: &ratomic::Quotas, q: &Quota| (0..4).filter(|_| l.allow("acme", q).unwrap().allowed).count();
    assert_eq!(granted(&a, &three) + granted(&b, &three), 3);
    assert_eq!(granted(&b, &five) + granted(&a, &five), 5, "another quota: another bucket");
    std::fs::remove_file(&path).unwrap();
}

// ---- operations: other users, stopped processes, full file systems, new limits

/// The other tasks a test starts this binary as (`RATOMIC_SHM_TASK`,
/// words separated by `|`):
///
/// - `lock|PATH|stop?`: takes `flock(LOCK_EX)` on PATH, as every opener
///   does while it checks or initialises the file, prints "locked", then
///   stops itself (SIGSTOP) or waits for its stdin to close;
/// - `open|PATH|KIND|MAX`: builds that limiter, prints "ok" or "err MESSAGE";
/// - `hold|PATH|KIND|MAX`: builds it, takes one token of key "a", prints
///   "ready", and keeps it until its stdin closes;
/// - `fill|PATH|MAX`: inserts new keys until one is refused, then checks
///   the refusal changed nothing (see the test);
/// - `gc|PATH|MAX`: fills the table with keys in use, prints "full", then
///   runs `gc()` forever, printing "gc" after each;
/// - `insert|PATH|MAX|TAG`: inserts new keys forever, printing "n" after
///   every 100.
#[test]
fn task() {
    use std::io::{Read, Write};
    let Ok(task) = std::env::var("RATOMIC_SHM_TASK") else { return };
    let w: Vec<&str> = task.split('|').collect();
    let path = Path::new(w[1]);
    let out = std::io::stdout();
    let mut out = out.lock();
    let mut say = |line: &str| {
        writeln!(out, "{line}").unwrap();
        out.flush().unwrap();
    };
    let wait_for_stdin = || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    };
    let busy = || Quota::per_hour(5).unwrap();
    match w[0] {
        "lock" => {
            let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: an open descriptor.
            assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
            say("locked");
            if w[2] == "stop" {
                // SAFETY: stops this process until SIGCONT (or SIGKILL).
                unsafe { libc::raise(libc::SIGSTOP) };
            }
            wait_for_stdin();
        }
        "open" => match build(w[2], path, w[3].parse().unwrap()) {
            Ok(_) => say("ok"),
            Err(e) => say(&format!("err {e}")),
        },
        "hold" => {
            let l = build(w[2], path, w[3].parse().unwrap()).unwrap();
            assert!(l.allow("a"));
            say("ready");
            wait_for_stdin();
        }
        "fill" => {
            let l = TokenBucket::builder(busy()).max_keys(w[2].parse().unwrap()).shared_file(path).build().unwrap();
            let mut n = 0u64;
            let e = loop {
                match l.allow(&format!("key{n}")) {
                    Ok(d) => assert!(d.allowed),
                    Err(e) => break e,
                }
                n += 1;
            };
            // The refusal changed nothing: the keys held are the same, the
            // refused key was not charged, and keys held still answer.
            let held = l.len();
            assert_eq!(l.allow(&format!("key{n}")).unwrap_err(), e, "refused again, the same way");
            assert_eq!(l.len(), held);
            assert_eq!(l.allow("key0").unwrap().remaining, 3, "a key held still works");
            assert!(l.gc().is_ok());
            drop(l);
            // On u64 keys, `allow` cannot return an error: it denies (fail
            // closed) where `allow_at` reports the error.
            std::fs::remove_file(path).unwrap();
            let ids = TokenBucket::builder(busy())
                .keys::<u64>()
                .max_keys(w[2].parse().unwrap())
                .shared_file(path)
                .build()
                .unwrap();
            let mut m = 0u64;
            let denied = loop {
                let d = ids.allow(&m);
                if !d.allowed {
                    break d;
                }
                m += 1;
            };
            assert!(denied.remaining == 0 && !denied.retry_after.is_zero(), "{denied:?}");
            assert!(matches!(ids.allow_at(&m, 1, ids.now()), Err(Error::SharedFile { .. })));
            say(&format!("inserted {n} then {m}"));
            say(&format!("err {e}"));
        }
        "gc" => {
            let max: usize = w[2].parse().unwrap();
            let l = TokenBucket::builder(busy()).max_keys(max).shared_file(path).build().unwrap();
            for k in 0..max {
                assert!(l.allow(&format!("held{k}")).unwrap().allowed);
            }
            say("full");
            loop {
                l.gc().unwrap();
                say("gc");
            }
        }
        "insert" => {
            let l = TokenBucket::builder(busy()).max_keys(w[2].parse().unwrap()).shared_file(path).build().unwrap();
            say("ready");
            for n in 1u64.. {
                assert!(l.allow(&format!("{}{n}", w[3])).unwrap().allowed);
                if n % 100 == 0 {
                    say("n");
                }
            }
        }
        other => panic!("unknown task {other}"),
    }
}

/// A running task: its stdout's lines arrive on a channel, so a test can
/// wait for one with a bound (never for a speed: the bound only turns a
/// hang into a failure).
struct Task {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

/// Far longer than anything here takes on a loaded machine: reaching it
/// means something is stuck, never that something is slow.
const HANG: Duration = Duration::from_secs(120);

impl Task {
    fn start(task: String) -> Task {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "task", "--nocapture", "--test-threads=1"])
            .env("RATOMIC_SHM_TASK", task)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                // The test harness starts the task's first line with its own words.
                let line = line.strip_prefix("test task ... ").map(str::to_owned).unwrap_or(line);
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Task { child, lines }
    }

    /// The next line that starts as one of `starts`, waiting at most [`HANG`].
    fn expect(&self, starts: &[&str], what: &str) -> String {
        let deadline = std::time::Instant::now() + HANG;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if starts.iter().any(|s| line.starts_with(s)) => return line,
                Ok(_) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("the task ended before {what}"),
                Err(_) => panic!("stuck: no {what} within {} s", HANG.as_secs()),
            }
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn signal(&self, sig: i32) {
        // SAFETY: a child of ours, not yet waited for.
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// Closes its stdin (a `hold` or `lock` task then exits) and waits.
    fn finish(mut self) -> std::process::ExitStatus {
        drop(self.child.stdin.take());
        self.child.wait().unwrap()
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn is_root() -> bool {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Issue 35: a constructor blocked on another user's file that that user
/// held locked. The owner is checked before any lock now: refused at once.
#[test]
fn another_users_file_is_refused_without_waiting_on_its_lock() {
    if !is_root() {
        eprintln!(
            "SKIPPED another_users_file_is_refused_without_waiting_on_its_lock: only root can make another user's file"
        );
        return;
    }
    let d = dir("theirs");
    // A sticky, world-writable directory, as /tmp is.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let path = d.join("limits.ratomic");
    let _ = std::fs::remove_file(&path);
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    let holder = Task::start(format!("lock|{}|hold", path.display()));
    holder.expect(&["locked"], "lock taken");
    let opener = Task::start(format!("open|{}|bucket|1000", path.display()));
    let answer = opener.expect(&["ok", "err"], "answer from the constructor while another user holds the lock");
    assert!(answer.contains("owned by another user"), "{answer}");
    assert!(holder.finish().success());
    let _ = std::fs::remove_dir_all(&d);
}

/// Issue 35: a creator stopped while it holds the opening lock blocked
/// every later opener. Now an opener waits at most `OPEN_WAIT` (5 s), then
/// fails naming the file, the holder and what to do; once the holder is
/// gone, it opens.
#[test]
fn an_opener_names_a_stopped_process_that_holds_the_opening_lock() {
    let path = dir("stopped").join("limits.ratomic");
    let _ = std::fs::remove_file(&path);
    drop(build("bucket", &path, 1000).unwrap());
    let holder = Task::start(format!("lock|{}|stop", path.display()));
    holder.expect(&["locked"], "lock taken");
    let opener = Task::start(format!("open|{}|bucket|1000", path.display()));
    let answer = opener.expect(&["ok", "err"], "answer from the constructor while a stopped process holds the lock");
    let pid = holder.pid();
    assert!(answer.starts_with("err"), "{answer}");
    for part in [path.display().to_string(), format!("process {pid}"), "stopped".into(), format!("kill -CONT {pid}")] {
        assert!(answer.contains(&part), "{part:?} missing from: {answer}");
    }
    holder.signal(libc::SIGKILL);
    drop(holder);
    let opener = Task::start(format!("open|{}|bucket|1000", path.display()));
    assert_eq!(opener.expect(&["ok", "err"], "answer"), "ok");
    std::fs::remove_file(&path).unwrap();
}

/// A tmpfs of `size`, mounted for a test and unmounted after.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(tag: &str, size: &str) -> Tmpfs {
        let d = dir(tag);
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("tmpfs")
            .arg(&d)
            .status()
            .unwrap();
        assert!(ok.success(), "mount -t tmpfs failed");
        Tmpfs(d)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Issue 35: on a file system too small for the file, a process died of a
/// bus error (its initialiser wrote every word; its keys landed on holes).
/// Now space is reserved before it is written: creating the file, and
/// each key's first use of a page, fail with an error that changes
/// nothing, and the process lives on.
#[test]
fn a_full_file_system_is_an_error_never_a_bus_error() {
    if !is_root() {
        eprintln!("SKIPPED a_full_file_system_is_an_error_never_a_bus_error: mounting a tmpfs needs root");
        return;
    }
    // 100,000 keys: a 5 MiB file on a 1 MiB tmpfs.
    let fs = Tmpfs::mount("tmpfs-full", "1m");
    let path = fs.0.join("limits.ratomic");
    let filler = Task::start(format!("fill|{}|100000", path.display()));
    let inserted = filler.expect(&["inserted"], "the filler's end");
    let refusal = filler.expect(&["err"], "the refusal");
    let status = filler.finish();
    assert!(status.success(), "the process died: {status}");
    let counts: Vec<u64> = inserted.split(' ').filter_map(|w| w.parse().ok()).collect();
    assert!(counts.len() == 2 && counts.iter().all(|&n| n > 100), "{inserted}: too few keys fit");
    for part in ["the file system holding it is full", &path.display().to_string(), "nothing was changed"] {
        assert!(refusal.contains(part), "{part:?} missing from: {refusal}");
    }
    // Creating a file when there is no room even for its fixed part.
    std::fs::remove_file(&path).unwrap();
    let ballast = fs.0.join("ballast");
    let _ = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", ballast.display()))
        .args(["bs=4096", "count=100000"])
        .stderr(Stdio::null())
        .status();
    let opener = Task::start(format!("open|{}|bucket|100000", path.display()));
    let answer = opener.expect(&["ok", "err"], "answer");
    let status = opener.finish();
    assert!(status.success(), "the process died: {status}");
    assert!(answer.contains("the file system holding it is full"), "{answer}");
}

/// Issue 35: a process looping on `gc()` (stopped with SIGSTOP, in turn)
/// held a lock every other process's insert of a new key into a full
/// table waited on. Maintenance takes no lock now: while the gc process is
/// stopped, another inserts new keys — 6,000 of them each time, counted,
/// not timed.
#[test]
fn a_stopped_gc_process_never_stops_others_inserting() {
    let path = dir("gc-stop").join("limits.ratomic");
    let _ = std::fs::remove_file(&path);
    let max = 20_000;
    let gc = Task::start(format!("gc|{}|{max}", path.display()));
    gc.expect(&["full"], "the table filled");
    let inserter = Task::start(format!("insert|{}|{max}|new", path.display()));
    inserter.expect(&["ready"], "the inserter");
    for _ in 0..4 {
        gc.expect(&["gc"], "a gc pass");
        gc.signal(libc::SIGSTOP);
        // More than a sweep by the old protocol freed (an eighth of
        // `max_keys`, 2,500), so it needed the lock during each stop.
        for _ in 0..60 {
            inserter.expect(&["n"], "100 inserts while the gc process is stopped");
        }
        gc.signal(libc::SIGCONT);
    }
    // Its own keys in, and the table at its bound.
    let l = build("bucket", &path, max);
    assert!(l.is_err(), "a different rule is refused while they run");
}

/// Issue 35: the insert that found the table full swept it all and evicted
/// an eighth of it (1.0–1.1 s at the default `max_keys`). Now it makes room
/// for itself: one key goes, not 512.
#[test]
fn an_insert_into_a_full_table_evicts_one_key_not_an_eighth() {
    let path = temp_file("full");
    let max = 4096;
    let l = TokenBucket::builder(Quota::per_hour(5).unwrap()).max_keys(max).shared_file(&path).build().unwrap();
    for k in 0..max {
        assert!(l.allow(&format!("held{k}")).unwrap().allowed);
    }
    assert_eq!(l.len(), max);
    assert!(l.allow("one more").unwrap().allowed);
    assert_eq!(l.len(), max, "one key evicted for the new one");
    std::fs::remove_file(&path).unwrap();
}

/// Issue 36: a file with the default `max_keys` took 200 MiB at once. Now
/// it is sparse, and its default is sized for a web service (131,072
/// keys): it holds its header, bitmap and floor until keys land.
#[test]
fn a_new_file_costs_what_it_holds() {
    use std::os::unix::fs::MetadataExt;
    let path = temp_file("sparse");
    let l = TokenBucket::builder("5/min").shared_file(&path).build().unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.len() < 8 << 20, "{} bytes for the default max_keys", meta.len());
    let empty = meta.blocks() * 512;
    assert!(empty <= 512 << 10, "{empty} bytes allocated with no key");
    // The file system's own blocks (an extent tree) come on top.
    let near = |a: u64, b: u64| a <= b && b <= a + (64 << 10);
    assert!(
        near(l.memory_bytes() as u64, empty),
        "memory_bytes {} is what has backing store, {empty}",
        l.memory_bytes()
    );
    for k in 0..1000 {
        assert!(l.allow(&format!("k{k}")).unwrap().allowed);
    }
    let held = std::fs::metadata(&path).unwrap().blocks() * 512;
    // A key's window spans at most two pages.
    assert!(held <= empty + 1000 * 2 * 4096, "{held} bytes allocated with 1,000 keys");
    assert!(near(l.memory_bytes() as u64, held), "memory_bytes {} vs {held} allocated", l.memory_bytes());
    std::fs::remove_file(&path).unwrap();
}

/// Issue 36: a limit changed on an existing file was refused even with no
/// process using it (and workers that died of it were respawned into the
/// same error). Now: refused with both limiters and the fix named while
/// another process uses it, made anew once it has exited.
#[test]
fn a_new_limit_waits_for_the_old_users_then_takes_the_file() {
    let path = dir("new-limit").join("limits.ratomic");
    let _ = std::fs::remove_file(&path);
    let old = Task::start(format!("hold|{}|bucket|1000", path.display()));
    old.expect(&["ready"], "the old limiter");
    let e = refusal(build("bucket60", &path, 1000));
    for part in [
        "in use with a different rule",
        "token bucket 50 per 50h",
        "token bucket 60 per 1s",
        &format!("rm -- '{}'", path.display()),
        &format!("fuser -v '{}'", path.display()),
    ] {
        assert!(e.contains(part), "{part:?} missing from: {e}");
    }
    assert!(old.finish().success());
    let new = build("bucket60", &path, 1000).unwrap();
    assert_eq!((0..70).filter(|_| new.allow("a")).count(), 60, "made anew: key a is full");
    std::fs::remove_file(&path).unwrap();
}

/// Issue 35: a `ManualClock` with a shared file was accepted, and one
/// process's times then locked a key for 653 s in the others'. A shared
/// file needs the host's monotonic clock: any other is refused, and no
/// file is made.
#[test]
fn a_limiter_with_a_clock_of_its_own_is_refused_on_a_shared_file() {
    struct Ticks;
    impl ratomic::Clock for Ticks {
        fn now(&self) -> u64 {
            42
        }
    }
    let path = temp_file("clock");
    let errors = [
        TokenBucket::builder("5/min").clock(ManualClock::new()).shared_file(&path).build().map(drop),
        TokenBucket::builder("5/min").clock(Ticks).shared_file(&path).build().map(drop),
        Limiter::builder()
            .limit("a", Rule::parse("5/min").unwrap())
            .clock(ManualClock::new())
            .shared_file(&path)
            .build()
            .map(drop),
        ratomic::Quotas::builder().clock(ManualClock::new()).shared_file(&path).build().map(drop),
    ];
    for e in errors {
        let e = e.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { name: "clock", .. }), "{e}");
        assert!(e.to_string().contains("monotonic clock"), "{e}");
    }
    assert!(!path.exists(), "a refused limiter makes no file");
    // The default clock is the host's: accepted.
    assert!(TokenBucket::builder("5/min").shared_file(&path).build().is_ok());
    std::fs::remove_file(&path).unwrap();
}
