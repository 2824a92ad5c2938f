//! Which concurrent map should hold the keys? The same GCRA compare-and-swap
//! on a per-key `AtomicU64`, with the state kept in:
//!
//! - `dashmap`: `DashMap<u64, AtomicU64>` (sharded `RwLock<hashbrown>`; what
//!   governor uses),
//! - `papaya`: `papaya::HashMap<u64, AtomicU64>` (lock-free, epoch-based
//!   reclamation; one `pin()` per call),
//! - `scc`: `scc::HashMap<u64, AtomicU64>` (lock-free reads, bucket locks
//!   for writes),
//! - `ratomic`: ratomic's own store (sharded open-addressing tables behind
//!   per-shard `RwLock`s), through `TokenBucket::allow_at`, which does the
//!   same arithmetic and also builds the `Decision`.
//!
//! All maps use foldhash with a random seed, as ratomic does. The lookup path
//! of the three peers is "get; if absent, insert then CAS", the same shape as
//! ratomic's (read lock, find; write lock only to insert).
//!
//! Scenarios: one hot key; 100k keys already present, random order; 100k
//! inserts into an empty map (growth included); two threads on 100k keys.
//!
//! `cargo bench -p ratomic-benches --bench stores`

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use foldhash::fast::RandomState;
use ratomic::{Gcra, Keyed, ManualClock, TokenBucket};
use ratomic_benches::{ratomic_huge, time_inserts, two_threads, u64_keys, Cycle};

/// The time every call is made at (the quota never denies).
const NOW: u64 = 1;

/// The GCRA step of the contract (docs/CONTRACT.md §4.1) on one cell: what each peer store runs.
#[derive(Clone, Copy)]
struct Gcra1 {
    t: u64,
    tau: u64,
}

impl Gcra1 {
    fn new() -> Self {
        let q = ratomic_huge();
        let t = q.emission_interval_nanos();
        Gcra1 { t, tau: q.capacity() * t }
    }

    #[inline]
    fn charge(self, cell: &AtomicU64, now: u64) -> bool {
        let mut cur = cell.load(Ordering::Relaxed);
        loop {
            let tat = cur.max(now);
            let new = tat + self.t;
            if new - now > self.tau {
                return false;
            }
            match cell.compare_exchange_weak(cur, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// A candidate store: make one, charge one key.
trait Store: Sync {
    const NAME: &'static str;
    fn make() -> Self;
    fn charge(&self, g: Gcra1, key: u64) -> bool;
    fn len(&self) -> usize;
}

struct Dash(dashmap::DashMap<u64, AtomicU64, RandomState>);
impl Store for Dash {
    const NAME: &'static str = "dashmap";
    fn make() -> Self {
        Dash(dashmap::DashMap::with_hasher(RandomState::default()))
    }
    #[inline]
    fn charge(&self, g: Gcra1, key: u64) -> bool {
        if let Some(cell) = self.0.get(&key) {
            return g.charge(&cell, NOW);
        }
        let cell = self.0.entry(key).or_insert_with(|| AtomicU64::new(0));
        g.charge(&cell, NOW)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

struct Papaya(papaya::HashMap<u64, AtomicU64, RandomState>);
impl Store for Papaya {
    const NAME: &'static str = "papaya";
    fn make() -> Self {
        Papaya(papaya::HashMap::with_hasher(RandomState::default()))
    }
    #[inline]
    fn charge(&self, g: Gcra1, key: u64) -> bool {
        let map = self.0.pin();
        if let Some(cell) = map.get(&key) {
            return g.charge(cell, NOW);
        }
        g.charge(map.get_or_insert_with(key, || AtomicU64::new(0)), NOW)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

struct Scc(scc::HashMap<u64, AtomicU64, RandomState>);
impl Store for Scc {
    const NAME: &'static str = "scc";
    fn make() -> Self {
        Scc(scc::HashMap::with_hasher(RandomState::default()))
    }
    #[inline]
    fn charge(&self, g: Gcra1, key: u64) -> bool {
        if let Some(ok) = self.0.read(&key, |_, cell| g.charge(cell, NOW)) {
            return ok;
        }
        let entry = self.0.entry(key).or_insert(AtomicU64::new(0));
        g.charge(entry.get(), NOW)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

struct Ratomic(Keyed<Gcra, u64, ManualClock>);
impl Store for Ratomic {
    const NAME: &'static str = "ratomic";
    fn make() -> Self {
        Ratomic(TokenBucket::builder(ratomic_huge()).keys::<u64>().clock(ManualClock::new()).build().unwrap())
    }
    #[inline]
    fn charge(&self, _: Gcra1, key: u64) -> bool {
        self.0.allow_at(&key, 1, NOW).unwrap().allowed
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

fn lookups<S: Store>(g: &mut BenchmarkGroup<'_, WallTime>, keys: &[u64]) {
    let gcra = Gcra1::new();
    let s = S::make();
    keys.iter().for_each(|&k| assert!(s.charge(gcra, k)));
    assert_eq!(s.len(), keys.len());
    let mut cycle = Cycle::new(keys, 0);
    g.bench_function(S::NAME, |b| b.iter(|| black_box(s.charge(gcra, *cycle.next_key()))));
}

fn inserts<S: Store>(g: &mut BenchmarkGroup<'_, WallTime>, keys: &[u64]) {
    let gcra = Gcra1::new();
    g.bench_function(S::NAME, |b| {
        b.iter_custom(|iters| time_inserts(iters, keys, S::make, |s, i| s.charge(gcra, keys[i])))
    });
}

fn threads<S: Store>(g: &mut BenchmarkGroup<'_, WallTime>, keys: &[u64]) {
    let gcra = Gcra1::new();
    let s = S::make();
    keys.iter().for_each(|&k| assert!(s.charge(gcra, k)));
    g.bench_function(S::NAME, |b| b.iter_custom(|iters| two_threads(iters, keys, |&k| s.charge(gcra, k))));
}

macro_rules! each_store {
    ($f:ident, $g:expr, $keys:expr) => {
        $f::<Ratomic>($g, $keys);
        $f::<Dash>($g, $keys);
        $f::<Papaya>($g, $keys);
        $f::<Scc>($g, $keys);
    };
}

fn all(c: &mut Criterion) {
    let hot = u64_keys(1, 21);
    let many = u64_keys(100_000, 22);

    let mut g = c.benchmark_group("store/hot");
    each_store!(lookups, &mut g, &hot);
    g.finish();

    let mut g = c.benchmark_group("store/keys100k");
    each_store!(lookups, &mut g, &many);
    g.finish();

    let mut g = c.benchmark_group("store/insert");
    each_store!(inserts, &mut g, &many);
    g.finish();

    let mut g = c.benchmark_group("store/2threads-100k");
    each_store!(threads, &mut g, &many);
    g.finish();
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
    targets = all
}
criterion_main!(benches);
