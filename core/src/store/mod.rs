//! The keyed store: a map from key to that key's state words, sharded by
//! hash, bounded in keys and in bytes, and forgetting full buckets without
//! changing any decision.
//!
//! # Design: no locks on the way to a key's state
//!
//! Each shard is an open-addressing table (`table.rs`) of atomic words; a
//! slot's first state word is also its control word, so a call on a stored
//! key — the hot path — does the probe's loads, the algorithm's CAS on the
//! state and one re-read of the key (the slot may have been reused
//! meanwhile: the call then runs again, and what it changed stays, see
//! `cells.rs`). It takes no lock.
//!
//! Inserts, and everything that frees or fills slots — evicting and
//! forgetting keys, migrating to a new table — are done under a per-shard
//! insert lock ([`ShardLock`], issue 39). An insert whose lock-free probe
//! found its key absent probes again under the lock, where that answer is
//! final (nobody else places keys), and writes the key and publishes its
//! state with plain stores: no claim, no check for a racing copy (it also checks that the shard forgot no key
//! since it computed the states from what it remembers: see
//! `Store::insert`). An insert that takes its table past 3/4 grows it
//! before letting go of the lock: it forgets the idle keys in place, sizes
//! the new table for the keys left, sets the old table's `next` and moves
//! each live slot (locked, its states captured, copied into the new table,
//! marked MOVED) while calls go on — a call that meets its key being moved
//! waits for that one slot, then follows `next` — and then makes the new
//! table the shard's with one pointer store. Each key moves once per
//! growth. Old tables and long keys' heap blocks are freed through an
//! epoch (`epoch.rs`: a call pins its thread with a store, not a locked
//! instruction), once no call that might read them is still running.
//!
//! A thread stopped while it holds the lock stops the shard's inserts,
//! evictions and growth, never a call on a key the shard holds (but the one
//! whose slot it may hold at that moment): see [`ShardLock`].
//!
//! Operations that *credit* a key (refunds, give-backs, resets) lock its
//! slot instead (`update_locked`): a credit must not land on a slot reused
//! by another key. So does a multi-limit call that must give back the
//! charges it made before a later limit denied: it asks for it
//! (`Cells::give_back`), and the store does it once the call's run is over,
//! with the slot locked, if the slot held the key throughout and no refund
//! or reset of the key may have landed since its first charge: each of
//! those (and each eviction of a key that is not idle) bumps a per-shard
//! counter (striped by hash, on a line of its own) while it holds the
//! slot, and the store read that counter before the call ran
//! (`cells::Mark`). Every protocol here is model-checked with loom
//! (`core/tests/loom.rs`).
//!
//! The hasher is foldhash with a per-process random seed (plus a per-store
//! one): fast on short keys, and attackers who choose keys cannot predict
//! which keys collide, so they cannot build long probe runs. It is
//! foldhash's `quality` variant, one more multiply than `fast`: the shard is
//! chosen by the hash's low bits, and `fast` hashes a `u64` with a single
//! folded multiply whose low bits, for keys counted up (user ids), follow
//! the seed's: about one seed in a hundred put over 1.5× the mean of
//! 20,000 such keys in one of 64 shards (the worst of 200,000 simulated,
//! 13,140), growing tables `reserve_keys` had sized and crowding one
//! shard's lock and key bound.
//!
//! # Forgetting full buckets, losslessly
//!
//! A key whose bucket is full again carries no information. When a
//! table would grow past its load factor it is rebuilt without the keys
//! that have been full for at least their limit's window — the time an
//! empty bucket takes to fill, or a window's length; the longest of a
//! multi-limit key's (the migration forgets them on its way, and sizes the
//! new table for the keys that remain). `gc` forgets every full key at once,
//! on demand. No background thread, no timer: the work is amortised over
//! inserts (a rebuild leaves at least a quarter of the table free, so it
//! pays for itself over the inserts that fill it).
//!
//! Why wait one window: most clients are under their limit, so their bucket
//! is full again between their calls. Forgotten at the first growth, each of
//! them came back as an insert, and the table, rebuilt without them, never
//! grew to hold them: 100k such keys cost 144 ns a call instead of 35
//! (`rounds keys100k-returning`). A key idle longer than its window — the
//! TTL a Redis-backed limiter gives it — is gone at the next growth, and
//! `max_keys` and `max_key_bytes` evict full keys first, whatever their age.
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

mod cells;
pub(crate) mod epoch;
pub(crate) mod key;
mod maintain;
mod options;
pub(crate) mod shared;
mod summary;
mod table;

use std::hash::BuildHasher;

use crate::error::Result;
use crate::store::key::StoredKey;
use crossbeam_utils::CachePadded;

use crate::sync::{AtomicBool, AtomicU64, Backoff, Counter, Ordering};
pub(crate) use cells::{Cells, Charge, Conflict, Frozen, Mark};
pub use options::{Eviction, Options};
#[cfg(all(target_os = "linux", not(ratomic_loom)))]
pub(crate) use shared::SharedStore;
use summary::Summary;
use table::{Find, Table, DEAD, EMPTY, FIRST_MARKER, LOCKED, MOVED};

/// Most state words one key can have (the most limits one `Limiter` holds).
pub(crate) const MAX_WIDTH: usize = 16;

/// The home slot of `u64` key `key` in a fresh store's first table (of
/// `MIN_CAPACITY` slots), hashed as the store hashes it under loom (with
/// the fixed seed): for models that need two keys on one probe chain
/// (`tests/loom.rs`).
#[cfg(ratomic_loom)]
pub fn first_home_of(key: u64) -> usize {
    use crate::store::key::Key;
    let (hash, _) = key.probe(&Hasher::default(), 0).expect("a u64 key is never refused");
    table::home_slot(hash, MIN_CAPACITY)
}

/// The home slot of byte key `key` in a fresh store's first table, as
/// [`first_home_of`] for `u64` keys.
#[cfg(ratomic_loom)]
pub fn first_home_of_bytes(key: &[u8]) -> usize {
    use crate::store::key::Key;
    let (hash, _) = key.probe(&Hasher::default(), usize::MAX).expect("no length limit");
    table::home_slot(hash, MIN_CAPACITY)
}

/// A table is rebuilt before its load would exceed 3/4...
const MAX_LOAD: (usize, usize) = (3, 4);
/// ...to a load of 1/2, so it grows by 1.5× when nothing can be dropped and a
/// full table holds between 1/2 and 3/4 of its slots (memory per key within
/// 4/3 and 2 slots). A rebuild for room keeps at least the table's capacity
/// (its load may then fall below 1/2 until keys return); `gc` rebuilds to 1/2.
const TARGET_LOAD: (usize, usize) = (1, 2);
const MIN_CAPACITY: usize = 8;

/// Slots for `keys` keys at the target load (at least [`MIN_CAPACITY`]).
fn at_target(keys: usize) -> usize {
    (keys * TARGET_LOAD.1).div_ceil(TARGET_LOAD.0).max(MIN_CAPACITY)
}

/// Each shard's first (and smallest) table when `reserve` keys are to come,
/// spread over `shards` by their hashes (at most `per_shard` a shard: more
/// are evicted, never placed). A shard gets `m = reserve / shards` of them on
/// average but more or fewer by chance (a standard deviation of about
/// `√m`), so its table holds `m + 7·√m` below [`MAX_LOAD`] — and at least
/// `m` at [`TARGET_LOAD`]. Growing before `reserve` keys have come is then
/// a 7-sigma event (under 10⁻¹¹ a shard); with room for `m` alone at 3/4 it
/// was about 1.5-sigma short of that for small `m` (reserve 5,000 on 64
/// shards: one store in 2,000 grew a table).
fn reserved_capacity(reserve: usize, shards: usize, per_shard: usize) -> usize {
    if reserve == 0 {
        return MIN_CAPACITY;
    }
    let mean = reserve.div_ceil(shards);
    let high = (mean + 7 * mean.isqrt() + 1).min(per_shard.max(mean));
    at_target(mean).max((high * MAX_LOAD.1).div_ceil(MAX_LOAD.0) + 1)
}

/// `d` in nanoseconds, saturating.
pub(crate) fn nanos_of(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// How a store decides what it may forget: provided by the algorithm(s)
/// whose state the store holds.
pub(crate) trait Retention {
    /// State words of a key never seen.
    fn pristine(&self, out: &mut [u64]);
    /// Nanoseconds until these states carry no information; 0 = droppable.
    /// Once droppable, states stay droppable as time goes on.
    fn idle_after(&self, states: &[u64], now: u64) -> u64;
    /// How long a key stays in the store once its states are droppable,
    /// when the store grows: the key's window, ns (see
    /// [`Algorithm::window`](crate::Algorithm::window); the longest, for
    /// several limits). `gc` and the memory bounds do not wait for it.
    fn linger(&self) -> u64;
    /// The join of two states of word `i` (that word's limit's `join`).
    fn join_word(&self, i: usize, a: u64, b: u64) -> u64;
    /// `floor := join(floor, states)`, word by word.
    fn join_into(&self, floor: &mut [u64], states: &[u64]) {
        for (i, (f, &s)) in floor.iter_mut().zip(states).enumerate() {
            *f = self.join_word(i, *f, s);
        }
    }
    /// What is enforced, the same in every process that builds the same
    /// limiter (a shared file's header keeps its fingerprint).
    #[cfg_attr(not(all(target_os = "linux", not(ratomic_loom))), allow(dead_code))]
    fn describe(&self) -> String;
    /// [`describe`](Self::describe) for people (a shared file's header
    /// keeps it, for the error of a process that builds another limiter).
    #[cfg_attr(not(all(target_os = "linux", not(ratomic_loom))), allow(dead_code))]
    fn label(&self) -> String {
        self.describe()
    }
}
/// Per-process random seeds in production. loom needs every execution of a
/// model to make the same choices, so under loom the seed is fixed.
#[cfg(not(ratomic_loom))]
type Hasher = foldhash::quality::RandomState;
#[cfg(ratomic_loom)]
type Hasher = foldhash::quality::FixedState;

struct Shard<S: StoredKey> {
    table: epoch::Atomic<Table<S>>,
    /// What the shard remembers of keys it no longer holds.
    summary: Summary,
    /// Keys held (published slots).
    live: Counter,
    /// Bytes of keys stored outside their slots.
    key_bytes: Counter,
    /// The shard's insert lock: held to place a key, to evict or forget
    /// keys, and to migrate. Its holder is the summary's single writer.
    /// Lookups of stored keys never take it (see [`ShardLock`]).
    lock: AtomicBool,
    /// The credit counters of the shard's keys, by stripe (see [`Mark`]):
    /// bumped by every refund and reset, on a line of their own so they
    /// never disturb a lookup.
    credits: CachePadded<[AtomicU64; CREDIT_STRIPES]>,
}

/// A shard's insert lock, held (a spin on one flag, with [`Backoff`]) to
/// place keys, evict, forget and migrate: never by a lookup of a stored key,
/// nor by a call that changes one (those CAS its states; a credit locks its
/// slot alone).
///
/// A thread stopped while it holds the lock (preempted for long, or
/// SIGSTOPped with the process's other threads running on) stops the
/// shard's inserts, evictions and growth until it runs again; calls on the
/// keys the shard holds go on, a moved key included (migration sets the
/// next table before it moves a key, and copies a key there before it marks
/// its old slot). Only a call on the one key whose slot it holds at that
/// moment waits (`tests/loom.rs`: an inserter stopped for good, at every
/// point of an insert and of a growth).
struct ShardLock<'s>(&'s AtomicBool);

impl<'s> ShardLock<'s> {
    #[inline]
    fn take<S: StoredKey>(shard: &'s Shard<S>) -> Self {
        let mut backoff = Backoff::new();
        while shard.lock.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            backoff.snooze();
        }
        ShardLock(&shard.lock)
    }

    /// Lets go of the lock (as dropping it does).
    #[inline]
    fn release(self) {}

    /// (Models only) the holder stopped for good: the lock stays taken.
    #[cfg_attr(not(ratomic_loom), allow(dead_code))]
    fn abandon(self) {
        std::mem::forget(self);
    }
}

impl Drop for ShardLock<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Hooks for the loom models of a thread that stops for good in the middle
/// of an insert or a growth, holding the shard's insert lock: `here(at)`
/// is true once, at `at`, in a thread that asked for it, and `stopped()`
/// from then on (the thread then returns at once, touching nothing more).
/// Outside loom both are constant `false`.
pub mod stop {
    /// Where a model's thread stops.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum At {
        /// With the key's words written, before its state is published.
        Insert,
        /// A growth, after its first key moved.
        Migration,
    }

    #[cfg(ratomic_loom)]
    loom::thread_local! {
        static PLAN: std::cell::Cell<(Option<At>, bool)> = std::cell::Cell::new((None, false));
    }

    /// (Models only) this thread stops for good when it reaches `at`.
    #[cfg(ratomic_loom)]
    pub fn at(at: At) {
        PLAN.with(|p| p.set((Some(at), false)));
    }

    #[inline(always)]
    pub(crate) fn here(_at: At) -> bool {
        #[cfg(ratomic_loom)]
        if PLAN.with(|p| p.get().0 == Some(_at)) {
            PLAN.with(|p| p.set((None, true)));
            return true;
        }
        false
    }

    /// Whether this thread stopped (see [`at`]).
    #[inline(always)]
    pub fn stopped() -> bool {
        #[cfg(ratomic_loom)]
        if PLAN.with(|p| p.get().1) {
            return true;
        }
        false
    }
}

/// Credit counters per shard (see [`Mark`]).
const CREDIT_STRIPES: usize = 8;

/// What a credit ([`Store::update_locked`]) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Credit {
    /// A refund: inserts a key the store does not hold, and bumps the key's
    /// credit counter, so no give-back of an earlier charge lands after it
    /// (see [`Mark`]).
    Refund,
    /// A reset (the shared file's; the in-memory store's is
    /// [`Store::reset`]): bumps the counter as a refund does, and inserts
    /// an absent key only if `insert`.
    Reset { insert: bool },
    /// A give-back of a call's own charges, read before the call as this
    /// [`Mark`]: only on a key the store holds, and only if its credit
    /// counter still reads the same.
    GiveBack(Mark),
}

impl Credit {
    /// Whether a key the store does not hold is inserted.
    pub(crate) fn inserts(self) -> bool {
        match self {
            Credit::Refund => true,
            Credit::Reset { insert } => insert,
            Credit::GiveBack(_) => false,
        }
    }

    /// Whether the key's credit counter is bumped.
    pub(crate) fn bumps(self) -> bool {
        !matches!(self, Credit::GiveBack(_))
    }

    /// Whether the credit must not run on a key whose counter reads `now`.
    pub(crate) fn stale(self, now: u64) -> bool {
        matches!(self, Credit::GiveBack(mark) if mark.0 != now)
    }
}

pub(crate) struct Store<S: StoredKey> {
    /// Each shard on cache lines of its own (crossbeam's `CachePadded`: two
    /// lines on x86-64, for the adjacent-line prefetcher), so threads
    /// inserting into different shards do not contend. Lookups of existing
    /// keys touch no shard word but the table pointer, which only changes
    /// when the shard migrates.
    shards: Box<[CachePadded<Shard<S>>]>,
    mask: usize,
    hasher: Hasher,
    width: usize,
    max_per_shard: usize,
    /// Slots a shard's table starts with and never shrinks below: room for
    /// its share of [`Options::reserve_keys`] at the target load.
    min_capacity: usize,
    max_bytes_per_shard: usize,
    /// Most summary cells a shard grows to (a power of two).
    max_cells: usize,
}

/// Why an operation went round again.
enum Next {
    /// Done.
    Done,
    /// Look the key up again from the shard's current table.
    Retry,
}

impl<S: StoredKey> Store<S> {
    pub(crate) fn new(options: &Options, width: usize, retention: &impl Retention) -> Result<Self> {
        options.validate()?;
        assert!((1..=MAX_WIDTH).contains(&width));
        // The epoch's one-time set-up (a `membarrier` registration, which
        // can take milliseconds) happens here, not in the first call.
        epoch::init();
        let count = options.shard_count();
        let min_capacity = reserved_capacity(options.reserve_keys, count, options.max_keys.div_ceil(count));
        let shards = (0..count)
            .map(|_| {
                CachePadded::new(Shard {
                    table: epoch::Atomic::new(Table::new(min_capacity, width)),
                    summary: Summary::new(width, options.eviction, retention),
                    live: Counter::new(0),
                    key_bytes: Counter::new(0),
                    lock: AtomicBool::new(false),
                    credits: CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))),
                })
            })
            .collect();
        let max_per_shard = options.max_keys.div_ceil(count);
        Ok(Store {
            shards,
            mask: count - 1,
            hasher: Hasher::default(),
            width,
            max_per_shard,
            min_capacity,
            max_bytes_per_shard: (options.max_key_bytes / count).max(options.max_key_len),
            max_cells: (max_per_shard / 4).max(8).next_power_of_two(),
        })
    }

    #[inline]
    pub(crate) fn hasher(&self) -> &(impl BuildHasher + use<S>) {
        &self.hasher
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard<S> {
        &self.shards[hash as usize & self.mask]
    }

    /// The credit counter of the keys hashed to `hash` in `shard`.
    #[inline]
    fn credits<'s>(&self, shard: &'s Shard<S>, hash: u64) -> &'s AtomicU64 {
        &shard.credits[(hash >> (64 - CREDIT_STRIPES.trailing_zeros())) as usize]
    }

    /// Runs `op` on the key's state words and returns its result. `op` may
    /// run more than once (only the last result is returned) and must touch
    /// nothing but the words it is given, and what it owns itself (an
    /// `FnMut` may fill its caller's scratch: each run starts it afresh);
    /// what it changed is judged from what it wrote through the words. A run that asks to give its changes back
    /// ([`Cells::give_back`]) has them taken back exactly: at once on a
    /// private copy, and under the slot's lock on a stored key whose slot
    /// held it throughout the run and that no refund or reset may have
    /// reached since (see `cells.rs`).
    ///
    /// `MARK`: read the key's credit counter before `op` runs, for `op` to
    /// give back (in its run, or later as a receipt's [`Cells::mark`]); an
    /// `op` that never gives back skips the read.
    ///
    /// A key that is absent answers from what its shard remembers of it
    /// (see `summary.rs`); it is inserted only if `op` changed that state,
    /// so denials and peeks never allocate.
    #[inline]
    pub(crate) fn update<const MARK: bool, R>(
        &self,
        hash: u64,
        probe: &S::Probe<'_>,
        now: u64,
        retention: &impl Retention,
        mut op: impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
    ) -> R {
        let guard = epoch::pin();
        let shard = self.shard(hash);
        let mut table = shard.table.load(Ordering::Acquire, &guard);
        loop {
            // SAFETY: tables are freed only through the epoch, and we are pinned.
            let t = unsafe { table.deref() };
            // Before this run's first charge (see `Mark`); a run that goes
            // round again leaves its charges where they landed.
            let mark = if MARK { Mark(self.credits(shard, hash).load(Ordering::SeqCst)) } else { Mark::default() };
            match t.find(hash, probe, &guard) {
                Find::Found(i) => {
                    let mut cells = Cells::new(t.states(i), mark);
                    match op(&mut cells) {
                        Ok(r) if t.holds(i, probe, &guard) => {
                            if let Some(give_back) = cells.to_give_back() {
                                // The run is over and the slot held the key
                                // throughout: take its changes back, locked.
                                let credit = Credit::GiveBack(give_back.mark);
                                self.update_locked(hash, probe, now, retention, credit, |cells| {
                                    give_back.apply(cells);
                                    Ok(())
                                });
                            }
                            return r;
                        }
                        // The slot was given to another key meanwhile: look
                        // again. What the call changed stays where it landed
                        // (see `cells.rs`): a token denied, never granted.
                        Ok(_) => {}
                        // Being forgotten or moved: wait for it to settle.
                        Err(Frozen) => {
                            t.wait_change(i, LOCKED);
                        }
                    }
                    table = shard.table.load(Ordering::Acquire, &guard);
                }
                Find::Absent { .. } => {
                    // While the table migrates, a key absent here may have moved on.
                    if let Some(next) = Self::absent_while_migrating(table, &guard) {
                        table = next;
                        continue;
                    }
                    if let Some(r) = self.run_absent(shard, t, hash, probe, mark, now, retention, &mut op, &guard) {
                        return r;
                    }
                    table = shard.table.load(Ordering::Acquire, &guard);
                }
            }
        }
    }

    /// Like [`update`](Self::update), but for an operation that *credits*
    /// a key (a refund, a give-back): on a stored key, `op` runs while the
    /// slot is locked and known to hold this key. A lock-free credit can
    /// land on a slot that was forgotten and reused by another key between
    /// the probe and the CAS (an ABA on the state's value), and if that key
    /// moves on before the credit is taken back (see `cells.rs`) it keeps
    /// tokens that were never its own: a charge that lands that way only
    /// denies, a credit would over-grant. Credits are rare; the lock makes
    /// them exact. Calls on the key meanwhile wait for the slot, for a few
    /// loads and stores.
    ///
    /// A key the store does not hold is inserted with what `op` changed for
    /// a [`Credit::Refund`], and left alone (`None`) for a give-back, as is
    /// a key whose credit counter moved since the give-back's [`Mark`]. A
    /// refund bumps the key's credit counter while it holds the slot.
    pub(crate) fn update_locked<R>(
        &self,
        hash: u64,
        probe: &S::Probe<'_>,
        now: u64,
        retention: &impl Retention,
        credit: Credit,
        mut op: impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
    ) -> Option<R> {
        let guard = epoch::pin();
        let shard = self.shard(hash);
        let credits = self.credits(shard, hash);
        let mut table = shard.table.load(Ordering::Acquire, &guard);
        loop {
            // SAFETY: as in `update`.
            let t = unsafe { table.deref() };
            match t.find(hash, probe, &guard) {
                Find::Found(i) => {
                    if let Some(states) = self.lock_key(t, i, probe, &guard) {
                        if credit.stale(credits.load(Ordering::SeqCst)) {
                            t.unlock(i, &states[..self.width]);
                            return None;
                        }
                        let mut words = Scratch(states);
                        let (r, _) = on_copy(&mut words, self.width, Mark::default(), &mut op);
                        if credit.bumps() {
                            credits.fetch_add(1, Ordering::SeqCst);
                        }
                        t.unlock(i, &words.0[..self.width]);
                        return Some(r);
                    }
                    table = shard.table.load(Ordering::Acquire, &guard);
                }
                Find::Absent { .. } => {
                    if let Some(next) = Self::absent_while_migrating(table, &guard) {
                        table = next;
                        continue;
                    }
                    if !credit.inserts() {
                        return None;
                    }
                    // Before the credited key can be published.
                    credits.fetch_add(1, Ordering::SeqCst);
                    let mark = Mark::default();
                    if let Some(r) = self.run_absent(shard, t, hash, probe, mark, now, retention, &mut op, &guard) {
                        return Some(r);
                    }
                    table = shard.table.load(Ordering::Acquire, &guard);
                }
            }
        }
    }

    /// Locks slot `i`, found to hold the probed key, and captures its
    /// states; `None` (after waiting for a slot being forgotten or moved to
    /// settle) if the slot no longer holds a live copy of the key: look again.
    fn lock_key(&self, t: &Table<S>, i: usize, probe: &S::Probe<'_>, guard: &epoch::Guard) -> Option<[u64; MAX_WIDTH]> {
        let first = t.control(i);
        if first >= FIRST_MARKER {
            if first == LOCKED {
                t.wait_change(i, LOCKED);
            }
            return None;
        }
        let states = t.lock_all(i, first)?;
        // Locked, the slot cannot change hands: check it is still ours (it
        // may have been reused by another key since the probe found it).
        if !t.holds(i, probe, guard) {
            t.unlock(i, &states[..self.width]);
            return None;
        }
        Some(states)
    }

    /// After a probe of `table` found the key absent: `None` if the table
    /// is not migrating (the key is absent), else the table to look in
    /// next. A migration sets `next` before it moves any key, and copies a
    /// key there before it marks the key's old slot MOVED; places happen
    /// under the insert lock, which the migration holds, so none lands in
    /// `table` once `next` is set. A key placed after this probe passed its
    /// slot is one this call may answer as absent (it was, when the probe
    /// passed); an insert of it checks again under the lock.
    #[inline]
    fn absent_while_migrating<'g>(
        table: epoch::Shared<'g, Table<S>>,
        guard: &'g epoch::Guard,
    ) -> Option<epoch::Shared<'g, Table<S>>> {
        // SAFETY: as in `update`.
        let t = unsafe { table.deref() };
        let next = t.next.load(Ordering::Acquire, guard);
        (!next.is_null()).then_some(next)
    }

    /// Runs `op` for a key absent from `t` (which is not migrating): on
    /// what its shard remembers of it, inserting it if `op` changed that.
    /// `None` when the caller must look again (see [`insert`](Self::insert)).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn run_absent<R>(
        &self,
        shard: &Shard<S>,
        t: &Table<S>,
        hash: u64,
        probe: &S::Probe<'_>,
        mark: Mark,
        now: u64,
        retention: &impl Retention,
        op: &mut impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
        guard: &epoch::Guard,
    ) -> Option<R> {
        // Filled, changed and inserted in place: copies of the whole array
        // were read back wider than they were written (a stall each).
        let mut words = Scratch([0; MAX_WIDTH]);
        let seen = shard.summary.changes();
        shard.summary.initial_into(hash, retention, guard, &mut words.0[..self.width]);
        let (r, changed) = on_copy(&mut words, self.width, mark, op);
        if !changed {
            return Some(r);
        }
        match self.insert(shard, t, hash, probe, &words.0, Some(seen), now, retention, guard) {
            Next::Done => Some(r),
            Next::Retry => None,
        }
    }

    /// Inserts a key found absent from `t` with `states`: computed from what the shard remembered of it when its summary had
    /// taken in `seen` forgets, if they were (a reset's fresh states are
    /// not). `Retry` when the caller must look again (the table was
    /// replaced, the key was placed meanwhile, the shard needed room first,
    /// or it has forgotten a key since).
    ///
    /// Under the shard's insert lock: the lock holder is the only thread
    /// that places keys, so its own probe, under the lock, is final (the
    /// key absent, the slot free), and the key is placed with plain stores,
    /// no claim, no check for a racing copy. (The lock-free probe before it
    /// is not trusted: a key may have been placed since. A table version
    /// read before it would spare this second probe, warm in the cache, at
    /// the price of a load on every lookup; `rounds keys100k-u64` read
    /// worse with it in 5 of 6 pairs, within the noise of a loaded machine.) Growth, when
    /// the insert takes the table past 3/4, is done here too, by this
    /// thread, before it lets go of the lock.
    #[allow(clippy::too_many_arguments)]
    fn insert(
        &self,
        shard: &Shard<S>,
        t: &Table<S>,
        hash: u64,
        probe: &S::Probe<'_>,
        states: &[u64; MAX_WIDTH],
        seen: Option<u64>,
        now: u64,
        retention: &impl Retention,
        guard: &epoch::Guard,
    ) -> Next {
        let bytes = S::probe_heap_bytes(probe);
        let lock = ShardLock::take(shard);
        // The states must not have been outdated by a forget since the
        // summary was read: another copy of the key inserted after ours was
        // computed, charged and forgotten left its charges in the summary,
        // not in our states, and publishing them would grant those tokens
        // twice. Forgets happen under this lock, and count themselves.
        // (Comparing the key's summary itself instead of the count cost 11
        // ns an insert: `rounds insert-u64`.)
        if seen.is_some_and(|seen| shard.summary.changes() != seen)
            || !std::ptr::eq(shard.table.load(Ordering::Acquire, guard).as_raw(), t)
        {
            return Next::Retry;
        }
        let free = match t.find(hash, probe, guard) {
            Find::Found(_) => return Next::Retry,
            Find::Absent { free } => free,
        };
        // Room first: a chain must always end at an EMPTY slot, and the
        // bounds hold before the key comes in, not after.
        let full = t.used.load(Ordering::Relaxed) + 1 > t.capacity() * 7 / 8;
        let over = shard.live.load(Ordering::Relaxed) + 1 > self.max_per_shard
            || shard.key_bytes.load(Ordering::Relaxed) + bytes > self.max_bytes_per_shard;
        let Some((i, from)) = free.filter(|_| !full && !over) else {
            self.maintain_locked(shard, now, retention, guard, Trigger::Insert { bytes });
            lock.release();
            return Next::Retry;
        };
        // Counted before it is published: once published, the key may be
        // forgotten by a reset (and uncounted) at once, and the counts must
        // never go below zero.
        shard.live.fetch_add(1, Ordering::Relaxed);
        if bytes > 0 {
            shard.key_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        t.place(i, from, probe, states, guard);
        if stop::stopped() {
            lock.abandon();
            return Next::Done;
        }
        if t.used.load(Ordering::Relaxed) > t.capacity() * MAX_LOAD.0 / MAX_LOAD.1 {
            self.maintain_locked(shard, now, retention, guard, Trigger::Insert { bytes: 0 });
            if stop::stopped() {
                lock.abandon();
                return Next::Done;
            }
        }
        lock.release();
        Next::Done
    }

    /// Forgets the key: afterwards it answers as a key never seen, for any
    /// call stamped at or after `now`.
    pub(crate) fn reset(&self, hash: u64, probe: &S::Probe<'_>, now: u64, retention: &impl Retention) {
        let guard = epoch::pin();
        let shard = self.shard(hash);
        let mut pristine = [0; MAX_WIDTH];
        retention.pristine(&mut pristine[..self.width]);
        // Would the key, absent, start less than full (its own summary, or
        // a join)? Then it is stored with fresh states, so the reset is exact.
        let summary_matters = || {
            let mut initial = [0; MAX_WIDTH];
            shard.summary.initial_into(hash, retention, &guard, &mut initial[..self.width]);
            retention.idle_after(&initial[..self.width], now) > 0
        };
        let mut table = shard.table.load(Ordering::Acquire, &guard);
        loop {
            // SAFETY: as in `update`.
            let t = unsafe { table.deref() };
            match t.find(hash, probe, &guard) {
                Find::Found(i) => {
                    if self.lock_key(t, i, probe, &guard).is_some() {
                        // While the slot is held (see `Mark`).
                        self.credits(shard, hash).fetch_add(1, Ordering::SeqCst);
                        if summary_matters() {
                            t.unlock(i, &pristine[..self.width]);
                        } else {
                            shard.key_bytes.fetch_sub(S::heap_bytes(t.key(i)), Ordering::Relaxed);
                            t.release(i, &guard);
                            shard.live.fetch_sub(1, Ordering::Relaxed);
                        }
                        return;
                    }
                    table = shard.table.load(Ordering::Acquire, &guard);
                }
                Find::Absent { .. } => {
                    if let Some(next) = Self::absent_while_migrating(table, &guard) {
                        table = next;
                        continue;
                    }
                    if !summary_matters() {
                        return;
                    }
                    // Before the fresh states can be published.
                    self.credits(shard, hash).fetch_add(1, Ordering::SeqCst);
                    match self.insert(shard, t, hash, probe, &pristine, None, now, retention, &guard) {
                        Next::Done => return,
                        Next::Retry => table = shard.table.load(Ordering::Acquire, &guard),
                    }
                }
            }
        }
    }

    /// Keys currently stored (including full buckets not yet forgotten).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.live.load(Ordering::Relaxed)).sum()
    }

    /// Bytes the store holds: every shard's table, the keys stored outside
    /// their slots, and the summaries of evicted keys.
    pub(crate) fn memory_bytes(&self) -> usize {
        let guard = epoch::pin();
        self.shards
            .iter()
            .map(|s| {
                let shard: &Shard<S> = s;
                let table = shard.table.load(Ordering::Acquire, &guard);
                // SAFETY: as in `update`.
                let cap = unsafe { table.deref() }.capacity();
                Table::<S>::bytes_for(cap, self.width)
                    + shard.key_bytes.load(Ordering::Relaxed)
                    + shard.summary.bytes(&guard)
            })
            .sum()
    }

    /// Migrates every shard to a new table of the same size, now: what
    /// growth does, on demand, for tests and models of migration racing
    /// other calls.
    pub(crate) fn force_migration(&self, now: u64, retention: &impl Retention) {
        let guard = epoch::pin();
        for s in self.shards.iter() {
            let shard: &Shard<S> = s;
            let lock = ShardLock::take(shard);
            let table = shard.table.load(Ordering::Acquire, &guard);
            // SAFETY: as in `update`.
            let cap = unsafe { table.deref() }.capacity();
            self.migrate(shard, table, |_| cap, now, now, retention, &guard);
            lock.release();
        }
    }

    /// Forgets every key that carries no information at `now`, shrinking
    /// tables that have become sparse. Returns how many keys were dropped.
    pub(crate) fn gc(&self, now: u64, retention: &impl Retention) -> usize {
        let guard = epoch::pin();
        self.shards
            .iter()
            .map(|s| {
                let before = s.live.load(Ordering::Relaxed);
                let lock = ShardLock::take(s);
                self.maintain_locked(s, now, retention, &guard, Trigger::Gc);
                lock.release();
                before.saturating_sub(s.live.load(Ordering::Relaxed))
            })
            .sum()
    }
}

/// What asked for maintenance.
#[derive(Clone, Copy, Debug)]
enum Trigger {
    /// An insert: room for one more key of `bytes` long-key bytes.
    Insert { bytes: usize },
    /// `gc`: forget every full key and shrink a sparse table.
    Gc,
}

/// A key's state words outside any table (an absent key's, a copy of a
/// locked slot's), aligned as atomics so [`on_copy`] runs on them in place.
#[repr(C, align(8))]
pub(crate) struct Scratch(pub(crate) [u64; MAX_WIDTH]);

/// Runs `op` on the first `width` of `words`, a private copy, in place:
/// the answer for an absent key, and whether `op` changed the words (then
/// they are the states to insert).
pub(crate) fn on_copy<R>(
    words: &mut Scratch,
    width: usize,
    mark: Mark,
    op: &mut impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
) -> (R, bool) {
    #[cfg(not(ratomic_loom))]
    {
        // Seen as atomics: only the words in use are touched, with no
        // per-word construction (this runs on every call for a key the
        // store does not hold).
        let ptr = words.0.as_mut_ptr().cast::<AtomicU64>();
        // SAFETY: `AtomicU64` has the size and bit validity of `u64`, and
        // `Scratch` gives the alignment it needs (8); the slice borrows the
        // private copy exclusively until `op` returns.
        let atomics = unsafe { std::slice::from_raw_parts(ptr, width) };
        let mut cells = Cells::new(atomics, mark);
        let r = op(&mut cells).expect("a private copy holds no marker");
        (r, cells.settle_private())
    }
    #[cfg(ratomic_loom)]
    {
        let atomics: [AtomicU64; MAX_WIDTH] = std::array::from_fn(|w| AtomicU64::new(words.0[w]));
        let mut cells = Cells::new(&atomics[..width], mark);
        let r = op(&mut cells).expect("a private copy holds no marker");
        let changed = cells.settle_private();
        for (w, a) in words.0.iter_mut().zip(&atomics) {
            *w = a.load(Ordering::Relaxed);
        }
        (r, changed)
    }
}

impl<S: StoredKey> Drop for Store<S> {
    fn drop(&mut self) {
        // SAFETY: dropping the store: no other thread can reach its tables.
        unsafe {
            let guard = epoch::unprotected();
            for s in self.shards.iter() {
                let table = s.table.load(Ordering::Relaxed, guard);
                let next = table.deref().next.load(Ordering::Relaxed, guard);
                if !next.is_null() {
                    drop(next.into_owned());
                }
                drop(table.into_owned());
            }
        }
    }
}

#[cfg(all(test, not(ratomic_loom)))]
mod tests;
