//! # ratomic-tower
//!
//! Rate limiting for [tower](https://docs.rs/tower) services — axum routers, hyper services — on
//! any ratomic limiter, with the IETF `RateLimit` header fields on
//! every response and an RFC 9457 problem body on each 429 (the same text
//! [`ratomic::headers`] writes, as in every ratomic face).
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use axum::{routing::get, Router};
//! use ratomic::TokenBucket;
//! use ratomic_tower::{KeyBy, RateLimitLayer};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = TokenBucket::builder("100/min").build()?;
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(limiter).name("per-ip")?.key(KeyBy::peer_ip()));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // The peer address comes from axum's ConnectInfo.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! ## What it limits
//!
//! Every request through the layer, or per route with axum's
//! `MethodRouter::layer` / `Router::route_layer`, or only some methods
//! ([`RateLimitLayer::methods`]). A request costs 1 or what
//! [`RateLimitLayer::cost`] says. An admitted request carries its
//! [`RateLimitInfo`] in its extensions for the handler. With
//! [`RateLimitLayer::skip_failed_responses`] (or
//! [`skip_successful_responses`](RateLimitLayer::skip_successful_responses))
//! a request is charged on the way in and its cost given back once its
//! response says so: requests in flight never pass more than the limit.
//!
//! ## Keys
//!
//! [`KeyBy::peer_ip`] (the default) keys by the client's address: axum's
//! `ConnectInfo<SocketAddr>` or a plain `SocketAddr` in the request's
//! extensions, an IPv6 address grouped by its /64. axum records
//! `ConnectInfo` only when served with
//! `app.into_make_service_with_connect_info::<SocketAddr>()`, as above; a
//! plain `axum::serve(listener, app)` gives no peer address, and every
//! request is then refused with a 500, reported once through `tracing`
//! with that fix. `X-Forwarded-For`, `Forwarded` (RFC 7239) and `X-Real-IP`
//! are read only behind proxies the layer is told to trust
//! ([`KeyBy::peer_ip_behind`], [`KeyBy::client_ip`] with [`ClientIp`]):
//! the client is then the n-th hop from the right, a port after the
//! address dropped; anything left of it is whatever the client wrote. A
//! request that carries one of them when no proxy is trusted is reported
//! once: behind a proxy, every client would share its bucket.
//! [`KeyBy::global`] puts every request on one key; [`KeyBy::header`] and
//! [`KeyBy::func`] key by a header or a closure; a request they find no
//! key in is refused with a 400. Behind a [`Stack`](ratomic::Stack), every
//! member is on that key (a direct member ignores it), or
//! [`KeyBy::per_member`] gives each member its own.
//!
//! ## Limiters
//!
//! Any in-memory limiter (a `TokenBucket`, `FixedWindow`,
//! `SlidingWindow`, `Keyed<Rule>`; a multi-limit `Limiter`; either on a
//! shared file; a `Stack` of single-limit members, one header item per
//! member; per-request quotas of a `Quotas`, as [`Plans`]) decides at once,
//! without blocking. With the `redis` feature, a
//! `ratomic_redis::RedisLimiter` stands behind the layer too: its decision
//! is awaited (one `EVALSHA`, or its deny cache, breaker and failure
//! policy); with the `postgres` feature, a
//! `ratomic_postgres::PostgresLimiter` the same way (one statement).
//!
//! ## Coming from tower_governor
//!
//! | tower_governor | ratomic-tower |
//! |---|---|
//! | `GovernorConfigBuilder::default().per_second(2).burst_size(5)` (one token every **2 s**) | `TokenBucket::new(Quota::new(5, 0.5)?)`, or `TokenBucket::builder("5/10s")` |
//! | `.per_millisecond(n)`, `.per_nanosecond(n)`, `.period(d)` | `Quota::new(burst, 1 / (the period in s))` |
//! | `GovernorLayer::new(config)` | `RateLimitLayer::new(limiter)` |
//! | `PeerIpKeyExtractor` (default) | [`KeyBy::peer_ip`] (default) |
//! | `SmartIpKeyExtractor` (the left-most `X-Forwarded-For`, `X-Real-IP` or `Forwarded`: anyone's to forge) | [`KeyBy::client_ip`]`(`[`ClientIp::behind`]`(n, header))`: what the n proxies you trust wrote |
//! | `GlobalKeyExtractor` | [`KeyBy::global`] |
//! | a custom `KeyExtractor` | [`KeyBy::func`], [`KeyBy::header`] |
//! | `.methods(vec![Method::POST])` | [`RateLimitLayer::methods`] |
//! | `.use_headers()` (`x-ratelimit-limit`, `-remaining`) | [`RateLimitLayer::legacy_headers`]`(true)`; the IETF fields are always on ([`RateLimitLayer::standard_headers`]) |
//! | `.error_handler(f)` | [`RateLimitLayer::on_deny`] |
//! | `config.limiter().retain_recent()` on a timer | nothing: full buckets are dropped as they fill (`max_keys` bounds memory) |
//!
//! ## When the limiter cannot decide
//!
//! A client never sees why: it gets a generic RFC 9457 document, and the
//! reason goes to [`tracing`] (target `ratomic_tower`), each kind at once,
//! then at most once a minute with the count since.
//!
//! - The limiter's backend failed (a `RedisLimiter` under
//!   `FailurePolicy::ReturnError`): as [`RateLimitLayer::on_backend_failure`]
//!   says, a 503 with `Retry-After: 1` ([`BackendFailure::Deny`], the
//!   default) or the request goes through unchecked
//!   ([`BackendFailure::Allow`]). A `RedisLimiter` whose own policy answers
//!   (`FailOpen`, `FailClosed`, `Fallback`) is reported as failing, and its
//!   answer stands.
//! - The request cannot be judged (a key too long, a cost above the limit,
//!   a stack's keys not one per member, no key): a 400, whatever the
//!   backend policy — letting it through would let any client skip the
//!   limit by sending, say, a long key.
//! - No peer address for the default key (no `ConnectInfo`), or a quota
//!   no [`Plans`] plan declares: a 500, a set-up mistake, reported once
//!   with the fix.
//!
//! An in-memory limiter's state belongs to its process: a service run as
//! several processes (workers behind one socket, replicas behind a load
//! balancer) gives each its own count, so a per-IP limit of 5 per minute
//! lets through 5 per minute *per process*. Build the limiter with
//! `.shared_file(path)` for the processes of one host, or put a
//! `ratomic_redis::RedisLimiter` (`redis` feature) or a
//! `ratomic_postgres::PostgresLimiter` (`postgres` feature) behind the
//! layer for a fleet.

#![warn(missing_docs)]

mod config;
mod fields;
mod key;
mod limiter;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod remote;
mod service;

pub use config::{BackendFailure, RateLimitLayer};
pub use fields::{Outcome, RateLimitInfo};
pub use key::{client_key, peer_key, ClientIp, KeyBy, ProxyHeader};
pub use limiter::{IntoRateLimiter, Multi, Plans, RateLimiter, Single, StackOf};
#[cfg(feature = "postgres")]
pub use postgres::Postgres;
pub use ratomic::headers::Draft;
#[cfg(feature = "redis")]
pub use redis::Redis;
pub use service::{RateLimit, ResponseFuture};
