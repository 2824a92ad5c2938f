//! `ratomic_result`: what every function returns, its messages, and the
//! store of the detailed message of the last failed call on a thread (read
//! from C through [`last_error`](crate::last_error)).

use std::cell::{Cell, RefCell};
use std::ffi::c_char;

/// What a ratomic function reports. `RATOMIC_OK` (0) is success; every other
/// value is an error, and the call changed no state and wrote no
/// out-parameter.
///
/// The numbers are part of the ABI: they are never renumbered and a number
/// that is retired is never reused. New codes may be added, so treat an
/// unknown code as a generic error (`ratomic_result_message` names it).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ratomic_result {
    /// Success.
    RATOMIC_OK = 0,
    /// A required pointer argument was NULL.
    RATOMIC_NULL_ARGUMENT = 1,
    /// A rate string (e.g. "10/s") could not be parsed, or was not UTF-8.
    RATOMIC_INVALID_RATE = 2,
    /// A numeric or named argument is out of range: a NaN, infinite, zero
    /// or negative rate, a zero window or capacity, a window limit above
    /// the window's largest, an unknown algorithm, an empty or duplicate
    /// limit name, an option out of range, or a time (an `_at` argument or
    /// a clock reading) past `RATOMIC_MAX_TIME`.
    RATOMIC_INVALID_ARGUMENT = 3,
    /// The cost asked for is above the limit: that call could never pass.
    RATOMIC_COST_EXCEEDS_LIMIT = 4,
    /// The key is longer than the limiter's `max_key_len`.
    RATOMIC_KEY_TOO_LONG = 5,
    /// A caller-supplied array is too small for the answer (see
    /// `ratomic_limit_count`).
    RATOMIC_BUFFER_TOO_SMALL = 6,
    /// A Rust panic was caught at the boundary instead of unwinding into C:
    /// a bug in ratomic. The limiter is still usable; please report it.
    RATOMIC_PANIC = 7,
    /// An error this version of the C ABI has no specific code for.
    RATOMIC_OTHER_ERROR = 8,
    /// A request of a batch (`ratomic_allow_many`) is invalid: the whole
    /// batch was refused and nothing changed. `ratomic_last_error_request`
    /// gives the first invalid request's index and its own code.
    RATOMIC_INVALID_REQUEST = 9,
    /// A Redis- or PostgreSQL-backed limiter cannot reach its server: a bad
    /// URL or conninfo, a refused or broken connection.
    RATOMIC_BACKEND_UNAVAILABLE = 10,
    /// A Redis- or PostgreSQL-backed limiter's call took longer than its
    /// timeout.
    RATOMIC_BACKEND_TIMEOUT = 11,
    /// A Redis- or PostgreSQL-backed limiter's server answered an error, or
    /// something that is not its answer.
    RATOMIC_BACKEND_ERROR = 12,
    /// A limiter on a shared file (`ratomic_options.shared_file`) could not
    /// serve the call: the file's file system is full (a new key needs
    /// space), or another process holds the key and does not let go.
    /// Nothing changed; `ratomic_last_error_message` says what to do.
    RATOMIC_SHARED_FILE = 13,
}

impl ratomic_result {
    /// The static, NUL-terminated message for `code`.
    pub(crate) fn message(code: u32) -> &'static std::ffi::CStr {
        use ratomic_result::*;
        const CODES: [ratomic_result; 14] = [
            RATOMIC_OK,
            RATOMIC_NULL_ARGUMENT,
            RATOMIC_INVALID_RATE,
            RATOMIC_INVALID_ARGUMENT,
            RATOMIC_COST_EXCEEDS_LIMIT,
            RATOMIC_KEY_TOO_LONG,
            RATOMIC_BUFFER_TOO_SMALL,
            RATOMIC_PANIC,
            RATOMIC_OTHER_ERROR,
            RATOMIC_INVALID_REQUEST,
            RATOMIC_BACKEND_UNAVAILABLE,
            RATOMIC_BACKEND_TIMEOUT,
            RATOMIC_BACKEND_ERROR,
            RATOMIC_SHARED_FILE,
        ];
        match CODES.iter().find(|c| **c as u32 == code) {
            Some(RATOMIC_OK) => c"ok",
            Some(RATOMIC_NULL_ARGUMENT) => c"a required pointer argument was NULL",
            Some(RATOMIC_INVALID_RATE) => {
                c"invalid rate string (expected \"<count>/<period>\" or \"<count> per <period>\", e.g. \"10/s\", \"100/min\", \"5 per minute\")"
            }
            Some(RATOMIC_INVALID_ARGUMENT) => {
                c"invalid argument (NaN, infinite, zero or negative rate, zero window, limit too large for its window, bad name or option, time past RATOMIC_MAX_TIME)"
            }
            Some(RATOMIC_COST_EXCEEDS_LIMIT) => c"cost exceeds the limit: this call could never be allowed",
            Some(RATOMIC_KEY_TOO_LONG) => c"key is longer than the limiter's max_key_len",
            Some(RATOMIC_BUFFER_TOO_SMALL) => c"the caller's array is too small for the answer",
            Some(RATOMIC_PANIC) => c"internal panic caught at the C boundary (a bug in ratomic; please report it)",
            Some(RATOMIC_OTHER_ERROR) => {
                c"an error with no specific code in this version (see ratomic_last_error_message)"
            }
            Some(RATOMIC_INVALID_REQUEST) => {
                c"a request of the batch is invalid; nothing was decided (see ratomic_last_error_request)"
            }
            Some(RATOMIC_BACKEND_UNAVAILABLE) => c"cannot reach the Redis or PostgreSQL server (bad URL or conninfo, refused or broken connection)",
            Some(RATOMIC_BACKEND_TIMEOUT) => c"the Redis or PostgreSQL call timed out: the server is slow, overloaded or unreachable (if only slow, raise the limiter's timeout)",
            Some(RATOMIC_BACKEND_ERROR) => c"the Redis or PostgreSQL server answered an error, or something that is not its answer",
            Some(RATOMIC_SHARED_FILE) => {
                c"the shared file could not serve the call: its file system is full, or another process holds the key"
            }
            None => c"unknown ratomic_result code",
        }
    }
}

/// A static, NUL-terminated English message for a `ratomic_result` code;
/// unknown codes give "unknown ratomic_result code". Never returns NULL.
///
/// @param code A `ratomic_result` value.
/// @return The message: static, NUL-terminated, never NULL; do not free it.
///
/// @note Ownership: the string is static; do not free it. Thread-safety: safe from
///     any thread.
#[no_mangle]
pub extern "C" fn ratomic_result_message(code: u32) -> *const c_char {
    ratomic_result::message(code).as_ptr()
}

/// The version of the library (e.g. "0.1.0"), as a static NUL-terminated
/// string; compare with the header's `RATOMIC_VERSION_*` macros to detect
/// a header/library mismatch.
///
/// @return The version string: static, NUL-terminated; do not free it.
///
/// @note Ownership: static; do not free. Thread-safety: safe from any thread.
#[no_mangle]
pub extern "C" fn ratomic_version() -> *const c_char {
    const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
    /// The invalid request of the last failed call, if it was a batch's.
    static LAST_REQUEST: Cell<Option<(usize, ratomic_result)>> = const { Cell::new(None) };
}

/// Records `message` (and a batch's invalid request) as this thread's last error.
pub(crate) fn set_last_error(message: String, request: Option<(usize, ratomic_result)>) {
    // A thread being torn down has no slot left; the code alone must do.
    let _ = LAST_REQUEST.try_with(|slot| slot.set(request));
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = message;
        }
    });
}

/// This thread's last error message (empty if no call on it has failed).
pub(crate) fn last_error() -> String {
    LAST_ERROR.try_with(|slot| slot.borrow().clone()).unwrap_or_default()
}

/// The invalid request (index, code) of this thread's last error, when that
/// failure was a batch refused for one of its requests.
pub(crate) fn last_error_request() -> Option<(usize, ratomic_result)> {
    LAST_REQUEST.try_with(Cell::get).ok().flatten()
}
