//! One token bucket for all traffic, with no key: core's
//! `DirectTokenBucket` behind its own handle (`ratomic_direct`), for a
//! global limit (all traffic to a backend, one outbound API quota).
//!
//! Its own handle rather than a `ratomic_limiter` whose key arguments are
//! ignored: its calls take no key (as in Rust and Python), so no call can
//! pretend to limit per key, and passing it where a keyed limiter is meant
//! (or the reverse) is a compile error. A stack takes it as a member
//! through `ratomic_stack_new_members`.

use std::ffi::c_char;
use std::sync::Arc;
use std::time::Duration;

use ratomic_core::{check_time, DirectTokenBucket, Error, Quota, Rate};

use crate::boundary::{arg_ref, out_ptr, str_arg, write_out, Failure};
use crate::decision::ratomic_decision;
use crate::ops::RATOMIC_NO_TIMEOUT;
use crate::options::{ratomic_options, FfiClock, Resolved};
use crate::result::ratomic_result;
use crate::rule::{ratomic_algorithm, ratomic_limit_info};

/// One token bucket for all traffic: no key, no lookup, one 64-bit state
/// word. For a global limit (all traffic to a backend, one outbound API
/// quota). Opaque: made by `ratomic_direct_token_bucket_new` or
/// `ratomic_direct_token_bucket_from_rate`, used through a
/// `const ratomic_direct *` with the `ratomic_direct_*` calls (which take
/// no key), released with `ratomic_direct_free`. A stack takes it as a
/// member through `ratomic_stack_new_members` (its key there is ignored).
///
/// Thread-safety: every operation is safe to call from many threads at once
/// (lock-free inside), except `ratomic_direct_free`, which must not race
/// with any other use of the same bucket.
pub struct ratomic_direct {
    /// Shared, so a `ratomic_stack` can hold it past the handle's own free.
    pub(crate) bucket: Arc<DirectTokenBucket<FfiClock>>,
}

impl std::fmt::Debug for ratomic_direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ratomic_direct").field("quota", &self.bucket.quota()).finish_non_exhaustive()
    }
}

impl ratomic_direct {
    /// What `ratomic_direct_describe` writes for this bucket.
    pub(crate) fn describe(&self) -> String {
        self.bucket.algorithm().to_string()
    }
}

/// A full bucket for `quota` on the clock of `options`, handed to C
/// through `out`.
///
/// # Safety
/// `out` must have passed [`out_ptr`]; `options` as [`Resolved::from_ptr`].
unsafe fn make(quota: Quota, options: *const ratomic_options, out: *mut *mut ratomic_direct) -> Result<(), Failure> {
    // SAFETY: forwarded from the caller.
    let o = unsafe { Resolved::from_ptr(options) }?;
    // SAFETY: as above; `options` is NULL or valid.
    if let Some(o) = unsafe { options.as_ref() } {
        if !o.shared_file.is_null() {
            // SAFETY: the caller promises a NUL-terminated string.
            let path = unsafe { std::ffi::CStr::from_ptr(o.shared_file) }.to_string_lossy();
            return Err(Failure::Core(Error::InvalidArgument {
                name: "shared_file",
                value: format!("{path:?}"),
                reason: "a direct bucket keeps its state in this process and cannot be shared through a file \
                         (for one limit shared by processes, use a keyed token bucket with one constant key)"
                    .into(),
            }));
        }
    }
    let bucket = Arc::new(DirectTokenBucket::with_clock(quota, o.clock));
    let handle = Box::into_raw(Box::new(ratomic_direct { bucket }));
    // SAFETY: `out` is non-NULL and writable, as the caller checked.
    unsafe { write_out(out, handle) };
    Ok(())
}

/// Makes one token bucket for all traffic (no key): it holds up to
/// `capacity` tokens (≥ 1), refilled continuously at `refill_per_sec`
/// tokens per **second** (finite, > 0), and starts full. The same GCRA as
/// `ratomic_token_bucket_new`, exact to the nanosecond: one token refills
/// every `T` = 10^9 / `refill_per_sec` ns (rounded down, at least 1), and
/// `capacity` × `T` must fit in 63 bits of nanoseconds.
///
/// `options` may be NULL (the library's monotonic clock). Only its clock
/// fields are used (`clock`, `clock_user_data`, `clock_sleep`, `clock_source`); the key
/// store's fields do not apply to a bucket without keys and are ignored,
/// except that an unknown `eviction` is still refused as by every
/// constructor; a `shared_file` is refused: this bucket lives in this
/// process. On `RATOMIC_OK`, `*out` is a new bucket; on any error `*out` is
/// untouched.
///
/// @param capacity The most tokens a key holds (the burst), at least 1.
/// @param refill_per_sec Tokens refilled per **second**: finite and > 0.
/// @param options Options, or NULL for the library's monotonic clock: only the
///     clock fields apply; a `shared_file` is refused.
/// @param[out] out Receives the new bucket, only on `RATOMIC_OK`; release it with
///     `ratomic_direct_free`.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: out.
/// @retval RATOMIC_INVALID_ARGUMENT Capacity 0; `refill_per_sec` NaN, infinite, ≤
///     0, or so small that one token would take more than 2^63 ns; `capacity` × `T`
///     above 2^63 − 1 ns; an unknown `eviction`; a `shared_file`.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: the caller owns `*out` and must release it with
///     `ratomic_direct_free`. Thread-safety: safe from any thread.
///
/// @warning `options`, if non-NULL, must point to a valid `ratomic_options`; `out`
///     must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_token_bucket_new(
    capacity: u64,
    refill_per_sec: f64,
    options: *const ratomic_options,
    out: *mut *mut ratomic_direct,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        let quota = Quota::new(capacity, refill_per_sec)?;
        // SAFETY: forwarded from the caller; `out` was checked above.
        unsafe { make(quota, options, out) }
    })
}

/// Makes one token bucket for all traffic from a rate string: `"1000/s"` is
/// a burst of 1000 refilled over one second. `rate` is NUL-terminated
/// UTF-8, in the syntax of `ratomic_token_bucket_from_rate`. `options` as
/// in `ratomic_direct_token_bucket_new`. On `RATOMIC_OK`, `*out` is a new
/// bucket; on any error `*out` is untouched.
///
/// @param rate A rate string, NUL-terminated UTF-8, such as `"10/s"`,
///     `"100/min"`, `"5/2s"` or `"5 per minute"`; only read during the call.
/// @param options Options, or NULL for the library's monotonic clock: only the
///     clock fields apply; a `shared_file` is refused.
/// @param[out] out Receives the new bucket, only on `RATOMIC_OK`; release it with
///     `ratomic_direct_free`.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: rate, out.
/// @retval RATOMIC_INVALID_RATE A malformed or non-UTF-8 rate, as for
///     `ratomic_token_bucket_from_rate`: the message quotes the input.
/// @retval RATOMIC_INVALID_ARGUMENT An unknown `eviction`; a `shared_file`.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: `rate` is only read during the call; the caller owns `*out` and
///     must release it with `ratomic_direct_free`. Thread-safety: safe from any
///     thread.
///
/// @warning `rate` must be a NUL-terminated string; `options`, if non-NULL, a valid
///     `ratomic_options`; `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_token_bucket_from_rate(
    rate: *const c_char,
    options: *const ratomic_options,
    out: *mut *mut ratomic_direct,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let rate = unsafe { str_arg(rate, "rate", ratomic_result::RATOMIC_INVALID_RATE) }?;
        let quota = Quota::from_rate(Rate::parse(rate)?)?;
        // SAFETY: forwarded from the caller; `out` was checked above.
        unsafe { make(quota, options, out) }
    })
}

/// Releases a direct bucket (a stack that holds it as a member keeps it
/// alive until the stack is freed). NULL is accepted and does nothing.
///
/// @param direct The bucket to release, or NULL.
///
/// @warning `direct` must be NULL or a pointer from a `ratomic_direct_*`
///     constructor not yet freed, and no other call may use it at the same time.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_free(direct: *mut ratomic_direct) {
    let _ = ffi_boundary!({
        if !direct.is_null() {
            // SAFETY: made by `Box::into_raw` in `make`, not yet freed, as
            // the caller guarantees.
            drop(unsafe { Box::from_raw(direct) });
        }
        Ok(())
    });
}

/// Allow (`CONSUME`) or peek, at `now_ns` (`AT`) or at the bucket's clock.
///
/// Generic, so that each exported function has its own panic boundary
/// which the compiler inlines into it (see `ops::decide`).
///
/// # Safety
/// As the public functions that call it.
#[inline(always)]
unsafe fn decide<const CONSUME: bool, const AT: bool>(
    direct: *const ratomic_direct,
    cost: u64,
    now_ns: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    let (now, consume) = (if AT { Some(now_ns) } else { None }, CONSUME);
    ffi_boundary!({
        // SAFETY: the caller passes a live bucket or NULL.
        let b = &unsafe { arg_ref(direct, "direct") }?.bucket;
        let decision = out_ptr(decision, "decision")?;
        let now = crate::boundary::now_arg(now)?.unwrap_or_else(|| b.now());
        let d = if consume { b.allow_at(cost, now) } else { b.peek_at(cost, now) }?;
        // SAFETY: checked non-NULL above; the caller guarantees it is writable.
        unsafe { ratomic_decision::write(decision, d) };
        Ok(())
    })
}

/// Takes `cost` tokens from the bucket if it has that many, and writes the
/// decision to `*decision`: the token bucket of `ratomic_token_bucket_new`
/// (GCRA), with no key. A denial
/// is `RATOMIC_OK` with `decision->allowed == false` and a positive
/// `retry_after_ns`; it consumes nothing. Cost 0 answers like a peek.
///
/// @param direct The direct bucket, borrowed for the call.
/// @param cost Tokens to take, at most the capacity; 0 answers like a peek.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; on an error (no state changed, `*decision`
///     untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: direct, decision.
/// @retval RATOMIC_COST_EXCEEDS_LIMIT A cost above the capacity could never pass.
/// @retval RATOMIC_INVALID_ARGUMENT The clock read past `RATOMIC_MAX_TIME`.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: borrows `direct` for the call; the caller owns `*decision`.
///     Thread-safety: safe to call from many threads at once; no call ever grants
///     more than the bucket holds plus what has refilled.
///
/// @warning `direct` must be a live bucket; `decision` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_allow(
    direct: *const ratomic_direct,
    cost: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide::<true, false>(direct, cost, 0, decision) }
}

/// `ratomic_direct_allow` at time `now_ns` (**nanoseconds** on the same
/// timeline as the bucket's clock: the callback's, or the one
/// `ratomic_direct_now` reads; at most `RATOMIC_MAX_TIME`). Time that steps
/// back never grants more: pass non-decreasing times.
///
/// @param direct The direct bucket, borrowed for the call.
/// @param cost Tokens to take, at most the capacity; 0 answers like a peek.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_direct_allow`;
///     `RATOMIC_INVALID_ARGUMENT` when `now_ns` is above `RATOMIC_MAX_TIME`.
///
/// @warning As `ratomic_direct_allow`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_allow_at(
    direct: *const ratomic_direct,
    cost: u64,
    now_ns: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide::<true, true>(direct, cost, now_ns, decision) }
}

/// What `ratomic_direct_allow` with this `cost` would answer, changing
/// nothing: `remaining` is what would be left after that cost; cost 0
/// reports the bucket as it is.
///
/// @param direct The direct bucket, borrowed for the call.
/// @param cost Tokens to take, at most the capacity; 0 answers like a peek.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; errors, ownership and thread-safety as
///     `ratomic_direct_allow`.
///
/// @warning As `ratomic_direct_allow`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_peek(
    direct: *const ratomic_direct,
    cost: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide::<false, false>(direct, cost, 0, decision) }
}

/// `ratomic_direct_peek` at time `now_ns` (nanoseconds; see
///     `ratomic_direct_allow_at`).
///
/// @param direct The direct bucket, borrowed for the call.
/// @param cost Tokens to take, at most the capacity; 0 answers like a peek.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_direct_allow_at`.
///
/// @warning As `ratomic_direct_allow`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_peek_at(
    direct: *const ratomic_direct,
    cost: u64,
    now_ns: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide::<false, true>(direct, cost, now_ns, decision) }
}

/// Refund at `now` or at the bucket's clock.
///
/// # Safety
/// As the public functions that call it.
unsafe fn refund(direct: *const ratomic_direct, tokens: u64, now: Option<u64>) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live bucket or NULL.
        let b = &unsafe { arg_ref(direct, "direct") }?.bucket;
        b.refund_at(tokens, crate::boundary::now_arg(now)?.unwrap_or_else(|| b.now()))?;
        Ok(())
    })
}

/// Gives `tokens` back to the bucket (work admitted but not done). It never
/// fills above its capacity: refunding a full bucket does nothing.
///
/// @param direct The direct bucket, borrowed for the call.
/// @param tokens Tokens (or calls) to give back; a key never fills above its limit.
/// @return `RATOMIC_OK` on success; on an error (nothing changed):
/// @retval RATOMIC_NULL_ARGUMENT NULL: direct.
/// @retval RATOMIC_INVALID_ARGUMENT The clock read past `RATOMIC_MAX_TIME`.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: borrows `direct` for the call. Thread-safety: safe from many
///     threads at once.
///
/// @warning `direct` must be a live bucket.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_refund(direct: *const ratomic_direct, tokens: u64) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { refund(direct, tokens, None) }
}

/// `ratomic_direct_refund` at time `now_ns` (nanoseconds; see
/// `ratomic_direct_allow_at`).
///
/// @param direct The direct bucket, borrowed for the call.
/// @param tokens Tokens (or calls) to give back; a key never fills above its limit.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_direct_refund`;
///     `RATOMIC_INVALID_ARGUMENT` when `now_ns` is above `RATOMIC_MAX_TIME`.
///
/// @warning As `ratomic_direct_refund`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_refund_at(
    direct: *const ratomic_direct,
    tokens: u64,
    now_ns: u64,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { refund(direct, tokens, Some(now_ns)) }
}

/// Makes the bucket full again, for everyone. It reads no clock (a full
/// bucket is full at any time), so there is no `_at` form.
///
/// @param direct The direct bucket, borrowed for the call.
/// @return `RATOMIC_OK` on success; on an error (nothing changed):
/// @retval RATOMIC_NULL_ARGUMENT NULL: direct.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: borrows `direct` for the call. Thread-safety: safe from many
///     threads at once.
///
/// @warning `direct` must be a live bucket.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_reset(direct: *const ratomic_direct) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live bucket or NULL.
        unsafe { arg_ref(direct, "direct") }?.bucket.reset();
        Ok(())
    })
}

/// Takes `cost` tokens, waiting out denials, as `ratomic_acquire` does for
/// a key: tries as `ratomic_direct_allow` does and, while it is denied,
/// waits the denial's `retry_after_ns` (through the options' `clock_sleep`,
/// or by sleeping the thread) and tries again. Writes the allowing decision
/// or, once the next wait would take the total waited past `timeout_ns`,
/// that denial without waiting for it (a timeout is a decision, not an
/// error). `timeout_ns` 0 never waits; `RATOMIC_NO_TIMEOUT` waits as long
/// as it takes. Blocks the calling thread; no `_at` form (see
/// `ratomic_acquire`).
///
/// @param direct The direct bucket, borrowed for the call.
/// @param cost Tokens to take, at most the capacity; 0 answers like a peek.
/// @param timeout_ns The most to wait in total, in **nanoseconds**: 0 never waits,
///     `RATOMIC_NO_TIMEOUT` waits as long as it takes.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; errors (`*decision` untouched; nothing was
///     taken): as `ratomic_direct_allow`, reported at once for a bad call (a cost
///     above the capacity never waits), or after a wait if the clock then reads
///     past `RATOMIC_MAX_TIME`.
///
/// @note Ownership: borrows `direct` for the call; the caller owns `*decision`.
///     Thread-safety: safe from many threads at once.
///
/// @warning As `ratomic_direct_allow`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_acquire(
    direct: *const ratomic_direct,
    cost: u64,
    timeout_ns: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live bucket or NULL.
        let b = &unsafe { arg_ref(direct, "direct") }?.bucket;
        let decision = out_ptr(decision, "decision")?;
        let timeout = (timeout_ns != RATOMIC_NO_TIMEOUT).then(|| Duration::from_nanos(timeout_ns));
        let d = b.acquire(cost, timeout)?;
        // SAFETY: checked non-NULL above; the caller guarantees it is writable.
        unsafe { ratomic_decision::write(decision, d) };
        Ok(())
    })
}

/// Writes the bucket's clock reading, in **nanoseconds**, to `*out_ns`: the
/// callback's value if one was given, else the library's monotonic clock.
/// Use it to drive the `_at` functions from one reading.
///
/// @param direct The direct bucket, borrowed for the call.
/// @param[out] out_ns Receives the clock's reading in **nanoseconds**, only on
///     `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; on an error (`*out_ns` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: direct, out_ns.
/// @retval RATOMIC_INVALID_ARGUMENT The clock read past `RATOMIC_MAX_TIME`.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @warning `direct` must be a live bucket; `out_ns` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_now(direct: *const ratomic_direct, out_ns: *mut u64) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live bucket or NULL.
        let b = &unsafe { arg_ref(direct, "direct") }?.bucket;
        let out_ns = out_ptr(out_ns, "out_ns")?;
        let now = check_time(b.now())?;
        // SAFETY: checked non-NULL; writable as the caller guarantees.
        unsafe { write_out(out_ns, now) };
        Ok(())
    })
}

/// Writes what the bucket enforces to `*out`, as `ratomic_limit_get` does
/// for a limiter's limit: `name` `"token_bucket"` (static), `algorithm`
/// `RATOMIC_ALGORITHM_TOKEN_BUCKET`, `limit` the capacity, `interval_ns`
/// the emission interval `T`, `period_ns` = `limit` × `interval_ns`, and
/// `refill_per_sec` as given.
///
/// @param direct The direct bucket, borrowed for the call.
/// @param[out] out Receives the bucket's description, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; on an error (`*out` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: direct, out.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @warning `direct` must be a live bucket; `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_limit_get(
    direct: *const ratomic_direct,
    out: *mut ratomic_limit_info,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live bucket or NULL.
        let b = &unsafe { arg_ref(direct, "direct") }?.bucket;
        let out = out_ptr(out, "out")?;
        let q = b.quota();
        let algorithm = ratomic_algorithm::RATOMIC_ALGORITHM_TOKEN_BUCKET;
        let info = ratomic_limit_info {
            name: algorithm.name().as_ptr(),
            algorithm: algorithm as u32,
            limit: q.capacity(),
            period_ns: q.capacity() * q.emission_interval_nanos(),
            interval_ns: q.emission_interval_nanos(),
            refill_per_sec: q.refill_per_sec(),
        };
        // SAFETY: checked non-NULL; writable as the caller guarantees.
        unsafe { write_out(out, info) };
        Ok(())
    })
}
