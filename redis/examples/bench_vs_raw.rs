//! ratomic-redis against the plain GCRA script a user would write, sent with
//! `EVALSHA` through the same client and connection: decisions per second
//! with 1, 8 and 64 concurrent callers and in batches of 16, interleaved
//! rounds (each round runs both, in alternating order), median of rounds.
//!
//!     bash redis/bench.sh            # starts a server, three runs
//!     cargo run --release -p ratomic-redis --example bench_vs_raw -- redis://127.0.0.1:6379/ [rounds] [seconds]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratomic::Rule;
use ratomic_redis::{Limits, Options, RedisLimiter};
use redis::aio::MultiplexedConnection;

/// The GCRA everyone writes: one string key, server time, `SET … PX`.
const RAW: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new = tat + interval
if new - now > tau then return {0, new - tau - now} end
redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX', math.ceil((new - now) / 1000))
return {1, 0}
"#;

const KEYS: u64 = 10_000;

#[derive(Clone, Copy, Debug)]
enum Shape {
    Callers(usize),
    Batch(usize),
}

struct Peers {
    ours: RedisLimiter<MultiplexedConnection>,
    raw: redis::Script,
    conn: MultiplexedConnection,
}

async fn measure(p: &Arc<Peers>, ours: bool, shape: Shape, secs: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks = match shape {
        Shape::Callers(n) => n,
        Shape::Batch(_) => 1,
    };
    let mut handles = Vec::new();
    for task in 0..tasks {
        let (p, stop, done) = (p.clone(), stop.clone(), done.clone());
        handles.push(tokio::spawn(async move {
            let mut i = task as u64 * 7919;
            while !stop.load(Ordering::Relaxed) {
                match shape {
                    Shape::Callers(_) => {
                        i += 1;
                        let key = format!("bench{{k{}}}", i % KEYS);
                        if ours {
                            let _ = p.ours.allow(&key).await.unwrap();
                        } else {
                            let mut c = p.conn.clone();
                            let _: Vec<i64> = p
                                .raw
                                .key(format!("raw:{key}"))
                                .arg(10)
                                .arg(1_000_000)
                                .invoke_async(&mut c)
                                .await
                                .unwrap();
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Shape::Batch(n) => {
                        let keys: Vec<String> =
                            (0..n).map(|j| format!("bench{{k{}}}", (i + j as u64) % KEYS)).collect();
                        i += n as u64;
                        if ours {
                            let reqs: Vec<(&str, u64)> = keys.iter().map(|k| (k.as_str(), 1)).collect();
                            let _ = p.ours.allow_many(&reqs).await.unwrap();
                        } else {
                            let mut pipe = redis::pipe();
                            for k in &keys {
                                pipe.invoke_script(p.raw.key(format!("raw:{k}")).arg(10).arg(1_000_000));
                            }
                            let mut c = p.conn.clone();
                            let _: Vec<Vec<i64>> = pipe.query_async(&mut c).await.unwrap();
                        }
                        done.fetch_add(n as u64, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    for h in handles {
        h.await.unwrap();
    }
    n as f64 / elapsed
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let url = args.next().expect("usage: bench_vs_raw URL [rounds] [seconds]");
    let rounds: usize = args.next().map_or(3, |s| s.parse().unwrap());
    let secs: f64 = args.next().map_or(1.0, |s| s.parse().unwrap());
    let client = redis::Client::open(url.as_str()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    // 100,000/s per key: T = 10 µs, τ = 1 s: every call is allowed (and written).
    let limits = Limits::single(Rule::parse("100000/s").unwrap()).unwrap().with_prefix("bench:").unwrap();
    let ours =
        RedisLimiter::new(conn.clone(), limits, Options { timeout: Duration::from_secs(5), ..Options::default() });
    let p = Arc::new(Peers { ours, raw: redis::Script::new(RAW), conn });
    // Load both scripts before timing.
    let _ = p.ours.allow("warm").await.unwrap();
    let mut c = p.conn.clone();
    let _: Vec<i64> = p.raw.key("raw:warm").arg(10).arg(1_000_000).invoke_async(&mut c).await.unwrap();

    println!("| shape | ratomic-redis (decisions/s) | raw GCRA script (decisions/s) | ratio |");
    println!("|---|---:|---:|---:|");
    for shape in [Shape::Callers(1), Shape::Callers(8), Shape::Callers(64), Shape::Batch(16)] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            if round % 2 == 0 {
                a.push(measure(&p, true, shape, secs).await);
                b.push(measure(&p, false, shape, secs).await);
            } else {
                b.push(measure(&p, false, shape, secs).await);
                a.push(measure(&p, true, shape, secs).await);
            }
        }
        let (a, b) = (median(a), median(b));
        let label = match shape {
            Shape::Callers(n) => format!("{n} concurrent caller{}", if n == 1 { "" } else { "s" }),
            Shape::Batch(n) => format!("batches of {n} (one pipeline)"),
        };
        println!("| {label} | {a:.0} | {b:.0} | {:.2} |", a / b);
    }
}
