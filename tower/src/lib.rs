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
//! extensions, an IPv6 address grouped by its /64. `X-Forwarded-For` is read
//! only when [`KeyBy::peer_ip_behind`] names how many proxies are in front
//! (the client is then the n-th address from the right of all its field
//! lines taken in order, a port after the address dropped; anything left of
//! it is whatever the client wrote). [`KeyBy::header`] and [`KeyBy::func`] key
//! by a header or a closure. A request with no key is refused with a 400.
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
//! failure policy), and a Redis error under `FailurePolicy::ReturnError`
//! is a request the layer cannot judge (a 429, as for a key too long).
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
use std::sync::Arc;
use std::task::{Context, Poll};

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
        Decided::Later(Box::pin(async move {
            let d = limiter.allow_n(&key, cost).await?;
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
        Ok(Redis { limiter: self, policies, single })
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
pub struct KeyBy(KeyFns);

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
        KeyBy(KeyFns::One(Arc::new(move |parts: &http::request::Parts| peer_key(parts, proxies, ipv6_prefix))))
    }

    /// The value of header `name` (a request without it has no key).
    pub fn header(name: HeaderName) -> Self {
        KeyBy(KeyFns::One(Arc::new(move |parts: &http::request::Parts| {
            parts.headers.get(&name).map(|v| v.as_bytes().to_vec())
        })))
    }

    /// Whatever `f` returns for the request's head.
    pub fn func(f: impl Fn(&http::request::Parts) -> Option<Vec<u8>> + Send + Sync + 'static) -> Self {
        KeyBy(KeyFns::One(Arc::new(f)))
    }

    /// For a [`Stack`]: one key per member, in the stack's order, from `f`
    /// (say the peer address for a per-IP member, a user id for a per-user
    /// one, anything for a direct member). With any other key, every member
    /// is on the same key. A request for which `f` gives no keys is refused
    /// with a 400; the wrong number of keys is a request the limiter cannot
    /// judge (a 429). [`RateLimitLayer::key`] panics if the limiter is not a
    /// stack.
    pub fn per_member(f: impl Fn(&http::request::Parts) -> Option<Vec<Vec<u8>>> + Send + Sync + 'static) -> Self {
        KeyBy(KeyFns::PerMember(Arc::new(f)))
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
            config: Arc::new(Config { limiter, key: KeyBy::peer_ip(), cost: None, legacy: false, on_deny: None }),
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
        if matches!(key.0, KeyFns::PerMember(_)) {
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
    /// fields too) instead of the default 429 problem document.
    pub fn on_deny(self, f: impl Fn(&Outcome) -> Response<String> + Send + Sync + 'static) -> Self {
        self.edit(|c| c.on_deny = Some(Arc::new(f)))
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

/// `s` as the inside of a JSON string.
fn json_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
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
        let decided = match &c.key.0 {
            KeyFns::One(f) => {
                f(&parts).map(|key| c.limiter.decide(&key, c.cost.as_ref().map_or(1, |f| f(&parts)), c.legacy))
            }
            KeyFns::PerMember(f) => {
                f(&parts).map(|keys| c.limiter.decide_keys(&keys, c.cost.as_ref().map_or(1, |f| f(&parts)), c.legacy))
            }
        };
        let Some(decided) = decided else {
            let r =
                plain(StatusCode::BAD_REQUEST, "text/plain; charset=utf-8", "no client key for rate limiting".into());
            return Box::pin(std::future::ready(Ok(r)));
        };
        match decided {
            Decided::Now(outcome) => {
                let outcome = judged(outcome);
                if !outcome.allowed {
                    return Box::pin(std::future::ready(Ok(denial(c, &outcome))));
                }
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
                    let outcome = judged(pending.await);
                    if !outcome.allowed {
                        return Ok(denial(&config, &outcome));
                    }
                    let mut r = inner.call(Request::from_parts(parts, body)).await?;
                    add_fields(r.headers_mut(), &outcome.fields);
                    Ok(r)
                })
            }
        }
    }
}

/// The outcome, or for a request the limiter cannot judge (a key too long,
/// a cost above the limit, Redis failing) a refusal: never let through
/// unchecked.
fn judged(outcome: Result<Outcome, DecideError>) -> Outcome {
    outcome.unwrap_or_else(|e| Outcome {
        allowed: false,
        fields: vec![("Retry-After", "1".into())],
        problem: Some(format!(
            r#"{{"type":"about:blank","title":"Too Many Requests","status":429,"detail":"{}"}}"#,
            json_text(&format!("the rate limit could not be applied: {e}"))
        )),
    })
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
