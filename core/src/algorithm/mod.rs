//! What every algorithm provides to the engine: how one key's `u64` state
//! answers a call. The engine owns the CAS loop and the key store; an
//! algorithm is pure arithmetic on a state word, which keeps the lock-free
//! protocol in one place (`limit/keyed.rs`, `limit/direct.rs`) and model-checked once.

pub(crate) mod div;
pub(crate) mod gcra;
pub(crate) mod rule;
pub(crate) mod window;

use crate::decision::Verdict;
use crate::error::{Error, Result};
use crate::store::{Cells, Charge, Conflict, Frozen};
use crate::sync::{AtomicU64, Ordering};

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A rate-limiting algorithm: the rule that turns one key's 64-bit state, a
/// time and a cost into a [`Decision`](crate::Decision).
///
/// Sealed: the implementations are [`Gcra`](crate::Gcra) (token bucket) and
/// the window algorithms. Its methods are the engine's business. Every
/// algorithm prints as its rule with units (`Display`):
///
/// ```
/// use ratomic::{Algorithm, TokenBucket};
///
/// let limiter = TokenBucket::builder("10/s").build()?;
/// assert_eq!(limiter.algorithm().to_string(), "token bucket 10 per 1s");
/// assert_eq!(limiter.algorithm().limit(), 10);
/// # Ok::<(), ratomic::Error>(())
/// ```
pub trait Algorithm: sealed::Sealed + std::fmt::Debug + std::fmt::Display + Send + Sync + 'static {
    /// The state of a key never seen (or forgotten): a full bucket.
    #[doc(hidden)]
    const PRISTINE: u64;

    /// The most a key can hold; the largest cost a call may ask.
    fn limit(&self) -> u64;

    /// The policy's time window: a window algorithm's window length, or the
    /// time an empty token bucket takes to fill (`capacity × emission
    /// interval`). What the `w` parameter of a `RateLimit-Policy` header
    /// field says (see [`headers`](crate::headers)).
    fn window(&self) -> std::time::Duration;

    /// Answers `cost` at `now` from `state`: the decision and, when the call
    /// consumes, the state to store. `None` means "write nothing" (denials,
    /// cost 0). `cost ≤ limit()` has been checked.
    #[doc(hidden)]
    fn decide(&self, state: u64, now: u64, cost: u64) -> (Verdict, Option<u64>);

    /// The state after giving back `tokens` at `now` (never above full), or
    /// `None` when nothing changes.
    #[doc(hidden)]
    fn refund(&self, state: u64, now: u64, tokens: u64) -> Option<u64>;

    /// Nanoseconds until `state` carries no information (the key is full
    /// again and could be forgotten without changing any later decision);
    /// 0 means "droppable now".
    #[doc(hidden)]
    fn idle_after(&self, state: u64, now: u64) -> u64;

    /// The least generous state that is at least as restrictive as both `a`
    /// and `b`, for every later time. A key the store had to forget answers
    /// from the join of everything forgotten in its shard, so forgetting never
    /// grants more than remembering would have.
    #[doc(hidden)]
    fn join(&self, a: u64, b: u64) -> u64;

    /// Rejects a cost no call could ever be granted.
    #[inline]
    #[doc(hidden)]
    fn check_cost(&self, cost: u64) -> Result<()> {
        let limit = self.limit();
        if cost > limit {
            Err(Error::CostExceedsLimit { cost, limit })
        } else {
            Ok(())
        }
    }
}

/// The lock-free step every limiter takes on a key's state word: read,
/// decide, compare-and-swap, and retry only if another call got there first.
/// A denial returns without writing.
///
/// `Relaxed` is enough: the word is the whole state, and the CAS makes each
/// read-decide-write atomic in the word's modification order; nothing else is
/// published through it.
#[inline]
pub(crate) fn cas_decide<A: Algorithm>(alg: &A, cell: &AtomicU64, now: u64, cost: u64) -> Verdict {
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        let (decision, next) = alg.decide(current, now, cost);
        let Some(next) = next else { return decision };
        match cell.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return decision,
            Err(actual) => current = actual,
        }
    }
}

/// Like [`cas_decide`], and also returns what it changed, if anything.
#[inline]
pub(crate) fn cas_charge<A: Algorithm>(alg: &A, cell: &AtomicU64, now: u64, cost: u64) -> (Verdict, Option<Charge>) {
    let current = cell.load(Ordering::Relaxed);
    let (decision, next) = alg.decide(current, now, cost);
    match next {
        None => (decision, None),
        Some(next) => charge_from(alg, cell, current, next, decision, now, cost),
    }
}

/// Finishes a charge already decided on a reading of the word (`current`,
/// giving `decision` and `next`): stores `next` if the word still holds
/// `current`, else decides again on what it holds, as [`cas_charge`] does.
#[inline]
pub(crate) fn charge_from<A: Algorithm>(
    alg: &A,
    cell: &AtomicU64,
    mut current: u64,
    mut next: u64,
    mut decision: Verdict,
    now: u64,
    cost: u64,
) -> (Verdict, Option<Charge>) {
    loop {
        match cell.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return (decision, Some(Charge { before: current, after: next })),
            Err(actual) => {
                current = actual;
                let (d, n) = alg.decide(current, now, cost);
                decision = d;
                match n {
                    Some(n) => next = n,
                    None => return (decision, None),
                }
            }
        }
    }
}

/// Takes back a charge, exactly: if the word still holds what the charge
/// stored, it gets back what it held before; otherwise nothing changes and
/// the charge stays. Returns whether it was taken back.
///
/// # Why exactly, and never more
///
/// A give-back that subtracts the charge from whatever the word holds now
/// over-grants: GCRA's `max(TAT, now)` lets a later call with a later clock
/// reading absorb an earlier charge, and subtracting that charge afterwards
/// erases the later call's, and a multi-limit call would then grant more
/// than its limits allow (replayed in this module's tests).
/// A word that still holds exactly this charge's result has seen no other
/// write since, as long as no refund or reset of the key came in between:
/// every allowed charge moves the word on, and a give-back of a charge
/// made after this one is itself exact. So restoring `before` is exactly
/// the history without this charge. When the word has moved, the charge is
/// kept: the tokens come back by refill, never by a guess. The callers make
/// that rare by deciding every limit before charging any (a call a limit
/// denies charges nothing) and by charging the tightest limit first.
///
/// The callers see to the rest. On a store's slot, "no other write since"
/// holds only while the slot keeps its key: the store gives back with the
/// slot locked (see `store/cells.rs`). A refund or a reset can bring the
/// word back to where a later call is charged to exactly this charge's
/// value (same clock reading, same cost), and that call's charge would be
/// erased: every give-back first checks the key's credit counter, read
/// before the charge, and keeps the charge if a refund or reset may have
/// landed since (`store::cells::Mark`; for a [`Direct`](crate::Direct), its own
/// counter).
#[inline]
pub(crate) fn restore(cell: &AtomicU64, charge: Charge) -> bool {
    cell.compare_exchange(charge.after, charge.before, Ordering::Relaxed, Ordering::Relaxed).is_ok()
}

/// [`cas_charge`] on word `i` of a stored key (see `store/cells.rs`).
///
/// Always inlined. Called out of line, its result (a `Verdict` and a
/// `Charge`) comes back through memory; since the shared-file backend's
/// dispatch (f2aef2d) changed the code around the call, the caller read it
/// back wider than it was written, a stalled store forward (`perf annotate`
/// put 15% of a Node hot-key `allow` on that load). Inlined, a hot-key
/// `allow` from Node takes 62 ns instead of 75, and a hot-key `TokenBucket`
/// call in `rounds` 23 ns instead of 28.
#[inline(always)]
pub(crate) fn charge_in<A: Algorithm>(
    alg: &A,
    cells: &mut Cells<'_>,
    i: usize,
    now: u64,
    cost: u64,
) -> Result<(Verdict, Option<Charge>), Frozen> {
    let current = cells.load(i)?;
    charge_reading_in(alg, cells, i, current, now, cost)
}

/// [`charge_in`] from a reading of word `i`.
#[inline(always)]
fn charge_reading_in<A: Algorithm>(
    alg: &A,
    cells: &mut Cells<'_>,
    i: usize,
    current: u64,
    now: u64,
    cost: u64,
) -> Result<(Verdict, Option<Charge>), Frozen> {
    let (decision, next) = alg.decide(current, now, cost);
    match next {
        None => Ok((decision, None)),
        Some(next) => charge_from_in(alg, cells, i, current, next, decision, now, cost),
    }
}

/// [`charge_from`] on word `i` of a stored key.
#[allow(clippy::too_many_arguments)]
#[inline]
fn charge_from_in<A: Algorithm>(
    alg: &A,
    cells: &mut Cells<'_>,
    i: usize,
    mut current: u64,
    mut next: u64,
    mut decision: Verdict,
    now: u64,
    cost: u64,
) -> Result<(Verdict, Option<Charge>), Frozen> {
    loop {
        match cells.cas(i, current, next) {
            Ok(()) => return Ok((decision, Some(Charge { before: current, after: next }))),
            Err(Conflict::Frozen) => return Err(Frozen),
            Err(Conflict::Changed(actual)) => {
                current = actual;
                let (d, n) = alg.decide(current, now, cost);
                decision = d;
                match n {
                    Some(n) => next = n,
                    None => return Ok((decision, None)),
                }
            }
        }
    }
}

/// Finishes a charge already decided on a reading of word `i` (`current`,
/// giving `next`): `None` if the word still held `current` and now holds
/// `next` (the charge went through as decided), else what deciding again on
/// what it holds gave, as [`charge_in`] does.
///
/// The common case, a CAS that succeeds, is inlined and returns nothing
/// the caller must read back from memory; a conflict is decided out of line.
#[inline(always)]
pub(crate) fn settle_in<A: Algorithm>(
    alg: &A,
    cells: &mut Cells<'_>,
    i: usize,
    current: u64,
    next: u64,
    now: u64,
    cost: u64,
) -> Result<Option<(Verdict, Option<Charge>)>, Frozen> {
    match cells.cas(i, current, next) {
        Ok(()) => Ok(None),
        Err(Conflict::Frozen) => Err(Frozen),
        Err(Conflict::Changed(actual)) => out_of_line(|| charge_reading_in(alg, cells, i, actual, now, cost)).map(Some),
    }
}

/// Runs `f` as a call that is never inlined and seldom taken.
#[cold]
#[inline(never)]
fn out_of_line<T>(f: impl FnOnce() -> T) -> T {
    f()
}

/// [`cas_refund`] on word `i` of a stored key.
#[inline]
pub(crate) fn refund_in<A: Algorithm>(
    alg: &A,
    cells: &mut Cells<'_>,
    i: usize,
    now: u64,
    tokens: u64,
) -> Result<bool, Frozen> {
    let mut current = cells.load(i)?;
    loop {
        let Some(next) = alg.refund(current, now, tokens) else { return Ok(false) };
        match cells.cas(i, current, next) {
            Ok(()) => return Ok(true),
            Err(Conflict::Frozen) => return Err(Frozen),
            Err(Conflict::Changed(actual)) => current = actual,
        }
    }
}

/// [`peek`] on word `i` of a stored key.
#[inline]
pub(crate) fn peek_in<A: Algorithm>(
    alg: &A,
    cells: &Cells<'_>,
    i: usize,
    now: u64,
    cost: u64,
) -> Result<Verdict, Frozen> {
    Ok(alg.decide(cells.load(i)?, now, cost).0)
}

/// Gives back `tokens` with a CAS loop; returns whether anything changed.
#[inline]
pub(crate) fn cas_refund<A: Algorithm>(alg: &A, cell: &AtomicU64, now: u64, tokens: u64) -> bool {
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        let Some(next) = alg.refund(current, now, tokens) else { return false };
        match cell.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return true,
            Err(actual) => current = actual,
        }
    }
}

/// The answer `cost` would get, without changing anything.
#[inline]
pub(crate) fn peek<A: Algorithm>(alg: &A, cell: &AtomicU64, now: u64, cost: u64) -> Verdict {
    alg.decide(cell.load(Ordering::Relaxed), now, cost).0
}

#[cfg(all(test, not(ratomic_loom)))]
mod tests {
    use super::*;
    use crate::algorithm::gcra::Gcra;
    use crate::quota::Quota;
    use crate::rate::Rate;
    use std::time::Duration;

    /// The adversarial review's replay on one GCRA word (burst 1, T = 50 ns):
    /// A charges at t = 100, B is allowed at t = 200 (its `max(TAT, now)`
    /// absorbs A's charge), A's other limit denies and A gives back. The old
    /// give-back (`max(TAT − T, now_A)`) left TAT at 200, and C was allowed
    /// at t = 200 too: two grants at one instant with capacity 1.
    #[test]
    fn a_give_back_never_erases_a_later_call_s_charge() {
        let g = Gcra::new(Quota::from_rate(Rate::new(1, Duration::from_nanos(50)).unwrap()).unwrap());
        let word = AtomicU64::new(0);
        let (a, charge) = cas_charge(&g, &word, 100, 1);
        assert!(a.allowed);
        assert_eq!(charge, Some(Charge { before: 0, after: 150 }));
        let (b, _) = cas_charge(&g, &word, 200, 1);
        assert!(b.allowed);
        assert!(!restore(&word, charge.unwrap()), "the word moved: A's charge stays");
        let (c, _) = cas_charge(&g, &word, 200, 1);
        assert!(!c.allowed, "B holds the only token at t = 200");
    }

    #[test]
    fn an_untouched_charge_is_taken_back_exactly() {
        let g = Gcra::new(Quota::from_rate(Rate::new(2, Duration::from_nanos(100)).unwrap()).unwrap());
        let word = AtomicU64::new(0);
        let (_, first) = cas_charge(&g, &word, 100, 1);
        let (_, second) = cas_charge(&g, &word, 100, 1);
        // Taken back in reverse order, both are exact: the word is as new.
        assert!(restore(&word, second.unwrap()));
        assert!(restore(&word, first.unwrap()));
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }
}
