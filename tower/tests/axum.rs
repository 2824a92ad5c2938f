//! The layer in a real axum server on 127.0.0.1 port 0, asked over real
//! TCP connections (a small HTTP/1.1 client: one request per connection).

mod support;

use axum::{routing, Router};
use http::{HeaderName, Response};
use ratomic::{Limiter, ManualClock, Quota, Rate, Rule, TokenBucket};
use ratomic_tower::{KeyBy, RateLimitLayer};

use support::{check_denial, get, get_with, hello, serve};

fn bucket(rate: &str) -> TokenBucket<[u8], ManualClock> {
    TokenBucket::builder(Quota::parse(rate).unwrap()).clock(ManualClock::new()).build().unwrap()
}

#[tokio::test]
async fn allowed_responses_carry_the_fields_and_the_next_one_is_a_429() {
    let layer = RateLimitLayer::new(bucket("3/min")).name("per-ip").unwrap();
    let addr = serve(hello().layer(layer)).await;
    for left in [2, 1, 0] {
        let r = get(addr).await;
        assert_eq!((r.status, r.body.as_str()), (200, "hello"));
        assert_eq!(r.headers["ratelimit-policy"], r#""per-ip";q=3;w=60"#);
        assert!(r.headers["ratelimit"].starts_with(&format!(r#""per-ip";r={left};t="#)));
    }
    check_denial(&get(addr).await, r#""per-ip""#);
}

#[tokio::test]
async fn forwarded_for_is_ignored_unless_proxies_are_trusted() {
    let addr = serve(hello().layer(RateLimitLayer::new(bucket("1/min")))).await;
    assert_eq!(get_with(addr, "/", &[("X-Forwarded-For", "1.1.1.1")]).await.status, 200);
    assert_eq!(get_with(addr, "/", &[("X-Forwarded-For", "2.2.2.2")]).await.status, 429, "forged: no new client");

    let layer = RateLimitLayer::new(bucket("1/min")).key(KeyBy::peer_ip_behind(1));
    let addr = serve(hello().layer(layer)).await;
    assert_eq!(get_with(addr, "/", &[("X-Forwarded-For", "6.6.6.6, 1.1.1.1")]).await.status, 200);
    assert_eq!(get_with(addr, "/", &[("X-Forwarded-For", "7.7.7.7, 1.1.1.1")]).await.status, 429, "same client");
    assert_eq!(get_with(addr, "/", &[("X-Forwarded-For", "2.2.2.2")]).await.status, 200, "another client");
}

#[tokio::test]
async fn a_multi_limit_limiter_lists_every_policy_and_who_denied() {
    let limiter = Limiter::builder()
        .limit("burst", Rule::token_bucket(Quota::parse("1/s").unwrap()))
        .limit("daily", Rule::fixed_window(Rate::parse("100/d").unwrap()).unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let addr = serve(hello().layer(RateLimitLayer::new(limiter).legacy_headers(true))).await;
    let r = get(addr).await;
    assert_eq!(r.headers["ratelimit-policy"], r#""burst";q=1;w=1, "daily";q=100;w=86400"#);
    assert_eq!(r.headers["x-ratelimit-limit"], "1");
    check_denial(&get(addr).await, r#""burst""#);
}

#[tokio::test]
async fn header_keys_costs_custom_denials_and_missing_keys() {
    let layer = RateLimitLayer::new(bucket("4/min"))
        .key(KeyBy::header(HeaderName::from_static("x-api-key")))
        .cost(|parts| if parts.uri.path() == "/heavy" { 3 } else { 1 })
        .on_deny(|o| {
            let mut r = Response::new(format!("slow down ({} fields)", o.fields.len()));
            *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            r
        });
    let app = Router::new()
        .route("/", routing::get(|| async { "ok" }))
        .route("/heavy", routing::get(|| async { "ok" }))
        .layer(layer);
    let addr = serve(app).await;
    assert_eq!(get_with(addr, "/heavy", &[("x-api-key", "a")]).await.status, 200);
    assert_eq!(get_with(addr, "/", &[("x-api-key", "b")]).await.status, 200, "keys are independent");
    let denied = get_with(addr, "/heavy", &[("x-api-key", "a")]).await;
    assert_eq!(denied.status, 503);
    assert!(denied.body.starts_with("slow down") && denied.headers.contains_key("retry-after"));
    assert_eq!(get(addr).await.status, 400, "no key: refused");
    // A key the limiter refuses (too long) fails closed.
    let long = "k".repeat(5000);
    assert_eq!(get_with(addr, "/", &[("x-api-key", &long)]).await.status, 503);
}

#[test]
fn a_bad_policy_name_is_an_error_at_set_up() {
    assert!(RateLimitLayer::new(bucket("1/s")).name("caf\u{e9}").is_err());
    assert!(RateLimitLayer::new(bucket("1/s")).name("").is_err());
}
