//! The limiters over the `redis` crate: async (tokio) and blocking.

use std::sync::Arc;
use std::time::Duration;

use ratomic::Decision;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, ErrorKind, RedisError, ServerErrorKind};

use crate::error::{Error, Result};
use crate::guard::{Breaker, DenyCache};
use crate::limits::{Limits, MultiDecision, Op};
use crate::script;

/// What a limiter answers when Redis fails (a refused connection, a timeout,
/// a server error). Chosen by the caller: there is no hidden default beyond
/// [`FailurePolicy::ReturnError`], which hides nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Return the error (the default).
    ReturnError,
    /// Allow the call, marked [`Source::Policy`](crate::Source::Policy). Never grants on misuse.
    FailOpen,
    /// Deny the call with this `retry_after` (at least 1 µs), marked
    /// [`Source::Policy`](crate::Source::Policy).
    FailClosed {
        /// The wait a denied caller is told.
        retry_after: Duration,
    },
    /// Decide in a local, in-memory limiter of the same rules, marked
    /// [`Source::Fallback`](crate::Source::Fallback). Its state is this process's alone.
    Fallback,
}

/// How a limiter talks to Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The longest a call may take, round trip included (default 50 ms).
    pub timeout: Duration,
    /// What to answer when Redis fails.
    pub policy: FailurePolicy,
    /// Backend failures in a row that open the circuit breaker (default 5;
    /// 0 turns it off). While open, calls do not reach Redis: the policy
    /// answers at once, so a dead server does not add a timeout to every
    /// request.
    pub breaker_threshold: u32,
    /// How long the breaker stays open before calls try Redis again
    /// (default 1 s).
    pub breaker_cooldown: Duration,
    /// Keys of Redis denials kept to answer locally until their
    /// `retry_after` ends, marked [`Source::DenyCache`](crate::Source::DenyCache)
    /// (default 10,000; 0 turns it off). Only calls at the server's time,
    /// and only for the same cost. The price: a `refund` or `reset` from
    /// another process is seen here only when the cached denial ends.
    pub deny_cache: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_millis(50),
            policy: FailurePolicy::ReturnError,
            breaker_threshold: 5,
            breaker_cooldown: Duration::from_secs(1),
            deny_cache: 10_000,
        }
    }
}

/// A limiter whose state lives in Redis (or Valkey): the in-memory engine's
/// rules and decisions, shared by every process that uses the same server
/// and prefix. One round trip per decision: one `EVALSHA` of the crate's
/// script (loaded again when the server answers `NOSCRIPT`).
///
/// `C` is any async connection of the `redis` crate: a
/// [`ConnectionManager`] (reconnects; see [`RedisLimiter::connect`]), a
/// [`MultiplexedConnection`] or a cluster connection.
#[derive(Clone)]
pub struct RedisLimiter<C = ConnectionManager> {
    conn: C,
    limits: Arc<Limits>,
    options: Options,
    fallback: Option<Arc<ratomic::Limiter>>,
    breaker: Arc<Breaker>,
    denials: Arc<DenyCache>,
    /// Batches are split by hash slot (a cluster refuses a pipeline whose
    /// keys are in different slots).
    by_slot: bool,
}

impl<C> std::fmt::Debug for RedisLimiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter").field("limits", &self.limits).field("options", &self.options).finish()
    }
}

impl RedisLimiter<ConnectionManager> {
    /// Connects to `url` (`redis://host:port/db`) with a
    /// [`ConnectionManager`], which reconnects after a broken connection (the
    /// call that sees the break fails and the policy answers it; later calls
    /// use the new connection). The first connection must succeed: a server
    /// that is down when this is called is an error, whatever the policy.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use ratomic::Rule;
    /// use ratomic_redis::{FailurePolicy, Limits, Options, RedisLimiter, Source};
    ///
    /// # async fn run() -> ratomic_redis::Result<()> {
    /// let limits = Limits::new([("burst", Rule::parse("10/s")?), ("daily", Rule::parse("1000/d")?)])?
    ///     .with_prefix("api:")?;
    /// let options = Options { timeout: Duration::from_millis(20), policy: FailurePolicy::Fallback, ..Options::default() };
    /// let limiter = RedisLimiter::connect("redis://127.0.0.1:6379/", limits, options).await?;
    /// let d = limiter.allow("user:42").await?;
    /// if !d.allowed() {
    ///     println!("retry in {:?}; denied by {:?}", d.decision.retry_after, d.denied_by().collect::<Vec<_>>());
    /// }
    /// assert!(matches!(d.source, Source::Redis | Source::Fallback));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str, limits: Limits, options: Options) -> Result<Self> {
        let client = Client::open(url).map_err(map_err)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(options.timeout))
            .set_response_timeout(Some(options.timeout))
            .set_number_of_retries(1);
        let conn = tokio::time::timeout(options.timeout * 4, ConnectionManager::new_with_config(client, config))
            .await
            .map_err(|_| Error::Timeout)?
            .map_err(map_err)?;
        Ok(Self::new(conn, limits, options))
    }
}

impl RedisLimiter<MultiplexedConnection> {
    /// Connects to `url` with one [`MultiplexedConnection`] (no reconnect).
    pub async fn connect_multiplexed(url: &str, limits: Limits, options: Options) -> Result<Self> {
        let client = Client::open(url).map_err(map_err)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.timeout))
            .set_response_timeout(Some(options.timeout));
        let conn = client.get_multiplexed_async_connection_with_config(&config).await.map_err(map_err)?;
        Ok(Self::new(conn, limits, options))
    }
}

impl RedisLimiter<ClusterConnection> {
    /// Connects to a Redis Cluster through any of its nodes' URLs.
    pub async fn connect_cluster(urls: &[&str], limits: Limits, options: Options) -> Result<Self> {
        let client = redis::cluster::ClusterClient::builder(urls.iter().copied())
            .connection_timeout(options.timeout)
            .response_timeout(options.timeout)
            .build()
            .map_err(map_err)?;
        let conn = client.get_async_connection().await.map_err(map_err)?;
        Ok(Self::new_cluster(conn, limits, options))
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisLimiter<C> {
    /// A limiter over an open connection.
    pub fn new(conn: C, limits: Limits, options: Options) -> Self {
        let fallback = (options.policy == FailurePolicy::Fallback).then(|| {
            let rules = limits.names().map(str::to_owned).zip(limits.core_rules().iter().copied());
            // The same rules were accepted by the in-memory engine already.
            Arc::new(ratomic::Limiter::new(rules).expect("rules accepted by Limits::new"))
        });
        RedisLimiter {
            conn,
            limits: Arc::new(limits),
            options,
            fallback,
            breaker: Arc::new(Breaker::new(options.breaker_threshold, options.breaker_cooldown)),
            denials: Arc::new(DenyCache::new(options.deny_cache)),
            by_slot: false,
        }
    }

    /// A limiter over an open Redis Cluster connection: as
    /// [`new`](Self::new), and batches are sent as one pipeline per hash
    /// slot, all at once.
    pub fn new_cluster(conn: C, limits: Limits, options: Options) -> Self {
        RedisLimiter { by_slot: true, ..Self::new(conn, limits, options) }
    }

    /// The rules and key layout.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether the circuit breaker is open: calls answer by the failure
    /// policy without reaching Redis until its cool-down ends.
    pub fn breaker_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// `allow_n(key, 1)`.
    pub async fn allow(&self, key: impl AsRef<[u8]>) -> Result<MultiDecision> {
        self.call(Op::Allow, key.as_ref(), 1, None).await
    }

    /// Consumes `cost` from every limit on `key` if all allow it, at the
    /// server's time.
    pub async fn allow_n(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<MultiDecision> {
        self.call(Op::Allow, key.as_ref(), cost, None).await
    }

    /// As [`allow_n`](Self::allow_n) at `now` (ns on the caller's clock).
    pub async fn allow_at(&self, key: impl AsRef<[u8]>, cost: u64, now: u64) -> Result<MultiDecision> {
        self.call(Op::Allow, key.as_ref(), cost, Some(now)).await
    }

    /// What `allow_n(key, cost)` would answer, changing nothing.
    pub async fn peek(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<MultiDecision> {
        self.call(Op::Peek, key.as_ref(), cost, None).await
    }

    /// As [`peek`](Self::peek) at `now`.
    pub async fn peek_at(&self, key: impl AsRef<[u8]>, cost: u64, now: u64) -> Result<MultiDecision> {
        self.call(Op::Peek, key.as_ref(), cost, Some(now)).await
    }

    /// Gives back `tokens` to every limit on `key` (never above full).
    pub async fn refund(&self, key: impl AsRef<[u8]>, tokens: u64) -> Result<()> {
        self.refund_inner(key.as_ref(), tokens, None).await
    }

    /// As [`refund`](Self::refund) at `now`.
    pub async fn refund_at(&self, key: impl AsRef<[u8]>, tokens: u64, now: u64) -> Result<()> {
        self.refund_inner(key.as_ref(), tokens, Some(now)).await
    }

    /// Forgets `key`: it is full again.
    pub async fn reset(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        self.limits.check(key, 0)?;
        self.denials.forget(key);
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.limits.key(key));
        let mut conn = self.conn.clone();
        let _: i64 = self.timed(async move { cmd.query_async(&mut conn).await.map_err(map_err) }).await?;
        Ok(())
    }

    /// Decides every `(key, cost)` in one pipeline (one round trip), in
    /// order. Every request is checked first; an invalid one fails the whole
    /// batch with its index and nothing is sent. Each request reads the
    /// server's `TIME` when it runs.
    pub async fn allow_many<K: AsRef<[u8]>>(&self, requests: &[(K, u64)]) -> Result<Vec<MultiDecision>> {
        self.many(requests, None).await
    }

    /// As [`allow_many`](Self::allow_many), every request at `now`.
    pub async fn allow_many_at<K: AsRef<[u8]>>(&self, requests: &[(K, u64)], now: u64) -> Result<Vec<MultiDecision>> {
        self.many(requests, Some(now)).await
    }

    /// Waits until `key` grants `cost`, at most `deadline`; `Ok(None)` when
    /// the wait would pass it (nothing consumed then). Each try is one
    /// round trip; between tries it sleeps the `retry_after` Redis gave.
    pub async fn acquire(&self, key: impl AsRef<[u8]>, cost: u64, deadline: Duration) -> Result<Option<MultiDecision>> {
        let key = key.as_ref();
        let end = tokio::time::Instant::now() + deadline;
        loop {
            let d = self.allow_n(key, cost).await?;
            if d.allowed() {
                return Ok(Some(d));
            }
            let wake = tokio::time::Instant::now() + d.decision.retry_after;
            if wake > end {
                return Ok(None);
            }
            tokio::time::sleep_until(wake).await;
        }
    }

    async fn call(&self, op: Op, key: &[u8], cost: u64, now: Option<u64>) -> Result<MultiDecision> {
        self.limits.check(key, cost)?;
        let args = self.limits.args(op, now, cost)?;
        if now.is_none() {
            if let Some(d) = self.denials.get(key, cost) {
                return Ok(self.limits.cached_decision(d));
            }
        }
        if self.breaker.is_open() {
            return self.on_failure(Error::Connection("the circuit breaker is open".into()), op, key, cost, now);
        }
        match self.timed(eval(self.conn.clone(), self.limits.key(key), args)).await {
            Ok(reply) => {
                self.breaker.success();
                let d = self.limits.decode(&reply)?;
                if now.is_none() && op == Op::Allow {
                    self.denials.insert(key, cost, d.decision);
                }
                Ok(d)
            }
            Err(e) if e.is_backend() => {
                self.breaker.failure();
                self.on_failure(e, op, key, cost, now)
            }
            Err(e) => Err(e),
        }
    }

    async fn refund_inner(&self, key: &[u8], tokens: u64, now: Option<u64>) -> Result<()> {
        self.limits.check(key, 0)?;
        self.denials.forget(key);
        let args = self.limits.args(Op::Refund, now, tokens)?;
        let reply = self.timed(eval(self.conn.clone(), self.limits.key(key), args)).await?;
        self.limits.decode_refund(&reply).map(drop)
    }

    async fn many<K: AsRef<[u8]>>(&self, requests: &[(K, u64)], now: Option<u64>) -> Result<Vec<MultiDecision>> {
        self.limits.check_batch(requests.iter().map(|(k, c)| (k.as_ref(), *c)))?;
        let mut calls = Vec::with_capacity(requests.len());
        for (k, cost) in requests {
            calls.push((self.limits.key(k.as_ref()), self.limits.args(Op::Allow, now, *cost)?));
        }
        type Sent = std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<Vec<i64>>>> + Send>>;
        let sent: Sent = if self.by_slot {
            Box::pin(eval_by_slot(self.conn.clone(), calls))
        } else {
            Box::pin(eval_many(self.conn.clone(), calls))
        };
        match self.timed(sent).await {
            Ok(replies) => replies.iter().map(|r| self.limits.decode(r)).collect(),
            Err(e) if e.is_backend() && self.options.policy != FailurePolicy::ReturnError => {
                requests.iter().map(|(k, c)| self.on_failure(e.clone(), Op::Allow, k.as_ref(), *c, now)).collect()
            }
            Err(e) => Err(e),
        }
    }

    async fn timed<T>(&self, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        tokio::time::timeout(self.options.timeout, f).await.map_err(|_| Error::Timeout)?
    }

    fn on_failure(&self, e: Error, op: Op, key: &[u8], cost: u64, now: Option<u64>) -> Result<MultiDecision> {
        let limit = self.limits.max_cost();
        match self.options.policy {
            FailurePolicy::ReturnError => Err(e),
            FailurePolicy::FailOpen => Ok(self.limits.policy_decision(Decision {
                allowed: true,
                remaining: 0,
                limit,
                retry_after: Duration::ZERO,
                reset_after: Duration::ZERO,
            })),
            FailurePolicy::FailClosed { retry_after } => Ok(self.limits.policy_decision(Decision {
                allowed: false,
                remaining: 0,
                limit,
                retry_after: retry_after.max(Duration::from_micros(1)),
                reset_after: Duration::ZERO,
            })),
            FailurePolicy::Fallback => {
                let local = self.fallback.as_ref().expect("made with the Fallback policy");
                let now = match now {
                    Some(t) => t,
                    None => local.now(),
                };
                let d = match op {
                    Op::Peek => local.peek_at(key, cost, now)?,
                    _ => local.allow_at(key, cost, now)?,
                };
                Ok(self.limits.fallback_decision(&d))
            }
        }
    }
}

/// One `EVALSHA`, with the script loaded and the call sent again on
/// `NOSCRIPT` (a restarted or flushed server forgets scripts; nothing ran).
async fn eval<C: ConnectionLike>(mut conn: C, key: Vec<u8>, args: Vec<Vec<u8>>) -> Result<Vec<i64>> {
    let cmd = evalsha(&key, &args);
    match cmd.query_async::<Vec<i64>>(&mut conn).await {
        Err(e) if is_noscript(&e) => {
            load(&mut conn).await?;
            cmd.query_async(&mut conn).await.map_err(map_err)
        }
        r => r.map_err(map_err),
    }
}

/// Every call in one pipeline. Calls a server answered `NOSCRIPT` did not
/// run: after loading the script, only those are sent again (in a second
/// pipeline), so nothing is charged twice.
async fn eval_many<C: ConnectionLike>(mut conn: C, calls: Vec<(Vec<u8>, Vec<Vec<u8>>)>) -> Result<Vec<Vec<i64>>> {
    let mut out: Vec<Option<Vec<i64>>> = vec![None; calls.len()];
    let mut todo: Vec<usize> = (0..calls.len()).collect();
    for attempt in 0..2 {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for &i in &todo {
            pipe.add_command(evalsha(&calls[i].0, &calls[i].1));
        }
        let replies: Vec<redis::RedisResult<Vec<i64>>> = pipe.query_async(&mut conn).await.map_err(map_err)?;
        let mut again = Vec::new();
        for (&i, r) in todo.iter().zip(replies) {
            match r {
                Ok(v) => out[i] = Some(v),
                Err(e) if attempt == 0 && is_noscript(&e) => again.push(i),
                Err(e) => return Err(map_err(e)),
            }
        }
        if again.is_empty() {
            break;
        }
        load(&mut conn).await?;
        todo = again;
    }
    out.into_iter().map(|r| r.ok_or_else(|| Error::Reply("a batch call got no reply".into()))).collect()
}

/// [`eval_many`] for a cluster: one pipeline per hash slot, all in flight
/// at once; the replies are put back in request order.
async fn eval_by_slot<C>(conn: C, calls: Vec<(Vec<u8>, Vec<Vec<u8>>)>) -> Result<Vec<Vec<i64>>>
where
    C: ConnectionLike + Clone + Send + 'static,
{
    let mut groups: std::collections::BTreeMap<u16, (Vec<usize>, Vec<_>)> = std::collections::BTreeMap::new();
    for (i, call) in calls.into_iter().enumerate() {
        let group = groups.entry(crate::keys::hash_slot(&call.0)).or_default();
        group.0.push(i);
        group.1.push(call);
    }
    let total = groups.values().map(|g| g.0.len()).sum();
    let mut set = tokio::task::JoinSet::new();
    for (_, (indexes, calls)) in groups {
        let conn = conn.clone();
        set.spawn(async move { (indexes, eval_many(conn, calls).await) });
    }
    let mut out = vec![Vec::new(); total];
    while let Some(done) = set.join_next().await {
        let (indexes, replies) = done.map_err(|e| Error::Connection(format!("a batch task failed: {e}")))?;
        for (i, r) in indexes.into_iter().zip(replies?) {
            out[i] = r;
        }
    }
    Ok(out)
}

fn evalsha(key: &[u8], args: &[Vec<u8>]) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script::sha1()).arg(1).arg(key).arg(args);
    cmd
}

async fn load<C: ConnectionLike>(conn: &mut C) -> Result<()> {
    let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(script::SOURCE).query_async(conn).await.map_err(map_err)?;
    if sha != script::sha1() {
        return Err(Error::Reply(format!("SCRIPT LOAD answered {sha}, expected {}", script::sha1())));
    }
    Ok(())
}

fn is_noscript(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

fn map_err(e: RedisError) -> Error {
    if e.is_timeout() {
        Error::Timeout
    } else if e.is_connection_refusal() || e.is_connection_dropped() || e.is_io_error() {
        Error::Connection(e.to_string())
    } else if matches!(e.kind(), ErrorKind::Server(_)) {
        Error::Server(e.to_string())
    } else if e.kind() == ErrorKind::InvalidClientConfig {
        Error::Connection(e.to_string())
    } else {
        Error::Reply(e.to_string())
    }
}

/// The blocking face: the same limiter driven by its own small tokio
/// runtime, for callers without one (the C ABI, the CLI). Share it between
/// threads: their calls are pipelined on one connection. Do not call it (or
/// drop it) from inside an async runtime's task: use [`RedisLimiter`] there.
#[derive(Debug)]
pub struct BlockingRedisLimiter {
    runtime: tokio::runtime::Runtime,
    inner: RedisLimiter<ConnectionManager>,
}

impl BlockingRedisLimiter {
    /// Connects to `url` (see [`RedisLimiter::connect`]).
    pub fn connect(url: &str, limits: Limits, options: Options) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| Error::Connection(format!("cannot start the I/O thread: {e}")))?;
        let inner = runtime.block_on(RedisLimiter::connect(url, limits, options))?;
        Ok(BlockingRedisLimiter { runtime, inner })
    }

    /// The async limiter underneath.
    pub fn inner(&self) -> &RedisLimiter<ConnectionManager> {
        &self.inner
    }

    /// See [`RedisLimiter::allow_n`].
    pub fn allow_n(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<MultiDecision> {
        self.runtime.block_on(self.inner.allow_n(key, cost))
    }

    /// See [`RedisLimiter::allow_at`].
    pub fn allow_at(&self, key: impl AsRef<[u8]>, cost: u64, now: u64) -> Result<MultiDecision> {
        self.runtime.block_on(self.inner.allow_at(key, cost, now))
    }

    /// See [`RedisLimiter::peek`].
    pub fn peek(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<MultiDecision> {
        self.runtime.block_on(self.inner.peek(key, cost))
    }

    /// See [`RedisLimiter::peek_at`].
    pub fn peek_at(&self, key: impl AsRef<[u8]>, cost: u64, now: u64) -> Result<MultiDecision> {
        self.runtime.block_on(self.inner.peek_at(key, cost, now))
    }

    /// See [`RedisLimiter::refund`].
    pub fn refund(&self, key: impl AsRef<[u8]>, tokens: u64) -> Result<()> {
        self.runtime.block_on(self.inner.refund(key, tokens))
    }

    /// See [`RedisLimiter::refund_at`].
    pub fn refund_at(&self, key: impl AsRef<[u8]>, tokens: u64, now: u64) -> Result<()> {
        self.runtime.block_on(self.inner.refund_at(key, tokens, now))
    }

    /// See [`RedisLimiter::reset`].
    pub fn reset(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.runtime.block_on(self.inner.reset(key))
    }

    /// See [`RedisLimiter::allow_many`].
    pub fn allow_many<K: AsRef<[u8]>>(&self, requests: &[(K, u64)]) -> Result<Vec<MultiDecision>> {
        self.runtime.block_on(self.inner.allow_many(requests))
    }

    /// See [`RedisLimiter::allow_many_at`].
    pub fn allow_many_at<K: AsRef<[u8]>>(&self, requests: &[(K, u64)], now: u64) -> Result<Vec<MultiDecision>> {
        self.runtime.block_on(self.inner.allow_many_at(requests, now))
    }

    /// See [`RedisLimiter::acquire`].
    pub fn acquire(&self, key: impl AsRef<[u8]>, cost: u64, deadline: Duration) -> Result<Option<MultiDecision>> {
        self.runtime.block_on(self.inner.acquire(key, cost, deadline))
    }
}
