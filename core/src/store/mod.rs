//! The keyed store: a map from key to that key's state words, sharded by
//! hash, bounded, and forgetting full buckets without losing anything.
//!
//! # Design (chosen by measurement; see `BENCHMARKS.md`, "key store")
//!
//! Each shard is an open-addressing table (`table.rs`) behind a
//! reader-writer lock. Calls on keys that exist — the hot path — take the
//! read lock, find the slot and run the algorithm's CAS loop on its state
//! word; many threads do this at once on the same shard. The write lock is
//! taken only to insert a key, to rebuild a table, or to forget a key.
//!
//! The hasher is foldhash with a per-process random seed (plus a per-store
//! one): fast on short keys, and attackers who choose keys cannot predict
//! which keys collide, so they cannot build long probe runs.
//!
//! # Forgetting keys, losslessly
//!
//! A key whose bucket is full again carries no information (SPEC §5). When a
//! table would grow past its load factor it is first rebuilt without such
//! keys; `gc` does the same on demand. No background thread, no timer: the
//! work is amortised over inserts (a rebuild leaves at least a quarter of the
//! table free, so it pays for itself over the inserts that fill it).
//!
//! Each shard keeps a *floor*: the [`join`](crate::Algorithm) of every state
//! it has forgotten. A key that is not in the table answers as if its state
//! were the floor. Forgetting a full bucket leaves the floor at or before
//! "now", so later calls are unchanged; the floor only matters for a call
//! that read the clock before a concurrent forget, which then sees a state no
//! more generous than the one forgotten. So dropping and re-creating a key
//! never grants more than keeping it would have.
//!
//! # `max_keys`
//!
//! Each shard holds at most `ceil(max_keys / shards)` keys. When a shard is
//! full of keys that are not yet full buckets, it forgets the eighth of them
//! that are closest to full, and joins their states into the floor. This
//! never grants more than remembering them would (the floor is at least as
//! restrictive as each forgotten state), never blocks and never allocates
//! beyond the bound; the price is that, until the floor's time passes, keys
//! new to that shard start with fewer tokens than a full bucket.

mod table;

use std::hash::BuildHasher;
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::key::StoredKey;
use crate::sync::{self, AtomicU64, Ordering, RwLock};
use table::Table;

/// Most state words one key can have (the most limits one `Limiter` holds).
pub(crate) const MAX_WIDTH: usize = 16;

/// A table is rebuilt before its load would exceed 3/4...
const MAX_LOAD: (usize, usize) = (3, 4);
/// ...to a load of 1/2, so it grows by 1.5× when nothing can be dropped and a
/// full table holds between 1/2 and 3/4 of its slots (memory per key within
/// 4/3 and 2 slots). A rebuild for room keeps at least the table's capacity
/// (its load may then fall below 1/2 until keys return); `gc` rebuilds to 1/2.
const TARGET_LOAD: (usize, usize) = (1, 2);
const MIN_CAPACITY: usize = 8;

/// How a store decides what it may forget: provided by the algorithm(s)
/// whose state the store holds.
pub(crate) trait Retention {
    /// State words of a key never seen.
    fn pristine(&self, out: &mut [u64]);
    /// Nanoseconds until these states carry no information; 0 = droppable.
    fn idle_after(&self, states: &[u64], now: u64) -> u64;
    /// `floor := join(floor, states)`, word by word.
    fn join_into(&self, floor: &mut [u64], states: &[u64]);
}

/// How a keyed limiter stores its keys: the memory bound, the longest key,
/// and the number of shards.
///
/// ```
/// use ratomic::{Options, Quota, TokenBucket};
///
/// let limiter = TokenBucket::builder(Quota::per_second(10)?)
///     .options(Options::default().max_keys(100_000).max_key_len(64))
///     .build()?;
/// assert!(limiter.allow(&[b'x'; 65]).is_err()); // too long: an error, no state change
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Most keys held at once (approximately: enforced per shard, so the true
    /// bound is `max_keys` rounded up to a multiple of the shard count).
    /// Default 4,194,304 (about 135–240 MB of slots for byte keys).
    pub max_keys: usize,
    /// Longest key accepted, in bytes; longer keys are an error. Default 1024.
    pub max_key_len: usize,
    /// Number of shards (a power of two), or `None` for the default: four
    /// per CPU, at least 64, at most 1024, and fewer when `max_keys` is small
    /// so that each shard can hold at least 64 keys.
    pub shards: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Options { max_keys: 1 << 22, max_key_len: 1024, shards: None }
    }
}

impl Options {
    /// Sets [`max_keys`](Self::max_keys).
    pub fn max_keys(mut self, n: usize) -> Self {
        self.max_keys = n;
        self
    }

    /// Sets [`max_key_len`](Self::max_key_len).
    pub fn max_key_len(mut self, n: usize) -> Self {
        self.max_key_len = n;
        self
    }

    /// Sets [`shards`](Self::shards).
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n);
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_keys == 0 {
            return Err(Error::invalid("max_keys", self.max_keys, "must be at least 1"));
        }
        if self.max_key_len == 0 || self.max_key_len > u32::MAX as usize {
            return Err(Error::invalid("max_key_len", self.max_key_len, "must be between 1 and 2^32 − 1"));
        }
        if let Some(s) = self.shards {
            if !s.is_power_of_two() || s > 1 << 16 {
                return Err(Error::invalid("shards", s, "must be a power of two, at most 65536"));
            }
        }
        Ok(())
    }

    fn shard_count(&self) -> usize {
        if let Some(s) = self.shards {
            return s;
        }
        static CPUS: OnceLock<usize> = OnceLock::new();
        let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let mut shards = (cpus * 4).next_power_of_two().clamp(64, 1024);
        while shards > 1 && self.max_keys / shards < 64 {
            shards /= 2;
        }
        shards
    }
}

/// Per-process random seeds in production. loom needs every execution of a
/// model to make the same choices, so under loom the seed is fixed.
#[cfg(not(ratomic_loom))]
type Hasher = foldhash::fast::RandomState;
#[cfg(ratomic_loom)]
type Hasher = foldhash::fast::FixedState;

/// Keeps each shard's lock on its own cache lines (two, for the adjacent-line
/// prefetcher), so threads working on different shards do not contend.
#[repr(align(128))]
struct Padded<T>(T);

struct Shard<S: StoredKey> {
    table: Table<S>,
    floor: [u64; MAX_WIDTH],
}

pub(crate) struct Store<S: StoredKey> {
    shards: Box<[Padded<RwLock<Shard<S>>>]>,
    mask: usize,
    hasher: Hasher,
    width: usize,
    max_per_shard: usize,
}

impl<S: StoredKey> Store<S> {
    pub(crate) fn new(options: &Options, width: usize, retention: &impl Retention) -> Result<Self> {
        options.validate()?;
        assert!((1..=MAX_WIDTH).contains(&width));
        let count = options.shard_count();
        let mut floor = [0; MAX_WIDTH];
        retention.pristine(&mut floor[..width]);
        let shards = (0..count).map(|_| Padded(RwLock::new(Shard { table: Table::empty(width), floor }))).collect();
        Ok(Store {
            shards,
            mask: count - 1,
            hasher: Hasher::default(),
            width,
            max_per_shard: options.max_keys.div_ceil(count),
        })
    }

    #[inline]
    pub(crate) fn hasher(&self) -> &impl BuildHasher {
        &self.hasher
    }

    #[inline]
    fn shard(&self, hash: u64) -> &RwLock<Shard<S>> {
        &self.shards[hash as usize & self.mask].0
    }

    /// Runs `op` on the key's state words and returns its result. `op` also
    /// says whether it changed them; it may run more than once (only the
    /// last result is returned) and must touch nothing but the words it is
    /// given.
    ///
    /// A key that is absent answers from its shard's floor; it is inserted
    /// only if `op` changed that state, so denials and peeks never allocate.
    #[inline]
    pub(crate) fn update<R>(
        &self,
        hash: u64,
        probe: &S::Probe<'_>,
        now: u64,
        retention: &impl Retention,
        op: impl Fn(&[AtomicU64]) -> (R, bool),
    ) -> R {
        let lock = self.shard(hash);
        {
            let shard = sync::read(lock);
            if let Some(i) = shard.table.find(hash, probe) {
                return op(shard.table.states(i)).0;
            }
            let (r, changed) = self.on_floor(&shard.floor, &op);
            if changed.is_none() {
                return r;
            }
        }
        self.insert_slow(lock, hash, probe, now, retention, op)
    }

    /// Runs `op` on the key's state words if the key is held; does nothing
    /// (and inserts nothing) if it is not.
    pub(crate) fn with_existing(&self, hash: u64, probe: &S::Probe<'_>, op: impl FnOnce(&[AtomicU64])) {
        let shard = sync::read(self.shard(hash));
        if let Some(i) = shard.table.find(hash, probe) {
            op(shard.table.states(i));
        }
    }

    #[cold]
    fn insert_slow<R>(
        &self,
        lock: &RwLock<Shard<S>>,
        hash: u64,
        probe: &S::Probe<'_>,
        now: u64,
        retention: &impl Retention,
        op: impl Fn(&[AtomicU64]) -> (R, bool),
    ) -> R {
        let mut shard = sync::write(lock);
        if let Some(i) = shard.table.find(hash, probe) {
            return op(shard.table.states(i)).0; // inserted by another call meanwhile
        }
        self.make_room(&mut shard, now, retention, 1);
        let (r, changed) = self.on_floor(&shard.floor, &op);
        if let Some(states) = changed {
            shard.table.insert(hash, S::from_probe(probe), &states[..self.width]);
        }
        r
    }

    /// Runs `op` on a private copy of the floor: the answer for an absent key,
    /// and the states to insert if `op` changed them.
    fn on_floor<R>(
        &self,
        floor: &[u64; MAX_WIDTH],
        op: &impl Fn(&[AtomicU64]) -> (R, bool),
    ) -> (R, Option<[u64; MAX_WIDTH]>) {
        #[cfg(not(ratomic_loom))]
        {
            // A private copy, seen as atomics: only the words in use are
            // touched, with no per-word construction (this runs on every
            // call for a key the store does not hold).
            #[repr(C, align(8))]
            struct Words([u64; MAX_WIDTH]);
            let mut words = Words(*floor);
            let ptr = words.0.as_mut_ptr().cast::<AtomicU64>();
            // SAFETY: `AtomicU64` has the size and bit validity of `u64`, and
            // `Words` gives the alignment it needs (8); the slice borrows the
            // private copy exclusively until `op` returns.
            let cells = unsafe { std::slice::from_raw_parts(ptr, self.width) };
            let (r, changed) = op(cells);
            (r, changed.then_some(words.0))
        }
        #[cfg(ratomic_loom)]
        {
            let cells: [AtomicU64; MAX_WIDTH] = std::array::from_fn(|w| AtomicU64::new(floor[w]));
            let (r, changed) = op(&cells[..self.width]);
            (r, changed.then(|| std::array::from_fn(|w| cells[w].load(Ordering::Relaxed))))
        }
    }

    /// Forgets the key: afterwards it answers as a key never seen.
    pub(crate) fn reset(&self, hash: u64, probe: &S::Probe<'_>, now: u64, retention: &impl Retention) {
        let mut shard = sync::write(self.shard(hash));
        let floor_matters = retention.idle_after(&shard.floor[..self.width], now) > 0;
        let mut pristine = [0; MAX_WIDTH];
        retention.pristine(&mut pristine[..self.width]);
        match shard.table.find(hash, probe) {
            Some(i) if floor_matters => {
                for (cell, &v) in shard.table.states(i).iter().zip(&pristine) {
                    cell.store(v, Ordering::Relaxed);
                }
            }
            Some(i) => shard.table.remove(i, |k| k.rehash(&self.hasher)),
            // Absent, and the floor is more restrictive than a fresh key:
            // store a fresh state explicitly so the reset is exact.
            None if floor_matters => {
                self.make_room(&mut shard, now, retention, 1);
                shard.table.insert(hash, S::from_probe(probe), &pristine[..self.width]);
            }
            None => {}
        }
    }

    /// Keys currently stored (including full buckets not yet forgotten).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| sync::read(&s.0).table.live()).sum()
    }

    /// Bytes of slot memory held by all shards' tables.
    pub(crate) fn table_bytes(&self) -> usize {
        self.shards.iter().map(|s| Table::<S>::bytes_for(sync::read(&s.0).table.capacity(), self.width)).sum()
    }

    /// Forgets every key that carries no information at `now`, shrinking
    /// tables that have become sparse. Returns how many keys were dropped.
    pub(crate) fn gc(&self, now: u64, retention: &impl Retention) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let mut shard = sync::write(&s.0);
                let before = shard.table.live();
                self.make_room(&mut shard, now, retention, 0);
                before - shard.table.live()
            })
            .sum()
    }

    /// Ensures `extra` more keys fit (in load and in `max_keys`), rebuilding
    /// the table without droppable keys and, if the shard is still over its
    /// bound, without the keys closest to full. With `extra == 0` (gc) the
    /// table is rebuilt only if that drops or shrinks something.
    fn make_room(&self, shard: &mut Shard<S>, now: u64, retention: &impl Retention, extra: usize) {
        let table = &shard.table;
        let fits_load = (table.live() + extra) * MAX_LOAD.1 <= table.capacity() * MAX_LOAD.0;
        let fits_bound = table.live() + extra <= self.max_per_shard;
        if extra > 0 && fits_load && fits_bound {
            return;
        }

        // Pass 1: how many keys still carry information and, only if some of
        // those must go to respect `max_keys`, how long until each is droppable.
        let mut buf = [0u64; MAX_WIDTH];
        let mut wait_of = |i: usize| {
            for (b, cell) in buf.iter_mut().zip(table.states(i)) {
                *b = cell.load(Ordering::Relaxed);
            }
            retention.idle_after(&buf[..self.width], now)
        };
        let mut survivors = 0;
        table.for_each_occupied(|i| survivors += usize::from(wait_of(i) > 0));
        let limit = self.max_per_shard;
        let keep =
            if survivors + extra > limit { survivors.min((limit - limit / 8).min(limit - extra)) } else { survivors };
        let mut new_cap = if keep + extra == 0 {
            0
        } else {
            ((keep + extra) * TARGET_LOAD.1).div_ceil(TARGET_LOAD.0).max(MIN_CAPACITY)
        };
        if extra > 0 {
            // A rebuild for room never shrinks the table: keys that went idle
            // and come back (most clients of a per-IP limit) would otherwise
            // shrink and regrow it over and over. `gc` shrinks it.
            new_cap = new_cap.max(table.capacity());
        }
        if extra == 0 && keep == table.live() && new_cap >= table.capacity() {
            return; // gc found nothing to drop and nothing to shrink
        }

        // Evict the `survivors - keep` keys with the shortest waits: all below
        // `threshold`, and as many equal to it as needed.
        let (threshold, mut ties) = if keep < survivors {
            let mut idle = Vec::with_capacity(survivors);
            table.for_each_occupied(|i| {
                let wait = wait_of(i);
                if wait > 0 {
                    idle.push(wait);
                }
            });
            let n = survivors - keep;
            let (_, &mut nth, _) = idle.select_nth_unstable(n - 1);
            let below = idle.iter().filter(|&&w| w < nth).count();
            (nth, n - below)
        } else {
            (0, 0)
        };
        let mut evict = |states: &[u64]| {
            let wait = retention.idle_after(states, now);
            wait == 0
                || wait < threshold
                || (wait == threshold && ties > 0 && {
                    ties -= 1;
                    true
                })
        };

        // Pass 2: drop what goes, in place when the size stays (no
        // allocation), else by moving what stays into a table of the new size.
        let floor = &mut shard.floor;
        let width = self.width;
        if new_cap == shard.table.capacity() && new_cap > 0 {
            let hasher = &self.hasher;
            shard.table.retain(
                |states| !evict(states),
                |states| retention.join_into(&mut floor[..width], states),
                |key| key.rehash(hasher),
            );
        } else {
            let mut fresh = Table::with_capacity(new_cap, width);
            shard.table.drain(|key, states| {
                if evict(states) {
                    retention.join_into(&mut floor[..width], states);
                } else {
                    fresh.insert(key.rehash(&self.hasher), key, states);
                }
            });
            shard.table = fresh;
        }
    }
}
