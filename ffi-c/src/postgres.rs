//! Limiters whose state lives in PostgreSQL (crate `ratomic-postgres`),
//! behind the same `ratomic_limiter` handle: `ratomic_allow`, `ratomic_peek`,
//! `ratomic_allow_many`, `ratomic_refund`, `ratomic_reset`,
//! `ratomic_acquire`, `ratomic_gc` and the `_detailed` calls work on them
//! unchanged.

use std::ffi::{c_char, CString};
use std::time::Duration;

use ratomic_core::{MonotonicClock, Rate, Rule};
use ratomic_postgres::{BlockingPostgresLimiter, FailurePolicy, Limits, Options};

use crate::boundary::{out_ptr, str_arg, Failure};
use crate::handle::{ratomic_limiter, Engine};
use crate::multi::{ratomic_limit_spec, specs_arg, NamedRules};
use crate::postgres_engine::PostgresEngine;
use crate::redis::ratomic_redis_policy;
use crate::result::ratomic_result;
use crate::rule::ratomic_algorithm;

/// Options for the `ratomic_postgres_*_new` constructors. Pass NULL for all
/// defaults; zero fields mean "default" too.
///
/// Ownership: the caller owns the struct and its strings; they are copied.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ratomic_postgres_options {
    /// Row prefix (NUL-terminated); NULL for `"ratomic"`. Give every set of
    /// rules its own.
    pub prefix: *const c_char,
    /// The longest a call may take, in ns (0: 100 ms); also the
    /// connections' `statement_timeout`. Connecting may take four times as
    /// long (at least 4 s).
    pub timeout_ns: u64,
    /// A `ratomic_redis_policy` value (the same policies: return the error,
    /// fail open, fail closed, fall back to a local limiter).
    pub policy: u32,
    /// The `retry_after_ns` of a `RATOMIC_REDIS_FAIL_CLOSED` denial (0: 1 s).
    pub fail_closed_retry_ns: u64,
    /// The longest key, in bytes (0: 1024).
    pub max_key_len: usize,
    /// Connections to the server (0: 4); calls from many threads are
    /// pipelined on them.
    pub connections: u32,
    /// Non-zero: do not create the table and functions on connect (a DBA
    /// ran `ratomic_postgres::schema::sql()`).
    pub no_migrate: u32,
    /// Non-zero: the migration creates the table `UNLOGGED` (faster writes;
    /// a server crash empties it, and replicas do not have it).
    pub unlogged: u32,
    /// A `ratomic_redis_lease` value (0: `RATOMIC_REDIS_LEASE_OFF`): the
    /// same leased tokens as on Redis (`ratomic_postgres_*` limiters take
    /// a hot key's slice with `ratomic_v1_lease` and grant from it in
    /// memory, exactly fleet-wide); `ratomic_limiter_free` gives a
    /// limiter's unused leased tokens back.
    pub lease: u32,
    /// With `RATOMIC_REDIS_LEASE_MAX`, the most tokens a lease takes (at
    /// least 1); 0 otherwise.
    pub lease_max: u64,
}

/// The limits and the client options from C's arguments, then the handle.
///
/// # Safety
/// `conninfo` a NUL-terminated string or NULL; `options` NULL or valid;
/// `out` checked by [`out_ptr`].
unsafe fn make(
    conninfo: *const c_char,
    rules: Vec<(String, Rule)>,
    names: Vec<CString>,
    options: *const ratomic_postgres_options,
    out: *mut *mut ratomic_limiter,
) -> Result<(), Failure> {
    // SAFETY: forwarded from the caller.
    let conninfo = unsafe { str_arg(conninfo, "conninfo", ratomic_result::RATOMIC_INVALID_ARGUMENT) }?;
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
        if o.timeout_ns != 0 {
            client.timeout = Duration::from_nanos(o.timeout_ns);
        }
        if o.connections != 0 {
            client.connections = o.connections as usize;
        }
        client.migrate = o.no_migrate == 0;
        client.lease = crate::redis::lease_of(o.lease, o.lease_max)?;
        client.unlogged = o.unlogged != 0;
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
    }
    let limiter = BlockingPostgresLimiter::connect(conninfo, limits, client)?;
    let engine = Engine::Postgres(Box::new(PostgresEngine { limiter, clock: MonotonicClock::new() }));
    // SAFETY: forwarded from the caller.
    unsafe { ratomic_limiter::hand_out(engine, names.into_boxed_slice(), out) };
    Ok(())
}

/// One rule under its algorithm's name, as the in-memory constructors name it.
fn single(rule: Rule) -> Result<NamedRules, Failure> {
    let name = ratomic_algorithm::of(&rule)?.name();
    Ok((vec![(ratomic_postgres::SINGLE.to_owned(), rule)], vec![name.to_owned()]))
}

/// Makes a token bucket per key whose state lives in the PostgreSQL
/// database at `conninfo`, shared with every process using the same
/// database and prefix. The same rule and decisions as
/// `ratomic_token_bucket_new`, in whole microseconds: the emission interval
/// is rounded up to whole µs. Calls without `_at` use the server's clock
/// (read once a statement); one statement each (`allow_many`: one for the
/// batch). Connects before returning (blocking) and creates ratomic's
/// table and functions unless `no_migrate` is set.
///
/// `ratomic_gc` removes the prefix's rows that are full again at the
/// server's time (`ratomic_gc_at`: at the given time). Not available on a
/// PostgreSQL-backed limiter: `ratomic_key_count` (`RATOMIC_OTHER_ERROR`).
///
/// @param conninfo The database, NUL-terminated: a `postgresql://` URL or
///     `key=value` pairs; only read during the call.
/// @param capacity The most tokens a key holds (the burst), at least 1.
/// @param refill_per_sec Tokens refilled per **second**: finite and > 0.
/// @param options PostgreSQL options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; errors: as `ratomic_token_bucket_new`;
///     `RATOMIC_NULL_ARGUMENT` (conninfo); `RATOMIC_INVALID_ARGUMENT` (a bad
///     prefix or policy, a rule beyond exact microseconds);
///     `RATOMIC_BACKEND_UNAVAILABLE` (a bad conninfo, a refused connection),
///     `RATOMIC_BACKEND_TIMEOUT`, `RATOMIC_BACKEND_ERROR` (the server
///     refused a statement: no rights to create the table, the functions
///     missing with `no_migrate`). On later calls, these three report
///     failures under `RATOMIC_REDIS_RETURN_ERROR` (other policies answer
///     instead).
///
/// @note Ownership: the caller owns `*out` and releases it with
///     `ratomic_limiter_free` (which closes the connections). Thread-safety:
///     safe from any thread; calls from many threads are pipelined on the
///     limiter's connections.
///
/// @warning `conninfo` must be NUL-terminated; `options` NULL or valid;
///     `out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn ratomic_postgres_token_bucket_new(
    conninfo: *const c_char,
    capacity: u64,
    refill_per_sec: f64,
    options: *const ratomic_postgres_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        let (rules, names) = single(Rule::token_bucket(ratomic_core::Quota::new(capacity, refill_per_sec)?))?;
        // SAFETY: forwarded from the caller.
        unsafe { make(conninfo, rules, names, options, out) }
    })
}

/// A window limiter on PostgreSQL: `make_rule` is `Rule::fixed_window` or
/// `Rule::sliding_window`.
///
/// # Safety
/// As `ratomic_postgres_token_bucket_new`.
unsafe fn window(
    conninfo: *const c_char,
    make_rule: fn(Rate) -> ratomic_core::Result<Rule>,
    limit: u64,
    window_ns: u64,
    options: *const ratomic_postgres_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        let (rules, names) = single(make_rule(crate::rule::window_rate(limit, window_ns)?)?)?;
        // SAFETY: forwarded from the caller.
        unsafe { make(conninfo, rules, names, options, out) }
    })
}

/// A fixed window of `limit` calls per `window_ns` per key, on PostgreSQL:
/// as `ratomic_fixed_window_new` (the window must be whole microseconds),
/// and as `ratomic_postgres_token_bucket_new` for the rest.
///
/// @param conninfo The database, NUL-terminated: a `postgresql://` URL or
///     `key=value` pairs; only read during the call.
/// @param limit The most calls per key in a window, at least 1 and at most the
///     window's largest (`ratomic_window_max_limit`).
/// @param window_ns The window's length in **nanoseconds**: > 0 and at most 2^63 −
///     1.
/// @param options PostgreSQL options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_postgres_token_bucket_new`,
///     with the window's as `ratomic_fixed_window_new`.
///
/// @warning As `ratomic_postgres_token_bucket_new`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_postgres_fixed_window_new(
    conninfo: *const c_char,
    limit: u64,
    window_ns: u64,
    options: *const ratomic_postgres_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { window(conninfo, Rule::fixed_window, limit, window_ns, options, out) }
}

/// A sliding window of `limit` calls per `window_ns` per key, on
/// PostgreSQL: as `ratomic_sliding_window_new` and
/// `ratomic_postgres_fixed_window_new`.
///
/// @param conninfo The database, NUL-terminated: a `postgresql://` URL or
///     `key=value` pairs; only read during the call.
/// @param limit The most calls per key in a window, at least 1 and at most the
///     window's largest (`ratomic_window_max_limit`).
/// @param window_ns The window's length in **nanoseconds**: > 0 and at most 2^63 −
///     1.
/// @param options PostgreSQL options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_postgres_token_bucket_new`,
///     with the window's as `ratomic_sliding_window_new`.
///
/// @warning As `ratomic_postgres_token_bucket_new`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_postgres_sliding_window_new(
    conninfo: *const c_char,
    limit: u64,
    window_ns: u64,
    options: *const ratomic_postgres_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    // SAFETY: forwarded from the caller.
    unsafe { window(conninfo, Rule::sliding_window, limit, window_ns, options, out) }
}

/// Several named limits on each key, all or nothing, on PostgreSQL: as
/// `ratomic_multi_limiter_new` (all of a key's limits live in one row,
/// locked by the call), and as `ratomic_postgres_token_bucket_new` for the
/// rest.
///
/// @param conninfo The database, NUL-terminated: a `postgresql://` URL or
///     `key=value` pairs; only read during the call.
/// @param limits An array of `count` limit specs, copied.
/// @param count The number of limits, 1 to `RATOMIC_MAX_LIMITS` (16).
/// @param options PostgreSQL options, or NULL for all defaults; copied.
/// @param[out] out Receives the new limiter, only on `RATOMIC_OK`; release it with
///     `ratomic_limiter_free`.
/// @return `RATOMIC_OK` on success; errors as `ratomic_multi_limiter_new` and
///     `ratomic_postgres_token_bucket_new`.
///
/// @warning As `ratomic_multi_limiter_new` and `ratomic_postgres_token_bucket_new`.
#[no_mangle]
pub unsafe extern "C" fn ratomic_postgres_multi_limiter_new(
    conninfo: *const c_char,
    limits: *const ratomic_limit_spec,
    count: usize,
    options: *const ratomic_postgres_options,
    out: *mut *mut ratomic_limiter,
) -> ratomic_result {
    ffi_boundary!({
        let out = out_ptr(out, "out")?;
        // SAFETY: forwarded from the caller.
        let (rules, names) = unsafe { specs_arg(limits, count) }?;
        // SAFETY: forwarded from the caller.
        unsafe { make(conninfo, rules, names, options, out) }
    })
}
