//! The constructors of a single-rule limiter (token bucket, fixed or
//! sliding window) and `ratomic_limiter_free`; the handle itself is in
//! [`handle`](crate::handle).

use std::ffi::c_char;
use std::sync::Arc;

use ratomic_core::{Keyed, Quota, Rate, Rule};

use crate::boundary::{out_ptr, str_arg, Failure};
use crate::handle::{ratomic_limiter, Engine};
use crate::options::{ratomic_options, Resolved};
use crate::result::ratomic_result;
use crate::rule::{ratomic_algorithm, window_rate};

impl ratomic_limiter {
    /// A single-rule limiter on `rule`, handed to C through `out`.
    ///
    /// # Safety
    /// `out` must have passed [`out_ptr`]; `options` as [`Resolved::from_ptr`].
    pub(crate) unsafe fn make_one(
        rule: Rule,
        options: *const ratomic_options,
        out: *mut *mut ratomic_limiter,
    ) -> Result<(), Failure> {
        let name = ratomic_algorithm::of(&rule)?.name();
        // SAFETY: forwarded from the caller.
        let o = unsafe { Resolved::from_ptr(options) }?;
        let keyed = Keyed::with_algorithm(rule, o.clock, o.options)?;
        // SAFETY: forwarded from the caller.
        unsafe { Self::hand_out(Engine::One(Arc::new(keyed)), Box::new([name.to_owned()]), out) };
        Ok(())
    }
}

/// A rate string argument.
///
/// # Safety
/// As [`str_arg`].
unsafe fn rate_arg(rate: *const c_char) -> Result<Rate, Failure> {
    // SAFETY: forwarded from the caller.
    let s = unsafe { str_arg(rate, "rate", ratomic_result::RATOMIC_INVALID_RATE) }?;
    Ok(Rate::parse(s)?)
}

/// Makes a token bucket per key: each key holds up to `capacity` tokens
/// (≥ 1), refilled continuously at `refill_per_sec` tokens per **second**
/// (finite, > 0); a new key starts full. GCRA, exact to the nanosecond: one
/// token refills every `T` = 10^9 / `refill_per_sec` ns (rounded down, at
/// least 1), and `capacity` × `T` must fit in 63 bits of nanoseconds.
///
/// `options` may be NULL (all defaults). On `RATOMIC_OK`, `*out` is a new
/// limiter; on any error `*out` is untouched.
///
/// @param capacity The most tokens a key holds (the burst), at least 1.
/// @param refill_per_sec Tokens refilled per **second**: finite and > 0.
/// @param options Construction options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: out.
/// @retval RATOMIC_INVALID_ARGUMENT Capacity 0; `refill_per_sec` NaN, infinite, ≤
///     0, or so small that one token would take more than 2^63 ns; `capacity` × `T`
///     above 2^63 − 1 ns; an option out of range.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: the caller owns `*out` and must release it with
///     `ratomic_limiter_free`. Thread-safety: safe from any thread.
///
/// @warning `options`, if non-NULL, must point to a valid `ratomic_options`; `out`
///     must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_token_bucket_new(
    capacity: u64,
    refill_per_sec: f64,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        let rule = Rule::token_bucket(Quota::new(capacity, refill_per_sec)?);
        // SAFETY: forwarded from the caller; `out` was checked above.
        unsafe { ratomic_limiter::make_one(rule, options, out) }
    })
}

/// Makes a token bucket per key from a rate string: `"10/s"` is a burst of
/// 10 refilled over one second (`"100/min"`, `"5/2s"`, `"1000/h"`,
/// `"1000/day"`, `"3/250ms"`, `"5 per minute"`). `rate` is NUL-terminated
/// UTF-8, `"<count>/<period>"` or `"<count> per <period>"`: count a whole
/// number from 1 to 2^64 − 1; period an optional whole number and a unit,
/// one of `ms`, `s`/`sec`/`second`, `m`/`min`/`minute`, `h`/`hr`/`hour`,
/// `d`/`day`, `month` (30 days), `year` (360 days), `ns`, `us` (plurals
/// accepted, words in any letter case), at most 2^63 − 1 ns; surrounding
/// whitespace is ignored. These are the rate strings of every ratomic face,
/// and of Python's `limits` (slowapi, Flask-Limiter). One token refills
/// every period / count ns (rounded down, at least 1).
///
/// `options` may be NULL. On `RATOMIC_OK`, `*out` is a new limiter; on any
/// error `*out` is untouched.
///
/// @param rate A rate string, NUL-terminated UTF-8, such as `"10/s"`,
///     `"100/min"`, `"5/2s"` or `"5 per minute"`; only read during the call.
/// @param options Construction options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: rate, out.
/// @retval RATOMIC_INVALID_RATE A malformed or non-UTF-8 rate, a count of 0, a zero
///     or too long period, an unknown unit: the message quotes the input.
/// @retval RATOMIC_INVALID_ARGUMENT An option out of range.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: `rate` is only read during the call; the caller owns `*out` and
///     must release it with `ratomic_limiter_free`. Thread-safety: safe from any
///     thread.
///
/// @warning `rate` must be a NUL-terminated string; `options`, if non-NULL, a valid
///     `ratomic_options`; `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_token_bucket_from_rate(
    rate: *const c_char,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let rule = Rule::token_bucket(Quota::from_rate(unsafe { rate_arg(rate) }?)?);
        // SAFETY: forwarded from the caller; `out` was checked above.
        unsafe { ratomic_limiter::make_one(rule, options, out) }
    })
}

/// Makes a fixed-window limiter: at most `limit` calls (≥ 1) per key in each
/// window of `window_ns` **nanoseconds** (> 0), windows aligned to the
/// clock's zero. Cheapest, but allows up to 2 × `limit` across a boundary.
///
/// Range: a key's state is one 64-bit word holding the window's whole index
/// (up to `RATOMIC_MAX_TIME` / `window_ns`, so that an idle key always reads
/// as idle) and its count, so a window length admits a largest limit: at
/// least one call per nanosecond of window (2^30 − 1 per second), in
/// practice any. `ratomic_window_max_limit` gives it.
///
/// `options` may be NULL. On `RATOMIC_OK`, `*out` is a new limiter; on any
/// error `*out` is untouched.
///
/// @param limit The most calls per key in a window, at least 1 and at most the
///     window's largest (`ratomic_window_max_limit`).
/// @param window_ns The window's length in **nanoseconds**: > 0 and at most 2^63 −
///     1. Windows are aligned to the clock's zero.
/// @param options Construction options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: out.
/// @retval RATOMIC_INVALID_ARGUMENT Limit 0; window 0 or above 2^63 − 1 ns; a limit
///     above the window's largest, named in the message; an option out of range.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: the caller owns `*out` and must release it with
///     `ratomic_limiter_free`. Thread-safety: safe from any thread.
///
/// @warning `options`, if non-NULL, must point to a valid `ratomic_options`; `out`
///     must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_fixed_window_new(
    limit: u64,
    window_ns: u64,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        let rule = Rule::fixed_window(window_rate(limit, window_ns)?)?;
        // SAFETY: forwarded from the caller; `out` was checked above.
        unsafe { ratomic_limiter::make_one(rule, options, out) }
    })
}

/// Makes a fixed-window limiter from a rate string: `"100/min"` is at most
/// 100 calls per key in each minute. `rate` is NUL-terminated UTF-8, in the
/// syntax of `ratomic_token_bucket_from_rate`. The window's range is as in
/// `ratomic_fixed_window_new`.
///
/// On `RATOMIC_OK`, `*out` is a new limiter; on any error `*out` is
/// untouched.
///
/// @param rate A rate string, NUL-terminated UTF-8, such as `"10/s"`,
///     `"100/min"`, `"5/2s"` or `"5 per minute"`; only read during the call.
/// @param options Construction options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: rate, out.
/// @retval RATOMIC_INVALID_RATE A malformed or non-UTF-8 rate, as for
///     `ratomic_token_bucket_from_rate`.
/// @retval RATOMIC_INVALID_ARGUMENT A count above the window's largest limit, named
///     in the message; an option out of range.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: `rate` is only read during the call; the caller owns `*out`
///     (release with `ratomic_limiter_free`). Thread-safety: safe from any thread.
///
/// @warning As `ratomic_token_bucket_from_rate`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_fixed_window_from_rate(
    rate: *const c_char,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let rule = Rule::fixed_window(unsafe { rate_arg(rate) }?)?;
        // SAFETY: forwarded from the caller; `out` was checked above.
        unsafe { ratomic_limiter::make_one(rule, options, out) }
    })
}

/// Makes a sliding-window limiter: at most `limit` calls (≥ 1) per key in
/// any window of `window_ns` **nanoseconds** (> 1), by the sliding-window
/// counter (the previous window's count weighted by its overlap, in exact
/// integer arithmetic).
///
/// Range: a key's state is one 64-bit word holding the window's whole index
/// (up to `RATOMIC_MAX_TIME` / `window_ns`, so that an idle key always reads
/// as idle, however long it waits) and two counts, so a window length
/// admits a largest limit: 32,767 per second, 262,143 per minute, 2,097,151
/// per hour, 8,388,607 per day (a longer window never admits less; a window
/// of 1 ns admits none). `ratomic_window_max_limit` gives it for any window. For a
/// larger limit use a longer window, a fixed window or a token bucket.
///
/// `options` may be NULL. On `RATOMIC_OK`, `*out` is a new limiter; on any
/// error `*out` is untouched.
///
/// @param limit The most calls per key in a window, at least 1 and at most the
///     window's largest (`ratomic_window_max_limit`).
/// @param window_ns The window's length in **nanoseconds**: > 1 and at most 2^63 −
///     1.
/// @param options Construction options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: out.
/// @retval RATOMIC_INVALID_ARGUMENT Limit 0; window 0 or above 2^63 − 1 ns; a limit
///     above the window's largest, named in the message; an option out of range.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: the caller owns `*out` and must release it with
///     `ratomic_limiter_free`. Thread-safety: safe from any thread.
///
/// @warning As `ratomic_fixed_window_new`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_sliding_window_new(
    limit: u64,
    window_ns: u64,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        let rule = Rule::sliding_window(window_rate(limit, window_ns)?)?;
        // SAFETY: forwarded from the caller; `out` was checked above.
        unsafe { ratomic_limiter::make_one(rule, options, out) }
    })
}

/// Makes a sliding-window limiter from a rate string: `"100/min"` is at
/// most 100 calls per key in any minute. `rate` is NUL-terminated UTF-8, in
/// the syntax of `ratomic_token_bucket_from_rate`. The window's range is as
/// in `ratomic_sliding_window_new`: `"40000/s"` and `"40000/2s"` are
/// refused (at most 32,767 for either), `"40000/4s"` is not (65,535).
///
/// On `RATOMIC_OK`, `*out` is a new limiter; on any error `*out` is
/// untouched.
///
/// @param rate A rate string, NUL-terminated UTF-8, such as `"10/s"`,
///     `"100/min"`, `"5/2s"` or `"5 per minute"`; only read during the call.
/// @param options Construction options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: rate, out.
/// @retval RATOMIC_INVALID_RATE A malformed or non-UTF-8 rate, as for
///     `ratomic_token_bucket_from_rate`.
/// @retval RATOMIC_INVALID_ARGUMENT A count above the window's largest limit, named
///     in the message; an option out of range.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: `rate` is only read during the call; the caller owns `*out`
///     (release with `ratomic_limiter_free`). Thread-safety: safe from any thread.
///
/// @warning As `ratomic_token_bucket_from_rate`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_sliding_window_from_rate(
    rate: *const c_char,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let rule = Rule::sliding_window(unsafe { rate_arg(rate) }?)?;
        // SAFETY: forwarded from the caller; `out` was checked above.
        unsafe { ratomic_limiter::make_one(rule, options, out) }
    })
}

/// Releases a limiter and every key it holds. NULL is accepted and does
/// nothing.
///
/// @param limiter The limiter to release, or NULL.
///
/// @note Ownership: takes back the limiter made by a constructor; `limiter` (and
///     every `name` pointer it lent out) is invalid afterwards. Thread-safety: must
///     not race with any other call on the same limiter.
///
/// @warning `limiter` must be NULL or a pointer from a ratomic constructor not yet
///     freed.
#[no_mangle]
pub unsafe extern "C" fn ratomic_limiter_free(limiter: *mut ratomic_limiter) {
    let _ = ffi_boundary!({
        if !limiter.is_null() {
            // SAFETY: made by `Box::into_raw` in `hand_out`, not yet freed,
            // as the caller guarantees.
            drop(unsafe { Box::from_raw(limiter) });
        }
        Ok(())
    });
}
