//! The layer on a Redis-backed limiter, in a real axum server, against the
//! redis-server `redis/run-tests.sh` starts (and servers this test starts
//! and kills): decisions awaited, the fields of the in-memory limiters, and
//! a Redis that stops answering handled by the limiter's failure policy or
//! refused — never a 500, never a hang.

#[path = "../../redis/tests/support/mod.rs"]
mod server;
mod support;

use std::time::Duration;

use ratomic::{Rate, Rule};
use ratomic_redis::redis::aio::ConnectionManager;
use ratomic_redis::{FailurePolicy, Limits, Options, RedisLimiter};
use ratomic_tower::{BackendFailure, KeyBy, RateLimitLayer};

use support::{check_denial, check_generic, get, get_with, hello, serve, Logs};

/// A killed server refuses a call at once: the timeout only bounds a stall,
/// and a call that should reach Redis must not time out on a loaded machine.
async fn limiter(url: &str, limits: Limits, policy: FailurePolicy) -> RedisLimiter<ConnectionManager> {
    let options = Options { timeout: Duration::from_secs(10), policy, breaker_threshold: 0, ..Options::default() };
    RedisLimiter::connect(url, limits, options).await.unwrap()
}

#[tokio::test]
async fn a_single_rule_on_redis_answers_with_the_fields_then_a_429() {
    let limits = Limits::single(Rule::parse("3/min").unwrap()).unwrap().with_prefix(server::prefix("tower")).unwrap();
    let l = limiter(&server::url(), limits, FailurePolicy::ReturnError).await;
    let addr = serve(hello().layer(RateLimitLayer::new(l.clone()).name("per-ip").unwrap().legacy_headers(true))).await;
    for left in [2, 1, 0] {
        let r = get(addr).await;
        assert_eq!((r.status, r.body.as_str()), (200, "hello"));
        assert_eq!(r.headers["ratelimit-policy"], r#""per-ip";q=3;w=60"#);
        assert!(r.headers["ratelimit"].starts_with(&format!(r#""per-ip";r={left};t="#)));
        assert_eq!(r.headers["x-ratelimit-remaining"], left.to_string());
    }
    check_denial(&get(addr).await, r#""per-ip""#);
    // The state is on Redis: the limiter itself sees the key drained.
    assert!(!l.peek("127.0.0.1", 1).await.unwrap().allowed());
}

#[tokio::test]
async fn named_limits_on_redis_list_every_policy_and_who_denied() {
    let limits = Limits::new([
        // 2 a minute: no token comes back between the requests, however slow the machine.
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

/// Redis killed: a limiter under `ReturnError` is a generic 503 (or, with
/// `BackendFailure::Allow`, the request goes through), the cause with the
/// server's address goes to `tracing` once; a limiter whose own policy
/// answers (`FailOpen`) is reported as failing.
#[tokio::test]
async fn a_redis_that_stops_answering_is_a_generic_503_and_logged() {
    let (logs, _guard) = Logs::capture();
    let mut own = server::Server::start();
    let port = own.port.to_string();
    let rule =
        || Limits::single(Rule::parse("5/s").unwrap()).unwrap().with_prefix(server::prefix("tower-down")).unwrap();
    let raising = limiter(&own.url(), rule(), FailurePolicy::ReturnError).await;
    let opening = limiter(&own.url(), rule(), FailurePolicy::FailOpen).await;
    let closed = serve(hello().layer(RateLimitLayer::new(raising.clone()))).await;
    let passing = serve(hello().layer(RateLimitLayer::new(raising).on_backend_failure(BackendFailure::Allow))).await;
    let open = serve(hello().layer(RateLimitLayer::new(opening))).await;
    assert_eq!(get(closed).await.status, 200);
    own.kill();
    for _ in 0..3 {
        check_generic(&get(closed).await, 503, &["127.0.0.1", &port]);
    }
    let r = get(passing).await;
    assert_eq!((r.status, r.headers.get("ratelimit")), (200, None), "failing open: through, unchecked");
    let r = get(open).await;
    assert_eq!(r.status, 200, "FailOpen lets the request through");
    assert_eq!(r.headers["ratelimit-policy"], r#""default";q=5;w=1"#);
    // The operator's log: the 503s once (with the cause), the layer failing
    // open once, the limiter's own policy once.
    let errors = logs.lines_with("ERROR");
    assert_eq!(errors.len(), 2, "{}", logs.text());
    assert!(errors[0].contains("refused with a 503") && errors[0].contains("Redis"), "{}", errors[0]);
    assert!(errors[1].contains("unchecked"), "{}", errors[1]);
    assert_eq!(logs.lines_with("its own failure policy answers").len(), 1, "{}", logs.text());
}

/// Refunds on Redis: a failed response's cost is given back (awaited
/// before the response goes on), a success stays charged, a denial is
/// neither; the state on Redis says so.
#[tokio::test]
async fn failed_responses_are_refunded_on_redis() {
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
