//! The layer in a real axum server on 127.0.0.1 port 0, asked over real
//! TCP connections (a small HTTP/1.1 client: one request per connection).

mod support;

use axum::{routing, Router};
use http::{HeaderName, Response};
use std::sync::Arc;

use ratomic::{DirectTokenBucket, Limiter, ManualClock, Quota, Rate, Rule, Stack, TokenBucket};
use ratomic_tower::{KeyBy, RateLimitLayer};

use support::{check_denial, check_generic, get, get_with, hello, serve, serve_without_connect_info, Logs};

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

/// Behind one trusted proxy: HAProxy's `option forwardfor` appends a line
/// of its own after the client's (forged) one, and some proxies write the
/// client's port after its address. Two clients, 10 requests each, each
/// from another port: 3 each pass a limit of 3 (not 10: a key per port; not
/// 3 in all: every client on the proxy's own address).
#[tokio::test]
async fn the_proxy_s_own_forwarded_line_is_the_hop_trusted_and_a_port_is_no_new_client() {
    type Lines = fn(&str, u16) -> Vec<(String, String)>;
    let forms: [(Lines, [&str; 2]); 3] = [
        (
            |client, i| {
                vec![("X-Forwarded-For".into(), format!("6.6.{i}.{i}")), ("X-Forwarded-For".into(), client.into())]
            },
            ["203.0.113.7", "198.51.100.9"],
        ),
        (
            |client, i| vec![("X-Forwarded-For".into(), format!("{client}:{}", 40000 + i))],
            ["203.0.113.7", "198.51.100.9"],
        ),
        (
            |client, i| vec![("X-Forwarded-For".into(), format!("[{client}]:{}", 40000 + i))],
            ["2001:db8::7", "2001:db9::9"],
        ),
    ];
    for (lines, clients) in forms {
        let addr = serve(hello().layer(RateLimitLayer::new(bucket("3/min")).key(KeyBy::peer_ip_behind(1)))).await;
        let mut passed = [0; 2];
        for i in 0..10 {
            for (c, client) in clients.iter().enumerate() {
                let owned = lines(client, i);
                let borrowed: Vec<(&str, &str)> = owned.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
                passed[c] += usize::from(get_with(addr, "/", &borrowed).await.status == 200);
            }
        }
        assert_eq!(passed, [3, 3], "{:?}", lines(clients[0], 0));
    }
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
    check_generic(&get(addr).await, 400, &[]);
    // A key the limiter refuses (too long): a 400, never on_deny's answer.
    let long = "k".repeat(5000);
    check_generic(&get_with(addr, "/", &[("x-api-key", &long)]).await, 400, &["5000"]);
}

#[test]
fn a_bad_policy_name_is_an_error_at_set_up() {
    assert!(RateLimitLayer::new(bucket("1/s")).name("caf\u{e9}").is_err());
    assert!(RateLimitLayer::new(bucket("1/s")).name("").is_err());
}

/// Per client 2/min, per user 3/min (from `x-user`, else the client), and
/// 100/min for everyone, all on one clock.
fn ip_user_global() -> Stack<ManualClock> {
    let clock = ManualClock::new();
    let bucket =
        |rate: &str| Arc::new(TokenBucket::builder(Quota::parse(rate).unwrap()).clock(clock.clone()).build().unwrap());
    let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("100/min").unwrap(), clock.clone()));
    Stack::builder()
        .member("ip", bucket("2/min"))
        .member("user", bucket("3/min"))
        .member("global", global)
        .clock(clock)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_stack_lists_every_member_and_who_denied() {
    // One key for every member: the client's address.
    let addr = serve(hello().layer(RateLimitLayer::new(ip_user_global()))).await;
    let r = get(addr).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["ratelimit-policy"], r#""ip";q=2;w=60, "user";q=3;w=60, "global";q=100;w=60"#);
    assert_eq!(r.headers["ratelimit"], r#""ip";r=1;t=30, "user";r=2;t=20, "global";r=99;t=1"#);
    assert_eq!(get(addr).await.status, 200);
    let denied = get(addr).await;
    check_denial(&denied, r#""ip""#);
    // Nothing was charged on the denial: user and global keep what they had.
    assert_eq!(denied.headers["ratelimit"], r#""ip";r=0;t=60, "user";r=1;t=40, "global";r=98;t=2"#);
}

#[tokio::test]
async fn a_stack_takes_one_key_per_member() {
    let keys = KeyBy::per_member(|parts| {
        let user = parts.headers.get("x-user")?.as_bytes().to_vec();
        let n = parts.headers.get("x-keys").map_or(3, |v| v.to_str().unwrap().parse().unwrap());
        let client = ratomic_tower::peer_key(parts, 0, 64)?;
        assert_eq!(client, b"127.0.0.1");
        Some([client, user, Vec::new()].into_iter().cycle().take(n).collect())
    });
    let (logs, _guard) = Logs::capture();
    let addr = serve(hello().layer(RateLimitLayer::new(ip_user_global()).key(keys))).await;
    check_generic(&get(addr).await, 400, &[]); // no user: no keys
    assert_eq!(get_with(addr, "/", &[("x-user", "alice")]).await.status, 200);
    assert_eq!(get_with(addr, "/", &[("x-user", "bob")]).await.status, 200);
    // Both users share one client key: the ip member binds for the third.
    check_denial(&get_with(addr, "/", &[("x-user", "carol")]).await, r#""ip""#);
    // Two keys for three members: a request the stack cannot judge, refused;
    // why, for the log only.
    check_generic(&get_with(addr, "/", &[("x-user", "alice"), ("x-keys", "2")]).await, 400, &["member"]);
    assert_eq!(logs.lines_with("one key per member").len(), 1, "{}", logs.text());
    assert_eq!(logs.lines_with("found no key").len(), 1, "{}", logs.text());
}

/// axum's own docs serve with `axum::serve(listener, app)`: no ConnectInfo,
/// so no peer address for the default key. Every request is a 500 (the
/// server's mistake, not the client's), and one error names the fix.
#[tokio::test]
async fn without_connect_info_every_request_is_a_500_and_one_error_names_the_fix() {
    let (logs, _guard) = Logs::capture();
    let addr = serve_without_connect_info(hello().layer(RateLimitLayer::new(bucket("3/min")))).await;
    for _ in 0..3 {
        check_generic(&get(addr).await, 500, &[]);
    }
    let errors = logs.lines_with("ERROR");
    assert_eq!(errors.len(), 1, "{}", logs.text());
    assert!(errors[0].contains("into_make_service_with_connect_info::<SocketAddr>()"), "{}", errors[0]);
    // Served as the docs' first example serves it, the same layer decides.
    let addr = serve(hello().layer(RateLimitLayer::new(bucket("3/min")))).await;
    assert_eq!(get(addr).await.status, 200);
}

#[tokio::test]
async fn a_key_the_limiter_refuses_is_a_generic_400_and_its_reason_is_logged() {
    let (logs, _guard) = Logs::capture();
    let layer = RateLimitLayer::new(bucket("3/min")).key(KeyBy::header(HeaderName::from_static("x-api-key")));
    let addr = serve(hello().layer(layer)).await;
    let long = "k".repeat(2000);
    for _ in 0..3 {
        check_generic(&get_with(addr, "/", &[("x-api-key", &long)]).await, 400, &["2000", "1024"]);
    }
    assert_eq!(get_with(addr, "/", &[("x-api-key", "short")]).await.status, 200);
    // Logged at once, then counted: one line for the three.
    let warned = logs.lines_with("WARN");
    assert_eq!(warned.len(), 1, "{}", logs.text());
    assert!(warned[0].contains("2000 bytes"), "{}", warned[0]);
}

#[tokio::test]
async fn an_untrusted_forwarded_for_is_reported_once() {
    let (logs, _guard) = Logs::capture();
    let addr = serve(hello().layer(RateLimitLayer::new(bucket("5/min")))).await;
    for i in 0..3 {
        assert_eq!(get_with(addr, "/", &[("X-Forwarded-For", &format!("198.51.100.{i}"))]).await.status, 200);
    }
    let trusting = serve(hello().layer(RateLimitLayer::new(bucket("5/min")).key(KeyBy::peer_ip_behind(1)))).await;
    assert_eq!(get_with(trusting, "/", &[("X-Forwarded-For", "198.51.100.9")]).await.status, 200);
    let warned = logs.lines_with("WARN");
    assert_eq!(warned.len(), 1, "{}", logs.text());
    assert!(warned[0].contains("KeyBy::peer_ip_behind(n)"), "{}", warned[0]);
}

#[test]
fn a_stack_with_a_limiter_member_is_an_error_at_set_up() {
    let limiter = Limiter::builder().limit("burst", Rule::parse("1/s").unwrap()).build().unwrap();
    let stack = Stack::builder().member("user", Arc::new(limiter)).build().unwrap();
    let e = RateLimitLayer::try_new(stack).unwrap_err();
    assert!(e.to_string().contains("\"user\""), "{e}");
}

#[test]
#[should_panic(expected = "KeyBy::per_member needs a Stack")]
fn per_member_keys_need_a_stack() {
    let _ = RateLimitLayer::new(bucket("1/s")).key(KeyBy::per_member(|_| None));
}
