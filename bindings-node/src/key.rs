//! Keys from JavaScript values: a string (its UTF-8 bytes) or a
//! Buffer/Uint8Array (its bytes).
//!
//! A string is read as UTF-16 and encoded here, not with
//! `napi_get_value_string_utf8`: V8's UTF-8 writer replaces each lone
//! surrogate with U+FFFD, so `'\ud800'`, `'\udbff'` and `'\ufffd'` would
//! share one bucket. A string with a lone surrogate has no UTF-8 form and is
//! a `TypeError` (as Python's `str.encode` refuses it); `'\ufffd'` itself is
//! an ordinary key. Reading UTF-16 and encoding it is also faster than V8's
//! UTF-8 writer (measured: about 10 ns less per call on a short key).

use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::ptr;

use napi::sys;

use crate::error::status;
use crate::error::{JsFailure, Res};

/// UTF-16 units read into the stack: longer strings go to the heap.
const STACK_UNITS: usize = 128;

/// Calls `f` with the bytes of the key `v`; `max_len()` is the longest key
/// the limiter accepts (asked only for strings too long for the stack buffer,
/// so that a huge string is refused before it is copied twice).
///
/// # Safety
/// `env` must be live and `v` a value of the current call.
#[inline(always)]
pub unsafe fn with_key<R>(
    env: sys::napi_env,
    v: sys::napi_value,
    max_len: impl FnOnce() -> usize,
    f: impl FnOnce(&[u8]) -> R,
) -> Res<R> {
    let mut units = MaybeUninit::<[u16; STACK_UNITS]>::uninit();
    let mut len = 0usize;
    // SAFETY: the buffer has STACK_UNITS units; N-API writes at most
    // STACK_UNITS − 1 of them plus a NUL, and sets `len` to how many.
    let s = unsafe { sys::napi_get_value_string_utf16(env, v, units.as_mut_ptr().cast(), STACK_UNITS, &mut len) };
    if s == sys::Status::napi_ok {
        if len < STACK_UNITS - 1 {
            // SAFETY: N-API initialised the first `len` units.
            let units = unsafe { std::slice::from_raw_parts(units.as_ptr().cast::<u16>(), len) };
            // Every unit is at most 3 bytes of UTF-8 (a surrogate pair: 4 bytes for 2 units).
            let mut bytes = MaybeUninit::<[u8; 3 * STACK_UNITS]>::uninit();
            // SAFETY: `bytes` has room for 3 bytes a unit.
            let n = unsafe { encode(units, bytes.as_mut_ptr().cast()) }?;
            // SAFETY: `encode` initialised the first `n` bytes.
            return Ok(f(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<u8>(), n) }));
        }
        // SAFETY: forwarded from the caller; `v` is a string.
        return unsafe { long_string(env, v, max_len()) }.map(|bytes| f(&bytes));
    }
    // SAFETY: forwarded from the caller.
    let bytes = unsafe { byte_view(env, v)? };
    Ok(f(bytes))
}

/// Encodes `units` as UTF-8 at `out` (3 bytes a unit of room); returns the
/// length, or a `TypeError` on a lone surrogate.
///
/// # Safety
/// `out` must be valid for `3 * units.len()` bytes of writes.
#[inline(always)]
unsafe fn encode(units: &[u16], out: *mut u8) -> Res<usize> {
    let mut i = 0;
    // ASCII, the common key, one unit a byte: four units at a time while all
    // four are ASCII, then one at a time.
    while let Some(four) = units.get(i..i + 4) {
        let w = u64::from(four[0]) | u64::from(four[1]) << 16 | u64::from(four[2]) << 32 | u64::from(four[3]) << 48;
        if w & 0xff80_ff80_ff80_ff80 != 0 {
            break;
        }
        // SAFETY: i + 4 <= units.len(): within the caller's room.
        unsafe {
            ptr::copy_nonoverlapping(
                [four[0] as u8, four[1] as u8, four[2] as u8, four[3] as u8].as_ptr(),
                out.add(i),
                4,
            )
        };
        i += 4;
    }
    while i < units.len() && units[i] < 0x80 {
        // SAFETY: i < units.len(), within the caller's room.
        unsafe { out.add(i).write(units[i] as u8) };
        i += 1;
    }
    let mut n = i;
    if i == units.len() {
        return Ok(n);
    }
    for c in char::decode_utf16(units[i..].iter().copied()) {
        let c = c.map_err(|e| lone_surrogate(e.unpaired_surrogate()))?;
        let mut buf = [0u8; 4];
        let s = c.encode_utf8(&mut buf);
        // SAFETY: a char of one unit is at most 3 bytes, of two units 4 bytes:
        // within 3 bytes a unit.
        unsafe { ptr::copy_nonoverlapping(s.as_ptr(), out.add(n), s.len()) };
        n += s.len();
    }
    Ok(n)
}

#[cold]
fn lone_surrogate(unit: u16) -> JsFailure {
    JsFailure::type_error(
        "ERR_RATOMIC_INVALID_KEY",
        format!(
            "key is not valid Unicode: it has a lone surrogate (\\u{unit:04x}), which has no UTF-8 form; \
             pass a well-formed string (see String.prototype.toWellFormed) or a Buffer"
        ),
    )
}

/// A string too long for the stack buffer, as UTF-8 on the heap; refused
/// early when its UTF-16 length alone proves it longer than `max_len` bytes.
///
/// # Safety
/// `env` must be live and `v` a string of the current call.
#[cold]
unsafe fn long_string(env: sys::napi_env, v: sys::napi_value, max_len: usize) -> Res<Vec<u8>> {
    let mut total = 0usize;
    // SAFETY: a null buffer asks only for the length, in units.
    status(unsafe { sys::napi_get_value_string_utf16(env, v, ptr::null_mut(), 0, &mut total) }, "string length")?;
    let mut units = vec![0u16; total + 1];
    let mut len = 0usize;
    status(
        // SAFETY: `units` has total + 1 units.
        unsafe { sys::napi_get_value_string_utf16(env, v, units.as_mut_ptr(), total + 1, &mut len) },
        "string copy",
    )?;
    units.truncate(len);
    if len > max_len {
        // Each unit is at least one byte of UTF-8: too long already. Report the exact length.
        let bytes: usize = char::decode_utf16(units.iter().copied())
            .map(|c| c.map_or(3, char::len_utf8)) // a lone surrogate counts as U+FFFD would
            .sum();
        return Err(ratomic::Error::KeyTooLong { len: bytes, max: max_len }.into());
    }
    let mut bytes = Vec::with_capacity(3 * units.len());
    // SAFETY: the vector has room for 3 bytes a unit; `encode` initialises
    // the first n bytes, and only those are kept.
    unsafe {
        let n = encode(&units, bytes.as_mut_ptr())?;
        bytes.set_len(n);
    }
    Ok(bytes)
}

/// The bytes of a Buffer / Uint8Array (any ArrayBuffer view), or a
/// `TypeError` for any other value.
///
/// # Safety
/// `env` must be live and `v` a value of the current call; the bytes must not
/// be used after JavaScript next runs.
#[cold]
unsafe fn byte_view<'a>(env: sys::napi_env, v: sys::napi_value) -> Res<&'a [u8]> {
    let mut is_buffer = false;
    // SAFETY: v is a live value.
    status(unsafe { sys::napi_is_buffer(env, v, &mut is_buffer) }, "napi_is_buffer")?;
    if !is_buffer {
        // SAFETY: forwarded.
        return Err(unsafe { not_a_key(env, v) });
    }
    let mut data: *mut c_void = ptr::null_mut();
    let mut len = 0usize;
    // SAFETY: v is a Buffer (checked above).
    status(unsafe { sys::napi_get_buffer_info(env, v, &mut data, &mut len) }, "napi_get_buffer_info")?;
    if data.is_null() || len == 0 {
        return Ok(&[]);
    }
    // SAFETY: N-API gives the view's live bytes; no JavaScript runs while the
    // caller borrows them.
    Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) })
}

/// The `TypeError` for a value that is not a key.
///
/// # Safety
/// `env` must be live and `v` a value of the current call.
#[cold]
pub unsafe fn not_a_key(env: sys::napi_env, v: sys::napi_value) -> JsFailure {
    let mut t = 0;
    // SAFETY: v is a live value.
    unsafe { sys::napi_typeof(env, v, &mut t) };
    let got = match t {
        sys::ValueType::napi_undefined => "undefined",
        sys::ValueType::napi_null => "null",
        sys::ValueType::napi_boolean => "a boolean",
        sys::ValueType::napi_number => "a number",
        sys::ValueType::napi_symbol => "a symbol",
        sys::ValueType::napi_function => "a function",
        sys::ValueType::napi_bigint => "a bigint",
        _ => "an object",
    };
    JsFailure::type_error("ERR_RATOMIC_INVALID_KEY", format!("key must be a string or a Buffer, got {got}"))
}

/// Keys read for later use: owned copies (a batch, a stack call).
///
/// # Safety
/// `env` must be live and `v` a value of the current call.
pub unsafe fn owned_key(env: sys::napi_env, v: sys::napi_value, max_len: usize) -> Res<Vec<u8>> {
    // SAFETY: forwarded.
    unsafe { with_key(env, v, || max_len, <[u8]>::to_vec) }
}
