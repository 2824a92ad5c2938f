//! The one place that chooses between `std`'s and loom's synchronisation
//! primitives, so every CAS protocol in the crate can be model-checked with
//! `RUSTFLAGS="--cfg ratomic_loom"` (see `tests/loom.rs`).
//!
//! Memory reclamation (old tables after a store grows, long keys after their
//! slot is reused) is [`epoch`](crate::store::epoch)'s, which runs under loom too
//! and uses this module, not the reverse.

#[cfg(ratomic_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
#[cfg(not(ratomic_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};

/// Where a protocol relies on the single total order of SeqCst operations —
/// a thread's SeqCst write, then its SeqCst reads of *other* words, so that
/// of two threads doing this crosswise at least one sees the other's write
/// (an insert's claim, then its scan of the chain; a migration's `closed`,
/// then its scan of the slots) — this stands for that order under loom,
/// which treats SeqCst loads and stores as AcqRel and so explores outcomes
/// the order forbids (tokio-rs/loom#180; it does model SeqCst fences). In
/// production it is nothing: the operations themselves are SeqCst (on
/// x86, a locked instruction, itself a full barrier).
#[inline(always)]
pub(crate) fn seq_cst_order() {
    #[cfg(ratomic_loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}

/// A counter that steers heuristics only (when a shard is maintained, what
/// `len` reports), never a protocol's correctness: std's atomic even under
/// loom, so models do not explore every interleaving of its updates.
pub(crate) type Counter = std::sync::atomic::AtomicUsize;

/// One step of a wait for another thread's short, bounded step (an insert
/// publishing its key, a slot being moved): a pause, and every so often a
/// yield, so a preempted owner gets the CPU back. Under loom, a yield, so
/// the model checker runs the owner.
pub(crate) struct Backoff(#[cfg_attr(ratomic_loom, allow(dead_code))] u32);

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff(0)
    }

    #[inline]
    pub(crate) fn snooze(&mut self) {
        #[cfg(ratomic_loom)]
        loom::thread::yield_now();
        #[cfg(not(ratomic_loom))]
        {
            self.0 = self.0.wrapping_add(1);
            if self.0 % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}
