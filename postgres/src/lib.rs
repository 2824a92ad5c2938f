//! # ratomic-postgres
//!
//! ratomic's limiters with their state in PostgreSQL: the same rules (GCRA
//! token bucket, fixed and sliding windows, several named limits on one
//! key, all or nothing) and the same [`Decision`](ratomic::Decision)s as
//! the in-memory engine, shared by every process and host that uses the
//! same database and prefix.
//!
//! - One statement per decision: a PL/pgSQL function ([`schema`]), created
//!   by a migration the client runs (or a DBA runs from
//!   [`schema::sql`]). It reads the server's clock once a statement
//!   (`clock_timestamp()` in the functions, `statement_timestamp()` in the
//!   common allow, [`schema::ALLOW`]); the `*_at` forms pass the caller's
//!   time instead. Calls in flight at once
//!   share statements in the crate's client ([`PostgresLimiter`]): plain
//!   allows beyond one per two connections wait for a statement to end
//!   and go together, up to [`MAX_BATCH`], as one batch statement at one
//!   reading of the server's clock, each answered as it would have been
//!   alone.
//! - An allow locks the key's row (`SELECT … FOR UPDATE`, or the `INSERT`
//!   of a new one): calls on one key serialize on it and never over-grant.
//!   A denial or a peek writes nothing.
//! - Arithmetic in whole microseconds in `bigint`, never floating point;
//!   see [`rules`] for what that rounds next to the in-memory nanoseconds.
//! - Leased tokens ([`Lease`], opt-in), as on Redis: a call may also take a
//!   slice of a hot key's tokens ([`schema::LEASE`]), which this process
//!   then grants in memory, exactly fleet-wide (the slice's emission slots
//!   are no one else's, and each is granted only at a time the bucket
//!   could have granted it); the price is tokens idle in a lease, at most
//!   one lease per key and process.
//! - Rows of keys that are full again are removed by [`gc`](PostgresLimiter::gc)
//!   (or a task you start with [`spawn_gc`](PostgresLimiter::spawn_gc)),
//!   never by a thread you did not ask for. A removed row answers as a
//!   full one.
//! - The sans-IO layer ([`Driver`], [`Limits`], [`schema`], [`rules`]) has
//!   no client dependency: it checks a call, gives its parameters, decodes
//!   the reply, and runs the deny cache, the circuit breaker and the
//!   [`FailurePolicy`]; any client moves the bytes (the Python and Node
//!   faces use the user's own). The `client` feature (default) adds
//!   [`PostgresLimiter`] (tokio) and [`BlockingPostgresLimiter`] over
//!   tokio-postgres, which run the same [`Driver`].
//!
//! ```
//! use ratomic::Rule;
//! use ratomic_postgres::{schema, Limits};
//!
//! let limits = Limits::single(Rule::parse("10/s")?)?;
//! limits.check(b"user:42", 1)?;                       // bad input fails here, before any I/O
//! // schema::CALL with ("a", limits.prefix(), b"user:42", None, 1, limits.kinds(), limits.p1(), limits.p2())
//! # let _ = schema::CALL;
//! let d = limits.decode(&[1, 1, 9, 10, 0, 100_000])?; // the row's bigint[]
//! assert!(d.allowed() && d.decision.remaining == 9);
//! # Ok::<(), ratomic_postgres::Error>(())
//! ```

#![warn(missing_docs)]

mod driver;
mod error;
mod limits;
pub mod rules;
pub mod schema;

#[cfg(feature = "client")]
mod client;

pub use driver::{Batch, BatchStep, Call, Coalesced, Driver, FailurePolicy, GiveBack, Options, Statement, Step};
pub use error::{Error, Result};
pub use limits::{Limits, MultiDecision, Op, Source, DEFAULT_PREFIX, SINGLE};
/// Leases are core's (`ratomic::backend::lease`), shared with the Redis
/// backend: the same engine, sizes and exactness argument.
pub use ratomic::backend::{Lease, DRIFT_PPM};
pub use rules::PgRule;

#[cfg(feature = "client")]
pub use client::{BlockingPostgresLimiter, PostgresLimiter, GC_CHUNK, MAX_BATCH};
/// The `tokio_postgres` crate this one is built on.
#[cfg(feature = "client")]
pub use tokio_postgres;
