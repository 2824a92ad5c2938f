//! The layer and its settings: what it limits, how it keys, what it
//! writes, what it gives back, and what it reports.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use http::{Method, Response, StatusCode};
use ratomic::headers::Draft;

use crate::fields::{Format, Outcome};
use crate::key::{KeyBy, Source};
use crate::limiter::{IntoRateLimiter, RateLimiter};

type CostFn = dyn Fn(&http::request::Parts) -> u64 + Send + Sync;
type DenyFn = dyn Fn(&Outcome) -> Response<String> + Send + Sync;
type StatusFn = dyn Fn(StatusCode) -> bool + Send + Sync;

pub(crate) struct Config<L> {
    pub(crate) limiter: L,
    pub(crate) key: KeyBy,
    pub(crate) cost: Option<Arc<CostFn>>,
    pub(crate) format: Format,
    pub(crate) on_deny: Option<Arc<DenyFn>>,
    pub(crate) on_backend_failure: BackendFailure,
    /// The methods limited (`None`: every one).
    pub(crate) methods: Option<Box<[Method]>>,
    pub(crate) refunds: Refunds,
    /// Whether an admitted request carries its [`RateLimitInfo`](crate::RateLimitInfo).
    pub(crate) info: bool,
    pub(crate) reports: Reports,
}

/// Which admitted requests get their cost back once answered.
#[derive(Default)]
pub(crate) struct Refunds {
    successful: bool,
    failed: bool,
    is_success: Option<Arc<StatusFn>>,
}

impl Refunds {
    pub(crate) fn any(&self) -> bool {
        self.successful || self.failed
    }

    /// Whether a response of `status` (`None`: the service failed) is refunded.
    pub(crate) fn applies(&self, status: Option<StatusCode>) -> bool {
        let success = status.is_some_and(|s| match &self.is_success {
            Some(f) => f(s),
            None => s.as_u16() < 400,
        });
        if success {
            self.successful
        } else {
            self.failed
        }
    }
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
pub(crate) struct Throttle {
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
    pub(crate) fn due(&self) -> Option<u64> {
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

    /// Whether it was reported already (one shared load: a set-up check
    /// then costs a request nothing).
    pub(crate) fn reported(&self) -> bool {
        self.last.load(Ordering::Relaxed) != 0
    }

    /// Whether this is the first time (a set-up mistake, reported once).
    pub(crate) fn first(&self) -> bool {
        !self.reported() && self.last.swap(1, Ordering::Relaxed) == 0
    }
}

#[derive(Debug, Default)]
pub(crate) struct Reports {
    pub(crate) backend: Throttle,
    pub(crate) request: Throttle,
    pub(crate) refund: Throttle,
    pub(crate) no_key: Throttle,
    pub(crate) no_peer: Throttle,
    pub(crate) set_up: Throttle,
    pub(crate) untrusted_forwarded: Throttle,
}

/// The tower [`Layer`](tower_layer::Layer): wraps a service so every request is rate limited.
///
/// Per route, it is axum's `MethodRouter::layer` (or `Router::route_layer`)
/// with a layer of its own: `.route("/login", post(login).layer(layer))`.
pub struct RateLimitLayer<L> {
    pub(crate) config: Arc<Config<L>>,
}

impl<L> Clone for RateLimitLayer<L> {
    fn clone(&self) -> Self {
        RateLimitLayer { config: self.config.clone() }
    }
}

impl<L> std::fmt::Debug for RateLimitLayer<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.config;
        f.debug_struct("RateLimitLayer")
            .field("key", &c.key)
            .field("format", &c.format)
            .field("methods", &c.methods)
            .finish_non_exhaustive()
    }
}

impl<L: RateLimiter> RateLimitLayer<L> {
    /// A layer on `limiter` (a `TokenBucket`, `FixedWindow`,
    /// `SlidingWindow`, `Keyed<Rule>`, multi-limit `Limiter`, `Stack` or
    /// [`Plans`](crate::Plans)), keyed by the peer's address, cost 1 a
    /// request.
    ///
    /// # Panics
    ///
    /// When the limiter cannot be described in headers (a
    /// [`Stack`](ratomic::Stack) with a `Limiter` member);
    /// [`try_new`](Self::try_new) returns that error.
    #[allow(clippy::new_ret_no_self)]
    pub fn new<T: IntoRateLimiter<Limiter = L>>(limiter: T) -> Self {
        Self::try_new(limiter).unwrap_or_else(|e| panic!("this limiter cannot stand behind the layer: {e}"))
    }

    /// [`new`](Self::new), with the error of a limiter the headers cannot
    /// describe (a [`Stack`](ratomic::Stack) with a `Limiter` member)
    /// returned.
    pub fn try_new<T: IntoRateLimiter<Limiter = L>>(limiter: T) -> ratomic::Result<Self> {
        let limiter = limiter.into_rate_limiter()?;
        Ok(RateLimitLayer {
            config: Arc::new(Config {
                limiter,
                key: KeyBy::peer_ip(),
                cost: None,
                format: Format::default(),
                on_deny: None,
                on_backend_failure: BackendFailure::Deny,
                methods: None,
                refunds: Refunds::default(),
                info: false,
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
    /// On [`KeyBy::per_member`] when the limiter is not a
    /// [`Stack`](ratomic::Stack).
    pub fn key(self, key: KeyBy) -> Self {
        if matches!(key.source, Source::PerMember(_)) {
            assert!(self.config.limiter.members().is_some(), "KeyBy::per_member needs a Stack behind the layer");
        }
        self.edit(|c| c.key = key)
    }

    /// What a request costs (default 1).
    pub fn cost(self, f: impl Fn(&http::request::Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.edit(|c| c.cost = Some(Arc::new(f)))
    }

    /// Limits only requests of these methods (tower_governor's `methods`);
    /// the others go through uncharged and without fields.
    ///
    /// ```
    /// use http::Method;
    /// use ratomic::TokenBucket;
    /// use ratomic_tower::RateLimitLayer;
    ///
    /// let writes = RateLimitLayer::new(TokenBucket::builder("10/min").build()?).methods([Method::POST, Method::PUT]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    ///
    /// # Panics
    ///
    /// On no method at all (nothing would be limited: leave the call out to
    /// limit every method).
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods: Box<[Method]> = methods.into_iter().collect();
        assert!(!methods.is_empty(), "methods([]) limits no request: leave it out to limit every method");
        self.edit(|c| c.methods = Some(methods))
    }

    /// The revision of the IETF draft the standard fields follow (default
    /// [`Draft::Draft11`]: `RateLimit-Policy` and `RateLimit` with a named
    /// item per limit; [`Draft::Draft7`] and [`Draft::Draft6`] write the
    /// earlier forms, as express-rate-limit does).
    pub fn draft(self, draft: Draft) -> Self {
        self.edit(|c| c.format.draft = Some(draft))
    }

    /// Whether the standard fields are written (default `true`).
    /// `Retry-After` is always written on a 429; the legacy fields as
    /// [`legacy_headers`](Self::legacy_headers) says.
    pub fn standard_headers(self, on: bool) -> Self {
        self.edit(|c| {
            c.format.draft = if on { Some(c.format.draft.unwrap_or_default()) } else { None };
        })
    }

    /// Also writes the legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining`
    /// and `X-RateLimit-Reset` fields (tower_governor's `use_headers`).
    pub fn legacy_headers(self, on: bool) -> Self {
        self.edit(|c| c.format.legacy = on)
    }

    /// Whether an admitted request carries a
    /// [`RateLimitInfo`](crate::RateLimitInfo) in its extensions for the
    /// handler (default `false`: it costs an allocation a request, which a
    /// service that does not read it should not pay).
    pub fn info_in_extensions(self, on: bool) -> Self {
        self.edit(|c| c.info = on)
    }

    /// Gives a request's cost back once its response is successful (by
    /// default a status below 400; see
    /// [`response_was_successful`](Self::response_was_successful)): only
    /// failed requests count. The call is charged on the way in, so
    /// requests in flight at once never pass more than the limit.
    ///
    /// ```
    /// use ratomic::TokenBucket;
    /// use ratomic_tower::RateLimitLayer;
    ///
    /// // Five failed logins a minute; a successful one costs nothing.
    /// let logins = RateLimitLayer::new(TokenBucket::builder("5/min").build()?).skip_successful_responses();
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    ///
    /// # Panics
    ///
    /// After [`skip_failed_responses`](Self::skip_failed_responses): every
    /// request would be refunded, and nothing limited.
    pub fn skip_successful_responses(self) -> Self {
        self.refunding(|r| r.successful = true)
    }

    /// Gives a request's cost back once its response has failed (by
    /// default a status of 400 or above, or the service's error): only
    /// successful requests count, as with a limit on successes.
    ///
    /// # Panics
    ///
    /// After [`skip_successful_responses`](Self::skip_successful_responses).
    pub fn skip_failed_responses(self) -> Self {
        self.refunding(|r| r.failed = true)
    }

    /// What counts as a successful response for the two `skip_*` settings
    /// (default: a status below 400).
    pub fn response_was_successful(self, f: impl Fn(StatusCode) -> bool + Send + Sync + 'static) -> Self {
        self.edit(|c| c.refunds.is_success = Some(Arc::new(f)))
    }

    /// Sets which responses are refunded; both kinds would limit nothing.
    fn refunding(self, f: impl FnOnce(&mut Refunds)) -> Self {
        self.edit(|c| {
            f(&mut c.refunds);
            assert!(
                !(c.refunds.successful && c.refunds.failed),
                "skip_successful_responses and skip_failed_responses together refund every request: nothing would \
                 be limited; keep one"
            );
        })
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
