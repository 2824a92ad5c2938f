//! The benchmark client of `ratomic serve` (run by serve/bench.sh): N
//! concurrent streams calling as fast as they can for a while, over gRPC
//! (Envoy's RLS, tonic client) or HTTP (the JSON API, HTTP/1.1 keep-alive
//! connections), on one hot descriptor or spread over many; prints
//! decisions/s and p50/p99 latency.
//!
//! ratomic-serve-bench --api grpc|http --addr 127.0.0.1:8081 --streams 64 --keys 1 --seconds 3

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;

struct Args {
    api: String,
    addr: String,
    streams: usize,
    keys: usize,
    seconds: f64,
}

fn args() -> Result<Args, String> {
    let mut a = Args { api: "grpc".into(), addr: String::new(), streams: 64, keys: 1, seconds: 3.0 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--api" => a.api = v,
            "--addr" => a.addr = v,
            "--streams" => a.streams = v.parse().map_err(|_| format!("--streams {v:?}"))?,
            "--keys" => a.keys = v.parse().map_err(|_| format!("--keys {v:?}"))?,
            "--seconds" => a.seconds = v.parse().map_err(|_| format!("--seconds {v:?}"))?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.addr.is_empty() || a.streams == 0 || a.keys == 0 || !a.seconds.is_finite() || a.seconds <= 0.0 {
        return Err(
            "usage: ratomic-serve-bench --api grpc|http --addr HOST:PORT [--streams 64] [--keys 1] [--seconds 3]"
                .into(),
        );
    }
    Ok(a)
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let a = args()?;
    let deadline = Instant::now() + Duration::from_secs_f64(a.seconds);
    let mut tasks = Vec::new();
    // gRPC: 8 HTTP/2 connections, the streams spread over them.
    let mut channels = Vec::new();
    if a.api == "grpc" {
        for _ in 0..8.min(a.streams) {
            let ch = tonic::transport::Endpoint::from_shared(format!("http://{}", a.addr))
                .map_err(|e| e.to_string())?
                .connect()
                .await
                .map_err(|e| format!("connect: {e}"))?;
            channels.push(ch);
        }
    }
    for s in 0..a.streams {
        let keys = a.keys;
        let api = a.api.clone();
        let addr = a.addr.clone();
        let channel = channels.get(s % channels.len().max(1)).cloned();
        tasks.push(tokio::spawn(async move {
            let mut lat: Vec<u32> = Vec::with_capacity(1 << 16);
            let mut errors = 0u64;
            let mut i = s;
            match api.as_str() {
                "grpc" => {
                    let mut client = RateLimitServiceClient::new(channel.expect("a channel"));
                    while Instant::now() < deadline {
                        let req = RateLimitRequest {
                            domain: "bench".into(),
                            descriptors: vec![RateLimitDescriptor {
                                entries: vec![Entry { key: "k".into(), value: format!("v{}", i % keys) }],
                                ..Default::default()
                            }],
                            hits_addend: 1,
                        };
                        i += 7919;
                        let t = Instant::now();
                        match client.should_rate_limit(req).await {
                            Ok(_) => lat.push(t.elapsed().as_nanos().min(u32::MAX as u128) as u32),
                            Err(_) => errors += 1,
                        }
                    }
                }
                _ => {
                    let stream = tokio::net::TcpStream::connect(&addr).await.expect("connect");
                    stream.set_nodelay(true).ok();
                    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                        .await
                        .expect("handshake");
                    tokio::spawn(conn);
                    while Instant::now() < deadline {
                        let body =
                            format!(r#"{{"identifier":"v{}","limit":1000000000,"duration":"1s","cost":1}}"#, i % keys);
                        i += 7919;
                        let req = hyper::Request::post("/v1/ratelimit")
                            .header("host", addr.as_str())
                            .header("content-type", "application/json")
                            .body(Full::new(Bytes::from(body)))
                            .expect("request");
                        let t = Instant::now();
                        match send.send_request(req).await {
                            Ok(resp) => {
                                let ok = resp.status().is_success();
                                let _ = resp.into_body().collect().await;
                                if ok {
                                    lat.push(t.elapsed().as_nanos().min(u32::MAX as u128) as u32);
                                } else {
                                    errors += 1;
                                }
                            }
                            Err(_) => errors += 1,
                        }
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await.map_err(|e| e.to_string())?;
        all.extend(lat);
        errors += e;
    }
    // Every stream stops at the deadline: the run lasted `seconds`.
    let elapsed = a.seconds;
    all.sort_unstable();
    let pct =
        |p: f64| all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).copied().unwrap_or(0);
    println!(
        "api={} keys={} streams={} decisions/s={:.0} p50_us={:.1} p99_us={:.1} calls={} errors={}",
        a.api,
        a.keys,
        a.streams,
        all.len() as f64 / elapsed,
        pct(0.50) as f64 / 1e3,
        pct(0.99) as f64 / 1e3,
        all.len(),
        errors
    );
    Ok(())
}
