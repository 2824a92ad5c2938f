//! What `max_keys` eviction does to honest users, under each [`Eviction`]
//! policy, on a simulated clock (minutes of traffic in seconds, repeatable).
//!
//! Scenarios (the adversarial review's, issue 11):
//!
//! - **Attack**: `100/h` per key; an attacker sends 3,000 requests a second,
//!   each from a new key (rotating IPs); 500 honest users each send one
//!   request a minute. `max_keys` 1,000 (10 minutes) and 10,000 (30 minutes).
//! - **Attack on heavy users**: the same attack, and 200 users each sending
//!   18 times their rate (most of their requests should be denied once
//!   their burst is spent), `max_keys` 1,000: what eviction over-grants to
//!   keys that are being limited.
//! - **Frozen clock**: 10,000,000 distinct keys used once each at one
//!   instant, `max_keys` 100,000.
//! - **Honest churn**: 20,000 users at half their rate (one request every
//!   72 s against `100/h`), `max_keys` 10,000: more users are active than the
//!   store holds.
//!
//! For each, the share of honest requests denied, and the requests a bounded
//! store allowed that an unbounded one (which remembers every key) denied:
//! over-grants. Every request is also replayed on the unbounded store, so
//! the columns compare the same traffic.
//!
//! `cargo run --release -p ratomic-benches --bin eviction`

use std::time::{Duration, Instant};

use ratomic::{Eviction, ManualClock, Quota, TokenBucket};

type Limiter = TokenBucket<[u8], ManualClock>;

fn limiter(clock: &ManualClock, max_keys: usize, eviction: Eviction) -> Limiter {
    TokenBucket::builder(Quota::per_hour(100).unwrap())
        .clock(clock.clone())
        .max_keys(max_keys)
        .eviction(eviction)
        .build()
        .unwrap()
}

#[derive(Default)]
struct Tally {
    honest: u64,
    honest_denied: u64,
    /// Honest requests denied in the last minute of the run.
    last_minute: (u64, u64),
    over_granted: u64,
    /// Requests the bounded store denied and the unbounded one allowed.
    under_granted: u64,
}

impl Tally {
    fn record(&mut self, honest: bool, bounded: bool, unbounded: bool, last_minute: bool) {
        if honest {
            self.honest += 1;
            self.honest_denied += u64::from(!bounded);
            if last_minute {
                self.last_minute.0 += 1;
                self.last_minute.1 += u64::from(!bounded);
            }
        }
        self.over_granted += u64::from(bounded && !unbounded);
        self.under_granted += u64::from(!bounded && unbounded);
    }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "—".into()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

/// The attack: `minutes` of 3,000 single-use attacker keys a second and 500
/// honest users calling once a minute each.
fn attack(max_keys: usize, eviction: Eviction, minutes: u64) -> Tally {
    let clock = ManualClock::new();
    let (bounded, unbounded) = (limiter(&clock, max_keys, eviction), limiter(&clock, 1 << 30, eviction));
    let mut t = Tally::default();
    let mut bot = 0u64;
    for second in 0..minutes * 60 {
        for _ in 0..3_000 {
            bot += 1;
            let key = format!("bot:{bot}");
            let (b, u) = (bounded.allow(&key).unwrap().allowed, unbounded.allow(&key).unwrap().allowed);
            t.record(false, b, u, false);
        }
        for user in (0..500u64).filter(|u| u % 60 == second % 60) {
            let key = format!("user:{user}");
            let (b, u) = (bounded.allow(&key).unwrap().allowed, unbounded.allow(&key).unwrap().allowed);
            t.record(true, b, u, second >= (minutes - 1) * 60);
        }
        clock.advance(Duration::from_secs(1));
        if second % 60 == 59 {
            unbounded.gc().unwrap(); // keeps the reference's memory to the live keys
        }
    }
    t
}

/// The attack, plus 200 heavy users each sending 18 times their rate (one
/// request every 2 s against 100/h), so that after their burst most of
/// their requests should be denied: what eviction over-grants them.
fn attack_on_heavy_users(max_keys: usize, eviction: Eviction, minutes: u64) -> Tally {
    let clock = ManualClock::new();
    let (bounded, unbounded) = (limiter(&clock, max_keys, eviction), limiter(&clock, 1 << 30, eviction));
    let mut t = Tally::default();
    let mut bot = 0u64;
    for second in 0..minutes * 60 {
        for _ in 0..3_000 {
            bot += 1;
            let key = format!("bot:{bot}");
            let (b, u) = (bounded.allow(&key).unwrap().allowed, unbounded.allow(&key).unwrap().allowed);
            t.record(false, b, u, false);
        }
        for user in (0..200u64).filter(|u| u % 2 == second % 2) {
            let key = format!("heavy:{user}");
            let (b, u) = (bounded.allow(&key).unwrap().allowed, unbounded.allow(&key).unwrap().allowed);
            t.record(true, b, u, second >= (minutes - 1) * 60);
        }
        clock.advance(Duration::from_secs(1));
        if second % 60 == 59 {
            unbounded.gc().unwrap();
        }
    }
    t
}

/// 10M distinct keys, once each, at one instant; every one is "honest".
fn frozen(eviction: Eviction) -> Tally {
    let clock = ManualClock::new();
    let bounded = limiter(&clock, 100_000, eviction);
    let mut t = Tally::default();
    for i in 0..10_000_000u64 {
        // Each key is new: an unbounded store allows every one.
        let b = bounded.allow(&i.to_le_bytes()).unwrap().allowed;
        t.record(true, b, true, false);
    }
    t
}

/// 20,000 users, each calling every 72 s (half of 100/h), phases spread.
fn honest_churn(eviction: Eviction, minutes: u64) -> Tally {
    let clock = ManualClock::new();
    let (bounded, unbounded) = (limiter(&clock, 10_000, eviction), limiter(&clock, 1 << 30, eviction));
    let mut t = Tally::default();
    for second in 0..minutes * 60 {
        for user in (0..20_000u64).filter(|u| u % 72 == second % 72) {
            let key = format!("user:{user}");
            let (b, u) = (bounded.allow(&key).unwrap().allowed, unbounded.allow(&key).unwrap().allowed);
            t.record(true, b, u, second >= (minutes - 1) * 60);
        }
        clock.advance(Duration::from_secs(1));
    }
    t
}

fn main() {
    let started = Instant::now();
    println!("eviction under churn: honest requests denied, and over-grants against an unbounded store");
    println!("(100/h per key; simulated clock)\n");
    println!("| scenario | policy | honest denied | honest denied, last minute | over-granted | under-granted |");
    println!("|---|---|---|---|---|---|");
    let row = |name: &str, policy: Eviction, t: &Tally| {
        println!(
            "| {name} | {policy:?} | {} of {} ({}) | {} | {} | {} |",
            t.honest_denied,
            t.honest,
            pct(t.honest_denied, t.honest),
            pct(t.last_minute.1, t.last_minute.0),
            t.over_granted,
            t.under_granted,
        );
    };
    for policy in [Eviction::Fair, Eviction::Strict] {
        row("attack, max_keys 1,000, 10 min", policy, &attack(1_000, policy, 10));
    }
    for policy in [Eviction::Fair, Eviction::Strict] {
        row("attack, max_keys 10,000, 30 min", policy, &attack(10_000, policy, 30));
    }
    for policy in [Eviction::Fair, Eviction::Strict] {
        row(
            "attack + 200 users at 18× their rate, max_keys 1,000, 10 min",
            policy,
            &attack_on_heavy_users(1_000, policy, 10),
        );
    }
    for policy in [Eviction::Fair, Eviction::Strict] {
        row("10M single-use keys, frozen clock, max_keys 100,000", policy, &frozen(policy));
    }
    for policy in [Eviction::Fair, Eviction::Strict] {
        row("honest churn: 20,000 users at half rate, max_keys 10,000, 30 min", policy, &honest_churn(policy, 30));
    }
    println!("\n({:.1} s of real time)", started.elapsed().as_secs_f64());
}
