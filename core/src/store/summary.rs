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
//! - The **cells**: a fixed array of summaries indexed by key hash, for
//!   keys evicted under `max_keys` before they were full. What a cell holds
//!   depends on the [`Eviction`] policy:
//!   - [`Eviction::Fair`]: one key's state, tagged with that key's 64-bit
//!     hash. A key that comes back finds its own state; another key that
//!     hashes to the cell does not see it. When two evicted keys want one
//!     cell, the cell keeps the one further from full (the one whose loss
//!     would grant more). A key whose summary was displaced comes back full.
//!   - [`Eviction::Strict`]: the join of every state evicted into the cell;
//!     every key new to the shard that hashes to the cell starts from it.
//!
//! Cells are allocated at the shard's first eviction, so a store that never
//! reaches `max_keys` pays nothing for them, and grow (doubling, up to a
//! quarter of `max_keys` per shard) with the keys the shard holds when it
//! evicts. A cell's index is the high bits of a multiply-shift of the hash,
//! so after doubling, cell `j` covers exactly the keys of old cell `j / 2`:
//! growing moves every summary to where its keys will look, losing none.

use super::{Eviction, Retention, MAX_WIDTH};

/// A cell's tag: the key's hash, never 0 (0 marks an empty cell).
#[inline]
fn tag_of(hash: u64) -> u64 {
    hash | 1
}

pub(super) struct Summary {
    /// Join of every full state forgotten.
    floor: [u64; MAX_WIDTH],
    /// `tags[i]` (Fair) or 0/1 (Strict: empty or not) for cell `i`.
    tags: Box<[u64]>,
    /// `width` words per cell.
    states: Box<[u64]>,
    width: usize,
    eviction: Eviction,
}

impl Summary {
    pub(super) fn new(width: usize, eviction: Eviction, retention: &impl Retention) -> Self {
        let mut floor = [0; MAX_WIDTH];
        retention.pristine(&mut floor[..width]);
        Summary { floor, tags: Box::new([]), states: Box::new([]), width, eviction }
    }

    /// Bytes the cells occupy.
    pub(super) fn bytes(&self) -> usize {
        (self.tags.len() + self.states.len()) * 8
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

    #[inline]
    fn cell(&self, hash: u64) -> Option<usize> {
        let n = self.tags.len();
        (n > 0).then(|| Self::index(hash, n))
    }

    /// Grows the cells to at least `wanted` (a power of two), moving every
    /// summary to the cells its keys now index: new cell `j` takes old cell
    /// `j / 2`'s Strict join, or its Fair entry if the entry's key maps to `j`.
    fn grow(&mut self, wanted: usize) {
        let n = self.tags.len();
        if wanted <= n {
            return;
        }
        let w = self.width;
        let mut tags = vec![0u64; wanted].into_boxed_slice();
        let mut states = vec![0u64; wanted * w].into_boxed_slice();
        let ratio = wanted / n.max(1);
        for j in 0..wanted {
            let i = j / ratio;
            if n == 0 || self.tags[i] == 0 {
                continue;
            }
            let moves = match self.eviction {
                Eviction::Fair => Self::index(self.tags[i], wanted) == j,
                Eviction::Strict => true,
            };
            if moves {
                tags[j] = self.tags[i];
                states[j * w..(j + 1) * w].copy_from_slice(self.cell_states(i));
            }
        }
        self.tags = tags;
        self.states = states;
    }

    #[inline]
    fn cell_states(&self, i: usize) -> &[u64] {
        &self.states[i * self.width..(i + 1) * self.width]
    }

    /// The states a key the shard does not hold answers from, and, under
    /// [`Eviction::Fair`], the cell holding its own summary if there is one
    /// (to be cleared when the key is stored again).
    #[inline]
    pub(super) fn initial(&self, hash: u64, retention: &impl Retention) -> ([u64; MAX_WIDTH], Option<usize>) {
        let mut out = self.floor;
        if let Some(i) = self.cell(hash) {
            match self.eviction {
                // Its own state: the latest this key had (a key's cell is
                // cleared whenever it is stored again).
                Eviction::Fair if self.tags[i] == tag_of(hash) => {
                    out[..self.width].copy_from_slice(self.cell_states(i));
                    return (out, Some(i));
                }
                Eviction::Fair => {}
                Eviction::Strict if self.tags[i] != 0 => {
                    retention.join_into(&mut out[..self.width], self.cell_states(i))
                }
                Eviction::Strict => {}
            }
        }
        (out, None)
    }

    /// Forgets a cell's summary (its key is stored again, or was reset).
    pub(super) fn clear(&mut self, i: usize) {
        self.tags[i] = 0;
    }

    /// Clears the key's own summary, if it has one (a reset).
    pub(super) fn clear_key(&mut self, hash: u64) {
        if let (Eviction::Fair, Some(i)) = (self.eviction, self.cell(hash)) {
            if self.tags[i] == tag_of(hash) {
                self.clear(i);
            }
        }
    }

    /// Remembers the state of a key forgotten at `now`. `wait` is how long
    /// until it is full (`idle_after`); `cells` how many cells an eviction
    /// wants (a power of two): the cells grow to that if they are fewer.
    pub(super) fn forget(
        &mut self,
        hash: u64,
        states: &[u64],
        wait: u64,
        now: u64,
        cells: usize,
        retention: &impl Retention,
    ) {
        let w = self.width;
        if wait == 0 {
            // Full: the floor keeps it for calls stamped before now.
            retention.join_into(&mut self.floor[..w], states);
            // Under Fair, a free cell also keeps it exactly for this key.
            if let (Eviction::Fair, Some(i)) = (self.eviction, self.cell(hash)) {
                if self.tags[i] == 0 || retention.idle_after(self.cell_states(i), now) == 0 {
                    self.tags[i] = tag_of(hash);
                    self.states[i * w..(i + 1) * w].copy_from_slice(states);
                }
            }
            return;
        }
        self.grow(cells);
        let i = self.cell(hash).expect("cells were just grown");
        match self.eviction {
            Eviction::Fair => {
                let free = self.tags[i] == 0 || retention.idle_after(self.cell_states(i), now) < wait;
                if free {
                    self.tags[i] = tag_of(hash);
                    self.states[i * w..(i + 1) * w].copy_from_slice(states);
                }
            }
            Eviction::Strict => {
                if self.tags[i] == 0 {
                    self.tags[i] = 1;
                    self.states[i * w..(i + 1) * w].copy_from_slice(states);
                } else {
                    retention.join_into(&mut self.states[i * w..(i + 1) * w], states);
                }
            }
        }
    }
}
