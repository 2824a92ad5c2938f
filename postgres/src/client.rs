//! The limiters over tokio-postgres: async and blocking.
//!
//! Calls in flight at once share statements: see [`PostgresLimiter`].
//!
//! The pool is this crate's own, a few lines: a fixed number of
//! connections. A tokio-postgres
//! connection carries any number of statements at once (it pipelines
//! them), so a call never waits to check a connection out, and 64 calls in
//! flight need no 64 connections (a checkout pool such as deadpool-postgres
//! holds a connection per call in flight: more server backends, or calls
//! queued for a free one). A call takes the least busy connection. A
//! connection found closed (the server restarted,
//! `pg_terminate_backend`) is opened again by the next call that takes its
//! turn.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_postgres::{Client, NoTls, Statement as Prepared};

use crate::driver::{Batch, BatchStep, Call, Coalesced, Driver, Options, Statement, Step};
use crate::error::{Error, Result};
use crate::limits::{Limits, MultiDecision, Op};
use crate::schema;

/// A limiter whose state lives in PostgreSQL: the in-memory engine's rules
/// and decisions, shared by every process that uses the same database and
/// prefix. Cheap to clone (clones share the connections and the calls
/// waiting for them).
///
/// A call alone is one statement (the common call's upsert,
/// [`schema::ALLOW`], or one `ratomic_v1_call`), and
/// [`allow_many`](Self::allow_many) one for its batch. Calls in flight at
/// once share statements: a plain allow at the server's time (`allow`,
/// `allow_n`, `acquire`'s tries; no explicit time, no lease asked) goes at
/// once, alone, while fewer such statements than half the
/// [`Options::connections`] (rounded up: 2 of the default 4) are out. Beyond that it waits, and each of
/// those statements that ends sends the calls that waited meanwhile, up to
/// [`MAX_BATCH`] (256), as one `ratomic_v1_many`, again while calls wait.
/// At 64 calls in flight the server is bound by statements, and a batch
/// costs it several times less per decision than a call each.
///
/// - A batch reads the server's clock once. Each call in it was made
///   before the batch was sent and is answered after it ran, so that
///   reading lies within each call; each is decided as it would have been
///   alone at that time (the batch's calls in key order, those on one key
///   in the order they came), and gets the answer it would have had alone:
///   every field, the deny cache, the breaker (a failed batch counts as one
///   failure), the failure policy for each call when the statement fails.
/// - [`Options::timeout`] holds for every call: a batch ends, with the
///   policy's answer to each, by the earliest time one of its calls is due.
/// - No timer and no background task of its own: a call alone waits for
///   nothing. A batch is sent by a task spawned when the statement it
///   waited for ends, so that a caller that drops its future (a cancelled
///   request) strands no one; a call whose caller is gone before its batch
///   is sent is not sent.
/// - Peeks, refunds, resets, calls at an explicit time, calls that ask for
///   a lease and `allow_many` go as they come, as before.
#[derive(Clone)]
pub struct PostgresLimiter {
    inner: Arc<Inner>,
}

struct Inner {
    driver: Driver,
    config: tokio_postgres::Config,
    slots: Vec<Slot>,
    /// The plain allows' statements out, and the calls waiting for one.
    flight: Mutex<Flight>,
    /// How many of those statements may be out at once.
    flight_limit: usize,
}

/// The most calls one coalesced statement carries.
pub const MAX_BATCH: usize = 256;

#[derive(Default)]
struct Flight {
    /// Statements of plain allows out: each holds a [`Turn`].
    out: usize,
    waiting: VecDeque<Waiting>,
}

/// A plain allow waiting for a statement.
struct Waiting {
    call: Call,
    /// When its answer is due: the batch it goes in ends by the earliest
    /// of these.
    due: tokio::time::Instant,
    tx: tokio::sync::oneshot::Sender<Result<MultiDecision>>,
}

#[derive(Default)]
struct Slot {
    conn: Mutex<Option<Arc<Conn>>>,
    /// Statements in flight on it.
    busy: AtomicUsize,
    /// Held while this slot connects: one connection attempt at a time.
    connecting: tokio::sync::Mutex<()>,
}

struct Conn {
    client: Client,
    call: Prepared,
    allow: Prepared,
    many: Prepared,
    gc: Prepared,
    lease: Prepared,
    give_back: Prepared,
}

impl std::fmt::Debug for PostgresLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresLimiter").field("driver", &self.inner.driver).finish()
    }
}

/// The most rows one `gc` statement removes (a `gc` call repeats it until
/// fewer are left).
pub const GC_CHUNK: i32 = 10_000;

impl PostgresLimiter {
    /// Connects to `conninfo` (a `postgresql://` URL or `key=value` pairs),
    /// creates the table and functions unless [`Options::migrate`] is off,
    /// and opens the other connections as calls need them. The first
    /// connection must succeed: a server that is down when this is called
    /// is an error, whatever the policy. Options that cannot apply to the
    /// limits (an explicit [`Lease::Max`](crate::Lease::Max) with a window
    /// limit) are an [`Error::Invalid`], before any connection.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use ratomic::Rule;
    /// use ratomic_postgres::{FailurePolicy, Limits, Options, PostgresLimiter, Source};
    ///
    /// # async fn run() -> ratomic_postgres::Result<()> {
    /// let limits = Limits::new([("burst", Rule::parse("10/s")?), ("daily", Rule::parse("1000/d")?)])?
    ///     .with_prefix("api")?;
    /// let options = Options { policy: FailurePolicy::Fallback, ..Options::default() };
    /// let limiter = PostgresLimiter::connect("postgresql://app@127.0.0.1/app", limits, options).await?;
    /// let d = limiter.allow("user:42").await?;
    /// if !d.allowed() {
    ///     println!("retry in {:?}; denied by {:?}", d.decision.retry_after, d.denied_by().collect::<Vec<_>>());
    /// }
    /// assert!(matches!(d.source, Source::Postgres | Source::Fallback));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(conninfo: &str, limits: Limits, options: Options) -> Result<Self> {
        let mut config: tokio_postgres::Config =
            conninfo.parse().map_err(|e| Error::Connection(format!("bad connection string: {e}")))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.timeout.max(Duration::from_secs(1)));
        }
        let n = options.connections.max(1);
        let inner = Inner {
            driver: Driver::try_new(limits, options)?,
            config,
            slots: (0..n).map(|_| Slot::default()).collect(),
            flight: Mutex::default(),
            // Half the connections, rounded up: on the 2-core server of
            // BENCHMARKS.md, 64 calls in flight over 4 connections decided
            // 1.17-1.48x the hand-written GCRA's rate with 2 batches out at
            // most, 1.00-1.24x with 4 (fewer, larger batches cost the
            // server less), and the other connections stay free for the
            // calls that go as they come.
            flight_limit: n.div_ceil(2),
        };
        let first = tokio::time::timeout(options.timeout.max(Duration::from_secs(1)) * 4, inner.open(options.migrate))
            .await
            .map_err(|_| Error::Timeout)??;
        *inner.slots[0].conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(first);
        Ok(PostgresLimiter { inner: Arc::new(inner) })
    }

    /// The driver: the rules and guards this limiter runs.
    pub fn driver(&self) -> &Driver {
        &self.inner.driver
    }

    /// The rules and prefix.
    pub fn limits(&self) -> &Limits {
        self.inner.driver.limits()
    }

    /// Gives back the unused tokens of every lease this limiter holds (see
    /// [`Lease`](crate::Lease)); call it when the limiter is done with, so
    /// that other processes can have them at once rather than when their
    /// time passes. Calls made afterwards take new leases. Returns how many
    /// limits took tokens back (a lease after which the server granted
    /// anything on its key cannot be taken back: its tokens return as
    /// their time passes).
    pub async fn give_back(&self) -> Result<usize> {
        let mut back = 0;
        for g in self.inner.driver.begin_give_backs() {
            let reply = self
                .timed(async {
                    let (l, g) = (self.limits(), &g);
                    let row = self
                        .inner
                        .with_conn(|conn| async move {
                            conn.client
                                .query_one(
                                    &conn.give_back,
                                    &[&l.prefix(), &g.key(), &None::<i64>, &l.kinds(), &g.ends(), &g.next()],
                                )
                                .await
                        })
                        .await?;
                    row.try_get::<_, Vec<i64>>(0).map_err(|e| Error::Reply(e.to_string()))
                })
                .await;
            back += self.inner.driver.finish_give_back(reply)?;
        }
        Ok(back)
    }

    /// Whether the circuit breaker is open: calls answer by the failure
    /// policy without reaching the server until its cool-down ends.
    pub fn breaker_open(&self) -> bool {
        self.inner.driver.breaker_open()
    }

    /// `allow_n(key, 1)`.
    pub async fn allow(&self, key: impl AsRef<[u8]>) -> Result<MultiDecision> {
        self.call(Op::Allow, key.as_ref(), 1, None).await
    }

    /// Consumes `cost` from every limit on `key` if all allow it, at the
    /// server's clock (see [`schema::ALLOW`](crate::schema::ALLOW)).
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
    /// Returns how many limits changed.
    pub async fn refund(&self, key: impl AsRef<[u8]>, tokens: u64) -> Result<usize> {
        self.refund_inner(key.as_ref(), tokens, None).await
    }

    /// As [`refund`](Self::refund) at `now`.
    pub async fn refund_at(&self, key: impl AsRef<[u8]>, tokens: u64, now: u64) -> Result<usize> {
        self.refund_inner(key.as_ref(), tokens, Some(now)).await
    }

    /// Forgets `key`: every limit is full again.
    pub async fn reset(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let call = self.inner.driver.begin_reset(key.as_ref())?;
        let reply = self.timed(self.inner.query(&call)).await;
        self.inner.driver.finish_reset(reply)
    }

    /// Decides every `(key, cost)` in one statement (one round trip), in
    /// order, all at one reading of the server's clock. Every request is
    /// checked first; an invalid one fails the whole batch with its index
    /// and nothing is sent.
    pub async fn allow_many<K: AsRef<[u8]>>(&self, requests: &[(K, u64)]) -> Result<Vec<MultiDecision>> {
        self.many(requests, None).await
    }

    /// As [`allow_many`](Self::allow_many), every request at `now`.
    pub async fn allow_many_at<K: AsRef<[u8]>>(&self, requests: &[(K, u64)], now: u64) -> Result<Vec<MultiDecision>> {
        self.many(requests, Some(now)).await
    }

    /// Waits until `key` grants `cost`, at most `deadline`; `Ok(None)` when
    /// the wait would pass it (nothing consumed then). Each try is one
    /// round trip; between tries it sleeps the `retry_after` it was given.
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

    /// Removes the rows of this limiter's prefix whose keys are full again
    /// at the server's time (a removed row answers as a full one),
    /// [`GC_CHUNK`] rows per statement; returns how many it removed.
    /// Rows a call holds are skipped. Nothing calls this unless you do (or
    /// start [`spawn_gc`](Self::spawn_gc)).
    pub async fn gc(&self) -> Result<u64> {
        self.gc_inner(None).await
    }

    /// As [`gc`](Self::gc), removing the rows full at `now` (ns on the
    /// caller's clock, the clock the `*_at` calls used).
    pub async fn gc_at(&self, now: u64) -> Result<u64> {
        let at = self.limits().at_us(Some(now))?;
        self.gc_inner(at).await
    }

    /// Runs [`gc`](Self::gc) every `every` on the current tokio runtime
    /// until the returned task is aborted (errors are skipped: the next
    /// round tries again).
    pub fn spawn_gc(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let _ = me.gc().await;
            }
        })
    }

    async fn gc_inner(&self, at: Option<i64>) -> Result<u64> {
        let mut total = 0;
        loop {
            let prefix = self.limits().prefix();
            let row = self
                .inner
                .with_conn(|conn| async move { conn.client.query_one(&conn.gc, &[&prefix, &at, &GC_CHUNK]).await })
                .await?;
            let removed: i64 = row.try_get(0).map_err(|e| Error::Reply(e.to_string()))?;
            total += removed as u64;
            if removed < i64::from(GC_CHUNK) {
                return Ok(total);
            }
        }
    }

    async fn call(&self, op: Op, key: &[u8], cost: u64, now: Option<u64>) -> Result<MultiDecision> {
        let call = match self.inner.driver.begin(op, key, cost, now)? {
            Step::Answer(d) => return Ok(d),
            Step::Send(call) => call,
        };
        if !call.coalescible() {
            let reply = self.timed(self.inner.query(&call)).await;
            return self.inner.driver.finish(&call, reply);
        }
        let rx = {
            let mut flight = self.inner.flight();
            if flight.out < self.inner.flight_limit {
                flight.out += 1;
                None
            } else {
                let (tx, rx) = tokio::sync::oneshot::channel();
                let due = tokio::time::Instant::now() + self.inner.driver.options().timeout;
                flight.waiting.push_back(Waiting { call: call.clone(), due, tx });
                Some(rx)
            }
        };
        match rx {
            None => {
                // Alone, as without coalescing. When the statement ends (or
                // this future is dropped midway), the calls that came
                // meanwhile go together.
                let turn = Turn(Some(self.inner.clone()));
                let reply = self.timed(self.inner.query(&call)).await;
                // The reply goes to the breaker before the turn passes on:
                // a failure that opens it answers the waiting calls too.
                let answer = self.inner.driver.finish(&call, reply);
                drop(turn);
                answer
            }
            Some(rx) => match rx.await {
                Ok(answer) => answer,
                // The batch's task was dropped (its runtime shut down).
                Err(_) => self
                    .inner
                    .driver
                    .finish(&call, Err(Error::Connection("the statement carrying this call was dropped".into()))),
            },
        }
    }

    async fn refund_inner(&self, key: &[u8], tokens: u64, now: Option<u64>) -> Result<usize> {
        if now.is_none() && self.inner.driver.refund_lease(key, tokens) {
            // The lease's own slots, freed here: every limit took them.
            return Ok(self.limits().rules().len());
        }
        let call = self.inner.driver.begin_refund(key, tokens, now)?;
        let reply = self.timed(self.inner.query(&call)).await;
        self.inner.driver.finish_refund(reply)
    }

    async fn many<K: AsRef<[u8]>>(&self, requests: &[(K, u64)], now: Option<u64>) -> Result<Vec<MultiDecision>> {
        let batch = match self.inner.driver.begin_many(requests.iter().map(|(k, c)| (k.as_ref(), *c)), now)? {
            BatchStep::Answer(ds) => return Ok(ds),
            BatchStep::Send(batch) => batch,
        };
        let reply = self.timed(self.inner.query_many(&batch)).await;
        self.inner.driver.finish_many(&batch, reply)
    }

    async fn timed<T>(&self, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        tokio::time::timeout(self.inner.driver.options().timeout, f).await.map_err(|_| Error::Timeout)?
    }
}

/// One of the plain allows' statements out. When it ends, or is dropped
/// midway, the calls waiting go in the next statement: a task of its own,
/// which holds this turn until none waits, so that no caller's future has
/// to carry the others'.
struct Turn(Option<Arc<Inner>>);

impl Drop for Turn {
    fn drop(&mut self) {
        let Some(inner) = self.0.take() else { return };
        {
            let mut flight = inner.flight();
            if flight.waiting.is_empty() {
                flight.out -= 1;
                return;
            }
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn(drain(Drain(Some(inner))))),
            Err(_) => inner.leave(),
        }
    }
}

/// The turn a batch's task holds. Dropped before it is done (its runtime
/// shuts down), it hands nothing on: spawning would be dropped too.
struct Drain(Option<Arc<Inner>>);

impl Drop for Drain {
    fn drop(&mut self) {
        if let Some(inner) = self.0.take() {
            inner.leave();
        }
    }
}

/// Sends the waiting calls, [`MAX_BATCH`] at a time, until none is left.
async fn drain(mut turn: Drain) {
    let inner = turn.0.clone().expect("a turn");
    loop {
        let taken: Vec<Waiting> = {
            let mut flight = inner.flight();
            // A caller that is gone (its future dropped) is not sent.
            flight.waiting.retain(|w| !w.tx.is_closed());
            if flight.waiting.is_empty() {
                flight.out -= 1;
                turn.0 = None;
                return;
            }
            let n = flight.waiting.len().min(MAX_BATCH);
            flight.waiting.drain(..n).collect()
        };
        // Calls already due (they waited out their timeout behind slow
        // statements) are not sent: the policy answers them, as one failed
        // statement's calls.
        let now = tokio::time::Instant::now();
        let (late, taken): (Vec<Waiting>, Vec<Waiting>) = taken.into_iter().partition(|w| w.due <= now);
        if !late.is_empty() {
            let (calls, txs): (Vec<Call>, Vec<_>) = late.into_iter().map(|w| (w.call, w.tx)).unzip();
            answer(&inner, calls, txs, Err(Error::Timeout));
        }
        let Some(due) = taken.iter().map(|w| w.due).min() else { continue };
        let (calls, mut txs): (Vec<Call>, Vec<_>) = taken.into_iter().map(|w| (w.call, w.tx)).unzip();
        let batch = match inner.driver.coalesce(calls) {
            Ok(Coalesced::Send(batch)) => batch,
            // The statement they waited for failed and opened the breaker:
            // the server is down, and calls begun now are answered by the
            // policy at once. So are these, rather than each waiting out
            // its timeout.
            Ok(Coalesced::Answered(answers)) => {
                for (tx, answer) in txs.into_iter().zip(answers) {
                    drop(tx.send(answer));
                }
                continue;
            }
            // Only coalescible calls wait: not reached.
            Err(e) => {
                txs.into_iter().for_each(|tx| drop(tx.send(Err(e.clone()))));
                continue;
            }
        };
        if batch.len() == 1 {
            // One call alone goes by its own statement (the plain upsert).
            let (call, tx) = (batch.into_calls().remove(0), txs.remove(0));
            let reply = inner.until(due, inner.query(&call)).await;
            drop(tx.send(inner.driver.finish(&call, reply)));
            continue;
        }
        let reply = inner.until(due, inner.query_many(&batch)).await;
        for (tx, answer) in txs.into_iter().zip(inner.driver.finish_coalesced(&batch, reply)) {
            drop(tx.send(answer));
        }
    }
}

/// Answers `calls` as a coalesced statement that ended with `reply`.
fn answer(
    inner: &Inner,
    calls: Vec<Call>,
    txs: Vec<tokio::sync::oneshot::Sender<Result<MultiDecision>>>,
    reply: Result<Vec<i64>>,
) {
    let answers = match inner.driver.coalesce(calls) {
        Ok(Coalesced::Send(batch)) => inner.driver.finish_coalesced(&batch, reply),
        Ok(Coalesced::Answered(answers)) => answers,
        Err(e) => vec![Err(e); txs.len()],
    };
    for (tx, answer) in txs.into_iter().zip(answers) {
        drop(tx.send(answer));
    }
}

impl Inner {
    fn flight(&self) -> std::sync::MutexGuard<'_, Flight> {
        self.flight.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A turn ends with no task to take the calls waiting: the last one
    /// out drops them, and their callers are answered as a failed
    /// statement's are (see [`PostgresLimiter::call`]).
    fn leave(&self) {
        let mut flight = self.flight();
        flight.out -= 1;
        if flight.out == 0 {
            flight.waiting.clear();
        }
    }

    /// `f`, ended at `due` with [`Error::Timeout`] (and not begun if that
    /// has passed).
    async fn until<T>(&self, due: tokio::time::Instant, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        if tokio::time::Instant::now() >= due {
            return Err(Error::Timeout);
        }
        tokio::time::timeout_at(due, f).await.map_err(|_| Error::Timeout)?
    }

    /// One [`schema::MANY`] of `batch` (op `a`, the server's time).
    async fn query_many(&self, batch: &Batch) -> Result<Vec<i64>> {
        let l = self.driver.limits();
        let (keys, amounts, at) = (batch.keys(), batch.amounts(), batch.at_us());
        let (keys, amounts, at) = (&keys, &amounts, &at);
        let row = self
            .with_conn(|conn| async move {
                conn.client
                    .query_one(
                        &conn.many,
                        &[&Op::Allow.code(), &l.prefix(), keys, amounts, at, &l.kinds(), &l.p1(), &l.p2()],
                    )
                    .await
            })
            .await?;
        row.try_get::<_, Vec<i64>>(0).map_err(|e| Error::Reply(e.to_string()))
    }

    /// Runs `f` on the next connection; a connection that failed under it
    /// (closed, or the server ending the session: `pg_terminate_backend`,
    /// a shutdown) is dropped, so that the next call opens a new one
    /// rather than failing on it too.
    async fn with_conn<T, F, Fut>(&self, f: F) -> Result<T>
    where
        F: FnOnce(Arc<Conn>) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    {
        // The least busy connection, the first of them on a tie: calls one
        // at a time stay on one warm connection (taking them in turn woke a
        // cold server process each call, twice the latency), calls at once
        // spread over all.
        let slot = self.slots.iter().min_by_key(|s| s.busy.load(Ordering::Relaxed)).expect("at least one slot");
        slot.busy.fetch_add(1, Ordering::Relaxed);
        let _busy = Busy(&slot.busy);
        let conn = self.conn_in(slot).await?;
        match f(conn.clone()).await {
            Ok(v) => Ok(v),
            Err(e) => {
                let ended = e.is_closed()
                    || conn.client.is_closed()
                    || e.as_db_error().is_none()
                    || e.code().is_some_and(|c| c.code().starts_with("57P") || c.code().starts_with("08"));
                if ended {
                    let mut held = slot.conn.lock().unwrap_or_else(|e| e.into_inner());
                    if held.as_ref().is_some_and(|c| Arc::ptr_eq(c, &conn)) {
                        *held = None;
                    }
                }
                Err(map_err(e))
            }
        }
    }

    /// `slot`'s connection, opened again if it was closed.
    async fn conn_in(&self, slot: &Slot) -> Result<Arc<Conn>> {
        let live = |s: &Slot| {
            s.conn.lock().unwrap_or_else(|e| e.into_inner()).as_ref().filter(|c| !c.client.is_closed()).cloned()
        };
        if let Some(c) = live(slot) {
            return Ok(c);
        }
        let _connecting = slot.connecting.lock().await;
        if let Some(c) = live(slot) {
            return Ok(c); // another call opened it meanwhile
        }
        let c = self.open(false).await?;
        *slot.conn.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.clone());
        Ok(c)
    }

    /// Opens a connection: the statement timeout, the migration if asked,
    /// the statements prepared.
    async fn open(&self, migrate: bool) -> Result<Arc<Conn>> {
        let (client, connection) = self.config.connect(NoTls).await.map_err(map_err)?;
        tokio::spawn(async move {
            // Ends when the connection closes; its error reaches the calls.
            let _ = connection.await;
        });
        let options = self.driver.options();
        let ms = options.timeout.as_millis().max(1);
        client.batch_execute(&format!("SET statement_timeout = {ms}")).await.map_err(map_err)?;
        if migrate {
            client.batch_execute(&schema::migration(options.unlogged)).await.map_err(map_err)?;
        }
        let (call, allow, many, gc, lease, give_back) = tokio::try_join!(
            client.prepare(schema::CALL),
            client.prepare(schema::ALLOW),
            client.prepare(schema::MANY),
            client.prepare(schema::GC),
            client.prepare(schema::LEASE),
            client.prepare(schema::GIVE_BACK)
        )
        .map_err(map_err)?;
        Ok(Arc::new(Conn { client, call, allow, many, gc, lease, give_back }))
    }

    async fn query(&self, call: &crate::driver::Call) -> Result<Vec<i64>> {
        let l = self.driver.limits();
        let (row, upsert) = self
            .with_conn(|conn| async move {
                if let (Statement::Allow, Some((_, tau))) = (call.statement(), l.one_bucket()) {
                    let granted = conn
                        .client
                        .query_opt(&conn.allow, &[&l.prefix(), &call.key(), &call.at_us(), &call.increment(), &tau])
                        .await?;
                    if let Some(row) = granted {
                        return Ok((row, true));
                    }
                    // Not granted by the upsert: ratomic_v1_call decides (see Statement::Allow).
                }
                if call.lease() > 0 {
                    return conn
                        .client
                        .query_one(
                            &conn.lease,
                            &[
                                &l.prefix(),
                                &call.key(),
                                &call.at_us(),
                                &call.amount(),
                                &call.lease_size(),
                                &l.kinds(),
                                &l.p1(),
                                &l.p2(),
                            ],
                        )
                        .await
                        .map(|row| (row, false));
                }
                conn.client
                    .query_one(
                        &conn.call,
                        &[
                            &call.op().code(),
                            &l.prefix(),
                            &call.key(),
                            &call.at_us(),
                            &call.amount(),
                            &l.kinds(),
                            &l.p1(),
                            &l.p2(),
                        ],
                    )
                    .await
                    .map(|row| (row, false))
            })
            .await?;
        if upsert {
            // The reset after a grant: the driver makes the rest of the reply.
            return row.try_get::<_, i64>(0).map(|r| vec![r]).map_err(|e| Error::Reply(e.to_string()));
        }
        row.try_get::<_, Vec<i64>>(0).map_err(|e| Error::Reply(e.to_string()))
    }
}

/// Counts a statement out of its connection when it ends (or is dropped).
struct Busy<'a>(&'a AtomicUsize);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

fn map_err(e: tokio_postgres::Error) -> Error {
    if let Some(db) = e.as_db_error() {
        Error::Server(format!("{}: {}", db.code().code(), db.message()))
    } else {
        Error::Connection(e.to_string())
    }
}

/// The blocking face: the same limiter driven by its own small tokio
/// runtime, for callers without one (the C ABI, the CLI). Share it between
/// threads: their calls are pipelined on the limiter's connections. Do not
/// call it (or drop it) from inside an async runtime's task: use
/// [`PostgresLimiter`] there.
#[derive(Debug)]
pub struct BlockingPostgresLimiter {
    runtime: tokio::runtime::Runtime,
    inner: PostgresLimiter,
}

impl BlockingPostgresLimiter {
    /// Connects to `conninfo` (see [`PostgresLimiter::connect`]).
    pub fn connect(conninfo: &str, limits: Limits, options: Options) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| Error::Connection(format!("cannot start the I/O thread: {e}")))?;
        let inner = runtime.block_on(PostgresLimiter::connect(conninfo, limits, options))?;
        Ok(BlockingPostgresLimiter { runtime, inner })
    }

    /// The async limiter underneath.
    pub fn inner(&self) -> &PostgresLimiter {
        &self.inner
    }

    /// See [`PostgresLimiter::allow`].
    pub fn allow(&self, key: impl AsRef<[u8]>) -> Result<MultiDecision> {
        self.runtime.block_on(self.inner.allow(key))
    }

    /// See [`PostgresLimiter::allow_n`].
    pub fn allow_n(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<MultiDecision> {
        self.runtime.block_on(self.inner.allow_n(key, cost))
    }

    /// See [`PostgresLimiter::allow_at`].
    pub fn allow_at(&self, key: impl AsRef<[u8]>, cost: u64, now: u64) -> Result<MultiDecision> {
        self.runtime.block_on(self.inner.allow_at(key, cost, now))
    }

    /// See [`PostgresLimiter::peek`].
    pub fn peek(&self, key: impl AsRef<[u8]>, cost: u64) -> Result<MultiDecision> {
        self.runtime.block_on(self.inner.peek(key, cost))
    }

    /// See [`PostgresLimiter::peek_at`].
    pub fn peek_at(&self, key: impl AsRef<[u8]>, cost: u64, now: u64) -> Result<MultiDecision> {
        self.runtime.block_on(self.inner.peek_at(key, cost, now))
    }

    /// See [`PostgresLimiter::refund`].
    pub fn refund(&self, key: impl AsRef<[u8]>, tokens: u64) -> Result<usize> {
        self.runtime.block_on(self.inner.refund(key, tokens))
    }

    /// See [`PostgresLimiter::refund_at`].
    pub fn refund_at(&self, key: impl AsRef<[u8]>, tokens: u64, now: u64) -> Result<usize> {
        self.runtime.block_on(self.inner.refund_at(key, tokens, now))
    }

    /// See [`PostgresLimiter::reset`].
    pub fn reset(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.runtime.block_on(self.inner.reset(key))
    }

    /// See [`PostgresLimiter::allow_many`].
    pub fn allow_many<K: AsRef<[u8]>>(&self, requests: &[(K, u64)]) -> Result<Vec<MultiDecision>> {
        self.runtime.block_on(self.inner.allow_many(requests))
    }

    /// See [`PostgresLimiter::allow_many_at`].
    pub fn allow_many_at<K: AsRef<[u8]>>(&self, requests: &[(K, u64)], now: u64) -> Result<Vec<MultiDecision>> {
        self.runtime.block_on(self.inner.allow_many_at(requests, now))
    }

    /// See [`PostgresLimiter::acquire`].
    pub fn acquire(&self, key: impl AsRef<[u8]>, cost: u64, deadline: Duration) -> Result<Option<MultiDecision>> {
        self.runtime.block_on(self.inner.acquire(key, cost, deadline))
    }

    /// See [`PostgresLimiter::give_back`].
    pub fn give_back(&self) -> Result<usize> {
        self.runtime.block_on(self.inner.give_back())
    }

    /// See [`PostgresLimiter::gc`].
    pub fn gc(&self) -> Result<u64> {
        self.runtime.block_on(self.inner.gc())
    }

    /// See [`PostgresLimiter::gc_at`].
    pub fn gc_at(&self, now: u64) -> Result<u64> {
        self.runtime.block_on(self.inner.gc_at(now))
    }
}
