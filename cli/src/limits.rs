//! The limits a run enforces: `--rate`, `--algorithm` and `--burst`, turned
//! into the engine's [`Rule`]s.

use std::fmt;
use std::str::FromStr;

use ratomic::{Quota, Rate, Rule};

use crate::format;

/// One of the engine's algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    /// GCRA token bucket.
    TokenBucket,
    /// Fixed window counter.
    FixedWindow,
    /// Sliding window counter.
    SlidingWindow,
}

impl Algo {
    /// Every algorithm, in the order reports show them.
    pub const ALL: [Algo; 3] = [Algo::TokenBucket, Algo::FixedWindow, Algo::SlidingWindow];

    /// The name used on the command line: `token-bucket`.
    pub fn name(self) -> &'static str {
        match self {
            Algo::TokenBucket => "token-bucket",
            Algo::FixedWindow => "fixed-window",
            Algo::SlidingWindow => "sliding-window",
        }
    }

    fn from_prefix(s: &str) -> Option<Algo> {
        match s {
            "token-bucket" | "tb" => Some(Algo::TokenBucket),
            "fixed-window" | "fw" => Some(Algo::FixedWindow),
            "sliding-window" | "sw" => Some(Algo::SlidingWindow),
            _ => None,
        }
    }

    fn short(self) -> &'static str {
        match self {
            Algo::TokenBucket => "tb",
            Algo::FixedWindow => "fw",
            Algo::SlidingWindow => "sw",
        }
    }
}

impl fmt::Display for Algo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `--algorithm`: one algorithm, or all three side by side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AlgorithmArg {
    /// GCRA token bucket: bursts up to --burst, then a steady refill.
    TokenBucket,
    /// Fixed window: at most N per window, windows aligned to the clock.
    FixedWindow,
    /// Sliding window counter: the previous window's count, weighted, plus the current one.
    SlidingWindow,
    /// All three on the same traffic, side by side.
    All,
}

impl AlgorithmArg {
    /// The algorithms a run compares.
    pub fn algos(self) -> Vec<Algo> {
        match self {
            AlgorithmArg::TokenBucket => vec![Algo::TokenBucket],
            AlgorithmArg::FixedWindow => vec![Algo::FixedWindow],
            AlgorithmArg::SlidingWindow => vec![Algo::SlidingWindow],
            AlgorithmArg::All => Algo::ALL.to_vec(),
        }
    }
}

/// One `--rate` flag: a rate string, optionally prefixed with the algorithm
/// that enforces it (`fixed-window:1000/day`, or `fw:`, `sw:`, `tb:`),
/// which then overrides `--algorithm` for this limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitSpec {
    /// The algorithm named in the flag, if any.
    pub algorithm: Option<Algo>,
    /// The rate.
    pub rate: Rate,
}

impl FromStr for LimitSpec {
    type Err = String;

    /// Parses `[algorithm:]<count>/<period>`; the error is the engine's own
    /// message (it quotes the input).
    fn from_str(s: &str) -> Result<Self, String> {
        let (algorithm, rate) = match s.split_once(':') {
            Some((prefix, rest)) => match Algo::from_prefix(prefix.trim()) {
                Some(a) => (Some(a), rest),
                None => {
                    return Err(format!(
                        "unknown algorithm {prefix:?} in {s:?} (use token-bucket:, fixed-window: or sliding-window:, or tb:, fw:, sw:)"
                    ))
                }
            },
            None => (None, s),
        };
        let rate = Rate::parse(rate).map_err(|e| e.to_string())?;
        Ok(LimitSpec { algorithm, rate })
    }
}

impl LimitSpec {
    /// The limit's name in reports and in the engine's `Limiter`: the rate
    /// in canonical form, with the algorithm prefix if one was given.
    pub fn name(&self) -> String {
        match self.algorithm {
            Some(a) => format!("{}:{}", a.short(), self.rate),
            None => self.rate.to_string(),
        }
    }
}

/// A limit as one run enforces it.
#[derive(Clone, Debug, PartialEq)]
pub struct Limit {
    /// Its name (see [`LimitSpec::name`]).
    pub name: String,
    /// The algorithm enforcing it.
    pub algo: Algo,
    /// The rate.
    pub rate: Rate,
    /// The token bucket's capacity (`None` for windows).
    pub burst: Option<u64>,
    /// The engine rule.
    pub rule: Rule,
}

impl Limit {
    /// The most one key can hold or spend at once: the burst, or the window's count.
    pub fn capacity(&self) -> u64 {
        self.burst.unwrap_or(self.rate.count())
    }

    /// `T`: the time one unit of the rate takes (`period / count`).
    pub fn emission_interval_ns(&self) -> u64 {
        (self.rate.period_nanos() / self.rate.count()).max(1)
    }

    /// One line saying what the limit does.
    pub fn describe(&self) -> String {
        let window = format::nanos(self.rate.period_nanos());
        match self.algo {
            Algo::TokenBucket => format!(
                "token bucket {}: burst {}, one token every {}",
                self.rate,
                self.capacity(),
                format::nanos(self.emission_interval_ns())
            ),
            Algo::FixedWindow => {
                format!(
                    "fixed window {}: {} per {window} window, windows aligned to the clock",
                    self.rate,
                    self.rate.count()
                )
            }
            Algo::SlidingWindow => format!(
                "sliding window {}: {} per sliding {window} (the previous window's count weighted in)",
                self.rate,
                self.rate.count()
            ),
        }
    }
}

/// The limits of one run for `algo`: each spec with its own algorithm if it
/// names one, else `algo`. `bursts` is empty, one value (for every token
/// bucket) or one value per `--rate`, in order (applied where the limit is a
/// token bucket).
pub fn plan(specs: &[LimitSpec], algo: Algo, bursts: &[u64]) -> Result<Vec<Limit>, String> {
    if specs.is_empty() {
        return Err("at least one --rate is required".into());
    }
    if bursts.len() > 1 && bursts.len() != specs.len() {
        return Err(format!(
            "give --burst once (for every token-bucket limit) or once per --rate, in order; got {} --burst for {} --rate",
            bursts.len(),
            specs.len()
        ));
    }
    specs
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let algo = spec.algorithm.unwrap_or(algo);
            let burst = match bursts {
                [] => None,
                [b] => Some(*b),
                _ => Some(bursts[i]),
            };
            let name = spec.name();
            let (rule, burst) = match algo {
                Algo::TokenBucket => {
                    let mut quota = Quota::from_rate(spec.rate).map_err(|e| format!("--rate {name}: {e}"))?;
                    if let Some(b) = burst {
                        quota = quota.with_burst(b).map_err(|e| format!("--burst {b} for {name}: {e}"))?;
                    }
                    (Rule::token_bucket(quota), Some(quota.capacity()))
                }
                Algo::FixedWindow => (Rule::fixed_window(spec.rate).map_err(|e| format!("--rate {name}: {e}"))?, None),
                Algo::SlidingWindow => {
                    (Rule::sliding_window(spec.rate).map_err(|e| format!("--rate {name}: {e}"))?, None)
                }
            };
            Ok(Limit { name, algo, rate: spec.rate, burst, rule })
        })
        .collect()
}

/// Checks that `--burst` applies to some token bucket in some run: a burst
/// given only to windows would be silently ignored.
pub fn check_bursts(specs: &[LimitSpec], algos: &[Algo], bursts: &[u64]) -> Result<(), String> {
    if bursts.is_empty() {
        return Ok(());
    }
    let applies = |spec: &LimitSpec| match spec.algorithm {
        Some(a) => a == Algo::TokenBucket,
        None => algos.contains(&Algo::TokenBucket),
    };
    if bursts.len() == specs.len() && bursts.len() > 1 {
        if let Some(spec) = specs.iter().find(|s| !applies(s)) {
            return Err(format!("--burst applies only to token-bucket limits, and {} is not one", spec.name()));
        }
    } else if !specs.iter().any(applies) {
        return Err(format!(
            "--burst applies only to token-bucket limits, and --algorithm {} has none",
            algos.iter().map(|a| a.name()).collect::<Vec<_>>().join(",")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> LimitSpec {
        s.parse().unwrap()
    }

    #[test]
    fn specs_parse_with_and_without_an_algorithm() {
        assert_eq!(spec("10/s"), LimitSpec { algorithm: None, rate: Rate::parse("10/s").unwrap() });
        assert_eq!(spec("fw:1000/day").algorithm, Some(Algo::FixedWindow));
        assert_eq!(spec("sliding-window:5/m").name(), "sw:5/m");
        assert_eq!(spec("1000/h").name(), "1000/h");
    }

    #[test]
    fn bad_specs_carry_the_engines_message() {
        let e = "10/x".parse::<LimitSpec>().unwrap_err();
        assert!(e.starts_with("invalid rate \"10/x\""), "{e}");
        let e = "leaky:10/s".parse::<LimitSpec>().unwrap_err();
        assert!(e.contains("unknown algorithm \"leaky\""), "{e}");
    }

    #[test]
    fn plan_applies_bursts_to_token_buckets_only() {
        let specs = [spec("10/s"), spec("fw:100/m")];
        let limits = plan(&specs, Algo::TokenBucket, &[20]).unwrap();
        assert_eq!(limits[0].burst, Some(20));
        assert_eq!(limits[0].capacity(), 20);
        assert_eq!((limits[1].algo, limits[1].burst, limits[1].capacity()), (Algo::FixedWindow, None, 100));
        assert_eq!(limits[0].emission_interval_ns(), 100_000_000);
        let limits = plan(&specs, Algo::SlidingWindow, &[]).unwrap();
        assert_eq!(limits[0].algo, Algo::SlidingWindow);
    }

    #[test]
    fn plan_rejects_mismatched_or_invalid_bursts() {
        let specs = [spec("10/s"), spec("100/m")];
        assert!(plan(&specs, Algo::TokenBucket, &[1, 2, 3]).unwrap_err().contains("once per --rate"));
        let e = plan(&specs, Algo::TokenBucket, &[0]).unwrap_err();
        assert!(e.contains("invalid capacity: 0"), "{e}");
        assert!(plan(&[], Algo::TokenBucket, &[]).is_err());
    }

    #[test]
    fn bursts_must_reach_a_token_bucket() {
        let specs = [spec("10/s")];
        assert!(check_bursts(&specs, &[Algo::FixedWindow], &[5]).unwrap_err().contains("no"));
        assert!(check_bursts(&specs, &Algo::ALL, &[5]).is_ok());
        let mixed = [spec("10/s"), spec("fw:100/m")];
        assert!(check_bursts(&mixed, &[Algo::TokenBucket], &[5, 6]).unwrap_err().contains("fw:100/m"));
        assert!(check_bursts(&mixed, &[Algo::TokenBucket], &[5]).is_ok());
    }
}
