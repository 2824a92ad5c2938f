//! ratomic-postgres against the plain SQL GCRA a user would write (one
//! `INSERT … ON CONFLICT … DO UPDATE … WHERE … RETURNING`, the server's
//! clock), both from Rust over tokio-postgres with the same number of
//! pipelined connections and prepared statements: decisions per second with
//! 1 and 64 calls in flight, on one hot key and on 10,000 keys. With one
//! call in flight the contenders take turns call by call (a round is both
//! for twice the seconds); with 64, rounds interleave them (alternating
//! which goes first). The median of the rounds is reported per cell, and
//! ours / raw.
//!
//!     bash postgres/bench.sh         # starts a throwaway cluster, three runs
//!     cargo run --release -p ratomic-postgres --example pg_bench_vs_raw -- CONNINFO [rounds] [seconds]

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratomic::{Quota, Rule};
use ratomic_postgres::{Limits, Options, PostgresLimiter};
use tokio_postgres::{Client, NoTls, Statement};

/// The GCRA a user writes: one row per key, TAT in µs, T = 10 µs, τ = 1 s.
const RAW_TABLE: &str =
    "DROP TABLE IF EXISTS raw_gcra; CREATE TABLE raw_gcra (key text PRIMARY KEY, tat bigint NOT NULL);
";
const RAW: &str = "WITH t AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now)
    INSERT INTO raw_gcra AS r (key, tat) SELECT $1, t.now + $2 FROM t
    ON CONFLICT (key) DO UPDATE SET tat = greatest(r.tat, excluded.tat - $2) + $2
        WHERE greatest(r.tat, excluded.tat - $2) + $2 - (excluded.tat - $2) <= $3
    RETURNING tat";
const INTERVAL_US: i64 = 10;
const TAU_US: i64 = 1_000_000;
const CONNECTIONS: usize = 4;

/// The same connections and the same choice of one as ratomic-postgres's
/// pool (the least busy), so that the SQL is what differs.
struct Raw {
    conns: Vec<(Client, Statement, AtomicUsize)>,
}

impl Raw {
    async fn connect(conninfo: &str) -> Raw {
        let mut conns = Vec::new();
        for i in 0..CONNECTIONS {
            let (client, conn) = tokio_postgres::connect(conninfo, NoTls).await.expect("connect");
            tokio::spawn(async move {
                let _ = conn.await;
            });
            if i == 0 {
                client.batch_execute(RAW_TABLE).await.expect("raw table");
            }
            let stmt = client.prepare(RAW).await.expect("prepare");
            conns.push((client, stmt, AtomicUsize::new(0)));
        }
        Raw { conns }
    }

    async fn allow(&self, key: &str) -> bool {
        let (c, s, busy) = self.conns.iter().min_by_key(|c| c.2.load(Ordering::Relaxed)).expect("a connection");
        busy.fetch_add(1, Ordering::Relaxed);
        let allowed = !c.query(s, &[&key, &INTERVAL_US, &TAU_US]).await.expect("raw GCRA").is_empty();
        busy.fetch_sub(1, Ordering::Relaxed);
        allowed
    }
}

struct Peers {
    ours: PostgresLimiter,
    raw: Raw,
}

async fn measure(p: &Arc<Peers>, ours: bool, in_flight: usize, keys: u64, secs: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for task in 0..in_flight {
        let (p, stop, done) = (p.clone(), stop.clone(), done.clone());
        handles.push(tokio::spawn(async move {
            let mut i = task as u64 * 7919;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let key = format!("k{}", i % keys);
                if ours {
                    let _ = p.ours.allow(&key).await.expect("ratomic-postgres");
                } else {
                    let _ = p.raw.allow(&key).await;
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let n = done.load(Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    for h in handles {
        h.await.expect("task");
    }
    n as f64 / elapsed
}

/// One call in flight: the contenders take turns call by call (which goes
/// first alternating), so both see the same seconds of a shared machine;
/// each one's rate is one over its mean latency.
async fn alternate(p: &Arc<Peers>, keys: u64, secs: f64) -> (f64, f64) {
    let (mut ours, mut raw) = (Duration::ZERO, Duration::ZERO);
    let (mut n, mut i) = (0u32, 0u64);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < secs {
        i += 1;
        let key = format!("k{}", i % keys);
        for first in [i % 2 == 0, i % 2 == 1] {
            let t = Instant::now();
            if first {
                let _ = p.ours.allow(&key).await.expect("ratomic-postgres");
                ours += t.elapsed();
            } else {
                let _ = p.raw.allow(&key).await;
                raw += t.elapsed();
            }
        }
        n += 1;
    }
    (f64::from(n) / ours.as_secs_f64(), f64::from(n) / raw.as_secs_f64())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let conninfo = args.get(1).expect("usage: pg_bench_vs_raw CONNINFO [rounds] [seconds]").clone();
    let rounds: usize = args.get(2).map_or(3, |s| s.parse().expect("rounds"));
    let secs: f64 = args.get(3).map_or(1.0, |s| s.parse().expect("seconds"));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let rule = Rule::token_bucket(Quota::new(100_000, 100_000.0).expect("quota"));
        let run = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let limits = Limits::single(rule).and_then(|l| l.with_prefix(format!("bench:{run}"))).expect("limits");
        let options =
            Options { timeout: Duration::from_secs(5), deny_cache: 0, connections: CONNECTIONS, ..Options::default() };
        let ours = PostgresLimiter::connect(&conninfo, limits, options).await.expect("connect");
        let p = Arc::new(Peers { ours, raw: Raw::connect(&conninfo).await });
        println!("{:<22} {:>14} {:>14} {:>8}", "cell", "ratomic/s", "raw SQL/s", "ratio");
        for (in_flight, keys, name) in [
            (1, 1, "1 in flight, hot key"),
            (1, 10_000, "1 in flight, 10k keys"),
            (64, 1, "64 in flight, hot key"),
            (64, 10_000, "64 in flight, 10k keys"),
        ] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for round in 0..rounds {
                if in_flight == 1 {
                    let (x, y) = alternate(&p, keys, 2.0 * secs).await;
                    a.push(x);
                    b.push(y);
                } else if round % 2 == 0 {
                    a.push(measure(&p, true, in_flight, keys, secs).await);
                    b.push(measure(&p, false, in_flight, keys, secs).await);
                } else {
                    b.push(measure(&p, false, in_flight, keys, secs).await);
                    a.push(measure(&p, true, in_flight, keys, secs).await);
                }
            }
            let (a, b) = (median(a), median(b));
            println!("{name:<22} {a:>14.0} {b:>14.0} {:>7.2}x", a / b);
        }
        let _ = p.ours.gc_at(ratomic::MAX_TIME).await;
    });
}
