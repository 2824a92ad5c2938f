//! Rules as C sees them: the algorithm codes, a limiter's limits read back,
//! and the windows' largest limits.

use std::ffi::c_char;
use std::time::Duration;

use ratomic_core::{Error, FixedWindowCounter, Quota, Rate, Rule, SlidingWindowCounter};

use crate::boundary::{arg_ref, out_ptr, write_out, Failure};
use crate::handle::ratomic_limiter;
use crate::result::ratomic_result;

/// The algorithm of one limit: in a `ratomic_limit_spec`, a
/// `ratomic_limit_info`, and for `ratomic_window_max_limit`.
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

impl ratomic_algorithm {
    const ALL: [ratomic_algorithm; 3] = [
        ratomic_algorithm::RATOMIC_ALGORITHM_TOKEN_BUCKET,
        ratomic_algorithm::RATOMIC_ALGORITHM_FIXED_WINDOW,
        ratomic_algorithm::RATOMIC_ALGORITHM_SLIDING_WINDOW,
    ];

    /// The algorithm with this code, or `UnknownValue`.
    pub(crate) fn from_code(code: u32) -> Result<Self, Failure> {
        Self::ALL
            .into_iter()
            .find(|a| *a as u32 == code)
            .ok_or(Failure::UnknownValue {
            name: "algorithm",
            value: code,
            accepted: "RATOMIC_ALGORITHM_TOKEN_BUCKET (0), RATOMIC_ALGORITHM_FIXED_WINDOW (1) or RATOMIC_ALGORITHM_SLIDING_WINDOW (2)",
        })
    }

    /// The algorithm of a core rule.
    pub(crate) fn of(rule: &Rule) -> Result<Self, Failure> {
        Ok(match rule {
            Rule::TokenBucket(_) => ratomic_algorithm::RATOMIC_ALGORITHM_TOKEN_BUCKET,
            Rule::FixedWindow(_) => ratomic_algorithm::RATOMIC_ALGORITHM_FIXED_WINDOW,
            Rule::SlidingWindow(_) => ratomic_algorithm::RATOMIC_ALGORITHM_SLIDING_WINDOW,
            _ => return Err(Failure::Unsupported("a rule this version of the C ABI has no algorithm code for")),
        })
    }

    /// The name a single-rule limiter's one limit goes by.
    pub(crate) fn name(self) -> &'static std::ffi::CStr {
        match self {
            ratomic_algorithm::RATOMIC_ALGORITHM_TOKEN_BUCKET => c"token_bucket",
            ratomic_algorithm::RATOMIC_ALGORITHM_FIXED_WINDOW => c"fixed_window",
            ratomic_algorithm::RATOMIC_ALGORITHM_SLIDING_WINDOW => c"sliding_window",
        }
    }

    /// The rule this algorithm makes of `rate`.
    pub(crate) fn rule(self, rate: Rate) -> Result<Rule, Failure> {
        Ok(match self {
            ratomic_algorithm::RATOMIC_ALGORITHM_TOKEN_BUCKET => Rule::token_bucket(Quota::from_rate(rate)?),
            ratomic_algorithm::RATOMIC_ALGORITHM_FIXED_WINDOW => Rule::fixed_window(rate)?,
            ratomic_algorithm::RATOMIC_ALGORITHM_SLIDING_WINDOW => Rule::sliding_window(rate)?,
        })
    }
}

/// One limit of a limiter, read back (`ratomic_limit_get`): what it
/// enforces, as the engine holds it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratomic_limit_info {
    /// The limit's name, NUL-terminated: as given to
    /// `ratomic_multi_limiter_new`, or `"token_bucket"`, `"fixed_window"` or
    /// `"sliding_window"` for a single-rule limiter. Borrowed from the
    /// limiter: valid until it is freed; do not free it. (For a direct
    /// bucket, `ratomic_direct_limit_get`: `"token_bucket"`, static.)
    pub name: *const c_char,
    /// A `ratomic_algorithm` value.
    pub algorithm: u32,
    /// The most a key can hold, and the largest cost a call may ask: a
    /// token bucket's capacity, a window's limit.
    pub limit: u64,
    /// A window's length in nanoseconds; for a token bucket, the time an
    /// empty bucket takes to become full again (`limit` × `interval_ns`).
    pub period_ns: u64,
    /// A token bucket's emission interval `T`: the nanoseconds one token
    /// takes to refill (rounded down, at least 1). 0 for a window.
    pub interval_ns: u64,
    /// A token bucket's refill rate in tokens per second, as given (or
    /// count / period of its rate string). 0 for a window.
    pub refill_per_sec: f64,
}

/// Writes what limit `index` of `limiter` enforces to `*out`: its name,
/// algorithm and parameters. `index` runs from 0 to `ratomic_limit_count`
/// − 1, in the order the limits were given (a single-rule limiter has one).
///
/// @param limiter The limiter, borrowed for the call.
/// @param index Which limit, from 0 to `ratomic_limit_count` − 1.
/// @param[out] out Receives the limit's description, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; on an error (`*out` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: limiter, out.
/// @retval RATOMIC_INVALID_ARGUMENT `index` ≥ the limit count.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Ownership: borrows `limiter`; `out->name` is borrowed from it (valid until
///     it is freed). Thread-safety: safe from any thread.
///
/// @warning `limiter` must be a live limiter; `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_limit_get(
    limiter: *const ratomic_limiter,
    index: usize,
    out: *mut ratomic_limit_info,
) -> ratomic_result {
    ffi_boundary!({
        // SAFETY: the caller passes a live limiter or NULL.
        let l = unsafe { arg_ref(limiter, "limiter") }?;
        let out = out_ptr(out, "out")?;
        let (Some(rule), Some(name)) = (l.rules().get(index), l.names.get(index)) else {
            return Err(Failure::Core(Error::InvalidArgument {
                name: "index",
                value: index.to_string(),
                reason: format!("must be below {}, this limiter's number of limits", l.names.len()).into(),
            }));
        };
        let algorithm = ratomic_algorithm::of(rule)? as u32;
        let (period_ns, interval_ns, refill_per_sec) = match rule {
            Rule::TokenBucket(g) => {
                let q = g.quota();
                (q.capacity() * q.emission_interval_nanos(), q.emission_interval_nanos(), q.refill_per_sec())
            }
            Rule::FixedWindow(w) => (nanos(w.window()), 0, 0.0),
            Rule::SlidingWindow(w) => (nanos(w.window()), 0, 0.0),
            _ => return Err(Failure::Unsupported("a rule this version of the C ABI cannot describe")),
        };
        let info = ratomic_limit_info {
            name: name.as_ptr(),
            algorithm,
            limit: ratomic_core::Algorithm::limit(rule),
            period_ns,
            interval_ns,
            refill_per_sec,
        };
        // SAFETY: checked non-NULL; writable as the caller guarantees.
        unsafe { write_out(out, info) };
        Ok(())
    })
}

/// A window length the engine made, in nanoseconds (< 2^63).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Writes to `*out` the largest limit a window of `window_ns` nanoseconds
/// admits for `algorithm` (`RATOMIC_ALGORITHM_FIXED_WINDOW` or
/// `RATOMIC_ALGORITHM_SLIDING_WINDOW`): a window constructor given a larger
/// limit fails with `RATOMIC_INVALID_ARGUMENT`. A window's state is one
/// 64-bit word holding its whole index (up to `RATOMIC_MAX_TIME` /
/// `window_ns`) and its count (fixed) or two counts (sliding), so longer
/// windows never admit less: sliding, 32,767 for 1 s (and 2 s), 65,535
/// for 4 s, 262,143 for a minute, 2,097,151 for an hour, 8,388,607 for a
/// day, 0 for 1 ns; fixed, at least `window_ns` (one call per nanosecond)
/// for any window up to `RATOMIC_MAX_TIME`.
///
/// @param algorithm `RATOMIC_ALGORITHM_FIXED_WINDOW` or
///     `RATOMIC_ALGORITHM_SLIDING_WINDOW`.
/// @param window_ns The window's length in **nanoseconds**: > 0 and at most 2^63 −
///     1.
/// @param[out] out Receives the largest limit, only on `RATOMIC_OK`.
/// @return `RATOMIC_OK` on success; on an error (`*out` untouched):
/// @retval RATOMIC_NULL_ARGUMENT NULL: out.
/// @retval RATOMIC_INVALID_ARGUMENT A token bucket or unknown algorithm; window 0
///     or above 2^63 − 1 ns.
/// @retval RATOMIC_PANIC A bug in ratomic, caught at the boundary.
///
/// @note Thread-safety: safe from any thread.
///
/// @warning `out` must be valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_window_max_limit(algorithm: u32, window_ns: u64, out: *mut u64) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        let window = crate::rule::window_rate(1, window_ns)?.period();
        let max = match ratomic_algorithm::from_code(algorithm)? {
            ratomic_algorithm::RATOMIC_ALGORITHM_FIXED_WINDOW => FixedWindowCounter::max_limit(window),
            ratomic_algorithm::RATOMIC_ALGORITHM_SLIDING_WINDOW => SlidingWindowCounter::max_limit(window),
            ratomic_algorithm::RATOMIC_ALGORITHM_TOKEN_BUCKET => {
                return Err(Failure::Core(Error::InvalidArgument {
                    name: "algorithm",
                    value: "RATOMIC_ALGORITHM_TOKEN_BUCKET".to_owned(),
                    reason: "is not a window: a token bucket's capacity is bounded by capacity × interval < 2^63 ns"
                        .into(),
                }))
            }
        };
        // SAFETY: checked non-NULL; writable as the caller guarantees.
        unsafe { write_out(out, max) };
        Ok(())
    })
}

/// A window rate from a count and a length in nanoseconds, its errors
/// naming `limit` and `window_ns` as C passes them.
pub(crate) fn window_rate(limit: u64, window_ns: u64) -> Result<Rate, Failure> {
    let invalid = |name, value: u64, reason: &'static str| {
        Failure::Core(ratomic_core::Error::InvalidArgument { name, value: value.to_string(), reason: reason.into() })
    };
    if limit == 0 {
        return Err(invalid("limit", limit, "must be at least 1"));
    }
    if window_ns == 0 || window_ns > i64::MAX as u64 {
        return Err(invalid("window_ns", window_ns, "a window's length in nanoseconds must be from 1 to 2^63 − 1"));
    }
    Ok(Rate::new(limit, Duration::from_nanos(window_ns))?)
}
