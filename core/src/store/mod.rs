//! The keyed store: a map from key to that key's state words, sharded by
//! hash, bounded in keys and in bytes, and forgetting full buckets without
//! changing any decision.
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
//! # Forgetting full buckets, losslessly
//!
//! A key whose bucket is full again carries no information (SPEC §5). When a
//! table would grow past its load factor it is first rebuilt without such
//! keys; `gc` does the same on demand. No background thread, no timer: the
//! work is amortised over inserts (a rebuild leaves at least a quarter of the
//! table free, so it pays for itself over the inserts that fill it).
//!
//! A full state says nothing about a call stamped at or after the moment it
//! was forgotten, so forgetting it changes no such decision. A call stamped
//! *earlier* (a thread that read the clock before a concurrent `gc`, or an
//! `*_at` caller going back in time) answers from the shard's summary
//! (`summary.rs`): its own forgotten state when the shard still has it,
//! otherwise the join of every full state the shard forgot — never more
//! generous than the forgotten state, possibly less.
//!
//! # `max_keys`, `max_key_bytes` and [`Eviction`]
//!
//! Each shard holds at most `ceil(max_keys / shards)` keys, and at most
//! `max_key_bytes / shards` bytes of keys too long to store inline (longer
//! than 23 bytes; at least one `max_key_len` key always fits). When a shard
//! is full of keys that are not yet full buckets, it evicts the eighth of
//! them that are closest to full (the ones whose loss matters least; when
//! the byte budget binds, long keys go first in the same order), so it never
//! blocks, never allocates beyond the bound and never panics. What an
//! evicted key answers when it comes back is the [`Eviction`] policy:
//! [`Eviction::Fair`] (the default) keeps each evicted key's own state in a
//! bounded array of per-hash summaries, so churn on other keys never denies
//! a key it does not own, at the price of a bounded over-grant for a key
//! whose summary was displaced; [`Eviction::Strict`] never grants more than
//! remembering every key would, at the price of letting heavy churn deny
//! new keys. Measured under attack and under honest churn in `BENCHMARKS.md`
//! ("eviction").

mod summary;
mod table;

use std::hash::BuildHasher;
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::key::StoredKey;
use crate::sync::{self, AtomicU64, Ordering, RwLock};
use summary::Summary;
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

/// What a keyed limiter does with a key it must evict to respect
/// [`Options::max_keys`] (or [`Options::max_key_bytes`]) before the key's
/// bucket is full again.
///
/// No policy can keep memory bounded, never grant more than remembering
/// every key would, and keep one client's churn from denying another, all
/// at once, under unbounded churn. This is the trade, made explicit; the
/// measurements behind it (an attacker's single-use keys, and honest churn
/// beyond `max_keys`) are in `BENCHMARKS.md` ("eviction").
///
/// Both policies evict the keys closest to full first, and neither matters
/// to a store that never holds `max_keys` keys that are not full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Eviction {
    /// The default. An evicted key's state is kept in a bounded array of
    /// per-hash summaries (a quarter as many as `max_keys`), tagged with the
    /// key's 64-bit hash: the key finds its own state when it comes back,
    /// and no other key ever starts from it, so **churn on other keys never
    /// denies a call that would be allowed by itself**.
    ///
    /// The bound on what it can over-grant: a key evicted with `u` tokens
    /// used whose summary is displaced (by a later evicted key further from
    /// full that hashes to the same summary) before it comes back starts as
    /// a full bucket — at most `u` extra tokens, at most one limit's worth,
    /// per eviction of that key. A key is evicted only once its shard holds
    /// `max_keys / shards` keys that are not full and it is among the eighth
    /// closest to full.
    ///
    /// Those evictions can repeat. Under churn of new keys faster than the
    /// store turns over (in `BENCHMARKS.md`, 3,000 new keys a second against
    /// `max_keys` 1,000), a client being limited is evicted between its calls
    /// while its debt is still as small as every new key's, so it keeps
    /// coming back full and escapes its limit; honest clients are never
    /// denied. No bounded memory can remember a recurring key through
    /// unbounded churn: size `max_keys` above the distinct keys you expect
    /// within one refill period, or choose [`Strict`](Self::Strict) where
    /// an over-grant is worse than a denial.
    #[default]
    Fair,
    /// Never grants more than remembering every key would: evicted states
    /// are joined into the summary their key hashes to, and every key new to
    /// the store starts from its summary. The price: sustained churn beyond
    /// `max_keys` (an attacker's single-use keys) drives the summaries
    /// towards empty, and new keys — honest users included — are denied
    /// until they refill. For limits where an over-grant is worse than a
    /// denial (a paid quota, an upstream contract).
    Strict,
}

/// How a keyed limiter stores its keys: the memory bound, the longest key,
/// the number of shards and the eviction policy.
///
/// The memory a limiter holds, [`memory_bytes`](crate::Keyed::memory_bytes),
/// is at most about `2 × max_keys` slots (a slot is 24 bytes of key plus 8
/// per limit for byte keys, 8 plus 8 per limit for `u64` keys), plus
/// `max_key_bytes` of keys longer than 23 bytes, plus, once evictions
/// begin, summaries of 8 bytes plus 8 per limit for up to a quarter of the
/// keys held (at most `max_keys / 4`, rounded up to a power of two per
/// shard). With the defaults and one limit on byte keys: at most 256 MiB of
/// slots (typically 1.3–2 slots per key held), 64 MiB of long keys and
/// 16 MiB of summaries.
///
/// ```
/// use ratomic::{Eviction, Options, Quota, TokenBucket};
///
/// let limiter = TokenBucket::builder(Quota::per_second(10)?)
///     .options(Options::default().max_keys(100_000).max_key_len(64).eviction(Eviction::Strict))
///     .build()?;
/// assert!(limiter.allow(&[b'x'; 65]).is_err()); // too long: an error, no state change
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Most keys held at once (approximately: enforced per shard, so the true
    /// bound is `max_keys` rounded up to a multiple of the shard count).
    /// Default 4,194,304.
    pub max_keys: usize,
    /// Longest key accepted, in bytes; longer keys are an error. Default 1024.
    pub max_key_len: usize,
    /// Most bytes of keys too long to be stored inline (longer than 23
    /// bytes) held at once, enforced per shard like `max_keys` (each shard
    /// can always hold at least one key of `max_key_len`). Default 64 MiB.
    pub max_key_bytes: usize,
    /// Number of shards (a power of two), or `None` for the default: four
    /// per CPU, at least 64, at most 1024, and fewer when `max_keys` is small
    /// so that each shard can hold at least 64 keys.
    pub shards: Option<usize>,
    /// What happens to keys evicted to respect the bounds; see [`Eviction`].
    pub eviction: Eviction,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_keys: 1 << 22,
            max_key_len: 1024,
            max_key_bytes: 64 << 20,
            shards: None,
            eviction: Eviction::Fair,
        }
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

    /// Sets [`max_key_bytes`](Self::max_key_bytes).
    pub fn max_key_bytes(mut self, n: usize) -> Self {
        self.max_key_bytes = n;
        self
    }

    /// Sets [`shards`](Self::shards).
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n);
        self
    }

    /// Sets [`eviction`](Self::eviction).
    pub fn eviction(mut self, policy: Eviction) -> Self {
        self.eviction = policy;
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
    /// What the shard remembers of keys it no longer holds.
    summary: Summary,
    /// Bytes of keys stored outside their slots.
    key_bytes: usize,
}

pub(crate) struct Store<S: StoredKey> {
    shards: Box<[Padded<RwLock<Shard<S>>>]>,
    mask: usize,
    hasher: Hasher,
    width: usize,
    max_per_shard: usize,
    max_bytes_per_shard: usize,
    /// Most summary cells a shard grows to (a power of two).
    max_cells: usize,
}

impl<S: StoredKey> Store<S> {
    pub(crate) fn new(options: &Options, width: usize, retention: &impl Retention) -> Result<Self> {
        options.validate()?;
        assert!((1..=MAX_WIDTH).contains(&width));
        let count = options.shard_count();
        let shards = (0..count)
            .map(|_| {
                Padded(RwLock::new(Shard {
                    table: Table::empty(width),
                    summary: Summary::new(width, options.eviction, retention),
                    key_bytes: 0,
                }))
            })
            .collect();
        let max_per_shard = options.max_keys.div_ceil(count);
        Ok(Store {
            shards,
            mask: count - 1,
            hasher: Hasher::default(),
            width,
            max_per_shard,
            max_bytes_per_shard: (options.max_key_bytes / count).max(options.max_key_len),
            max_cells: (max_per_shard / 4).max(8).next_power_of_two(),
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
    /// A key that is absent answers from what its shard remembers of it
    /// (see `summary.rs`); it is inserted only if `op` changed that state,
    /// so denials and peeks never allocate.
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
            let (initial, _) = shard.summary.initial(hash, retention);
            let (r, changed) = self.on_copy(&initial, &op);
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
        let bytes = S::probe_heap_bytes(probe);
        self.make_room(&mut shard, now, retention, 1, bytes);
        let (initial, own_cell) = shard.summary.initial(hash, retention);
        let (r, changed) = self.on_copy(&initial, &op);
        if let Some(states) = changed {
            shard.table.insert(hash, S::from_probe(probe), &states[..self.width]);
            shard.key_bytes += bytes;
            if let Some(i) = own_cell {
                shard.summary.clear(i); // the table holds the key's state again
            }
        }
        r
    }

    /// Runs `op` on a private copy of `states`: the answer for an absent
    /// key, and the states to insert if `op` changed them.
    fn on_copy<R>(
        &self,
        states: &[u64; MAX_WIDTH],
        op: &impl Fn(&[AtomicU64]) -> (R, bool),
    ) -> (R, Option<[u64; MAX_WIDTH]>) {
        #[cfg(not(ratomic_loom))]
        {
            // A private copy, seen as atomics: only the words in use are
            // touched, with no per-word construction (this runs on every
            // call for a key the store does not hold).
            #[repr(C, align(8))]
            struct Words([u64; MAX_WIDTH]);
            let mut words = Words(*states);
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
            let cells: [AtomicU64; MAX_WIDTH] = std::array::from_fn(|w| AtomicU64::new(states[w]));
            let (r, changed) = op(&cells[..self.width]);
            (r, changed.then(|| std::array::from_fn(|w| cells[w].load(Ordering::Relaxed))))
        }
    }

    /// Forgets the key: afterwards it answers as a key never seen, for any
    /// call stamped at or after `now`.
    pub(crate) fn reset(&self, hash: u64, probe: &S::Probe<'_>, now: u64, retention: &impl Retention) {
        let mut shard = sync::write(self.shard(hash));
        shard.summary.clear_key(hash);
        let (initial, _) = shard.summary.initial(hash, retention);
        // Would the key, absent, start less than full? Then store a fresh
        // state explicitly, so the reset is exact.
        let summary_matters = retention.idle_after(&initial[..self.width], now) > 0;
        let mut pristine = [0; MAX_WIDTH];
        retention.pristine(&mut pristine[..self.width]);
        match shard.table.find(hash, probe) {
            Some(i) if summary_matters => {
                for (cell, &v) in shard.table.states(i).iter().zip(&pristine) {
                    cell.store(v, Ordering::Relaxed);
                }
            }
            Some(i) => {
                shard.key_bytes -= shard.table.key(i).heap_bytes();
                shard.table.remove(i, |k| k.rehash(&self.hasher));
            }
            None if summary_matters => {
                let bytes = S::probe_heap_bytes(probe);
                self.make_room(&mut shard, now, retention, 1, bytes);
                shard.table.insert(hash, S::from_probe(probe), &pristine[..self.width]);
                shard.key_bytes += bytes;
            }
            None => {}
        }
    }

    /// Keys currently stored (including full buckets not yet forgotten).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| sync::read(&s.0).table.live()).sum()
    }

    /// Bytes the store holds: every shard's table, the keys stored outside
    /// their slots, and the summaries of evicted keys.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let shard = sync::read(&s.0);
                Table::<S>::bytes_for(shard.table.capacity(), self.width) + shard.key_bytes + shard.summary.bytes()
            })
            .sum()
    }

    /// Forgets every key that carries no information at `now`, shrinking
    /// tables that have become sparse. Returns how many keys were dropped.
    pub(crate) fn gc(&self, now: u64, retention: &impl Retention) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let mut shard = sync::write(&s.0);
                let before = shard.table.live();
                self.make_room(&mut shard, now, retention, 0, 0);
                before - shard.table.live()
            })
            .sum()
    }

    /// Ensures `extra` more keys holding `extra_bytes` more key bytes fit (in
    /// load, in `max_keys` and in `max_key_bytes`), rebuilding the table
    /// without droppable keys and, if the shard is still over a bound,
    /// without the keys closest to full. With `extra == 0` (gc) the table is
    /// rebuilt only if that drops or shrinks something.
    fn make_room(&self, shard: &mut Shard<S>, now: u64, retention: &impl Retention, extra: usize, extra_bytes: usize) {
        let table = &shard.table;
        let fits_load = (table.live() + extra) * MAX_LOAD.1 <= table.capacity() * MAX_LOAD.0;
        let fits_keys = table.live() + extra <= self.max_per_shard;
        let fits_bytes = shard.key_bytes + extra_bytes <= self.max_bytes_per_shard;
        if extra > 0 && fits_load && fits_keys && fits_bytes {
            return;
        }

        // Pass 1: which keys still carry information, and their key bytes.
        let mut buf = [0u64; MAX_WIDTH];
        let mut wait_of = |i: usize| {
            for (b, cell) in buf.iter_mut().zip(table.states(i)) {
                *b = cell.load(Ordering::Relaxed);
            }
            retention.idle_after(&buf[..self.width], now)
        };
        let (mut survivors, mut survivor_bytes) = (0, 0);
        table.for_each_occupied(|i| {
            if wait_of(i) > 0 {
                survivors += 1;
                survivor_bytes += table.key(i).heap_bytes();
            }
        });
        let limit = self.max_per_shard;
        let over_keys = survivors + extra > limit;
        let byte_limit = self.max_bytes_per_shard;
        let over_bytes = survivor_bytes + extra_bytes > byte_limit;

        // Victims, if a bound binds: the keys closest to full, an eighth of
        // the shard at a time (so eviction is amortised over the inserts
        // that refill it); then, while the byte budget binds, long keys in
        // the same order.
        let mut victims: Option<Vec<bool>> = None;
        let mut keep = survivors;
        if over_keys || over_bytes {
            let mut candidates = Vec::with_capacity(survivors);
            table.for_each_occupied(|i| {
                let wait = wait_of(i);
                if wait > 0 {
                    candidates.push((wait, table.key(i).heap_bytes(), i));
                }
            });
            candidates.sort_unstable_by_key(|&(wait, _, _)| wait);
            let mut marked = vec![false; table.capacity()];
            let keep_keys = if over_keys { survivors.min((limit - limit / 8).min(limit - extra)) } else { survivors };
            let mut bytes = survivor_bytes;
            for &(_, b, i) in &candidates[..survivors - keep_keys] {
                marked[i] = true;
                bytes -= b;
            }
            keep = keep_keys;
            let byte_target = (byte_limit - byte_limit / 8).min(byte_limit.saturating_sub(extra_bytes));
            for &(_, b, i) in &candidates[survivors - keep_keys..] {
                if bytes <= byte_target {
                    break;
                }
                if b > 0 {
                    marked[i] = true;
                    bytes -= b;
                    keep -= 1;
                }
            }
            victims = Some(marked);
        }

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

        // Pass 2: drop what goes — idle keys and victims — remembering each
        // in the summary; in place when the size stays and nothing is
        // evicted (no allocation), else by moving what stays into a table
        // of the new size.
        let Shard { table, summary, key_bytes } = shard;
        let width = self.width;
        let hasher = &self.hasher;
        // Summaries for a quarter of the keys the shard holds (a power of
        // two, at least 8, at most a quarter of its share of max_keys).
        let cells = (table.live() / 4).max(8).next_power_of_two().min(self.max_cells);
        let mut forget = |key: &S, states: &[u64]| {
            let wait = retention.idle_after(states, now);
            summary.forget(key.rehash(hasher), states, wait, now, cells, retention);
            *key_bytes -= key.heap_bytes();
        };
        match victims {
            None if new_cap == table.capacity() && new_cap > 0 => {
                table.retain(|states| retention.idle_after(states, now) > 0, &mut forget, |key| key.rehash(hasher));
            }
            victims => {
                let mut fresh = Table::with_capacity(new_cap, width);
                table.drain(|slot, key, states| {
                    let evicted = victims.as_ref().is_some_and(|v| v[slot]);
                    if evicted || retention.idle_after(states, now) == 0 {
                        forget(&key, states);
                    } else {
                        fresh.insert(key.rehash(hasher), key, states);
                    }
                });
                *table = fresh;
            }
        }
    }
}
