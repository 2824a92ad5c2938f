//! A keyed store that the processes of one host share through a
//! memory-mapped file ([`Options::shared_file`](crate::Options::shared_file)):
//! the same interface as the in-process [`Store`](super::Store), over one
//! fixed table (`table.rs`, which states the crash-safe protocol and its
//! invariants) sized from `max_keys` when the file is made.
//!
//! # Why `libc` and not a mapping crate
//!
//! Opening the file safely needs `open(O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
//! 0600)`, `fstat` (owner, size, kind), `flock` and OFD locks (`fcntl`),
//! `ftruncate`, `fallocate` and `mmap(MAP_SHARED)`: all plain syscalls,
//! which `libc` gives directly; a mapping crate would cover only the last
//! of them.
//!
//! # The file
//!
//! A 4 KiB header, a bitmap of the slots' chunks with backing store (one
//! bit per page), then the slots (`2 × max_keys` slots of `2 + width`
//! words, from a page boundary), then the floor (`max_keys / 4` cells, a
//! power of two, of `width` words). The header holds a magic number, the
//! layout version, a fingerprint of what the limiter enforces (rule(s),
//! width, key type, `max_keys`, eviction policy) and the same in words (for
//! errors), the boot id (`/proc/sys/kernel/random/boot_id`: times are
//! `CLOCK_MONOTONIC` readings, which mean nothing after a reboot), the
//! seed of the key fingerprints, the key count, the maintenance hand, 16
//! credit counters (one a cache line; see `store/cells.rs`), the file's
//! size and a ready flag written last.
//!
//! **Sparse.** The file is sized with `ftruncate` and never zeroed: a new
//! file is all zeros, which is an empty table and a pristine floor. Backing
//! store is reserved (`fallocate`) for the header, the bitmap and the floor
//! when the file is made, and for the slots a page at a time, before a
//! call's key is first written there (see `table.rs`, "Backing store"): so
//! the file costs what it holds, and a full file system is an error
//! ([`Error::SharedFile`](crate::Error::SharedFile)), never a bus error.
//!
//! **Opening**, never waiting without a bound: the owner and mode are
//! checked before any lock; then the *opening lock* (`flock(LOCK_EX)`,
//! held for microseconds while the header is checked or written) is tried
//! for at most [`OPEN_WAIT`](file::OPEN_WAIT) (5 s), after which the error
//! names its holder (from `/proc/locks`) and what to do. Every process
//! that uses the file holds the *users' lock* (an OFD lock, shared) for as
//! long as it has the file open or mapped — the kernel drops it when the
//! process (and any child it forked) has exited. A file that is ready for
//! the same limiter is joined; any other file of ours — new, left half-made
//! by a creator that died, from before the last boot, truncated, or made
//! for another limiter — is made anew if nobody holds the users' lock, and
//! otherwise refused with an error that names both limiters and the one
//! command that switches now (`rm` the file: running processes keep the
//! old one until they restart).
//!
//! # Time
//!
//! Every process must read one timeline: the host's `CLOCK_MONOTONIC`,
//! which [`MonotonicClock`](crate::MonotonicClock) (the default) reads on
//! Linux. A limiter built with any other clock is refused. The `*_at`
//! methods take the caller's time as given: they are for tests and for
//! callers that hold a reading of that clock (`limiter.now()`). Readings
//! taken in different processes may interleave out of order by the time
//! between a reading and its CAS; the algorithms never grant more for calls
//! stamped out of order, and the floor (see `table.rs`) covers a call
//! stamped before another process forgot its key. A time ahead of the
//! clock charges as if it were that time: the key stays denied to every
//! process until the clock catches up.
//!
//! # `max_keys` and eviction
//!
//! The table holds at most `max_keys` keys, by default [`DEFAULT_MAX_KEYS`]
//! (131,072), chosen for a web service: a host serving 1,000 requests a
//! second, each from a new client, sees 60,000 distinct clients in the
//! minute of a per-minute limit, so the default keeps every client of such
//! a limit with room to spare; and its file is at most 6.3 MiB for one
//! limit (24 bytes a slot, two slots a key, and the floor), on the tmpfs
//! (RAM) the docs advise — 264 KiB with no key, about 4 MiB with 1,000
//! (`BENCHMARKS.md`). The in-memory default (4,194,304 keys) would make a
//! 200 MiB file, most of it touched once a few hundred thousand keys have
//! come and gone. Set it to the distinct keys you expect within one refill
//! period.
//!
//! An insert that finds the table full makes room for itself (see
//! `table.rs`, "Maintenance"): idle keys are forgotten, else a key close to
//! idle is evicted. A shared region cannot keep per-key summaries as the
//! in-process store's [`Eviction::Fair`](crate::Eviction::Fair) does, so
//! under `Fair` an evicted key comes back full (at most one limit's worth
//! of extra grants per eviction, the bound `Fair` states for a displaced
//! summary), and under [`Eviction::Strict`](crate::Eviction::Strict)
//! evicted states are joined into the floor, so nothing is ever
//! over-granted and heavy churn may deny new keys.

/// `max_keys` of a shared file when none is given (see `mod.rs`'s docs).
pub(crate) const DEFAULT_MAX_KEYS: usize = 1 << 17;

#[cfg(all(target_os = "linux", not(ratomic_loom)))]
mod file;
#[cfg(ratomic_loom)]
pub mod model;
pub(crate) mod table;

#[cfg(all(target_os = "linux", not(ratomic_loom)))]
pub(crate) use file::SharedStore;
