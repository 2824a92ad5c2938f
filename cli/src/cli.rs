//! The command line: flags, help text and dispatch.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand};

use crate::bench::{self, BenchConfig};
use crate::limits::{AlgorithmArg, LimitSpec};
use crate::simulate::{self, SimConfig};
use crate::workload::Arrival;

const RATES: &str = "Rates are \"<count>/<period>\": 10/s, 100/min, 5000/h, 1000/15m, 3/250ms, 86400/d \
(units ms, s/sec/second, m/min/minute, h/hr/hour, d/day, month = 30 days, year = 360 days; plurals \
accepted), or as Python's limits writes them: \"5 per minute\". Prefix one with an algorithm to mix them: \
fixed-window:1000/day (or tb:, fw:, sw:).";

const TOP_EXAMPLES: &str = "\
Examples:
  ratomic simulate --rate 10/s --rps 50 --seconds 10
  ratomic simulate --rate 10/s --algorithm all
  ratomic bench --threads 2 --keys 10000 --seconds 3";

const SIMULATE_EXAMPLES: &str = "\
Examples:
  # 50 requests a second against 10/s: the first second passes the burst, then 10/s
  ratomic simulate --rate 10/s --rps 50 --seconds 10

  # Token bucket, fixed window and sliding window on the same traffic: see the
  # fixed window grant twice its limit around a window boundary
  ratomic simulate --rate 10/s --algorithm all

  # Several limits on one key, all or nothing; the output says which one denied
  ratomic simulate --rate 10/s --rate 100/min --rps 20 --seconds 30

  # A token bucket and a daily fixed window together
  ratomic simulate --rate 5/s --rate fixed-window:1000/day --burst 20 --arrival poisson --seed 7

  # 100 keys, each limited on its own, in real time
  ratomic simulate --rate 2/s --keys 100 --rps 400 --seconds 3 --realtime";

const BENCH_EXAMPLES: &str = "\
Examples:
  ratomic bench
  ratomic bench --threads 2 --keys 100000 --seconds 5
  ratomic bench --algorithm all --rate 1000/s
  ratomic bench --rate 10/s --rate 1000/h     # a two-limit Limiter";

/// ratomic: a lock-free rate limiter. Simulate traffic through it, or measure it.
#[derive(Debug, Parser)]
#[command(name = "ratomic", version, after_help = TOP_EXAMPLES, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Push a workload through the engine and show, second by second, what it allowed and denied.
    ///
    /// By default time is simulated on a manual clock: ten seconds of traffic take milliseconds and the
    /// result is the same on every run (Poisson traffic depends only on --seed). --realtime uses the real
    /// monotonic clock and paces the requests in real time.
    #[command(after_help = SIMULATE_EXAMPLES)]
    Simulate(SimulateArgs),
    /// Measure the engine's throughput in this process: threads calling allow() as fast as they can.
    #[command(after_help = BENCH_EXAMPLES)]
    Bench(BenchArgs),
    /// Serve the engine as Envoy's rate limit service (gRPC RLS v3), configured in envoyproxy/ratelimit's YAML.
    #[cfg(feature = "serve")]
    Serve(ratomic_serve::ServeArgs),
}

/// Flags of `ratomic simulate`.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Limits")]
pub struct SimulateArgs {
    /// A limit per key, e.g. 10/s. Repeat for several limits on one key, all or nothing.
    #[arg(long = "rate", value_name = "RATE", default_value = "10/s", long_help = format!("A limit per key, e.g. 10/s. Repeat it for several limits on the same key, decided all or nothing (a request passes only if every limit allows it; the per-second table says which limit denied). {RATES}"))]
    pub rates: Vec<LimitSpec>,

    /// Which algorithm enforces each rate; `all` runs the three side by side on the same traffic.
    #[arg(long, value_enum, default_value_t = AlgorithmArg::TokenBucket)]
    pub algorithm: AlgorithmArg,

    /// Token-bucket capacity (default: the rate's count). Once for every token bucket, or once per --rate.
    #[arg(long, value_name = "N")]
    pub burst: Vec<u64>,

    /// Mean requests per second offered, all keys together.
    #[arg(long, value_name = "N", default_value = "50", value_parser = positive_number, allow_negative_numbers = true, help_heading = "Traffic")]
    pub rps: f64,

    /// How long the traffic lasts, in seconds (fractions allowed).
    #[arg(long, value_name = "S", default_value = "10", value_parser = positive_number, allow_negative_numbers = true, help_heading = "Traffic")]
    pub seconds: f64,

    /// Number of distinct keys; requests are spread over them and each is limited on its own.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1_000_000), help_heading = "Traffic")]
    pub keys: u32,

    /// Tokens each request asks for.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..), help_heading = "Traffic")]
    pub cost: u64,

    /// How requests are spread in time [default: uniform; bursty with --algorithm all].
    #[arg(long, value_enum, help_heading = "Traffic")]
    pub arrival: Option<Arrival>,

    /// Seed for Poisson arrivals and random key choice.
    #[arg(long, value_name = "N", default_value_t = 42, help_heading = "Traffic")]
    pub seed: u64,

    /// Use the real clock and pace requests in real time (the run takes --seconds).
    #[arg(long, help_heading = "Traffic")]
    pub realtime: bool,

    /// Run the limiters on this Redis or Valkey server (e.g. redis://127.0.0.1:6379/) at the same simulated times: the same table as in memory.
    #[arg(
        long,
        value_name = "URL",
        long_help = "Run the limiters on this Redis or Valkey server (e.g. redis://127.0.0.1:6379/) instead of in memory, at the same simulated times, so the run is still instant and repeatable and prints the same table (exactly, for rates whose emission interval is whole microseconds; see ratomic-redis). Keys live under a prefix of their own and are deleted after the run."
    )]
    pub redis: Option<String>,

    /// Run the limiters on this PostgreSQL database (e.g. postgresql://app@127.0.0.1/app) at the same simulated times: the same table as in memory.
    #[arg(
        long,
        value_name = "URL",
        conflicts_with = "redis",
        long_help = "Run the limiters on this PostgreSQL database (a postgresql:// URL or key=value conninfo) instead of in memory, at the same simulated times, so the run is still instant and repeatable and prints the same table (exactly, for rates whose emission interval is whole microseconds; see ratomic-postgres). Creates ratomic's table and functions if they are missing; rows live under a prefix of their own and are deleted after the run."
    )]
    pub postgres: Option<String>,
}

/// Flags of `ratomic bench`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("backend").args(["redis", "postgres"])))]
pub struct BenchArgs {
    /// Worker threads [default: the number of CPUs].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,

    /// Distinct keys; each call picks one uniformly at random.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub keys: u64,

    /// How long to measure each algorithm, in seconds (fractions allowed).
    #[arg(long, value_name = "S", default_value = "3", value_parser = positive_number, allow_negative_numbers = true)]
    pub seconds: f64,

    /// Which algorithm to measure; `all` measures the three one after the other.
    #[arg(long, value_enum, default_value_t = AlgorithmArg::TokenBucket)]
    pub algorithm: AlgorithmArg,

    /// The limit per key. Repeat for a multi-limit Limiter.
    #[arg(long = "rate", value_name = "RATE", default_value = "1000/s", long_help = format!("The limit per key. Repeat it to measure a multi-limit Limiter (all or nothing). {RATES}"))]
    pub rates: Vec<LimitSpec>,

    /// Token-bucket capacity (default: the rate's count).
    #[arg(long, value_name = "N")]
    pub burst: Vec<u64>,

    /// Measure limiters on this Redis or Valkey server (e.g. redis://127.0.0.1:6379/): every call is a round trip.
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,

    /// Measure limiters on this PostgreSQL database (e.g. postgresql://app@127.0.0.1/app): every call is a round trip.
    #[arg(long, value_name = "URL", conflicts_with = "redis")]
    pub postgres: Option<String>,

    /// Requests per call: 1 is allow, more is allow_many (one pipeline per call on Redis).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub batch: usize,

    /// With --redis or --postgres: lease a hot key's tokens (off, auto, or the most tokens a lease takes).
    #[arg(long, value_name = "off|auto|N", default_value = "off", requires = "backend")]
    pub lease: ratomic::backend::Lease,
}

fn positive_number(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        Ok(_) => Err(format!("{s:?} must be a number greater than 0")),
        Err(_) => Err(format!("{s:?} is not a number")),
    }
}

/// Runs the command line `args` (including the program name); returns the exit code.
pub fn main_with(args: impl IntoIterator<Item = std::ffi::OsString>) -> ExitCode {
    let cli = Cli::parse_from(args);
    match cli.command {
        Command::Simulate(a) => {
            let config = SimConfig {
                specs: a.rates,
                algos: a.algorithm.algos(),
                bursts: a.burst,
                rps: a.rps,
                seconds: a.seconds,
                keys: a.keys,
                cost: a.cost,
                arrival: a.arrival,
                seed: a.seed,
                realtime: a.realtime,
                redis: a.redis,
                postgres: a.postgres,
            };
            match simulate::run(config) {
                Ok(report) => print(&report.render()),
                Err(msg) => usage_error("simulate", msg),
            }
        }
        Command::Bench(a) => {
            let threads =
                a.threads.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), usize::from);
            let config = BenchConfig {
                specs: a.rates,
                algos: a.algorithm.algos(),
                bursts: a.burst,
                threads,
                keys: a.keys,
                seconds: a.seconds,
                progress: std::io::stdout().is_terminal() && std::io::stderr().is_terminal(),
                redis: a.redis,
                postgres: a.postgres,
                batch: a.batch,
                lease: a.lease,
            };
            match bench::run(&config) {
                Ok(results) => print(&bench::render(&config, &results)),
                Err(msg) => usage_error("bench", msg),
            }
        }
        #[cfg(feature = "serve")]
        Command::Serve(a) => ratomic_serve::main(a),
    }
}

/// Prints a usage error the way clap prints its own, and exits with status 2.
fn usage_error(subcommand: &str, msg: String) -> ! {
    let mut cmd = Cli::command();
    cmd.build();
    match cmd.find_subcommand_mut(subcommand) {
        Some(sub) => sub.error(ErrorKind::ValueValidation, msg).exit(),
        None => cmd.error(ErrorKind::ValueValidation, msg).exit(),
    }
}

/// Writes the report; a closed pipe (`ratomic … | head`) is not an error.
fn print(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: writing the report: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn positive_numbers_only() {
        assert_eq!(positive_number("0.2"), Ok(0.2));
        assert!(positive_number("0").unwrap_err().contains("greater than 0"));
        assert!(positive_number("-1").is_err());
        assert!(positive_number("inf").is_err());
        assert!(positive_number("NaN").is_err());
        assert!(positive_number("ten").unwrap_err().contains("not a number"));
    }
}
