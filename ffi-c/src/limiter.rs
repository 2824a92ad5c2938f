//! The one opaque handle for every limiter kind, its constructors and `free`.

use std::ffi::{c_char, CString};
use std::time::Duration;

use ratomic_core::{Algorithm, Builder, FixedWindow, Keyed, Limiter, Quota, Rate, SlidingWindow, TokenBucket};

use crate::boundary::{out_ptr, str_arg, write_out, Failure};
use crate::options::{ratomic_options, ClockSource, Resolved};
use crate::result::ratomic_result;

/// Largest time the engine represents: 2^63 − 1 ns (about 292 years).
pub(crate) const MAX_NANOS: u64 = (1 << 63) - 1;

/// A rate limiter of any kind: token bucket, fixed window, sliding window,
/// or several named limits on one key. Opaque: made by a `ratomic_*_new` /
/// `ratomic_*_from_rate` function, used through a `const ratomic_limiter *`,
/// released with `ratomic_limiter_free`.
///
/// Thread-safety: every operation on a limiter is safe to call from many
/// threads at once (it is lock-free inside), except `ratomic_limiter_free`,
/// which must not race with any other use of the same limiter.
pub struct ratomic_limiter {
    pub(crate) kind: Kind,
    pub(crate) clock: ClockSource,
}

impl std::fmt::Debug for ratomic_limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::TokenBucket(_) => "token_bucket",
            Kind::FixedWindow(_) => "fixed_window",
            Kind::SlidingWindow(_) => "sliding_window",
            Kind::Multi(_) => "multi",
        };
        f.debug_struct("ratomic_limiter").field("kind", &kind).field("clock", &self.clock).finish_non_exhaustive()
    }
}

/// What a handle holds.
pub(crate) enum Kind {
    TokenBucket(TokenBucket),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    Multi(Multi),
}

/// Several named limits, with their names as C strings for
/// `ratomic_limit_decision::name`.
pub(crate) struct Multi {
    pub(crate) limiter: Limiter,
    pub(crate) names: Box<[CString]>,
}

/// Applies `body` to whichever keyed limiter `kind` holds, or to the
/// multi-limit limiter in the last arm.
macro_rules! with_kind {
    ($kind:expr, $l:ident => $keyed:expr, $m:ident => $multi:expr) => {
        match $kind {
            $crate::limiter::Kind::TokenBucket($l) => $keyed,
            $crate::limiter::Kind::FixedWindow($l) => $keyed,
            $crate::limiter::Kind::SlidingWindow($l) => $keyed,
            $crate::limiter::Kind::Multi($m) => $multi,
        }
    };
}

impl ratomic_limiter {
    /// The time for the calls without `_at`: the caller's clock if given,
    /// else the library's monotonic clock.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        match self.clock {
            ClockSource::Monotonic => with_kind!(&self.kind, l => l.now(), m => m.limiter.now()),
            // SAFETY: the caller gave this function and context in
            // `ratomic_options` and promised both stay valid until free.
            ClockSource::Callback { f, user_data } => unsafe { f(user_data) }.min(MAX_NANOS),
            #[cfg(test)]
            ClockSource::Panicking => panic!("the test clock panics"),
        }
    }

    /// The longest key this limiter accepts.
    #[inline]
    pub(crate) fn max_key_len(&self) -> usize {
        with_kind!(&self.kind, l => l.max_key_len(), m => m.limiter.max_key_len())
    }

    /// Boxes the limiter and hands it to C through `out`.
    ///
    /// # Safety
    /// `out` must have passed [`out_ptr`].
    pub(crate) unsafe fn hand_out(kind: Kind, clock: ClockSource, out: *mut *mut ratomic_limiter) {
        let handle = Box::into_raw(Box::new(ratomic_limiter { kind, clock }));
        // SAFETY: `out` is non-NULL and writable, as the caller checked.
        unsafe { write_out(out, handle) };
    }
}

/// Builds a keyed limiter with the store options the caller gave.
pub(crate) fn build_keyed<A: Algorithm>(builder: Builder<A>, o: &Resolved) -> Result<Keyed<A>, Failure> {
    let builder = match o.max_keys {
        Some(n) => builder.max_keys(n),
        None => builder,
    };
    let builder = match o.max_key_len {
        Some(n) => builder.max_key_len(n),
        None => builder,
    };
    Ok(builder.build()?)
}

/// A window rate from a count and a length in nanoseconds.
fn window_rate(limit: u64, window_ns: u64) -> Result<Rate, Failure> {
    Ok(Rate::new(limit, Duration::from_nanos(window_ns))?)
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
/// (finite, > 0); a new key starts full. GCRA, exact to the nanosecond.
///
/// `options` may be NULL (all defaults). On `RATOMIC_OK`, `*out` is a new
/// limiter.
///
/// Errors: `RATOMIC_NULL_ARGUMENT` (out), `RATOMIC_INVALID_ARGUMENT`
/// (capacity 0, `refill_per_sec` NaN, infinite, ≤ 0 or too small, an option
/// out of range).
///
/// Ownership: the caller owns `*out` and must release it with
/// `ratomic_limiter_free`. Thread-safety: safe from any thread.
///
/// # Safety
/// `options`, if non-NULL, must point to a valid `ratomic_options`; `out`
/// must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_token_bucket_new(
    capacity: u64,
    refill_per_sec: f64,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let o = unsafe { Resolved::from_ptr(options) };
        let limiter = build_keyed(TokenBucket::builder(Quota::new(capacity, refill_per_sec)?), &o)?;
        // SAFETY: `out` was checked above.
        unsafe { ratomic_limiter::hand_out(Kind::TokenBucket(limiter), o.clock, out) };
        Ok(())
    })
}

/// Makes a token bucket per key from a rate string: `"10/s"` is a burst of
/// 10 refilled over one second (`"100/min"`, `"5/2s"`, `"1000/h"`,
/// `"1000/day"`, `"3/250ms"`). `rate` is NUL-terminated UTF-8.
///
/// `options` may be NULL. On `RATOMIC_OK`, `*out` is a new limiter.
///
/// Errors: `RATOMIC_NULL_ARGUMENT` (rate, out), `RATOMIC_INVALID_RATE`
/// (malformed or non-UTF-8 rate), `RATOMIC_INVALID_ARGUMENT` (an option).
///
/// Ownership: `rate` is only read during the call; the caller owns `*out`
/// and must release it with `ratomic_limiter_free`. Thread-safety: safe from
/// any thread.
///
/// # Safety
/// `rate` must be a NUL-terminated string; `options`, if non-NULL, a valid
/// `ratomic_options`; `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_token_bucket_from_rate(
    rate: *const c_char,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let rate = unsafe { rate_arg(rate) }?;
        // SAFETY: forwarded from the caller.
        let o = unsafe { Resolved::from_ptr(options) };
        let limiter = build_keyed(TokenBucket::builder(Quota::from_rate(rate)?), &o)?;
        // SAFETY: `out` was checked above.
        unsafe { ratomic_limiter::hand_out(Kind::TokenBucket(limiter), o.clock, out) };
        Ok(())
    })
}

/// Makes a fixed-window limiter: at most `limit` calls (≥ 1) per key in each
/// window of `window_ns` **nanoseconds** (> 0), windows aligned to the
/// clock's zero. Cheapest, but allows up to 2 × `limit` across a boundary.
///
/// `options` may be NULL. On `RATOMIC_OK`, `*out` is a new limiter.
///
/// Errors: `RATOMIC_NULL_ARGUMENT` (out), `RATOMIC_INVALID_ARGUMENT` (limit
/// 0, window 0 or above 2^63 − 1 ns, an option).
///
/// Ownership: the caller owns `*out` and must release it with
/// `ratomic_limiter_free`. Thread-safety: safe from any thread.
///
/// # Safety
/// `options`, if non-NULL, must point to a valid `ratomic_options`; `out`
/// must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_fixed_window_new(
    limit: u64,
    window_ns: u64,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let o = unsafe { Resolved::from_ptr(options) };
        let limiter = build_keyed(FixedWindow::builder(window_rate(limit, window_ns)?)?, &o)?;
        // SAFETY: `out` was checked above.
        unsafe { ratomic_limiter::hand_out(Kind::FixedWindow(limiter), o.clock, out) };
        Ok(())
    })
}

/// Makes a fixed-window limiter from a rate string: `"100/min"` is at most
/// 100 calls per key in each minute. `rate` is NUL-terminated UTF-8.
///
/// Errors: `RATOMIC_NULL_ARGUMENT` (rate, out), `RATOMIC_INVALID_RATE`,
/// `RATOMIC_INVALID_ARGUMENT` (an option).
///
/// Ownership: `rate` is only read during the call; the caller owns `*out`
/// (release with `ratomic_limiter_free`). Thread-safety: safe from any
/// thread.
///
/// # Safety
/// As `ratomic_token_bucket_from_rate`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_fixed_window_from_rate(
    rate: *const c_char,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let rate = unsafe { rate_arg(rate) }?;
        // SAFETY: forwarded from the caller.
        let o = unsafe { Resolved::from_ptr(options) };
        let limiter = build_keyed(FixedWindow::builder(rate)?, &o)?;
        // SAFETY: `out` was checked above.
        unsafe { ratomic_limiter::hand_out(Kind::FixedWindow(limiter), o.clock, out) };
        Ok(())
    })
}

/// Makes a sliding-window limiter: at most `limit` calls (≥ 1) per key in
/// any window of `window_ns` **nanoseconds** (> 0), by the sliding-window
/// counter (the previous window's count weighted by its overlap).
///
/// `options` may be NULL. On `RATOMIC_OK`, `*out` is a new limiter.
///
/// Errors: `RATOMIC_NULL_ARGUMENT` (out), `RATOMIC_INVALID_ARGUMENT` (limit
/// 0, window 0 or above 2^63 − 1 ns, an option).
///
/// Ownership: the caller owns `*out` and must release it with
/// `ratomic_limiter_free`. Thread-safety: safe from any thread.
///
/// # Safety
/// As `ratomic_fixed_window_new`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_sliding_window_new(
    limit: u64,
    window_ns: u64,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let o = unsafe { Resolved::from_ptr(options) };
        let limiter = build_keyed(SlidingWindow::builder(window_rate(limit, window_ns)?)?, &o)?;
        // SAFETY: `out` was checked above.
        unsafe { ratomic_limiter::hand_out(Kind::SlidingWindow(limiter), o.clock, out) };
        Ok(())
    })
}

/// Makes a sliding-window limiter from a rate string: `"100/min"` is at
/// most 100 calls per key in any minute. `rate` is NUL-terminated UTF-8.
///
/// Errors: `RATOMIC_NULL_ARGUMENT` (rate, out), `RATOMIC_INVALID_RATE`,
/// `RATOMIC_INVALID_ARGUMENT` (an option).
///
/// Ownership: `rate` is only read during the call; the caller owns `*out`
/// (release with `ratomic_limiter_free`). Thread-safety: safe from any
/// thread.
///
/// # Safety
/// As `ratomic_token_bucket_from_rate`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_sliding_window_from_rate(
    rate: *const c_char,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let rate = unsafe { rate_arg(rate) }?;
        // SAFETY: forwarded from the caller.
        let o = unsafe { Resolved::from_ptr(options) };
        let limiter = build_keyed(SlidingWindow::builder(rate)?, &o)?;
        // SAFETY: `out` was checked above.
        unsafe { ratomic_limiter::hand_out(Kind::SlidingWindow(limiter), o.clock, out) };
        Ok(())
    })
}

/// Releases a limiter and every key it holds. NULL is accepted and does
/// nothing.
///
/// Ownership: takes back the limiter made by a constructor; `limiter` (and
/// every `name` pointer it lent out) is invalid afterwards. Thread-safety:
/// must not race with any other call on the same limiter.
///
/// # Safety
/// `limiter` must be NULL or a pointer from a ratomic constructor not yet
/// freed.
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
