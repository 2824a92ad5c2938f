//! The operations every limiter kind answers: allow, peek, refund, reset,
//! batches, the key count and the clock.
//!
//! Each comes in two forms: one that reads the limiter's clock (the
//! callback from `ratomic_options`, or the library's monotonic clock), and
//! one ending in `_at` that takes `now_ns` from the caller.

use std::mem::size_of;

use crate::boundary::{arg_ref, key_arg, out_ptr, write_out, Failure};
use crate::decision::ratomic_decision;
use crate::limiter::{ratomic_limiter, MAX_NANOS};
use crate::result::ratomic_result;

/// One request of a batch (`ratomic_allow_many`): a key and a cost.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratomic_request {
    /// The key's bytes (any bytes); may be NULL only when `key_len` is 0.
    pub key: *const u8,
    /// The key's length in bytes.
    pub key_len: usize,
    /// Tokens (or calls) to take.
    pub cost: u64,
}

/// Allow or peek, at `now` or at the limiter's clock.
///
/// # Safety
/// As the public functions that call it.
#[inline(always)]
unsafe fn decide(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now: Option<u64>,
    consume: bool,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let decision = out_ptr(decision, "decision")?;
        // SAFETY: the caller passes `key_len` readable bytes at `key`.
        let key = unsafe { key_arg(key, key_len, l.max_key_len()) }?;
        let now = match now {
            Some(t) => t.min(MAX_NANOS),
            None => l.now(),
        };
        let d = with_kind!(&l.kind,
            k => if consume { k.allow_at(key, cost, now) } else { k.peek_at(key, cost, now) }?,
            m => if consume { m.limiter.allow_at(key, cost, now) } else { m.limiter.peek_at(key, cost, now) }?.decision
        );
        // SAFETY: checked non-NULL above; the caller guarantees it is writable.
        unsafe { ratomic_decision::write(decision, d) };
        Ok(())
    })
}

/// Takes `cost` tokens from `key` if it has that many (for a window limiter,
/// counts `cost` calls if they fit), and writes the decision to `*decision`.
/// A denial is `RATOMIC_OK` with `decision->allowed == false` and a
/// positive `retry_after_ns`; it consumes nothing. Cost 0 answers like a
/// peek. For a multi-limit limiter, the call passes only if every limit
/// allows it (all or nothing); the decision is the tightest limit's.
///
/// `key` is `key_len` bytes, any bytes; NULL is allowed when `key_len` is 0.
///
/// Errors (no state changed, `*decision` untouched): `RATOMIC_NULL_ARGUMENT`,
/// `RATOMIC_COST_EXCEEDS_LIMIT` (a cost above the limit could never pass),
/// `RATOMIC_KEY_TOO_LONG`, `RATOMIC_PANIC` (a bug in ratomic, caught).
///
/// Ownership: borrows `limiter` and `key` for the call; the caller owns
/// `*decision`. Thread-safety: safe to call from many threads at once on
/// the same limiter and key; no call ever grants more than the limit.
///
/// # Safety
/// `limiter` must be a live limiter; `key` must point to `key_len` readable
/// bytes; `decision` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_allow(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide(limiter, key, key_len, cost, None, true, decision) }
}

/// `ratomic_allow` at time `now_ns` (**nanoseconds** on the same timeline as
/// the limiter's clock: the callback's, or the one `ratomic_now` reads).
/// Time that steps back never grants more, but makes the limiter deny more
/// than it should until time catches up: pass non-decreasing times.
///
/// Ownership, thread-safety and errors as `ratomic_allow`.
///
/// # Safety
/// As `ratomic_allow`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_allow_at(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ns: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide(limiter, key, key_len, cost, Some(now_ns), true, decision) }
}

/// What `ratomic_allow` with this `cost` would answer, changing nothing:
/// `remaining` is what would be left after that cost; cost 0 reports the
/// key as it is.
///
/// Ownership, thread-safety and errors as `ratomic_allow`.
///
/// # Safety
/// As `ratomic_allow`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_peek(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide(limiter, key, key_len, cost, None, false, decision) }
}

/// `ratomic_peek` at time `now_ns` (nanoseconds; see `ratomic_allow_at`).
///
/// # Safety
/// As `ratomic_allow`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_peek_at(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ns: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide(limiter, key, key_len, cost, Some(now_ns), false, decision) }
}

/// Refund or reset, at `now` or at the limiter's clock.
///
/// # Safety
/// As the public functions that call it.
#[inline(always)]
unsafe fn restore(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    refund: Option<u64>,
    now: Option<u64>,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        // SAFETY: the caller passes `key_len` readable bytes at `key`.
        let key = unsafe { key_arg(key, key_len, l.max_key_len()) }?;
        let now = match now {
            Some(t) => t.min(MAX_NANOS),
            None => l.now(),
        };
        match refund {
            Some(tokens) => {
                with_kind!(&l.kind, k => k.refund_at(key, tokens, now)?, m => m.limiter.refund_at(key, tokens, now)?)
            }
            None => with_kind!(&l.kind, k => k.reset_at(key, now)?, m => m.limiter.reset_at(key, now)?),
        }
        Ok(())
    })
}

/// Gives `tokens` back to `key` (work admitted but not done). A key never
/// fills above its limit: refunding a full key, or one never seen, does
/// nothing. For a multi-limit limiter, every limit gets them back.
///
/// Errors: `RATOMIC_NULL_ARGUMENT`, `RATOMIC_KEY_TOO_LONG`, `RATOMIC_PANIC`.
///
/// Ownership: borrows `limiter` and `key` for the call. Thread-safety: safe
/// from many threads at once.
///
/// # Safety
/// `limiter` must be a live limiter; `key` must point to `key_len` readable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_refund(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    tokens: u64,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { restore(limiter, key, key_len, Some(tokens), None) }
}

/// `ratomic_refund` at time `now_ns` (nanoseconds; see `ratomic_allow_at`).
///
/// # Safety
/// As `ratomic_refund`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_refund_at(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    tokens: u64,
    now_ns: u64,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { restore(limiter, key, key_len, Some(tokens), Some(now_ns)) }
}

/// Forgets `key`: it is full again (for every limit of a multi-limit
/// limiter).
///
/// Errors: `RATOMIC_NULL_ARGUMENT`, `RATOMIC_KEY_TOO_LONG`, `RATOMIC_PANIC`.
///
/// Ownership: borrows `limiter` and `key` for the call. Thread-safety: safe
/// from many threads at once.
///
/// # Safety
/// As `ratomic_refund`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_reset(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { restore(limiter, key, key_len, None, None) }
}

/// `ratomic_reset` at time `now_ns` (nanoseconds; see `ratomic_allow_at`).
///
/// # Safety
/// As `ratomic_refund`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_reset_at(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    now_ns: u64,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { restore(limiter, key, key_len, None, Some(now_ns)) }
}

/// A batch at `now` or at one reading of the limiter's clock.
///
/// # Safety
/// As the public functions that call it.
unsafe fn many(
    limiter: *const ratomic_limiter,
    requests: *const ratomic_request,
    count: usize,
    now: Option<u64>,
    decisions: *mut ratomic_decision,
    results: *mut ratomic_result,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        if count == 0 {
            return Ok(());
        }
        if requests.is_null() {
            return Err(Failure::Null("requests"));
        }
        let decisions = out_ptr(decisions, "decisions")?;
        let results = out_ptr(results, "results")?;
        if count > isize::MAX as usize / size_of::<ratomic_decision>() {
            return Err(Failure::Core(ratomic_core::Error::InvalidArgument {
                name: "count",
                value: count.to_string(),
                reason: "is larger than any array".into(),
            }));
        }
        // SAFETY: non-NULL; the caller guarantees `count` readable requests.
        let requests = unsafe { std::slice::from_raw_parts(requests, count) };
        let now = match now {
            Some(t) => t.min(MAX_NANOS),
            None => l.now(),
        };
        let max_key_len = l.max_key_len();
        for (i, r) in requests.iter().enumerate() {
            // SAFETY: the caller guarantees each request's key bytes.
            let decided = unsafe { key_arg(r.key, r.key_len, max_key_len) }.and_then(|key| {
                Ok(with_kind!(&l.kind, k => k.allow_at(key, r.cost, now)?, m => m.limiter.allow_at(key, r.cost, now)?.decision))
            });
            let code = match decided {
                Ok(d) => {
                    // SAFETY: i < count, and the caller guarantees `count` writable decisions.
                    unsafe { write_out(decisions.add(i), d.into()) };
                    ratomic_result::RATOMIC_OK
                }
                Err(failure) => failure.record(),
            };
            // SAFETY: i < count, and the caller guarantees `count` writable results.
            unsafe { write_out(results.add(i), code) };
        }
        Ok(())
    })
}

/// Decides `count` independent requests in order, all at one reading of the
/// clock, as `ratomic_allow` would one by one. `results[i]` receives each
/// request's own code; `decisions[i]` is written only where `results[i]` is
/// `RATOMIC_OK`. An invalid request fails alone.
///
/// When `count` is 0 the arrays may be NULL and nothing is written.
///
/// Errors of the whole call (nothing decided, arrays untouched):
/// `RATOMIC_NULL_ARGUMENT`, `RATOMIC_INVALID_ARGUMENT` (count too large),
/// `RATOMIC_PANIC`.
///
/// Ownership: borrows all arrays for the call; the caller owns them.
/// Thread-safety: safe from many threads at once.
///
/// # Safety
/// `limiter` must be a live limiter; `requests` must point to `count`
/// readable requests whose keys are valid; `decisions` and `results` to
/// `count` writable elements each.
#[no_mangle]
pub unsafe extern "C" fn ratomic_allow_many(
    limiter: *const ratomic_limiter,
    requests: *const ratomic_request,
    count: usize,
    decisions: *mut ratomic_decision,
    results: *mut ratomic_result,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { many(limiter, requests, count, None, decisions, results) }
}

/// `ratomic_allow_many` at time `now_ns` (nanoseconds; see `ratomic_allow_at`).
///
/// # Safety
/// As `ratomic_allow_many`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_allow_many_at(
    limiter: *const ratomic_limiter,
    requests: *const ratomic_request,
    count: usize,
    now_ns: u64,
    decisions: *mut ratomic_decision,
    results: *mut ratomic_result,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { many(limiter, requests, count, Some(now_ns), decisions, results) }
}

/// Writes the number of keys the limiter holds to `*out`. A key that has
/// become full again may still be counted until the store drops it (on
/// growth or `ratomic_gc`); call `ratomic_gc` first for an exact count of
/// keys being limited.
///
/// Errors: `RATOMIC_NULL_ARGUMENT`, `RATOMIC_PANIC`.
///
/// Ownership: borrows `limiter`. Thread-safety: safe from many threads at
/// once (a count taken while others call is a snapshot).
///
/// # Safety
/// `limiter` must be a live limiter; `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_key_count(limiter: *const ratomic_limiter, out: *mut usize) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let out = out_ptr(out, "out")?;
        let n = with_kind!(&l.kind, k => k.len(), m => m.limiter.len());
        // SAFETY: checked non-NULL; writable as the caller guarantees.
        unsafe { write_out(out, n) };
        Ok(())
    })
}

/// Drops every key that is full again (losslessly: no later decision
/// changes) at the limiter's clock, and writes how many were dropped to
/// `*dropped` (which may be NULL). Optional: the same work happens,
/// amortised, inside calls.
///
/// Errors: `RATOMIC_NULL_ARGUMENT` (limiter), `RATOMIC_PANIC`.
///
/// Ownership: borrows `limiter`. Thread-safety: safe from many threads at
/// once.
///
/// # Safety
/// `limiter` must be a live limiter; `dropped`, if non-NULL, valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_gc(limiter: *const ratomic_limiter, dropped: *mut usize) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let now = l.now();
        let n = with_kind!(&l.kind, k => k.gc_at(now), m => m.limiter.gc_at(now))?;
        if !dropped.is_null() {
            // SAFETY: non-NULL; writable as the caller guarantees.
            unsafe { write_out(dropped, n) };
        }
        Ok(())
    })
}

/// Writes the limiter's clock reading, in **nanoseconds**, to `*out_ns`: the
/// callback's value if one was given, else the library's monotonic clock.
/// Use it to drive the `_at` functions from one reading.
///
/// Errors: `RATOMIC_NULL_ARGUMENT`, `RATOMIC_PANIC`.
///
/// Ownership: borrows `limiter`. Thread-safety: safe from any thread.
///
/// # Safety
/// `limiter` must be a live limiter; `out_ns` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_now(limiter: *const ratomic_limiter, out_ns: *mut u64) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let out_ns = out_ptr(out_ns, "out_ns")?;
        let now = l.now();
        // SAFETY: checked non-NULL; writable as the caller guarantees.
        unsafe { write_out(out_ns, now) };
        Ok(())
    })
}
