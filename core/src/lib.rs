//! # ratomic
//!
//! A rate limiter that is fast and exact: each key's state is one
//! `AtomicU64` changed by a compare-and-swap loop, with lazy refill, no
//! background threads and no locks on the per-key path (a new key is
//! added, and a table grown, under a short per-shard lock).
//!
//! - [`TokenBucket`]: a GCRA token bucket per key, with peek,
//!   refund, reset, a live-key count and a bounded store that forgets full
//!   buckets without changing any later decision.
//! - [`FixedWindow`] and [`SlidingWindow`]: window counters, index and
//!   counts packed in the same one word per key.
//! - [`Limiter`]: several named limits on one key (a token bucket and a
//!   daily window, say), all or nothing, one lookup for all; per-request
//!   [`LimitSet`]s choose which limits a call is subject to.
//! - [`Stack`]: limiters on different keys (per IP, per user, global), all
//!   or nothing, with a decision that names who denied.
//! - [`Quotas`]: token buckets whose quota comes with each call
//!   (per-customer quotas read from a database), in one bounded store.
//! - [`DirectTokenBucket`]: one bucket, no key.
//! - [`headers`]: the IETF `RateLimit` header fields, `Retry-After` and a
//!   problem body for HTTP responses, from any decision.
//! - Batches: `allow_many` decides many `(key, cost)` pairs in one call.
//! - Every call returns the same [`Decision`]: allowed, remaining, limit,
//!   retry_after, reset_after. A denial is a value; errors ([`Error`]) are
//!   for misuse and change no state.
//! - Time comes from a [`Clock`] ([`MonotonicClock`] by default, the
//!   cheaper [`CoarseClock`] or the cheapest [`CachedClock`] if you opt in,
//!   [`ManualClock`] for tests) or
//!   from the caller, via the `*_at` methods.
//!
//! The source is laid out by layer (the whole map is `ARCHITECTURE.md` at
//! the repository's root): the values (`rate`, `quota`, `clock`,
//! `decision`, `error`, `sync`) at the top; `algorithm/`, pure arithmetic on
//! one state word (GCRA, the windows, the rules that mix them); `store/`, in
//! memory and in a shared file, with its keys and epoch reclamation, which
//! knows nothing of the algorithms; `limit/`, the limiters built on both
//! (keyed, direct, several limits on a key, stacks, per-call quotas); and
//! `headers` for HTTP; `backend` holds the circuit breaker, deny cache
//! and lease engine the backend crates (Redis, PostgreSQL) share.
//!
//! ```
//! use std::time::Duration;
//! use ratomic::{ManualClock, Quota, TokenBucket};
//!
//! // 10 requests a second per user, bursts of up to 10.
//! let clock = ManualClock::new();
//! let limiter = TokenBucket::builder(Quota::parse("10/s")?).clock(clock.clone()).build()?;
//!
//! for _ in 0..10 {
//!     assert!(limiter.allow("user:42")?.allowed);
//! }
//! let d = limiter.allow("user:42")?;
//! assert!(!d.allowed);
//! assert_eq!(d.retry_after, Duration::from_millis(100)); // one token refills in 100 ms
//!
//! clock.advance(d.retry_after);
//! assert!(limiter.allow("user:42")?.allowed);
//! # Ok::<(), ratomic::Error>(())
//! ```

#![warn(missing_docs)]

mod algorithm;
pub mod backend;
mod clock;
mod decision;
mod error;
pub mod headers;
mod limit;
mod quota;
mod rate;
mod store;
mod sync;

pub use algorithm::gcra::Gcra;
pub use algorithm::rule::{parse_limits, Rule};
pub use algorithm::Algorithm;
pub use clock::{
    check_time, CachedClock, Clock, ClockId, CoarseClock, ManualClock, MonotonicClock, Refresher, MAX_TIME,
};
pub use decision::Decision;
#[doc(hidden)]
pub use decision::Verdict;
pub use error::{Error, Result};
pub use limit::base::Builder;
pub use limit::direct::Direct;
pub use limit::fixed_window::FixedWindow;
pub use limit::keyed::Keyed;
pub use limit::limiter::{
    LimitSet, Limiter, LimiterBuilder, Limits, MultiDecision, NamedDecision, Selected, MAX_LIMITS,
};
pub use limit::quotas::{PerCall, Quotas};
pub use limit::sliding_window::SlidingWindow;
pub use limit::stack::{Receipt, Stack, StackBuilder, StackMember};
pub use quota::Quota;
pub use rate::Rate;
#[cfg(ratomic_loom)]
#[doc(hidden)]
pub use store::first_home_of as __first_home_of;
#[cfg(ratomic_loom)]
#[doc(hidden)]
pub use store::first_home_of_bytes as __first_home_of_bytes;
pub use store::key::{ip_key, AsKey, BoundedKey, Ipv6Grouping, Key, StoredKey};
#[cfg(ratomic_loom)]
#[doc(hidden)]
pub use store::shared::model as shared_model;
#[cfg(ratomic_loom)]
#[doc(hidden)]
pub use store::stop::{at as __stop_at, stopped as __stopped, At as __StopAt};
/// The epoch reclamation, for `tests/loom.rs`'s models of it and the
/// `reclaim` benchmark; not part of the API.
#[doc(hidden)]
pub mod __epoch {
    pub use crate::store::epoch::{pin, Guard};
}
pub use algorithm::window::{FixedWindowCounter, SlidingWindowCounter};
pub use limit::token_bucket::{DirectTokenBucket, TokenBucket};
pub use store::{Eviction, Options};

/// The README's Rust examples, compiled and run as doc tests.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
