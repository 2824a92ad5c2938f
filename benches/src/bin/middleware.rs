//! HTTP middleware overhead on axum: ratomic-tower against tower_governor
//! (the layer an axum team would otherwise pick), issue 17's benchmark.
//!
//! ```sh
//! cargo run --release -p ratomic-benches --bin middleware [ROUNDS] [SECONDS]   # default 5 rounds of 2 s
//! ```
//!
//! `middleware inproc [ROUNDS]` calls each app's router directly in this
//! process (no sockets, no HTTP parsing or writing): each layer's own work
//! per request, interleaved in rounds of 200 000 calls, median ns a call.
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
        "ratomic" => hello.layer(RateLimitLayer::new(TokenBucket::new(Quota::new(1 << 40, 1e12).unwrap()))),
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

/// Each app's router called in this process: ns a request over the bare
/// router's, median of `rounds` interleaved rounds.
fn inproc(rounds: usize) {
    use tower::{Service, ServiceExt};
    const CALLS: u32 = 200_000;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let peer: SocketAddr = "10.1.2.3:4567".parse().unwrap();
    let request = move || {
        let mut r = http::Request::get("/").body(axum::body::Body::empty()).unwrap();
        r.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        r
    };
    let mut routers: Vec<Router> = APPS.iter().map(|k| app(k)).collect();
    let mut times = vec![Vec::new(); APPS.len()];
    rt.block_on(async {
        for _ in 0..rounds {
            for (i, router) in routers.iter_mut().enumerate() {
                let t0 = Instant::now();
                for _ in 0..CALLS {
                    let r = ServiceExt::<http::Request<axum::body::Body>>::ready(router)
                        .await
                        .unwrap()
                        .call(request())
                        .await
                        .unwrap();
                    assert_eq!(r.status(), 200);
                }
                times[i].push(t0.elapsed().as_nanos() as f64 / f64::from(CALLS));
            }
        }
    });
    let med: Vec<f64> = times.iter_mut().map(|t| median(t)).collect();
    println!("axum 0.8 routers called in process, median of {rounds} interleaved rounds of {CALLS} calls");
    for (i, name) in APPS.iter().enumerate() {
        println!("  {name:<24} {:>7.0} ns/request   over bare {:>6.0} ns", med[i], med[i] - med[0]);
    }
    for (i, name) in APPS.iter().enumerate().skip(2) {
        println!("  ratomic's cost ÷ {name}'s: {:.2}", (med[1] - med[0]) / (med[i] - med[0]));
    }
}
