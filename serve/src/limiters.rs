//! The limiters behind the rules: one ratomic keyed limiter per distinct
//! rate (`requests_per_unit` per `unit`), shared by every rule with that
//! rate; a descriptor is one key of its rule's limiter.
//!
//! A reload keeps the limiter of every rate the new configuration still
//! has, so unchanged limits keep their state; a rate that disappears drops
//! its limiter with the old configuration.

use std::collections::HashMap;
use std::sync::Arc;

use ratomic::{Decision, FixedWindow, Options, Rate, SlidingWindow, TokenBucket};

use crate::config::Unit;

/// Which of ratomic's algorithms the rules use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Algorithm {
    /// Windows of one unit (what envoyproxy/ratelimit counts): at most
    /// `requests_per_unit` per window, up to twice that around a boundary.
    FixedWindow,
    /// The sliding-window counter: no double burst at a boundary.
    SlidingWindow,
    /// A token bucket of `requests_per_unit` refilled over one unit.
    TokenBucket,
}

/// One rate's limiter.
#[derive(Debug)]
pub enum RateLimiter {
    /// See [`Algorithm::FixedWindow`].
    Fixed(FixedWindow),
    /// See [`Algorithm::SlidingWindow`].
    Sliding(SlidingWindow),
    /// See [`Algorithm::TokenBucket`].
    Bucket(TokenBucket),
}

impl RateLimiter {
    /// Builds the limiter for `requests_per_unit` per `unit` (at least 1).
    pub fn new(algorithm: Algorithm, requests_per_unit: u32, unit: Unit, options: Options) -> ratomic::Result<Self> {
        Self::from_rate(algorithm, Rate::new(u64::from(requests_per_unit), unit.duration())?, options)
    }

    /// Builds the limiter for `rate`.
    pub fn from_rate(algorithm: Algorithm, rate: Rate, options: Options) -> ratomic::Result<Self> {
        Ok(match algorithm {
            Algorithm::FixedWindow => RateLimiter::Fixed(FixedWindow::builder(rate).options(options).build()?),
            Algorithm::SlidingWindow => RateLimiter::Sliding(SlidingWindow::builder(rate).options(options).build()?),
            Algorithm::TokenBucket => {
                RateLimiter::Bucket(TokenBucket::builder(ratomic::Quota::from_rate(rate)?).options(options).build()?)
            }
        })
    }

    /// Takes `cost` from `key`'s budget; a denial is a decision.
    pub fn allow(&self, key: &[u8], cost: u64) -> ratomic::Result<Decision> {
        match self {
            RateLimiter::Fixed(l) => l.allow_n(key, cost),
            RateLimiter::Sliding(l) => l.allow_n(key, cost),
            RateLimiter::Bucket(l) => l.allow_n(key, cost),
        }
    }

    /// What `allow` would answer, changing nothing.
    pub fn peek(&self, key: &[u8], cost: u64) -> ratomic::Result<Decision> {
        match self {
            RateLimiter::Fixed(l) => l.peek_n(key, cost),
            RateLimiter::Sliding(l) => l.peek_n(key, cost),
            RateLimiter::Bucket(l) => l.peek_n(key, cost),
        }
    }

    /// Gives `tokens` back to `key`, never above full.
    pub fn refund(&self, key: &[u8], tokens: u64) -> ratomic::Result<()> {
        match self {
            RateLimiter::Fixed(l) => l.refund(key, tokens),
            RateLimiter::Sliding(l) => l.refund(key, tokens),
            RateLimiter::Bucket(l) => l.refund(key, tokens),
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        match self {
            RateLimiter::Fixed(l) => l.len(),
            RateLimiter::Sliding(l) => l.len(),
            RateLimiter::Bucket(l) => l.len(),
        }
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The limiters of one configuration, by rate.
pub type Limiters = HashMap<(u32, Unit), Arc<RateLimiter>>;

/// Where the limiters keep their keys: in this process, or in one shared
/// file per rate in a directory, so that every `ratomic serve` of the host
/// given the same directory shares the state (core's shared-file store).
#[derive(Clone, Debug, Default)]
pub struct Storage {
    /// The directory of the shared files, or `None` for memory.
    pub state_dir: Option<std::path::PathBuf>,
}

impl Storage {
    /// `options` for the limiter named `name` (a file name's stem).
    pub fn options(&self, options: &Options, name: &str) -> Options {
        match &self.state_dir {
            Some(dir) => options.clone().shared_file(dir.join(format!("{name}.ratomic"))),
            None => options.clone(),
        }
    }
}

/// The stem of a rate's shared file: the algorithm and the rate.
pub fn file_stem(algorithm: Algorithm, requests_per_unit: u64, period: std::time::Duration) -> String {
    let algo = match algorithm {
        Algorithm::FixedWindow => "fixed-window",
        Algorithm::SlidingWindow => "sliding-window",
        Algorithm::TokenBucket => "token-bucket",
    };
    format!("{algo}-{requests_per_unit}-per-{}ms", period.as_millis())
}

/// Builds the limiters for `rates`, taking each from `old` when it is
/// there (a reload), so that its keys keep their state. A rate of 0
/// refuses every call and needs no limiter.
pub fn build(
    rates: &[(u32, Unit)],
    old: Option<&Limiters>,
    algorithm: Algorithm,
    options: &Options,
    storage: &Storage,
) -> ratomic::Result<Limiters> {
    let mut out = Limiters::new();
    for &(rpu, unit) in rates {
        if rpu == 0 {
            continue;
        }
        let limiter = match old.and_then(|o| o.get(&(rpu, unit))) {
            Some(l) => l.clone(),
            None => {
                let stem = format!("rls-{}", file_stem(algorithm, u64::from(rpu), unit.duration()));
                Arc::new(RateLimiter::new(algorithm, rpu, unit, storage.options(options, &stem))?)
            }
        };
        out.insert((rpu, unit), limiter);
    }
    Ok(out)
}
