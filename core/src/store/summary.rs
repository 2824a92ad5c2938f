//! What a shard remembers of the keys it no longer holds.
//!
//! - The **floor**: the join of every state the shard forgot while it was
//!   full (on `gc`, or when a table was rebuilt). A full state says nothing
//!   about a call stamped at or after the moment it was forgotten, so the
//!   floor changes no such decision; it is there for a call stamped earlier
//!   (a thread that read the clock before a concurrent forget, or an `*_at`
//!   caller going back in time), which then gets an answer at least as
//!   restrictive as the forgotten state's. Joining full states never
//!   ratchets: the floor is never ahead of the last forget.
//! - The **cells**: an array of summaries indexed by key hash, for keys
//!   evicted under `max_keys` before they were full (and, under
//!   [`Eviction::Fair`], full keys too when their cell is free). What a cell
//!   holds depends on the [`Eviction`] policy:
//!   - [`Eviction::Fair`]: one key's state, tagged with that key's hash. A
//!     key that comes back finds its own state; another key that hashes to
//!     the cell does not see it. When two evicted keys want one cell, the
//!     cell keeps the one further from full (the one whose loss would grant
//!     more). A key whose summary was displaced comes back full.
//!   - [`Eviction::Strict`]: the join of every state evicted into the cell;
//!     every key new to the shard that hashes to the cell starts from it.
//!
//! Cells are allocated at the shard's first eviction, so a store that never
//! reaches `max_keys` pays nothing for them, and grow (doubling, up to a
//! quarter of `max_keys` per shard) with the keys the shard holds when it
//! evicts. A cell's index is the high bits of a multiply-shift of the hash,
//! so after doubling, cell `j` covers exactly the keys of old cell `j / 2`:
//! growing moves every summary to where its keys will look, losing none.
//!
//! # Concurrency
//!
//! One writer at a time: the shard's maintainer (see `mod.rs`). Readers —
//! calls on keys the shard does not hold — read the floor word by word (it
//! only ever grows more restrictive, and a key's own contribution is written
//! before the key is marked forgotten, which its reader sees first) and each
//! cell under a seqlock (a cell may be rewritten with another key's state).
//! A grown cell array replaces the old one through the epoch.

use super::{Eviction, Retention, MAX_WIDTH};
use crate::store::epoch;
use crate::sync::{AtomicU64, Ordering};

/// A cell's tag: the key's hash, never 0 (0 marks an empty cell).
#[inline]
fn tag_of(hash: u64) -> u64 {
    hash | 1
}

/// The cells: per cell a sequence word (odd while being written), a tag and
/// `width` state words.
struct Cells {
    words: Box<[AtomicU64]>,
    n: usize,
    stride: usize,
}

impl Cells {
    fn new(n: usize, width: usize) -> Self {
        let stride = 2 + width;
        Cells { words: (0..n * stride).map(|_| AtomicU64::new(0)).collect(), n, stride }
    }

    #[inline]
    fn seq(&self, i: usize) -> &AtomicU64 {
        &self.words[i * self.stride]
    }

    #[inline]
    fn tag(&self, i: usize) -> &AtomicU64 {
        &self.words[i * self.stride + 1]
    }

    #[inline]
    fn states(&self, i: usize) -> &[AtomicU64] {
        &self.words[i * self.stride + 2..(i + 1) * self.stride]
    }

    /// Cell `i`'s tag and states, read consistently.
    fn read(&self, i: usize, out: &mut [u64]) -> u64 {
        loop {
            let s1 = self.seq(i).load(Ordering::Acquire);
            if s1 % 2 == 1 {
                crate::sync::Backoff::new().snooze();
                continue;
            }
            let tag = self.tag(i).load(Ordering::Relaxed);
            for (o, w) in out.iter_mut().zip(self.states(i)) {
                *o = w.load(Ordering::Relaxed);
            }
            std::sync::atomic::fence(Ordering::Acquire);
            if self.seq(i).load(Ordering::Relaxed) == s1 {
                return tag;
            }
        }
    }

    /// Rewrites cell `i` (the single writer).
    fn write(&self, i: usize, tag: u64, states: &[u64]) {
        let s = self.seq(i).load(Ordering::Relaxed);
        self.seq(i).store(s + 1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        self.tag(i).store(tag, Ordering::Relaxed);
        for (w, &v) in self.states(i).iter().zip(states) {
            w.store(v, Ordering::Relaxed);
        }
        self.seq(i).store(s + 2, Ordering::Release);
    }
}

pub(super) struct Summary {
    /// Join of every full state forgotten.
    floor: [AtomicU64; MAX_WIDTH],
    cells: epoch::Atomic<Cells>,
    /// Forgets so far, each counted after its writes: an insert computed
    /// from the summary publishes only if this has not moved since it read
    /// it (see `Store::insert`).
    changes: AtomicU64,
    width: usize,
    eviction: Eviction,
}

impl Summary {
    pub(super) fn new(width: usize, eviction: Eviction, retention: &impl Retention) -> Self {
        let mut floor = [0; MAX_WIDTH];
        retention.pristine(&mut floor[..width]);
        Summary {
            floor: floor.map(AtomicU64::new),
            cells: epoch::Atomic::null(),
            changes: AtomicU64::new(0),
            width,
            eviction,
        }
    }

    /// How many forgets the summary has taken in (see `changes`). Read it
    /// before [`initial_into`](Self::initial_into): a forget counted by a
    /// later read may have changed what that returned.
    #[inline]
    pub(super) fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Bytes the cells occupy.
    pub(super) fn bytes(&self, guard: &epoch::Guard) -> usize {
        // SAFETY: a cell array is freed only through the epoch.
        unsafe { self.cells.load(Ordering::Acquire, guard).as_ref() }.map_or(0, |c| c.words.len() * 8)
    }

    /// Cell `i` of `n` for a hash: `⌊mix(hash)·n / 2^64⌋`.
    #[inline]
    fn index(hash: u64, n: usize) -> usize {
        // The table and the shard use the hash's high and low bits; mix
        // before choosing a cell so that keys sharing a shard spread evenly.
        // `| 1` first: a cell's tag is `hash | 1`, and growing re-indexes
        // entries by their tag.
        let mixed = (hash | 1).rotate_left(29).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((u128::from(mixed) * n as u128) >> 64) as usize
    }

    /// Writes into `out` (the width long) the states a key the shard does
    /// not hold answers from.
    #[inline]
    pub(super) fn initial_into(&self, hash: u64, retention: &impl Retention, guard: &epoch::Guard, out: &mut [u64]) {
        let w = self.width;
        for (o, f) in out.iter_mut().zip(&self.floor) {
            *o = f.load(Ordering::Acquire);
        }
        // SAFETY: a cell array is freed only through the epoch.
        if let Some(cells) = unsafe { self.cells.load(Ordering::Acquire, guard).as_ref() } {
            let i = Self::index(hash, cells.n);
            let mut states = [0u64; MAX_WIDTH];
            let tag = cells.read(i, &mut states[..w]);
            match self.eviction {
                // Its own state: the latest this key had (every forget of
                // the key rewrites its own cell).
                Eviction::Fair if tag == tag_of(hash) => out[..w].copy_from_slice(&states[..w]),
                Eviction::Strict if tag != 0 => retention.join_into(&mut out[..w], &states[..w]),
                _ => {}
            }
        }
    }

    /// Remembers the state of a key forgotten at `now` (the single writer).
    /// `wait` is how long until it is full (`idle_after`); `cells` how many
    /// cells an eviction wants (a power of two): they grow to that if fewer.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn forget(
        &self,
        hash: u64,
        states: &[u64],
        wait: u64,
        now: u64,
        cells: usize,
        retention: &impl Retention,
        guard: &epoch::Guard,
    ) {
        let w = self.width;
        if wait == 0 {
            // Full: the floor keeps it for calls stamped before now.
            let mut floor = [0u64; MAX_WIDTH];
            for (f, a) in floor[..w].iter_mut().zip(&self.floor) {
                *f = a.load(Ordering::Relaxed);
            }
            retention.join_into(&mut floor[..w], states);
            for (a, &f) in self.floor.iter().zip(&floor[..w]) {
                a.store(f, Ordering::Release);
            }
        }
        let array = if wait == 0 { self.cells.load(Ordering::Acquire, guard) } else { self.grow(cells, guard) };
        // SAFETY: a cell array is freed only through the epoch.
        if let Some(array) = unsafe { array.as_ref() } {
            self.remember_in(array, hash, states, wait, now, retention);
        }
        // Counted after the writes (Release): a reader that sees this count
        // sees every write it counts.
        self.changes.fetch_add(1, Ordering::Release);
    }

    /// [`forget`](Self::forget)'s entry in the cells.
    fn remember_in(&self, array: &Cells, hash: u64, states: &[u64], wait: u64, now: u64, retention: &impl Retention) {
        let w = self.width;
        let i = Self::index(hash, array.n);
        let mut old = [0u64; MAX_WIDTH];
        let tag = array.read(i, &mut old[..w]);
        let mine = tag_of(hash);
        match self.eviction {
            Eviction::Fair => {
                // A key's newer state always replaces its older one. A full
                // state takes only a free or expired cell; a state that is
                // not full takes a cell whose entry is closer to full.
                let take = tag == 0
                    || tag == mine
                    || if wait == 0 {
                        retention.idle_after(&old[..w], now) == 0
                    } else {
                        retention.idle_after(&old[..w], now) < wait
                    };
                if take {
                    array.write(i, mine, states);
                }
            }
            Eviction::Strict if wait > 0 => {
                if tag != 0 {
                    retention.join_into(&mut old[..w], states);
                    array.write(i, 1, &old[..w]);
                } else {
                    array.write(i, 1, states);
                }
            }
            Eviction::Strict => {}
        }
    }

    /// Grows the cells to `wanted` (a power of two) if they are fewer,
    /// moving every summary to the cells its keys now index: new cell `j`
    /// takes old cell `j / 2`'s Strict join, or its Fair entry if the
    /// entry's key maps to `j`. Returns the current array.
    fn grow<'g>(&self, wanted: usize, guard: &'g epoch::Guard) -> epoch::Shared<'g, Cells> {
        let current = self.cells.load(Ordering::Acquire, guard);
        // SAFETY: a cell array is freed only through the epoch.
        let n = unsafe { current.as_ref() }.map_or(0, |c| c.n);
        if wanted <= n {
            return current;
        }
        let w = self.width;
        let grown = Cells::new(wanted, w);
        // SAFETY: as above.
        if let Some(old) = unsafe { current.as_ref() } {
            let ratio = wanted / n;
            let mut states = [0u64; MAX_WIDTH];
            for i in 0..n {
                let tag = old.read(i, &mut states[..w]);
                if tag == 0 {
                    continue;
                }
                for j in i * ratio..(i + 1) * ratio {
                    let moves = match self.eviction {
                        Eviction::Fair => Self::index(tag, wanted) == j,
                        Eviction::Strict => true,
                    };
                    if moves {
                        grown.write(j, tag, &states[..w]);
                    }
                }
            }
        }
        let grown = epoch::Owned::new(grown).into_shared(guard);
        self.cells.store(grown, Ordering::Release);
        if !current.is_null() {
            // SAFETY: replaced above; readers pinned now may still read it.
            unsafe { guard.defer_destroy(current) };
        }
        grown
    }
}

impl Drop for Summary {
    fn drop(&mut self) {
        // SAFETY: dropping the summary: no reader is left.
        unsafe {
            let guard = epoch::unprotected();
            let cells = self.cells.load(Ordering::Relaxed, guard);
            if !cells.is_null() {
                drop(cells.into_owned());
            }
        }
    }
}
