//! Several named limits on one key (SPEC §4.4), and the detailed decision
//! that says which limit denied.

use std::ffi::{c_char, CStr};

use ratomic_core::{Error, Limiter, Quota, Rate, Rule, MAX_LIMITS};

use crate::boundary::{arg_ref, key_arg, out_ptr, str_arg, write_out, Failure};
use crate::decision::{ratomic_decision, ratomic_limit_decision};
use crate::limiter::{ratomic_limiter, Kind, Multi, MAX_NANOS};
use crate::options::{ratomic_options, Resolved};
use crate::result::ratomic_result;

/// The algorithm of one limit in a `ratomic_limit_spec`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ratomic_algorithm {
    /// A GCRA token bucket: `"10/s"` is a burst of 10 refilled over 1 s.
    RATOMIC_ALGORITHM_TOKEN_BUCKET = 0,
    /// A fixed window: `"1000/day"` is 1000 calls per day-long window
    /// (windows aligned to the clock's zero, not to the calendar).
    RATOMIC_ALGORITHM_FIXED_WINDOW = 1,
    /// A sliding-window counter: `"100/h"` is 100 calls in any hour.
    RATOMIC_ALGORITHM_SLIDING_WINDOW = 2,
}

/// One named limit for `ratomic_multi_limiter_new`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratomic_limit_spec {
    /// The limit's name: NUL-terminated UTF-8, non-empty, unique in the
    /// limiter. Copied; the caller keeps ownership.
    pub name: *const c_char,
    /// The rate string, e.g. `"10/s"`, `"1000/day"`. Copied.
    pub rate: *const c_char,
    /// A `ratomic_algorithm` value (a plain integer so that any value from C
    /// is safe to pass: unknown ones give `RATOMIC_INVALID_ARGUMENT`).
    pub algorithm: u32,
}

/// The rule one spec describes.
///
/// # Safety
/// The spec's strings must be NUL-terminated or NULL.
unsafe fn rule(spec: &ratomic_limit_spec) -> Result<(String, Rule), Failure> {
    // SAFETY: forwarded from the caller.
    let name = unsafe { str_arg(spec.name, "name", ratomic_result::RATOMIC_INVALID_ARGUMENT) }?;
    // SAFETY: forwarded from the caller.
    let rate = unsafe { str_arg(spec.rate, "rate", ratomic_result::RATOMIC_INVALID_RATE) }?;
    let rate = Rate::parse(rate)?;
    let rule = match spec.algorithm {
        a if a == ratomic_algorithm::RATOMIC_ALGORITHM_TOKEN_BUCKET as u32 => {
            Rule::token_bucket(Quota::from_rate(rate)?)
        }
        a if a == ratomic_algorithm::RATOMIC_ALGORITHM_FIXED_WINDOW as u32 => Rule::fixed_window(rate)?,
        a if a == ratomic_algorithm::RATOMIC_ALGORITHM_SLIDING_WINDOW as u32 => Rule::sliding_window(rate)?,
        value => return Err(Failure::UnknownValue { name: "algorithm", value }),
    };
    Ok((name.to_owned(), rule))
}

/// Makes a limiter of several named limits on each key — say a burst of
/// `"10/s"` and `"1000/day"` — decided all or nothing: a call passes only if
/// every limit allows it, and only then is every limit charged. One key
/// lookup serves all limits. `limits` is an array of `count` specs
/// (1 ≤ count ≤ 16).
///
/// Use it with every operation (`ratomic_allow`, `ratomic_peek`, …: the
/// decision is the tightest limit's) and with `ratomic_allow_detailed` to
/// learn which limit denied.
///
/// `options` may be NULL. On `RATOMIC_OK`, `*out` is a new limiter.
///
/// Errors: `RATOMIC_NULL_ARGUMENT` (limits, a name or rate, out),
/// `RATOMIC_INVALID_RATE`, `RATOMIC_INVALID_ARGUMENT` (count 0 or above 16,
/// an empty, duplicate or non-UTF-8 name, an unknown algorithm, an option).
///
/// Ownership: the specs and their strings are copied; the caller owns
/// `*out` and must release it with `ratomic_limiter_free`. Thread-safety:
/// safe from any thread.
///
/// # Safety
/// `limits` must point to `count` readable specs with NUL-terminated
/// strings; `options`, if non-NULL, a valid `ratomic_options`; `out` valid
/// for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_multi_limiter_new(
    limits: *const ratomic_limit_spec,
    count: usize,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        if limits.is_null() {
            return Err(Failure::Null("limits"));
        }
        if count == 0 || count > MAX_LIMITS {
            return Err(Failure::Core(Error::InvalidArgument {
                name: "count",
                value: count.to_string(),
                reason: "a multi-limit limiter holds between 1 and 16 limits".into(),
            }));
        }
        // SAFETY: non-NULL; the caller guarantees `count` (≤ 16) readable specs.
        let specs = unsafe { std::slice::from_raw_parts(limits, count) };
        // SAFETY: forwarded from the caller.
        let o = unsafe { Resolved::from_ptr(options) };
        let mut builder = Limiter::builder();
        let mut names = Vec::with_capacity(count);
        for spec in specs {
            // SAFETY: forwarded from the caller.
            let (name, rule) = unsafe { rule(spec) }?;
            // SAFETY: `str_arg` above checked it is non-NULL and NUL-terminated.
            names.push(unsafe { CStr::from_ptr(spec.name) }.to_owned());
            builder = builder.limit(name, rule);
        }
        if let Some(n) = o.max_keys {
            builder = builder.max_keys(n);
        }
        if let Some(n) = o.max_key_len {
            builder = builder.max_key_len(n);
        }
        let limiter = builder.build()?;
        let multi = Multi { limiter, names: names.into_boxed_slice() };
        // SAFETY: `out` was checked above.
        unsafe { ratomic_limiter::hand_out(Kind::Multi(multi), o.clock, out) };
        Ok(())
    })
}

/// Writes the number of limits in `limiter` to `*out`: the size of the
/// entries array `ratomic_allow_detailed` needs. 1 for a token bucket or
/// window limiter.
///
/// Errors: `RATOMIC_NULL_ARGUMENT`, `RATOMIC_PANIC`.
///
/// Ownership: borrows `limiter`. Thread-safety: safe from any thread.
///
/// # Safety
/// `limiter` must be a live limiter; `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_limit_count(limiter: *const ratomic_limiter, out: *mut usize) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let out = out_ptr(out, "out")?;
        // SAFETY: checked non-NULL; writable as the caller guarantees.
        unsafe { write_out(out, limit_count(l)) };
        Ok(())
    })
}

fn limit_count(l: &ratomic_limiter) -> usize {
    match &l.kind {
        Kind::Multi(m) => m.names.len(),
        _ => 1,
    }
}

/// Allow or peek with one entry per limit.
///
/// # Safety
/// As the public functions that call it.
#[allow(clippy::too_many_arguments)] // the C signature, flattened
unsafe fn detailed(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now: Option<u64>,
    consume: bool,
    decision: *mut ratomic_decision,
    entries: *mut ratomic_limit_decision,
    entries_cap: usize,
    entries_len: *mut usize,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let decision = out_ptr(decision, "decision")?;
        let entries = out_ptr(entries, "entries")?;
        let entries_len = out_ptr(entries_len, "entries_len")?;
        let need = limit_count(l);
        if entries_cap < need {
            return Err(Failure::BufferTooSmall { need, have: entries_cap });
        }
        // SAFETY: the caller passes `key_len` readable bytes at `key`.
        let key = unsafe { key_arg(key, key_len, l.max_key_len()) }?;
        let now = match now {
            Some(t) => t.min(MAX_NANOS),
            None => l.now(),
        };
        let single = |name: &'static CStr, d: ratomic_core::Decision| {
            // SAFETY: `entries` holds at least `need` = 1 writable entries.
            unsafe { write_out(entries, ratomic_limit_decision { name: name.as_ptr(), decision: d.into() }) };
            d
        };
        let d = match &l.kind {
            Kind::TokenBucket(k) => {
                single(c"token_bucket", if consume { k.allow_at(key, cost, now) } else { k.peek_at(key, cost, now) }?)
            }
            Kind::FixedWindow(k) => {
                single(c"fixed_window", if consume { k.allow_at(key, cost, now) } else { k.peek_at(key, cost, now) }?)
            }
            Kind::SlidingWindow(k) => {
                single(c"sliding_window", if consume { k.allow_at(key, cost, now) } else { k.peek_at(key, cost, now) }?)
            }
            Kind::Multi(m) => {
                let md = if consume { m.limiter.allow_at(key, cost, now) } else { m.limiter.peek_at(key, cost, now) }?;
                // A call on all limits has one entry per limit, in the limiter's order.
                debug_assert_eq!(md.entries().len(), m.names.len());
                for (i, (entry, name)) in md.entries().zip(m.names.iter()).enumerate() {
                    debug_assert_eq!(entry.name.as_bytes(), name.to_bytes());
                    let e = ratomic_limit_decision { name: name.as_ptr(), decision: entry.decision.into() };
                    // SAFETY: i < need <= entries_cap writable entries.
                    unsafe { write_out(entries.add(i), e) };
                }
                md.decision
            }
        };
        // SAFETY: checked non-NULL above; writable as the caller guarantees.
        unsafe {
            write_out(decision, d.into());
            write_out(entries_len, need);
        }
        Ok(())
    })
}

/// `ratomic_allow` that also reports each limit's own answer: writes the
/// combined decision to `*decision`, one entry per limit (in the order the
/// limits were given) to `entries[0 .. *entries_len]`. The limits that
/// denied the call are the entries with `decision.allowed == false`. On a
/// denial nothing is consumed, and each entry is what that limit alone
/// would answer. A single-limit limiter gives one entry named
/// `"token_bucket"`, `"fixed_window"` or `"sliding_window"`.
///
/// `entries_cap` is the size of `entries`; it must be at least
/// `ratomic_limit_count` (else `RATOMIC_BUFFER_TOO_SMALL`, nothing written,
/// nothing consumed).
///
/// Errors: as `ratomic_allow`, plus `RATOMIC_BUFFER_TOO_SMALL`.
///
/// Ownership: the caller owns the arrays; each entry's `name` is borrowed
/// from the limiter (valid until it is freed). Thread-safety: safe from many
/// threads at once.
///
/// # Safety
/// As `ratomic_allow`; `entries` must hold `entries_cap` writable entries;
/// `entries_len` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_allow_detailed(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    decision: *mut ratomic_decision,
    entries: *mut ratomic_limit_decision,
    entries_cap: usize,
    entries_len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { detailed(limiter, key, key_len, cost, None, true, decision, entries, entries_cap, entries_len) }
}

/// `ratomic_allow_detailed` at time `now_ns` (nanoseconds; see
/// `ratomic_allow_at`).
///
/// # Safety
/// As `ratomic_allow_detailed`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_allow_detailed_at(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ns: u64,
    decision: *mut ratomic_decision,
    entries: *mut ratomic_limit_decision,
    entries_cap: usize,
    entries_len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { detailed(limiter, key, key_len, cost, Some(now_ns), true, decision, entries, entries_cap, entries_len) }
}

/// `ratomic_allow_detailed` that changes nothing (as `ratomic_peek`).
///
/// # Safety
/// As `ratomic_allow_detailed`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_peek_detailed(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    decision: *mut ratomic_decision,
    entries: *mut ratomic_limit_decision,
    entries_cap: usize,
    entries_len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { detailed(limiter, key, key_len, cost, None, false, decision, entries, entries_cap, entries_len) }
}

/// `ratomic_peek_detailed` at time `now_ns` (nanoseconds).
///
/// # Safety
/// As `ratomic_allow_detailed`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_peek_detailed_at(
    limiter: *const ratomic_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    now_ns: u64,
    decision: *mut ratomic_decision,
    entries: *mut ratomic_limit_decision,
    entries_cap: usize,
    entries_len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { detailed(limiter, key, key_len, cost, Some(now_ns), false, decision, entries, entries_cap, entries_len) }
}
