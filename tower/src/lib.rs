//! # ratomic-tower
//!
//! Rate limiting for [tower](https://docs.rs/tower) services — axum routers, hyper services — on
//! any in-memory ratomic limiter, with the IETF `RateLimit` header fields on
//! every response and an RFC 9457 problem body on each 429 (both formatted
//! by [`ratomic::headers`], as in every ratomic face).
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
//! ## Keys
//!
//! [`KeyBy::peer_ip`] (the default) keys by the client's address: axum's
//! `ConnectInfo<SocketAddr>` or a plain `SocketAddr` in the request's
//! extensions, an IPv6 address grouped by its /64. axum records
//! `ConnectInfo` only when served with
//! `app.into_make_service_with_connect_info::<SocketAddr>()`, as above; a
//! plain `axum::serve(listener, app)` gives no peer address, and every
//! request is then refused with a 500, reported once through `tracing`
//! with that fix. `X-Forwarded-For` is read
//! only when [`KeyBy::peer_ip_behind`] names how many proxies are in front
//! (the client is then the n-th address from the right of all its field
//! lines taken in order, a port after the address dropped; anything left of
//! it is whatever the client wrote; a request that carries the header when
//! no proxy is trusted is reported once: behind a proxy, every client would
//! share its bucket). [`KeyBy::header`] and [`KeyBy::func`] key by a header
//! or a closure; a request they find no key in is refused with a 400.
//! Behind a [`Stack`], every member is on that key (a direct member ignores
//! it), or [`KeyBy::per_member`] gives each member its own.
//!
//! ## Limiters
//!
//! Any in-memory limiter ([`Keyed`]: `TokenBucket`, `FixedWindow`,
//! `SlidingWindow`, `Keyed<Rule>`; a multi-limit [`Limiter`]; either on a
//! shared file; a [`Stack`] of single-limit members, one header item per
//! member) decides at once, without blocking. With the `redis`
//! feature, a `ratomic_redis::RedisLimiter` stands behind the layer too:
//! its decision is awaited (one `EVALSHA`, or its deny cache, breaker and
//! failure policy).
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
//! - No peer address for the default key (no `ConnectInfo`): a 500, a
//!   set-up mistake, reported once with the fix.
//!
//! An in-memory limiter's state belongs to its process: a service run as
//! several processes (workers behind one socket, replicas behind a load
//! balancer) gives each its own count, so a per-IP limit of 5 per minute
//! lets through 5 per minute *per process*. Build the limiter with
//! `.shared_file(path)` for the processes of one host, or put a
//! `ratomic_redis::RedisLimiter` behind the layer (`redis` feature) for a
//! fleet.

#![warn(missing_docs)]

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::{header, HeaderName, HeaderValue, Request, Response, StatusCode};
use ratomic::headers::{Headers, Policy, PROBLEM_CONTENT_TYPE};
use ratomic::{Algorithm, Clock, Keyed, Limiter, Stack};
use smallvec::SmallVec;
use tower_layer::Layer;
use tower_service::Service;

/// What a request was answered: allowed or not, the header fields every
/// response carries, and on a denial the problem body.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The call passed every limit.
    pub allowed: bool,
    /// `RateLimit-Policy`, `RateLimit`, `Retry-After` on a denial, and the
    /// legacy fields when asked.
    pub fields: Vec<(&'static str, String)>,
    /// The RFC 9457 document for a 429 (None when allowed).
    pub problem: Option<String>,
}

impl Outcome {
    fn of(h: &Headers<'_>, legacy: bool) -> Self {
        Outcome { allowed: h.decision().allowed, fields: h.fields(legacy), problem: h.problem_json() }
    }
}

/// Why a request could not be judged (a key too long, a cost above the
/// limit, Redis failing under `FailurePolicy::ReturnError`).
pub type DecideError = Box<dyn std::error::Error + Send + Sync>;

/// An answer the layer awaits (a Redis round trip).
pub type Pending = Pin<Box<dyn Future<Output = Result<Outcome, DecideError>> + Send>>;

/// A limiter's answer: at once (in memory) or to await (Redis).
pub enum Decided {
    /// Decided without waiting.
    Now(Result<Outcome, DecideError>),
    /// A decision still to come.
    Later(Pending),
}

impl std::fmt::Debug for Decided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decided::Now(r) => f.debug_tuple("Now").field(r).finish(),
            Decided::Later(_) => f.write_str("Later(..)"),
        }
    }
}

/// A limiter the layer can use: a single-rule keyed limiter ([`Keyed`]:
/// `TokenBucket`, `FixedWindow`, `SlidingWindow`, `Keyed<Rule>`), a
/// multi-limit [`Limiter`], a [`Stack`], or (feature `redis`) a
/// Redis-backed one.
/// `name` names a single rule in the header fields.
pub trait RateLimiter: Send + Sync + 'static {
    /// Decides `cost` for `key` and formats the answer.
    fn decide(&self, key: &[u8], cost: u64, legacy: bool) -> Decided;
    /// Names a single rule's policy (multi-limit limiters name their own).
    fn set_name(&mut self, name: &str) -> ratomic::Result<()>;
    /// A [`Stack`]'s number of members: how many keys
    /// [`KeyBy::per_member`] must give. `None` for every other limiter.
    fn members(&self) -> Option<usize> {
        None
    }
    /// Decides `cost` for one key per member (a [`Stack`]; only called when
    /// [`members`](Self::members) is `Some`).
    fn decide_keys(&self, keys: &[Vec<u8>], cost: u64, legacy: bool) -> Decided {
        let _ = (keys, cost, legacy);
        Decided::Now(Err("per-member keys need a Stack behind the layer".into()))
    }
}

/// A single-rule limiter with its policy.
#[derive(Debug)]
pub struct Single<A: Algorithm, C: Clock> {
    limiter: Keyed<A, [u8], C>,
    policy: Policy,
}

impl<A: Algorithm, C: Clock + 'static> RateLimiter for Single<A, C> {
    fn decide(&self, key: &[u8], cost: u64, legacy: bool) -> Decided {
        Decided::Now(match self.limiter.allow_n(key, cost) {
            Ok(d) => Ok(Outcome::of(&Headers::single(&self.policy, d), legacy)),
            Err(e) => Err(e.into()),
        })
    }
    fn set_name(&mut self, name: &str) -> ratomic::Result<()> {
        self.policy = Policy::of(name, self.limiter.algorithm())?;
        Ok(())
    }
}

/// A multi-limit limiter with its policies.
#[derive(Debug)]
pub struct Multi<C: Clock> {
    limiter: Limiter<[u8], C>,
    policies: Vec<Policy>,
}

impl<C: Clock + 'static> RateLimiter for Multi<C> {
    fn decide(&self, key: &[u8], cost: u64, legacy: bool) -> Decided {
        let run = || -> ratomic::Result<Outcome> {
            let d = self.limiter.allow_n(key, cost)?;
            Ok(Outcome::of(&Headers::multi(&self.policies, &d)?, legacy))
        };
        Decided::Now(run().map_err(Into::into))
    }
    fn set_name(&mut self, _name: &str) -> ratomic::Result<()> {
        Ok(())
    }
}

/// A [`Stack`] with one policy per member.
#[derive(Debug)]
pub struct StackOf<C: Clock> {
    stack: Stack<C>,
    policies: Vec<Policy>,
}

impl<C: Clock> StackOf<C> {
    fn outcome<Q: AsRef<[u8]>>(&self, keys: &[Q], cost: u64, legacy: bool) -> Decided {
        let run = || -> ratomic::Result<Outcome> {
            let d = self.stack.allow_n(keys, cost)?;
            Ok(Outcome::of(&Headers::multi(&self.policies, &d)?, legacy))
        };
        Decided::Now(run().map_err(Into::into))
    }
}

impl<C: Clock + 'static> RateLimiter for StackOf<C> {
    /// Every member on the request's key (a direct member ignores it).
    fn decide(&self, key: &[u8], cost: u64, legacy: bool) -> Decided {
        let keys: SmallVec<[&[u8]; 4]> = smallvec::smallvec![key; self.policies.len()];
        self.outcome(&keys, cost, legacy)
    }
    fn set_name(&mut self, _name: &str) -> ratomic::Result<()> {
        Ok(())
    }
    fn members(&self) -> Option<usize> {
        Some(self.policies.len())
    }
    fn decide_keys(&self, keys: &[Vec<u8>], cost: u64, legacy: bool) -> Decided {
        self.outcome(keys, cost, legacy)
    }
}

/// A Redis-backed limiter with its policies (feature `redis`): one named
/// after the layer's `name` when it holds a single rule
/// (`Limits::single`), else one per named limit.
#[cfg(feature = "redis")]
#[derive(Debug)]
pub struct Redis<C> {
    limiter: ratomic_redis::RedisLimiter<C>,
    policies: Arc<[Policy]>,
    single: bool,
    /// Answers of the limiter's own failure policy, reported.
    by_policy: Arc<Throttle>,
}

#[cfg(feature = "redis")]
impl<C> Redis<C> {
    fn policies(limits: &ratomic_redis::Limits, single_name: &str) -> ratomic::Result<Arc<[Policy]>> {
        let single = matches!(limits.names().collect::<Vec<_>>()[..], [ratomic_redis::SINGLE]);
        limits
            .names()
            .zip(limits.core_rules())
            .map(|(n, r)| Policy::of(if single { single_name } else { n }, r))
            .collect()
    }
}

#[cfg(feature = "redis")]
impl<C> RateLimiter for Redis<C>
where
    C: ratomic_redis::redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn decide(&self, key: &[u8], cost: u64, legacy: bool) -> Decided {
        let (limiter, key, policies) = (self.limiter.clone(), key.to_vec(), self.policies.clone());
        let by_policy = self.by_policy.clone();
        Decided::Later(Box::pin(async move {
            let d = limiter.allow_n(&key, cost).await?;
            if matches!(d.source, ratomic_redis::Source::Policy | ratomic_redis::Source::Fallback) {
                if let Some(more) = by_policy.due() {
                    tracing::warn!(
                        target: "ratomic_tower",
                        source = ?d.source,
                        more,
                        "the limiter's Redis is failing; its own failure policy answers"
                    );
                }
            }
            let entries = d.entries().enumerate().map(|(i, (_, e))| (i, e));
            Ok(Outcome::of(&Headers::from_parts(&policies, entries, d.decision)?, legacy))
        }))
    }
    fn set_name(&mut self, name: &str) -> ratomic::Result<()> {
        if self.single {
            self.policies = Self::policies(self.limiter.limits(), name)?;
        }
        Ok(())
    }
}

#[cfg(feature = "redis")]
impl<C> IntoRateLimiter for ratomic_redis::RedisLimiter<C>
where
    C: ratomic_redis::redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    type Limiter = Redis<C>;
    fn into_rate_limiter(self) -> ratomic::Result<Redis<C>> {
        let policies = Redis::<C>::policies(self.limits(), "default")?;
        let single = matches!(self.limits().names().collect::<Vec<_>>()[..], [ratomic_redis::SINGLE]);
        Ok(Redis { limiter: self, policies, single, by_policy: Arc::default() })
    }
}

/// Turns a ratomic limiter into what the layer holds.
pub trait IntoRateLimiter {
    /// The layer's form of the limiter.
    type Limiter: RateLimiter;
    /// Converts, naming a single rule `"default"`.
    fn into_rate_limiter(self) -> ratomic::Result<Self::Limiter>;
}

impl<A: Algorithm, C: Clock + 'static> IntoRateLimiter for Keyed<A, [u8], C> {
    type Limiter = Single<A, C>;
    fn into_rate_limiter(self) -> ratomic::Result<Single<A, C>> {
        let policy = Policy::of("default", self.algorithm())?;
        Ok(Single { limiter: self, policy })
    }
}

impl<C: Clock + 'static> IntoRateLimiter for Limiter<[u8], C> {
    type Limiter = Multi<C>;
    fn into_rate_limiter(self) -> ratomic::Result<Multi<C>> {
        let policies = Policy::for_limiter(&self)?;
        Ok(Multi { limiter: self, policies })
    }
}

/// Each member named as in the stack; a `Limiter` member (several limits,
/// no one policy) is an error naming it.
impl<C: Clock + 'static> IntoRateLimiter for Stack<C> {
    type Limiter = StackOf<C>;
    fn into_rate_limiter(self) -> ratomic::Result<StackOf<C>> {
        let policies = self.policies()?;
        Ok(StackOf { stack: self, policies })
    }
}

type KeyFn = dyn Fn(&http::request::Parts) -> Option<Vec<u8>> + Send + Sync;
type KeysFn = dyn Fn(&http::request::Parts) -> Option<Vec<Vec<u8>>> + Send + Sync;

#[derive(Clone)]
enum KeyFns {
    One(Arc<KeyFn>),
    PerMember(Arc<KeysFn>),
}

/// How the layer finds a request's key.
#[derive(Clone)]
pub struct KeyBy {
    fns: KeyFns,
    /// The trusted proxies of a key by the peer's address (None: another key).
    behind: Option<usize>,
}

impl std::fmt::Debug for KeyBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyBy(..)")
    }
}

impl KeyBy {
    /// The client's address (the default): axum's `ConnectInfo<SocketAddr>`
    /// or a `SocketAddr` extension, IPv6 grouped by /64. Never reads
    /// `X-Forwarded-For`.
    pub fn peer_ip() -> Self {
        Self::peer_ip_with(0, 64)
    }

    /// The client's address behind `proxies` trusted proxies: the
    /// `proxies`-th address from the right of `X-Forwarded-For` (the peer's
    /// own address when the header has fewer).
    pub fn peer_ip_behind(proxies: usize) -> Self {
        Self::peer_ip_with(proxies, 64)
    }

    /// [`peer_ip_behind`](Self::peer_ip_behind), with IPv6 addresses grouped
    /// by their first `ipv6_prefix` bits (at most 128).
    pub fn peer_ip_with(proxies: usize, ipv6_prefix: u8) -> Self {
        let f = move |parts: &http::request::Parts| peer_key(parts, proxies, ipv6_prefix);
        KeyBy { fns: KeyFns::One(Arc::new(f)), behind: Some(proxies) }
    }

    /// The value of header `name` (a request without it has no key).
    pub fn header(name: HeaderName) -> Self {
        Self::func(move |parts: &http::request::Parts| parts.headers.get(&name).map(|v| v.as_bytes().to_vec()))
    }

    /// Whatever `f` returns for the request's head.
    pub fn func(f: impl Fn(&http::request::Parts) -> Option<Vec<u8>> + Send + Sync + 'static) -> Self {
        KeyBy { fns: KeyFns::One(Arc::new(f)), behind: None }
    }

    /// For a [`Stack`]: one key per member, in the stack's order, from `f`
    /// (say the peer address for a per-IP member, a user id for a per-user
    /// one, anything for a direct member). With any other key, every member
    /// is on the same key. A request for which `f` gives no keys is refused
    /// with a 400; the wrong number of keys is a request the limiter cannot
    /// judge (a 400). [`RateLimitLayer::key`] panics if the limiter is not a
    /// stack.
    pub fn per_member(f: impl Fn(&http::request::Parts) -> Option<Vec<Vec<u8>>> + Send + Sync + 'static) -> Self {
        KeyBy { fns: KeyFns::PerMember(Arc::new(f)), behind: None }
    }
}

/// The key [`KeyBy::peer_ip_with`] gives a request, for a key function
/// that combines it with others (say [`KeyBy::per_member`]'s per-IP
/// member): the client's address behind `proxies` trusted proxies, IPv6
/// grouped by its first `ipv6_prefix` bits (at most 128). `None` when the
/// request carries no peer address.
///
/// ```
/// use ratomic_tower::{peer_key, KeyBy};
///
/// // Per client (the peer address, IPv6 by /64), per user, and global.
/// let keys = KeyBy::per_member(|parts| {
///     let user = parts.headers.get("x-user")?.as_bytes().to_vec();
///     Some(vec![peer_key(parts, 0, 64)?, user, Vec::new()])
/// });
/// ```
pub fn peer_key(parts: &http::request::Parts, proxies: usize, ipv6_prefix: u8) -> Option<Vec<u8>> {
    let forwarded = (proxies > 0).then(|| forwarded_client(parts, proxies)).flatten();
    forwarded.or_else(|| peer(parts)).map(|ip| client_key(ip, ipv6_prefix.min(128)).into_bytes())
}

fn peer(parts: &http::request::Parts) -> Option<IpAddr> {
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) = parts.extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(addr.ip());
    }
    parts.extensions.get::<SocketAddr>().map(SocketAddr::ip)
}

fn forwarded_client(parts: &http::request::Parts, proxies: usize) -> Option<IpAddr> {
    let hops: Vec<&str> = parts
        .headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    let hop = hops.len().checked_sub(proxies).map(|i| hops[i])?;
    hop_address(hop)
}

/// A hop's address, without the port some proxies write after it
/// (`203.0.113.7:41234`, `[2001:db8::1]:41234`, `[2001:db8::1]`): one
/// client is one key, whatever port its connection came from.
fn hop_address(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse() {
        return Some(ip);
    }
    if let Ok(addr) = hop.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    hop.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

/// A client's key from its address: IPv4 (or IPv4-mapped IPv6) as is,
/// other IPv6 addresses grouped by their first `prefix` bits (a `prefix`
/// above 128 is 128: the whole address).
pub fn client_key(ip: IpAddr, prefix: u8) -> String {
    // Grouped as ratomic's `ip_key` groups an `IpAddr` key, as text.
    let grouping = ratomic::Ipv6Grouping::Bits(prefix);
    match ratomic::ip_key(ip, grouping) {
        IpAddr::V4(v4) => ipv4_text(v4),
        IpAddr::V6(network) => format!("{network}/{}", grouping.prefix_len()),
    }
}

/// `v4.to_string()` without the formatter (the key of every request).
fn ipv4_text(v4: std::net::Ipv4Addr) -> String {
    let mut out = String::with_capacity(15);
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if octet >= 100 {
            out.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            out.push(char::from(b'0' + octet / 10 % 10));
        }
        out.push(char::from(b'0' + octet % 10));
    }
    out
}

type CostFn = dyn Fn(&http::request::Parts) -> u64 + Send + Sync;
type DenyFn = dyn Fn(&Outcome) -> Response<String> + Send + Sync;

struct Config<L> {
    limiter: L,
    key: KeyBy,
    cost: Option<Arc<CostFn>>,
    legacy: bool,
    on_deny: Option<Arc<DenyFn>>,
    on_backend_failure: BackendFailure,
    reports: Reports,
}

/// What the layer answers when its limiter's backend fails (a
/// `ratomic_redis::RedisLimiter` under `FailurePolicy::ReturnError`, whose
/// Redis is down or too slow). Either way the failure is reported through
/// `tracing`, and the client is told nothing of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendFailure {
    /// Fail closed (the default): a 503 with `Retry-After: 1` and a generic
    /// problem document. A limit in an app often guards something (logins,
    /// an expensive route, a paid quota); failing open would drop the guard
    /// exactly when the backend is under strain, which a client can cause.
    /// With the limiter's breaker, the 503s cost no wait on a dead server.
    #[default]
    Deny,
    /// Fail open: the request goes through unchecked, as Envoy's and Kong's
    /// rate limits do by default: for limits that shed load, where an
    /// outage of the limiter must not be one of the service. (A
    /// `RedisLimiter` with `FailurePolicy::Fallback` keeps a per-process
    /// limit instead.)
    Allow,
}

/// How often one kind of failure is reported: at once, then at most once per
/// this interval, with the count since.
const REPORT_INTERVAL: Duration = Duration::from_secs(60);

/// Reports of one kind of failure, throttled.
#[derive(Debug, Default)]
struct Throttle {
    /// ns since [`epoch`] (plus 1) of the last report; 0: never.
    last: AtomicU64,
    /// Failures since the last report.
    since: AtomicU64,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Throttle {
    /// `Some(n)`: report this one now, with `n` more since the last report;
    /// `None`: counted for the next.
    fn due(&self) -> Option<u64> {
        let now = u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX).saturating_add(1);
        let last = self.last.load(Ordering::Relaxed);
        let interval = u64::try_from(REPORT_INTERVAL.as_nanos()).unwrap_or(u64::MAX);
        let fresh = last == 0 || now.saturating_sub(last) >= interval;
        if fresh && self.last.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            return Some(self.since.swap(0, Ordering::Relaxed));
        }
        self.since.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Whether this is the first time (a set-up mistake, reported once).
    fn first(&self) -> bool {
        // A load first: once reported, every request only reads a shared line.
        self.last.load(Ordering::Relaxed) == 0 && self.last.swap(1, Ordering::Relaxed) == 0
    }
}

#[derive(Debug, Default)]
struct Reports {
    backend: Throttle,
    request: Throttle,
    no_key: Throttle,
    no_peer: Throttle,
    untrusted_forwarded: Throttle,
}

/// The tower [`Layer`]: wraps a service so every request is rate limited.
pub struct RateLimitLayer<L> {
    config: Arc<Config<L>>,
}

impl<L> Clone for RateLimitLayer<L> {
    fn clone(&self) -> Self {
        RateLimitLayer { config: self.config.clone() }
    }
}

impl<L> std::fmt::Debug for RateLimitLayer<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer").field("legacy", &self.config.legacy).finish_non_exhaustive()
    }
}

impl<L: RateLimiter> RateLimitLayer<L> {
    /// A layer on `limiter` (a `TokenBucket`, `FixedWindow`,
    /// `SlidingWindow`, `Keyed<Rule>`, multi-limit `Limiter` or `Stack`), keyed by
    /// the peer's address, cost 1 a request.
    ///
    /// # Panics
    ///
    /// When the limiter cannot be described in headers (a [`Stack`] with a
    /// `Limiter` member); [`try_new`](Self::try_new) returns that error.
    #[allow(clippy::new_ret_no_self)]
    pub fn new<T: IntoRateLimiter<Limiter = L>>(limiter: T) -> Self {
        Self::try_new(limiter).unwrap_or_else(|e| panic!("this limiter cannot stand behind the layer: {e}"))
    }

    /// [`new`](Self::new), with the error of a limiter the headers cannot
    /// describe (a [`Stack`] with a `Limiter` member) returned.
    pub fn try_new<T: IntoRateLimiter<Limiter = L>>(limiter: T) -> ratomic::Result<Self> {
        let limiter = limiter.into_rate_limiter()?;
        Ok(RateLimitLayer {
            config: Arc::new(Config {
                limiter,
                key: KeyBy::peer_ip(),
                cost: None,
                legacy: false,
                on_deny: None,
                on_backend_failure: BackendFailure::Deny,
                reports: Reports::default(),
            }),
        })
    }

    fn edit(mut self, f: impl FnOnce(&mut Config<L>)) -> Self {
        f(Arc::get_mut(&mut self.config).expect("configure the layer before cloning it"));
        self
    }

    /// Names a single-rule limiter's policy in the header fields (a
    /// multi-limit limiter names each limit itself). Errors on a name a
    /// Structured Field String cannot carry.
    pub fn name(mut self, name: &str) -> ratomic::Result<Self> {
        Arc::get_mut(&mut self.config).expect("configure the layer before cloning it").limiter.set_name(name)?;
        Ok(self)
    }

    /// How requests are keyed (default [`KeyBy::peer_ip`]).
    ///
    /// # Panics
    ///
    /// On [`KeyBy::per_member`] when the limiter is not a [`Stack`].
    pub fn key(self, key: KeyBy) -> Self {
        if matches!(key.fns, KeyFns::PerMember(_)) {
            assert!(self.config.limiter.members().is_some(), "KeyBy::per_member needs a Stack behind the layer");
        }
        self.edit(|c| c.key = key)
    }

    /// What a request costs (default 1).
    pub fn cost(self, f: impl Fn(&http::request::Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.edit(|c| c.cost = Some(Arc::new(f)))
    }

    /// Also writes the legacy `X-RateLimit-*` fields.
    pub fn legacy_headers(self, on: bool) -> Self {
        self.edit(|c| c.legacy = on)
    }

    /// Answers a denial with `f`'s response (its headers get the rate-limit
    /// fields too) instead of the default 429 problem document. Not for a
    /// request the limiter could not decide (see the crate's docs).
    pub fn on_deny(self, f: impl Fn(&Outcome) -> Response<String> + Send + Sync + 'static) -> Self {
        self.edit(|c| c.on_deny = Some(Arc::new(f)))
    }

    /// What a request gets when the limiter's backend fails (default
    /// [`BackendFailure::Deny`], a 503).
    pub fn on_backend_failure(self, policy: BackendFailure) -> Self {
        self.edit(|c| c.on_backend_failure = policy)
    }
}

impl<S, L> Layer<S> for RateLimitLayer<L> {
    type Service = RateLimit<S, L>;
    fn layer(&self, inner: S) -> RateLimit<S, L> {
        RateLimit { inner, config: self.config.clone() }
    }
}

/// The service [`RateLimitLayer`] makes.
pub struct RateLimit<S, L> {
    inner: S,
    config: Arc<Config<L>>,
}

impl<S: Clone, L> Clone for RateLimit<S, L> {
    fn clone(&self) -> Self {
        RateLimit { inner: self.inner.clone(), config: self.config.clone() }
    }
}

impl<S: std::fmt::Debug, L> std::fmt::Debug for RateLimit<S, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit").field("inner", &self.inner).finish_non_exhaustive()
    }
}

fn add_fields(headers: &mut http::HeaderMap, fields: &[(&'static str, String)]) {
    headers.reserve(fields.len());
    for (name, value) in fields {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(lower(name)), v);
        }
    }
}

/// Header names in the lower case `HeaderName::from_static` requires.
fn lower(name: &'static str) -> &'static str {
    match name {
        "RateLimit-Policy" => "ratelimit-policy",
        "RateLimit" => "ratelimit",
        "Retry-After" => "retry-after",
        "X-RateLimit-Limit" => "x-ratelimit-limit",
        "X-RateLimit-Remaining" => "x-ratelimit-remaining",
        "X-RateLimit-Reset" => "x-ratelimit-reset",
        other => other,
    }
}

fn plain<B: From<String>>(status: StatusCode, content_type: &'static str, body: String) -> Response<B> {
    let mut r = Response::new(B::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, L, B, RB> Service<Request<B>> for RateLimit<S, L>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    L: RateLimiter,
    B: Send + 'static,
    RB: From<String> + Send + 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<RB>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let c = &self.config;
        let (parts, body) = req.into_parts();
        if c.key.behind == Some(0)
            && parts.headers.contains_key("x-forwarded-for")
            && c.reports.untrusted_forwarded.first()
        {
            tracing::warn!(
                target: "ratomic_tower",
                "requests carry X-Forwarded-For but the layer trusts no proxy (KeyBy::peer_ip), so each client is \
                 keyed by the connection's address: behind a proxy, every client shares the proxy's one bucket. \
                 Behind n proxies you run, key by KeyBy::peer_ip_behind(n); if clients reach the server directly, \
                 leave it (the header is then whatever they wrote)"
            );
        }
        let decided = match &c.key.fns {
            KeyFns::One(f) => {
                f(&parts).map(|key| c.limiter.decide(&key, c.cost.as_ref().map_or(1, |f| f(&parts)), c.legacy))
            }
            KeyFns::PerMember(f) => {
                f(&parts).map(|keys| c.limiter.decide_keys(&keys, c.cost.as_ref().map_or(1, |f| f(&parts)), c.legacy))
            }
        };
        let Some(decided) = decided else {
            return Box::pin(std::future::ready(Ok(keyless(c, &parts))));
        };
        match decided {
            Decided::Now(outcome) => {
                let outcome = match judge(c, outcome) {
                    Judged::Pass(outcome) => outcome,
                    other => return Box::pin(std::future::ready(Ok(other.response(c)))),
                };
                let fut = self.inner.call(Request::from_parts(parts, body));
                Box::pin(async move {
                    let mut r = fut.await?;
                    add_fields(r.headers_mut(), &outcome.fields);
                    Ok(r)
                })
            }
            Decided::Later(pending) => {
                // The inner service was made ready by poll_ready; take it
                // (leaving a fresh clone) so the call can wait for Redis first.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                let config = self.config.clone();
                Box::pin(async move {
                    let outcome = match judge(&config, pending.await) {
                        Judged::Pass(outcome) => outcome,
                        other => return Ok(other.response(&config)),
                    };
                    let mut r = inner.call(Request::from_parts(parts, body)).await?;
                    add_fields(r.headers_mut(), &outcome.fields);
                    Ok(r)
                })
            }
        }
    }
}

/// What a request gets.
enum Judged {
    /// Through, with these fields (none when the backend failed open).
    Pass(Outcome),
    /// A denial: `on_deny`'s response or the 429 problem document.
    Deny(Outcome),
    /// Not decided: a generic problem document with this status.
    Refuse(StatusCode),
}

impl Judged {
    fn response<L, RB: From<String>>(self, c: &Config<L>) -> Response<RB> {
        match self {
            Judged::Pass(_) => unreachable!("a request let through has no response of the layer's"),
            Judged::Deny(outcome) => denial(c, &outcome),
            Judged::Refuse(status) => refusal(status),
        }
    }
}

/// Whether a limiter's error is a failure of its backend (Redis down or too
/// slow) rather than of the request.
fn is_backend(e: &DecideError) -> bool {
    #[cfg(feature = "redis")]
    if let Some(e) = e.downcast_ref::<ratomic_redis::Error>() {
        return e.is_backend();
    }
    e.is::<std::io::Error>()
}

/// The outcome; for a request the limiter could not decide, what the
/// backend policy or the request's fault says, reported for the operator.
fn judge<L>(c: &Config<L>, outcome: Result<Outcome, DecideError>) -> Judged {
    match outcome {
        Ok(o) if o.allowed => Judged::Pass(o),
        Ok(o) => Judged::Deny(o),
        Err(e) if is_backend(&e) => {
            let allow = c.on_backend_failure == BackendFailure::Allow;
            if let Some(more) = c.reports.backend.due() {
                let answer = if allow { "requests go through unchecked" } else { "requests are refused with a 503" };
                tracing::error!(target: "ratomic_tower", error = %e, more, "the rate limiter's backend failed; {answer}");
            }
            if allow {
                Judged::Pass(Outcome { allowed: true, fields: Vec::new(), problem: None })
            } else {
                Judged::Refuse(StatusCode::SERVICE_UNAVAILABLE)
            }
        }
        Err(e) => {
            if let Some(more) = c.reports.request.due() {
                tracing::warn!(
                    target: "ratomic_tower",
                    error = %e,
                    more,
                    "a request cannot be rate limited and is refused with a 400"
                );
            }
            Judged::Refuse(StatusCode::BAD_REQUEST)
        }
    }
}

/// The answer to a request the key function found no key in: a 500 when the
/// default key found no peer address (a set-up mistake, reported once with
/// its fix), else a 400.
fn keyless<L, RB: From<String>>(c: &Config<L>, parts: &http::request::Parts) -> Response<RB> {
    if c.key.behind.is_some() && peer(parts).is_none() {
        if c.reports.no_peer.first() {
            tracing::error!(
                target: "ratomic_tower",
                "a request carries no peer address (axum's ConnectInfo<SocketAddr>, or a SocketAddr extension), so \
                 KeyBy::peer_ip cannot key it and every such request is refused with a 500. Serve the app with \
                 `axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())`, or key by \
                 something else (KeyBy::header, KeyBy::func)"
            );
        }
        return refusal(StatusCode::INTERNAL_SERVER_ERROR);
    }
    if let Some(more) = c.reports.no_key.due() {
        tracing::warn!(target: "ratomic_tower", more, "the key function found no key in a request: refused with a 400");
    }
    refusal(StatusCode::BAD_REQUEST)
}

/// A generic RFC 9457 document for a request the limiter did not decide;
/// `Retry-After: 1` on a 503.
fn refusal<RB: From<String>>(status: StatusCode) -> Response<RB> {
    let detail = match status {
        StatusCode::SERVICE_UNAVAILABLE => "Rate limiting is unavailable; try again later.",
        StatusCode::INTERNAL_SERVER_ERROR => "Rate limiting is misconfigured on this server.",
        _ => "This request cannot be rate limited.",
    };
    let body = format!(
        r#"{{"type":"about:blank","title":"{}","status":{},"detail":"{detail}"}}"#,
        status.canonical_reason().unwrap_or(""),
        status.as_u16()
    );
    let mut r = plain(status, PROBLEM_CONTENT_TYPE, body);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// The response to a denial: `on_deny`'s, or a 429 problem document; with
/// the rate-limit fields either way.
fn denial<L, RB: From<String>>(c: &Config<L>, outcome: &Outcome) -> Response<RB> {
    let mut r = match &c.on_deny {
        Some(f) => f(outcome).map(RB::from),
        None => plain(StatusCode::TOO_MANY_REQUESTS, PROBLEM_CONTENT_TYPE, outcome.problem.clone().unwrap_or_default()),
    };
    add_fields(r.headers_mut(), &outcome.fields);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hop_s_port_is_not_part_of_the_client() {
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(hop_address("203.0.113.7"), ip("203.0.113.7"));
        assert_eq!(hop_address("203.0.113.7:41234"), ip("203.0.113.7"));
        assert_eq!(hop_address("[2001:db8::1]:41234"), ip("2001:db8::1"));
        assert_eq!(hop_address("[2001:db8::1]"), ip("2001:db8::1"));
        assert_eq!(hop_address("2001:db8::1"), ip("2001:db8::1"));
        assert_eq!(hop_address("unknown"), None);
    }

    #[test]
    fn a_prefix_above_128_is_the_whole_address() {
        let ip: IpAddr = "2001:db8::1".parse().unwrap();
        for prefix in [129, 200, 255] {
            assert_eq!(client_key(ip, prefix), "2001:db8::1/128");
        }
    }

    #[test]
    fn ipv6_keys_group_by_prefix_and_ipv4_stays_whole() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(client_key(ip("10.0.0.1"), 64), "10.0.0.1");
        for v4 in ["0.0.0.0", "255.255.255.255", "1.22.100.9", "100.10.1.0", "192.168.0.199"] {
            assert_eq!(client_key(ip(v4), 64), v4);
        }
        assert_eq!(client_key(ip("::ffff:10.0.0.1"), 64), "10.0.0.1");
        assert_eq!(client_key(ip("2001:db8:1:2:3:4:5:6"), 64), "2001:db8:1:2::/64");
        assert_eq!(client_key(ip("2001:db8:1:2::ffff"), 56), "2001:db8:1::/56");
        assert_eq!(client_key(ip("2001:db8::1"), 128), "2001:db8::1/128");
        assert_eq!(client_key(ip("2001:db8::1"), 0), "::/0");
    }
}
