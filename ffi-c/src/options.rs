//! Construction options: the key store's bounds, the eviction policy and
//! the clock (as core's [`Options`] and a [`Clock`]).

use std::ffi::{c_char, c_void};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use ratomic_core::{Clock, ClockId, CoarseClock, Eviction, MonotonicClock, Options};

use crate::boundary::Failure;

/// A clock: returns the current time in **nanoseconds** on any monotonic
/// timeline of the caller's choice (it need not start at 0). Called with the
/// `clock_user_data` given in `ratomic_options`.
///
/// It is called on the thread of each limiter call, possibly from many
/// threads at once, so it must be thread-safe. It must not unwind (no C++
/// exception, no `longjmp`) out of the call. A reading above
/// `RATOMIC_MAX_TIME` (2^62 − 1 ns, about 146 years) is never clamped: the
/// call that read it fails with `RATOMIC_INVALID_ARGUMENT` and changes
/// nothing.
pub type ratomic_clock_fn = Option<unsafe extern "C" fn(user_data: *mut c_void) -> u64>;

/// How `ratomic_acquire` waits `wait_ns` nanoseconds on the clock's timeline
/// before it tries again. Called with the `clock_user_data` given in
/// `ratomic_options`, on the thread that called `ratomic_acquire`; it must
/// be thread-safe and must not unwind out of the call.
///
/// A test's clock moves itself forward by `wait_ns` here instead of sleeping,
/// so that no test ever sleeps; a program whose clock callback reads real
/// time sleeps (e.g. with `nanosleep`) or leaves this NULL.
pub type ratomic_sleep_fn = Option<unsafe extern "C" fn(user_data: *mut c_void, wait_ns: u64)>;

/// What a limiter does with a key it must evict to respect `max_keys` (or
/// `max_key_bytes`) before that key's bucket is full again: the
/// `ratomic_options::eviction` field.
///
/// Both policies evict the keys closest to full first, and neither matters
/// to a limiter that never holds `max_keys` keys that are not full. No
/// policy can keep memory bounded, never grant more than remembering every
/// key would, and keep one client's churn from denying another, all at
/// once: this is the trade, made explicit.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ratomic_eviction {
    /// The default (a zeroed `ratomic_options`). An evicted key's state is
    /// kept in a bounded array of per-hash summaries (a quarter as many as
    /// `max_keys`), so the key finds its own state when it comes back and
    /// no other key ever starts from it: **churn on other keys (an
    /// attacker's single-use keys) never denies a call that would be
    /// allowed by itself**. The bound on what it can over-grant: a key
    /// evicted with `u` tokens used whose summary is displaced before it
    /// comes back starts full — at most `u` extra tokens (one limit's worth)
    /// per eviction of that key.
    RATOMIC_EVICTION_FAIR = 0,
    /// Never grants more than remembering every key would: evicted states
    /// are joined into the summary their key hashes to, and every key new
    /// to the limiter starts from its summary. The price: sustained churn
    /// beyond `max_keys` drives the summaries towards empty, and new keys —
    /// honest users included — are denied until they refill. For limits
    /// where an over-grant is worse than a denial (a paid quota).
    RATOMIC_EVICTION_STRICT = 1,
}

/// Which of the library's clocks a limiter reads when `ratomic_options`
/// gives no `clock` callback.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ratomic_clock_source {
    /// The default (a zeroed `ratomic_options`): `CLOCK_MONOTONIC`, read
    /// through the TSC where the kernel does, nanosecond resolution.
    RATOMIC_CLOCK_MONOTONIC = 0,
    /// Opt-in: `CLOCK_MONOTONIC_COARSE`, the same timeline read several
    /// times more cheaply, in steps of one kernel tick (typically 4 ms;
    /// `clock_getres(CLOCK_MONOTONIC_COARSE, …)` says). It works with a
    /// `shared_file` and in a `ratomic_stack` beside limiters on the default
    /// clock. A limiter on it never grants more than its limit over the
    /// clock's own time; against real time, at most `rate × tick` more over
    /// any span (4 tokens for 1,000/s on a 4 ms tick). Where that matters,
    /// keep the default.
    RATOMIC_CLOCK_COARSE = 1,
}

/// Options for the `*_new` / `*_from_rate` constructors. Pass NULL for all
/// defaults; a zeroed struct (`ratomic_options o = {0};`) is also all
/// defaults, field by field: 0 (or NULL) in any field means its default.
/// New fields are only ever appended, and their zero is their default, so
/// code that zeroes the struct before setting the fields it knows keeps
/// working when it is rebuilt against a newer header. (The library's
/// SONAME carries its minor version while ratomic is 0.x: a program is
/// rebuilt against each minor version's header.)
///
/// # Memory: `max_keys`, `max_key_len`, `max_key_bytes`, `eviction`
///
/// A limiter remembers the keys whose buckets are not full, in a store
/// sharded by key hash. Keys whose buckets are full again are dropped
/// without changing any decision (on growth, or by `ratomic_gc`). Each
/// shard holds at most `max_keys / shards` keys and `max_key_bytes /
/// shards` bytes of keys longer than 23 bytes (at least one `max_key_len`
/// key always fits); when a shard is full of keys that are not full, it
/// evicts the eighth of them closest to full (long keys first when the
/// byte budget binds), so a call never blocks, never allocates beyond the
/// bound and never fails for lack of room. What an evicted key answers when
/// it comes back is the `eviction` policy (see `ratomic_eviction`). Memory
/// held: about 2 × `max_keys` slots (24 bytes of key + 8 per limit), plus
/// `max_key_bytes` of long keys, plus summaries for up to `max_keys / 4`
/// evicted keys: with the defaults and one limit, at most 256 MiB of slots,
/// 64 MiB of long keys and 16 MiB of summaries.
///
/// Ownership: the caller owns the struct; the constructor copies it (but
/// keeps `clock_user_data` as a pointer: see below).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratomic_options {
    /// Most keys held at once (approximate: enforced per shard, so the true
    /// bound is `max_keys` rounded up to a multiple of the shard count).
    /// 0 = the default, 4,194,304.
    pub max_keys: usize,
    /// Longest key accepted, in bytes; longer keys give
    /// `RATOMIC_KEY_TOO_LONG`. 0 = the default, 1024. At most 2^32 − 1
    /// (else `RATOMIC_INVALID_ARGUMENT`).
    pub max_key_len: usize,
    /// Where time comes from for the calls without `_at`. NULL = the
    /// library's monotonic clock (`CLOCK_MONOTONIC`, in ns since the host
    /// booted on Linux, the same in every process).
    pub clock: ratomic_clock_fn,
    /// Passed to `clock` and `clock_sleep` on every call. Borrowed: it must
    /// stay valid until the limiter is freed (ratomic never frees it).
    pub clock_user_data: *mut c_void,
    /// Most bytes of keys longer than 23 bytes held at once (shorter keys
    /// are stored inline and count only towards `max_keys`); enforced per
    /// shard like `max_keys`. 0 = the default, 64 MiB.
    pub max_key_bytes: usize,
    /// A `ratomic_eviction` value (a plain integer so that any value from C
    /// is safe to pass: unknown ones give `RATOMIC_INVALID_ARGUMENT`).
    /// 0 = `RATOMIC_EVICTION_FAIR`, the default.
    pub eviction: u32,
    /// How `ratomic_acquire` waits between tries. NULL = the calling thread
    /// sleeps (`nanosleep`) for the wait. Give one with a `clock` callback
    /// that reads a manual clock, and move that clock forward in it, so
    /// that tests never sleep.
    pub clock_sleep: ratomic_sleep_fn,
    /// NULL (the default) keeps the limiter's keys in this process. A
    /// NUL-terminated path shares them with every process of this host
    /// that builds the same limiter on the same file (Linux): a pre-forking
    /// server's workers share one limit. The file is memory-mapped and
    /// changed only by atomic compare-and-swap, so a process killed at any
    /// instruction leaves it usable. It is created `0600`; a symbolic link,
    /// a file owned by another user or readable by others, a foreign file,
    /// or one in use by another process with a different rule, `max_keys`
    /// or `eviction` gives `RATOMIC_INVALID_ARGUMENT` with the reason (and
    /// the fix) in `ratomic_last_error_message`; a file made for another
    /// limiter that no process has open is made anew. Put it in a runtime
    /// directory the service owns (`$XDG_RUNTIME_DIR`, `/run/<service>/`,
    /// a tmpfs), not a world-writable `/tmp` path. Its size is fixed by
    /// `max_keys` (0 = 131,072 for a shared file: 48 bytes per key for one
    /// limit, at most), and it is sparse: pages get space as keys land; a
    /// call that needs a page on a full file system fails with
    /// `RATOMIC_SHARED_FILE`, changing nothing. Every process must read
    /// the same clock: a `clock` callback gives `RATOMIC_INVALID_ARGUMENT`
    /// (the `_at` calls take their time as given: readings of
    /// `CLOCK_MONOTONIC`). The string is copied; the caller keeps
    /// ownership.
    pub shared_file: *const c_char,
    /// A `ratomic_clock_source` value: which of the library's clocks the
    /// limiter reads when `clock` is NULL. 0 = `RATOMIC_CLOCK_MONOTONIC`,
    /// the default; `RATOMIC_CLOCK_COARSE` is cheaper and coarser. Set
    /// together with a `clock` callback, or to an unknown value, it gives
    /// `RATOMIC_INVALID_ARGUMENT`.
    pub clock_source: u32,
    /// Keys to make room for up front. 0 = none, the default: tables start
    /// small and grow as keys come, moving every key about twice (most of
    /// an insert's time while a limiter fills). Given the number of keys a
    /// limiter will hold, it places them without growing, at the price of
    /// allocating their slots (2 × `reserve_keys` of them, more when few
    /// keys fall to each shard: a margin for their chance spread) when it is
    /// built; the tables never shrink below it. At most `max_keys` (else
    /// `RATOMIC_INVALID_ARGUMENT`); a `shared_file` ignores it (its size is
    /// fixed by `max_keys`).
    pub reserve_keys: usize,
}

/// Where a limiter reads time: the library's monotonic clock or the
/// caller's callback.
#[derive(Clone, Copy, Debug)]
enum Read {
    Monotonic(MonotonicClock),
    Coarse(CoarseClock),
    Callback(unsafe extern "C" fn(*mut c_void) -> u64),
    /// A clock that panics, to prove the panic boundary in unit tests.
    #[cfg(test)]
    Panicking,
}

/// The clock a limiter made from C runs on: core's [`Clock`] over the
/// caller's callbacks (or the library's monotonic clock).
#[derive(Clone, Copy, Debug)]
pub(crate) struct FfiClock {
    read: Read,
    sleep: ratomic_sleep_fn,
    user_data: *mut c_void,
}

// SAFETY: the pointers are the caller's callbacks and their context, which
// `ratomic_clock_fn` and `ratomic_sleep_fn` require to be callable from any
// thread, and `clock_user_data` to stay valid until the limiter is freed.
unsafe impl Send for FfiClock {}
// SAFETY: as above; the clock itself is never mutated after construction.
unsafe impl Sync for FfiClock {}

impl FfiClock {
    /// A clock that panics on every reading, for the unit tests.
    #[cfg(test)]
    pub(crate) fn panicking() -> Self {
        FfiClock { read: Read::Panicking, sleep: None, user_data: std::ptr::null_mut() }
    }
}

impl Clock for FfiClock {
    #[inline]
    fn now(&self) -> u64 {
        match self.read {
            Read::Monotonic(c) => c.now(),
            Read::Coarse(c) => c.now(),
            // SAFETY: the caller gave this function and context in
            // `ratomic_options` and promised both stay valid until free.
            Read::Callback(f) => unsafe { f(self.user_data) },
            #[cfg(test)]
            Read::Panicking => panic!("the test clock panics"),
        }
    }

    /// The timeline: the library's monotonic clock, or the callback's,
    /// identified by `clock_user_data` (by the function when that is
    /// NULL). A `ratomic_stack` accepts members whose clocks agree.
    fn id(&self) -> ClockId {
        match self.read {
            // The coarse clock reads the same timeline.
            Read::Monotonic(_) | Read::Coarse(_) => ClockId::MONOTONIC,
            Read::Callback(f) => {
                let at =
                    if self.user_data.is_null() { f as *const u8 } else { self.user_data.cast::<u8>().cast_const() };
                // SAFETY: a zero-length slice at a non-NULL address reads
                // nothing; `ClockId::of` only takes its address.
                ClockId::of(unsafe { std::slice::from_raw_parts(at, 0) })
            }
            #[cfg(test)]
            Read::Panicking => ClockId::of(self),
        }
    }

    fn sleep(&self, d: Duration) {
        match self.sleep {
            // SAFETY: as for `now`. A wait comes from a decision's
            // nanoseconds, so it fits in a u64.
            Some(f) => unsafe { f(self.user_data, u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)) },
            None => std::thread::sleep(d),
        }
    }
}

/// The options with the defaults filled in: core's store options and the clock.
pub(crate) struct Resolved {
    pub(crate) options: Options,
    pub(crate) clock: FfiClock,
}

impl Resolved {
    /// # Safety
    /// A non-NULL `options` must point to a valid `ratomic_options`.
    pub(crate) unsafe fn from_ptr(options: *const ratomic_options) -> Result<Self, Failure> {
        // Made only when used: the first one in a process calibrates (~1 ms).
        let monotonic = || Read::Monotonic(MonotonicClock::new());
        // SAFETY: guaranteed by the caller.
        let Some(o) = (unsafe { options.as_ref() }) else {
            let clock = FfiClock { read: monotonic(), sleep: None, user_data: std::ptr::null_mut() };
            return Ok(Resolved { options: Options::default(), clock });
        };
        let mut options = Options::default();
        if o.max_keys != 0 {
            options = options.max_keys(o.max_keys);
        }
        if o.max_key_len != 0 {
            options = options.max_key_len(o.max_key_len);
        }
        if o.max_key_bytes != 0 {
            options = options.max_key_bytes(o.max_key_bytes);
        }
        if o.reserve_keys != 0 {
            options = options.reserve_keys(o.reserve_keys);
        }
        options = options.eviction(match o.eviction {
            e if e == ratomic_eviction::RATOMIC_EVICTION_FAIR as u32 => Eviction::Fair,
            e if e == ratomic_eviction::RATOMIC_EVICTION_STRICT as u32 => Eviction::Strict,
            value => {
                return Err(Failure::UnknownValue {
                    name: "eviction",
                    value,
                    accepted: "RATOMIC_EVICTION_FAIR (0) or RATOMIC_EVICTION_STRICT (1)",
                })
            }
        });
        if !o.shared_file.is_null() {
            // SAFETY: the caller promises a NUL-terminated string.
            let bytes = unsafe { std::ffi::CStr::from_ptr(o.shared_file) }.to_bytes();
            options = options.shared_file(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(bytes)));
        }
        let read = match (o.clock, o.clock_source) {
            (Some(f), 0) => Read::Callback(f),
            (None, c) if c == ratomic_clock_source::RATOMIC_CLOCK_MONOTONIC as u32 => monotonic(),
            (None, c) if c == ratomic_clock_source::RATOMIC_CLOCK_COARSE as u32 => Read::Coarse(CoarseClock::new()),
            (Some(_), _) => {
                return Err(Failure::Core(ratomic_core::Error::InvalidArgument {
                    name: "clock_source",
                    value: o.clock_source.to_string(),
                    reason: "a clock callback is given too: set one of `clock` and `clock_source`, not both".into(),
                }))
            }
            (None, value) => {
                return Err(Failure::UnknownValue {
                    name: "clock_source",
                    value,
                    accepted: "RATOMIC_CLOCK_MONOTONIC (0) or RATOMIC_CLOCK_COARSE (1)",
                })
            }
        };
        Ok(Resolved { options, clock: FfiClock { read, sleep: o.clock_sleep, user_data: o.clock_user_data } })
    }
}
