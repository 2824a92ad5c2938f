//! Decisions as numbers: the layout `ratomic.js` reads decisions from.
//!
//! A hot call returns only `allowed`; the rest of the decision is written
//! into the environment's output buffer (see [`hot`](crate::hot)) and read
//! back by `ratomic.js`, which builds the Decision object in JavaScript
//! (V8 makes a plain object literal far faster than N-API can). Batches use
//! the same layout, one decision after another, each led by `allowed`.

use ratomic::{Decision, MultiDecision, MAX_LIMITS};

use crate::clock::ns_to_ms;

/// Slots of one decision.
pub mod slot {
    /// Whole tokens left after the call.
    pub const REMAINING: usize = 0;
    /// The most the key can hold.
    pub const LIMIT: usize = 1;
    /// Wait before retrying, ms (0 when allowed).
    pub const RETRY_AFTER_MS: usize = 2;
    /// Wait until the key is full again, ms.
    pub const RESET_AFTER_MS: usize = 3;
    /// Number of per-limit entries that follow (0 for a single rule).
    pub const ENTRIES: usize = 4;
    /// First entry: `[index, allowed, remaining, limit, retryAfterMs, resetAfterMs]`.
    pub const FIRST_ENTRY: usize = 5;
    /// Numbers per entry.
    pub const ENTRY_LEN: usize = 6;
}

/// Length of the output buffer: the longest decision.
pub const OUT_LEN: usize = slot::FIRST_ENTRY + slot::ENTRY_LEN * MAX_LIMITS;

/// Writes a single-rule decision; returns `allowed`.
#[inline(always)]
pub fn write(out: &mut [f64], d: &Decision) -> bool {
    out[slot::REMAINING] = d.remaining as f64;
    out[slot::LIMIT] = d.limit as f64;
    out[slot::RETRY_AFTER_MS] = ns_to_ms(d.retry_after_nanos());
    out[slot::RESET_AFTER_MS] = ns_to_ms(d.reset_after_nanos());
    out[slot::ENTRIES] = 0.0;
    d.allowed
}

/// Writes a multi-limit decision, each entry with its limit's (or stack
/// member's) index from core; returns `allowed`.
#[inline]
pub fn write_multi(out: &mut [f64], d: &MultiDecision<'_>) -> bool {
    write(out, &d.decision);
    let mut n = 0;
    for e in d.entries() {
        let at = slot::FIRST_ENTRY + slot::ENTRY_LEN * n;
        out[at] = e.index as f64;
        out[at + 1] = f64::from(u8::from(e.decision.allowed));
        out[at + 2] = e.decision.remaining as f64;
        out[at + 3] = e.decision.limit as f64;
        out[at + 4] = ns_to_ms(e.decision.retry_after_nanos());
        out[at + 5] = ns_to_ms(e.decision.reset_after_nanos());
        n += 1;
    }
    out[slot::ENTRIES] = n as f64;
    d.allowed()
}

/// Appends decisions one after another, each as `[allowed, ...slots]`
/// (entries only as many as it has).
pub fn append(all: &mut Vec<f64>, write_one: impl FnOnce(&mut [f64]) -> bool) {
    let mut one = [0.0; OUT_LEN];
    let allowed = write_one(&mut one);
    let used = slot::FIRST_ENTRY + slot::ENTRY_LEN * one[slot::ENTRIES] as usize;
    all.push(f64::from(u8::from(allowed)));
    all.extend_from_slice(&one[..used]);
}
