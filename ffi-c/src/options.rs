//! Construction options: the key store's bounds and the clock.

use std::ffi::c_void;

/// A clock: returns the current time in **nanoseconds** on any monotonic
/// timeline of the caller's choice (it need not start at 0). Called with the
/// `clock_user_data` given in `ratomic_options`.
///
/// It is called on the thread of each limiter call, possibly from many
/// threads at once, so it must be thread-safe. It must not unwind (no C++
/// exception, no `longjmp`) out of the call. Readings above 2^63 − 1 are
/// treated as 2^63 − 1.
pub type ratomic_clock_fn = Option<unsafe extern "C" fn(user_data: *mut c_void) -> u64>;

/// Options for the `*_new` / `*_from_rate` constructors. Pass NULL for all
/// defaults; a zeroed struct (`ratomic_options o = {0};`) is also all
/// defaults, field by field.
///
/// Ownership: the caller owns the struct; the constructor copies it (but
/// keeps `clock_user_data` as a pointer: see below).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratomic_options {
    /// Most keys held at once (approximate: enforced per shard). 0 = the
    /// default, 4,194,304.
    pub max_keys: usize,
    /// Longest key accepted, in bytes; longer keys give
    /// `RATOMIC_KEY_TOO_LONG`. 0 = the default, 1024. At most 2^32 − 1.
    pub max_key_len: usize,
    /// Where time comes from for the calls without `_at`. NULL = the
    /// library's monotonic clock (`CLOCK_MONOTONIC`-like, in ns since the
    /// first limiter was made in this process).
    pub clock: ratomic_clock_fn,
    /// Passed to `clock` on every call. Borrowed: it must stay valid until
    /// the limiter is freed (ratomic never frees it).
    pub clock_user_data: *mut c_void,
}

/// A clock callback with its context, kept by a limiter.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ClockSource {
    /// The library's monotonic clock (the limiter's own).
    Monotonic,
    /// The caller's callback.
    Callback { f: unsafe extern "C" fn(*mut c_void) -> u64, user_data: *mut c_void },
    /// A clock that panics, to prove the panic boundary in unit tests.
    #[cfg(test)]
    Panicking,
}

/// The options with the defaults filled in: (max_keys, max_key_len, clock).
pub(crate) struct Resolved {
    pub(crate) max_keys: Option<usize>,
    pub(crate) max_key_len: Option<usize>,
    pub(crate) clock: ClockSource,
}

impl Resolved {
    /// # Safety
    /// A non-NULL `options` must point to a valid `ratomic_options`.
    pub(crate) unsafe fn from_ptr(options: *const ratomic_options) -> Self {
        // SAFETY: guaranteed by the caller.
        match unsafe { options.as_ref() } {
            None => Resolved { max_keys: None, max_key_len: None, clock: ClockSource::Monotonic },
            Some(o) => Resolved {
                max_keys: (o.max_keys != 0).then_some(o.max_keys),
                max_key_len: (o.max_key_len != 0).then_some(o.max_key_len),
                clock: match o.clock {
                    Some(f) => ClockSource::Callback { f, user_data: o.clock_user_data },
                    None => ClockSource::Monotonic,
                },
            },
        }
    }
}
