//! A process of the server tests' cross-process race (built only with the
//! `server-tests` feature): `race_worker URL PREFIX CALLS` asks a bucket of
//! 50 (refilled hourly) on key "shared" CALLS times and prints how many
//! calls it was granted.

use std::time::Duration;

use ratomic::{Quota, Rule};
use ratomic_redis::{BlockingRedisLimiter, Limits, Options};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, prefix, calls] = &args[..] else {
        eprintln!("usage: race_worker URL PREFIX CALLS");
        std::process::exit(2);
    };
    let rule = Rule::token_bucket(Quota::new(50, 1.0 / 3600.0).expect("a valid quota"));
    let limits = Limits::single(rule).and_then(|l| l.with_prefix(prefix.as_str())).expect("valid limits");
    // Generous: this host's VM has been seen to stop for up to 9 s, and a
    // call that overlaps such a pause is no failure of the limiter.
    let options = Options { timeout: Duration::from_secs(60), ..Options::default() };
    let limiter = BlockingRedisLimiter::connect(url, limits, options).expect("connected");
    let calls: u64 = calls.parse().expect("a count");
    let granted = (0..calls).filter(|_| limiter.allow_n("shared", 1).expect("a decision").allowed()).count();
    println!("{granted}");
}
