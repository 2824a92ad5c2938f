//! # ratomic-redis
//!
//! ratomic's limiters with their state in Redis or Valkey: the same rules
//! (GCRA token bucket, fixed and sliding windows, several named limits on
//! one key, all or nothing) and the same [`Decision`](ratomic::Decision)s as
//! the in-memory engine, shared by every process and host that uses the
//! same server and key prefix.
//!
//! - One round trip per decision: one Lua script ([`script`]), loaded once,
//!   called with `EVALSHA`, loaded again on `NOSCRIPT`. It reads the
//!   server's `TIME`; the `*_at` forms pass the caller's time instead.
//!   It writes nothing on a denial and gives every key a `PEXPIRE` equal to
//!   its time until full (rounded up, at least 1 ms).
//! - Leased tokens ([`Lease`], opt-in): a call may also take a slice of a
//!   hot key's tokens, which this process then grants in memory, exactly
//!   fleet-wide (the slice's emission slots are no one else's, and each is
//!   granted only at a time the bucket could have granted it); the price is
//!   tokens idle in a lease, at most one lease per key and process.
//! - All of a key's limits live in one hash, `<prefix>{<key>}` ([`keys`]):
//!   an all-or-nothing call touches one key, in one Cluster slot.
//! - Arithmetic in whole microseconds, exact in Lua's doubles; see
//!   [`rules`] for what that rounds next to the in-memory nanoseconds.
//! - The sans-IO layer ([`Driver`], [`Limits`], [`script`], [`keys`],
//!   [`rules`]) has no client dependency: it checks a call, builds its
//!   arguments, decodes the reply, and runs the deny cache, the circuit
//!   breaker and the [`FailurePolicy`]; any client moves the bytes (the
//!   Python and Node faces use the user's own). The `client` feature
//!   (default) adds [`RedisLimiter`] (tokio) and [`BlockingRedisLimiter`]
//!   over the `redis` crate, which run the same [`Driver`].
//!
//! ```
//! use ratomic::Rule;
//! use ratomic_redis::{Limits, Op};
//!
//! let limits = Limits::single(Rule::parse("10/s")?)?;
//! limits.check(b"user:42", 1)?;                       // bad input fails here, before any I/O
//! let key = limits.key(b"user:42");                   // b"ratomic:{user:42}"
//! let args = limits.args(Op::Allow, None, 1)?;        // EVALSHA <sha> 1 <key> <args…>
//! # let _ = (key, args);
//! let d = limits.decode(&[1, 1, 9, 10, 0, 100_000])?; // the script's reply
//! assert!(d.allowed() && d.decision.remaining == 9);
//! # Ok::<(), ratomic_redis::Error>(())
//! ```

#![warn(missing_docs)]

mod driver;
mod error;
pub mod keys;
mod limits;
pub mod rules;
pub mod script;

#[cfg(feature = "client")]
mod client;

pub use driver::{BatchStep, Call, Driver, FailurePolicy, Options, Step};
pub use error::{Error, Result};
pub use limits::{Limits, MultiDecision, Op, Source, SINGLE};
/// Leases are core's (`ratomic::backend::lease`), shared with the
/// PostgreSQL backend: the same engine, sizes and exactness argument.
pub use ratomic::backend::{Lease, DRIFT_PPM};
pub use rules::RedisRule;

#[cfg(feature = "client")]
pub use client::{BlockingRedisLimiter, RedisLimiter};
/// The `redis` crate this one is built on (its connection types and
/// `aio::ConnectionLike`, for code generic over a [`RedisLimiter`]'s
/// connection).
#[cfg(feature = "client")]
pub use redis;
