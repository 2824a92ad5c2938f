//! The state words one operation works on, and the record of what it
//! changed.
//!
//! Every algorithm reads and writes a key's state through [`Cells`]: loads
//! that refuse a word that is not a state (its slot is being forgotten or
//! moved: see `table.rs`'s markers), and compare-and-swaps that log what they
//! changed. The store runs an operation on the slot it found, then checks
//! the slot still holds the same key; if another key took the slot over
//! meanwhile, it runs the operation again where the key now is.
//!
//! What the first run changed stays. Taking it back by a CAS from the value
//! it stored to the value it found would be exact only if the word had not
//! changed hands: a slot forgotten and reused meanwhile can hold that very
//! value as another key's state (both buckets charged at the same clock
//! reading), and the CAS would erase that key's charge — an over-grant.
//! Left where it landed, a change counts once more against the key that
//! made it (the forget or move that took the slot carried it along), or
//! against a key whose state happened to match the one it read: a token
//! denied, never one granted.
//!
//! A multi-limit call that must give back its own earlier charges within
//! one run (a later limit denied) asks for it with
//! [`give_back`](Cells::give_back) and does not touch the words itself.
//! On a private copy (a key the store does not hold, or a slot it holds
//! locked) the store takes the changes back at once. On a live slot it
//! does so only once the run is over and the slot was found to have held
//! the key throughout, and then with the slot locked and found to hold the
//! key again, as credits are: a give-back by a CAS on the live word, in the
//! middle of the run, could meet the slot forgotten, reused and charged to
//! exactly the value the call stored, and erase that charge. The same goes
//! for a refund or a reset of the key itself between the charge and the
//! give-back: the store reads the key's credit counter before a call that
//! may give back runs ([`Mark`]), and the give-back keeps the charges if
//! the counter moved.

use std::mem::MaybeUninit;

use crate::sync::{AtomicU64, Ordering};

use super::MAX_WIDTH;

/// What one successful charge did to one state word: the value it replaced
/// and the value it stored. The receipt an all-or-nothing call keeps so it
/// can take the charge back if another limit denies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Charge {
    pub(crate) before: u64,
    pub(crate) after: u64,
}

/// Values from here up are markers, never states: slot control values in a
/// slot's first word (`table.rs`) and captured words in the others. Every
/// algorithm's states stay below (a GCRA TAT is below `2^62 + 2^63`, a
/// window's packed state below `2^63`).
pub(crate) const FIRST_MARKER: u64 = u64::MAX - 15;

/// A word holds a marker, not a state: the slot is being forgotten or moved
/// (or is not a key's any more). The operation stops; the store waits for
/// the slot to settle and runs it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Frozen;

/// Why a compare-and-swap did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Conflict {
    /// The word holds another state: decide again on it.
    Changed(u64),
    /// The word holds a marker: stop (see [`Frozen`]).
    Frozen,
}

impl From<Frozen> for Conflict {
    fn from(_: Frozen) -> Self {
        Conflict::Frozen
    }
}

/// The state words of one key, as an operation sees them.
pub(crate) struct Cells<'a> {
    words: &'a [AtomicU64],
    /// The key's credit counter before the run (see [`Mark`]), if the store
    /// was asked to read it.
    mark: Mark,
    /// `(word, before, after)` of every compare-and-swap that succeeded:
    /// the first `n` entries are written (left uninitialised otherwise:
    /// this runs on every call).
    log: [MaybeUninit<(usize, u64, u64)>; MAX_WIDTH],
    n: usize,
    /// The operation asked for its changes to be taken back (see the
    /// module docs).
    give_back: bool,
}

/// A key's credit counter as the store read it before a call that may give
/// its charges back ran: the give-back is applied only if the counter still
/// reads the same, so no refund or reset of the key may have landed since.
///
/// # Why
///
/// A give-back stores back what the word held before the charge, if it
/// still holds what the charge stored (see
/// [`restore`](crate::algorithm::restore)). That is exact while only
/// charges and exact give-backs write the word: every charge moves it on.
/// A refund or a reset can move it back, and a later call charged from
/// there to exactly the value this charge stored (same clock reading, same
/// cost) is then erased by the give-back: one call's tokens over the
/// limit. So every credit that writes a key's states bumps its counter
/// while it holds the key's slot (locked in memory, before it unlocks;
/// HELD in a shared file, after its writes, since charges do not wait for
/// a HELD slot), and a give-back, holding the slot too, applies only if
/// the counter is still what was read before the call's first charge. A
/// call that read it after a credit's bump charged after that credit's
/// writes (before them, the read would precede the bump); a call that read
/// it before a credit whose writes came after its charge sees it moved.
/// An eviction of a key that is not idle bumps it too, before the slot is
/// freed: under `Eviction::Fair` a key whose summary is displaced comes
/// back fuller than it left, which is a reset as far as a give-back is
/// concerned. (A key forgotten idle comes back from a summary at least as
/// restrictive as the state it left, so no charge from there can reach the
/// value an earlier charge stored.)
///
/// The counter is shared by the keys of a stripe (a shard's, or a shared
/// file's), so a credit on another key of the stripe between a call's
/// charge and its give-back (microseconds) makes the give-back keep its
/// charges: tokens denied, never granted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mark(pub(crate) u64);

/// The changes of a run that asked to [`give_back`](Cells::give_back)
/// them, newest first: what the store takes back under the slot's lock.
#[derive(Clone, Copy)]
pub(crate) struct GiveBack {
    log: [(usize, Charge); MAX_WIDTH],
    n: usize,
    /// The run's [`Mark`]: the store gives back only if it still holds.
    pub(crate) mark: Mark,
}

impl GiveBack {
    /// Takes every change back from `cells` (a locked slot whose counter
    /// still reads [`mark`](Self::mark)), exactly: a word that moved on
    /// since keeps its change.
    pub(crate) fn apply(&self, cells: &mut Cells<'_>) {
        for &(i, charge) in &self.log[..self.n] {
            cells.restore(i, charge);
        }
    }
}

impl<'a> Cells<'a> {
    /// The words `words` of a key, with the [`Mark`] read before the run
    /// (a default one where the run cannot give back).
    #[inline]
    pub(crate) fn new(words: &'a [AtomicU64], mark: Mark) -> Self {
        Cells { words, mark, log: [const { MaybeUninit::uninit() }; MAX_WIDTH], n: 0, give_back: false }
    }

    /// The key's credit counter as the store read it before this run, for
    /// a [`Stack`](crate::Stack) member's receipt: only meaningful when the
    /// store was asked to read it (`MARK`).
    #[inline]
    pub(crate) fn mark(&self) -> Mark {
        self.mark
    }

    /// Word `i`'s state.
    #[inline]
    pub(crate) fn load(&self, i: usize) -> Result<u64, Frozen> {
        let v = self.words[i].load(Ordering::Acquire);
        if v >= FIRST_MARKER {
            Err(Frozen)
        } else {
            Ok(v)
        }
    }

    /// Stores `new` in word `i` if it holds `current`, and logs it.
    #[inline]
    pub(crate) fn cas(&mut self, i: usize, current: u64, new: u64) -> Result<(), Conflict> {
        debug_assert!(new < FIRST_MARKER, "an algorithm produced a marker value");
        match self.words[i].compare_exchange_weak(current, new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                self.log[self.n] = MaybeUninit::new((i, current, new));
                self.n += 1;
                Ok(())
            }
            Err(actual) if actual >= FIRST_MARKER => Err(Conflict::Frozen),
            Err(actual) => Err(Conflict::Changed(actual)),
        }
    }

    /// Takes back one charge made on word `i`, exactly: if the word still
    /// holds what the charge stored, it gets back what it held before (see
    /// [`restore`](crate::algorithm::restore)). Returns whether it did.
    /// Only for words that cannot change hands meanwhile: a slot locked (or
    /// held) for a credit, or a private copy. A run on a live slot asks for
    /// [`give_back`](Self::give_back) instead.
    pub(crate) fn restore(&mut self, i: usize, charge: Charge) -> bool {
        let done =
            self.words[i].compare_exchange(charge.after, charge.before, Ordering::AcqRel, Ordering::Relaxed).is_ok();
        if done {
            // Forget the logged change: the word is as before it.
            if let Some(k) = (0..self.n).rev().find(|&k| self.entry(k) == (i, charge.before, charge.after)) {
                self.log.copy_within(k + 1..self.n, k);
                self.n -= 1;
            }
        }
        done
    }

    /// Asks the store to take back every change this run made, once the
    /// run is over (see the module docs): a multi-limit call whose later
    /// limit denied gives back the earlier limits' charges. Only in a run
    /// the store read the [`Mark`] for (`MARK`).
    #[inline]
    pub(crate) fn give_back(&mut self) {
        self.give_back = true;
    }

    /// The changes to take back, if the run asked for it (see
    /// [`give_back`](Self::give_back)).
    #[inline]
    pub(crate) fn to_give_back(&self) -> Option<GiveBack> {
        if !self.give_back || self.n == 0 {
            return None; // not asked, or nothing was charged
        }
        Some(self.to_give_back_slow())
    }

    #[cold]
    fn to_give_back_slow(&self) -> GiveBack {
        let mut g = GiveBack { log: [(0, Charge::default()); MAX_WIDTH], n: self.n, mark: self.mark };
        for (k, slot) in g.log[..self.n].iter_mut().enumerate() {
            let (i, before, after) = self.entry(self.n - 1 - k);
            *slot = (i, Charge { before, after });
        }
        g
    }

    /// On a private copy: takes back the changes the run asked to give
    /// back, at once (nothing else can write the copy); then whether the
    /// run changed anything.
    #[inline]
    pub(crate) fn settle_private(&mut self) -> bool {
        if self.give_back {
            self.undo();
        }
        self.wrote()
    }

    /// Sets every word holding a marker back to a pristine state (0). Only
    /// a corrupted shared file has markers in its state words (the shared
    /// store never writes one): its calls then read a full bucket rather
    /// than stop.
    #[cfg_attr(any(ratomic_loom, not(target_os = "linux")), allow(dead_code))]
    pub(crate) fn clear_markers(&self) {
        for w in self.words {
            let v = w.load(Ordering::Relaxed);
            if v >= FIRST_MARKER {
                let _ = w.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }

    /// Whether the operation changed anything.
    #[inline]
    pub(crate) fn wrote(&self) -> bool {
        self.n > 0
    }

    /// Takes back every change the operation made, newest first, exactly
    /// (a word that moved on since keeps the change). Only for words that
    /// cannot have changed hands: a private copy, or a shared file's
    /// corrupted words, set back before the operation runs again on the
    /// same slot (see the module docs for why a reused slot's changes stay).
    pub(crate) fn undo(&mut self) {
        self.give_back = false;
        while self.n > 0 {
            let (i, before, after) = self.entry(self.n - 1);
            self.n -= 1;
            let _ = self.words[i].compare_exchange(after, before, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    #[inline]
    fn entry(&self, k: usize) -> (usize, u64, u64) {
        debug_assert!(k < self.n);
        // SAFETY: entries below `n` were written by `cas`.
        unsafe { self.log[k].assume_init() }
    }
}

#[cfg(all(test, not(ratomic_loom)))]
mod tests {
    use super::*;

    #[test]
    fn undo_takes_back_every_change_newest_first_and_keeps_a_word_that_moved_on() {
        let words: Vec<AtomicU64> = (0..3).map(AtomicU64::new).collect();
        let mut cells = Cells::new(&words, Mark::default());
        cells.cas(0, 0, 10).unwrap();
        cells.cas(0, 10, 11).unwrap();
        cells.cas(1, 1, 21).unwrap();
        cells.cas(2, 2, 32).unwrap();
        // Another thread moves word 2 on: its change is kept.
        words[2].store(33, Ordering::Relaxed);
        assert!(cells.wrote());
        cells.undo();
        assert!(!cells.wrote());
        let now: Vec<u64> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        assert_eq!(now, [0, 1, 33]);
    }

    #[test]
    fn a_marker_stops_the_operation() {
        let words = [AtomicU64::new(FIRST_MARKER)];
        let mut cells = Cells::new(&words, Mark::default());
        assert_eq!(cells.load(0), Err(Frozen));
        assert_eq!(cells.cas(0, 5, 6), Err(Conflict::Frozen));
        assert!(!cells.wrote());
    }
}
