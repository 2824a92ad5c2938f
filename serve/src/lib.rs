//! `ratomic serve`: ratomic's limiters as a rate-limit service.
//!
//! - gRPC: Envoy's global rate limit service,
//!   `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` (Envoy's
//!   protos from the `envoy-types` crate), configured in envoyproxy/ratelimit's
//!   YAML format ([`config`]), decided by ratomic's keyed limiters
//!   ([`engine`]): one limiter per rate, one key per descriptor.
//! - The configuration is validated at start (errors name the file, the
//!   line and the field) and reloaded when a file changes or on SIGHUP; a
//!   rate the new configuration keeps keeps its limiter and so its state; a
//!   configuration that does not load is logged and the old one serves on.
//! - SIGTERM or SIGINT: no new connections; calls in flight are answered,
//!   then the process exits.
//! - Connections are bounded per listener, HTTP/1 heads must arrive within
//!   a timeout, gRPC calls per connection are capped ([`conn`]).
//!
//! The `ratomic` command runs it as `ratomic serve` (its default `serve`
//! feature).

#![warn(missing_docs)]

pub mod config;
pub mod conn;
pub mod engine;
pub mod goaway;
pub mod grpc;
pub mod http;
pub mod limiters;
pub mod metrics;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use ratomic::Options;

use crate::engine::{Bounds, Engine};
use crate::limiters::Algorithm;

const SERVE_EXAMPLES: &str = "\
Examples:
  ratomic serve --config ratelimit.yaml
  ratomic serve --config api.yaml --config edge.yaml --grpc-listen 127.0.0.1:8081
  kill -HUP <pid>     # reload the configuration now (it is also reloaded when a file changes)";

/// Flags of `ratomic serve`.
#[derive(Debug, clap::Args)]
#[command(after_help = SERVE_EXAMPLES)]
pub struct ServeArgs {
    /// A configuration file in envoyproxy/ratelimit's YAML format (one domain per file). Repeat for several.
    #[arg(long = "config", value_name = "FILE", required = true)]
    pub config: Vec<PathBuf>,

    /// Where the gRPC service (Envoy's RLS v3) listens. Port 0 picks a free port; the log says which.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8081")]
    pub grpc_listen: SocketAddr,

    /// Where the HTTP side listens: the JSON API (POST /v1/ratelimit), /metrics, /healthz and /readyz.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub http_listen: SocketAddr,

    /// The algorithm of every rule. fixed-window counts as envoyproxy/ratelimit does (windows of one unit).
    #[arg(long, value_enum, default_value_t = Algorithm::FixedWindow)]
    pub algorithm: Algorithm,

    /// Most descriptor keys held per rate (memory bound; the store's eviction policy applies beyond it).
    #[arg(long, value_name = "N", default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(1..=(1 << 32)))]
    pub max_keys: u64,

    /// Most descriptors in one request.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub max_descriptors: u64,

    /// Most bytes of one descriptor's domain, keys and values together.
    #[arg(long, value_name = "BYTES", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(16..=65536))]
    pub max_key_len: u64,

    /// Largest request message accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 64 * 1024, value_parser = clap::value_parser!(u64).range(1024..=(16 << 20)))]
    pub max_request_bytes: u64,

    /// Most connections each listener (gRPC, HTTP) holds open at once; one more is closed as soon as it is
    /// accepted, and counted (ratomic_serve_connections_refused_total).
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,

    /// Most gRPC calls at once on one HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    #[arg(long, value_name = "N", default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_streams: u32,

    /// How long an HTTP/1 request's head may take to arrive, in milliseconds; a kept-alive connection with no
    /// request for that long is closed too.
    #[arg(long, value_name = "MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout_ms: u64,

    /// Keep the limiters' state in shared files in DIR (one per rate), shared by every `ratomic serve` of this
    /// host given the same DIR; without it, state is in memory. Use a directory only the service's user can
    /// write (e.g. /run/ratomic); --max-keys sizes each file (2 x max_keys slots of 24 bytes, sparse).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// Keep the limiters' state in Redis or Valkey at URL (redis://host:port/db), shared by every ratomic serve
    /// using it. The server must answer at start.
    #[arg(long, value_name = "URL", conflicts_with = "state_dir")]
    pub redis: Option<String>,

    /// Prefix of every Redis key this server writes.
    #[arg(long, value_name = "PREFIX", default_value = "ratomic-serve:", requires = "redis")]
    pub redis_prefix: String,

    /// The longest a Redis round trip may take, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 50, requires = "redis")]
    pub redis_timeout_ms: u64,

    /// What to answer when Redis fails (after the timeout, or at once while the breaker is open): error (gRPC
    /// UNAVAILABLE, HTTP 503: Envoy's failure_mode_deny decides), fail-open (allow), fail-closed (deny), or
    /// fallback (an in-memory limiter of the same rule in this process).
    #[arg(long, value_enum, default_value_t = OnFailure::Error, requires = "redis")]
    pub redis_on_failure: OnFailure,

    /// Lease hot descriptors' tokens from Redis (off, auto, or the most tokens a lease takes): a call then also
    /// takes a slice of the descriptor's tokens, which this server grants in memory until spent or their time
    /// passes; exact across every server (token buckets only: --algorithm token-bucket; auto leases nothing
    /// for windows, a number is refused with them). Leases are given back at shutdown and when a reload drops a rate.
    #[arg(long, value_name = "off|auto|N", default_value = "off", requires = "redis")]
    pub redis_lease: ratomic::backend::Lease,

    /// Keep the limiters' state in PostgreSQL (a postgresql:// URL or a key=value conninfo), shared by every
    /// ratomic serve using the same database and prefix. The server must answer at start; the library creates
    /// its table and functions if they are missing.
    #[arg(long, value_name = "CONNINFO", conflicts_with_all = ["state_dir", "redis"])]
    pub postgres: Option<String>,

    /// Prefix of every row this server writes in PostgreSQL.
    #[arg(long, value_name = "PREFIX", default_value = "ratomic-serve:", requires = "postgres")]
    pub postgres_prefix: String,

    /// The longest a PostgreSQL round trip may take, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 50, requires = "postgres")]
    pub postgres_timeout_ms: u64,

    /// What to answer when PostgreSQL fails, as --redis-on-failure.
    #[arg(long, value_enum, default_value_t = OnFailure::Error, requires = "postgres")]
    pub postgres_on_failure: OnFailure,

    /// Lease hot descriptors' tokens from PostgreSQL, as --redis-lease.
    #[arg(long, value_name = "off|auto|N", default_value = "off", requires = "postgres")]
    pub postgres_lease: ratomic::backend::Lease,

    /// Add the IETF RateLimit-Policy and RateLimit fields (and Retry-After) of the tightest descriptor to each
    /// response's response_headers_to_add, for Envoy to pass to the client.
    #[arg(long)]
    pub response_headers: bool,

    /// How often the configuration files are checked for changes, in milliseconds (0: only on SIGHUP).
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub watch_interval_ms: u64,
}

/// What to answer when Redis fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnFailure {
    /// No decision: gRPC UNAVAILABLE, HTTP 503 (Envoy's `failure_mode_deny` decides).
    Error,
    /// Allow.
    FailOpen,
    /// Deny (retry after one second).
    FailClosed,
    /// Decide with an in-memory limiter of the same rule in this process.
    Fallback,
}

/// Runs `ratomic serve` until SIGTERM or SIGINT; returns the exit code.
pub fn main(args: ServeArgs) -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RATOMIC_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(false)
        .try_init();
    let config = match config::load_files(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let options = Options::default().max_keys(usize::try_from(args.max_keys).unwrap_or(usize::MAX));
    let bounds = Bounds {
        max_descriptors: args.max_descriptors as usize,
        max_entries: config::MAX_DEPTH,
        max_key_len: args.max_key_len as usize,
    };
    let storage = limiters::Storage {
        state_dir: args.state_dir.clone(),
        redis: args.redis.clone().map(|url| limiters::Redis {
            url,
            prefix: args.redis_prefix.clone(),
            options: ratomic_redis::Options {
                timeout: Duration::from_millis(args.redis_timeout_ms.max(1)),
                policy: match args.redis_on_failure {
                    OnFailure::Error => ratomic_redis::FailurePolicy::ReturnError,
                    OnFailure::FailOpen => ratomic_redis::FailurePolicy::FailOpen,
                    OnFailure::FailClosed => {
                        ratomic_redis::FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) }
                    }
                    OnFailure::Fallback => ratomic_redis::FailurePolicy::Fallback,
                },
                lease: args.redis_lease,
                ..ratomic_redis::Options::default()
            },
        }),
        postgres: args.postgres.clone().map(|conninfo| limiters::Postgres {
            conninfo,
            prefix: args.postgres_prefix.clone(),
            options: ratomic_postgres::Options {
                timeout: Duration::from_millis(args.postgres_timeout_ms.max(1)),
                policy: match args.postgres_on_failure {
                    OnFailure::Error => ratomic_postgres::FailurePolicy::ReturnError,
                    OnFailure::FailOpen => ratomic_postgres::FailurePolicy::FailOpen,
                    OnFailure::FailClosed => {
                        ratomic_postgres::FailurePolicy::FailClosed { retry_after: Duration::from_secs(1) }
                    }
                    OnFailure::Fallback => ratomic_postgres::FailurePolicy::Fallback,
                },
                lease: args.postgres_lease,
                ..ratomic_postgres::Options::default()
            },
        }),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let metrics = Arc::new(metrics::Metrics::default());
    let engine = match runtime.block_on(Engine::new(
        config,
        args.algorithm,
        options,
        storage.clone(),
        bounds,
        metrics.clone(),
    )) {
        Ok(e) => Arc::new(e),
        Err(limiters::BackendError(e)) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let http_options = Options::default()
        .max_keys(usize::try_from(args.max_keys).unwrap_or(usize::MAX))
        .max_key_len(args.max_key_len as usize);
    match runtime.block_on(serve(args, engine, http_options, storage, metrics)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(
    args: ServeArgs,
    engine: Arc<Engine>,
    http_options: Options,
    storage: limiters::Storage,
    metrics: Arc<metrics::Metrics>,
) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(args.grpc_listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.grpc_listen))?;
    let http_listener = tokio::net::TcpListener::bind(args.http_listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.http_listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let http_addr = http_listener.local_addr().map_err(|e| e.to_string())?;
    let answered = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(AtomicBool::new(true));
    let rls = grpc::Rls::new(engine.clone(), args.response_headers, answered.clone(), metrics.clone());
    let service = RateLimitServiceServer::new(rls).max_decoding_message_size(args.max_request_bytes as usize);
    let http = Arc::new(http::Http::new(args.algorithm, http_options, storage, metrics.clone(), ready.clone()));
    let http_api = http.clone();

    tokio::spawn(watch(args.config.clone(), engine.clone(), args.watch_interval_ms));

    // SIGTERM or SIGINT: not ready any more, no new connections, the calls in
    // flight answered; both servers then return.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    tokio::spawn(async move {
        let signal = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        };
        tracing::info!(signal, "shutting down: answering the calls in flight");
        ready.store(false, Ordering::Relaxed);
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    tracing::info!(grpc = %addr, http = %http_addr, algorithm = ?args.algorithm, "listening");
    let max_connections = usize::try_from(args.max_connections).unwrap_or(usize::MAX);
    let grpc_gate = conn::Gate::new(metrics::Listener::Grpc, max_connections, metrics.clone());
    let http_gate = conn::Gate::new(metrics::Listener::Http, max_connections, metrics.clone());
    let grpc = tonic::transport::Server::builder()
        .max_concurrent_streams(args.max_streams)
        .add_service(service)
        .serve_with_incoming_shutdown(conn::incoming(listener, grpc_gate), stopped(stop_rx.clone()));
    let http = conn::serve_http(
        http_listener,
        http_gate,
        http::router(http),
        Duration::from_millis(args.header_timeout_ms),
        stopped(stop_rx),
    );
    let (g, ()) = tokio::join!(grpc, http);
    // Tokens leased and not spent go back to the backend for the other servers
    // (whatever happened to the listeners).
    let back = engine.give_back().await + http_api.give_back().await;
    if back > 0 {
        tracing::info!(limits = back, "leases given back");
    }
    g.map_err(|e| format!("gRPC server: {e}"))?;
    tracing::info!(answered = answered.load(Ordering::Relaxed), "stopped");
    Ok(())
}

/// Reloads the configuration on SIGHUP and when a file's bytes change.
async fn watch(paths: Vec<PathBuf>, engine: Arc<Engine>, interval_ms: u64) {
    let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!(error = %e, "cannot handle SIGHUP; reload on file change only");
            None
        }
    };
    let read_all = |paths: &[PathBuf]| paths.iter().map(|p| std::fs::read(p).ok()).collect::<Vec<_>>();
    let mut seen = read_all(&paths);
    let mut tick = tokio::time::interval(Duration::from_millis(interval_ms.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let cause = tokio::select! {
            _ = async { hup.as_mut().unwrap().recv().await }, if hup.is_some() => "SIGHUP",
            _ = tick.tick(), if interval_ms > 0 => {
                let now = read_all(&paths);
                if now == seen {
                    continue;
                }
                "file change"
            }
        };
        seen = read_all(&paths);
        match config::load_files(&paths) {
            Ok(config) => match engine.reload(config).await {
                Ok(()) => tracing::info!(cause, "configuration reloaded"),
                Err(limiters::BackendError(e)) => {
                    tracing::error!(cause, error = %e, "configuration not reloaded; the previous one keeps serving")
                }
            },
            Err(e) => tracing::error!(cause, error = %e, "configuration not reloaded; the previous one keeps serving"),
        }
    }
}
