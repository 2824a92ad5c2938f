//! What the local deny cache saves: `EVALSHA` round trips (counted by the
//! server, `INFO commandstats`) for 1000 calls of which 90% are over the
//! limit, with and without the cache.
//!
//!     cargo run --release -p ratomic-redis --example deny_cache -- redis://127.0.0.1:6379/

use std::time::Duration;

use ratomic::{Quota, Rule};
use ratomic_redis::{Limits, Options, RedisLimiter};

async fn evalsha_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await.unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .map(|l| l.split(['=', ',']).nth(1).unwrap().parse().unwrap())
        .unwrap_or(0)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let url = std::env::args().nth(1).expect("usage: deny_cache URL");
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    println!("| deny cache | calls | allowed | EVALSHA round trips |");
    println!("|---|---:|---:|---:|");
    for (label, cache) in [("off", 0), ("on (default)", 10_000)] {
        // 10 keys, 100 calls each, 10 allowed per key per hour: 90% over the limit.
        let rule = Rule::token_bucket(Quota::new(10, 10.0 / 3600.0).unwrap());
        let limits =
            Limits::single(rule).unwrap().with_prefix(format!("deny-cache:{}:{cache}:", std::process::id())).unwrap();
        let options = Options { timeout: Duration::from_secs(5), deny_cache: cache, ..Options::default() };
        let limiter = RedisLimiter::new(admin.clone(), limits, options);
        let _ = limiter.peek("warm-up", 0).await.unwrap(); // loads the script
        let before = evalsha_calls(&mut admin).await;
        let mut allowed = 0;
        for _ in 0..100 {
            for key in 0..10 {
                allowed += usize::from(limiter.allow(format!("k{key}")).await.unwrap().allowed());
            }
        }
        let trips = evalsha_calls(&mut admin).await - before;
        println!("| {label} | 1000 | {allowed} | {trips} |");
    }
}
