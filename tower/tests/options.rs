//! Each option of the layer (issue 38: what tower_governor offers, and
//! refunds on the response's status) in a real axum server on 127.0.0.1
//! port 0, asked over real TCP connections, and every limiter kind behind
//! it.

mod support;

use std::sync::Arc;

use axum::{routing, Extension, Router};
use http::{HeaderName, Method, StatusCode};
use ratomic::{DirectTokenBucket, Limiter, ManualClock, Quota, Quotas, Rule, Stack, TokenBucket};
use ratomic_tower::{ClientIp, Draft, IntoRateLimiter, KeyBy, Plans, ProxyHeader, RateLimitInfo, RateLimitLayer};

use support::{check_denial, check_generic, get, get_with, hello, request, serve, Logs};

fn bucket(rate: &str) -> TokenBucket<[u8], ManualClock> {
    TokenBucket::builder(Quota::parse(rate).unwrap()).clock(ManualClock::new()).build().unwrap()
}

fn statuses(replies: &[support::Reply]) -> Vec<u16> {
    replies.iter().map(|r| r.status).collect()
}

#[tokio::test]
async fn only_the_methods_named_are_limited() {
    let layer = RateLimitLayer::new(bucket("1/min")).methods([Method::POST, Method::PUT]);
    let app = Router::new().route("/", routing::get(|| async { "read" }).post(|| async { "written" })).layer(layer);
    let addr = serve(app).await;
    for _ in 0..3 {
        let r = get(addr).await;
        assert_eq!((r.status, r.body.as_str()), (200, "read"));
        assert!(!r.headers.contains_key("ratelimit"), "a method left out is not limited: {:?}", r.headers);
    }
    let r = request(addr, "POST", "/", &[]).await;
    assert_eq!((r.status, r.headers["ratelimit"].as_str()), (200, r#""default";r=0;t=60"#));
    check_denial(&request(addr, "POST", "/", &[]).await, r#""default""#);
    assert_eq!(get(addr).await.status, 200, "reads still pass once writes are denied");
}

#[tokio::test]
async fn each_route_has_its_own_layer() {
    let login = RateLimitLayer::new(bucket("1/min")).name("login").unwrap();
    let api = RateLimitLayer::new(bucket("3/min")).name("api").unwrap();
    let app = Router::new()
        .route("/login", routing::post(|| async { "welcome" }).layer(login))
        .route("/api", routing::get(|| async { "data" }).layer(api))
        .route("/", routing::get(|| async { "free" }));
    let addr = serve(app).await;
    let r = request(addr, "POST", "/login", &[]).await;
    assert_eq!((r.status, r.headers["ratelimit-policy"].as_str()), (200, r#""login";q=1;w=60"#));
    check_denial(&request(addr, "POST", "/login", &[]).await, r#""login""#);
    let api = [get_with(addr, "/api", &[]).await, get_with(addr, "/api", &[]).await];
    assert_eq!(statuses(&api), [200, 200], "the login route's denial is its own");
    assert_eq!(api[1].headers["ratelimit"], r#""api";r=1;t=40"#);
    let r = get(addr).await;
    assert_eq!((r.status, r.headers.get("ratelimit")), (200, None), "a route without a layer is not limited");
}

/// With no proxy trusted, none of the three headers moves the key; behind
/// one proxy, the header it writes names the client (and no other does).
#[tokio::test]
async fn forwarded_and_x_real_ip_name_the_client_only_behind_a_trusted_proxy() {
    let spoofs: [(&str, &str); 4] = [
        ("Forwarded", "for=198.51.100.1"),
        ("Forwarded", r#"for="[2001:db8::1]:4711""#),
        ("X-Real-IP", "198.51.100.2"),
        ("X-Forwarded-For", "198.51.100.3"),
    ];
    let addr = serve(hello().layer(RateLimitLayer::new(bucket("1/min")))).await;
    assert_eq!(get(addr).await.status, 200);
    for spoof in spoofs {
        check_denial(&get_with(addr, "/", &[spoof]).await, r#""default""#);
    }

    let forwarded =
        RateLimitLayer::new(bucket("1/min")).key(KeyBy::client_ip(ClientIp::behind(1, ProxyHeader::Forwarded)));
    let addr = serve(hello().layer(forwarded)).await;
    let via = |value: &'static str| [("Forwarded", value)];
    assert_eq!(get_with(addr, "/", &via(r#"for=6.6.6.6, for="[2001:db8:1:2::7]:4711";proto=https"#)).await.status, 200);
    // The same /64, whatever the client wrote left of the proxy's element.
    let r = get_with(addr, "/", &via(r#"for=7.7.7.7;by=x, For="[2001:db8:1:2::8]""#)).await;
    check_denial(&r, r#""default""#);
    assert_eq!(get_with(addr, "/", &via("for=198.51.100.7")).await.status, 200, "another client");
    // Lines in order: the proxy's own line is the last.
    let two_lines = [("Forwarded", "for=198.51.100.7"), ("Forwarded", "for=203.0.113.9")];
    assert_eq!(get_with(addr, "/", &two_lines).await.status, 200, "203.0.113.9, not the forged first line");
    // Headers the proxy does not write are the client's: the peer's key.
    assert_eq!(get_with(addr, "/", &[("X-Forwarded-For", "192.0.2.1")]).await.status, 200);
    check_denial(&get_with(addr, "/", &[("X-Real-IP", "192.0.2.2")]).await, r#""default""#);

    let real_ip = RateLimitLayer::new(bucket("1/min")).key(KeyBy::client_ip(ClientIp::behind(1, ProxyHeader::XRealIp)));
    let addr = serve(hello().layer(real_ip)).await;
    assert_eq!(get_with(addr, "/", &[("X-Real-IP", "198.51.100.9")]).await.status, 200);
    check_denial(&get_with(addr, "/", &[("X-Real-IP", " 198.51.100.9 ")]).await, r#""default""#);
    assert_eq!(get_with(addr, "/", &[("X-Real-IP", "198.51.100.10")]).await.status, 200);
    assert_eq!(get_with(addr, "/", &[("Forwarded", "for=198.51.100.9")]).await.status, 200, "the peer's key");
}

#[tokio::test]
async fn a_forwarding_header_nobody_trusts_is_reported_once() {
    let (logs, _guard) = Logs::capture();
    let addr = serve(hello().layer(RateLimitLayer::new(bucket("5/min")))).await;
    assert_eq!(get_with(addr, "/", &[("Forwarded", "for=198.51.100.1")]).await.status, 200);
    assert_eq!(get_with(addr, "/", &[("X-Real-IP", "198.51.100.2")]).await.status, 200);
    let warned = logs.lines_with("WARN");
    assert_eq!(warned.len(), 1, "{}", logs.text());
    assert!(warned[0].contains("ClientIp::behind(n, header)"), "{}", warned[0]);
}

/// A global limit over a per-client one: clients A and B (as one trusted
/// proxy names them) each pass their own limit, and the third request of
/// the two is the global key's.
#[tokio::test]
async fn a_global_key_is_one_bucket_for_every_client() {
    let per_client = RateLimitLayer::new(bucket("5/min")).name("client").unwrap().key(KeyBy::peer_ip_behind(1));
    let global = RateLimitLayer::new(bucket("3/min")).name("all").unwrap().key(KeyBy::global());
    let addr = serve(hello().layer(per_client).layer(global)).await;
    let from = |ip: &'static str| [("X-Forwarded-For", ip)];
    let r = get_with(addr, "/", &from("198.51.100.1")).await;
    assert_eq!((r.status, r.headers["ratelimit"].as_str()), (200, r#""all";r=2;t=20"#));
    assert_eq!(get_with(addr, "/", &from("198.51.100.2")).await.status, 200);
    assert_eq!(get_with(addr, "/", &from("198.51.100.3")).await.status, 200);
    let r = get_with(addr, "/", &from("198.51.100.4")).await;
    check_denial(&r, r#""all""#);
}

#[tokio::test]
async fn the_decision_is_in_the_request_s_extensions_when_asked() {
    async fn left(info: Option<Extension<RateLimitInfo>>) -> String {
        match info {
            Some(Extension(i)) => format!("{} of {} left, cost {}", i.decision.remaining, i.decision.limit, i.cost),
            None => "no info".into(),
        }
    }
    let app = |layer: RateLimitLayer<_>| Router::new().route("/", routing::get(left)).layer(layer);
    let addr = serve(app(RateLimitLayer::new(bucket("5/min")).cost(|_| 2).info_in_extensions(true))).await;
    assert_eq!(get(addr).await.body, "3 of 5 left, cost 2");
    assert_eq!(get(addr).await.body, "1 of 5 left, cost 2");
    let addr = serve(app(RateLimitLayer::new(bucket("5/min")))).await;
    assert_eq!(get(addr).await.body, "no info", "off by default");
}

#[tokio::test]
async fn earlier_drafts_legacy_fields_or_none() {
    let addr = serve(hello().layer(RateLimitLayer::new(bucket("2/min")).draft(Draft::Draft7))).await;
    let r = get(addr).await;
    assert_eq!(r.headers["ratelimit-policy"], "2;w=60");
    assert_eq!(r.headers["ratelimit"], "limit=2, remaining=1, reset=30");
    let layer = RateLimitLayer::new(bucket("2/min")).standard_headers(false).legacy_headers(true);
    let addr = serve(hello().layer(layer)).await;
    let r = get(addr).await;
    assert!(!r.headers.contains_key("ratelimit") && !r.headers.contains_key("ratelimit-policy"), "{:?}", r.headers);
    assert_eq!((r.headers["x-ratelimit-limit"].as_str(), r.headers["x-ratelimit-remaining"].as_str()), ("2", "1"));
    let _ = get(addr).await;
    let denied = get(addr).await;
    assert_eq!((denied.status, denied.headers["retry-after"].as_str()), (429, "30"));
}

/// `/ok` answers 200, `/fail` 500, `/missing` 404.
fn outcomes() -> Router {
    Router::new()
        .route("/ok", routing::get(|| async { "ok" }))
        .route("/fail", routing::get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "failed") }))
        .route("/missing", routing::get(|| async { (StatusCode::NOT_FOUND, "missing") }))
}

async fn run(addr: std::net::SocketAddr, paths: &[&str]) -> Vec<u16> {
    let mut out = Vec::new();
    for path in paths {
        out.push(get_with(addr, path, &[]).await.status);
    }
    out
}

#[tokio::test]
async fn skipped_responses_are_refunded_and_denials_are_not() {
    let addr = serve(outcomes().layer(RateLimitLayer::new(bucket("2/min")).skip_failed_responses())).await;
    let seen = run(addr, &["/fail", "/fail", "/fail", "/ok", "/fail", "/ok", "/ok", "/fail"]).await;
    assert_eq!(seen, [500, 500, 500, 200, 500, 200, 429, 429]);

    let addr = serve(outcomes().layer(RateLimitLayer::new(bucket("2/min")).skip_successful_responses())).await;
    let seen = run(addr, &["/ok", "/ok", "/ok", "/fail", "/ok", "/missing", "/ok", "/fail"]).await;
    assert_eq!(seen, [200, 200, 200, 500, 200, 404, 429, 429]);

    // A 404 counted as a success: charged.
    let layer =
        RateLimitLayer::new(bucket("2/min")).skip_failed_responses().response_was_successful(|s| s.as_u16() < 500);
    let addr = serve(outcomes().layer(layer)).await;
    assert_eq!(run(addr, &["/fail", "/missing", "/fail", "/missing", "/ok"]).await, [500, 404, 500, 404, 429]);
}

/// Requests in flight at once are charged on the way in: however the
/// failures' refunds interleave, no more than the limit succeed, and once
/// all are answered exactly the limit can have succeeded in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refunds_under_concurrency_never_pass_the_bound_and_give_back_exactly() {
    const LIMIT: usize = 5;
    let app = Router::new().route(
        "/",
        routing::get(|headers: http::HeaderMap| async move {
            tokio::task::yield_now().await;
            if headers.contains_key("x-fail") {
                StatusCode::BAD_GATEWAY
            } else {
                StatusCode::OK
            }
        }),
    );
    let layer = RateLimitLayer::new(bucket(&format!("{LIMIT}/h"))).key(KeyBy::global()).skip_failed_responses();
    let addr = serve(app.layer(layer)).await;
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            tokio::spawn(async move {
                let fail: &[(&str, &str)] = if i % 3 == 0 { &[] } else { &[("x-fail", "1")] };
                get_with(addr, "/", fail).await.status
            })
        })
        .collect();
    let mut seen = Vec::new();
    for t in tasks {
        seen.push(t.await.unwrap());
    }
    let ok = seen.iter().filter(|s| **s == 200).count();
    assert!(ok <= LIMIT, "{ok} succeeded at once: {seen:?}");
    assert!(seen.iter().all(|s| [200, 502, 429].contains(s)), "{seen:?}");
    let mut more = 0;
    while get(addr).await.status == 200 {
        more += 1;
        assert!(ok + more <= LIMIT, "refunds gave back more than was charged: {seen:?}");
    }
    assert_eq!(ok + more, LIMIT, "every failure's cost came back: {seen:?}");
}

#[test]
#[should_panic(expected = "nothing would be limited")]
fn refunding_both_kinds_is_an_error_at_set_up() {
    let _ = RateLimitLayer::new(bucket("1/s")).skip_failed_responses().skip_successful_responses();
}

#[test]
#[should_panic(expected = "limits no request")]
fn no_method_at_all_is_an_error_at_set_up() {
    let _ = RateLimitLayer::new(bucket("1/s")).methods([]);
}

/// The same sequence through any limiter of capacity 2 for the key:
/// failures refunded, successes charged, denials neither.
async fn check_limiter<L: IntoRateLimiter>(limiter: L, key: KeyBy, policy: &str) {
    let layer = RateLimitLayer::new(limiter).key(key).skip_failed_responses();
    let addr = serve(outcomes().layer(layer)).await;
    let mut seen = Vec::new();
    for path in ["/fail", "/ok", "/fail", "/ok", "/ok", "/fail"] {
        let r = get_with(addr, path, &[("x-key", "k1")]).await;
        if r.status == 200 {
            assert!(r.headers["ratelimit-policy"].starts_with(policy), "{:?}", r.headers);
        }
        seen.push(r.status);
    }
    assert_eq!(seen, [500, 200, 500, 200, 429, 429], "{policy}");
}

#[tokio::test]
async fn every_limiter_kind_stands_behind_the_layer_and_gets_its_refunds() {
    let header = || KeyBy::header(HeaderName::from_static("x-key"));
    check_limiter(bucket("2/min"), header(), r#""default";q=2;w=60"#).await;

    let dir = std::env::temp_dir().join(format!("ratomic-tower-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("limits");
    let shared = TokenBucket::builder("2/min").shared_file(&path).build().unwrap();
    check_limiter(shared, header(), r#""default";q=2;w=60"#).await;
    std::fs::remove_dir_all(&dir).unwrap();

    let multi = Limiter::builder()
        .limit("burst", Rule::parse("2/min").unwrap())
        .limit("daily", Rule::parse("100/d").unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    check_limiter(multi, header(), r#""burst";q=2;w=60, "daily";q=100;w=86400"#).await;

    let clock = ManualClock::new();
    let user = Arc::new(TokenBucket::builder("2/min").clock(clock.clone()).build().unwrap());
    let global = Arc::new(DirectTokenBucket::with_clock(Quota::parse("50/min").unwrap(), clock.clone()));
    let stack = || Stack::builder().member("user", user.clone()).member("global", global.clone()).clock(clock.clone());
    check_limiter(stack().build().unwrap(), header(), r#""user";q=2;w=60, "global";q=50;w=60"#).await;
    // One key per member: the refunds go to each.
    let keys = KeyBy::per_member(|p| Some(vec![p.headers.get("x-key")?.as_bytes().to_vec(), Vec::new()]));
    let fresh_user = Arc::new(TokenBucket::builder("2/min").clock(clock.clone()).build().unwrap());
    let stack = Stack::builder().member("user", fresh_user).member("global", global.clone()).clock(clock.clone());
    check_limiter(stack.build().unwrap(), keys, r#""user";q=2;w=60"#).await;

    let plan = Quota::parse("2/min").unwrap();
    let plans = Plans::new(Quotas::builder().clock(ManualClock::new()).build().unwrap(), move |_| Some(plan))
        .plan("free", plan)
        .unwrap();
    check_limiter(plans, header(), r#""free";q=2;w=60"#).await;
}

#[tokio::test]
async fn plans_choose_each_request_s_quota() {
    let (logs, _guard) = Logs::capture();
    let (free, pro, undeclared) =
        (Quota::parse("1/min").unwrap(), Quota::parse("3/min").unwrap(), Quota::parse("9/min").unwrap());
    let quotas = Quotas::builder().clock(ManualClock::new()).build().unwrap();
    let plans = Plans::new(quotas, move |parts| {
        let key = parts.headers.get("x-api-key")?.as_bytes();
        Some(match key.first() {
            Some(b'p') => pro,
            Some(b'f') => free,
            _ => undeclared,
        })
    })
    .plan("free", free)
    .unwrap()
    .plan("pro", pro)
    .unwrap();
    let layer = RateLimitLayer::new(plans).key(KeyBy::header(HeaderName::from_static("x-api-key")));
    let addr = serve(hello().layer(layer)).await;
    let key = |k: &'static str| [("x-api-key", k)];
    let r = get_with(addr, "/", &key("pro-1")).await;
    assert_eq!((r.status, r.headers["ratelimit-policy"].as_str()), (200, r#""pro";q=3;w=60"#));
    assert_eq!(get_with(addr, "/", &key("free-1")).await.status, 200);
    check_denial(&get_with(addr, "/", &key("free-1")).await, r#""free""#);
    assert_eq!(get_with(addr, "/", &key("pro-1")).await.status, 200, "each plan its own bucket");
    check_generic(&get(addr).await, 400, &[]);
    for _ in 0..2 {
        check_generic(&get_with(addr, "/", &key("x-1")).await, 500, &["Plans"]);
    }
    let errors = logs.lines_with("ERROR");
    assert_eq!(errors.len(), 1, "{}", logs.text());
    assert!(errors[0].contains("Plans::plan(name, quota)"), "{}", errors[0]);
    assert!(Plans::new(Quotas::new(), |_| None).plan("a", free).unwrap().plan("b", free).is_err());
    assert!(RateLimitLayer::try_new(Plans::new(Quotas::new(), |_| None)).is_err(), "no plan");
}
