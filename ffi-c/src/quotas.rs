//! Token buckets whose quota comes with each call: core's `Quotas`, behind
//! its own handle (`ratomic_quotas`), for per-customer quotas read from a
//! database.

use ratomic_core::{Quota, Quotas};

use crate::boundary::{arg_ref, key_arg, out_ptr, write_out, Failure};
use crate::decision::ratomic_decision;
use crate::options::{ratomic_options, FfiClock, Resolved};
use crate::result::ratomic_result;

/// Token buckets whose quota is given with each call, one bucket per
/// (quota, key), all in one store bounded by the options' `max_keys`.
/// Opaque: made by `ratomic_quotas_new`, released with `ratomic_quotas_free`.
///
/// Thread-safety: every operation is safe from many threads at once, except
/// `ratomic_quotas_free`, which must not race with any other use.
pub struct ratomic_quotas {
    inner: Quotas<FfiClock>,
}

impl std::fmt::Debug for ratomic_quotas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ratomic_quotas").field("keys", &self.inner.len()).finish_non_exhaustive()
    }
}

/// A call's quota: a token bucket of `capacity` tokens (≥ 1) refilled at
/// `refill_per_sec` tokens a **second** (finite, > 0), exactly as
/// `ratomic_token_bucket_new` takes them. Two calls with the same two
/// values use the same bucket for a key.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratomic_quota {
    /// The most tokens a key holds (the burst), ≥ 1.
    pub capacity: u64,
    /// Tokens refilled per second, finite and > 0.
    pub refill_per_sec: f64,
}

/// The quota behind a pointer, checked.
///
/// # Safety
/// `quota` must be NULL or point to a readable `ratomic_quota`.
unsafe fn quota_arg(quota: *const ratomic_quota) -> Result<Quota, Failure> {
    // SAFETY: forwarded from the caller.
    let q = unsafe { arg_ref(quota, "quota") }?;
    Ok(Quota::new(q.capacity, q.refill_per_sec)?)
}

/// Makes a `ratomic_quotas`: token buckets whose quota comes with each call.
/// `options` may be NULL (all defaults; its clock callback, `max_keys`,
/// `max_key_len`, `max_key_bytes` and eviction policy apply as to any
/// limiter). On `RATOMIC_OK`, `*out` is new; on any error it is untouched.
///
/// @param options Construction options, or NULL for all defaults; copied.
/// @param[out] out Receives the new handle, only on `RATOMIC_OK`; release it with
///     `ratomic_quotas_free`.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: out.
/// @retval RATOMIC_INVALID_ARGUMENT An option out of range.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: the caller owns `*out` and must release it with
///     `ratomic_quotas_free`. Thread-safety: safe from any thread.
///
/// @warning `options`, if non-NULL, must point to a valid `ratomic_options`; `out`
///     must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_quotas_new(
    options: *const ratomic_options,
    out: *mut *mut ratomic_quotas,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let o = unsafe { Resolved::from_ptr(options) }?;
        let inner = Quotas::with_options(o.clock, o.options)?;
        let handle = Box::into_raw(Box::new(ratomic_quotas { inner }));
        // SAFETY: `out` is non-NULL and writable, as the caller guarantees.
        unsafe { write_out(out, handle) };
        Ok(())
    })
}

/// Releases a `ratomic_quotas` and every bucket it holds. NULL is accepted
/// and does nothing.
///
/// @param quotas The handle to release, or NULL.
///
/// @warning `quotas` must be NULL or a pointer from `ratomic_quotas_new` not yet
///     freed, and no other call may use it at the same time.
#[no_mangle]
pub unsafe extern "C" fn ratomic_quotas_free(quotas: *mut ratomic_quotas) {
    let _ = ffi_boundary!({
        if !quotas.is_null() {
            // SAFETY: made by `Box::into_raw` in `ratomic_quotas_new`, not
            // yet freed, as the caller guarantees.
            drop(unsafe { Box::from_raw(quotas) });
        }
        Ok(())
    });
}

/// What a call does with its (quota, key).
#[derive(Clone, Copy)]
enum Op {
    Allow(u64),
    Peek(u64),
    Refund(u64),
    Reset,
}

/// Runs `op` on `key`'s bucket under `quota` at `now` (or the clock's
/// reading), writing the decision of an allow or a peek to `decision`.
///
/// # Safety
/// As the public functions that call it.
unsafe fn call(
    quotas: *const ratomic_quotas,
    key: *const u8,
    key_len: usize,
    quota: *const ratomic_quota,
    op: Op,
    now: Option<u64>,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live handle or NULL.
        let q = unsafe { arg_ref(quotas, "quotas") }?;
        let decision = match op {
            Op::Allow(_) | Op::Peek(_) => Some(out_ptr(decision, "decision")?),
            Op::Refund(_) | Op::Reset => None,
        };
        // SAFETY: forwarded from the caller.
        let quota = unsafe { quota_arg(quota) }?;
        // SAFETY: the caller passes `key_len` readable bytes at `key`.
        let key = unsafe { key_arg(key, key_len, q.inner.max_key_len()) }?;
        let now = crate::boundary::now_arg(now)?.unwrap_or_else(|| q.inner.now());
        let d = match op {
            Op::Allow(cost) => Some(q.inner.allow_at(key, &quota, cost, now)?),
            Op::Peek(cost) => Some(q.inner.peek_at(key, &quota, cost, now)?),
            Op::Refund(tokens) => q.inner.refund_at(key, &quota, tokens, now).map(|()| None)?,
            Op::Reset => q.inner.reset_at(key, &quota, now).map(|()| None)?,
        };
        if let (Some(out), Some(d)) = (decision, d) {
            // SAFETY: checked non-NULL above; writable as the caller guarantees.
            unsafe { ratomic_decision::write(out, d) };
        }
        Ok(())
    })
}

/// Takes `cost` tokens from `key`'s bucket under `*quota` if it has that
/// many, and writes the decision to `*decision` (as `ratomic_allow`: a
/// denial is `RATOMIC_OK` with `allowed == false`). A quota not seen before
/// starts full; the same key under another quota is another bucket.
///
/// @param quotas The `ratomic_quotas` handle, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param quota The quota this call is under (capacity and refill rate), read
///     during the call.
/// @param cost Tokens to take, at most the quota's capacity; 0 answers like a peek.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; on an error (no state changed, `*decision`
///     untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: quotas, quota, decision, or key with a non-zero
///     `key_len`.
/// @retval RATOMIC_INVALID_ARGUMENT Capacity 0; `refill_per_sec` NaN, infinite or ≤
///     0, or a quota too slow for 63 bits of nanoseconds; the clock read past
///     `RATOMIC_MAX_TIME`.
/// @retval RATOMIC_COST_EXCEEDS_LIMIT Cost above the quota's capacity.
/// @retval RATOMIC_KEY_TOO_LONG
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: borrows everything for the call. Thread-safety: safe from many
///     threads at once; no call grants more than its quota.
///
/// @warning `quotas` must be live; `quota` readable; `key` must point to `key_len`
///     readable bytes; `decision` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_quotas_allow(
    quotas: *const ratomic_quotas,
    key: *const u8,
    key_len: usize,
    quota: *const ratomic_quota,
    cost: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { call(quotas, key, key_len, quota, Op::Allow(cost), None, decision) }
}

/// `ratomic_quotas_allow` at time `now_ns` (nanoseconds on the handle's clock's
///     timeline; see `ratomic_allow_at`).
///
/// @param quotas The `ratomic_quotas` handle, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param quota The quota this call is under (capacity and refill rate), read
///     during the call.
/// @param cost Tokens to take, at most the quota's capacity; 0 answers like a peek.
/// @param now_ns The time in **nanoseconds** on the handle's clock's timeline, at
///     most `RATOMIC_MAX_TIME`.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_quotas_allow`.
///
/// @warning As `ratomic_quotas_allow`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_quotas_allow_at(
    quotas: *const ratomic_quotas,
    key: *const u8,
    key_len: usize,
    quota: *const ratomic_quota,
    cost: u64,
    now_ns: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { call(quotas, key, key_len, quota, Op::Allow(cost), Some(now_ns), decision) }
}

/// What `ratomic_quotas_allow` with this `cost` would answer, changing nothing.
///
/// @param quotas The `ratomic_quotas` handle, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param quota The quota this call is under (capacity and refill rate), read
///     during the call.
/// @param cost Tokens to take, at most the quota's capacity; 0 answers like a peek.
/// @param now_ns The time in **nanoseconds** on the handle's clock's timeline, at
///     most `RATOMIC_MAX_TIME`.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_quotas_allow`.
///
/// @warning As `ratomic_quotas_allow`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_quotas_peek_at(
    quotas: *const ratomic_quotas,
    key: *const u8,
    key_len: usize,
    quota: *const ratomic_quota,
    cost: u64,
    now_ns: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { call(quotas, key, key_len, quota, Op::Peek(cost), Some(now_ns), decision) }
}

/// `ratomic_quotas_peek_at` on the handle's clock.
///
/// @param quotas The `ratomic_quotas` handle, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param quota The quota this call is under (capacity and refill rate), read
///     during the call.
/// @param cost Tokens to take, at most the quota's capacity; 0 answers like a peek.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_quotas_allow`.
///
/// @warning As `ratomic_quotas_allow`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_quotas_peek(
    quotas: *const ratomic_quotas,
    key: *const u8,
    key_len: usize,
    quota: *const ratomic_quota,
    cost: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { call(quotas, key, key_len, quota, Op::Peek(cost), None, decision) }
}

/// Gives `tokens` back to `key`'s bucket under `*quota` (never above full;
/// a bucket never seen is left alone) at time `now_ns`.
///
/// @param quotas The `ratomic_quotas` handle, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param quota The quota this call is under (capacity and refill rate), read
///     during the call.
/// @param tokens Tokens (or calls) to give back; a key never fills above its limit.
/// @param now_ns The time in **nanoseconds** on the handle's clock's timeline, at
///     most `RATOMIC_MAX_TIME`.
/// @return `RATOMIC_OK` on success; errors (nothing changed): as
///     `ratomic_quotas_allow`, less the decision and the cost.
///
/// @warning `quotas` must be live; `quota` readable; `key` must point to `key_len`
///     readable bytes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_quotas_refund_at(
    quotas: *const ratomic_quotas,
    key: *const u8,
    key_len: usize,
    quota: *const ratomic_quota,
    tokens: u64,
    now_ns: u64,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { call(quotas, key, key_len, quota, Op::Refund(tokens), Some(now_ns), std::ptr::null_mut()) }
}

/// Forgets `key`'s bucket under `*quota` at time `now_ns`: it is full again.
///
/// @param quotas The `ratomic_quotas` handle, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param quota The quota this call is under (capacity and refill rate), read
///     during the call.
/// @param now_ns The time in **nanoseconds** on the handle's clock's timeline, at
///     most `RATOMIC_MAX_TIME`.
/// @return `RATOMIC_OK` on success; errors (nothing changed): as
///     `ratomic_quotas_refund_at`.
///
/// @warning As `ratomic_quotas_refund_at`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_quotas_reset_at(
    quotas: *const ratomic_quotas,
    key: *const u8,
    key_len: usize,
    quota: *const ratomic_quota,
    now_ns: u64,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { call(quotas, key, key_len, quota, Op::Reset, Some(now_ns), std::ptr::null_mut()) }
}

/// Drops every bucket that is full again at `now_ns`; writes how many to
/// `*dropped` if it is non-NULL. Writes the number of buckets still held
/// to `*held` if it is non-NULL.
///
/// @param quotas The `ratomic_quotas` handle, borrowed for the call.
/// @param now_ns The time in **nanoseconds** on the handle's clock's timeline, at
///     most `RATOMIC_MAX_TIME`.
/// @param[out] dropped Receives how many were dropped; may be NULL.
/// @param[out] held Receives how many buckets are still held; may be NULL.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: quotas.
/// @retval RATOMIC_INVALID_ARGUMENT `now_ns` above `RATOMIC_MAX_TIME`.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @warning `quotas` must be live; `dropped` and `held`, if non-NULL, valid for
///     writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_quotas_gc_at(
    quotas: *const ratomic_quotas,
    now_ns: u64,
    dropped: *mut usize,
    held: *mut usize,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live handle or NULL.
        let q = unsafe { arg_ref(quotas, "quotas") }?;
        crate::boundary::now_arg(Some(now_ns))?;
        let n = q.inner.gc_at(now_ns)?;
        if !dropped.is_null() {
            // SAFETY: non-NULL; writable as the caller guarantees.
            unsafe { write_out(dropped, n) };
        }
        if !held.is_null() {
            // SAFETY: as above.
            unsafe { write_out(held, q.inner.len()) };
        }
        Ok(())
    })
}
