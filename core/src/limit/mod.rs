//! The limiters: what a user builds and calls. Each is made of a rule (the
//! algorithms, `crate::algorithm`), a store (`crate::store`) and a clock.
//!
//! - `base`: what every keyed limiter is made of, and the builder.
//! - `keyed`: one algorithm per key; `token_bucket`, `fixed_window` and
//!   `sliding_window` name it for each algorithm.
//! - `direct`: one bucket, no key.
//! - `limiter`: several limits on one key, all or nothing.
//! - `stack`: limiters on different keys, all or nothing.
//! - `quotas`: token buckets whose quota comes with each call.

pub(crate) mod base;
pub(crate) mod direct;
pub(crate) mod fixed_window;
pub(crate) mod keyed;
pub(crate) mod limiter;
pub(crate) mod quotas;
pub(crate) mod sliding_window;
pub(crate) mod stack;
pub(crate) mod token_bucket;
