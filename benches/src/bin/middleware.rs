//! HTTP middleware overhead on axum: ratomic-tower against tower_governor
//! (the layer an axum team would otherwise pick), issue 17's benchmark.
//!
//! ```sh
//! cargo run --release -p ratomic-benches --bin middleware [ROUNDS] [SECONDS]   # default 5 rounds of 2 s
//! ```
//!
//! `middleware inproc [ROUNDS]` calls each contender in this process (no
//! sockets, no HTTP parsing or writing), issue 38's benchmark: the three
//! scenarios (allowed on one key, allowed over 10,000 keys, denied), each
//! with the layer placed by `Router::layer` and around the whole router,
//! the contenders interleaved in rounds (200,000 calls, 20,000 denied; the
//! order reversed every other round), median ns a call over the bare
//! router's. A no-op layer shows what axum charges any `Router::layer`.
//! `middleware profile KIND SCENARIO [CALLS]` runs one contender alone for
//! `perf record`.
//!
//! `middleware drive ROUNDS SECONDS bare=PORT ratomic=PORT peer=PORT…` drives
//! apps served by someone else (the Python bench's uvicorn apps) the same
//! way: the first is the baseline, the second ratomic's.
//!
//! Four hello-world apps, each in its own child process (one tokio thread,
//! axum, peer address from `ConnectInfo`): no limiter; ratomic's
//! `RateLimitLayer` on a `TokenBucket` keyed by peer IP; tower_governor's
//! `GovernorLayer` keyed by peer IP with its default headers (only on a
//! denial) and with `use_headers()` (limit and remaining on every
//! response, as ratomic always writes its `RateLimit` fields). Both
//! limiters allow everything (every request is decided and allowed). This
//! process drives each app in turn with 10 keep-alive HTTP/1.1 connections
//! for SECONDS, the order shuffled each round, and reports each one's
//! median requests/s, its cost per request over the bare app (1/rate −
//! 1/bare), and ratomic's cost ÷ each peer's (the target: ≤ 0.5).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::{routing, Router};
use ratomic::{Quota, TokenBucket};
use ratomic_tower::RateLimitLayer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

const APPS: [&str; 4] = ["bare", "ratomic", "tower_governor", "tower_governor+headers"];
const CONNECTIONS: usize = 10;

fn app(kind: &str) -> Router {
    let hello = Router::new().route("/", routing::get(|| async { "hello" }));
    // Limits no run reaches: every request is decided and allowed.
    match kind {
        "bare" => hello,
        "ratomic" | "ratomic-noinfo" => {
            let layer = RateLimitLayer::new(TokenBucket::new(Quota::new(1 << 40, 1e12).unwrap()));
            hello.layer(layer.info_in_extensions(kind == "ratomic"))
        }
        "tower_governor" => {
            let c = GovernorConfigBuilder::default().per_nanosecond(1).burst_size(u32::MAX).finish().unwrap();
            hello.layer(GovernorLayer::new(c))
        }
        "tower_governor+headers" => {
            let c =
                GovernorConfigBuilder::default().per_nanosecond(1).burst_size(u32::MAX).use_headers().finish().unwrap();
            hello.layer(GovernorLayer::new(c))
        }
        other => panic!("unknown app {other}"),
    }
}

/// The child: serves `kind` on a free loopback port, printed on stdout.
fn serve(kind: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        println!("{}", listener.local_addr().unwrap().port());
        let service = app(kind).into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, service).await.unwrap();
    });
}

/// Requests/s over `seconds` on `CONNECTIONS` keep-alive connections.
async fn load(port: u16, seconds: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|_| {
            tokio::spawn(async move {
                let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
                s.set_nodelay(true).unwrap();
                let (mut buf, mut n) = (vec![0u8; 4096], 0u64);
                while Instant::now() < deadline {
                    s.write_all(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n").await.unwrap();
                    let mut have = 0;
                    loop {
                        have += s.read(&mut buf[have..]).await.unwrap();
                        if let Some(end) = complete(&buf[..have]) {
                            assert_eq!(end, have, "one response at a time");
                            assert!(buf.starts_with(b"HTTP/1.1 200"), "every request is allowed");
                            break;
                        }
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    let t0 = Instant::now();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total as f64 / t0.elapsed().as_secs_f64()
}

/// The length of the response in `b` once it is whole.
fn complete(b: &[u8]) -> Option<usize> {
    let head = b.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let text = std::str::from_utf8(&b[..head]).ok()?;
    let len = text
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(|v| v.trim().parse::<usize>()))?
        .ok()?;
    (b.len() >= head + len).then_some(head + len)
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

fn main() {
    if let Ok(kind) = std::env::var("RATOMIC_BENCH_SERVE") {
        serve(&kind);
        return;
    }
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("inproc") {
        let rounds = args.get(2).map_or(15, |a| a.parse().unwrap());
        inproc(rounds);
        return;
    }
    if args.get(1).map(String::as_str) == Some("profile") {
        profile(&args[2], &args[3], args.get(4).map_or(5_000_000, |a| a.parse().unwrap()));
        return;
    }
    if args.get(1).map(String::as_str) == Some("drive") {
        let (rounds, seconds) = (args[2].parse().unwrap(), args[3].parse().unwrap());
        let apps: Vec<(String, u16)> = args[4..]
            .iter()
            .map(|a| {
                let (name, port) = a.split_once('=').expect("name=port");
                (name.to_owned(), port.parse().unwrap())
            })
            .collect();
        println!("{CONNECTIONS} keep-alive connections, median of {rounds} rounds of {seconds} s");
        report(&apps, rounds, seconds);
        return;
    }
    let rounds: usize = args.get(1).map_or(5, |a| a.parse().unwrap());
    let seconds: f64 = args.get(2).map_or(2.0, |a| a.parse().unwrap());
    let mut children: Vec<Child> = Vec::new();
    let apps: Vec<(String, u16)> = APPS
        .iter()
        .map(|kind| {
            let mut child = Command::new(std::env::current_exe().unwrap())
                .env("RATOMIC_BENCH_SERVE", kind)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
            children.push(child);
            (kind.to_string(), line.trim().parse().unwrap())
        })
        .collect();
    println!(
        "axum 0.8, {CONNECTIONS} keep-alive connections, median of {rounds} rounds of {seconds} s, each app in its own process (one tokio thread)"
    );
    report(&apps, rounds, seconds);
    for c in &mut children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Drives `apps` (the baseline first, ratomic's second) in interleaved
/// rounds and prints the table.
fn report(apps: &[(String, u16)], rounds: usize, seconds: f64) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut rates = vec![Vec::new(); apps.len()];
    let mut order: Vec<usize> = (0..apps.len()).collect();
    let mut seed = std::process::id() as u64 | 1;
    rt.block_on(async {
        for (_, port) in apps {
            load(*port, 0.3).await; // warm up
        }
        for _ in 0..rounds {
            for i in (1..order.len()).rev() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                order.swap(i, (seed % (i as u64 + 1)) as usize);
            }
            for &i in &order {
                rates[i].push(load(apps[i].1, seconds).await);
            }
        }
    });
    let med: Vec<f64> = rates.iter_mut().map(|r| median(r)).collect();
    let cost = |i: usize| (1.0 / med[i] - 1.0 / med[0]) * 1e6;
    for (i, (name, _)) in apps.iter().enumerate() {
        if i == 0 {
            println!("  {name:<24} {:>9.0} req/s", med[i]);
        } else {
            println!("  {name:<24} {:>9.0} req/s   cost over {} {:>7.2} µs/request", med[i], apps[0].0, cost(i));
        }
    }
    for (i, (name, _)) in apps.iter().enumerate().skip(2) {
        if cost(i) > 0.0 {
            println!("  {}'s cost ÷ {name}'s: {:.2}", apps[1].0, cost(1) / cost(i));
        } else {
            println!("  {}'s cost ÷ {name}'s: n/a ({name} within the noise of {})", apps[1].0, apps[0].0);
        }
    }
}

/// The in-process contenders, each given the same requests.
const INPROC: [&str; 6] = ["bare", "ratomic", "ratomic+info", "tower_governor", "tower_governor+headers", "noop-layer"];

/// The three scenarios of issue 38: allowed on one key, allowed over
/// 10,000 keys (peer addresses), denied on one key.
const SCENARIOS: [&str; 3] = ["allowed-1key", "allowed-10k-keys", "denied"];

/// Where the layer goes: `Router::layer` (axum wraps each route in the
/// layer's service and boxes its future: what a user writes most often,
/// and what axum charges any layer, the `noop-layer` row), or around the
/// whole router (`layer.layer(router)`: the layer's own work alone).
const PLACEMENTS: [&str; 2] = ["Router::layer", "around the router"];

type Svc = tower::util::BoxCloneSyncService<
    http::Request<axum::body::Body>,
    http::Response<axum::body::Body>,
    std::convert::Infallible,
>;

fn place<L>(layer: L, placement: &str) -> Svc
where
    L: tower::Layer<axum::routing::Route> + tower::Layer<Router> + Clone + Send + Sync + 'static,
    <L as tower::Layer<axum::routing::Route>>::Service: tower::Service<
            http::Request<axum::body::Body>,
            Response = http::Response<axum::body::Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    <<L as tower::Layer<axum::routing::Route>>::Service as tower::Service<http::Request<axum::body::Body>>>::Future:
        Send + 'static,
    <L as tower::Layer<Router>>::Service: tower::Service<
            http::Request<axum::body::Body>,
            Response = http::Response<axum::body::Body>,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + Sync
        + 'static,
    <<L as tower::Layer<Router>>::Service as tower::Service<http::Request<axum::body::Body>>>::Future: Send + 'static,
{
    let hello = Router::new().route("/", routing::get(|| async { "hello" }));
    if placement == "Router::layer" {
        Svc::new(hello.layer(layer))
    } else {
        Svc::new(layer.layer(hello))
    }
}

/// A contender: `kind` in `scenario`, placed at `placement`.
fn contender(kind: &str, scenario: &str, placement: &str) -> Svc {
    let denied = scenario == "denied";
    // Allowed: limits no run reaches. Denied: one request a day; after the
    // first, every request is denied.
    let quota = if denied { Quota::new(1, 1.0 / 86_400.0) } else { Quota::new(1 << 40, 1e12) }.unwrap();
    let governor = || {
        let mut b = GovernorConfigBuilder::default();
        if denied {
            b.period(std::time::Duration::from_secs(86_400)).burst_size(1);
        } else {
            b.per_nanosecond(1).burst_size(u32::MAX);
        }
        b
    };
    match kind {
        "bare" => Svc::new(Router::new().route("/", routing::get(|| async { "hello" }))),
        "noop-layer" => place(tower::layer::util::Identity::new(), placement),
        "ratomic" | "ratomic+info" => {
            let layer = RateLimitLayer::new(TokenBucket::new(quota)).info_in_extensions(kind == "ratomic+info");
            place(layer, placement)
        }
        "tower_governor" => place(GovernorLayer::new(governor().finish().unwrap()), placement),
        "tower_governor+headers" => place(GovernorLayer::new(governor().use_headers().finish().unwrap()), placement),
        other => panic!("unknown contender {other}"),
    }
}

fn request(i: u32) -> http::Request<axum::body::Body> {
    let peer = SocketAddr::from(([10, (i >> 16) as u8, (i >> 8) as u8, i as u8], 4567));
    let mut r = http::Request::get("/").body(axum::body::Body::empty()).unwrap();
    r.extensions_mut().insert(axum::extract::ConnectInfo(peer));
    r
}

/// Each contender called in this process, per placement and scenario: ns
/// a request, and over the bare router's, median of `rounds` interleaved
/// rounds (the order reversed every other round).
fn inproc(rounds: usize) {
    use tower::{Service, ServiceExt};
    const KEYS: u32 = 10_000;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    println!(
        "axum 0.8 in process, median of {rounds} interleaved rounds of 200,000 calls (20,000 denied). ratomic: draft-11 \
         RateLimit-Policy + RateLimit (+ Retry-After and a problem body on a 429); tower_governor+headers: \
         x-ratelimit-limit + x-ratelimit-remaining (+ x-ratelimit-after, retry-after on a 429)"
    );
    for placement in PLACEMENTS {
        for scenario in SCENARIOS {
            let keys = if scenario == "allowed-10k-keys" { KEYS } else { 1 };
            // tower_governor's denials take tens of µs (each reads a new
            // quanta clock): fewer calls, the same for every contender.
            let calls: u32 = if scenario == "denied" { 20_000 } else { 200_000 };
            let expect = if scenario == "denied" { 429 } else { 200 };
            let mut services: Vec<Svc> = INPROC.iter().map(|k| contender(k, scenario, placement)).collect();
            let mut times = vec![Vec::new(); INPROC.len()];
            rt.block_on(async {
                for (i, svc) in services.iter_mut().enumerate() {
                    // Warm up (every key seen); the denied scenario's one token drained.
                    for k in 0..keys.max(1000) {
                        let r = svc.ready().await.unwrap().call(request(k % keys)).await.unwrap();
                        if !matches!(INPROC[i], "bare" | "noop-layer") && k > 0 {
                            assert_eq!(r.status(), expect, "{} {scenario}", INPROC[i]);
                        }
                    }
                }
                let mut order: Vec<usize> = (0..INPROC.len()).collect();
                for _ in 0..rounds {
                    order.reverse();
                    for &i in &order {
                        let svc = &mut services[i];
                        let t0 = Instant::now();
                        for n in 0..calls {
                            let r = svc.ready().await.unwrap().call(request(n % keys)).await.unwrap();
                            std::hint::black_box(r);
                        }
                        times[i].push(t0.elapsed().as_nanos() as f64 / f64::from(calls));
                    }
                }
            });
            let med: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
            println!("{placement}, {scenario}:");
            for (i, name) in INPROC.iter().enumerate() {
                println!("  {name:<24} {:>7.0} ns/request   over bare {:>+6.0} ns", med[i], med[i] - med[0]);
            }
            for (i, name) in INPROC.iter().enumerate().skip(3).take(2) {
                println!("  ratomic's cost ÷ {name}'s: {:.2}", (med[1] - med[0]) / (med[i] - med[0]));
            }
        }
    }
}

/// `middleware profile KIND SCENARIO [CALLS]`: one contender alone, for
/// `perf record` (placed as `RATOMIC_PLACEMENT` says, default
/// `Router::layer`).
fn profile(kind: &str, scenario: &str, calls: u32) {
    use tower::{Service, ServiceExt};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let keys = if scenario == "allowed-10k-keys" { 10_000 } else { 1 };
    let placement = std::env::var("RATOMIC_PLACEMENT").unwrap_or_else(|_| PLACEMENTS[0].to_owned());
    let mut svc = contender(kind, scenario, &placement);
    rt.block_on(async {
        for n in 0..calls {
            let r = svc.ready().await.unwrap().call(request(n % keys)).await.unwrap();
            std::hint::black_box(r);
        }
    });
}
