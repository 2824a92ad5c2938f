//! Limiters whose state lives in Redis or Valkey (crate `ratomic-redis`),
//! behind the same `ratomic_limiter` handle: `ratomic_allow`, `ratomic_peek`,
//! `ratomic_allow_many`, `ratomic_refund`, `ratomic_reset`,
//! `ratomic_acquire` and the `_detailed` calls work on them unchanged.

use std::ffi::{c_char, CString};
use std::time::Duration;

use ratomic_core::{MonotonicClock, Rate, Rule};
use ratomic_redis::{BlockingRedisLimiter, FailurePolicy, Lease, Limits, Options};

use crate::boundary::{out_ptr, str_arg, Failure};
use crate::handle::{ratomic_limiter, Engine};
use crate::multi::{ratomic_limit_spec, specs_arg, NamedRules};
use crate::redis_engine::RedisEngine;
use crate::result::ratomic_result;
use crate::rule::ratomic_algorithm;

/// What a Redis-backed limiter answers when Redis fails (a refused
/// connection, a timeout, a server error).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ratomic_redis_policy {
    /// Return the error (`RATOMIC_BACKEND_UNAVAILABLE`,
    /// `RATOMIC_BACKEND_TIMEOUT` or `RATOMIC_BACKEND_ERROR`). The default.
    RATOMIC_REDIS_RETURN_ERROR = 0,
    /// Allow the call.
    RATOMIC_REDIS_FAIL_OPEN = 1,
    /// Deny the call with `retry_after_ns` = `fail_closed_retry_ns`.
    RATOMIC_REDIS_FAIL_CLOSED = 2,
    /// Decide in a local in-memory limiter of the same rules.
    RATOMIC_REDIS_FALLBACK = 3,
}

/// Whether a Redis- or PostgreSQL-backed limiter leases tokens (the
/// `lease` field of `ratomic_redis_options` and `ratomic_postgres_options`):
/// a hot key's call then also takes a slice of the key's tokens from the
/// server, which this process grants
/// in memory until they are spent or their time passes. Exact over every
/// process (never more than burst + rate × time per key and limit); the
/// price is tokens idle in leases: at most processes × the largest lease per
/// key, and a lease never takes more than half of what a bucket has left.
/// `ratomic_limiter_free` gives a limiter's unused leased tokens back; a
/// process that ends without it loses them until their time passes.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ratomic_redis_lease {
    /// No leases: every decision is a round trip (or a cached denial). The
    /// default.
    RATOMIC_REDIS_LEASE_OFF = 0,
    /// Lease where it is exact (every limit a token bucket; a limiter with
    /// a window limit takes none), at most an eighth of the smallest burst
    /// (at least 1).
    RATOMIC_REDIS_LEASE_AUTO = 1,
    /// Lease at most `lease_max` tokens at a time; a limiter with a window
    /// limit is refused (`RATOMIC_INVALID_ARGUMENT`).
    RATOMIC_REDIS_LEASE_MAX = 2,
}

/// Options for the `ratomic_redis_*_new` constructors. Pass NULL for all
/// defaults; zero fields mean "default" too.
///
/// Ownership: the caller owns the struct and its strings; they are copied.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratomic_redis_options {
    /// Key prefix (NUL-terminated, no braces); NULL for `"ratomic:"`. Give
    /// every limiter its own.
    pub prefix: *const c_char,
    /// The longest a call may take, in ns (0: 50 ms). Connecting may take
    /// four times as long.
    pub timeout_ns: u64,
    /// A `ratomic_redis_policy` value.
    pub policy: u32,
    /// The `retry_after_ns` of a `RATOMIC_REDIS_FAIL_CLOSED` denial (0: 1 s).
    pub fail_closed_retry_ns: u64,
    /// Keep every written key at least this long, in ns (0: exactly until
    /// it is full again). For callers of the `_at` forms whose times run
    /// faster than the server's clock.
    pub ttl_floor_ns: u64,
    /// The longest key, in bytes (0: 1024).
    pub max_key_len: usize,
    /// A `ratomic_redis_lease` value (0: `RATOMIC_REDIS_LEASE_OFF`).
    pub lease: u32,
    /// With `RATOMIC_REDIS_LEASE_MAX`, the most tokens a lease takes (at
    /// least 1); 0 otherwise.
    pub lease_max: u64,
}

/// The limits and the client options from C's arguments, then the handle.
///
/// # Safety
/// `url` a NUL-terminated string or NULL; `options` NULL or valid; `out`
/// checked by [`out_ptr`].
unsafe fn make(
    url: *const c_char,
    rules: Vec<(String, Rule)>,
    names: Vec<CString>,
    options: *const ratomic_redis_options,
    out: *mut *mut ratomic_limiter,
) -> Result<(), Failure> {
    // SAFETY: forwarded from the caller.
    let url = unsafe { str_arg(url, "url", ratomic_result::RATOMIC_INVALID_ARGUMENT) }?;
    // SAFETY: forwarded from the caller.
    let o = unsafe { options.as_ref() }.copied();
    let mut limits = Limits::new(rules)?;
    let mut client = Options::default();
    if let Some(o) = o {
        if !o.prefix.is_null() {
            // SAFETY: non-NULL and NUL-terminated, as the caller guarantees.
            let prefix = unsafe { str_arg(o.prefix, "prefix", ratomic_result::RATOMIC_INVALID_ARGUMENT) }?;
            limits = limits.with_prefix(prefix)?;
        }
        if o.max_key_len != 0 {
            limits = limits.with_max_key_len(o.max_key_len);
        }
        limits = limits.with_ttl_floor(Duration::from_nanos(o.ttl_floor_ns));
        if o.timeout_ns != 0 {
            client.timeout = Duration::from_nanos(o.timeout_ns);
        }
        let retry = if o.fail_closed_retry_ns == 0 {
            Duration::from_secs(1)
        } else {
            Duration::from_nanos(o.fail_closed_retry_ns)
        };
        client.policy = match o.policy {
            p if p == ratomic_redis_policy::RATOMIC_REDIS_RETURN_ERROR as u32 => FailurePolicy::ReturnError,
            p if p == ratomic_redis_policy::RATOMIC_REDIS_FAIL_OPEN as u32 => FailurePolicy::FailOpen,
            p if p == ratomic_redis_policy::RATOMIC_REDIS_FAIL_CLOSED as u32 => {
                FailurePolicy::FailClosed { retry_after: retry }
            }
            p if p == ratomic_redis_policy::RATOMIC_REDIS_FALLBACK as u32 => FailurePolicy::Fallback,
            value => return Err(Failure::UnknownValue {
                    name: "policy",
                    value,
                    accepted: "RATOMIC_REDIS_RETURN_ERROR (0), RATOMIC_REDIS_FAIL_OPEN (1), RATOMIC_REDIS_FAIL_CLOSED (2) or RATOMIC_REDIS_FALLBACK (3)",
                }),
        };
        client.lease = lease_of(o.lease, o.lease_max)?;
    }
    let limiter = BlockingRedisLimiter::connect(url, limits, client)?;
    let engine = Engine::Redis(Box::new(RedisEngine { limiter, clock: MonotonicClock::new() }));
    // SAFETY: forwarded from the caller.
    unsafe { ratomic_limiter::hand_out(engine, names.into_boxed_slice(), out) };
    Ok(())
}

/// The options' `lease` and `lease_max`.
pub(crate) fn lease_of(lease: u32, max: u64) -> Result<Lease, Failure> {
    use ratomic_redis_lease::*;
    let invalid = |reason: &'static str| {
        Failure::Core(ratomic_core::Error::InvalidArgument {
            name: "lease_max",
            value: max.to_string(),
            reason: reason.into(),
        })
    };
    match lease {
        l if l == RATOMIC_REDIS_LEASE_MAX as u32 => match max {
            0 => Err(invalid("RATOMIC_REDIS_LEASE_MAX needs the most tokens a lease takes: at least 1")),
            n => Ok(Lease::Max(n)),
        },
        _ if max != 0 => Err(invalid("lease_max applies only with lease = RATOMIC_REDIS_LEASE_MAX")),
        l if l == RATOMIC_REDIS_LEASE_OFF as u32 => Ok(Lease::Off),
        l if l == RATOMIC_REDIS_LEASE_AUTO as u32 => Ok(Lease::Auto),
        value => Err(Failure::UnknownValue {
            name: "lease",
            value,
            accepted: "RATOMIC_REDIS_LEASE_OFF (0), RATOMIC_REDIS_LEASE_AUTO (1) or RATOMIC_REDIS_LEASE_MAX (2)",
        }),
    }
}

/// One rule under its algorithm's name, as the in-memory constructors name it.
fn single(rule: Rule) -> Result<NamedRules, Failure> {
    let name = ratomic_algorithm::of(&rule)?.name();
    Ok((vec![(ratomic_redis::SINGLE.to_owned(), rule)], vec![name.to_owned()]))
}

/// Makes a token bucket per key whose state lives on the Redis (or Valkey)
/// server at `url` (`redis://host:port/db`), shared with every process
/// using the same server and prefix. The same rule and decisions as
/// `ratomic_token_bucket_new`, in whole microseconds: the emission interval
/// is rounded up to whole µs, and `capacity` × interval must stay below
/// 2^51 µs. Calls without `_at` use the server's clock; one round trip each.
/// Connects before returning (blocking, up to 4 × the timeout).
///
/// Not available on a Redis-backed limiter: `ratomic_key_count`,
/// `ratomic_gc`, `ratomic_gc_at` (`RATOMIC_OTHER_ERROR`).
///
/// @param url The server's URL, NUL-terminated (`redis://host:port/db`); only read
///     during the call.
/// @param capacity The most tokens a key holds (the burst), at least 1.
/// @param refill_per_sec Tokens refilled per **second**: finite and > 0.
/// @param options Redis options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; errors: as `ratomic_token_bucket_new`;
///     `RATOMIC_NULL_ARGUMENT` (url); `RATOMIC_INVALID_ARGUMENT` (a bad prefix,
///     policy or lease, a rule beyond exact microseconds); `RATOMIC_BACKEND_UNAVAILABLE` (a
///     bad URL, a refused connection), `RATOMIC_BACKEND_TIMEOUT`,
///     `RATOMIC_BACKEND_ERROR` (a server that is not Redis). On later calls, these
///     three report Redis failures under `RATOMIC_REDIS_RETURN_ERROR` (other
///     policies answer instead).
///
/// @note Ownership: the caller owns `*out` and releases it with
///     `ratomic_limiter_free` (which gives its leases' unused tokens back and
///     closes the connection). Thread-safety: safe
///     from any thread; calls from many threads share one pipelined connection.
///
/// @warning `url` must be NUL-terminated; `options` NULL or valid; `out` valid for
///     writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_redis_token_bucket_new(
    url: *const c_char,
    capacity: u64,
    refill_per_sec: f64,
    options: *const ratomic_redis_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        let (rules, names) = single(Rule::token_bucket(ratomic_core::Quota::new(capacity, refill_per_sec)?))?;
        // SAFETY: forwarded from the caller.
        unsafe { make(url, rules, names, options, out) }
    })
}

/// A window limiter on Redis: `make` is `Rule::fixed_window` or `Rule::sliding_window`.
///
/// # Safety
/// As `ratomic_redis_token_bucket_new`.
unsafe fn window(
    url: *const c_char,
    make_rule: fn(Rate) -> ratomic_core::Result<Rule>,
    limit: u64,
    window_ns: u64,
    options: *const ratomic_redis_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        let (rules, names) = single(make_rule(crate::rule::window_rate(limit, window_ns)?)?)?;
        // SAFETY: forwarded from the caller.
        unsafe { make(url, rules, names, options, out) }
    })
}

/// A fixed window of `limit` calls per `window_ns` per key, on Redis: as
/// `ratomic_fixed_window_new` (the window must be whole microseconds and
/// `limit` × window in µs below 2^53), and as
/// `ratomic_redis_token_bucket_new` for the rest.
///
/// @param url The server's URL, NUL-terminated (`redis://host:port/db`); only read
///     during the call.
/// @param limit The most calls per key in a window, at least 1 and at most the
///     window's largest (`ratomic_window_max_limit`).
/// @param window_ns The window's length in **nanoseconds**: > 0 and at most 2^63 −
///     1.
/// @param options Redis options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_redis_token_bucket_new`,
///     with the window's as `ratomic_fixed_window_new`.
///
/// @warning As `ratomic_redis_token_bucket_new`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_redis_fixed_window_new(
    url: *const c_char,
    limit: u64,
    window_ns: u64,
    options: *const ratomic_redis_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { window(url, Rule::fixed_window, limit, window_ns, options, out) }
}

/// A sliding window of `limit` calls per `window_ns` per key, on Redis: as
/// `ratomic_sliding_window_new` and `ratomic_redis_fixed_window_new`.
///
/// @param url The server's URL, NUL-terminated (`redis://host:port/db`); only read
///     during the call.
/// @param limit The most calls per key in a window, at least 1 and at most the
///     window's largest (`ratomic_window_max_limit`).
/// @param window_ns The window's length in **nanoseconds**: > 0 and at most 2^63 −
///     1.
/// @param options Redis options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_redis_token_bucket_new`,
///     with the window's as `ratomic_sliding_window_new`.
///
/// @warning As `ratomic_redis_token_bucket_new`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_redis_sliding_window_new(
    url: *const c_char,
    limit: u64,
    window_ns: u64,
    options: *const ratomic_redis_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { window(url, Rule::sliding_window, limit, window_ns, options, out) }
}

/// Several named limits on each key, all or nothing, on Redis: as
/// `ratomic_multi_limiter_new` (all of a key's limits live in one Redis
/// hash, so a call touches one key, in one Cluster slot), and as
/// `ratomic_redis_token_bucket_new` for the rest.
///
/// @param url The server's URL, NUL-terminated (`redis://host:port/db`); only read
///     during the call.
/// @param limits An array of `count` limit specs, copied.
/// @param count The number of limits, 1 to `RATOMIC_MAX_LIMITS` (16).
/// @param options Redis options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_multi_limiter_new` and
///     `ratomic_redis_token_bucket_new`.
///
/// @warning As `ratomic_multi_limiter_new` and `ratomic_redis_token_bucket_new`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_redis_multi_limiter_new(
    url: *const c_char,
    limits: *const ratomic_limit_spec,
    count: usize,
    options: *const ratomic_redis_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let (rules, names) = unsafe { specs_arg(limits, count) }?;
        // SAFETY: forwarded from the caller.
        unsafe { make(url, rules, names, options, out) }
    })
}
