//! The last error of a thread, read from C: its message and, for a batch
//! refused for one of its requests, which request and why.

use std::ffi::c_char;

use crate::boundary::{out_ptr, write_out, Failure};
use crate::result::{self, ratomic_result};

/// Copies the detailed message of the most recent failed call **on this
/// thread** (e.g. `invalid rate "10/x": unknown unit ...`) into `buf` as a
/// NUL-terminated string, truncated to `buf_len - 1` bytes, and writes the
/// message's full length (without the NUL) to `*out_len`, like `snprintf`.
/// The message is empty if no call on this thread has failed. Successful
/// calls do not clear it.
///
/// `buf` may be NULL only when `buf_len` is 0 (to ask for the length).
/// `out_len` may be NULL if the length is not wanted.
///
/// @param[out] buf Receives the message, NUL-terminated and truncated to `buf_len`
///     − 1 bytes; may be NULL when `buf_len` is 0.
/// @param buf_len The size of `buf` in bytes.
/// @param[out] out_len Receives the message's full length in bytes, without the
///     NUL; may be NULL.
/// @return `RATOMIC_OK` on success, or `RATOMIC_NULL_ARGUMENT` when `buf` is NULL
///     with a non-zero `buf_len`.
///
/// @note Ownership: the caller owns `buf`. Thread-safety: each thread has its own
///     last error.
///
/// @warning `buf` must point to `buf_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_last_error_message(
    buf: *mut c_char,
    buf_len: usize,
    out_len: *mut usize,
) -> ratomic_result {
    ffi_boundary!({
        if buf.is_null() && buf_len != 0 {
            return Err(Failure::Null("buf"));
        }
        let message = result::last_error();
        if buf_len > 0 {
            let n = message.len().min(buf_len - 1);
            // SAFETY: the caller guarantees `buf` holds `buf_len` bytes, and n < buf_len.
            unsafe {
                std::ptr::copy_nonoverlapping(message.as_ptr(), buf.cast::<u8>(), n);
                *buf.add(n) = 0;
            }
        }
        if !out_len.is_null() {
            // SAFETY: non-NULL, and the caller guarantees it is writable.
            unsafe { *out_len = message.len() };
        }
        Ok(())
    })
}

/// Writes the first invalid request of the most recent failed call **on
/// this thread**, when that call was a batch that returned
/// `RATOMIC_INVALID_REQUEST`: its index in the batch to `*out_index`, and
/// the code that request alone would have returned (e.g.
/// `RATOMIC_COST_EXCEEDS_LIMIT`, `RATOMIC_KEY_TOO_LONG`,
/// `RATOMIC_NULL_ARGUMENT` for a NULL key) to `*out_code`. Successful calls
/// do not clear it.
///
/// @param[out] out_index Receives the invalid request's index in its batch.
/// @param[out] out_code Receives the code that request alone would have returned.
/// @return `RATOMIC_OK` on success; on an error (nothing written):
/// @retval RATOMIC_NULL_ARGUMENT NULL: out_index, out_code.
/// @retval RATOMIC_INVALID_ARGUMENT When the most recent failed call on this thread
///     was not a batch refused for one of its requests (that failure is then the
///     last error, as for any other call).
///
/// @note Ownership: the caller owns both out-parameters. Thread-safety: each thread
///     has its own last error.
///
/// @warning `out_index` and `out_code` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_last_error_request(
    out_index: *mut usize,
    out_code: *mut ratomic_result,
) -> ratomic_result {
    ffi_boundary!({
        let out_index = out_ptr(out_index, "out_index")?;
        let out_code = out_ptr(out_code, "out_code")?;
        let Some((index, code)) = result::last_error_request() else {
            return Err(Failure::Core(ratomic_core::Error::InvalidArgument {
                name: "last error",
                value: "not RATOMIC_INVALID_REQUEST".to_owned(),
                reason: "the most recent failed call on this thread was not a batch refused for one of its requests"
                    .into(),
            }));
        };
        // SAFETY: both checked non-NULL; writable as the caller guarantees.
        unsafe {
            write_out(out_index, index);
            write_out(out_code, code);
        }
        Ok(())
    })
}
