//! One shard's table: open addressing with linear probing over a region of
//! atomic words. Lookups of stored keys take no lock; inserts, forgets and
//! migrations that free or fill slots are made by the holder of the shard's
//! insert lock (`mod.rs`), one at a time.
//!
//! # Layout
//!
//! `cap` slots of `stride` words: first the key's `width` state words (one
//! per limit), then the key's words (one for a `u64` key, three for bytes;
//! see `key.rs`). Capacities are any whole number (the home slot is
//! `hash·cap >> 64`). The words start on a cache line, so 16- and 32-byte
//! slots never straddle two lines.
//!
//! # A slot's life: its first state word is its control word
//!
//! Markers at the very top of `u64` ([`FIRST_MARKER`] and up; no algorithm
//! state reaches them) say what a slot is; any other value in the first word
//! means the slot holds a live key, and *is* that key's first state:
//!
//! ```text
//! EMPTY ─place→ state ─lock→ LOCKED ─release→ DEAD ─place→ state
//!                 ↑             │unlock
//!                 └─────────────┘            (migration: LOCKED → MOVED)
//! ```
//!
//! - **EMPTY** ends every probe chain; a slot is never made EMPTY again, so
//!   a key is always found between its home and the first EMPTY.
//! - **place** (the insert lock's holder only): the key's words and the
//!   states after the first are written while the control word still reads
//!   EMPTY or DEAD, which no lookup reads a key behind; then one release
//!   store of the first state publishes them. No other thread writes a free
//!   slot, so the holder needs no compare-and-swap to claim it, and no
//!   check for a racing copy of the key: it probed for the key under the
//!   lock (`Store::insert`), and nobody else inserts.
//! - **Live**: the first word is a state. Operations CAS the state words
//!   directly: a lookup of an existing key does only loads and the state's
//!   CAS, and then re-reads the key to make sure the slot was not reused by
//!   another key meanwhile (see `cells.rs` for what happens if it was).
//! - **LOCKED**: one thread took the slot to forget it, move it or credit
//!   it, by a CAS from the state it read; it then captures the other words
//!   (each CAS to `CAPTURED`, which makes every other CAS on it fail) and so
//!   holds the key's final state. **DEAD**: forgotten; the slot does not end
//!   chains and may be placed again.
//! - **MOVED** (migration): the key is in the table's `next` table, copied
//!   there before this store. Free slots are left as they are: once the
//!   table has a `next`, a key absent here is looked for there, and inserts
//!   wait for the lock, which the migrator holds until the shard's table
//!   is the new one.
//!
//! Waiting happens in one place on the way to a key: a LOCKED copy of that
//! key (being forgotten, moved or credited: a few loads and stores away). A
//! lookup never waits for an insert, nor for a lock holder stopped between
//! two slots.

use std::marker::PhantomData;

use crate::store::epoch;
use crate::store::key::StoredKey;
use crate::sync::{AtomicU64, Backoff, Counter, Ordering};

pub(crate) use super::cells::FIRST_MARKER;
use super::MAX_WIDTH;

/// Never used: ends every probe chain.
pub(crate) const EMPTY: u64 = u64::MAX;
/// Forgotten: free for any key, but does not end chains.
pub(crate) const DEAD: u64 = u64::MAX - 1;
/// One thread holds the slot to forget, move or credit it.
pub(crate) const LOCKED: u64 = u64::MAX - 4;
/// (Migration) the slot's key is now in the next table.
pub(crate) const MOVED: u64 = u64::MAX - 5;
/// A state word taken by the thread that holds the slot.
pub(crate) const CAPTURED: u64 = u64::MAX - 7;

const _: () = assert!(CAPTURED >= FIRST_MARKER);

/// The home slot of a key hashed to `hash` in a table of `cap` slots: the
/// hash scaled to the capacity (any whole number, no power of two needed).
#[inline]
pub(crate) fn home_slot(hash: u64, cap: usize) -> usize {
    ((u128::from(hash) * cap as u128) >> 64) as usize
}

/// What a probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Find {
    /// The key is live in this slot.
    Found(usize),
    /// The key is not in this table; `free` is where it may be inserted
    /// (the first DEAD slot of its chain, else the EMPTY slot ending it),
    /// with the control value to claim it from. (While the table migrates,
    /// a key absent here is looked for, and inserted, in the next table.)
    Absent { free: Option<(usize, u64)> },
}

/// The table's words, on a cache-line boundary.
struct Words {
    #[cfg(not(ratomic_loom))]
    ptr: std::ptr::NonNull<AtomicU64>,
    #[cfg(ratomic_loom)]
    vec: Vec<AtomicU64>,
    #[cfg_attr(ratomic_loom, allow(dead_code))]
    len: usize,
}

// SAFETY: the words are atomics, shared by reference only.
unsafe impl Send for Words {}
// SAFETY: as above.
unsafe impl Sync for Words {}

impl Words {
    /// `slots` slots of `stride` words: each slot's first word `first`,
    /// every other word 0. Zeroed by the allocator, then one store a slot: a
    /// store per word, each choosing its value, took ~105 instructions an
    /// insert (every key is copied into two or three new tables as a store
    /// grows), and `rounds insert-u64` went from 2.50-2.53x to 2.45-2.48x.
    fn new(slots: usize, stride: usize, first: u64) -> Self {
        let len = slots * stride;
        #[cfg(not(ratomic_loom))]
        {
            if len == 0 {
                return Words { ptr: std::ptr::NonNull::dangling(), len };
            }
            let layout = Self::layout(len);
            // SAFETY: the layout has a non-zero size.
            let raw = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<AtomicU64>();
            let ptr = std::ptr::NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
            for slot in 0..slots {
                // SAFETY: in bounds of the fresh allocation (`slot * stride <
                // len`), aligned; zero bytes are a valid `AtomicU64` (0).
                unsafe { ptr.as_ptr().add(slot * stride).write(AtomicU64::new(first)) };
            }
            Words { ptr, len }
        }
        #[cfg(ratomic_loom)]
        {
            let vec = (0..len).map(|i| AtomicU64::new(if i % stride == 0 { first } else { 0 })).collect();
            Words { vec, len }
        }
    }

    #[cfg(not(ratomic_loom))]
    fn layout(len: usize) -> std::alloc::Layout {
        std::alloc::Layout::from_size_align(len * 8, 64).expect("table size overflows isize")
    }

    #[inline]
    fn all(&self) -> &[AtomicU64] {
        #[cfg(not(ratomic_loom))]
        {
            // SAFETY: `len` initialised atomics live at `ptr` until drop.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
        }
        #[cfg(ratomic_loom)]
        {
            &self.vec
        }
    }
}

#[cfg(not(ratomic_loom))]
impl Drop for Words {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `new` with this layout; atomics need no drop.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.len)) };
        }
    }
}

/// A table's words with its shape copied out, read without a bounds check
/// per slot: for the probe loops (`find`, `verify`, `adopt`). Inlined into
/// a caller, a loop over `Table::control` and `Table::key` reloaded the
/// table's fields and checked the bounds again after every key comparison
/// (an opaque `bcmp` for long keys): 15 instructions more a probe
/// (callgrind of `bin churn`, whose chains run ~30 probes).
///
/// Typed by the key, so a slot's key words are `S::WORDS` long, a
/// constant: with the length `stride - width`, each probe of `find`
/// computed the slot's end and checked the slice was not empty, and the
/// loop spilled its registers (31 instructions a probe, 4.2 probes a new
/// `u64` key's `find`; callgrind, `ops ratomic-insert-u64`).
struct Slots<'t, S> {
    words: &'t [AtomicU64],
    cap: usize,
    stride: usize,
    width: usize,
    _keys: PhantomData<S>,
}

impl<S> Clone for Slots<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S> Copy for Slots<'_, S> {}

impl<'t, S: StoredKey> Slots<'t, S> {
    /// Slot `i`'s first state word, its control word; `i < cap`.
    #[inline(always)]
    fn first(&self, i: usize) -> &'t AtomicU64 {
        debug_assert!(i < self.cap);
        // SAFETY: `i < cap`, and the table holds `cap * stride` words, slot
        // `i`'s at `i * stride..(i + 1) * stride` (`Table::new`).
        unsafe { self.words.get_unchecked(i * self.stride) }
    }

    #[inline(always)]
    fn control(&self, i: usize) -> u64 {
        self.first(i).load(Ordering::SeqCst)
    }

    /// Slot `i`'s state words; `i < cap`.
    #[inline(always)]
    fn states(&self, i: usize) -> &'t [AtomicU64] {
        debug_assert!(i < self.cap);
        // SAFETY: as in `first`; the states are the slot's first `width` words.
        unsafe { self.words.get_unchecked(i * self.stride..i * self.stride + self.width) }
    }

    /// Slot `i`'s key words; `i < cap`.
    #[inline(always)]
    fn key(&self, i: usize) -> &'t [AtomicU64] {
        debug_assert!(i < self.cap);
        let at = i * self.stride + self.width;
        // SAFETY: as in `first`; the key's `S::WORDS` words follow the
        // `width` states and end the slot (`stride = width + S::WORDS`).
        unsafe { self.words.get_unchecked(at..at + S::WORDS) }
    }

    #[inline(always)]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.cap {
            0
        } else {
            i + 1
        }
    }
}

pub(crate) struct Table<S: StoredKey> {
    words: Words,
    cap: usize,
    width: usize,
    stride: usize,
    /// Slots that are not EMPTY: written by the insert lock's holder
    /// only. The store migrates before it passes 3/4 of the capacity, so a
    /// chain always ends at an EMPTY slot.
    pub(crate) used: Counter,
    /// The table this one is migrating to, once it exists.
    pub(crate) next: epoch::Atomic<Table<S>>,
    _keys: PhantomData<S>,
}

impl<S: StoredKey> Table<S> {
    /// A table of `cap` empty slots of `width` state words.
    pub(crate) fn new(cap: usize, width: usize) -> Self {
        let stride = width + S::WORDS;
        let words = Words::new(cap, stride, EMPTY);
        Table { words, cap, width, stride, used: Counter::new(0), next: epoch::Atomic::null(), _keys: PhantomData }
    }

    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// Bytes a table of `cap` slots of `width` state words occupies.
    pub(crate) fn bytes_for(cap: usize, width: usize) -> usize {
        cap * (width + S::WORDS) * 8
    }

    #[inline(always)]
    fn slots(&self) -> Slots<'_, S> {
        let words = self.words.all();
        debug_assert_eq!(words.len(), self.cap * self.stride);
        debug_assert_eq!(self.stride, self.width + S::WORDS);
        Slots { words, cap: self.cap, stride: self.stride, width: self.width, _keys: PhantomData }
    }

    /// Slot `i`'s state words (the first is its control word).
    ///
    /// One compare for the bounds (`i < cap`), then [`Slots`]' unchecked
    /// slicing: two checked slices (start and end) and the slice's length
    /// cost a migration ~25 instructions a moved key (callgrind, `ops
    /// ratomic-insert-u64`).
    #[inline(always)]
    pub(crate) fn states(&self, i: usize) -> &[AtomicU64] {
        assert!(i < self.cap);
        self.slots().states(i)
    }

    /// Slot `i`'s key words.
    #[inline(always)]
    pub(crate) fn key(&self, i: usize) -> &[AtomicU64] {
        assert!(i < self.cap);
        self.slots().key(i)
    }

    #[inline(always)]
    pub(crate) fn control(&self, i: usize) -> u64 {
        assert!(i < self.cap);
        self.slots().control(i)
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        home_slot(hash, self.cap)
    }

    /// Waits until slot `i`'s control word is no longer `c`; returns the new one.
    pub(crate) fn wait_change(&self, i: usize, c: u64) -> u64 {
        let mut backoff = Backoff::new();
        loop {
            let now = self.control(i);
            if now != c {
                return now;
            }
            backoff.snooze();
        }
    }

    /// Finds the key's live slot, or where it may be inserted. The guard
    /// keeps what the probe reads of other slots' keys alive.
    pub(crate) fn find(&self, hash: u64, probe: &S::Probe<'_>, _guard: &epoch::Guard) -> Find {
        let slots = self.slots();
        if slots.cap == 0 {
            return Find::Absent { free: None };
        }
        let mut i = self.home(hash);
        let mut free = None;
        for _ in 0..slots.cap {
            let mut c = slots.control(i);
            // A live slot (the common case) is one compare away.
            if c < FIRST_MARKER {
                if S::matches(slots.key(i), probe) {
                    return Find::Found(i);
                }
            } else {
                loop {
                    match c {
                        EMPTY => return Find::Absent { free: free.or(Some((i, EMPTY))) },
                        DEAD => {
                            if free.is_none() {
                                free = Some((i, DEAD));
                            }
                        }
                        // Ours, being forgotten, moved or credited: wait.
                        LOCKED if S::matches(slots.key(i), probe) => {
                            c = self.wait_change(i, c);
                            continue;
                        }
                        // A key moved on (keep looking: ours may not have
                        // been moved yet), or someone else's held slot.
                        LOCKED | CAPTURED | MOVED => {}
                        _ => {
                            // A marker turned back into a state while we waited.
                            if S::matches(slots.key(i), probe) {
                                return Find::Found(i);
                            }
                        }
                    }
                    break;
                }
            }
            i = slots.next(i);
        }
        Find::Absent { free }
    }

    /// Whether live slot `i` still holds the probe's key: the check after an
    /// operation on its states (see the module docs).
    #[inline]
    pub(crate) fn holds(&self, i: usize, probe: &S::Probe<'_>, _guard: &epoch::Guard) -> bool {
        S::matches(self.key(i), probe)
    }

    /// Places the probe's key in free slot `i` (whose control word is
    /// `from`: EMPTY or DEAD) with `states`, and publishes it. Only the
    /// insert lock's holder calls this, having checked under the lock that
    /// the key is absent and the slot free (see the module docs), and that
    /// the table keeps an EMPTY slot after this one.
    pub(crate) fn place(&self, i: usize, from: u64, probe: &S::Probe<'_>, states: &[u64], guard: &epoch::Guard) {
        let slots = self.slots();
        assert!(i < slots.cap);
        debug_assert!(states[0] < FIRST_MARKER);
        debug_assert_eq!(slots.control(i), from);
        let key = slots.key(i);
        if from == DEAD {
            // What a forgotten slot's words still own (nothing once
            // released; retiring a cleared key does nothing).
            S::retire(key, guard);
        } else {
            self.used.fetch_add(1, Ordering::Relaxed);
        }
        S::store(key, probe);
        let words = slots.states(i);
        for w in 1..slots.width {
            // Release: an operation whose CAS reads one of these states sees
            // the key written above (its check after the CAS relies on it).
            words[w].store(states[w], Ordering::Release);
        }
        if super::stop::here(super::stop::At::Insert) {
            return;
        }
        // Release: whoever reads the state reads the key and the other
        // states after it. No lookup reads the key of an EMPTY or DEAD
        // slot, so the words written above were nobody's until now.
        words[0].store(states[0], Ordering::Release);
    }

    /// Locks live slot `i`, whose first state was read as `first`. False if
    /// it changed (decide again on what it holds now).
    pub(crate) fn lock(&self, i: usize, first: u64) -> bool {
        debug_assert!(first < FIRST_MARKER);
        self.states(i)[0].compare_exchange(first, LOCKED, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }

    /// Locks live slot `i` (see [`lock`](Self::lock)) and captures its other
    /// state words: its final states, or `None` if the first changed.
    pub(crate) fn lock_all(&self, i: usize, first: u64) -> Option<[u64; MAX_WIDTH]> {
        let mut states = [0u64; MAX_WIDTH];
        self.lock_into(i, first, &mut states[..self.width]).then_some(states)
    }

    /// [`lock_all`](Self::lock_all) into `out` (the table's width long), in
    /// place: a migration locks every key it moves, and an array returned by
    /// value is copied, its words read back wider than they were written.
    #[inline]
    pub(crate) fn lock_into(&self, i: usize, first: u64, out: &mut [u64]) -> bool {
        if !self.lock(i, first) {
            return false;
        }
        out[0] = first;
        for (w, state) in out[1..].iter_mut().enumerate() {
            *state = self.capture(i, w + 1);
        }
        true
    }

    /// Takes state word `w` (≥ 1) of locked slot `i`: returns its final
    /// state; every later CAS on it fails.
    pub(crate) fn capture(&self, i: usize, w: usize) -> u64 {
        let word = &self.states(i)[w];
        let mut v = word.load(Ordering::Acquire);
        loop {
            debug_assert!(v < FIRST_MARKER, "only the slot's holder captures its words");
            match word.compare_exchange_weak(v, CAPTURED, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return v,
                Err(now) => v = now,
            }
        }
    }

    /// Puts locked slot `i` back as it was: `states` its captured states
    /// (the first is what the lock replaced). Used when a forget changes its
    /// mind (a key that is no longer idle) or a reset stores fresh states.
    pub(crate) fn unlock(&self, i: usize, states: &[u64]) {
        let words = self.states(i);
        for (w, &v) in words.iter().zip(states).skip(1) {
            w.store(v, Ordering::Release);
        }
        words[0].store(states[0], Ordering::SeqCst);
    }

    /// Forgets locked slot `i`: its key is retired and the slot DEAD.
    pub(crate) fn release(&self, i: usize, guard: &epoch::Guard) {
        let key = self.key(i);
        S::retire(key, guard);
        S::clear(key);
        self.states(i)[0].store(DEAD, Ordering::SeqCst);
    }

    /// Marks locked slot `i` moved: its key now belongs to the next table.
    ///
    /// Release: a call that reads MOVED goes on to the next table, and must
    /// find there the key [`adopt`](Self::adopt)ed before this store (and
    /// the `next` pointer stored before both). Only the locking migrator
    /// writes the word, so no ordering with later loads is needed.
    pub(crate) fn mark_moved(&self, i: usize) {
        self.states(i)[0].store(MOVED, Ordering::Release);
    }

    /// (Migration) puts a key known to be unique — taken from slot `from`
    /// of the table this one replaces, with its states — into a free slot:
    /// the key's words move (with what they own), so the old slot must be
    /// marked moved, not released. The insert lock's holder only: no other
    /// thread writes a free slot, so the slot is taken with plain stores.
    #[inline]
    pub(crate) fn adopt(&self, hash: u64, key: &[AtomicU64], states: &[u64]) {
        let slots = self.slots();
        let mut i = self.home(hash);
        loop {
            let word = slots.first(i);
            let c = word.load(Ordering::Relaxed);
            if c == EMPTY || c == DEAD {
                // Acquire and release: a key word may be a heap block's
                // address, whose bytes a reader of the new slot reads.
                // (Both loops by index over lengths the compiler knows:
                // zipped iterators cost a moved `u64` key ~20 instructions
                // of set-up for no word at all. Callgrind, `ops
                // ratomic-insert-u64`.)
                let to = slots.key(i);
                for w in 0..S::WORDS {
                    to[w].store(key[w].load(Ordering::Acquire), Ordering::Release);
                }
                let words = slots.states(i);
                for w in 1..slots.width {
                    words[w].store(states[w], Ordering::Release);
                }
                // Release: a reader of the state reads the key above.
                word.store(states[0], Ordering::Release);
                if c == EMPTY {
                    self.used.fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            i = slots.next(i);
        }
    }
}

impl<S: StoredKey> Drop for Table<S> {
    fn drop(&mut self) {
        if !S::OWNS_HEAP {
            return;
        }
        for i in 0..self.cap {
            let c = self.states(i)[0].load(Ordering::Relaxed);
            // Slots that own a key: published or locked (a DEAD slot's key
            // is cleared when it is released: `free` of a cleared key does
            // nothing). Moved slots' keys moved on.
            let owns = c < FIRST_MARKER || matches!(c, LOCKED | DEAD);
            if owns {
                // SAFETY: the table is dropped only when no thread can
                // reach it (the epoch, or the store's own drop).
                unsafe { S::free(self.key(i)) };
            }
        }
    }
}
