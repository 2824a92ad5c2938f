//! The answer to one call, as C sees it: allowed or not, what remains,
//! and when to retry and when the key is full again.

use std::ffi::c_char;

use ratomic_core::{Decision, Verdict};

/// The answer to one call. The caller owns it (usually on the stack); a
/// function writes it only when it returns `RATOMIC_OK`.
///
/// A denial is a decision with `allowed == false`, not an error.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ratomic_decision {
    /// The cost was granted and consumed.
    pub allowed: bool,
    /// Whole tokens (or calls) this key still has right after the call,
    /// rounded down.
    pub remaining: u64,
    /// The most this key can ever hold: capacity, burst or window limit.
    pub limit: u64,
    /// Nanoseconds. 0 when allowed; when denied, strictly positive: the wait
    /// after which the same call would pass if nothing else consumes.
    pub retry_after_ns: u64,
    /// Nanoseconds until the key is full again if nothing consumes.
    pub reset_after_ns: u64,
}

impl From<Decision> for ratomic_decision {
    #[inline]
    fn from(d: Decision) -> Self {
        ratomic_decision {
            allowed: d.allowed,
            remaining: d.remaining,
            limit: d.limit,
            retry_after_ns: d.retry_after_nanos(),
            reset_after_ns: d.reset_after_nanos(),
        }
    }
}

impl From<Verdict> for ratomic_decision {
    /// The engine's own answer, already in nanoseconds: what the hot calls
    /// write, with no `Duration` made and taken apart again.
    #[inline]
    fn from(v: Verdict) -> Self {
        ratomic_decision {
            allowed: v.is_allowed(),
            remaining: v.remaining(),
            limit: v.limit(),
            retry_after_ns: v.retry_after_nanos(),
            reset_after_ns: v.reset_after_nanos(),
        }
    }
}

impl ratomic_decision {
    /// Writes `d` to `out` field by field.
    ///
    /// Why not one struct copy: the engine returns its decision through
    /// memory, written 8 bytes at a time, and a struct copy reloads
    /// `remaining` and `limit` as one 16-byte load, which the CPU cannot
    /// forward from two 8-byte stores: a store-forwarding stall on every
    /// call (perf put ~14% of the C ABI's hot-key time there). Volatile
    /// stores keep the compiler from merging the fields back.
    ///
    /// # Safety
    /// `out` must be non-NULL, aligned and valid for writes.
    #[inline(always)]
    pub(crate) unsafe fn write(out: *mut ratomic_decision, d: impl Into<ratomic_decision>) {
        let c: ratomic_decision = d.into();
        // SAFETY: `out` is valid for writes, as the caller guarantees; each
        // field pointer is in bounds and aligned.
        unsafe {
            std::ptr::addr_of_mut!((*out).allowed).write_volatile(c.allowed);
            std::ptr::addr_of_mut!((*out).remaining).write_volatile(c.remaining);
            std::ptr::addr_of_mut!((*out).limit).write_volatile(c.limit);
            std::ptr::addr_of_mut!((*out).retry_after_ns).write_volatile(c.retry_after_ns);
            std::ptr::addr_of_mut!((*out).reset_after_ns).write_volatile(c.reset_after_ns);
        }
    }
}

/// One limit's part in a detailed decision (`ratomic_allow_detailed`): a
/// limit that denied the call has `decision.allowed == false`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratomic_limit_decision {
    /// The limit's name, NUL-terminated. Borrowed from the limiter: valid
    /// until the limiter is freed; do not free it.
    pub name: *const c_char,
    /// What this limit answered. On a denial, each entry is what that limit
    /// alone would answer, and nothing was consumed.
    pub decision: ratomic_decision,
}
