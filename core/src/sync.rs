//! The one place that chooses between `std`'s and loom's synchronisation
//! primitives, so every CAS protocol in the crate can be model-checked with
//! `RUSTFLAGS="--cfg ratomic_loom"` (see `tests/loom.rs`).

#[cfg(ratomic_loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicU64, Ordering},
    RwLock, RwLockReadGuard, RwLockWriteGuard,
};
#[cfg(not(ratomic_loom))]
pub(crate) use std::sync::{
    atomic::{AtomicU64, Ordering},
    RwLock, RwLockReadGuard, RwLockWriteGuard,
};

/// Read-locks, ignoring poisoning: nothing in this crate panics while holding
/// a lock, and a table left by a panicking thread is still structurally valid.
#[inline]
pub(crate) fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    match lock.read() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// Write-locks, ignoring poisoning (see [`read`]).
#[inline]
pub(crate) fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    match lock.write() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}
