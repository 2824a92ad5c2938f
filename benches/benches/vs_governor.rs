//! ratomic vs governor, side by side on the same quota, in one run.
//!
//! Every scenario runs twice: with both crates on a manual clock (ratomic's
//! `ManualClock`, governor's `FakeRelativeClock`: an atomic load, time never
//! moves) and with both on their default clocks (ratomic's `MonotonicClock`,
//! `std::time::Instant`; governor's `DefaultClock`, quanta's TSC clock).
//! Criterion group names are `<clock>/<scenario>`, function names `ratomic`
//! and `governor`; `report.py` turns the results into ratio tables.
//!
//! Scenarios (issue 2, item 4):
//! - (a) `direct-allow`, `direct-deny`: one global bucket, one thread.
//! - (b) `hot-u64`, `hot-str16`, `hot-deny`: keyed, one key.
//! - (c) `keys100k-u64`, `keys1m-u64`, `keys100k-str16`, `keys1m-str16`:
//!   keyed, every key already present, visited in random order.
//! - (d) `insert-u64`, `insert-str16`: 100k new keys into an empty limiter
//!   (growth included, building and dropping the limiter excluded).
//! - (e) `2threads-hot`, `2threads-100k`: two threads at once, on one key
//!   and on 100k keys; the time reported is wall time per call per thread.
//!
//! Throughput scenarios use a quota that never denies (burst 2^32 − 1, one
//! token a second), so every call takes the full allow path including the
//! write; the `deny` scenarios use 1000/s with bursts of 50, drained first.
//!
//! `cargo bench -p ratomic-benches --bench vs_governor`

use std::hash::Hash;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use governor::clock::{Clock as GClock, DefaultClock, FakeRelativeClock};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::RateLimiter;
use ratomic::{Clock as RClock, DirectTokenBucket, Gcra, Keyed, ManualClock, MonotonicClock, TokenBucket};
use ratomic_benches::{
    governor_deny, governor_huge, ratomic_deny, ratomic_huge, str_keys, time_inserts, two_threads, u64_keys, Cycle,
};

type GovKeyed<K, C> = RateLimiter<K, DashMapStateStore<K>, C, NoOpMiddleware<<C as GClock>::Instant>>;
type GovDirect<C> = RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as GClock>::Instant>>;

/// A pair of clocks, one per crate, of the same kind.
trait Clocks: 'static {
    const NAME: &'static str;
    type R: RClock + 'static;
    type G: GClock + Send + Sync + 'static;
    fn ratomic() -> Self::R;
    fn governor() -> Self::G;
}

/// Both manual: an atomic load that never moves.
struct Fake;
impl Clocks for Fake {
    const NAME: &'static str = "fake";
    type R = ManualClock;
    type G = FakeRelativeClock;
    fn ratomic() -> ManualClock {
        ManualClock::new()
    }
    fn governor() -> FakeRelativeClock {
        FakeRelativeClock::default()
    }
}

/// Both defaults: `Instant` vs quanta's TSC clock.
struct Real;
impl Clocks for Real {
    const NAME: &'static str = "default";
    type R = MonotonicClock;
    type G = DefaultClock;
    fn ratomic() -> MonotonicClock {
        MonotonicClock::new()
    }
    fn governor() -> DefaultClock {
        DefaultClock::default()
    }
}

/// A key type both crates are benchmarked with: `u64` (ratomic's
/// `.keys::<u64>()`) or a 16-byte `String` (ratomic's default byte keys).
trait BenchKey: Clone + Hash + Eq + Send + Sync + 'static {
    const NAME: &'static str;
    type R: ?Sized + ratomic::Key;
    fn generate(n: usize, seed: u64) -> Vec<Self>;
    fn ratomic<C: RClock>(q: ratomic::Quota, clock: C) -> Keyed<Gcra, Self::R, C>;
    fn allow<C: RClock>(l: &Keyed<Gcra, Self::R, C>, key: &Self) -> bool;
}

impl BenchKey for u64 {
    const NAME: &'static str = "u64";
    type R = u64;
    fn generate(n: usize, seed: u64) -> Vec<u64> {
        u64_keys(n, seed)
    }
    fn ratomic<C: RClock>(q: ratomic::Quota, clock: C) -> Keyed<Gcra, u64, C> {
        TokenBucket::builder(q).keys::<u64>().clock(clock).build().unwrap()
    }
    #[inline]
    fn allow<C: RClock>(l: &Keyed<Gcra, u64, C>, key: &u64) -> bool {
        l.allow(key).allowed
    }
}

impl BenchKey for String {
    const NAME: &'static str = "str16";
    type R = [u8];
    fn generate(n: usize, seed: u64) -> Vec<String> {
        str_keys(n, seed)
    }
    fn ratomic<C: RClock>(q: ratomic::Quota, clock: C) -> Keyed<Gcra, [u8], C> {
        TokenBucket::builder(q).clock(clock).build().unwrap()
    }
    #[inline]
    fn allow<C: RClock>(l: &Keyed<Gcra, [u8], C>, key: &String) -> bool {
        l.allow(key.as_str()).unwrap().allowed
    }
}

fn gov_keyed<K: BenchKey, C: Clocks>(q: governor::Quota) -> GovKeyed<K, C::G> {
    RateLimiter::dashmap_with_clock(q, C::governor())
}

// ---- (a) single bucket ------------------------------------------------------

fn direct<C: Clocks>(c: &mut Criterion) {
    let mut g = c.benchmark_group(format!("{}/direct-allow", C::NAME));
    let r = DirectTokenBucket::with_clock(ratomic_huge(), C::ratomic());
    let gv: GovDirect<C::G> = RateLimiter::direct_with_clock(governor_huge(), C::governor());
    g.bench_function("ratomic", |b| b.iter(|| black_box(r.allow().allowed)));
    g.bench_function("governor", |b| b.iter(|| black_box(gv.check().is_ok())));
    g.finish();

    let mut g = c.benchmark_group(format!("{}/direct-deny", C::NAME));
    let r = DirectTokenBucket::with_clock(ratomic_deny(), C::ratomic());
    let gv: GovDirect<C::G> = RateLimiter::direct_with_clock(governor_deny(), C::governor());
    while r.allow().allowed {}
    while gv.check().is_ok() {}
    g.bench_function("ratomic", |b| b.iter(|| black_box(r.allow().allowed)));
    g.bench_function("governor", |b| b.iter(|| black_box(gv.check().is_ok())));
    g.finish();
}

// ---- (b) one hot key --------------------------------------------------------

fn hot<C: Clocks, K: BenchKey>(c: &mut Criterion) {
    let key = K::generate(1, 7).pop().unwrap();
    let mut g = c.benchmark_group(format!("{}/hot-{}", C::NAME, K::NAME));
    let r = K::ratomic(ratomic_huge(), C::ratomic());
    let gv = gov_keyed::<K, C>(governor_huge());
    g.bench_function("ratomic", |b| b.iter(|| black_box(K::allow(&r, black_box(&key)))));
    g.bench_function("governor", |b| b.iter(|| black_box(gv.check_key(black_box(&key)).is_ok())));
    g.finish();
}

fn hot_deny<C: Clocks>(c: &mut Criterion) {
    let key = 42u64;
    let mut g = c.benchmark_group(format!("{}/hot-deny", C::NAME));
    let r = u64::ratomic(ratomic_deny(), C::ratomic());
    let gv = gov_keyed::<u64, C>(governor_deny());
    while u64::allow(&r, &key) {}
    while gv.check_key(&key).is_ok() {}
    g.bench_function("ratomic", |b| b.iter(|| black_box(u64::allow(&r, black_box(&key)))));
    g.bench_function("governor", |b| b.iter(|| black_box(gv.check_key(black_box(&key)).is_ok())));
    g.finish();
}

// ---- (c) many keys, all present ---------------------------------------------

fn many<C: Clocks, K: BenchKey>(c: &mut Criterion, n: usize, label: &str) {
    let keys = K::generate(n, 1);
    let mut g = c.benchmark_group(format!("{}/keys{}-{}", C::NAME, label, K::NAME));
    {
        let r = K::ratomic(ratomic_huge(), C::ratomic());
        keys.iter().for_each(|k| assert!(K::allow(&r, k)));
        assert_eq!(r.len(), n, "every key stays in ratomic's store");
        let mut cycle = Cycle::new(&keys, 0);
        g.bench_function("ratomic", |b| b.iter(|| black_box(K::allow(&r, cycle.next_key()))));
    }
    {
        let gv = gov_keyed::<K, C>(governor_huge());
        keys.iter().for_each(|k| assert!(gv.check_key(k).is_ok()));
        assert_eq!(gv.len(), n);
        let mut cycle = Cycle::new(&keys, 0);
        g.bench_function("governor", |b| b.iter(|| black_box(gv.check_key(cycle.next_key()).is_ok())));
    }
    g.finish();
}

// ---- (d) new keys -----------------------------------------------------------

fn insert<C: Clocks, K: BenchKey>(c: &mut Criterion) {
    let keys = K::generate(100_000, 3);
    let mut g = c.benchmark_group(format!("{}/insert-{}", C::NAME, K::NAME));
    g.bench_function("ratomic", |b| {
        b.iter_custom(|iters| {
            time_inserts(iters, &keys, || K::ratomic(ratomic_huge(), C::ratomic()), |l, i| K::allow(l, &keys[i]))
        })
    });
    g.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            time_inserts(iters, &keys, || gov_keyed::<K, C>(governor_huge()), |l, i| l.check_key(&keys[i]).is_ok())
        })
    });
    g.finish();
}

// ---- (e) two threads --------------------------------------------------------

fn threads<C: Clocks>(c: &mut Criterion) {
    for (label, n) in [("hot", 1), ("100k", 100_000)] {
        let keys = u64_keys(n, 5);
        let mut g = c.benchmark_group(format!("{}/2threads-{}", C::NAME, label));
        let r = u64::ratomic(ratomic_huge(), C::ratomic());
        keys.iter().for_each(|k| assert!(u64::allow(&r, k)));
        g.bench_function("ratomic", |b| b.iter_custom(|iters| two_threads(iters, &keys, |k| u64::allow(&r, k))));
        drop(r);
        let gv = gov_keyed::<u64, C>(governor_huge());
        keys.iter().for_each(|k| assert!(gv.check_key(k).is_ok()));
        g.bench_function("governor", |b| b.iter_custom(|iters| two_threads(iters, &keys, |k| gv.check_key(k).is_ok())));
        g.finish();
    }
}

fn all<C: Clocks>(c: &mut Criterion) {
    direct::<C>(c);
    hot::<C, u64>(c);
    hot::<C, String>(c);
    hot_deny::<C>(c);
    many::<C, u64>(c, 100_000, "100k");
    many::<C, u64>(c, 1_000_000, "1m");
    many::<C, String>(c, 100_000, "100k");
    many::<C, String>(c, 1_000_000, "1m");
    insert::<C, u64>(c);
    insert::<C, String>(c);
    threads::<C>(c);
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = all::<Fake>, all::<Real>
}
criterion_main!(benches);
