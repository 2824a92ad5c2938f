//! The operations every limiter answers: allow, peek, refund, reset,
//! acquire, batches, the key count, gc and the clock.
//!
//! Each comes in two forms: one that reads the limiter's clock (the
//! callback from `ratomic_options`, or the library's monotonic clock), and
//! one ending in `_at` that takes `now_ns` from the caller. Either way, a
//! time past `RATOMIC_MAX_TIME` is an error that changes nothing (the
//! engine checks it; it is never clamped).

use std::mem::size_of;
use std::time::Duration;

use ratomic_core::{check_time, Error};

use crate::boundary::{arg_ref, key_arg, out_ptr, write_out, Failure};
use crate::decision::ratomic_decision;
use crate::handle::{ratomic_limiter, Engine};
use crate::result::ratomic_result;

/// The last valid time, in nanoseconds: 2^62 − 1 (about 146 years after
/// the clock's zero). An `_at` time or a clock reading beyond it is
/// `RATOMIC_INVALID_ARGUMENT`, and the call changes nothing: never clamped.
pub const RATOMIC_MAX_TIME: u64 = 4_611_686_018_427_387_903;
const _: () = assert!(RATOMIC_MAX_TIME == ratomic_core::MAX_TIME);

/// The most limits one multi-limit limiter holds, and the most members one
/// stack holds: size a `ratomic_limit_decision` array with it to receive
/// every entry of any call.
pub const RATOMIC_MAX_LIMITS: usize = 16;
const _: () = assert!(RATOMIC_MAX_LIMITS == ratomic_core::MAX_LIMITS);

/// `ratomic_acquire`'s `timeout_ns` for "wait as long as it takes".
pub const RATOMIC_NO_TIMEOUT: u64 = u64::MAX;

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

/// Allow (`CONSUME`) or peek, at `now_ns` (`AT`) or at the limiter's clock.
///
/// Shaped so that the compiler inlines the panic boundary (std's
/// `catch_unwind` calls the closure through its own function) into each
/// exported function, which then reads its arguments from registers rather
/// than from a closure spilled to the stack and read back in another frame:
/// generic, so each of the four exported functions has its own closure type
/// and so its own boundary function with a single caller; and the
/// single-rule engine's path written out here, the others' kept out of line
/// ([`decide_other`]), so that the body is small. A hot `ratomic_allow`
/// went 625 → 557 instructions, `ratomic_allow_at` 574 → 528 (callgrind).
///
/// # Safety
/// As the public functions that call it.
#[inline(always)]
unsafe fn decide<const CONSUME: bool, const AT: bool>(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ns: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    let (now, consume) = (if AT { Some(now_ns) } else { None }, CONSUME);
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let decision = out_ptr(decision, "decision")?;
        let Engine::One(k) = &l.engine else {
            // SAFETY: forwarded from the caller.
            return unsafe { decide_other(l, key, key_len, cost, now, consume, decision) };
        };
        // SAFETY: the caller passes `key_len` readable bytes at `key`.
        let key = unsafe { key_arg(key, key_len, k.max_key_len()) }?;
        let now = match crate::boundary::now_arg(now)? {
            Some(now) => now,
            None => k.now(),
        };
        let v = if consume { k.allow_verdict_at(key, cost, now) } else { k.peek_verdict_at(key, cost, now) }?;
        // SAFETY: checked non-NULL above; the caller guarantees it is writable.
        unsafe { ratomic_decision::write(decision, v) };
        Ok(())
    })
}

/// [`decide`] on a multi-limit or a Redis-backed limiter.
///
/// # Safety
/// As [`decide`]; `decision` is non-NULL.
#[inline(never)]
unsafe fn decide_other(
    l: &ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now: Option<u64>,
    consume: bool,
    decision: *mut ratomic_decision,
) -> Result<(), Failure> {
    // SAFETY: the caller passes `key_len` readable bytes at `key`.
    let key = unsafe { key_arg(key, key_len, l.max_key_len()) }?;
    let now = crate::boundary::now_arg(now)?;
    let d = match &l.engine {
        Engine::Redis(r) => r.decide(key, cost, now, consume)?.decision,
        Engine::Postgres(p) => p.decide(key, cost, now, consume)?.decision,
        Engine::Many(m) => {
            let now = now.unwrap_or_else(|| m.now());
            if consume { m.allow_at(key, cost, now) } else { m.peek_at(key, cost, now) }?.decision
        }
        Engine::One(_) => unreachable!("decide answers the single-rule engine itself"),
    };
    // SAFETY: non-NULL (the caller checked); the caller guarantees it is writable.
    unsafe { ratomic_decision::write(decision, d) };
    Ok(())
}

/// Takes `cost` tokens from `key` if it has that many (for a window limiter,
/// counts `cost` calls if they fit), and writes the decision to `*decision`.
/// A denial is `RATOMIC_OK` with `decision->allowed == false` and a
/// positive `retry_after_ns`; it consumes nothing. Cost 0 answers like a
/// peek. For a multi-limit limiter, the call passes only if every limit
/// allows it (all or nothing); the decision is the combined one (see
/// `ratomic_multi_limiter_new`).
///
/// `key` is `key_len` bytes, any bytes; NULL is allowed when `key_len` is 0.
///
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; on an error (no state changed, `*decision`
///     untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: limiter, decision, or key with a non-zero
///     `key_len`.
/// @retval RATOMIC_COST_EXCEEDS_LIMIT A cost above the limit could never pass.
/// @retval RATOMIC_KEY_TOO_LONG Above the limiter's `max_key_len`, checked before
///     `key` is read.
/// @retval RATOMIC_INVALID_ARGUMENT The clock read past `RATOMIC_MAX_TIME`.
/// @retval RATOMIC_BACKEND_UNAVAILABLE A Redis- or PostgreSQL-backed limiter
///     (`ratomic_redis_*_new`, `ratomic_postgres_*_new`) under
///     `RATOMIC_REDIS_RETURN_ERROR` could not reach its server.
/// @retval RATOMIC_BACKEND_TIMEOUT The same, when the server did not answer within the timeout.
/// @retval RATOMIC_BACKEND_ERROR The same, when the server answered with an error.
/// @retval RATOMIC_PANIC A bug in ratomic, caught.
///
/// @note Ownership: borrows `limiter` and `key` for the call; the caller owns
///     `*decision`. Thread-safety: safe to call from many threads at once on the
///     same limiter and key; no call ever grants more than the limit.
///
/// @warning `limiter` must be a live limiter; `key` must point to `key_len`
///     readable bytes; `decision` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_allow(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide::<true, false>(limiter, key, key_len, cost, 0, decision) }
}

/// `ratomic_allow` at time `now_ns` (**nanoseconds** on the same timeline as
/// the limiter's clock: the callback's, or the one `ratomic_now` reads; at
/// most `RATOMIC_MAX_TIME`). Time that steps back never grants more, but
/// makes the limiter deny more than it should until time catches up: pass
/// non-decreasing times.
///
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_allow`;
///     `RATOMIC_INVALID_ARGUMENT` when `now_ns` is above `RATOMIC_MAX_TIME`.
///     Ownership and thread-safety as `ratomic_allow`.
///
/// @warning As `ratomic_allow`.
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
    unsafe { decide::<true, true>(limiter, key, key_len, cost, now_ns, decision) }
}

/// What `ratomic_allow` with this `cost` would answer, changing nothing:
/// `remaining` is what would be left after that cost; cost 0 reports the
/// key as it is.
///
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; errors, ownership and thread-safety as
///     `ratomic_allow`.
///
/// @warning As `ratomic_allow`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_peek(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide::<false, false>(limiter, key, key_len, cost, 0, decision) }
}

/// `ratomic_peek` at time `now_ns` (nanoseconds; see `ratomic_allow_at`).
///
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_allow_at`.
///
/// @warning As `ratomic_allow`.
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
    unsafe { decide::<false, true>(limiter, key, key_len, cost, now_ns, decision) }
}

/// Takes `cost` tokens from `key`, waiting out denials: tries as
/// `ratomic_allow` does and, while it is denied, waits the denial's
/// `retry_after_ns` (through `ratomic_options::clock_sleep`, or by sleeping
/// the thread) and tries again. Writes the allowing decision — or, once the
/// next wait would take the total waited past `timeout_ns`, that denial
/// (`allowed == false`), without waiting for it: a timeout is a decision,
/// not an error. `timeout_ns` 0 never waits; `RATOMIC_NO_TIMEOUT` waits as
/// long as it takes. Other callers may take the tokens during a wait, so a
/// call can wait more than once.
///
/// Blocks the calling thread. There is no `_at` form: a call that waits
/// must read the time after waiting, so tests give the limiter a clock
/// callback and a `clock_sleep` that moves that clock instead of sleeping.
///
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param timeout_ns The most to wait in total, in **nanoseconds**: 0 never waits,
///     `RATOMIC_NO_TIMEOUT` waits as long as it takes.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; errors (`*decision` untouched; nothing was
///     taken): as `ratomic_allow`, reported at once for a bad call (a cost above
///     the limit never waits), or after a wait if the clock then reads past
///     `RATOMIC_MAX_TIME`.
///
/// @note Ownership: borrows `limiter` and `key` for the call; the caller owns
///     `*decision`. Thread-safety: safe from many threads at once.
///
/// @warning As `ratomic_allow`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_acquire(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    timeout_ns: u64,
    decision: *mut ratomic_decision,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let decision = out_ptr(decision, "decision")?;
        // SAFETY: the caller passes `key_len` readable bytes at `key`.
        let key = unsafe { key_arg(key, key_len, l.max_key_len()) }?;
        let timeout = (timeout_ns != RATOMIC_NO_TIMEOUT).then(|| Duration::from_nanos(timeout_ns));
        if let Engine::Postgres(p) = &l.engine {
            let d = p.acquire(key, cost, timeout)?;
            // SAFETY: checked non-NULL above; the caller guarantees it is writable.
            unsafe { ratomic_decision::write(decision, d) };
            return Ok(());
        }
        if let Engine::Redis(r) = &l.engine {
            let d = r.acquire(key, cost, timeout)?;
            // SAFETY: checked non-NULL above; the caller guarantees it is writable.
            unsafe { ratomic_decision::write(decision, d) };
            return Ok(());
        }
        let d = with_engine!(l, k => k.acquire(key, cost, timeout)?, m => m.acquire(key, cost, timeout)?.decision);
        // SAFETY: checked non-NULL above; the caller guarantees it is writable.
        unsafe { ratomic_decision::write(decision, d) };
        Ok(())
    })
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
        let now = crate::boundary::now_arg(now)?;
        if let Engine::Redis(r) = &l.engine {
            return r.restore(key, refund, now);
        }
        if let Engine::Postgres(p) = &l.engine {
            return p.restore(key, refund, now);
        }
        let now = now.unwrap_or_else(|| l.now());
        match refund {
            Some(tokens) => with_engine!(l, k => k.refund_at(key, tokens, now)?, m => m.refund_at(key, tokens, now)?),
            None => with_engine!(l, k => k.reset_at(key, now)?, m => m.reset_at(key, now)?),
        }
        Ok(())
    })
}

/// Gives `tokens` back to `key` (work admitted but not done). A key never
/// fills above its limit: refunding a full key, or one never seen, does
/// nothing. For a multi-limit limiter, every limit gets them back.
///
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param tokens Tokens (or calls) to give back; a key never fills above its limit.
/// @return `RATOMIC_OK` on success; on an error (nothing changed):
/// @retval RATOMIC_NULL_ARGUMENT NULL: limiter, or key with a non-zero `key_len`.
/// @retval RATOMIC_KEY_TOO_LONG Above the limiter's `max_key_len`, checked before `key` is read.
/// @retval RATOMIC_INVALID_ARGUMENT The clock read past `RATOMIC_MAX_TIME`.
/// @retval RATOMIC_BACKEND_UNAVAILABLE A Redis- or PostgreSQL-backed limiter
///     (`ratomic_redis_*_new`, `ratomic_postgres_*_new`) under
///     `RATOMIC_REDIS_RETURN_ERROR` could not reach its server.
/// @retval RATOMIC_BACKEND_TIMEOUT The same, when the server did not answer within the timeout.
/// @retval RATOMIC_BACKEND_ERROR The same, when the server answered with an error.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: borrows `limiter` and `key` for the call. Thread-safety: safe
///     from many threads at once.
///
/// @warning `limiter` must be a live limiter; `key` must point to `key_len`
///     readable bytes.
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
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param tokens Tokens (or calls) to give back; a key never fills above its limit.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_refund`;
///     `RATOMIC_INVALID_ARGUMENT` when `now_ns` is above `RATOMIC_MAX_TIME`.
///
/// @warning As `ratomic_refund`.
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
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @return `RATOMIC_OK` on success; errors as `ratomic_refund`.
///
/// @note Ownership: borrows `limiter` and `key` for the call. Thread-safety: safe
///     from many threads at once.
///
/// @warning As `ratomic_refund`.
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
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_refund_at`.
///
/// @warning As `ratomic_refund`.
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
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let requests = if count == 0 {
            &[]
        } else {
            if requests.is_null() {
                return Err(Failure::Null("requests"));
            }
            out_ptr(decisions, "decisions")?;
            if count > isize::MAX as usize / size_of::<ratomic_decision>() {
                return Err(Failure::Core(Error::InvalidArgument {
                    name: "count",
                    value: count.to_string(),
                    reason: "is larger than any array".into(),
                }));
            }
            // SAFETY: non-NULL; the caller guarantees `count` readable requests.
            unsafe { std::slice::from_raw_parts(requests, count) }
        };
        let now = crate::boundary::now_arg(now)?;
        let now = match (&l.engine, now) {
            (Engine::Redis(_) | Engine::Postgres(_), now) => now.map(check_time).transpose()?,
            (_, now) => Some(check_time(now.unwrap_or_else(|| l.now()))?),
        };
        // The keys as slices: C must check each pointer and length before
        // reading it, which the engine cannot do for it.
        let max_key_len = l.max_key_len();
        let mut keys = Vec::with_capacity(count);
        for (index, r) in requests.iter().enumerate() {
            // SAFETY: the caller guarantees each request's key bytes.
            match unsafe { key_arg(r.key, r.key_len, max_key_len) } {
                Ok(key) => keys.push((key, r.cost)),
                Err(bad_key) => return Err(first_invalid(l, &keys, index, r.cost, bad_key)),
            }
        }
        let write = |i: usize, d: ratomic_core::Decision| {
            // SAFETY: i < count, and the caller guarantees `count` writable decisions.
            unsafe { ratomic_decision::write(decisions.add(i), d) };
        };
        let Some(now) = now else {
            // Only a Redis- or PostgreSQL-backed limiter leaves the time to the server.
            if let Engine::Redis(r) = &l.engine {
                r.allow_many(&keys, None)?.into_iter().enumerate().for_each(|(i, d)| write(i, d));
            }
            if let Engine::Postgres(p) = &l.engine {
                p.allow_many(&keys, None)?.into_iter().enumerate().for_each(|(i, d)| write(i, d));
            }
            return Ok(());
        };
        if let Engine::Redis(r) = &l.engine {
            r.allow_many(&keys, Some(now))?.into_iter().enumerate().for_each(|(i, d)| write(i, d));
            return Ok(());
        }
        if let Engine::Postgres(p) = &l.engine {
            p.allow_many(&keys, Some(now))?.into_iter().enumerate().for_each(|(i, d)| write(i, d));
            return Ok(());
        }
        let requests = keys.iter().map(|&(key, cost)| (key, cost));
        with_engine!(l,
            k => {
                // Each verdict straight into the caller's array, in nanoseconds.
                let mut i = 0;
                k.allow_many_verdicts_at(requests, now, |v| {
                    // SAFETY: one verdict per request, so i < count, and the
                    // caller guarantees `count` writable decisions.
                    unsafe { ratomic_decision::write(decisions.add(i), v) };
                    i += 1;
                })?;
            },
            m => {
                let mut out = Vec::with_capacity(count);
                m.select(m.all_limits()).allow_many_at(requests, now, &mut out)?;
                out.into_iter().enumerate().for_each(|(i, md)| write(i, md.decision));
            }
        );
        Ok(())
    })
}

/// The failure of a batch whose request `index` has a key C cannot read
/// (`bad_key`): the engine's own for an earlier invalid request, or for
/// this request's cost, as the engine would have found them first.
fn first_invalid(l: &ratomic_limiter, before: &[(&[u8], u64)], index: usize, cost: u64, bad_key: Failure) -> Failure {
    let check = |key: &[u8], cost: u64| match &l.engine {
        Engine::One(k) => k.check(key, cost),
        Engine::Many(m) => m.check(key, cost),
        Engine::Redis(r) => match r.limits().check(key, cost) {
            Err(ratomic_redis::Error::Invalid(e)) => Err(e),
            _ => Ok(()),
        },
        Engine::Postgres(p) => match p.limits().check(key, cost) {
            Err(ratomic_postgres::Error::Invalid(e)) => Err(e),
            _ => Ok(()),
        },
    };
    let earlier = before.iter().enumerate().find_map(|(i, &(key, cost))| check(key, cost).err().map(|e| (i, e)));
    match earlier.or_else(|| check(&[], cost).err().map(|e| (index, e))) {
        Some((index, e)) => Failure::Core(Error::InvalidRequest { index, error: Box::new(e) }),
        None => Failure::Request { index, cause: Box::new(bad_key) },
    }
}

/// Decides `count` independent requests in order, all at one reading of the
/// clock, as `ratomic_allow` would one by one, and writes `decisions[i]`
/// for `requests[i]`. Every request is checked before any is decided: if
/// one is invalid (a cost above the limit, a key too long, a NULL key with
/// a non-zero length), the whole batch fails with
/// `RATOMIC_INVALID_REQUEST`, nothing is decided or changed, no decision is
/// written, and `ratomic_last_error_request` gives the first invalid
/// request's index and its own code (the message names both).
///
/// When `count` is 0 the arrays may be NULL and nothing is written.
///
/// @param limiter The limiter, borrowed for the call.
/// @param requests An array of `count` requests (key and cost each); may be NULL
///     when `count` is 0.
/// @param count The number of requests; 0 decides nothing.
/// @param[out] decisions An array of `count` decisions; `decisions[i]` receives the
///     answer to `requests[i]`, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; on an error (nothing decided, `decisions`
///     untouched):
/// @retval RATOMIC_INVALID_REQUEST A request is invalid, as above.
/// @retval RATOMIC_NULL_ARGUMENT NULL: limiter; requests or decisions when `count` > 0.
/// @retval RATOMIC_INVALID_ARGUMENT Count larger than any array; the clock read
///     past `RATOMIC_MAX_TIME`.
/// @retval RATOMIC_BACKEND_UNAVAILABLE A Redis- or PostgreSQL-backed limiter
///     (`ratomic_redis_*_new`, `ratomic_postgres_*_new`) under
///     `RATOMIC_REDIS_RETURN_ERROR` could not reach its server.
/// @retval RATOMIC_BACKEND_TIMEOUT The same, when the server did not answer within the timeout.
/// @retval RATOMIC_BACKEND_ERROR The same, when the server answered with an error.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: borrows all arrays for the call; the caller owns them.
///     Thread-safety: safe from many threads at once.
///
/// @warning `limiter` must be a live limiter; `requests` must point to `count`
///     readable requests whose keys are valid; `decisions` to `count` writable
///     decisions.
#[no_mangle]
pub unsafe extern "C" fn ratomic_allow_many(
    limiter: *const ratomic_limiter,
    requests: *const ratomic_request,
    count: usize,
    decisions: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { many(limiter, requests, count, None, decisions) }
}

/// `ratomic_allow_many` at time `now_ns` (nanoseconds; see `ratomic_allow_at`).
///
/// @param limiter The limiter, borrowed for the call.
/// @param requests An array of `count` requests (key and cost each); may be NULL
///     when `count` is 0.
/// @param count The number of requests; 0 decides nothing.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @param[out] decisions An array of `count` decisions; `decisions[i]` receives the
///     answer to `requests[i]`, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_allow_many`;
///     `RATOMIC_INVALID_ARGUMENT` when `now_ns` is above `RATOMIC_MAX_TIME`.
///
/// @warning As `ratomic_allow_many`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_allow_many_at(
    limiter: *const ratomic_limiter,
    requests: *const ratomic_request,
    count: usize,
    now_ns: u64,
    decisions: *mut ratomic_decision,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { many(limiter, requests, count, Some(now_ns), decisions) }
}

/// Writes the number of keys the limiter holds to `*out`. A key that has
/// become full again may still be counted until the store drops it (on
/// growth or `ratomic_gc`); call `ratomic_gc` first for an exact count of
/// keys being limited.
///
/// @param limiter The limiter, borrowed for the call.
/// @param[out] out Receives the number of keys held, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; on an error (`*out` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: limiter, out.
/// @retval RATOMIC_OTHER_ERROR A Redis-backed limiter: its keys live on the server, and
///     this call is not available on it.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: borrows `limiter`. Thread-safety: safe from many threads at
///     once (a count taken while others call is a snapshot).
///
/// @warning `limiter` must be a live limiter; `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_key_count(limiter: *const ratomic_limiter, out: *mut usize) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let out = out_ptr(out, "out")?;
        let n = with_engine!(l, k => k.len(), m => m.len());
        // SAFETY: checked non-NULL; writable as the caller guarantees.
        unsafe { write_out(out, n) };
        Ok(())
    })
}

/// gc at `now` or at the limiter's clock.
///
/// # Safety
/// As the public functions that call it.
unsafe fn gc(limiter: *const ratomic_limiter, now: Option<u64>, dropped: *mut usize) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let now = crate::boundary::now_arg(now)?;
        let n = match &l.engine {
            // The server's rows: at the server's time unless a time is given.
            Engine::Postgres(p) => p.gc(now)?,
            _ => {
                let now = now.unwrap_or_else(|| l.now());
                with_engine!(l, k => k.gc_at(now), m => m.gc_at(now))?
            }
        };
        if !dropped.is_null() {
            // SAFETY: non-NULL; writable as the caller guarantees.
            unsafe { write_out(dropped, n) };
        }
        Ok(())
    })
}

/// Drops every key that is full again (losslessly: no later decision
/// changes, even one stamped with an earlier time) at the limiter's clock,
/// and writes how many were dropped to `*dropped` (which may be NULL).
/// Optional: inside calls, when the store grows, a key is dropped once it
/// has been full for its limit's window (the longest, for several limits).
///
/// @param limiter The limiter, borrowed for the call.
/// @param[out] dropped Receives how many were dropped; may be NULL.
/// @return `RATOMIC_OK` on success; on an error (`*dropped` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: limiter.
/// @retval RATOMIC_INVALID_ARGUMENT The clock read past `RATOMIC_MAX_TIME`.
/// @retval RATOMIC_OTHER_ERROR A Redis-backed limiter: its keys live on the server, and
///     this call is not available on it.
/// @retval RATOMIC_BACKEND_UNAVAILABLE A PostgreSQL-backed limiter (`ratomic_postgres_*_new`,
///     whose `ratomic_gc` removes its rows full again at the server's time) could
///     not reach its server; also `RATOMIC_BACKEND_TIMEOUT`, `RATOMIC_BACKEND_ERROR`.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: borrows `limiter`. Thread-safety: safe from many threads at
///     once.
///
/// @warning `limiter` must be a live limiter; `dropped`, if non-NULL, valid for
///     writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_gc(limiter: *const ratomic_limiter, dropped: *mut usize) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { gc(limiter, None, dropped) }
}

/// `ratomic_gc` at time `now_ns` (nanoseconds; see `ratomic_allow_at`):
/// drops the keys that are full at that time.
///
/// @param limiter The limiter, borrowed for the call.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @param[out] dropped Receives how many were dropped; may be NULL.
/// @return `RATOMIC_OK` on success; errors as `ratomic_gc`;
///     `RATOMIC_INVALID_ARGUMENT` when `now_ns` is above `RATOMIC_MAX_TIME`.
///
/// @warning As `ratomic_gc`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_gc_at(
    limiter: *const ratomic_limiter,
    now_ns: u64,
    dropped: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { gc(limiter, Some(now_ns), dropped) }
}

/// Writes the limiter's clock reading, in **nanoseconds**, to `*out_ns`: the
/// callback's value if one was given, else the library's monotonic clock.
/// Use it to drive the `_at` functions from one reading.
///
/// @param limiter The limiter, borrowed for the call.
/// @param[out] out_ns Receives the clock's reading in **nanoseconds**, only on
///     `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; on an error (`*out_ns` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: limiter, out_ns.
/// @retval RATOMIC_INVALID_ARGUMENT The clock read past `RATOMIC_MAX_TIME`.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: borrows `limiter`. Thread-safety: safe from any thread.
///
/// @warning `limiter` must be a live limiter; `out_ns` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_now(limiter: *const ratomic_limiter, out_ns: *mut u64) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let out_ns = out_ptr(out_ns, "out_ns")?;
        let now = check_time(l.now())?;
        // SAFETY: checked non-NULL; writable as the caller guarantees.
        unsafe { write_out(out_ns, now) };
        Ok(())
    })
}
