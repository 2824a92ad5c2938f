//! The answer to one call, as C sees it (SPEC §2).

use std::ffi::c_char;

use ratomic_core::Decision;

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
