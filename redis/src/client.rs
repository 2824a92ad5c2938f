//! The limiters over the `redis` crate: async (tokio) and blocking.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Client, Cmd, ErrorKind, RedisError, ServerErrorKind};

use crate::driver::{BatchStep, Call, Driver, Options, Step};
use crate::error::{Error, Result};
use crate::limits::{Limits, MultiDecision, Op};
use crate::script;

/// A limiter whose state lives in Redis (or Valkey): the in-memory engine's
/// rules and decisions, shared by every process that uses the same server
/// and prefix. One round trip per decision: one `EVALSHA` of the crate's
/// script (loaded again when the server answers `NOSCRIPT`).
///
/// Decisions in flight at the same time share round trips: while one is
/// outstanding, the calls that come meanwhile wait and then go together,
/// up to 256 in one pipeline under one timeout, each answered as
/// it would have been alone (the server runs a pipeline's calls in order).
/// A call whose key's lease was on its way in that round trip is answered
/// from the lease instead.
///
/// `C` is any async connection of the `redis` crate: a
/// [`ConnectionManager`] (reconnects; see [`RedisLimiter::connect`]), a
/// [`MultiplexedConnection`] or a cluster connection.
#[derive(Clone)]
pub struct RedisLimiter<C = ConnectionManager> {
    conn: C,
    driver: Arc<Driver>,
    /// Batches are split by hash slot (a cluster refuses a pipeline whose
    /// keys are in different slots).
    by_slot: bool,
    /// Decisions waiting for the one in flight.
    flight: Arc<Flight>,
}

/// The most decisions one coalesced round trip carries.
pub const MAX_BATCH: usize = 256;

/// How many round trips a waiting call may be held back for a lease on its
/// way to its key: up to `FREE_DEFERS` whatever came of them, then up to
/// `MAX_DEFERS` while its key's leases keep answering calls — a lease call
/// granted in the last round, or a lease answering calls in this one (a
/// lease call that keeps being denied holds no one long: the deny cache
/// answers its waiters).
const FREE_DEFERS: u32 = 8;
const MAX_DEFERS: u32 = 64;

/// A decision waiting for the round trip in flight.
struct Waiting {
    op: Op,
    key: Vec<u8>,
    cost: u64,
    now: Option<u64>,
    /// The call its `begin` made, if it began while nothing was in flight:
    /// sent as is if it asks for a lease (the key's one asker); otherwise
    /// (or if none) it is begun again when its turn comes (a lease or a
    /// denial may answer it by then).
    call: Option<Call>,
    /// Round trips it was held back for a lease on its way to its key.
    deferred: u32,
    tx: tokio::sync::oneshot::Sender<Result<MultiDecision>>,
}

/// Whether a round trip is in flight, and who waits for it.
#[derive(Default)]
struct Flight {
    state: Mutex<(bool, VecDeque<Waiting>)>,
}

impl Flight {
    fn lock(&self) -> std::sync::MutexGuard<'_, (bool, VecDeque<Waiting>)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<C> std::fmt::Debug for RedisLimiter<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLimiter").field("driver", &self.driver).finish()
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
        let driver = Driver::try_new(limits, options)?;
        let conn = tokio::time::timeout(options.timeout * 4, ConnectionManager::new_with_config(client, config))
            .await
            .map_err(|_| Error::Timeout)?
            .map_err(map_err)?;
        Ok(Self::with_driver(conn, driver, false))
    }
}

impl RedisLimiter<MultiplexedConnection> {
    /// Connects to `url` with one [`MultiplexedConnection`] (no reconnect).
    pub async fn connect_multiplexed(url: &str, limits: Limits, options: Options) -> Result<Self> {
        let client = Client::open(url).map_err(map_err)?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(options.timeout))
            .set_response_timeout(Some(options.timeout));
        let driver = Driver::try_new(limits, options)?;
        let conn = client.get_multiplexed_async_connection_with_config(&config).await.map_err(map_err)?;
        Ok(Self::with_driver(conn, driver, false))
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
        let driver = Driver::try_new(limits, options)?;
        let conn = client.get_async_connection().await.map_err(map_err)?;
        Ok(Self::with_driver(conn, driver, true))
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisLimiter<C> {
    /// A limiter over an open connection.
    ///
    /// # Panics
    /// If the options cannot apply to the limits (see [`Driver::new`]):
    /// [`try_new`](Self::try_new) returns the error instead.
    pub fn new(conn: C, limits: Limits, options: Options) -> Self {
        Self::with_driver(conn, Driver::new(limits, options), false)
    }

    /// A limiter over an open connection, or why the options cannot apply
    /// to the limits.
    pub fn try_new(conn: C, limits: Limits, options: Options) -> Result<Self> {
        Ok(Self::with_driver(conn, Driver::try_new(limits, options)?, false))
    }

    /// A limiter over an open Redis Cluster connection: as
    /// [`new`](Self::new), and batches are sent as one pipeline per hash
    /// slot, all at once.
    pub fn new_cluster(conn: C, limits: Limits, options: Options) -> Self {
        Self::with_driver(conn, Driver::new(limits, options), true)
    }

    fn with_driver(conn: C, driver: Driver, by_slot: bool) -> Self {
        RedisLimiter { conn, driver: Arc::new(driver), by_slot, flight: Arc::default() }
    }

    /// The driver: the rules, the guards and the leases this limiter runs.
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// Gives back the unused tokens of every lease this limiter holds (see
    /// [`Lease`](crate::Lease)); call it when the limiter is done with, so
    /// that other processes can have them at once rather than when their
    /// time passes. Calls made afterwards take new leases. Returns how many
    /// limits took tokens back.
    pub async fn give_back(&self) -> Result<usize> {
        let mut back = 0;
        for call in self.driver.begin_give_backs() {
            let reply = self.timed(eval(self.conn.clone(), &call)).await;
            back += self.driver.finish_give_back(reply)?;
        }
        Ok(back)
    }

    /// The rules and key layout.
    pub fn limits(&self) -> &Limits {
        self.driver.limits()
    }

    /// Whether the circuit breaker is open: calls answer by the failure
    /// policy without reaching Redis until its cool-down ends.
    pub fn breaker_open(&self) -> bool {
        self.driver.breaker_open()
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

    /// Forgets `key`: it is full again, but for the tokens other
    /// processes' leases hold.
    pub async fn reset(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let call = self.driver.begin_reset_call(key.as_ref(), None)?;
        let reply = self.timed(eval(self.conn.clone(), &call)).await;
        self.driver.finish_reset(reply)
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
        let busy = self.flight.lock().0;
        let call = if busy {
            // A round trip is in flight: answered here (a lease, a cached
            // denial), or this call waits for the next one, begun again
            // then. It asks for no lease meanwhile: only the round trip's
            // planner does, for every call on the key at once.
            if let Some(d) = self.driver.begin_local(op, key, cost, now)? {
                return Ok(d);
            }
            None
        } else {
            match self.driver.begin(op, key, cost, now)? {
                Step::Answer(d) => return Ok(d),
                Step::Send(call) => Some(call),
            }
        };
        let waiting = {
            let mut state = self.flight.lock();
            if state.0 {
                let (tx, rx) = tokio::sync::oneshot::channel();
                // One that asks for a lease (it began while nothing was in
                // flight) goes first: the others on its key wait for it.
                let front = call.as_ref().is_some_and(|c| c.lease() > 0);
                let w = Waiting { op, key: key.to_vec(), cost, now, call, deferred: 0, tx };
                if front {
                    state.1.push_front(w);
                } else {
                    state.1.push_back(w);
                }
                Err(rx)
            } else {
                state.0 = true;
                Ok(call)
            }
        };
        match waiting {
            Ok(call) => {
                // Nothing is in flight: this call goes now, alone; whoever
                // comes meanwhile waits for the next round trip, which `Lead`
                // starts.
                let lead = Lead(Some(self));
                let call = match call {
                    Some(call) => call,
                    None => match self.driver.begin(op, key, cost, now) {
                        Ok(Step::Send(call)) => call,
                        other => {
                            drop(lead);
                            return other.map(|step| match step {
                                Step::Answer(d) => d,
                                Step::Send(_) => unreachable!("matched above"),
                            });
                        }
                    },
                };
                let reply = self.timed(eval(self.conn.clone(), &call)).await;
                // Finished before the next round trip is planned: a lease it
                // brought answers those waiting.
                let d = self.driver.finish(&call, reply);
                drop(lead);
                d
            }
            Err(rx) => rx
                .await
                .unwrap_or_else(|_| Err(Error::Connection("the round trip carrying this call was dropped".into()))),
        }
    }

    /// Sends the waiting decisions, a batch at a time, until none is left.
    async fn drain(self) {
        // Keys whose lease call in the last round that sent calls was granted: the
        // key's leases are still answering calls, even one that brought no
        // tokens beyond its own (the last of a bucket): its waiters are
        // held for the next one (or the deny cache answers them), not sent
        // one script call each.
        let mut granted: HashSet<Vec<u8>> = HashSet::new();
        loop {
            let waiting: Vec<Waiting> = {
                let mut state = self.flight.lock();
                if state.1.is_empty() {
                    state.0 = false;
                    return;
                }
                let n = state.1.len().min(MAX_BATCH);
                state.1.drain(..n).collect()
            };
            let mut calls: Vec<Call> = Vec::with_capacity(waiting.len());
            let mut txs = Vec::with_capacity(waiting.len());
            let mut later = Vec::new();
            let mut leasing: HashSet<Vec<u8>> = HashSet::new();
            // Keys a lease answered a call of, in this round or the last.
            let mut progressed = granted.clone();
            // Tokens waiting per key: a lease asked for one of them is sized
            // to answer the others.
            let mut demand: HashMap<&[u8], u64> = HashMap::new();
            for w in &waiting {
                *demand.entry(&w.key[..]).or_default() += w.cost;
            }
            let demand: HashMap<Vec<u8>, u64> = demand.into_iter().map(|(k, v)| (k.to_vec(), v)).collect();
            for w in waiting {
                if w.tx.is_closed() {
                    continue; // its caller is gone: nothing to decide
                }
                if let Some(call) = w.call.as_ref().filter(|c| c.lease() > 0) {
                    leasing.insert(w.key.clone());
                    calls.push(call.clone());
                    txs.push(w.tx);
                    continue;
                }
                if leasing.contains(&w.key)
                    && w.deferred < MAX_DEFERS
                    && (w.deferred < FREE_DEFERS || progressed.contains(&w.key))
                {
                    // This round trip brings the key a lease: wait for it.
                    later.push(Waiting { deferred: w.deferred + 1, ..w });
                    continue;
                }
                let wanted = demand.get(&w.key).map_or(0, |d| d.saturating_sub(w.cost));
                match self.driver.begin_for(w.op, &w.key, w.cost, w.now, wanted) {
                    Ok(Step::Answer(d)) => {
                        if d.source == crate::Source::Lease {
                            progressed.insert(w.key.clone());
                        }
                        drop(w.tx.send(Ok(d)))
                    }
                    Ok(Step::Send(call)) => {
                        if call.lease() > 0 {
                            leasing.insert(w.key.clone());
                        }
                        calls.push(call);
                        txs.push(w.tx);
                    }
                    Err(e) => drop(w.tx.send(Err(e))),
                }
            }
            if !later.is_empty() {
                let mut state = self.flight.lock();
                for w in later.into_iter().rev() {
                    state.1.push_front(w);
                }
            }
            if calls.is_empty() {
                continue;
            }
            let replies = self.timed(self.pipeline(&calls)).await;
            granted.clear();
            for (i, (call, tx)) in calls.iter().zip(txs).enumerate() {
                let reply = match &replies {
                    Ok(rs) => rs.get(i).cloned().ok_or_else(|| Error::Reply("a batch call got no reply".into())),
                    Err(e) => Err(e.clone()),
                };
                let d = self.driver.finish(call, reply);
                if call.lease() > 0 && d.as_ref().is_ok_and(MultiDecision::allowed) {
                    granted.insert(call.key().to_vec());
                }
                drop(tx.send(d));
            }
        }
    }

    /// `calls` in one pipeline (one per hash slot on a cluster).
    async fn pipeline(&self, calls: &[Call]) -> Result<Vec<Vec<i64>>> {
        if self.by_slot {
            eval_by_slot(self.conn.clone(), calls).await
        } else {
            eval_many(self.conn.clone(), calls).await
        }
    }

    async fn refund_inner(&self, key: &[u8], tokens: u64, now: Option<u64>) -> Result<()> {
        if now.is_none() && self.driver.refund_lease(key, tokens) {
            return Ok(());
        }
        let call = self.driver.begin_refund(key, tokens, now)?;
        let reply = self.timed(eval(self.conn.clone(), &call)).await;
        self.driver.finish_refund(reply).map(drop)
    }

    async fn many<K: AsRef<[u8]>>(&self, requests: &[(K, u64)], now: Option<u64>) -> Result<Vec<MultiDecision>> {
        let calls = match self.driver.begin_many(requests.iter().map(|(k, c)| (k.as_ref(), *c)), now)? {
            BatchStep::Answer(ds) => return Ok(ds),
            BatchStep::Send(calls) => calls,
        };
        let replies = self.timed(self.pipeline(&calls)).await;
        self.driver.finish_many(&calls, replies)
    }

    async fn timed<T>(&self, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        tokio::time::timeout(self.driver.options().timeout, f).await.map_err(|_| Error::Timeout)?
    }
}

/// The call in flight alone. When it ends — or is dropped midway — the
/// decisions that came meanwhile go in the next round trip (a task of its
/// own, so that no caller's future has to carry the others').
struct Lead<'a, C: ConnectionLike + Clone + Send + Sync + 'static>(Option<&'a RedisLimiter<C>>);

impl<C: ConnectionLike + Clone + Send + Sync + 'static> Drop for Lead<'_, C> {
    fn drop(&mut self) {
        let Some(l) = self.0.take() else { return };
        let mut state = l.flight.lock();
        if state.1.is_empty() {
            state.0 = false;
            return;
        }
        drop(state);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn(l.clone().drain())),
            Err(_) => {
                // No runtime to run them on (it is shutting down): they fail.
                let mut state = l.flight.lock();
                state.0 = false;
                for w in state.1.drain(..) {
                    drop(w.tx.send(Err(Error::Connection("the runtime is shutting down".into()))));
                }
            }
        }
    }
}

/// One `EVALSHA`, with the script loaded and the call sent again on
/// `NOSCRIPT` (a restarted or flushed server forgets scripts; nothing ran).
async fn eval<C: ConnectionLike>(mut conn: C, call: &Call) -> Result<Vec<i64>> {
    let cmd = evalsha(call);
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
async fn eval_many<C: ConnectionLike>(mut conn: C, calls: &[Call]) -> Result<Vec<Vec<i64>>> {
    let mut out: Vec<Option<Vec<i64>>> = vec![None; calls.len()];
    let mut todo: Vec<usize> = (0..calls.len()).collect();
    for attempt in 0..2 {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for &i in &todo {
            pipe.add_command(evalsha(&calls[i]));
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
async fn eval_by_slot<C>(conn: C, calls: &[Call]) -> Result<Vec<Vec<i64>>>
where
    C: ConnectionLike + Clone + Send + 'static,
{
    let mut groups: std::collections::BTreeMap<u16, (Vec<usize>, Vec<Call>)> = std::collections::BTreeMap::new();
    for (i, call) in calls.iter().enumerate() {
        let group = groups.entry(crate::keys::hash_slot(call.redis_key())).or_default();
        group.0.push(i);
        group.1.push(call.clone());
    }
    let total = groups.values().map(|g| g.0.len()).sum();
    let mut set = tokio::task::JoinSet::new();
    for (_, (indexes, calls)) in groups {
        let conn = conn.clone();
        set.spawn(async move { (indexes, eval_many(conn, &calls).await) });
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

fn evalsha(call: &Call) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script::sha1()).arg(1).arg(call.redis_key()).arg(call.args());
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

    /// See [`RedisLimiter::give_back`].
    pub fn give_back(&self) -> Result<usize> {
        self.runtime.block_on(self.inner.give_back())
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
