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

/// A counter that steers heuristics only (when a shard is maintained, what
/// `len` reports), never a protocol's correctness: std's atomic even under
/// loom, so models do not explore every interleaving of its updates.
pub(crate) type Counter = std::sync::atomic::AtomicUsize;

/// One step of a wait for another thread's short, bounded step (a key
/// being forgotten or moved, a shard's insert lock, a credit in progress):
/// crossbeam's exponential backoff — a few pauses, growing, then a yield,
/// so a preempted owner gets the CPU back. Under loom, a yield, so the
/// model checker runs the owner (crossbeam's own loom support needs
/// `--cfg crossbeam_loom`, which would also switch the crossbeam-epoch the
/// benches use).
pub(crate) struct Backoff(#[cfg(not(ratomic_loom))] crossbeam_utils::Backoff);

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff(
            #[cfg(not(ratomic_loom))]
            crossbeam_utils::Backoff::new(),
        )
    }

    #[inline]
    pub(crate) fn snooze(&mut self) {
        #[cfg(ratomic_loom)]
        loom::thread::yield_now();
        #[cfg(not(ratomic_loom))]
        self.0.snooze();
    }
}
