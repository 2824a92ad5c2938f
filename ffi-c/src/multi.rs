//! Several named limits on one key, decided all or nothing, and the
//! detailed decision that says which limit denied.

use std::ffi::{c_char, CStr, CString};

use ratomic_core::{Error, Limiter, Rate, Rule};

use crate::boundary::{arg_ref, key_arg, out_ptr, str_arg, write_out, Failure};
use crate::decision::{ratomic_decision, ratomic_limit_decision};
use crate::handle::{ratomic_limiter, Engine};
use crate::ops::RATOMIC_MAX_LIMITS;
use crate::options::{ratomic_options, Resolved};
use crate::result::ratomic_result;
use crate::rule::ratomic_algorithm;

/// One named limit for `ratomic_multi_limiter_new`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratomic_limit_spec {
    /// The limit's name: NUL-terminated UTF-8, non-empty, unique in the
    /// limiter. Copied; the caller keeps ownership.
    pub name: *const c_char,
    /// The rate string, e.g. `"10/s"`, `"1000/day"`, in the syntax of
    /// `ratomic_token_bucket_from_rate`. Copied.
    pub rate: *const c_char,
    /// A `ratomic_algorithm` value (a plain integer so that any value from C
    /// is safe to pass: unknown ones give `RATOMIC_INVALID_ARGUMENT`).
    pub algorithm: u32,
}

/// Makes a limiter of several named limits on each key — say a burst of
/// `"10/s"` and `"1000/day"` — decided all or nothing: a call passes only if
/// every limit allows it, and only then is every limit charged; otherwise
/// none is. Under concurrency a call may be denied spuriously while another
/// call's tokens are being given back, but no limit ever grants more than
/// it allows alone. One key lookup serves all limits. `limits` is an array
/// of `count` specs (1 ≤ count ≤ 16); each window's range is as in
/// `ratomic_fixed_window_new` / `ratomic_sliding_window_new`.
///
/// Use it with every operation (`ratomic_allow`, `ratomic_peek`, …: the
/// decision is the combined one: `remaining` the smallest, `retry_after_ns`
/// the largest among the limits that deny, `reset_after_ns` the largest,
/// `limit` that of the limit with the least remaining) and with
/// `ratomic_allow_detailed` to learn which limit denied.
///
/// `options` may be NULL. On `RATOMIC_OK`, `*out` is a new limiter; on any
/// error `*out` is untouched.
///
/// @param limits An array of `count` limit specs, copied.
/// @param count The number of limits, 1 to `RATOMIC_MAX_LIMITS` (16).
/// @param options Construction options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: limits, a name or rate, out.
/// @retval RATOMIC_INVALID_RATE A malformed or non-UTF-8 rate.
/// @retval RATOMIC_INVALID_ARGUMENT Count 0 or above 16; an empty, duplicate or
///     non-UTF-8 name; an unknown algorithm; a window limit above its window's
///     largest; an option out of range.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: the specs and their strings are copied; the caller owns `*out`
///     and must release it with `ratomic_limiter_free`. Thread-safety: safe from
///     any thread.
///
/// @warning `limits` must point to `count` readable specs with NUL-terminated
///     strings; `options`, if non-NULL, a valid `ratomic_options`; `out` valid for
///     writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_multi_limiter_new(
    limits: *const ratomic_limit_spec,
    count: usize,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let (rules, names) = unsafe { specs_arg(limits, count) }?;
        // SAFETY: forwarded from the caller.
        let o = unsafe { Resolved::from_ptr(options) }?;
        let builder = rules.into_iter().fold(Limiter::builder(), |b, (name, rule)| b.limit(name, rule));
        let limiter = builder.clock(o.clock).options(o.options).build()?;
        // SAFETY: `out` was checked above.
        unsafe { ratomic_limiter::hand_out(Engine::Many(std::sync::Arc::new(limiter)), names.into_boxed_slice(), out) };
        Ok(())
    })
}

/// Makes a limiter of several token buckets on each key from one string in
/// the notation of Python's `limits` (slowapi, Flask-Limiter):
/// `"10/second;1000/day"` is a burst of 10 refilled over a second and 1000
/// over a day, decided all or nothing as by `ratomic_multi_limiter_new`.
/// The rates are separated by `;`, `,` or `|`, each in the syntax of
/// `ratomic_token_bucket_from_rate`, and each limit is named by its rate as
/// written, trimmed (`"10/second"`, `"1000/day"`): the names
/// `ratomic_allow_detailed`, `ratomic_limit_get` and the header functions
/// report. Empty pieces are skipped. One rate alone makes a one-limit
/// limiter named by it. For windows, or other names, use
/// `ratomic_multi_limiter_new`.
///
/// @param limits The rates, NUL-terminated UTF-8, e.g. `"10/second;1000/day"`;
///     1 to `RATOMIC_MAX_LIMITS` (16) of them; only read during the call.
/// @param options Construction options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it
///     with `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; on an error (`*out` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: limits, out.
/// @retval RATOMIC_INVALID_RATE A rate that does not parse (the message
///     quotes it and says why), a string with no rate, or one not UTF-8.
/// @retval RATOMIC_INVALID_ARGUMENT The same rate twice; more than 16 rates;
///     an option out of range.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: the caller owns `*out` and must release it with
///     `ratomic_limiter_free`. Thread-safety: safe from any thread.
///
/// @warning `limits` must be a NUL-terminated string; `options`, if non-NULL,
///     a valid `ratomic_options`; `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_multi_limiter_from_rates(
    limits: *const c_char,
    options: *const ratomic_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let limits = unsafe { str_arg(limits, "limits", ratomic_result::RATOMIC_INVALID_RATE) }?;
        let rules = ratomic_core::parse_limits(limits)?;
        if rules.len() > RATOMIC_MAX_LIMITS {
            return Err(Failure::Core(Error::InvalidArgument {
                name: "limits",
                value: format!("{limits:?}"),
                reason: format!(
                    "holds {} rates; a multi-limit limiter holds between 1 and {RATOMIC_MAX_LIMITS}",
                    rules.len()
                )
                .into(),
            }));
        }
        // Names come from a C string, so they hold no NUL.
        let names = rules.iter().map(|(name, _)| CString::new(name.as_str())).collect::<Result<Vec<_>, _>>();
        let names = names.map_err(|_| Failure::Unsupported("a rate name with a NUL byte"))?;
        // SAFETY: forwarded from the caller.
        let o = unsafe { Resolved::from_ptr(options) }?;
        let builder = rules.into_iter().fold(Limiter::builder(), |b, (name, rule)| b.limit(name, rule));
        let limiter = builder.clock(o.clock).options(o.options).build()?;
        // SAFETY: `out` was checked above.
        unsafe { ratomic_limiter::hand_out(Engine::Many(std::sync::Arc::new(limiter)), names.into_boxed_slice(), out) };
        Ok(())
    })
}

/// Named rules (with the names C sees): the specs as the engine takes them.
pub(crate) type NamedRules = (Vec<(String, Rule)>, Vec<CString>);

/// The `count` specs at `limits`, parsed: 1 to `RATOMIC_MAX_LIMITS` (16), each name and rate a
/// UTF-8 string, each algorithm known.
///
/// # Safety
/// A non-NULL `limits` must point to `count` readable specs whose non-NULL
/// strings are NUL-terminated.
pub(crate) unsafe fn specs_arg(limits: *const ratomic_limit_spec, count: usize) -> Result<NamedRules, Failure> {
    if limits.is_null() {
        return Err(Failure::Null("limits"));
    }
    if count == 0 || count > RATOMIC_MAX_LIMITS {
        return Err(Failure::Core(Error::InvalidArgument {
            name: "count",
            value: count.to_string(),
            reason: format!("a multi-limit limiter holds between 1 and {RATOMIC_MAX_LIMITS} limits").into(),
        }));
    }
    // SAFETY: non-NULL; the caller guarantees `count` (≤ 16) readable specs.
    let specs = unsafe { std::slice::from_raw_parts(limits, count) };
    let mut rules = Vec::with_capacity(count);
    let mut names = Vec::with_capacity(count);
    for spec in specs {
        // SAFETY: forwarded from the caller.
        let name = unsafe { str_arg(spec.name, "name", ratomic_result::RATOMIC_INVALID_ARGUMENT) }?;
        // SAFETY: forwarded from the caller.
        let rate = unsafe { str_arg(spec.rate, "rate", ratomic_result::RATOMIC_INVALID_RATE) }?;
        rules.push((name.to_owned(), ratomic_algorithm::from_code(spec.algorithm)?.rule(Rate::parse(rate)?)?));
        // SAFETY: `str_arg` above checked it is non-NULL and NUL-terminated.
        names.push(unsafe { CStr::from_ptr(spec.name) }.to_owned());
    }
    Ok((rules, names))
}

/// Writes the number of limits in `limiter` to `*out`: the size of the
/// entries array `ratomic_allow_detailed` needs, and the indices
/// `ratomic_limit_get` accepts. 1 for a token bucket or window limiter.
///
/// @param limiter The limiter, borrowed for the call.
/// @param[out] out Receives the number of limits, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; on an error (`*out` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: limiter, out.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: borrows `limiter`. Thread-safety: safe from any thread.
///
/// @warning `limiter` must be a live limiter; `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_limit_count(limiter: *const ratomic_limiter, out: *mut usize) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let out = out_ptr(out, "out")?;
        // SAFETY: checked non-NULL; writable as the caller guarantees.
        unsafe { write_out(out, l.names.len()) };
        Ok(())
    })
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
        let need = l.names.len();
        if entries_cap < need {
            return Err(Failure::BufferTooSmall { need, have: entries_cap });
        }
        // SAFETY: the caller passes `key_len` readable bytes at `key`.
        let key = unsafe { key_arg(key, key_len, l.max_key_len()) }?;
        let now = crate::boundary::now_arg(now)?;
        let entry = |index: usize, d: ratomic_core::Decision| {
            let e = ratomic_limit_decision { name: l.names[index].as_ptr(), decision: d.into() };
            // SAFETY: index < need <= entries_cap writable entries.
            unsafe { write_out(entries.add(index), e) };
        };
        if let Engine::Postgres(p) = &l.engine {
            let md = p.decide(key, cost, now, consume)?;
            md.entries().enumerate().for_each(|(i, (_, d))| entry(i, d));
            // SAFETY: checked non-NULL above; writable as the caller guarantees.
            unsafe {
                ratomic_decision::write(decision, md.decision);
                write_out(entries_len, need);
            }
            return Ok(());
        }
        if let Engine::Redis(r) = &l.engine {
            let md = r.decide(key, cost, now, consume)?;
            md.entries().enumerate().for_each(|(i, (_, d))| entry(i, d));
            // SAFETY: checked non-NULL above; writable as the caller guarantees.
            unsafe {
                ratomic_decision::write(decision, md.decision);
                write_out(entries_len, need);
            }
            return Ok(());
        }
        let now = now.unwrap_or_else(|| l.now());
        let d = with_engine!(l,
            k => {
                let d = if consume { k.allow_at(key, cost, now) } else { k.peek_at(key, cost, now) }?;
                entry(0, d);
                d
            },
            m => {
                let md = if consume { m.allow_at(key, cost, now) } else { m.peek_at(key, cost, now) }?;
                // A call on all limits has one entry per limit.
                for e in md.entries() {
                    entry(e.index, e.decision);
                }
                md.decision
            }
        );
        // SAFETY: checked non-NULL above; writable as the caller guarantees.
        unsafe {
            ratomic_decision::write(decision, d);
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
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @param[out] entries An array of `entries_cap` entries; receives one entry per
///     limit.
/// @param entries_cap The size of `entries`, at least `ratomic_limit_count`.
/// @param[out] entries_len Receives the number of entries written.
/// @return `RATOMIC_OK` on success; errors (nothing consumed, nothing written): as
///     `ratomic_allow` (with `RATOMIC_NULL_ARGUMENT` also for entries and
///     entries_len), plus `RATOMIC_BUFFER_TOO_SMALL`.
///
/// @note Ownership: the caller owns the arrays; each entry's `name` is borrowed
///     from the limiter (valid until it is freed). Thread-safety: safe from many
///     threads at once.
///
/// @warning As `ratomic_allow`; `entries` must hold `entries_cap` writable entries;
///     `entries_len` valid for writes.
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
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @param[out] entries An array of `entries_cap` entries; receives one entry per
///     limit.
/// @param entries_cap The size of `entries`, at least `ratomic_limit_count`.
/// @param[out] entries_len Receives the number of entries written.
/// @return `RATOMIC_OK` on success; errors as `ratomic_allow_detailed`;
///     `RATOMIC_INVALID_ARGUMENT` when `now_ns` is above `RATOMIC_MAX_TIME`.
///
/// @warning As `ratomic_allow_detailed`.
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
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @param[out] entries An array of `entries_cap` entries; receives one entry per
///     limit.
/// @param entries_cap The size of `entries`, at least `ratomic_limit_count`.
/// @param[out] entries_len Receives the number of entries written.
/// @return `RATOMIC_OK` on success; errors as `ratomic_allow_detailed`.
///
/// @warning As `ratomic_allow_detailed`.
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
/// @param limiter The limiter, borrowed for the call.
/// @param key The key's bytes (any bytes, not NUL-terminated); may be NULL when
///     `key_len` is 0.
/// @param key_len The key's length in bytes, at most the limiter's `max_key_len`
///     (checked before `key` is read).
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @param[out] entries An array of `entries_cap` entries; receives one entry per
///     limit.
/// @param entries_cap The size of `entries`, at least `ratomic_limit_count`.
/// @param[out] entries_len Receives the number of entries written.
/// @return `RATOMIC_OK` on success; errors as `ratomic_allow_detailed_at`.
///
/// @warning As `ratomic_allow_detailed`.
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
