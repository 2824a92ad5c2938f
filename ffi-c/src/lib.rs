//! # ratomic-ffi: the C ABI of ratomic
//!
//! Builds `libratomic.so` and `libratomic.a`; the header `include/ratomic.h`
//! is generated from this crate by cbindgen (`ffi-c/header-gen`).
//!
//! Conventions, after rustls-ffi:
//!
//! - One opaque handle, [`ratomic_limiter`], for every keyed limiter kind
//!   (token bucket, fixed window, sliding window, several named limits), so
//!   the same operations ([`ratomic_allow`], [`ratomic_peek`], …) work on
//!   each. It holds core's own types (`Keyed<Rule>` or `Limiter`): this
//!   crate moves bytes, maps types and errors, and reads the caller's clock;
//!   every decision and check is core's. What takes other arguments has its
//!   own handle: [`ratomic_direct`] (one bucket, no key), `ratomic_quotas`
//!   (a quota with each call), `ratomic_stack` (a key per member).
//! - Every function returns a [`ratomic_result`]; its numbers are fixed and
//!   never reused. Out-parameters are written only when it is `RATOMIC_OK`.
//! - Every pointer is checked for NULL; every body runs inside one panic
//!   boundary ([`boundary`]), so a panic is reported as `RATOMIC_PANIC` and
//!   never unwinds into C.
//! - `_free` functions accept NULL.

#![allow(non_camel_case_types)]
// C names: ratomic_limiter, ratomic_result, ...
// Each exported function's safety contract is its doc comment's `@warning`,
// written for the C header (Doxygen), not a Rust `# Safety` section.
#![allow(clippy::missing_safety_doc)]

#[macro_use]
mod boundary;
mod decision;
mod direct;
#[macro_use]
mod handle;
mod headers;
mod last_error;
mod limiter;
mod multi;
mod ops;
mod options;
mod postgres;
mod postgres_engine;
mod quotas;
mod redis;
mod redis_engine;
mod result;
mod rule;
mod stack;

pub use decision::{ratomic_decision, ratomic_limit_decision};
pub use direct::{
    ratomic_direct, ratomic_direct_acquire, ratomic_direct_allow, ratomic_direct_allow_at, ratomic_direct_free,
    ratomic_direct_limit_get, ratomic_direct_now, ratomic_direct_peek, ratomic_direct_peek_at, ratomic_direct_refund,
    ratomic_direct_refund_at, ratomic_direct_reset, ratomic_direct_token_bucket_from_rate,
    ratomic_direct_token_bucket_new,
};
pub use handle::ratomic_limiter;
pub use headers::{
    ratomic_describe, ratomic_direct_describe, ratomic_direct_headers, ratomic_direct_problem_json, ratomic_headers,
    ratomic_problem_json,
};
pub use last_error::{ratomic_last_error_message, ratomic_last_error_request};
pub use limiter::{
    ratomic_fixed_window_from_rate, ratomic_fixed_window_new, ratomic_limiter_free, ratomic_sliding_window_from_rate,
    ratomic_sliding_window_new, ratomic_token_bucket_from_rate, ratomic_token_bucket_new,
};
pub use multi::{
    ratomic_allow_detailed, ratomic_allow_detailed_at, ratomic_limit_count, ratomic_limit_spec,
    ratomic_multi_limiter_from_rates, ratomic_multi_limiter_new, ratomic_peek_detailed, ratomic_peek_detailed_at,
};
pub use ops::{
    ratomic_acquire, ratomic_allow, ratomic_allow_at, ratomic_allow_many, ratomic_allow_many_at, ratomic_gc,
    ratomic_gc_at, ratomic_key_count, ratomic_now, ratomic_peek, ratomic_peek_at, ratomic_refund, ratomic_refund_at,
    ratomic_request, ratomic_reset, ratomic_reset_at, RATOMIC_MAX_LIMITS, RATOMIC_MAX_TIME, RATOMIC_NO_TIMEOUT,
};
pub use options::{ratomic_clock_fn, ratomic_clock_source, ratomic_eviction, ratomic_options, ratomic_sleep_fn};
pub use postgres::{
    ratomic_postgres_fixed_window_new, ratomic_postgres_multi_limiter_new, ratomic_postgres_options,
    ratomic_postgres_sliding_window_new, ratomic_postgres_token_bucket_new,
};
pub use quotas::{
    ratomic_quota, ratomic_quotas, ratomic_quotas_allow, ratomic_quotas_allow_at, ratomic_quotas_free,
    ratomic_quotas_gc_at, ratomic_quotas_new, ratomic_quotas_peek, ratomic_quotas_peek_at, ratomic_quotas_refund_at,
    ratomic_quotas_reset_at,
};
pub use redis::{
    ratomic_redis_fixed_window_new, ratomic_redis_multi_limiter_new, ratomic_redis_options, ratomic_redis_policy,
    ratomic_redis_sliding_window_new, ratomic_redis_token_bucket_new,
};
pub use result::{ratomic_result, ratomic_result_message, ratomic_version};
pub use rule::{ratomic_algorithm, ratomic_limit_get, ratomic_limit_info, ratomic_window_max_limit};
pub use stack::{
    ratomic_key, ratomic_stack, ratomic_stack_acquire, ratomic_stack_allow, ratomic_stack_allow_at, ratomic_stack_free,
    ratomic_stack_member, ratomic_stack_member_count, ratomic_stack_new, ratomic_stack_new_members,
    ratomic_stack_peek_at, ratomic_stack_refund_at, ratomic_stack_reset_at,
};

#[cfg(test)]
mod tests;
