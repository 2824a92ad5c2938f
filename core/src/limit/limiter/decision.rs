//! What a multi-limit call answers, limit by limit, and what it charged.

use std::fmt;
use std::time::Duration;

use smallvec::SmallVec;

use crate::decision::{Decision, Verdict};
use crate::store::Charge;
use crate::store::{Cells, Mark};

use super::set::set_bits;
use super::set::MAX_LIMITS;

/// What a multi-limit charge did to each limit it charged: what a
/// [`Stack`](crate::Stack) needs to take the whole call back.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Receipts {
    pub(super) charges: [Charge; MAX_LIMITS],
    pub(super) charged: u16,
    /// The key's credit counter before the charges (see `store/cells.rs`'s
    /// `Mark`).
    pub(super) mark: Mark,
}

impl Receipts {
    #[inline]
    pub(super) fn new() -> Self {
        Receipts { charges: [Charge::default(); MAX_LIMITS], charged: 0, mark: Mark::default() }
    }

    /// Takes back every charge, exactly (see
    /// [`restore`](crate::algorithm::restore)).
    pub(super) fn restore(&self, cells: &mut Cells<'_>) {
        for i in set_bits(u32::from(self.charged)) {
            cells.restore(i, self.charges[i]);
        }
    }
}

/// One limit's answer, compact: a [`Decision`] with its durations as
/// nanoseconds (a denial always has a positive wait, so `retry_ns == 0`
/// means allowed) and its limit's index kept by the [`MultiDecision`]'s
/// mask. Multi-limit answers are moved by value, and at 32 bytes three of
/// them move without a call to `memcpy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(super) remaining: u64,
    pub(super) limit: u64,
    pub(super) retry_ns: u64,
    pub(super) reset_ns: u64,
}

impl Entry {
    /// A placeholder, overwritten before it is read.
    pub(super) const ZERO: Entry = Entry { remaining: 0, limit: 0, retry_ns: 0, reset_ns: 0 };

    /// A stack member's answer.
    #[inline]
    pub(crate) fn new(d: &Decision) -> Self {
        debug_assert_eq!(d.allowed, d.retry_after.is_zero());
        Entry {
            remaining: d.remaining,
            limit: d.limit,
            retry_ns: d.retry_after_nanos(),
            reset_ns: nanos(d.reset_after),
        }
    }

    /// A limit's answer, as its algorithm gave it.
    #[inline]
    pub(super) fn of(v: &Verdict) -> Self {
        debug_assert_eq!(v.allowed, v.retry_ns == 0);
        Entry { remaining: v.remaining, limit: v.limit, retry_ns: v.retry_ns, reset_ns: v.reset_ns }
    }

    /// What a limit that would have allowed a call answers when another
    /// limit denied it: the call charged nothing, so the limit reports its
    /// state as it stands (`v` is its answer to a cost of 0: the tokens it
    /// still has, the time until it is full) and stays allowed, so only the
    /// deniers are named (`remaining` is always what the key has right
    /// after the call).
    #[inline]
    pub(crate) fn uncharged(v: &Verdict) -> Self {
        Entry { remaining: v.remaining, limit: v.limit, retry_ns: 0, reset_ns: v.reset_ns }
    }

    /// [`uncharged`](Self::uncharged) for a stack member's answer to a
    /// cost of 0.
    pub(crate) fn uncharged_member(d: &Decision) -> Self {
        Entry { remaining: d.remaining, limit: d.limit, retry_ns: 0, reset_ns: nanos(d.reset_after) }
    }

    #[inline]
    pub(crate) fn allowed(&self) -> bool {
        self.retry_ns == 0
    }

    #[inline]
    pub(crate) fn remaining(&self) -> u64 {
        self.remaining
    }

    #[inline]
    fn decision(&self) -> Decision {
        Decision {
            allowed: self.allowed(),
            remaining: self.remaining,
            limit: self.limit,
            retry_after: Duration::from_nanos(self.retry_ns),
            reset_after: Duration::from_nanos(self.reset_ns),
        }
    }
}

/// A decision's durations never exceed 2^64 − 1 ns: they come from u64 nanoseconds.
#[inline]
fn nanos(d: Duration) -> u64 {
    d.as_secs().wrapping_mul(1_000_000_000).wrapping_add(u64::from(d.subsec_nanos()))
}

/// The combined decision of per-limit entries (never empty: a limit set
/// never is): allowed only if every limit allowed; `remaining` and `limit`
/// those of the limit with the least remaining; `retry_after` the largest
/// wait among the deniers; `reset_after` the largest.
#[inline(always)]
fn combined(entries: &[Entry]) -> Decision {
    debug_assert!(!entries.is_empty());
    let mut allowed = true;
    let mut tightest = &entries[0];
    let (mut retry_ns, mut reset_ns) = (0, 0);
    for e in entries {
        allowed &= e.allowed();
        if e.remaining < tightest.remaining {
            tightest = e;
        }
        // A limit that allowed waits 0: the largest wait is the deniers'.
        retry_ns = retry_ns.max(e.retry_ns);
        reset_ns = reset_ns.max(e.reset_ns);
    }
    Decision {
        allowed,
        remaining: tightest.remaining,
        limit: tightest.limit,
        retry_after: Duration::from_nanos(retry_ns),
        reset_after: Duration::from_nanos(reset_ns),
    }
}

/// Per-limit answers kept inline (more spill to the heap).
pub(super) const INLINE_ENTRIES: usize = 3;

/// Per-limit answers, inline for up to [`INLINE_ENTRIES`] limits.
pub(crate) type Entries = SmallVec<[Entry; INLINE_ENTRIES]>;

/// The answer to one [`Limiter`](crate::Limiter) (or [`Stack`](crate::Stack)) call: the
/// combined decision and one entry per limit (or stack member)
/// the call was subject to.
///
/// Combined: allowed only if every limit allowed; `remaining` the smallest
/// remaining; `limit` that of the limit with the least remaining;
/// `retry_after` the largest wait among the limits that denied (after it,
/// all of them allow); `reset_after` the largest.
///
/// On a denial nothing was consumed: an entry whose limit denied is that
/// limit's denial, and an entry whose limit would have allowed the call is
/// marked allowed (so [`denied_by`](Self::denied_by) names only the
/// deniers) and reports that limit as it stands — the tokens it still has
/// and the time until it is full — never as if the call had been charged.
///
/// ```
/// use ratomic::Limiter;
///
/// let limiter = Limiter::parse("2/s;5/day")?;
/// let d = limiter.allow("k")?;
/// assert!(d.decision.allowed);
/// assert_eq!(d.decision.remaining, 1, "the smallest remaining: 2/s has 1 left");
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
#[must_use = "a decision says whether the call was allowed"]
pub struct MultiDecision<'a> {
    /// The combined decision.
    pub decision: Decision,
    entries: Entries,
    /// Which limits (or stack members) the entries are, in order: bit `i`
    /// set for index `i`.
    mask: u16,
    names: &'a [Box<str>],
}

/// One limit's part in a [`MultiDecision`].
///
/// ```
/// use ratomic::Limiter;
///
/// let limiter = Limiter::parse("2/s;5/day")?;
/// let d = limiter.allow("k")?;
/// let first = d.entries().next().unwrap();
/// assert_eq!((first.index, first.name, first.decision.remaining), (0, "2/s", 1));
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NamedDecision<'a> {
    /// The limit's position among the limiter's limits (or the member's in
    /// its stack), as in [`Limiter::names`](crate::Limiter::names).
    pub index: usize,
    /// The limit's name.
    pub name: &'a str,
    /// What the limit answered.
    pub decision: Decision,
}

impl<'a> MultiDecision<'a> {
    /// The answer made of per-limit `entries` (entry `k` the `k`-th set
    /// bit of `mask`).
    #[inline]
    pub(crate) fn combine(entries: Entries, mask: u16, names: &'a [Box<str>]) -> Self {
        debug_assert_eq!(entries.len(), mask.count_ones() as usize);
        MultiDecision { decision: combined(&entries), entries, mask, names }
    }

    /// [`combine`](Self::combine) from a call's answers.
    #[inline(always)]
    pub(super) fn of_answers<const N: usize>(answers: &Answers<N>, mask: u16, names: &'a [Box<str>]) -> Self {
        debug_assert_eq!(answers.count, mask.count_ones() as usize);
        MultiDecision { decision: combined(answers.entries()), entries: answers.to_entries(), mask, names }
    }

    /// Whether the call was allowed (by every limit).
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// assert!(limiter.allow("k")?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn allowed(&self) -> bool {
        self.decision.allowed
    }

    /// One entry per limit the call was subject to, in the limiter's order.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let d = limiter.allow("k")?;
    /// let remaining: Vec<_> = d.entries().map(|e| (e.name, e.decision.remaining)).collect();
    /// assert_eq!(remaining, [("2/s", 1), ("5/day", 4)]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn entries(&self) -> impl ExactSizeIterator<Item = NamedDecision<'a>> + '_ {
        self.entries.iter().enumerate().map(|(k, e)| {
            // The k-th set bit of the mask is this entry's index.
            let mut m = self.mask;
            for _ in 0..k {
                m &= m - 1;
            }
            let index = m.trailing_zeros() as usize;
            NamedDecision { index, name: &self.names[index], decision: e.decision() }
        })
    }

    /// The named limit's entry, if the call was subject to it.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// assert_eq!(limiter.allow("k")?.get("5/day").unwrap().remaining, 4);
    /// assert!(limiter.allow("k")?.get("nope").is_none());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn get(&self, name: &str) -> Option<Decision> {
        self.entries().find(|e| e.name == name).map(|e| e.decision)
    }

    /// The limits that denied the call (empty when it was allowed).
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let _ = limiter.allow_n("k", 2)?;
    /// assert_eq!(limiter.allow("k")?.denied_by().collect::<Vec<_>>(), ["2/s"]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn denied_by(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.entries().filter(|e| !e.decision.allowed).map(|e| e.name)
    }
}

impl fmt::Debug for MultiDecision<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiDecision")
            .field("decision", &self.decision)
            .field("entries", &self.entries().collect::<Vec<_>>())
            .finish()
    }
}

/// Every limit's decision on one reading of its word (see
/// [`Limiter::decide`](super::Limiter::decide)).
pub(super) struct Decided<const N: usize> {
    pub(super) a: Answers<N>,
    /// Per entry `k`: the word as read (then, in a charge, as charged
    /// from) and the word after the call.
    pub(super) seen: [u64; N],
    pub(super) next: [u64; N],
}

impl<const N: usize> Decided<N> {
    #[inline(always)]
    pub(super) fn new() -> Self {
        Decided { a: Answers::new(), seen: [0; N], next: [0; N] }
    }
}

/// A call's per-limit answers before they become a [`MultiDecision`]:
/// entry `k` is limit `index[k]`, for at most `N` limits.
pub(super) struct Answers<const N: usize> {
    pub(super) entries: [Entry; N],
    /// Word-sized: written a byte each, they were read back four bytes at a
    /// time by a copy of the answers, a store forward that failed on every
    /// call (`perf annotate`, cargo's default release profile).
    pub(super) index: [usize; N],
    pub(super) count: usize,
}

impl<const N: usize> Answers<N> {
    #[inline(always)]
    pub(super) fn new() -> Self {
        Answers { entries: [Entry::ZERO; N], index: [0; N], count: 0 }
    }

    #[inline(always)]
    pub(super) fn entries(&self) -> &[Entry] {
        &self.entries[..self.count]
    }

    /// The entries as a [`MultiDecision`] keeps them. Up to three are
    /// copied whole, a fixed size, into the inline buffer: a copy of
    /// `count` entries is a call to `memcpy`, and reading them back right
    /// after its writes stalled (seen with `perf annotate`).
    #[inline(always)]
    pub(super) fn to_entries(&self) -> Entries {
        if N <= INLINE_ENTRIES {
            let mut buf = [Entry::ZERO; INLINE_ENTRIES];
            buf[..N].copy_from_slice(&self.entries);
            Entries::from_buf_and_len(buf, self.count)
        } else {
            Entries::from_slice(self.entries())
        }
    }
}

/// `(allowed, retry_after)` of a decision, for the acquire loops.
pub(super) fn answer(d: &MultiDecision<'_>) -> (bool, Duration) {
    (d.decision.allowed, d.decision.retry_after)
}
