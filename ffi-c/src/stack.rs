//! Limiters on different keys, all or nothing: core's `Stack` behind its
//! own handle (`ratomic_stack`), for "per IP and per user and global" in one
//! call.

use std::ffi::{c_char, CString};
use std::sync::Arc;
use std::time::Duration;

use ratomic_core::{MultiDecision, Stack, StackMember};

use crate::boundary::{arg_ref, out_ptr, str_arg, write_out, Failure};
use crate::decision::{ratomic_decision, ratomic_limit_decision};
use crate::direct::ratomic_direct;
use crate::handle::{ratomic_limiter, Engine};
use crate::ops::RATOMIC_NO_TIMEOUT;
use crate::options::{ratomic_options, FfiClock, Resolved};
use crate::result::ratomic_result;

/// Limiters on different keys (per IP, per user, global), all or nothing:
/// a call passes only if every member allows its own key, and then every
/// member is charged; otherwise none is. Opaque: made by
/// `ratomic_stack_new` (members that are all `ratomic_limiter`s) or
/// `ratomic_stack_new_members` (any mix of `ratomic_limiter`s and keyless
/// `ratomic_direct` buckets), released with `ratomic_stack_free`.
///
/// The stack holds its members: freeing a member's `ratomic_limiter` or
/// `ratomic_direct` while the stack lives is safe (the stack keeps it alive
/// until `ratomic_stack_free`).
///
/// Thread-safety: every operation is safe from many threads at once, except
/// `ratomic_stack_free`, which must not race with any other use.
pub struct ratomic_stack {
    stack: Stack<FfiClock>,
    /// The member names, NUL-terminated for the entries' `name` pointers.
    names: Box<[CString]>,
    /// Each member's rules, as `ratomic_describe` writes them (a stack
    /// member does not keep its handle's names).
    members: Box<[String]>,
}

impl ratomic_stack {
    /// What `ratomic_stack_describe` writes.
    pub(crate) fn describe(&self) -> String {
        self.names
            .iter()
            .zip(&self.members)
            .map(|(name, m)| format!("{}: {m}", name.to_string_lossy()))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// One header policy per member (an error naming a `Limiter` member).
    pub(crate) fn policies(&self) -> ratomic_core::Result<Vec<ratomic_core::headers::Policy>> {
        self.stack.policies()
    }
}

impl std::fmt::Debug for ratomic_stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ratomic_stack").field("names", &self.names).finish_non_exhaustive()
    }
}

/// One key of a stack call: member `i` is asked about `keys[i]`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratomic_key {
    /// The key's bytes (any bytes); may be NULL only when `key_len` is 0.
    pub key: *const u8,
    /// The key's length in bytes.
    pub key_len: usize,
}

/// One member of a stack, for `ratomic_stack_new_members`: a name and
/// exactly one of `limiter` (a keyed limiter of any kind) or `direct` (a
/// keyless bucket, whose key in every stack call is ignored); the other is
/// NULL. With designated initializers:
/// `{.name = "ip", .limiter = per_ip}`, `{.name = "global", .direct = all}`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratomic_stack_member {
    /// The member's name, NUL-terminated UTF-8, distinct within the stack:
    /// the `name` of its entries. Copied by the constructor.
    pub name: *const c_char,
    /// A keyed limiter, or NULL when `direct` is set.
    pub limiter: *const ratomic_limiter,
    /// A keyless bucket, or NULL when `limiter` is set.
    pub direct: *const ratomic_direct,
}

/// A member limiter as core's stack member (sharing the handle's limiter).
/// A limiter as a stack member, with its description: a member with
/// several limits in brackets, its limits joined by `", "` (the members
/// themselves are joined by `"; "`).
fn member(l: &ratomic_limiter) -> Result<(Arc<dyn StackMember>, String), Failure> {
    let member: Arc<dyn StackMember> = match &l.engine {
        Engine::One(k) => k.clone(),
        Engine::Many(m) => m.clone(),
        Engine::Redis(_) => return Err(Failure::Unsupported("a Redis-backed limiter cannot be a stack member")),
        Engine::Postgres(_) => {
            return Err(Failure::Unsupported("a PostgreSQL-backed limiter cannot be a stack member"))
        }
    };
    let text = match l.rules() {
        [_] => l.describe("; "),
        _ => format!("[{}]", l.describe(", ")),
    };
    Ok((member, text))
}

/// A stack of `members` on the clock of `options`, handed to C through `out`.
///
/// # Safety
/// `out` must have passed [`out_ptr`]; `options` as [`Resolved::from_ptr`].
unsafe fn make(
    members: impl IntoIterator<Item = Result<(String, (Arc<dyn StackMember>, String)), Failure>>,
    options: *const ratomic_options,
    out: *mut *mut ratomic_stack,
) -> Result<(), Failure> {
    // SAFETY: forwarded from the caller.
    let o = unsafe { Resolved::from_ptr(options) }?;
    let mut builder = Stack::builder().clock(o.clock);
    let (mut c_names, mut texts) = (Vec::new(), Vec::new());
    for m in members {
        let (name, (m, text)) = m?;
        c_names.push(CString::new(name.as_str()).map_err(|_| Failure::Null("names[i]"))?);
        texts.push(text);
        builder = builder.member_dyn(name, m);
    }
    let stack = builder.build()?;
    let handle = Box::into_raw(Box::new(ratomic_stack {
        stack,
        names: c_names.into_boxed_slice(),
        members: texts.into_boxed_slice(),
    }));
    // SAFETY: `out` is non-NULL and writable, as the caller guarantees.
    unsafe { write_out(out, handle) };
    Ok(())
}

/// Makes a stack of `count` members (1 to `RATOMIC_MAX_LIMITS` (16)): member `i` is `members[i]`,
/// named `names[i]` (NUL-terminated UTF-8, distinct). The stack reads the
/// clock of `options` (NULL or no callback: the library's monotonic clock)
/// once per call and passes it to every member, so every member must read
/// the same clock: all on the monotonic clock, or all made with the same
/// `clock` callback and `clock_user_data` as the stack. Only the
/// options' clock fields are read. For a keyless `ratomic_direct` bucket as
/// a member, use `ratomic_stack_new_members`.
///
/// On `RATOMIC_OK`, `*out` is a new stack; on any error it is untouched.
///
/// @param names An array of `count` member names, NUL-terminated UTF-8, distinct;
///     copied.
/// @param members An array of `count` limiters: member `i` is `members[i]`, shared
///     by the stack.
/// @param count The number of members, 1 to `RATOMIC_MAX_LIMITS` (16).
/// @param options Options, or NULL: only the clock fields are read (the clock every
///     member must share).
/// @param[out] out Receives the new stack, only on `RATOMIC_OK`; release it with
///     `ratomic_stack_free`.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: names, members, out, or any entry of either.
/// @retval RATOMIC_INVALID_ARGUMENT Count 0 or above 16, a repeated or non-UTF-8
///     name, a member on another clock than the stack's: the message names it.
/// @retval RATOMIC_OTHER_ERROR A Redis-backed member.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: `names` and `members` are only read during the call; the stack
///     shares each member's limiter, so the caller may free the member handles at
///     any time. The caller owns `*out` and releases it with `ratomic_stack_free`.
///     Thread-safety: safe from any thread.
///
/// @warning `names` must point to `count` NUL-terminated strings and `members` to
///     `count` live limiters; `options`, if non-NULL, a valid `ratomic_options`;
///     `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_stack_new(
    names: *const *const c_char,
    members: *const *const ratomic_limiter,
    count: usize,
    options: *const ratomic_options,
    out: *mut *mut ratomic_stack,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: the caller passes `count` names and members, or NULL.
        let names = unsafe { arg_ref(names, "names") }? as *const *const c_char;
        // SAFETY: as above.
        let members = unsafe { arg_ref(members, "members") }? as *const *const ratomic_limiter;
        let entries = (0..count).map(|i| {
            // SAFETY: `i < count` entries of each array are readable.
            let (name, m) = unsafe { (*names.add(i), *members.add(i)) };
            // SAFETY: the caller passes a NUL-terminated string or NULL.
            let name = unsafe { str_arg(name, "names[i]", ratomic_result::RATOMIC_INVALID_ARGUMENT) }?;
            // SAFETY: the caller passes a live limiter or NULL.
            let m = unsafe { arg_ref(m, "members[i]") }?;
            Ok((name.to_owned(), member(m)?))
        });
        // SAFETY: forwarded from the caller; `out` was checked above.
        unsafe { make(entries, options, out) }
    })
}

/// Makes a stack of `count` members (1 to `RATOMIC_MAX_LIMITS` (16)) that may mix keyed limiters
/// and keyless direct buckets: member `i` is `members[i]`, named
/// `members[i].name` (NUL-terminated UTF-8, distinct), and is
/// `members[i].limiter` or `members[i].direct`, exactly one of them
/// non-NULL. A direct member ignores its key in every stack call (pass
/// `{NULL, 0}`), and counts every call against its one bucket; a stack
/// `reset` or `refund` refills it for everyone. Otherwise as
/// `ratomic_stack_new`: one clock for the stack and every member, all or
/// nothing, only the options' clock fields read.
///
/// On `RATOMIC_OK`, `*out` is a new stack; on any error it is untouched.
///
/// @param members An array of `count` members, each a name and exactly one of
///     `limiter` or `direct`.
/// @param count The number of members, 1 to `RATOMIC_MAX_LIMITS` (16).
/// @param options Options, or NULL: only the clock fields are read (the clock every
///     member must share).
/// @param[out] out Receives the new stack, only on `RATOMIC_OK`; release it with
///     `ratomic_stack_free`.
/// @return `RATOMIC_OK` on success; on an error:
/// @retval RATOMIC_NULL_ARGUMENT NULL: members, out, a member's name, or a member with
///     both `limiter` and `direct` NULL.
/// @retval RATOMIC_INVALID_ARGUMENT Count 0 or above 16, a repeated or non-UTF-8
///     name, a member with both `limiter` and `direct` set, a member on another
///     clock than the stack's: the message names it.
/// @retval RATOMIC_OTHER_ERROR A Redis-backed member.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: `members` (and the names) are only read during the call; the
///     stack shares each member's limiter or bucket, so the caller may free the
///     member handles at any time. The caller owns `*out` and releases it with
///     `ratomic_stack_free`. Thread-safety: safe from any thread.
///
/// @warning `members` must point to `count` readable `ratomic_stack_member`s, each
///     with a NUL-terminated name and live handles; `options`, if non-NULL, a valid
///     `ratomic_options`; `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_stack_new_members(
    members: *const ratomic_stack_member,
    count: usize,
    options: *const ratomic_options,
    out: *mut *mut ratomic_stack,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: the caller passes `count` members, or NULL.
        let members = unsafe { arg_ref(members, "members") }? as *const ratomic_stack_member;
        let entries = (0..count).map(|i| {
            // SAFETY: `i < count` members are readable.
            let m = unsafe { *members.add(i) };
            // SAFETY: the caller passes a NUL-terminated string or NULL.
            let name = unsafe { str_arg(m.name, "members[i].name", ratomic_result::RATOMIC_INVALID_ARGUMENT) }?;
            // SAFETY: the caller passes live handles or NULL.
            let member = match unsafe { (m.limiter.as_ref(), m.direct.as_ref()) } {
                (Some(l), None) => member(l)?,
                (None, Some(d)) => (d.bucket.clone() as Arc<dyn StackMember>, d.describe()),
                (None, None) => return Err(Failure::Null("members[i].limiter (or members[i].direct)")),
                (Some(_), Some(_)) => {
                    return Err(Failure::Core(ratomic_core::Error::InvalidArgument {
                        name: "stack member",
                        value: format!("{name:?}"),
                        reason: "sets both limiter and direct: set exactly one, the other NULL".into(),
                    }))
                }
            };
            Ok((name.to_owned(), member))
        });
        // SAFETY: forwarded from the caller; `out` was checked above.
        unsafe { make(entries, options, out) }
    })
}

/// Releases a stack (the members' limiters live on while other handles or
/// stacks hold them). NULL is accepted and does nothing.
///
/// @param stack The stack to release, or NULL.
///
/// @warning `stack` must be NULL or a pointer from `ratomic_stack_new` not yet
///     freed, and no other call may use it at the same time.
#[no_mangle]
pub unsafe extern "C" fn ratomic_stack_free(stack: *mut ratomic_stack) {
    let _ = ffi_boundary!({
        if !stack.is_null() {
            // SAFETY: made by `Box::into_raw` in `ratomic_stack_new`, not
            // yet freed, as the caller guarantees.
            drop(unsafe { Box::from_raw(stack) });
        }
        Ok(())
    });
}

/// The keys of a call, one per member.
///
/// # Safety
/// `keys` must point to `count` readable `ratomic_key`s, each to its bytes.
unsafe fn keys_arg<'a>(s: &ratomic_stack, keys: *const ratomic_key, count: usize) -> Result<Vec<&'a [u8]>, Failure> {
    if count != s.names.len() {
        return Err(Failure::Core(ratomic_core::Error::InvalidArgument {
            name: "keys",
            value: count.to_string(),
            reason: format!("a stack of {} members needs one key per member", s.names.len()).into(),
        }));
    }
    // SAFETY: the caller passes `count` keys or NULL.
    let keys = unsafe { arg_ref(keys, "keys") }? as *const ratomic_key;
    (0..count)
        .map(|i| {
            // SAFETY: `i < count` keys are readable.
            let k = unsafe { *keys.add(i) };
            if k.key_len == 0 {
                return Ok(&[][..]);
            }
            // SAFETY: the caller passes `key_len` readable bytes; each member
            // checks the length against its own `max_key_len`.
            unsafe { arg_ref(k.key, "keys[i].key") }?;
            // SAFETY: as above.
            Ok(unsafe { std::slice::from_raw_parts(k.key, k.key_len) })
        })
        .collect()
}

/// Writes a stack decision: the combined one and one entry per member.
///
/// # Safety
/// The pointers must have passed `out_ptr`, `entries` with room for every member.
unsafe fn write_multi(
    s: &ratomic_stack,
    md: &MultiDecision<'_>,
    decision: *mut ratomic_decision,
    entries: *mut ratomic_limit_decision,
    entries_len: *mut usize,
) {
    let mut n = 0;
    for e in md.entries() {
        let entry = ratomic_limit_decision { name: s.names[e.index].as_ptr(), decision: e.decision.into() };
        // SAFETY: at most one entry per member, and the caller checked the room.
        unsafe { write_out(entries.add(n), entry) };
        n += 1;
    }
    // SAFETY: as the caller guarantees.
    unsafe {
        write_out(decision, md.decision.into());
        write_out(entries_len, n);
    }
}

/// What a stack call does.
#[derive(Clone, Copy)]
enum Op {
    Allow(u64),
    Peek(u64),
    Acquire(u64, u64),
}

/// Allow, peek or acquire, with the decision and one entry per member.
///
/// # Safety
/// As the public functions that call it.
#[allow(clippy::too_many_arguments)] // the C signature, flattened
unsafe fn decide(
    stack: *const ratomic_stack,
    keys: *const ratomic_key,
    count: usize,
    op: Op,
    now: Option<u64>,
    decision: *mut ratomic_decision,
    entries: *mut ratomic_limit_decision,
    entries_cap: usize,
    entries_len: *mut usize,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live stack or NULL.
        let s = unsafe { arg_ref(stack, "stack") }?;
        let decision = out_ptr(decision, "decision")?;
        let entries = out_ptr(entries, "entries")?;
        let entries_len = out_ptr(entries_len, "entries_len")?;
        let need = s.names.len();
        if entries_cap < need {
            return Err(Failure::BufferTooSmall { need, have: entries_cap });
        }
        // SAFETY: forwarded from the caller.
        let keys = unsafe { keys_arg(s, keys, count) }?;
        let now = crate::boundary::now_arg(now)?;
        let now = || now.unwrap_or_else(|| s.stack.now());
        let md = match op {
            Op::Allow(cost) => s.stack.allow_at(&keys, cost, now())?,
            Op::Peek(cost) => s.stack.peek_at(&keys, cost, now())?,
            Op::Acquire(cost, timeout_ns) => {
                let timeout = (timeout_ns != RATOMIC_NO_TIMEOUT).then(|| Duration::from_nanos(timeout_ns));
                s.stack.acquire(&keys, cost, timeout)?
            }
        };
        // SAFETY: the pointers were checked above; `entries` has room for `need`.
        unsafe { write_multi(s, &md, decision, entries, entries_len) };
        Ok(())
    })
}

/// Takes `cost` from every member, member `i` on `keys[i]` (`count` keys, one
/// per member), all or nothing, at one reading of the stack's clock. Writes
/// the combined decision to `*decision` and one entry per member (in member
/// order, named) to `entries[0 .. *entries_len]`; the members that denied
/// are the entries with `decision.allowed == false`. A denial is
/// `RATOMIC_OK` with `decision->allowed == false`, and charges no member.
///
/// @param stack The stack, borrowed for the call.
/// @param keys An array of `count` keys: member `i` is asked about `keys[i]` (a
///     direct member's key is ignored).
/// @param count The number of keys: the stack's member count.
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @param[out] entries An array of `entries_cap` entries; receives one entry per
///     member.
/// @param entries_cap The size of `entries`, at least the member count.
/// @param[out] entries_len Receives the number of entries written.
/// @return `RATOMIC_OK` on success; on an error (no state changed, outputs
///     untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: stack, keys, decision, entries, entries_len, or a
///     key with a non-zero length.
/// @retval RATOMIC_INVALID_ARGUMENT `count` is not the number of members; the clock
///     read past `RATOMIC_MAX_TIME`.
/// @retval RATOMIC_BUFFER_TOO_SMALL `entries_cap` below the member count.
/// @retval RATOMIC_COST_EXCEEDS_LIMIT Above a member's limit.
/// @retval RATOMIC_KEY_TOO_LONG Above a member's `max_key_len`.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: borrows everything for the call; an entry's `name` stays valid
///     until the stack is freed. Thread-safety: safe from many threads at once; no
///     member ever grants more than its limit.
///
/// @warning `stack` must be live; `keys` must point to `count` keys, each to its
///     bytes; `decision`, `entries_len` and `entries` (room for `entries_cap`)
///     valid for writes.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ratomic_stack_allow(
    stack: *const ratomic_stack,
    keys: *const ratomic_key,
    count: usize,
    cost: u64,
    decision: *mut ratomic_decision,
    entries: *mut ratomic_limit_decision,
    entries_cap: usize,
    entries_len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide(stack, keys, count, Op::Allow(cost), None, decision, entries, entries_cap, entries_len) }
}

/// `ratomic_stack_allow` at time `now_ns` (nanoseconds on the stack's clock's
///     timeline; see `ratomic_allow_at`).
///
/// @param stack The stack, borrowed for the call.
/// @param keys An array of `count` keys: member `i` is asked about `keys[i]` (a
///     direct member's key is ignored).
/// @param count The number of keys: the stack's member count.
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @param[out] entries An array of `entries_cap` entries; receives one entry per
///     member.
/// @param entries_cap The size of `entries`, at least the member count.
/// @param[out] entries_len Receives the number of entries written.
/// @return `RATOMIC_OK` on success; errors as `ratomic_stack_allow`;
///     `RATOMIC_INVALID_ARGUMENT` when `now_ns` is above `RATOMIC_MAX_TIME`.
///
/// @warning As `ratomic_stack_allow`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ratomic_stack_allow_at(
    stack: *const ratomic_stack,
    keys: *const ratomic_key,
    count: usize,
    cost: u64,
    now_ns: u64,
    decision: *mut ratomic_decision,
    entries: *mut ratomic_limit_decision,
    entries_cap: usize,
    entries_len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide(stack, keys, count, Op::Allow(cost), Some(now_ns), decision, entries, entries_cap, entries_len) }
}

/// What `ratomic_stack_allow_at` would answer, changing nothing.
///
/// @param stack The stack, borrowed for the call.
/// @param keys An array of `count` keys: member `i` is asked about `keys[i]` (a
///     direct member's key is ignored).
/// @param count The number of keys: the stack's member count.
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @param[out] entries An array of `entries_cap` entries; receives one entry per
///     member.
/// @param entries_cap The size of `entries`, at least the member count.
/// @param[out] entries_len Receives the number of entries written.
/// @return `RATOMIC_OK` on success; errors as `ratomic_stack_allow_at`.
///
/// @warning As `ratomic_stack_allow`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ratomic_stack_peek_at(
    stack: *const ratomic_stack,
    keys: *const ratomic_key,
    count: usize,
    cost: u64,
    now_ns: u64,
    decision: *mut ratomic_decision,
    entries: *mut ratomic_limit_decision,
    entries_cap: usize,
    entries_len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { decide(stack, keys, count, Op::Peek(cost), Some(now_ns), decision, entries, entries_cap, entries_len) }
}

/// `ratomic_stack_allow`, waiting out each denial's `retry_after` with the
/// stack clock's sleep (the options' `clock_sleep` callback, or a real
/// sleep), as `ratomic_acquire` does: returns the allowing decision, or,
/// once the next wait would take the total past `timeout_ns`, that denial
/// without waiting. `RATOMIC_NO_TIMEOUT` waits as long as it takes. Errors
/// as `ratomic_stack_allow`. Blocks the calling thread.
///
/// @param stack The stack, borrowed for the call.
/// @param keys An array of `count` keys: member `i` is asked about `keys[i]` (a
///     direct member's key is ignored).
/// @param count The number of keys: the stack's member count.
/// @param cost Tokens (or calls) to take, at most the limit; 0 answers like a peek.
/// @param timeout_ns The most to wait in total, in **nanoseconds**: 0 never waits,
///     `RATOMIC_NO_TIMEOUT` waits as long as it takes.
/// @param[out] decision Receives the decision, only on `RATOMIC_OK`.
/// @param[out] entries An array of `entries_cap` entries; receives one entry per
///     member.
/// @param entries_cap The size of `entries`, at least the member count.
/// @param[out] entries_len Receives the number of entries written.
/// @return `RATOMIC_OK` on success (a timeout is a denial, not an error); errors as
///     `ratomic_stack_allow`.
///
/// @warning As `ratomic_stack_allow`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ratomic_stack_acquire(
    stack: *const ratomic_stack,
    keys: *const ratomic_key,
    count: usize,
    cost: u64,
    timeout_ns: u64,
    decision: *mut ratomic_decision,
    entries: *mut ratomic_limit_decision,
    entries_cap: usize,
    entries_len: *mut usize,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe {
        decide(stack, keys, count, Op::Acquire(cost, timeout_ns), None, decision, entries, entries_cap, entries_len)
    }
}

/// Refund (`Some(tokens)`) or reset (`None`) every member's key.
///
/// # Safety
/// As the public functions that call it.
unsafe fn restore(
    stack: *const ratomic_stack,
    keys: *const ratomic_key,
    count: usize,
    refund: Option<u64>,
    now_ns: u64,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live stack or NULL.
        let s = unsafe { arg_ref(stack, "stack") }?;
        // SAFETY: forwarded from the caller.
        let keys = unsafe { keys_arg(s, keys, count) }?;
        crate::boundary::now_arg(Some(now_ns))?;
        match refund {
            Some(tokens) => s.stack.refund_at(&keys, tokens, now_ns)?,
            None => s.stack.reset_at(&keys, now_ns)?,
        }
        Ok(())
    })
}

/// Gives `tokens` back to every member, member `i` on `keys[i]` (never above
/// full), at `now_ns`: for work a stack call admitted but that was not done.
///
/// @param stack The stack, borrowed for the call.
/// @param keys An array of `count` keys: member `i` is asked about `keys[i]` (a
///     direct member's key is ignored).
/// @param count The number of keys: the stack's member count.
/// @param tokens Tokens (or calls) to give back; a key never fills above its limit.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @return `RATOMIC_OK` on success; on an error (nothing changed):
/// @retval RATOMIC_NULL_ARGUMENT NULL: stack, keys, or a key with a non-zero length.
/// @retval RATOMIC_INVALID_ARGUMENT `count` is not the number of members; `now_ns`
///     above `RATOMIC_MAX_TIME`.
/// @retval RATOMIC_KEY_TOO_LONG
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @warning `stack` must be live; `keys` must point to `count` keys, each to its
///     bytes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_stack_refund_at(
    stack: *const ratomic_stack,
    keys: *const ratomic_key,
    count: usize,
    tokens: u64,
    now_ns: u64,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { restore(stack, keys, count, Some(tokens), now_ns) }
}

/// Forgets every member's key (`keys[i]` for member `i`) at `now_ns`: each is full
///     again.
///
/// @param stack The stack, borrowed for the call.
/// @param keys An array of `count` keys: member `i` is asked about `keys[i]` (a
///     direct member's key is ignored).
/// @param count The number of keys: the stack's member count.
/// @param now_ns The time in **nanoseconds** on the clock's timeline (the
///     callback's, or the library's monotonic clock), at most `RATOMIC_MAX_TIME`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_stack_refund_at`.
///
/// @warning As `ratomic_stack_refund_at`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_stack_reset_at(
    stack: *const ratomic_stack,
    keys: *const ratomic_key,
    count: usize,
    now_ns: u64,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { restore(stack, keys, count, None, now_ns) }
}

/// Writes the number of members to `*out`: the `count` every call takes and the
///     room `entries` needs.
///
/// @param stack The stack, borrowed for the call.
/// @param[out] out Receives the number of members, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; on an error (`*out` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: stack, out.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @warning `stack` must be live; `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_stack_member_count(stack: *const ratomic_stack, out: *mut usize) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live stack or NULL.
        let s = unsafe { arg_ref(stack, "stack") }?;
        let out = out_ptr(out, "out")?;
        // SAFETY: checked non-NULL; writable as the caller guarantees.
        unsafe { write_out(out, s.names.len()) };
        Ok(())
    })
}
