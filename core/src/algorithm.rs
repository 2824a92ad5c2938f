//! What every algorithm provides to the engine: how one key's `u64` state
//! answers a call. The engine owns the CAS loop and the key store; an
//! algorithm is pure arithmetic on a state word, which keeps the lock-free
//! protocol in one place (`keyed.rs`, `direct.rs`) and model-checked once.

use crate::decision::Verdict;
use crate::error::{Error, Result};
use crate::sync::{AtomicU64, Ordering};

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A rate-limiting algorithm: the rule that turns one key's 64-bit state, a
/// time and a cost into a [`Decision`](crate::Decision).
///
/// Sealed: the implementations are [`Gcra`](crate::Gcra) (token bucket) and
/// the window algorithms. Its methods are the engine's business.
pub trait Algorithm: sealed::Sealed + Send + Sync + 'static {
    /// The state of a key never seen (or forgotten): a full bucket.
    #[doc(hidden)]
    const PRISTINE: u64;

    /// The most a key can hold; the largest cost a call may ask.
    fn limit(&self) -> u64;

    /// Answers `cost` at `now` from `state`: the decision and, when the call
    /// consumes, the state to store. `None` means "write nothing" (denials,
    /// cost 0). `cost ≤ limit()` has been checked.
    #[doc(hidden)]
    fn decide(&self, state: u64, now: u64, cost: u64) -> (Verdict, Option<u64>);

    /// The state after giving back `tokens` at `now` (never above full), or
    /// `None` when nothing changes.
    #[doc(hidden)]
    fn refund(&self, state: u64, now: u64, tokens: u64) -> Option<u64>;

    /// Takes back a charge of `cost` this limiter made when it stored
    /// `charged` (the state a successful `decide` returned), for the
    /// all-or-nothing protocols: a multi-limit call gives back what it
    /// charged when a later limit denies. `state` is the word now, possibly
    /// changed by other calls since. `None` when nothing changes.
    #[doc(hidden)]
    fn uncharge(&self, state: u64, charged: u64, now: u64, cost: u64) -> Option<u64>;

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

/// Like [`cas_decide`], and also returns the state it stored, if any: the
/// receipt a give-back needs.
#[inline]
pub(crate) fn cas_charge<A: Algorithm>(alg: &A, cell: &AtomicU64, now: u64, cost: u64) -> (Verdict, Option<u64>) {
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        let (decision, next) = alg.decide(current, now, cost);
        let Some(next) = next else { return (decision, None) };
        match cell.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return (decision, Some(next)),
            Err(actual) => current = actual,
        }
    }
}

/// Gives back a charge made by [`cas_charge`] (which stored `charged`).
#[inline]
pub(crate) fn cas_uncharge<A: Algorithm>(alg: &A, cell: &AtomicU64, charged: u64, now: u64, cost: u64) {
    let mut current = cell.load(Ordering::Relaxed);
    loop {
        let Some(next) = alg.uncharge(current, charged, now, cost) else { return };
        match cell.compare_exchange_weak(current, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return,
            Err(actual) => current = actual,
        }
    }
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
