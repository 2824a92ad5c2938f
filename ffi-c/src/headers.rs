//! HTTP header fields and problem bodies from a decision: core's
//! `ratomic::headers`, written into the caller's buffer. Nothing is
//! formatted here.

use std::ffi::{c_char, CStr};
use std::time::Duration;

use ratomic_core::headers::{Headers, Policy};
use ratomic_core::{Algorithm, Decision};

use crate::boundary::{arg_ref, str_arg, write_out, Failure};
use crate::decision::{ratomic_decision, ratomic_limit_decision};
use crate::direct::ratomic_direct;
use crate::handle::{ratomic_limiter, Engine};
use crate::result::ratomic_result;
use crate::stack::ratomic_stack;

/// The decision argument of a header function, as core's.
///
/// # Safety
/// `decision` NULL or readable.
unsafe fn decision_arg(decision: *const ratomic_decision) -> Result<Decision, Failure> {
    // SAFETY: the caller passes a readable decision or NULL.
    Ok(core(unsafe { arg_ref(decision, "decision") }?))
}

/// Core's decision from C's.
fn core(d: &ratomic_decision) -> Decision {
    Decision {
        allowed: d.allowed,
        remaining: d.remaining,
        limit: d.limit,
        retry_after: Duration::from_nanos(d.retry_after_ns),
        reset_after: Duration::from_nanos(d.reset_after_ns),
    }
}

/// Runs `f` on the headers of `decision` (and, for a multi-limit limiter,
/// its `entries`), then copies what `f` returns into `buf` as a
/// NUL-terminated string; `*len` gets its length without the NUL.
///
/// # Safety
/// As the public functions that call it.
#[allow(clippy::too_many_arguments)] // the C signature, flattened
unsafe fn write_headers(
    limiter: *const ratomic_limiter,
    name: *const c_char,
    decision: *const ratomic_decision,
    entries: *const ratomic_limit_decision,
    entries_len: usize,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
    f: impl FnOnce(&Headers<'_>) -> String,
) -> ratomic_result {
    // SAFETY: forwarded from the caller (`name` to `single`, `entries` to `named_entries`).
    unsafe {
        write_text(limiter, "limiter", buf, buf_len, len, |l| {
            let d = decision_arg(decision)?;
            let rules = match &l.engine {
                Engine::Redis(_) => return Err(Failure::Unsupported("headers of a Redis-backed limiter: not yet")),
                Engine::Postgres(_) => {
                    return Err(Failure::Unsupported("headers of a PostgreSQL-backed limiter: not yet"))
                }
                _ => l.rules(),
            };
            if let [rule] = rules {
                return single(name, rule, d, f); // `name`: forwarded from the caller
            }
            // Several: the limits the call was subject to, from its entries.
            let policies = l
                .names
                .iter()
                .zip(rules)
                .map(|(n, r)| Policy::of(n.to_str().unwrap_or(""), r))
                .collect::<ratomic_core::Result<Vec<_>>>()?;
            named_entries(&policies, "limit of this limiter", entries, entries_len, d, f)
            // `entries`: as `name`
        })
    }
}

/// The shape every text function shares (the headers, the problem
/// documents, the descriptions): reads the handle (`what` names it in the
/// NULL error), runs `text` on it (which reads the decision, if any), checks
/// `len`, and copies the text into `buf` as a NUL-terminated string, its
/// length without the NUL to `*len`.
///
/// # Safety
/// `handle` NULL or live; `buf` NULL or `buf_len` writable bytes; `len`
/// NULL or valid for writes.
unsafe fn write_text<T>(
    handle: *const T,
    what: &'static str,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
    text: impl FnOnce(&T) -> Result<String, Failure>,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live handle or NULL.
        let h = unsafe { arg_ref(handle, what) }?;
        let text = text(h)?;
        let len = crate::boundary::out_ptr(len, "len")?;
        // SAFETY: forwarded from the caller; `len` was checked above.
        unsafe { copy_out(&text, buf, buf_len, len) }
    })
}

/// The text `f` makes of the headers of a decision `d` with `entries`
/// (`entries_len` of them, as a detailed call wrote them), each entry's
/// name that of one of `policies` (`what` says what they are, for the
/// error naming an entry that matches none).
///
/// # Safety
/// `entries` NULL or `entries_len` readable entries, each `name`
/// NUL-terminated.
unsafe fn named_entries(
    policies: &[Policy],
    what: &str,
    entries: *const ratomic_limit_decision,
    entries_len: usize,
    d: Decision,
    f: impl FnOnce(&Headers<'_>) -> String,
) -> Result<String, Failure> {
    // SAFETY: the caller passes `entries_len` readable entries or NULL.
    let entries = unsafe { arg_ref(entries, "entries") }? as *const ratomic_limit_decision;
    let mut parts = Vec::with_capacity(entries_len);
    for i in 0..entries_len {
        // SAFETY: `i < entries_len` entries are readable.
        let e = unsafe { &*entries.add(i) };
        // SAFETY: an entry's name is a NUL-terminated string (the limiter's
        // or stack's own, as the detailed call wrote it).
        let entry_name = unsafe { arg_ref(e.name, "entries[i].name").map(|p| CStr::from_ptr(p)) }?;
        let index = policies.iter().position(|p| p.name().as_bytes() == entry_name.to_bytes()).ok_or_else(|| {
            Failure::Core(ratomic_core::Error::InvalidArgument {
                name: "entries[i].name",
                value: entry_name.to_string_lossy().into_owned(),
                reason: format!("names no {what}").into(),
            })
        })?;
        parts.push((index, core(&e.decision)));
    }
    let h = Headers::from_parts(policies, parts, d)?;
    Ok(f(&h))
}

/// The text `f` makes of the headers of a one-limit decision `d` under
/// `algorithm`, the limit named `name` (NULL: `"default"`).
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string.
unsafe fn single<A: Algorithm>(
    name: *const c_char,
    algorithm: &A,
    d: Decision,
    f: impl FnOnce(&Headers<'_>) -> String,
) -> Result<String, Failure> {
    let name = if name.is_null() {
        "default"
    } else {
        // SAFETY: non-NULL: a NUL-terminated string, as the caller guarantees.
        unsafe { str_arg(name, "name", ratomic_result::RATOMIC_INVALID_ARGUMENT) }?
    };
    let p = Policy::of(name, algorithm)?;
    let h = Headers::single(&p, d);
    Ok(f(&h))
}

/// Copies `text` into `buf` as a NUL-terminated string and writes its
/// length (without the NUL) to `*len`. The text and its NUL must fit; with
/// `buf` NULL and `buf_len` 0 only the length is written.
///
/// # Safety
/// `buf` NULL or `buf_len` writable bytes; `len` checked by `out_ptr`.
unsafe fn copy_out(text: &str, buf: *mut c_char, buf_len: usize, len: *mut usize) -> Result<(), Failure> {
    if !(buf.is_null() && buf_len == 0) {
        if buf.is_null() {
            return Err(Failure::Null("buf"));
        }
        if buf_len < text.len() + 1 {
            return Err(Failure::TextBufferTooSmall { need: text.len() + 1, have: buf_len });
        }
        // SAFETY: `buf` has room for `buf_len` >= text.len() + 1 bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), text.len());
            *buf.add(text.len()) = 0;
        }
    }
    // SAFETY: checked non-NULL by the caller.
    unsafe { write_out(len, text.len()) };
    Ok(())
}

/// [`write_headers`] for a direct bucket: its one limit, named `name`.
///
/// # Safety
/// As the public functions that call it.
unsafe fn write_direct_headers(
    direct: *const ratomic_direct,
    name: *const c_char,
    decision: *const ratomic_decision,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
    f: impl FnOnce(&Headers<'_>) -> String,
) -> ratomic_result {
    // SAFETY: forwarded from the caller (`name` too, to `single`).
    unsafe {
        write_text(direct, "direct", buf, buf_len, len, |b| {
            single(name, b.bucket.algorithm(), decision_arg(decision)?, f)
        })
    }
}

/// Writes the HTTP header fields for `*decision` (a decision this limiter
/// gave) into `buf` as `Name: value\r\n` lines, NUL-terminated, and their
/// length (without the NUL) to `*len`: `RateLimit-Policy` and `RateLimit`
/// (draft-ietf-httpapi-ratelimit-headers-11), `Retry-After` on a denial
/// (whole seconds, rounded up, never 0) and, if `legacy`, the
/// `X-RateLimit-Limit`, `-Remaining` and `-Reset` fields. Formatted by
/// ratomic's core, like every face's.
///
/// A token bucket or window limiter names its limit `name` (NULL:
/// `"default"`); a multi-limit limiter lists each limit of `entries`
/// (`entries_len` of them, as `ratomic_allow_detailed` wrote them; `name`
/// is ignored). With `buf` NULL and `buf_len` 0, only `*len` is written:
/// allocate `*len + 1` bytes and call again.
///
/// @param limiter The limiter that gave the decision.
/// @param name The name of a single-limit limiter's limit, NUL-terminated printable
///     ASCII; NULL for `"default"`; ignored for a multi-limit limiter.
/// @param decision A decision this limiter gave.
/// @param entries A multi-limit limiter's entries, as `ratomic_allow_detailed`
///     wrote them; may be NULL for a single-limit limiter.
/// @param entries_len The number of entries in `entries`.
/// @param legacy Also write the `X-RateLimit-Limit`, `-Remaining` and `-Reset`
///     fields.
/// @param[out] buf Receives the text, NUL-terminated; may be NULL when `buf_len` is
///     0 (to ask for the length).
/// @param buf_len The size of `buf` in bytes.
/// @param[out] len Receives the text's length in bytes, without the NUL.
/// @return `RATOMIC_OK` on success; on an error (`buf` and `*len` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: limiter, decision, len; buf with a non-zero
///     `buf_len`; entries of a multi-limit limiter.
/// @retval RATOMIC_INVALID_ARGUMENT A name that is empty or not printable ASCII,
///     which a Structured Field String cannot carry; an entry naming no limit of
///     this limiter.
/// @retval RATOMIC_BUFFER_TOO_SMALL The message gives the size needed.
/// @retval RATOMIC_OTHER_ERROR A Redis-backed limiter.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @warning `limiter` must be live; `name` NULL or NUL-terminated; `decision`
///     readable; `entries` NULL or `entries_len` readable entries; `buf` NULL or
///     `buf_len` writable bytes; `len` valid for writes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ratomic_headers(
    limiter: *const ratomic_limiter,
    name: *const c_char,
    decision: *const ratomic_decision,
    entries: *const ratomic_limit_decision,
    entries_len: usize,
    legacy: bool,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { write_headers(limiter, name, decision, entries, entries_len, buf, buf_len, len, |h| h.lines(legacy)) }
}

/// Writes the RFC 9457 problem document (JSON, media type
/// `application/problem+json`) for a 429 answering `*decision` into `buf`,
/// NUL-terminated, naming the limits that denied; for an allowed decision
/// it writes the empty string (`*len` 0). Arguments, sizing and errors as
/// `ratomic_headers`.
///
/// @param limiter The limiter that gave the decision.
/// @param name The name of a single-limit limiter's limit, NUL-terminated printable
///     ASCII; NULL for `"default"`; ignored for a multi-limit limiter.
/// @param decision A decision this limiter gave.
/// @param entries A multi-limit limiter's entries, as `ratomic_allow_detailed`
///     wrote them; may be NULL for a single-limit limiter.
/// @param entries_len The number of entries in `entries`.
/// @param[out] buf Receives the text, NUL-terminated; may be NULL when `buf_len` is
///     0 (to ask for the length).
/// @param buf_len The size of `buf` in bytes.
/// @param[out] len Receives the text's length in bytes, without the NUL.
/// @return `RATOMIC_OK` on success; errors as `ratomic_headers`.
///
/// @warning As `ratomic_headers`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ratomic_problem_json(
    limiter: *const ratomic_limiter,
    name: *const c_char,
    decision: *const ratomic_decision,
    entries: *const ratomic_limit_decision,
    entries_len: usize,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe {
        write_headers(limiter, name, decision, entries, entries_len, buf, buf_len, len, |h| {
            h.problem_json().unwrap_or_default()
        })
    }
}

/// Writes the HTTP header fields for `*decision` (a decision this direct
/// bucket gave) into `buf`, exactly as `ratomic_headers` does for a token
/// bucket limiter: `RateLimit-Policy` and `RateLimit` naming the limit
/// `name` (NULL: `"default"`), `Retry-After` on a denial and, if `legacy`,
/// the `X-RateLimit-*` fields; `*len` gets the length without the NUL.
/// With `buf` NULL and `buf_len` 0, only `*len` is written.
///
/// @param direct The bucket that gave the decision.
/// @param name The limit's name for the header fields, NUL-terminated printable
///     ASCII; NULL for `"default"`.
/// @param decision A decision this bucket gave.
/// @param legacy Also write the `X-RateLimit-Limit`, `-Remaining` and `-Reset`
///     fields.
/// @param[out] buf Receives the text, NUL-terminated; may be NULL when `buf_len` is
///     0 (to ask for the length).
/// @param buf_len The size of `buf` in bytes.
/// @param[out] len Receives the text's length in bytes, without the NUL.
/// @return `RATOMIC_OK` on success; on an error (`buf` and `*len` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: direct, decision, len; buf with a non-zero
///     `buf_len`.
/// @retval RATOMIC_INVALID_ARGUMENT A name that is empty or not printable ASCII.
/// @retval RATOMIC_BUFFER_TOO_SMALL The message gives the size needed.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @warning `direct` must be live; `name` NULL or NUL-terminated; `decision`
///     readable; `buf` NULL or `buf_len` writable bytes; `len` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_headers(
    direct: *const ratomic_direct,
    name: *const c_char,
    decision: *const ratomic_decision,
    legacy: bool,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { write_direct_headers(direct, name, decision, buf, buf_len, len, |h| h.lines(legacy)) }
}

/// Writes the RFC 9457 problem document (JSON) for a 429 answering
/// `*decision` (a decision this direct bucket gave) into `buf`, as
/// `ratomic_problem_json` does; for an allowed decision, the empty string
/// (`*len` 0). Arguments, sizing and errors as `ratomic_direct_headers`.
///
/// @param direct The bucket that gave the decision.
/// @param name The limit's name for the header fields, NUL-terminated printable
///     ASCII; NULL for `"default"`.
/// @param decision A decision this bucket gave.
/// @param[out] buf Receives the text, NUL-terminated; may be NULL when `buf_len` is
///     0 (to ask for the length).
/// @param buf_len The size of `buf` in bytes.
/// @param[out] len Receives the text's length in bytes, without the NUL.
/// @return `RATOMIC_OK` on success; errors as `ratomic_direct_headers`.
///
/// @warning As `ratomic_direct_headers`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_problem_json(
    direct: *const ratomic_direct,
    name: *const c_char,
    decision: *const ratomic_decision,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { write_direct_headers(direct, name, decision, buf, buf_len, len, |h| h.problem_json().unwrap_or_default()) }
}

/// Runs `f` on the headers of a stack's `decision` and its `entries`, then
/// copies the text into `buf` as the other header functions do.
///
/// # Safety
/// As the public functions that call it.
#[allow(clippy::too_many_arguments)] // the C signature, flattened
unsafe fn write_stack_headers(
    stack: *const ratomic_stack,
    decision: *const ratomic_decision,
    entries: *const ratomic_limit_decision,
    entries_len: usize,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
    f: impl FnOnce(&Headers<'_>) -> String,
) -> ratomic_result {
    // SAFETY: forwarded from the caller (`entries` too, to `named_entries`).
    unsafe {
        write_text(stack, "stack", buf, buf_len, len, |s| {
            let d = decision_arg(decision)?;
            named_entries(&s.policies()?, "member of this stack", entries, entries_len, d, f)
        })
    }
}

/// Writes the HTTP header fields for `*decision` and its `entries` (as
/// `ratomic_stack_allow` wrote them) into `buf`, as `ratomic_headers` does
/// for a multi-limit limiter: one `RateLimit-Policy` and `RateLimit` item
/// per member, named as the member, `Retry-After` on a denial and, if
/// `legacy`, the `X-RateLimit-*` fields of the combined decision. With `buf`
/// NULL and `buf_len` 0, only `*len` is written.
///
/// @param stack The stack that gave the decision.
/// @param decision A decision this stack gave.
/// @param entries The entries `ratomic_stack_allow` wrote with the decision.
/// @param entries_len The number of entries in `entries`.
/// @param legacy Also write the `X-RateLimit-Limit`, `-Remaining` and `-Reset`
///     fields.
/// @param[out] buf Receives the text, NUL-terminated; may be NULL when `buf_len` is
///     0 (to ask for the length).
/// @param buf_len The size of `buf` in bytes.
/// @param[out] len Receives the text's length in bytes, without the NUL.
/// @return `RATOMIC_OK` on success; on an error (`buf` and `*len` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: stack, decision, entries, len; buf with a non-zero
///     `buf_len`.
/// @retval RATOMIC_INVALID_ARGUMENT A member with several limits, which no one
///     policy describes — the message names it; a member name that is not printable
///     ASCII; an entry naming no member.
/// @retval RATOMIC_BUFFER_TOO_SMALL The message gives the size needed.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @warning `stack` must be live; `decision` readable; `entries` NULL or
///     `entries_len` readable entries; `buf` NULL or `buf_len` writable bytes;
///     `len` valid for writes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ratomic_stack_headers(
    stack: *const ratomic_stack,
    decision: *const ratomic_decision,
    entries: *const ratomic_limit_decision,
    entries_len: usize,
    legacy: bool,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { write_stack_headers(stack, decision, entries, entries_len, buf, buf_len, len, |h| h.lines(legacy)) }
}

/// Writes the RFC 9457 problem document (JSON) for a 429 answering a
/// stack's `*decision` into `buf`, naming the members that denied; for an
/// allowed decision, the empty string (`*len` 0). Arguments, sizing and
/// errors as `ratomic_stack_headers`.
///
/// @param stack The stack that gave the decision.
/// @param decision A decision this stack gave.
/// @param entries The entries `ratomic_stack_allow` wrote with the decision.
/// @param entries_len The number of entries in `entries`.
/// @param[out] buf Receives the text, NUL-terminated; may be NULL when `buf_len` is
///     0 (to ask for the length).
/// @param buf_len The size of `buf` in bytes.
/// @param[out] len Receives the text's length in bytes, without the NUL.
/// @return `RATOMIC_OK` on success; errors as `ratomic_stack_headers`.
///
/// @warning As `ratomic_stack_headers`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_stack_problem_json(
    stack: *const ratomic_stack,
    decision: *const ratomic_decision,
    entries: *const ratomic_limit_decision,
    entries_len: usize,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe {
        write_stack_headers(stack, decision, entries, entries_len, buf, buf_len, len, |h| {
            h.problem_json().unwrap_or_default()
        })
    }
}

/// Writes what `limiter` enforces, with its units, into `buf` as a
/// NUL-terminated string, and its length (without the NUL) to `*len`: for a
/// single rule, `"token bucket 10 per 1s"` (a burst of 10 refilled over
/// one second), `"fixed window 5 per 60ms"` or `"sliding window 100 per
/// 1h"`; for several named limits, `"<name>: <rule>"` for each, in order,
/// joined by `"; "` (`"10/second: token bucket 10 per 1s; 1000/day: token
/// bucket 1000 per 1d"`). A window's period is shown in the largest unit
/// that divides it exactly (`ns`, `us`, `ms`, `s`, `m`, `h` or `d`); a token
/// bucket's in the largest whole unit, down to `ms`, that gives back the
/// same bucket (`"3/s"` shows `per 1s`), or, when none does, as its refill
/// rate: `"token bucket 10, refill 3/s"`. With `buf`
/// NULL and `buf_len` 0, only `*len` is written: allocate `*len + 1` bytes
/// and call again.
///
/// @param limiter The limiter to describe, borrowed for the call.
/// @param[out] buf Receives the text, NUL-terminated; may be NULL when
///     `buf_len` is 0 (to ask for the length).
/// @param buf_len The size of `buf` in bytes.
/// @param[out] len Receives the text's length in bytes, without the NUL.
/// @return `RATOMIC_OK` on success; on an error (`buf` and `*len` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: limiter, len, or buf with a non-zero
///     `buf_len`.
/// @retval RATOMIC_BUFFER_TOO_SMALL `buf_len` is below the text's length + 1
///     (the message gives the size needed).
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: the caller owns `buf`. Thread-safety: safe from any
///     thread.
///
/// @warning `limiter` must be a live limiter; `buf` NULL or `buf_len`
///     writable bytes; `len` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_describe(
    limiter: *const ratomic_limiter,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { write_text(limiter, "limiter", buf, buf_len, len, |l| Ok(l.describe("; "))) }
}

/// Writes what the direct bucket enforces, with its units, into `buf` as a
/// NUL-terminated string, and its length (without the NUL) to `*len`, as
/// `ratomic_describe` does for a limiter: `"token bucket 10 per 1s"` is a
/// burst of 10 refilled over one second. With `buf` NULL and `buf_len` 0,
/// only `*len` is written.
///
/// @param direct The bucket to describe, borrowed for the call.
/// @param[out] buf Receives the text, NUL-terminated; may be NULL when
///     `buf_len` is 0 (to ask for the length).
/// @param buf_len The size of `buf` in bytes.
/// @param[out] len Receives the text's length in bytes, without the NUL.
/// @return `RATOMIC_OK` on success; on an error (`buf` and `*len` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: direct, len, or buf with a non-zero
///     `buf_len`.
/// @retval RATOMIC_BUFFER_TOO_SMALL `buf_len` is below the text's length + 1
///     (the message gives the size needed).
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: the caller owns `buf`. Thread-safety: safe from any
///     thread.
///
/// @warning `direct` must be a live bucket; `buf` NULL or `buf_len` writable
///     bytes; `len` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_direct_describe(
    direct: *const ratomic_direct,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { write_text(direct, "direct", buf, buf_len, len, |b| Ok(b.describe())) }
}

/// Writes what the stack enforces into `buf` as a NUL-terminated string,
/// and its length (without the NUL) to `*len`: `"<name>: <member>"` for
/// each member, in order, joined by `"; "`, each member as
/// `ratomic_describe` or `ratomic_direct_describe` writes it, a member with
/// several limits in brackets with its limits joined by `", "`
/// (`"ip: token bucket 10 per 1s; user: [burst: token bucket 2 per 1s,
/// daily: fixed window 1000 per 1d]"`). With `buf` NULL and `buf_len` 0,
/// only `*len` is written.
///
/// @param stack The stack to describe, borrowed for the call.
/// @param[out] buf Receives the text, NUL-terminated; may be NULL when
///     `buf_len` is 0 (to ask for the length).
/// @param buf_len The size of `buf` in bytes.
/// @param[out] len Receives the text's length in bytes, without the NUL.
/// @return `RATOMIC_OK` on success; on an error (`buf` and `*len` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: stack, len, or buf with a non-zero
///     `buf_len`.
/// @retval RATOMIC_BUFFER_TOO_SMALL `buf_len` is below the text's length + 1
///     (the message gives the size needed).
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: the caller owns `buf`. Thread-safety: safe from any
///     thread.
///
/// @warning `stack` must be a live stack; `buf` NULL or `buf_len` writable
///     bytes; `len` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_stack_describe(
    stack: *const ratomic_stack,
    buf: *mut c_char,
    buf_len: usize,
    len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { write_text(stack, "stack", buf, buf_len, len, |s| Ok(s.describe())) }
}
