//! The layer on a PostgreSQL-backed limiter, in a real axum server, against
//! the PostgreSQL `postgres/run-tests.sh` starts (RATOMIC_POSTGRES_URL), and
//! a cluster this test starts and stops: decisions awaited, the fields of
//! the in-memory limiters, refunds awaited, and a server that stops
//! answering handled by the limiter's failure policy or refused — never a
//! 500.

#[path = "../../postgres/tests/support/mod.rs"]
mod server;
mod support;

use std::time::Duration;

use ratomic::{Rate, Rule};
use ratomic_postgres::{FailurePolicy, Limits, Options, PostgresLimiter};
use ratomic_tower::{BackendFailure, KeyBy, RateLimitLayer};

use support::{check_denial, check_generic, get, get_with, hello, serve, Logs};

async fn limiter(url: &str, limits: Limits, policy: FailurePolicy) -> PostgresLimiter {
    // A stopped server refuses a call at once: the timeout only bounds a
    // stall, and a call that should reach the server must not time out on a
    // loaded machine.
    let options = Options { timeout: Duration::from_secs(10), policy, breaker_threshold: 0, ..Options::default() };
    PostgresLimiter::connect(url, limits, options).await.unwrap()
}

#[tokio::test]
async fn a_single_rule_in_postgres_answers_with_the_fields_then_a_429() {
    let limits = Limits::single(Rule::parse("3/min").unwrap()).unwrap().with_prefix(server::prefix("tower")).unwrap();
    let l = limiter(&server::url(), limits, FailurePolicy::ReturnError).await;
    let addr = serve(hello().layer(RateLimitLayer::new(l.clone()).name("per-ip").unwrap().legacy_headers(true))).await;
    for left in [2, 1, 0] {
        let r = get(addr).await;
        assert_eq!((r.status, r.body.as_str()), (200, "hello"));
        assert_eq!(r.headers["ratelimit-policy"], r#""per-ip";q=3;w=60"#);
        assert!(r.headers["ratelimit"].starts_with(&format!(r#""per-ip";r={left};t="#)));
        assert_eq!(r.headers["x-ratelimit-limit"], "3");
        assert_eq!(r.headers["x-ratelimit-remaining"], left.to_string());
    }
    check_denial(&get(addr).await, r#""per-ip""#);
    // The state is in PostgreSQL: the limiter itself sees the key drained.
    assert!(!l.peek("127.0.0.1", 1).await.unwrap().allowed());
}

#[tokio::test]
async fn named_limits_in_postgres_list_every_policy_and_who_denied() {
    let limits = Limits::new([
        ("burst", Rule::parse("2/min").unwrap()),
        ("daily", Rule::fixed_window(Rate::parse("100/d").unwrap()).unwrap()),
    ])
    .unwrap()
    .with_prefix(server::prefix("tower-multi"))
    .unwrap();
    let l = limiter(&server::url(), limits, FailurePolicy::ReturnError).await;
    let layer = RateLimitLayer::new(l).name("ignored").unwrap().key(KeyBy::header("x-api-key".parse().unwrap()));
    let addr = serve(hello().layer(layer)).await;
    let key = [("X-Api-Key", "k1")];
    let r = get_with(addr, "/", &key).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["ratelimit-policy"], r#""burst";q=2;w=60, "daily";q=100;w=86400"#);
    assert_eq!(get_with(addr, "/", &key).await.status, 200);
    check_denial(&get_with(addr, "/", &key).await, r#""burst""#);
    assert_eq!(get_with(addr, "/", &[("X-Api-Key", "k2")]).await.status, 200, "another key is not denied");
}

/// Refunds in PostgreSQL: a failed response's cost is given back (awaited
/// before the response goes on), a success stays charged, a denial is
/// neither; the row says so.
#[tokio::test]
async fn failed_responses_are_refunded_in_postgres() {
    let limits =
        Limits::single(Rule::parse("2/min").unwrap()).unwrap().with_prefix(server::prefix("tower-refund")).unwrap();
    let l = limiter(&server::url(), limits, FailurePolicy::ReturnError).await;
    let app = axum::Router::new()
        .route("/ok", axum::routing::get(|| async { "ok" }))
        .route("/fail", axum::routing::get(|| async { (http::StatusCode::INTERNAL_SERVER_ERROR, "failed") }));
    let layer = RateLimitLayer::new(l.clone()).key(KeyBy::header("x-key".parse().unwrap())).skip_failed_responses();
    let addr = serve(app.layer(layer)).await;
    let mut seen = Vec::new();
    for path in ["/fail", "/ok", "/fail", "/fail"] {
        seen.push(get_with(addr, path, &[("x-key", "k1")]).await.status);
    }
    assert_eq!(seen, [500, 200, 500, 500]);
    assert_eq!(l.peek("k1", 0).await.unwrap().decision.remaining, 1, "one success charged, the failures given back");
    let mut seen = Vec::new();
    for path in ["/ok", "/ok", "/fail"] {
        seen.push(get_with(addr, path, &[("x-key", "k1")]).await.status);
    }
    assert_eq!(seen, [200, 429, 429]);
}

/// The server stopped: a limiter under `ReturnError` is a generic 503 (or,
/// with `BackendFailure::Allow`, the request goes through), the cause with
/// the server's address goes to `tracing`; a limiter whose own policy
/// answers (`Fallback`: a local limiter of the same rule) is reported as
/// failing.
#[tokio::test]
async fn a_postgres_that_stops_answering_is_a_generic_503_and_logged() {
    let (logs, _guard) = Logs::capture();
    let own = server::Server::start();
    let rule =
        || Limits::single(Rule::parse("5/min").unwrap()).unwrap().with_prefix(server::prefix("tower-down")).unwrap();
    let raising = limiter(&own.url(), rule(), FailurePolicy::ReturnError).await;
    let falling_back = limiter(&own.url(), rule(), FailurePolicy::Fallback).await;
    let closed = serve(hello().layer(RateLimitLayer::new(raising.clone()))).await;
    let passing = serve(hello().layer(RateLimitLayer::new(raising).on_backend_failure(BackendFailure::Allow))).await;
    let local = serve(hello().layer(RateLimitLayer::new(falling_back))).await;
    assert_eq!(get(closed).await.status, 200);
    own.stop();
    let port = own.port.to_string();
    for _ in 0..3 {
        check_generic(&get(closed).await, 503, &["127.0.0.1", &port]);
    }
    let r = get(passing).await;
    assert_eq!((r.status, r.headers.get("ratelimit")), (200, None), "failing open: through, unchecked");
    let r = get(local).await;
    assert_eq!(r.status, 200, "the local fallback decides");
    assert_eq!(r.headers["ratelimit-policy"], r#""default";q=5;w=60"#);
    let errors = logs.lines_with("ERROR");
    assert!(errors.iter().any(|e| e.contains("refused with a 503")), "{}", logs.text());
    assert!(errors.iter().any(|e| e.contains("unchecked")), "{}", logs.text());
    assert_eq!(logs.lines_with("PostgreSQL is failing; its own failure policy answers").len(), 1, "{}", logs.text());
}
