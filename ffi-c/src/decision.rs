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
    /// Writes `d` to `out` in the widths a C caller reads it back in.
    ///
    /// A load the CPU cannot forward from one earlier store waits until the
    /// stores reach the cache (a store-forwarding stall). A C caller reads
    /// a field (an 8- or 1-byte load, which forwards from any store that
    /// holds it) or copies the whole struct, which compilers do as two
    /// 16-byte loads and one 8-byte load. So on x86-64 the decision goes out
    /// as two 16-byte stores and one 8-byte store (`allowed` in the first,
    /// its padding zeroed). Stored field by field, both 16-byte reloads of a
    /// copy stalled: in a C program copying each decision, a hot
    /// `ratomic_allow_at` took 29.8–32.6 ns against 24.5–26.1 with these stores
    /// (two builds of `libratomic.so` interleaved in one process), and
    /// `perf annotate` of `cargo bench -p ratomic-ffi`, whose C side copies
    /// each decision too, put 66–70% of its loop's own samples on that
    /// reload. Reading fields, the two writes time the same. Other targets
    /// store field by field (volatile, so the compiler does not merge them).
    ///
    /// # Safety
    /// `out` must be non-NULL, aligned and valid for writes.
    #[inline(always)]
    pub(crate) unsafe fn write(out: *mut ratomic_decision, d: impl Into<ratomic_decision>) {
        let c: ratomic_decision = d.into();
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{__m128i, _mm_set_epi64x, _mm_storeu_si128};
            const _: () = assert!(std::mem::size_of::<ratomic_decision>() == 40);
            const _: () = assert!(std::mem::offset_of!(ratomic_decision, remaining) == 8);
            const _: () = assert!(std::mem::offset_of!(ratomic_decision, reset_after_ns) == 32);
            // Each word through a register first: otherwise the compiler
            // loads two neighbours of the engine's answer (written 8 bytes
            // at a time) as one 16-byte load, the same stall one step earlier.
            let word = |x: u64| -> i64 {
                let mut x = x;
                // SAFETY: an empty instruction; it only pins `x` to a register.
                unsafe {
                    std::arch::asm!("/* {x} */", x = inout(reg) x, options(pure, nomem, nostack, preserves_flags))
                };
                x as i64
            };
            // `allowed` in byte 0 of the first word, its 7 padding bytes zero.
            let first = word(u64::from_ne_bytes([u8::from(c.allowed), 0, 0, 0, 0, 0, 0, 0]));
            let (remaining, limit, retry) = (word(c.remaining), word(c.limit), word(c.retry_after_ns));
            // SAFETY: SSE2 is part of the x86-64 baseline; `out` is valid for
            // 40 bytes of writes, as the caller guarantees, and 8-aligned (the
            // 16-byte stores are unaligned ones). Writing the padding bytes
            // is allowed: they belong to the caller's object and hold no value.
            unsafe {
                let bytes = out.cast::<u8>();
                _mm_storeu_si128(bytes.cast::<__m128i>(), _mm_set_epi64x(remaining, first));
                _mm_storeu_si128(bytes.add(16).cast::<__m128i>(), _mm_set_epi64x(retry, limit));
                bytes.add(32).cast::<u64>().write_volatile(c.reset_after_ns);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
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
