//! A keyed store that the processes of one host share through a
//! memory-mapped file ([`Options::shared_file`](crate::Options::shared_file)):
//! the same interface as the in-process [`Store`](super::Store), over one
//! fixed table (`table.rs`, which states the crash-safe protocol and its
//! invariants) sized from `max_keys` when the file is created.
//!
//! # Why `libc` and not a mapping crate
//!
//! Opening the file safely needs `open(O_NOFOLLOW | O_CLOEXEC, 0600)`,
//! `fstat` (owner, size, kind), `flock` (initialisation under a lock the
//! kernel drops when its holder dies), `ftruncate` and `mmap(MAP_SHARED)`:
//! all plain syscalls, which `libc` gives directly; a mapping crate would
//! cover only the last of them.
//!
//! # The file
//!
//! A 1280-byte header, then the slots (`2 × max_keys` slots of `2 + width`
//! words), then the floor (`max_keys / 4` cells, a power of two, of `width`
//! words). The header holds a magic number, the layout version, a
//! fingerprint of what the limiter enforces (rule(s), width, key type,
//! `max_keys`, eviction policy), the boot id
//! (`/proc/sys/kernel/random/boot_id`: times are `CLOCK_MONOTONIC`
//! readings, which mean nothing after a reboot), the seed of the key
//! fingerprints, the key count, the sweeper word, 16 credit counters (one
//! a cache line; see `store/cells.rs`), the file's size and a ready flag
//! written last. The first opener creates and initialises it
//! while holding `flock(LOCK_EX)`; later openers take the same lock, so they
//! see it ready (and one that finds a file whose creator died before
//! setting `ready` initialises it again: nobody can have used it).
//!
//! # Time
//!
//! Every process must read one timeline: [`MonotonicClock`](crate::MonotonicClock)
//! reads `CLOCK_MONOTONIC` on Linux, which is that timeline. Readings taken
//! in different processes may interleave out of order by the time between a
//! reading and its CAS; the algorithms never grant more for calls stamped
//! out of order, and the floor (see `table.rs`) covers a call stamped before
//! another process forgot its key.
//!
//! # `max_keys` and eviction
//!
//! The table holds at most `max_keys` keys. An insert that finds it full
//! sweeps it (one process at a time): idle keys are forgotten and the
//! eighth of the keys closest to idle are evicted. A shared region cannot
//! keep per-key summaries as the in-process store's
//! [`Eviction::Fair`](crate::Eviction::Fair) does, so under `Fair` an
//! evicted key comes back full (at most one limit's worth of extra grants
//! per eviction, the bound `Fair` states for a displaced summary), and under
//! [`Eviction::Strict`](crate::Eviction::Strict) evicted states are joined
//! into the floor, so nothing is ever over-granted and heavy churn may deny
//! new keys.

#[cfg(all(target_os = "linux", not(ratomic_loom)))]
mod file;
#[cfg(ratomic_loom)]
pub mod model;
pub(crate) mod table;

#[cfg(all(target_os = "linux", not(ratomic_loom)))]
pub(crate) use file::SharedStore;
