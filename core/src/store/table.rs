//! One shard's open-addressing table: linear probing over slots laid out in
//! one allocation, each slot a key followed by `width` atomic state words.
//!
//! The table itself is not synchronised: the shard's lock guards its shape
//! (which slots hold which keys), and only the state words are touched by
//! readers, atomically. A slot is empty when its first state word is
//! [`EMPTY`]; no algorithm ever stores that value.
//!
//! Capacities are any whole number (the home slot is `hash·cap >> 64`), so
//! tables grow by ~1.4× instead of doubling and the memory per key stays
//! within a narrow band; see `store/mod.rs` for the load factors.

use std::alloc::{self, Layout};
use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::ptr::{self, NonNull};

use crate::key::StoredKey;
use crate::sync::{AtomicU64, Ordering};

/// The marker of an empty slot, in its first state word.
pub(crate) const EMPTY: u64 = u64::MAX;

/// Slots start on cache-line boundaries so a 16- or 32-byte slot never
/// straddles two lines.
const ALIGN: usize = 64;

pub(crate) struct Table<S: StoredKey> {
    ptr: NonNull<u8>,
    cap: usize,
    width: usize,
    stride: usize,
    live: usize,
    _owns: PhantomData<S>,
}

// SAFETY: the table owns its keys (`S: Send + Sync`) and atomics; shared
// access reads keys and touches state words atomically.
unsafe impl<S: StoredKey> Send for Table<S> {}
// SAFETY: see above.
unsafe impl<S: StoredKey> Sync for Table<S> {}

impl<S: StoredKey> Table<S> {
    const KEY_SIZE: usize = {
        assert!(size_of::<S>() % 8 == 0 && align_of::<S>() <= 8);
        size_of::<S>()
    };

    fn stride(width: usize) -> usize {
        let unit = align_of::<S>().max(align_of::<AtomicU64>());
        (Self::KEY_SIZE + width * size_of::<AtomicU64>()).next_multiple_of(unit)
    }

    /// Bytes a table of `cap` slots of `width` words occupies.
    pub(crate) fn bytes_for(cap: usize, width: usize) -> usize {
        cap * Self::stride(width)
    }

    /// A table with no slots and no allocation.
    pub(crate) fn empty(width: usize) -> Self {
        Table { ptr: NonNull::dangling(), cap: 0, width, stride: Self::stride(width), live: 0, _owns: PhantomData }
    }

    /// A table of `cap` empty slots.
    pub(crate) fn with_capacity(cap: usize, width: usize) -> Self {
        let mut t = Self::empty(width);
        if cap == 0 {
            return t;
        }
        let layout = Layout::from_size_align(cap * t.stride, ALIGN).expect("table size overflows isize");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc(layout) };
        t.ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        t.cap = cap;
        for i in 0..cap {
            for w in 0..width {
                let init = if w == 0 { EMPTY } else { 0 };
                // SAFETY: in bounds of the fresh allocation, suitably aligned.
                unsafe { ptr::write(t.state_ptr(i, w), AtomicU64::new(init)) };
            }
        }
        t
    }

    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    #[inline]
    pub(crate) fn live(&self) -> usize {
        self.live
    }

    /// Slot `i`'s address. Checked in every build: every safe accessor
    /// goes through here, so an index out of bounds panics rather than
    /// reading past the allocation.
    #[inline]
    fn slot_ptr(&self, i: usize) -> *mut u8 {
        assert!(i < self.cap, "slot {i} of a table of {}", self.cap);
        // SAFETY: i < cap, so the offset is inside the allocation.
        unsafe { self.ptr.as_ptr().add(i * self.stride) }
    }

    #[inline]
    fn state_ptr(&self, i: usize, w: usize) -> *mut AtomicU64 {
        // SAFETY: the state words follow the key inside slot i.
        unsafe { self.slot_ptr(i).add(Self::KEY_SIZE + w * size_of::<AtomicU64>()) as *mut AtomicU64 }
    }

    /// Slot `i`'s state words.
    #[inline]
    pub(crate) fn states(&self, i: usize) -> &[AtomicU64] {
        // SAFETY: `width` initialised atomics live contiguously after the key.
        unsafe { std::slice::from_raw_parts(self.state_ptr(i, 0), self.width) }
    }

    /// Slot `i`'s key; panics if the slot is empty.
    #[inline]
    pub(crate) fn key(&self, i: usize) -> &S {
        assert!(self.is_occupied(i), "slot {i} is empty");
        // SAFETY: occupied slots hold an initialised key at offset 0.
        unsafe { &*(self.slot_ptr(i) as *const S) }
    }

    #[inline]
    pub(crate) fn is_occupied(&self, i: usize) -> bool {
        self.states(i)[0].load(Ordering::Relaxed) != EMPTY
    }

    #[inline]
    fn home(&self, hash: u64) -> usize {
        ((u128::from(hash) * self.cap as u128) >> 64) as usize
    }

    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.cap {
            0
        } else {
            i + 1
        }
    }

    /// The slot holding the key, if any.
    #[inline]
    pub(crate) fn find(&self, hash: u64, probe: &S::Probe<'_>) -> Option<usize> {
        if self.cap == 0 {
            return None;
        }
        let mut i = self.home(hash);
        // The load factor stays below 1, so an empty slot ends every probe.
        loop {
            if !self.is_occupied(i) {
                return None;
            }
            if self.key(i).matches(probe) {
                return Some(i);
            }
            i = self.next(i);
        }
    }

    /// Puts a key that is not in the table into it. There must be a free slot.
    pub(crate) fn insert(&mut self, hash: u64, key: S, init: &[u64]) -> usize {
        debug_assert!(self.live < self.cap && init.len() == self.width && init[0] != EMPTY);
        let mut i = self.home(hash);
        while self.is_occupied(i) {
            i = self.next(i);
        }
        // SAFETY: slot i is empty, so its key bytes are uninitialised.
        unsafe { ptr::write(self.slot_ptr(i) as *mut S, key) };
        let states = self.states(i);
        for (cell, &v) in states.iter().zip(init).rev() {
            cell.store(v, Ordering::Relaxed); // word 0 last: it marks the slot occupied
        }
        self.live += 1;
        i
    }

    /// Removes slot `i`'s key, shifting later keys of its probe run back so
    /// no tombstone is left. `rehash` gives a stored key's hash.
    pub(crate) fn remove(&mut self, hole: usize, rehash: impl Fn(&S) -> u64) {
        // SAFETY: the slot is occupied; its key is dropped exactly once.
        unsafe { ptr::drop_in_place(self.slot_ptr(hole) as *mut S) };
        let mut hole = hole;
        let mut j = hole;
        loop {
            j = self.next(j);
            if !self.is_occupied(j) {
                break;
            }
            let home = self.home(rehash(self.key(j)));
            // The entry at j may fill the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if stays {
                continue;
            }
            // SAFETY: move j's key into the hole (whose key was dropped or moved out).
            unsafe { ptr::copy_nonoverlapping(self.slot_ptr(j), self.slot_ptr(hole), Self::KEY_SIZE) };
            for w in 0..self.width {
                let v = self.states(j)[w].load(Ordering::Relaxed);
                self.states(hole)[w].store(v, Ordering::Relaxed);
            }
            hole = j;
        }
        self.states(hole)[0].store(EMPTY, Ordering::Relaxed);
        self.live -= 1;
    }

    /// Keeps the keys for which `keep(states)` is true and removes the rest
    /// in place (no allocation), calling `dropped(key, states)` for each
    /// removed key and its last states. `rehash` gives a stored key's hash.
    pub(crate) fn retain(
        &mut self,
        mut keep: impl FnMut(&[u64]) -> bool,
        mut dropped: impl FnMut(&S, &[u64]),
        rehash: impl Fn(&S) -> u64,
    ) {
        let Some(start) = (0..self.cap).find(|&i| !self.is_occupied(i)) else {
            debug_assert!(self.cap == 0, "the load factor keeps a slot free");
            return;
        };
        // Walk once round from an empty slot, so no probe run crosses the
        // walk's end: a removal only shifts back keys the walk has yet to
        // see, into the slot it is looking at, which it then looks at again.
        let mut buf = [0u64; super::MAX_WIDTH];
        let mut i = self.next(start);
        while i != start {
            if self.is_occupied(i) {
                for (b, cell) in buf.iter_mut().zip(self.states(i)) {
                    *b = cell.load(Ordering::Relaxed);
                }
                if !keep(&buf[..self.width]) {
                    dropped(self.key(i), &buf[..self.width]);
                    self.remove(i, &rehash);
                    continue;
                }
            }
            i = self.next(i);
        }
    }

    /// Moves every key out, calling `each(slot, key, states)`; leaves the
    /// table empty.
    pub(crate) fn drain(&mut self, mut each: impl FnMut(usize, S, &[u64])) {
        let mut buf = vec![0u64; self.width];
        for i in 0..self.cap {
            if !self.is_occupied(i) {
                continue;
            }
            for (b, cell) in buf.iter_mut().zip(self.states(i)) {
                *b = cell.load(Ordering::Relaxed);
            }
            self.states(i)[0].store(EMPTY, Ordering::Relaxed);
            // SAFETY: the slot was occupied and is now marked empty, so the
            // key is read out exactly once.
            let key = unsafe { ptr::read(self.slot_ptr(i) as *const S) };
            each(i, key, &buf);
        }
        self.live = 0;
    }

    /// Calls `each(i)` for every occupied slot.
    pub(crate) fn for_each_occupied(&self, mut each: impl FnMut(usize)) {
        for i in 0..self.cap {
            if self.is_occupied(i) {
                each(i);
            }
        }
    }
}

impl<S: StoredKey> Drop for Table<S> {
    fn drop(&mut self) {
        if self.cap == 0 {
            return;
        }
        for i in 0..self.cap {
            if self.is_occupied(i) {
                // SAFETY: occupied slots own an initialised key.
                unsafe { ptr::drop_in_place(self.slot_ptr(i) as *mut S) };
            }
            for w in 0..self.width {
                // SAFETY: every state word was initialised in `with_capacity`.
                unsafe { ptr::drop_in_place(self.state_ptr(i, w)) };
            }
        }
        let layout = Layout::from_size_align(self.cap * self.stride, ALIGN).expect("layout was valid at allocation");
        // SAFETY: allocated in `with_capacity` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}

#[cfg(all(test, not(ratomic_loom)))]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn h(k: u64) -> u64 {
        // Deliberately clustered hashes to exercise wrap-around and shifting.
        (k % 4) << 62
    }

    #[test]
    fn insert_find_remove_against_a_hashmap() {
        let mut t: Table<u64> = Table::with_capacity(13, 2);
        let mut model = HashMap::new();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        for step in 0..20_000u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let k = seed % 16;
            match (t.find(h(k), &k), model.contains_key(&k)) {
                (Some(i), true) => {
                    assert_eq!(t.states(i)[1].load(Ordering::Relaxed), model[&k]);
                    if step % 3 == 0 {
                        t.remove(i, |s| h(*s));
                        model.remove(&k);
                    }
                }
                (None, false) if t.live() < 12 => {
                    t.insert(h(k), k, &[k, step]);
                    model.insert(k, step);
                }
                (None, false) => {}
                (found, expected) => panic!("key {k}: found {found:?}, model has it: {expected}"),
            }
            assert_eq!(t.live(), model.len());
        }
    }

    #[test]
    fn retain_in_place_against_a_hashmap() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        for round in 0..500u64 {
            let cap = 5 + (round % 17) as usize;
            let mut t: Table<u64> = Table::with_capacity(cap, 2);
            let mut model = HashMap::new();
            while t.live() < cap * 3 / 4 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let k = seed % 64;
                if t.find(h(k), &k).is_none() {
                    t.insert(h(k), k, &[k + 1, seed]);
                    model.insert(k, seed);
                }
            }
            // Drop the keys whose second word is odd (a key is its first word − 1).
            let mut dropped = Vec::new();
            t.retain(|states| states[1] % 2 == 0, |_, states| dropped.push(states[0] - 1), |s| h(*s));
            let mut expect_dropped: Vec<_> = model.iter().filter(|(_, v)| *v % 2 == 1).map(|(k, _)| *k).collect();
            model.retain(|_, v| *v % 2 == 0);
            dropped.sort_unstable();
            expect_dropped.sort_unstable();
            assert_eq!(dropped, expect_dropped, "round {round}");
            assert_eq!(t.live(), model.len());
            for k in 0..64u64 {
                let found = t.find(h(k), &k).map(|i| t.states(i)[1].load(Ordering::Relaxed));
                assert_eq!(found, model.get(&k).copied(), "round {round}, key {k}");
            }
        }
    }

    #[test]
    fn drain_moves_every_key_out() {
        let mut t: Table<u64> = Table::with_capacity(10, 1);
        for k in 0..7u64 {
            t.insert(h(k), k, &[k + 100]);
        }
        let mut seen = Vec::new();
        t.drain(|_, k, s| seen.push((k, s[0])));
        seen.sort();
        assert_eq!(seen, (0..7).map(|k| (k, k + 100)).collect::<Vec<_>>());
        assert_eq!(t.live(), 0);
        assert_eq!(t.find(h(3), &3), None);
    }
}
