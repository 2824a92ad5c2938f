//! The panic boundary every `extern "C"` body runs in, and the checks every
//! pointer goes through.

use std::any::Any;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use ratomic_core::Error;

use crate::result::{ratomic_result, set_last_error};

/// Why a call failed, before it becomes a [`ratomic_result`] and this
/// thread's last error.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A required pointer argument (named) was NULL.
    Null(&'static str),
    /// An error from the engine.
    Core(Error),
    /// A C string argument (named) is not valid UTF-8.
    NotUtf8 { name: &'static str, code: ratomic_result },
    /// A caller's entries array holds `have` entries; the answer needs `need`.
    BufferTooSmall { need: usize, have: usize },
    /// A caller's text buffer holds `have` bytes; the text and its NUL need `need`.
    TextBufferTooSmall { need: usize, have: usize },
    /// An enum argument (named) holds a value with no meaning; `accepted`
    /// lists the values it may hold.
    UnknownValue { name: &'static str, value: u32, accepted: &'static str },
    /// Request `index` of a batch failed as `cause` says, found by the C
    /// face before the engine saw the batch (a key C cannot read).
    Request { index: usize, cause: Box<Failure> },
    /// Something this version of the C ABI has no way to express.
    Unsupported(&'static str),
    /// A Redis-backed limiter's error that is not the engine's own.
    Redis(ratomic_redis::Error),
    /// A PostgreSQL-backed limiter's error that is not the engine's own.
    Postgres(ratomic_postgres::Error),
}

impl From<ratomic_postgres::Error> for Failure {
    fn from(e: ratomic_postgres::Error) -> Self {
        match e {
            ratomic_postgres::Error::Invalid(e) => Failure::Core(e),
            e => Failure::Postgres(e),
        }
    }
}

impl From<ratomic_redis::Error> for Failure {
    fn from(e: ratomic_redis::Error) -> Self {
        match e {
            ratomic_redis::Error::Invalid(e) => Failure::Core(e),
            e => Failure::Redis(e),
        }
    }
}

impl From<Error> for Failure {
    #[inline]
    fn from(e: Error) -> Self {
        Failure::Core(e)
    }
}

/// The code of an engine error.
fn code_of(e: &Error) -> ratomic_result {
    use ratomic_result::*;
    match e {
        Error::InvalidRate { .. } => RATOMIC_INVALID_RATE,
        Error::InvalidArgument { .. } => RATOMIC_INVALID_ARGUMENT,
        Error::CostExceedsLimit { .. } => RATOMIC_COST_EXCEEDS_LIMIT,
        Error::KeyTooLong { .. } => RATOMIC_KEY_TOO_LONG,
        Error::InvalidRequest { .. } => RATOMIC_INVALID_REQUEST,
        Error::SharedFile { .. } => RATOMIC_SHARED_FILE,
        _ => RATOMIC_OTHER_ERROR,
    }
}

impl Failure {
    /// Records the detailed message (and, for a batch, the invalid
    /// request) as this thread's last error and returns the code.
    #[cold]
    pub(crate) fn record(self) -> ratomic_result {
        let (code, message, request) = self.describe();
        set_last_error(message, request);
        code
    }

    /// The code, the message, and for a batch the invalid request's index
    /// and own code.
    fn describe(self) -> (ratomic_result, String, Option<(usize, ratomic_result)>) {
        use ratomic_result::*;
        match self {
            Failure::Null(name) => (RATOMIC_NULL_ARGUMENT, format!("{name} must not be NULL"), None),
            Failure::NotUtf8 { name, code } => (code, format!("{name} is not valid UTF-8"), None),
            Failure::BufferTooSmall { need, have } => {
                (RATOMIC_BUFFER_TOO_SMALL, format!("the entries array holds {have}; this limiter needs {need}"), None)
            }
            Failure::TextBufferTooSmall { need, have } => {
                (RATOMIC_BUFFER_TOO_SMALL, format!("buf holds {have} bytes; the text with its NUL needs {need}"), None)
            }
            Failure::UnknownValue { name, value, accepted } => {
                (RATOMIC_INVALID_ARGUMENT, format!("unknown {name}: {value} (expected {accepted})"), None)
            }
            Failure::Unsupported(what) => (RATOMIC_OTHER_ERROR, what.to_owned(), None),
            Failure::Redis(e) => {
                let code = match &e {
                    ratomic_redis::Error::Connection(_) => RATOMIC_BACKEND_UNAVAILABLE,
                    ratomic_redis::Error::Timeout => RATOMIC_BACKEND_TIMEOUT,
                    _ => RATOMIC_BACKEND_ERROR,
                };
                (code, e.to_string(), None)
            }
            Failure::Postgres(e) => {
                let code = match &e {
                    ratomic_postgres::Error::Connection(_) => RATOMIC_BACKEND_UNAVAILABLE,
                    ratomic_postgres::Error::Timeout => RATOMIC_BACKEND_TIMEOUT,
                    _ => RATOMIC_BACKEND_ERROR,
                };
                (code, e.to_string(), None)
            }
            Failure::Request { index, cause } => {
                let (cause, message, _) = cause.describe();
                // Worded as the engine words its own (`Error::InvalidRequest`).
                let message = format!("request {index} of the batch: {message} (nothing in the batch was decided)");
                (RATOMIC_INVALID_REQUEST, message, Some((index, cause)))
            }
            Failure::Core(e) => {
                let request = match &e {
                    Error::InvalidRequest { index, .. } => Some((*index, code_of(e.cause()))),
                    _ => None,
                };
                (code_of(&e), e.to_string(), request)
            }
        }
    }
}

/// Runs `body` so that no panic escapes: `Ok` becomes `RATOMIC_OK`, a
/// failure its code, a panic `RATOMIC_PANIC`.
///
/// The failure becomes a code *inside* the boundary, so what crosses it is
/// a `u32`, not the whole `Result<(), Failure>`: copying that out through
/// memory cost a store-forwarding stall on every call (perf showed a third
/// of the C ABI's overhead there); and `record` itself allocates, so it
/// belongs inside the boundary anyway.
#[inline(always)]
pub(crate) fn run(body: impl FnOnce() -> Result<(), Failure>) -> ratomic_result {
    let guarded = AssertUnwindSafe(|| match body() {
        Ok(()) => ratomic_result::RATOMIC_OK,
        Err(failure) => failure.record(),
    });
    match catch_unwind(guarded) {
        Ok(code) => code,
        Err(payload) => panicked(payload),
    }
}

#[cold]
fn panicked(payload: Box<dyn Any + Send>) -> ratomic_result {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".to_owned());
    // Dropping a panic payload can itself panic; never let that escape.
    let _ = catch_unwind(AssertUnwindSafe(move || drop(payload)));
    set_last_error(format!("internal panic caught at the C boundary: {what}"), None);
    ratomic_result::RATOMIC_PANIC
}

/// Every `extern "C"` body goes through this: `ffi_boundary!({ ...; Ok(()) })`.
///
/// The body captures the arguments by value (`move`): they are pointers
/// and numbers, and captured by reference each was read through a pointer
/// to the caller's stack, from a closure `catch_unwind` reaches through a
/// pointer too (a hot `ratomic_allow_at`: 1.40–1.46× the Rust call before,
/// 1.27× after, `cargo bench -p ratomic-ffi -- hot_key` alternated).
macro_rules! ffi_boundary {
    ($body:block) => {
        $crate::boundary::run(move || -> ::std::result::Result<(), $crate::boundary::Failure> { $body })
    };
}

/// A shared reference from a pointer argument, or `Failure::Null(name)`.
/// (The failure is made only on NULL: `ok_or(Failure::Null(name))` built
/// one on every call and dropped it through an out-of-line
/// `drop_in_place::<Failure>`, seen in `perf annotate` of every C call.)
///
/// # Safety
/// A non-NULL `ptr` must be valid for reads and live for `'a`.
#[inline(always)]
pub(crate) unsafe fn arg_ref<'a, T>(ptr: *const T, name: &'static str) -> Result<&'a T, Failure> {
    // SAFETY: the caller guarantees a non-NULL `ptr` is valid for `'a`.
    match unsafe { ptr.as_ref() } {
        Some(r) => Ok(r),
        None => Err(Failure::Null(name)),
    }
}

/// Checks an out-pointer for NULL (it is written only at the end, on success).
#[inline(always)]
pub(crate) fn out_ptr<T>(ptr: *mut T, name: &'static str) -> Result<*mut T, Failure> {
    if ptr.is_null() {
        Err(Failure::Null(name))
    } else {
        Ok(ptr)
    }
}

/// Writes `value` through an out-pointer already checked by [`out_ptr`].
///
/// # Safety
/// `ptr` must be non-NULL, aligned and valid for writes.
#[inline(always)]
pub(crate) unsafe fn write_out<T>(ptr: *mut T, value: T) {
    // SAFETY: guaranteed by the caller; `T` is `Copy`-like C data, nothing to drop.
    unsafe { ptr.write(value) }
}

/// A key from `(key, key_len)`: any bytes; `key` may be NULL only when
/// `key_len` is 0. A length above `max_key_len` is refused before the
/// pointer is read (so no slice is ever made from a bogus length).
///
/// # Safety
/// A non-NULL `key` must point to `key_len` readable bytes that live for `'a`.
#[inline(always)]
pub(crate) unsafe fn key_arg<'a>(key: *const u8, key_len: usize, max_key_len: usize) -> Result<&'a [u8], Failure> {
    if key_len > max_key_len {
        return Err(Failure::Core(Error::KeyTooLong { len: key_len, max: max_key_len }));
    }
    if key_len == 0 {
        return Ok(&[]);
    }
    if key.is_null() {
        return Err(Failure::Null("key"));
    }
    // SAFETY: non-NULL, and the caller guarantees `key_len` readable bytes;
    // `key_len <= max_key_len < 2^32`, so the length fits in an isize.
    Ok(unsafe { std::slice::from_raw_parts(key, key_len) })
}

/// A caller's `now_ns` argument, if any, checked against `MAX_TIME` here so
/// that the error names the parameter as C wrote it.
#[inline(always)]
pub(crate) fn now_arg(now_ns: Option<u64>) -> Result<Option<u64>, Failure> {
    match now_ns {
        Some(t) if t > ratomic_core::MAX_TIME => Err(Failure::Core(Error::InvalidArgument {
            name: "now_ns",
            value: t.to_string(),
            reason: "must be at most RATOMIC_MAX_TIME, 2^62 − 1 ns (about 146 years after the clock's zero)".into(),
        })),
        now => Ok(now),
    }
}

/// A NUL-terminated UTF-8 string argument.
///
/// # Safety
/// A non-NULL `s` must point to a NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn str_arg<'a>(
    s: *const c_char,
    name: &'static str,
    code: ratomic_result,
) -> Result<&'a str, Failure> {
    if s.is_null() {
        return Err(Failure::Null(name));
    }
    // SAFETY: non-NULL, NUL-terminated and live, as the caller guarantees.
    let c = unsafe { CStr::from_ptr(s) };
    c.to_str().map_err(|_| Failure::NotUtf8 { name, code })
}
