//! The C ABI against the same call in Rust, side by side in one run.
//!
//! The C side goes through the real `libratomic.so`, loaded with `dlopen`
//! and called through function pointers: what a C program's call through
//! the PLT costs, with no cross-crate inlining to flatter it. The Rust side
//! calls the `ratomic` crate directly. Both sides make the same limiter, on
//! the same keys, in the same order.
//!
//! ```text
//! cargo bench -p ratomic-ffi   # builds libratomic.so first
//! ```
//!
//! Groups: a hot key and 100k keys, each reading the library's clock
//! (`ratomic_allow` vs `allow_n`) and with an explicit time (`ratomic_allow_at`
//! vs `allow_at`), the two sides interleaved (see [`paired`]), for one token
//! bucket and for two (a multi-limit limiter: `ratomic_multi_limiter_from_rates`
//! vs `Limiter`); and the batch call on 100k keys.

use std::cell::RefCell;
use std::ffi::{c_char, c_void, CString};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ratomic_core::{Limiter as RustLimiter, Quota, Rule, TokenBucket};

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Decision {
    allowed: bool,
    remaining: u64,
    limit: u64,
    retry_after_ns: u64,
    reset_after_ns: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Request {
    key: *const u8,
    key_len: usize,
    cost: u64,
}

type Limiter = c_void;
type NewFn = unsafe extern "C" fn(u64, f64, *const c_void, *mut *mut Limiter) -> u32;
type FromRatesFn = unsafe extern "C" fn(*const c_char, *const c_void, *mut *mut Limiter) -> u32;
type AllowFn = unsafe extern "C" fn(*const Limiter, *const u8, usize, u64, *mut Decision) -> u32;
type AllowAtFn = unsafe extern "C" fn(*const Limiter, *const u8, usize, u64, u64, *mut Decision) -> u32;
type ManyFn = unsafe extern "C" fn(*const Limiter, *const Request, usize, *mut Decision) -> u32;
type FreeFn = unsafe extern "C" fn(*mut Limiter);

/// The C ABI, loaded from `target/release/libratomic.so`.
struct CAbi {
    new: NewFn,
    from_rates: FromRatesFn,
    allow: AllowFn,
    allow_at: AllowAtFn,
    allow_many: ManyFn,
    free: FreeFn,
}

impl CAbi {
    fn load() -> CAbi {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
        // Build the library first (a no-op when it is up to date): a
        // libratomic.so left from an older tree would time old C-side code
        // against new Rust code, which once went into BENCHMARKS.md.
        // `cargo bench` gives its benches the path of cargo in `CARGO`.
        if let Some(cargo) = std::env::var_os("CARGO") {
            let status = std::process::Command::new(cargo)
                .args(["build", "--release", "--quiet", "-p", "ratomic-ffi"])
                .status()
                .expect("run cargo");
            assert!(status.success(), "cargo build --release -p ratomic-ffi failed");
        }
        let path = target.join("release/libratomic.so");
        assert!(path.exists(), "{} is missing: run `cargo build --release -p ratomic-ffi` first", path.display());
        let c_path = CString::new(path.to_str().expect("a UTF-8 path")).unwrap();
        // SAFETY: a valid NUL-terminated path; the library has no constructors
        // that could misbehave.
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!handle.is_null(), "dlopen({}) failed", path.display());
        let sym = |name: &str| {
            let c = CString::new(name).unwrap();
            // SAFETY: `handle` is a live library handle; `c` is NUL-terminated.
            let p = unsafe { libc::dlsym(handle, c.as_ptr() as *const c_char) };
            assert!(!p.is_null(), "libratomic.so has no {name}");
            p
        };
        // SAFETY: each symbol is the extern "C" function of that signature in
        // include/ratomic.h (ratomic_result is a uint32_t).
        unsafe {
            CAbi {
                new: std::mem::transmute::<*mut c_void, NewFn>(sym("ratomic_token_bucket_new")),
                from_rates: std::mem::transmute::<*mut c_void, FromRatesFn>(sym("ratomic_multi_limiter_from_rates")),
                allow: std::mem::transmute::<*mut c_void, AllowFn>(sym("ratomic_allow")),
                allow_at: std::mem::transmute::<*mut c_void, AllowAtFn>(sym("ratomic_allow_at")),
                allow_many: std::mem::transmute::<*mut c_void, ManyFn>(sym("ratomic_allow_many")),
                free: std::mem::transmute::<*mut c_void, FreeFn>(sym("ratomic_limiter_free")),
            }
        }
    }

    fn token_bucket(&self, capacity: u64, per_sec: f64) -> *mut Limiter {
        let mut out = std::ptr::null_mut();
        // SAFETY: valid arguments; NULL options.
        assert_eq!(unsafe { (self.new)(capacity, per_sec, std::ptr::null(), &mut out) }, 0);
        out
    }

    fn multi_from_rates(&self, rates: &str) -> *mut Limiter {
        let rates = CString::new(rates).unwrap();
        let mut out = std::ptr::null_mut();
        // SAFETY: a NUL-terminated string; NULL options.
        assert_eq!(unsafe { (self.from_rates)(rates.as_ptr(), std::ptr::null(), &mut out) }, 0);
        out
    }
}

// A quota under which every timed call is a grant (the work of a CAS that
// succeeds) and no key is ever idle, the same on both sides. The calls
// with an explicit time all pass one fixed time, read before the clock
// rows run, so nothing refills during them and they are stamped behind
// their keys' states: the capacity must outlast both. 10^15 does. With
// 10^6, the capacity until 2026-11-26, the hot key ran out after a million
// calls, the 100k-key `explicit_now` calls were all denied, and the 1 ms
// window let the store forget every key between two passes, so the
// 100k-key clock rows timed an insert a call.
const CAPACITY: u64 = 1_000_000_000_000_000;
const PER_SEC: f64 = 1e9;
/// The two-limit rows' limits, each as large as [`CAPACITY`] for the same
/// reason, in the rate syntax both faces parse (two rates, so two names).
const TWO_RATES: [&str; 2] = ["1000000000000000/second", "2000000000000000/second"];
const KEYS: usize = 100_000;

fn keys() -> Vec<Vec<u8>> {
    (0..KEYS).map(|i| format!("user:{i:08}").into_bytes()).collect()
}

/// Calls per chunk in [`paired`].
const CHUNK: u64 = 256;

/// Benchmarks `rust` and `c_abi` *interleaved*: every sample of either runs
/// both, alternating chunks of [`CHUNK`] calls on the same key sequence, and
/// reports only its own side's time. On a shared, noisy machine the two
/// sides then see the same load.
///
/// It also prints, per group, the median over all chunk pairs of the
/// per-call times and of their ratio: a preemption inflates one chunk of a
/// pair, which the median discards, so this ratio is the robust figure on a
/// loaded machine (criterion's means carry the preemptions).
fn paired(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    label: &str,
    param: &str,
    keys: &[Vec<u8>],
    rust: &dyn Fn(&[u8]),
    c_abi: &dyn Fn(&[u8]),
) {
    let pairs: RefCell<Vec<(f64, f64)>> = RefCell::new(Vec::new());
    let run = |iters: u64, measure_rust: bool| {
        let mut measured = Duration::ZERO;
        let mut next = 0usize;
        let mut left = iters;
        while left > 0 {
            let n = left.min(CHUNK);
            let mut times = [Duration::ZERO; 2];
            for (t, f) in times.iter_mut().zip([rust, c_abi]) {
                let start = Instant::now();
                for i in next..next + n as usize {
                    f(&keys[i % keys.len()]);
                }
                *t = start.elapsed();
            }
            measured += if measure_rust { times[0] } else { times[1] };
            if n == CHUNK {
                let per_call = |d: Duration| d.as_secs_f64() * 1e9 / n as f64;
                pairs.borrow_mut().push((per_call(times[0]), per_call(times[1])));
            }
            next += n as usize;
            left -= n;
        }
        measured
    };
    group.bench_function(BenchmarkId::new("rust", param), |b| b.iter_custom(|iters| run(iters, true)));
    group.bench_function(BenchmarkId::new("c_abi", param), |b| b.iter_custom(|iters| run(iters, false)));

    let pairs = pairs.into_inner();
    if pairs.is_empty() {
        return; // filtered out on the command line
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let rust_ns = median(pairs.iter().map(|p| p.0).collect());
    let c_ns = median(pairs.iter().map(|p| p.1).collect());
    let ratio = median(pairs.iter().map(|p| p.1 / p.0).collect());
    println!(
        "PAIRED allow/{label}/{param}: median per call rust {rust_ns:.1} ns, c_abi {c_ns:.1} ns; \
         median ratio c_abi/rust {ratio:.3} over {} chunk pairs of {CHUNK} calls",
        pairs.len()
    );
}

fn bench(c: &mut Criterion) {
    let abi = CAbi::load();
    let keys = keys();

    for (label, n_keys) in [("hot_key", 1usize), ("100k_keys", KEYS)] {
        let rust = TokenBucket::new(Quota::new(CAPACITY, PER_SEC).unwrap());
        single_calls(c, &abi, label, &keys[..n_keys], &rust, abi.token_bucket(CAPACITY, PER_SEC));
        let rules = TWO_RATES.map(|r| Rule::parse(r).unwrap());
        let rust = RustLimiter::builder()
            .keys::<[u8]>()
            .limit(TWO_RATES[0], rules[0])
            .limit(TWO_RATES[1], rules[1])
            .build()
            .unwrap();
        let label = format!("two_limits_{label}");
        single_calls(c, &abi, &label, &keys[..n_keys], &rust, abi.multi_from_rates(&TWO_RATES.join(";")));
    }

    // Batches of 1000 over the 100k keys.
    let mut group = c.benchmark_group("allow_many/100k_keys");
    const BATCH: usize = 1000;
    group.throughput(Throughput::Elements(BATCH as u64));
    let rust = TokenBucket::new(Quota::new(CAPACITY, PER_SEC).unwrap());
    let cl = abi.token_bucket(CAPACITY, PER_SEC);
    let requests: Vec<Request> = keys.iter().map(|k| Request { key: k.as_ptr(), key_len: k.len(), cost: 1 }).collect();
    let mut decisions = vec![Decision::default(); BATCH];
    let mut out = Vec::with_capacity(BATCH);
    let mut start = 0usize;
    group.bench_function("rust", |b| {
        b.iter(|| {
            let batch = &keys[start..start + BATCH];
            start = (start + BATCH) % KEYS;
            out.clear();
            rust.allow_many_at(batch.iter().map(|k| (k.as_slice(), 1)), rust.now(), &mut out).unwrap();
            black_box(&out);
        })
    });
    let mut start = 0usize;
    group.bench_function("c_abi", |b| {
        b.iter(|| {
            let batch = &requests[start..start + BATCH];
            start = (start + BATCH) % KEYS;
            // SAFETY: live limiter; arrays of BATCH elements.
            let rc = unsafe { (abi.allow_many)(cl, batch.as_ptr(), BATCH, decisions.as_mut_ptr()) };
            assert_eq!(rc, 0);
            black_box(&decisions);
        })
    });
    group.finish();
    // SAFETY: made above, no longer used.
    unsafe { (abi.free)(cl) };
}

/// The Rust side of a single-call group: a limiter on `[u8]` keys whose
/// call the timed closure makes, answer kept whole (`black_box`).
trait RustSide {
    fn warm(&self, k: &[u8]);
    fn now(&self) -> u64;
    fn allow_clock(&self, k: &[u8]);
    fn allow_at(&self, k: &[u8], now: u64);
    fn grants_at(&self, k: &[u8], now: u64) -> bool;
}

impl RustSide for TokenBucket<[u8]> {
    fn warm(&self, k: &[u8]) {
        let _ = self.allow(k).unwrap();
    }
    fn now(&self) -> u64 {
        TokenBucket::now(self)
    }
    fn allow_clock(&self, k: &[u8]) {
        let _ = black_box(self.allow_n(black_box(k), 1).unwrap());
    }
    fn allow_at(&self, k: &[u8], now: u64) {
        let _ = black_box(TokenBucket::allow_at(self, black_box(k), 1, black_box(now)).unwrap());
    }
    fn grants_at(&self, k: &[u8], now: u64) -> bool {
        TokenBucket::allow_at(self, k, 1, now).unwrap().allowed
    }
}

/// A multi-limit call's combined decision, as the C call writes it.
impl RustSide for RustLimiter<[u8]> {
    fn warm(&self, k: &[u8]) {
        let _ = self.allow(k).unwrap();
    }
    fn now(&self) -> u64 {
        RustLimiter::now(self)
    }
    fn allow_clock(&self, k: &[u8]) {
        let _ = black_box(self.allow_n(black_box(k), 1).unwrap().decision);
    }
    fn allow_at(&self, k: &[u8], now: u64) {
        let _ = black_box(RustLimiter::allow_at(self, black_box(k), 1, black_box(now)).unwrap().decision);
    }
    fn grants_at(&self, k: &[u8], now: u64) -> bool {
        RustLimiter::allow_at(self, k, 1, now).unwrap().allowed()
    }
}

/// One group of single calls on `keys`: the Rust limiter `rust` against
/// the C limiter `cl` (freed at the end), both made with the same quota and
/// warmed with every key, so neither side pays for inserts; the clock
/// rows, then the explicit-time rows, then a check that the last call of
/// each side still grants.
fn single_calls<R: RustSide>(c: &mut Criterion, abi: &CAbi, label: &str, keys: &[Vec<u8>], rust: &R, cl: *mut Limiter) {
    let mut group = c.benchmark_group(format!("allow/{label}"));
    group.throughput(Throughput::Elements(1));
    for k in keys {
        rust.warm(k);
        let mut d = Decision::default();
        // SAFETY: live limiter, valid key.
        assert_eq!(unsafe { (abi.allow)(cl, k.as_ptr(), k.len(), 1, &mut d) }, 0);
    }
    let now = rust.now();

    let c_clock = |k: &[u8]| {
        let mut d = Decision::default();
        // SAFETY: live limiter, valid key, writable decision.
        let rc = unsafe { (abi.allow)(cl, black_box(k.as_ptr()), k.len(), 1, &mut d) };
        assert_eq!(rc, 0);
        black_box(d);
    };
    paired(&mut group, label, "clock", keys, &|k| rust.allow_clock(k), &c_clock);

    let c_at = |k: &[u8]| {
        let mut d = Decision::default();
        // SAFETY: as above.
        let rc = unsafe { (abi.allow_at)(cl, black_box(k.as_ptr()), k.len(), 1, black_box(now), &mut d) };
        assert_eq!(rc, 0);
        black_box(d);
    };
    paired(&mut group, label, "explicit_now", keys, &|k| rust.allow_at(k, now), &c_at);
    group.finish();
    // At one fixed time a bucket only empties: if the last key still
    // grants, every timed call was a grant, on both sides.
    let last = keys[keys.len() - 1].as_slice();
    let mut d = Decision::default();
    // SAFETY: as above.
    assert_eq!(unsafe { (abi.allow_at)(cl, last.as_ptr(), last.len(), 1, now, &mut d) }, 0);
    assert!(d.allowed && rust.grants_at(last, now), "a timed call was denied");
    // SAFETY: made by the caller, no longer used.
    unsafe { (abi.free)(cl) };
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3)).sample_size(50);
    targets = bench
}
criterion_main!(benches);
