//! The service the layer makes: finds the key, asks the limiter, lets the
//! request through with the fields or answers it, and gives a refunded
//! request's cost back once its response is known.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::config::{BackendFailure, Config, RateLimitLayer};
use crate::fields::{add_fields, refusal, too_many, Fields, Outcome, RateLimitInfo, Verdict};
use crate::key::{peer, Head, Retained};
use crate::limiter::{Call, DecideError, Decided, Pending, RateLimiter, Refunded, SetUp};

/// The service [`RateLimitLayer`](crate::RateLimitLayer) makes.
pub struct RateLimit<S, L> {
    pub(crate) inner: S,
    pub(crate) config: Arc<Config<L>>,
}

impl<S, L> Layer<S> for RateLimitLayer<L> {
    type Service = RateLimit<S, L>;
    fn layer(&self, inner: S) -> RateLimit<S, L> {
        RateLimit { inner, config: self.config.clone() }
    }
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

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What to give back once the response is known.
struct Refund<L> {
    config: Arc<Config<L>>,
    keys: Retained,
    cost: u64,
    plan: usize,
}

impl<L: RateLimiter> Refund<L> {
    /// Gives the cost back if the response says so.
    fn settle(self, status: Option<StatusCode>) -> Option<Pending<()>> {
        if !self.config.refunds.applies(status) {
            return None;
        }
        match self.config.limiter.refund(self.keys.keys(), self.cost, self.plan) {
            Refunded::Now(r) => {
                refund_failed(&self.config, r);
                None
            }
            Refunded::Later(pending) => Some(pending),
        }
    }
}

fn refund_failed<L>(c: &Config<L>, r: Result<(), DecideError>) {
    if let Err(e) = r {
        if let Some(more) = c.reports.refund.due() {
            tracing::error!(target: "ratomic_tower", error = %e, more, "a refund failed: the request stays charged");
        }
    }
}

/// A refund being given back, and the response waiting for it.
struct Refunding<RB, E, L> {
    pending: Pending<()>,
    config: Arc<Config<L>>,
    response: Option<Result<Response<RB>, E>>,
}

pin_project! {
    /// The response future of [`RateLimit`].
    pub struct ResponseFuture<F, RB, E, L> {
        #[pin]
        state: State<F, RB, E, L>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, RB, E, L> {
        /// Not limited (a method left out, a backend failing open).
        Through { #[pin] fut: F },
        /// Admitted: the fields go on the response, and perhaps a refund.
        Admitted { #[pin] fut: F, fields: Fields, refund: Option<Box<Refund<L>>> },
        /// A refund being given back before the response goes on.
        Refunding { refunding: Box<Refunding<RB, E, L>> },
        /// Answered by the layer.
        Ready { response: Option<Response<RB>> },
        /// Decided later (Redis): the whole call in one future.
        Later { fut: BoxFuture<Result<Response<RB>, E>> },
    }
}

impl<F, RB, E, L> std::fmt::Debug for ResponseFuture<F, RB, E, L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseFuture(..)")
    }
}

impl<F, RB, E, L> ResponseFuture<F, RB, E, L> {
    #[inline(always)]
    fn new(state: State<F, RB, E, L>) -> Self {
        ResponseFuture { state }
    }
}

impl<F, RB, E, L> Future for ResponseFuture<F, RB, E, L>
where
    F: Future<Output = Result<Response<RB>, E>>,
    L: RateLimiter,
{
    type Output = Result<Response<RB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            let next = match state.as_mut().project() {
                StateProj::Through { fut } => return fut.poll(cx),
                StateProj::Admitted { fut, fields, refund } => {
                    let mut result = ready!(fut.poll(cx));
                    let status = result.as_ref().ok().map(Response::status);
                    if let Ok(r) = &mut result {
                        add_fields(r.headers_mut(), fields);
                    }
                    let Some(refund) = refund.take() else { return Poll::Ready(result) };
                    let config = refund.config.clone();
                    match refund.settle(status) {
                        None => return Poll::Ready(result),
                        Some(pending) => State::Refunding {
                            refunding: Box::new(Refunding { pending, config, response: Some(result) }),
                        },
                    }
                }
                StateProj::Refunding { refunding } => {
                    let r = &mut **refunding;
                    refund_failed(&r.config, ready!(r.pending.as_mut().poll(cx)));
                    return Poll::Ready(r.response.take().expect("polled after completion"));
                }
                StateProj::Ready { response } => {
                    return Poll::Ready(Ok(response.take().expect("polled after completion")))
                }
                StateProj::Later { fut } => return fut.as_mut().poll(cx),
            };
            state.set(next);
        }
    }
}

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
    type Future = ResponseFuture<S::Future, RB, S::Error, L>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let c = &*self.config;
        if let Some(methods) = &c.methods {
            if !methods.contains(req.method()) {
                return ResponseFuture::new(State::Through { fut: self.inner.call(req) });
            }
        }
        // The request stays whole (nothing moved) unless a function of the
        // user's takes its `Parts`.
        if c.key.needs_parts() || c.cost.is_some() || c.limiter.needs_parts() {
            let (parts, body) = req.into_parts();
            self.limit(parts, move |parts| Request::from_parts(parts, body))
        } else {
            self.limit(req, |req| req)
        }
    }
}

impl<S, L> RateLimit<S, L> {
    /// Decides the request (its head `h`, made whole again by `whole`) and
    /// lets it through or answers it.
    #[inline(always)]
    fn limit<H, B, RB>(
        &mut self,
        mut h: H,
        whole: impl FnOnce(H) -> Request<B> + Send + 'static,
    ) -> ResponseFuture<S::Future, RB, S::Error, L>
    where
        H: Head + Send + 'static,
        S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        L: RateLimiter,
        B: Send + 'static,
        RB: From<String> + Send + 'static,
    {
        let c = &*self.config;
        if let Some(ip) = c.key.client() {
            if !c.reports.untrusted_forwarded.reported() && ip.ignores_forwarding(h.headers()) {
                untrusted_forwarding(c);
            }
        }
        let Some(found) = c.key.find(&h) else {
            return ResponseFuture::new(State::Ready { response: Some(keyless(c, h.extensions())) });
        };
        let cost = c.cost.as_ref().map_or(1, |f| h.parts().map_or(1, |p| f(p)));
        let call = Call { keys: found.keys(), cost, parts: h.parts(), format: c.format };
        match c.limiter.decide(call) {
            Decided::Now(verdict) => {
                let verdict = match judge(c, verdict) {
                    Judged::Pass(verdict) => verdict,
                    Judged::Unchecked => {
                        drop(found);
                        return ResponseFuture::new(State::Through { fut: self.inner.call(whole(h)) });
                    }
                    other => return ResponseFuture::new(State::Ready { response: Some(other.response(c)) }),
                };
                let refund = c.refunds.any().then(|| {
                    Box::new(Refund { config: self.config.clone(), keys: found.retain(), cost, plan: verdict.plan })
                });
                if c.info {
                    h.extensions_mut().insert(RateLimitInfo { decision: verdict.decision, cost });
                }
                let fut = self.inner.call(whole(h));
                ResponseFuture::new(State::Admitted { fut, fields: verdict.fields, refund })
            }
            Decided::Later(pending) => {
                let keys = c.refunds.any().then(|| found.retain());
                // The inner service was made ready by poll_ready; take it
                // (leaving a fresh clone) so the call can wait for Redis first.
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                let config = self.config.clone();
                let fut = async move {
                    let c = &*config;
                    let mut verdict = match judge(c, pending.await) {
                        Judged::Pass(verdict) => verdict,
                        Judged::Unchecked => return inner.call(whole(h)).await,
                        other => return Ok(other.response(c)),
                    };
                    if c.info {
                        h.extensions_mut().insert(RateLimitInfo { decision: verdict.decision, cost });
                    }
                    let mut result = inner.call(whole(h)).await;
                    let status = result.as_ref().ok().map(Response::status);
                    if let Ok(r) = &mut result {
                        add_fields(r.headers_mut(), &mut verdict.fields);
                    }
                    if let Some(keys) = keys {
                        let refund = Refund { config: config.clone(), keys, cost, plan: verdict.plan };
                        if let Some(pending) = refund.settle(status) {
                            refund_failed(c, pending.await);
                        }
                    }
                    result
                };
                ResponseFuture::new(State::Later { fut: Box::pin(fut) })
            }
        }
    }
}

#[cold]
fn untrusted_forwarding<L>(c: &Config<L>) {
    if c.reports.untrusted_forwarded.first() {
        tracing::warn!(
            target: "ratomic_tower",
            "requests carry X-Forwarded-For, Forwarded or X-Real-IP but the layer trusts no proxy (KeyBy::peer_ip), \
             so each client is keyed by the connection's address: behind a proxy, every client shares the proxy's \
             one bucket. Behind n proxies you run, key by KeyBy::peer_ip_behind(n) (X-Forwarded-For) or \
             KeyBy::client_ip(ClientIp::behind(n, header)); if clients reach the server directly, leave it (the \
             header is then whatever they wrote)"
        );
    }
}

/// What a request gets.
enum Judged {
    /// Through, with these fields.
    Pass(Verdict),
    /// Through unchecked (the backend failed open).
    Unchecked,
    /// A denial: `on_deny`'s response or the 429 problem document.
    Deny(Verdict),
    /// Not decided: a generic problem document with this status.
    Refuse(StatusCode),
}

impl Judged {
    fn response<L, RB: From<String>>(self, c: &Config<L>) -> Response<RB> {
        match self {
            Judged::Pass(_) | Judged::Unchecked => unreachable!("a request let through has no response of the layer's"),
            Judged::Deny(verdict) => denial(c, verdict),
            Judged::Refuse(status) => refusal(status),
        }
    }
}

/// Whether a limiter's error is a failure of its backend (Redis or
/// PostgreSQL down or too slow) rather than of the request.
fn is_backend(e: &DecideError) -> bool {
    #[cfg(feature = "redis")]
    if let Some(e) = e.downcast_ref::<ratomic_redis::Error>() {
        return e.is_backend();
    }
    #[cfg(feature = "postgres")]
    if let Some(e) = e.downcast_ref::<ratomic_postgres::Error>() {
        return e.is_backend();
    }
    e.is::<std::io::Error>()
}

/// The verdict; for a request the limiter could not decide, what the
/// backend policy or the request's fault says, reported for the operator.
#[inline(always)]
fn judge<L>(c: &Config<L>, verdict: Result<Verdict, DecideError>) -> Judged {
    match verdict {
        Ok(v) if v.decision.allowed => Judged::Pass(v),
        Ok(v) => Judged::Deny(v),
        Err(e) => undecided(c, e),
    }
}

/// What a request the limiter could not decide gets.
#[cold]
#[inline(never)]
fn undecided<L>(c: &Config<L>, e: DecideError) -> Judged {
    match e {
        e if is_backend(&e) => {
            let allow = c.on_backend_failure == BackendFailure::Allow;
            if let Some(more) = c.reports.backend.due() {
                let answer = if allow { "requests go through unchecked" } else { "requests are refused with a 503" };
                tracing::error!(target: "ratomic_tower", error = %e, more, "the rate limiter's backend failed; {answer}");
            }
            if allow {
                Judged::Unchecked
            } else {
                Judged::Refuse(StatusCode::SERVICE_UNAVAILABLE)
            }
        }
        e if e.is::<SetUp>() => {
            if c.reports.set_up.first() {
                tracing::error!(target: "ratomic_tower", error = %e, "requests are refused with a 500");
            }
            Judged::Refuse(StatusCode::INTERNAL_SERVER_ERROR)
        }
        e => {
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
/// client-address key found no peer address (a set-up mistake, reported once
/// with its fix), else a 400.
fn keyless<L, RB: From<String>>(c: &Config<L>, extensions: &http::Extensions) -> Response<RB> {
    if c.key.client().is_some() && peer(extensions).is_none() {
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

/// The response to a denial: `on_deny`'s, or a 429 problem document; with
/// the rate-limit fields either way.
fn denial<L, RB: From<String>>(c: &Config<L>, mut verdict: Verdict) -> Response<RB> {
    match &c.on_deny {
        Some(f) => {
            let mut r = f(&Outcome::of(&verdict)).map(RB::from);
            add_fields(r.headers_mut(), &mut verdict.fields);
            r
        }
        None => too_many(verdict),
    }
}
