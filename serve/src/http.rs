//! The HTTP side: a small JSON API in the spirit of the seed's service
//! (identifier, limit, duration, cost → the decision), `/metrics`,
//! `/healthz` and `/readyz`.
//!
//! `POST /v1/ratelimit` with `{"identifier": "user-123", "limit": 100,
//! "duration": "1m", "cost": 1}` (`cost` optional, default 1; `duration` a
//! ratomic period: `250ms`, `1s`, `1m`, `15m`, `1h`, `1d`) answers `200`
//! with the decision as JSON — a denial is a value, `"allowed": false` —
//! and the IETF `RateLimit-Policy` and `RateLimit` fields (`Retry-After`
//! too when denied). A bad request is a `400` problem document that says
//! what to fix; nothing internal is ever in a response (it is logged).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use ratomic::headers::{Headers, Policy};
use ratomic::{Options, Rate};
use serde::Deserialize;

use crate::limiters::{file_stem, Algorithm, BackendError, RateLimiter, Storage};
use crate::metrics::{Api, Metrics, Result as Outcome};

/// Most distinct `(limit, duration)` pairs the HTTP API keeps a limiter for.
pub const MAX_HTTP_RATES: usize = 256;
/// Largest request body, in bytes.
pub const MAX_BODY: usize = 16 * 1024;

/// What the HTTP handlers share.
#[derive(Debug)]
pub struct Http {
    limiters: Mutex<HashMap<(u64, Duration), Arc<RateLimiter>>>,
    algorithm: Algorithm,
    options: Options,
    storage: Storage,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
}

impl Http {
    /// The HTTP side; `ready` is what `/readyz` reports.
    pub fn new(
        algorithm: Algorithm,
        options: Options,
        storage: Storage,
        metrics: Arc<Metrics>,
        ready: Arc<AtomicBool>,
    ) -> Http {
        Http { limiters: Mutex::new(HashMap::new()), algorithm, options, storage, metrics, ready }
    }
}

impl Http {
    /// Gives back the unused tokens of the HTTP API's leases (at shutdown);
    /// how many limits took tokens back. Failures are logged.
    pub async fn give_back(&self) -> usize {
        let limiters: Vec<Arc<RateLimiter>> =
            self.limiters.lock().unwrap_or_else(|e| e.into_inner()).values().cloned().collect();
        RateLimiter::give_back_all(limiters).await
    }
}

/// The routes.
pub fn router(http: Arc<Http>) -> Router {
    Router::new()
        .route("/v1/ratelimit", post(ratelimit))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .fallback(|| async {
            problem(StatusCode::NOT_FOUND, "no such endpoint: POST /v1/ratelimit, GET /metrics, /healthz or /readyz")
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(http)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Request {
    identifier: String,
    limit: u64,
    duration: String,
    #[serde(default = "one")]
    cost: u64,
}

fn one() -> u64 {
    1
}

fn problem(status: StatusCode, detail: &str) -> Response {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": status.canonical_reason().unwrap_or("Error"),
        "status": status.as_u16(),
        "detail": detail,
    });
    (status, [(header::CONTENT_TYPE, "application/problem+json")], body.to_string()).into_response()
}

async fn ratelimit(State(http): State<Arc<Http>>, body: Bytes) -> Response {
    let start = Instant::now();
    let resp = decide(&http, &body).await;
    http.metrics.latency(Api::Http, start.elapsed());
    resp
}

async fn decide(http: &Http, body: &[u8]) -> Response {
    let bad = |msg: String| {
        http.metrics.bad_request(Api::Http);
        problem(StatusCode::BAD_REQUEST, &msg)
    };
    let req: Request = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            return bad(format!(
                "the body must be JSON {{\"identifier\": string, \"limit\": integer >= 1, \"duration\": \"1m\", \"cost\": integer (optional)}}: {e}"
            ))
        }
    };
    if req.identifier.is_empty() {
        return bad("identifier must not be empty".into());
    }
    if req.identifier.len() > http.options.max_key_len {
        return bad(format!(
            "identifier has {} bytes, more than the {} accepted",
            req.identifier.len(),
            http.options.max_key_len
        ));
    }
    let rate = match Rate::parse(&format!("{}/{}", req.limit, req.duration)) {
        Ok(r) => r,
        Err(_) => {
            return bad(format!(
                "limit {} per duration {:?} is not a valid rate: limit is a whole number >= 1, duration a period such as \"250ms\", \"1s\", \"1m\", \"15m\", \"1h\", \"1d\"",
                req.limit, req.duration
            ))
        }
    };
    if req.cost > rate.count() {
        return bad(format!("cost {} exceeds the limit {}: this call could never be allowed", req.cost, rate.count()));
    }
    let rate_key = (rate.count(), rate.period());
    let existing = {
        let map = http.limiters.lock().unwrap_or_else(|e| e.into_inner());
        match map.get(&rate_key) {
            Some(l) => Some(l.clone()),
            None if map.len() >= MAX_HTTP_RATES => {
                drop(map);
                return bad(format!(
                    "this server already serves {MAX_HTTP_RATES} distinct (limit, duration) pairs: reuse one of them"
                ));
            }
            None => None,
        }
    };
    let limiter = match existing {
        Some(l) => l,
        None => {
            // A rate the algorithm (or Redis) cannot hold is the caller's
            // mistake; checked once per new rate, before anything is opened.
            if let Err(e) = http.storage.check(http.algorithm, rate) {
                return bad(format!("limit {} per duration {:?} cannot be served: {e}", req.limit, req.duration));
            }
            let name = format!("http-{}", file_stem(http.algorithm, rate.count(), rate.period()));
            match http.storage.limiter(http.algorithm, rate, &http.options, &name).await {
                // Two callers may have made it at once: the first one kept wins.
                Ok(l) => http
                    .limiters
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(rate_key)
                    .or_insert(Arc::new(l))
                    .clone(),
                Err(BackendError(e)) => {
                    // The operator's problem, not the caller's: logged, not shown.
                    tracing::error!(error = %e, "cannot make the HTTP API's limiter");
                    http.metrics.backend_error();
                    return problem(StatusCode::SERVICE_UNAVAILABLE, "the decision could not be made; try again");
                }
            }
        }
    };
    let d = match limiter.allow(req.identifier.as_bytes(), req.cost).await {
        Ok((d, leased)) => {
            if leased {
                http.metrics.lease_decision();
            }
            d
        }
        Err(BackendError(e)) => {
            tracing::error!(error = %e, "HTTP decision failed");
            http.metrics.backend_error();
            return problem(StatusCode::SERVICE_UNAVAILABLE, "the decision could not be made; try again");
        }
    };
    http.metrics.decision("http", "identifier", if d.allowed { Outcome::Allowed } else { Outcome::Denied });
    let body = serde_json::json!({
        "allowed": d.allowed,
        "remaining": d.remaining,
        "limit": d.limit,
        "retry_after_ms": d.retry_after.as_secs_f64() * 1e3,
        "reset_after_ms": d.reset_after.as_secs_f64() * 1e3,
    });
    let mut resp = (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response();
    if let Ok(policy) = Policy::new("limit", rate.count(), rate.period()) {
        for (name, value) in Headers::single(&policy, d).fields(false) {
            if let (Ok(n), Ok(v)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
                resp.headers_mut().insert(n, v);
            }
        }
    }
    resp
}

async fn metrics(State(http): State<Arc<Http>>) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], http.metrics.render()).into_response()
}

async fn readyz(State(http): State<Arc<Http>>) -> Response {
    if http.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
    }
}
