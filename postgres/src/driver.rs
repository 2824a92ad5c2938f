//! The sans-IO driver: everything a PostgreSQL-backed call does except
//! moving bytes — input checks, the deny cache, the circuit breaker, the
//! statement's parameters, the decoding of its row and the failure policy.
//! The crate's own client ([`PostgresLimiter`](crate::PostgresLimiter))
//! and the Python and Node faces (which send the statement through the
//! user's own PostgreSQL client) all run it, so every face decides the
//! same way.
//!
//! A call is a [`Driver::begin`] that either answers at once
//! ([`Step::Answer`]: the deny cache, or the failure policy while the
//! breaker is open) or asks for one statement ([`Step::Send`]); the caller
//! runs [`schema::CALL`](crate::schema::CALL) with the call's parameters
//! and hands the row's `bigint[]`, or the way it failed, to
//! [`Driver::finish`].
//!
//! ```
//! use ratomic::Rule;
//! use ratomic_postgres::{Driver, Limits, Op, Options, Source, Step};
//!
//! let driver = Driver::new(Limits::single(Rule::parse("10/s")?)?, Options::default());
//! let Step::Send(call) = driver.begin(Op::Allow, b"user:42", 1, None)? else { unreachable!() };
//! // SELECT ratomic_v1_call($1 … $8) with call.op().code(), limits.prefix(), call.key(),
//! // call.at_us(), call.amount(), limits.kinds(), limits.p1(), limits.p2(); say it answered:
//! let d = driver.finish(&call, Ok(vec![1, 1, 9, 10, 0, 100_000]))?;
//! assert!(d.allowed() && d.source == Source::Postgres);
//! # Ok::<(), ratomic_postgres::Error>(())
//! ```

use std::time::{Duration, Instant};

use ratomic::Decision;

use crate::error::{Error, Result};
use crate::limits::{Limits, MultiDecision, Op};
use ratomic::backend::{Breaker, DenyCache, Lease, Leases};

/// What a limiter answers when the server fails (a refused connection, a
/// timeout, a server error). Chosen by the caller: there is no hidden
/// default beyond [`FailurePolicy::ReturnError`], which hides nothing.
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
    /// [`Source::Fallback`](crate::Source::Fallback). Its state is this
    /// process's alone.
    Fallback,
}

/// How a limiter talks to PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The longest a call may take, round trip included (default 100 ms).
    /// The driver does not read it: whoever moves the bytes enforces it and
    /// reports [`Error::Timeout`]. The crate's client also sets the
    /// connection's `statement_timeout` to it, so that the server stops a
    /// call its client gave up on.
    pub timeout: Duration,
    /// What to answer when the server fails.
    pub policy: FailurePolicy,
    /// Backend failures in a row that open the circuit breaker (default 5;
    /// 0 turns it off). While open, calls do not reach the server: the
    /// policy answers at once.
    pub breaker_threshold: u32,
    /// How long the breaker stays open before calls try the server again
    /// (default 1 s).
    pub breaker_cooldown: Duration,
    /// The time backend failures in a row may take in all before the
    /// breaker opens, whatever their count (default 1 s; zero: no bound).
    pub breaker_failure_time: Duration,
    /// Keys of server denials kept to answer locally until their
    /// `retry_after` ends, marked [`Source::DenyCache`](crate::Source::DenyCache)
    /// (default 10,000; 0 turns it off). Only calls at the server's time,
    /// and only for the same cost. The price: a `refund` or `reset` from
    /// another process is seen here only when the cached denial ends.
    pub deny_cache: usize,
    /// Connections the crate's client opens (default 4). Each carries any
    /// number of calls at once (tokio-postgres pipelines them); more
    /// connections let the server work on several at a time. Half of them
    /// (rounded up) is how many statements of plain allows the client has
    /// out at once: the calls beyond wait and go together in one statement
    /// (see [`PostgresLimiter`](crate::PostgresLimiter)).
    pub connections: usize,
    /// Whether the crate's client creates the table and functions when it
    /// connects (default true; see [`schema`](crate::schema)).
    pub migrate: bool,
    /// Whether that migration makes the table `UNLOGGED` (default false;
    /// see [`schema`](crate::schema) for the trade).
    pub unlogged: bool,
    /// Whether calls lease tokens, so that most of a hot key's calls are
    /// answered in memory (default [`Lease::Off`]; [`Lease::Auto`] leases
    /// where exact, i.e. when every limit is a token bucket). Exact
    /// fleet-wide, as on Redis (the same engine, core's
    /// `ratomic::backend::lease`); the price is that tokens a process holds
    /// are not available to the others meanwhile, so near the limit the
    /// fleet may grant fewer than the bucket allows (see [`Lease`]).
    pub lease: Lease,
    /// Keys whose leases (and recent round trips, which size them) are kept
    /// (default 10,000). A lease dropped to make room is not given back:
    /// its tokens return to the fleet as their time passes.
    pub lease_keys: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_millis(100),
            policy: FailurePolicy::ReturnError,
            breaker_threshold: 5,
            breaker_cooldown: Duration::from_secs(1),
            breaker_failure_time: Duration::from_secs(1),
            deny_cache: 10_000,
            connections: 4,
            migrate: true,
            unlogged: false,
            lease: Lease::Off,
            lease_keys: 10_000,
        }
    }
}

/// A call's rules, guards and failure policy, shared by every face.
#[derive(Debug)]
pub struct Driver {
    limits: Limits,
    options: Options,
    fallback: Option<ratomic::Limiter>,
    breaker: Breaker,
    denials: DenyCache,
    leases: Option<Leases>,
}

/// One statement to send: [`schema::CALL`](crate::schema::CALL) with
/// `op().code()`, the prefix, `key()`, `at_us()`, `amount()` and the
/// limits' kinds and parameters.
#[derive(Clone, Debug)]
pub struct Call {
    op: Op,
    key: Vec<u8>,
    cost: u64,
    now: Option<u64>,
    at_us: Option<i64>,
    /// When it was made: a failure's time counts towards the breaker, and a
    /// lease's bound on the server's time starts here (before the send).
    started: Instant,
    /// Tokens it asks to lease beyond its cost (0: none).
    lease: u64,
    /// An allow on limits that are one token bucket.
    one_bucket: bool,
    /// For such an allow: cost × T, µs (below 2^61: the cost is at most the
    /// capacity, and capacity × T is checked when the rule is made).
    increment: i64,
}

/// Which statement a [`Call`] goes by ([`Call::statement`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Statement {
    /// [`schema::CALL`](crate::schema::CALL): `op().code()`, the prefix,
    /// `key()`, `at_us()`, `amount()`, the limits' kinds and parameters.
    Call,
    /// [`schema::ALLOW`](crate::schema::ALLOW), the common call (an allow
    /// on one token bucket asking no lease): the prefix, `key()`,
    /// `at_us()`, [`increment()`](Call::increment) and τ (the second of
    /// [`Limits::one_bucket`](crate::Limits::one_bucket)). Its row's one
    /// `bigint` is the reply to finish with (as a one-integer reply); no
    /// row back means it did not grant: send [`Call::general`] and finish
    /// with its reply.
    Allow,
    /// [`schema::LEASE`](crate::schema::LEASE): the prefix, `key()`,
    /// `at_us()`, `amount()`, `lease_size()`, the kinds and parameters.
    Lease,
}

impl Call {
    /// What it asks (`$1` is `op().code()`).
    pub fn op(&self) -> Op {
        self.op
    }

    /// The statement it goes by, and so its parameters.
    pub fn statement(&self) -> Statement {
        if self.lease > 0 {
            Statement::Lease
        } else if self.one_bucket {
            Statement::Allow
        } else {
            Statement::Call
        }
    }

    /// The same call by [`Statement::Call`] (`ratomic_v1_call`): what a
    /// face sends when [`Statement::Allow`]'s upsert returned no row (it
    /// did not grant; the function decides again, and answers a denial
    /// with every field).
    pub fn general(&self) -> Call {
        Call { one_bucket: false, ..self.clone() }
    }

    /// Whether it may go in one statement with others
    /// ([`Driver::coalesce`]): an `Allow` at the server's time that asks
    /// for no lease.
    pub fn coalescible(&self) -> bool {
        self.op == Op::Allow && self.now.is_none() && self.lease == 0
    }

    /// The user's key (`$3`, bytea).
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The time in whole µs, or `None` for the server's clock (`$4`).
    pub fn at_us(&self) -> Option<i64> {
        self.at_us
    }

    /// The cost, or the tokens of a refund (`$5`), capped at `i64::MAX`.
    pub fn amount(&self) -> i64 {
        i64::try_from(self.cost).unwrap_or(i64::MAX)
    }

    /// [`Statement::Allow`]'s `$4`: the cost × the bucket's emission
    /// interval, µs (0 for a call that goes by another statement).
    pub fn increment(&self) -> i64 {
        self.increment
    }

    /// The tokens it asks to lease beyond its cost (0: none). When above
    /// 0, send [`schema::LEASE`](crate::schema::LEASE) (with this as `$5`)
    /// instead of [`schema::CALL`](crate::schema::CALL).
    pub fn lease(&self) -> u64 {
        self.lease
    }

    /// [`lease`](Self::lease) as the statement's `$5`.
    pub fn lease_size(&self) -> i64 {
        i64::try_from(self.lease).unwrap_or(i64::MAX)
    }
}

/// A give-back of one lease's unused tokens to send:
/// [`schema::GIVE_BACK`](crate::schema::GIVE_BACK) with the prefix,
/// `key()`, the time (NULL: the server's), the kinds, `ends()` and `next()`.
#[derive(Clone, Debug)]
pub struct GiveBack {
    key: Vec<u8>,
    ends: Vec<i64>,
    next: Vec<i64>,
}

impl GiveBack {
    /// The user's key (`$2`, bytea).
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// Each limit's lease end, server µs (`$5`, bigint[]).
    pub fn ends(&self) -> &[i64] {
        &self.ends
    }

    /// Each limit's first slot the lease did not grant, server µs (`$6`, bigint[]).
    pub fn next(&self) -> &[i64] {
        &self.next
    }
}

/// A batch to send: [`schema::MANY`](crate::schema::MANY) with `keys()` and
/// `amounts()` in place of one key and amount.
#[derive(Clone, Debug)]
pub struct Batch {
    calls: Vec<Call>,
    at_us: Option<i64>,
    started: Instant,
}

/// What [`Driver::coalesce`] made of calls that waited.
#[derive(Debug)]
pub enum Coalesced {
    /// The breaker opened while they waited: each call's answer by the
    /// failure policy, in order. Send nothing.
    Answered(Vec<Result<MultiDecision>>),
    /// Send this batch and end it with
    /// [`finish_coalesced`](Driver::finish_coalesced).
    Send(Batch),
}

impl Batch {
    /// Its calls, in order: a face that sends a batch of one as that call
    /// alone ([`Statement::Allow`] is cheaper than a batch statement) ends
    /// it with [`finish`](Driver::finish).
    pub fn into_calls(self) -> Vec<Call> {
        self.calls
    }

    /// The keys, in request order (`$3`, bytea[]).
    pub fn keys(&self) -> Vec<&[u8]> {
        self.calls.iter().map(|c| &c.key[..]).collect()
    }

    /// The costs, in request order (`$4`, bigint[]).
    pub fn amounts(&self) -> Vec<i64> {
        self.calls.iter().map(Call::amount).collect()
    }

    /// The time in whole µs, or `None` for the server's clock (`$5`).
    pub fn at_us(&self) -> Option<i64> {
        self.at_us
    }

    /// How many requests it carries.
    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// Whether it carries none.
    pub fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }
}

/// What [`Driver::begin`] asks of the caller.
#[derive(Debug)]
#[must_use]
pub enum Step {
    /// The answer, with no round trip: a cached denial, or the failure
    /// policy while the circuit breaker is open.
    Answer(MultiDecision),
    /// Send this call and give its reply to [`Driver::finish`].
    Send(Call),
}

/// What [`Driver::begin_many`] asks of the caller.
#[derive(Debug)]
#[must_use]
pub enum BatchStep {
    /// The answers, with no round trip (the breaker is open).
    Answer(Vec<MultiDecision>),
    /// Send this batch in one statement and give its reply to
    /// [`Driver::finish_many`].
    Send(Batch),
}

impl Driver {
    /// A driver for `limits` with `options`.
    ///
    /// # Panics
    /// If the options cannot apply to these limits (an explicit
    /// [`Lease::Max`] with a window limit): [`try_new`](Self::try_new) says
    /// so as an error.
    pub fn new(limits: Limits, options: Options) -> Self {
        Self::try_new(limits, options).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A driver for `limits` with `options`, or why the options cannot
    /// apply to them (an explicit [`Lease::Max`] with a window limit).
    pub fn try_new(limits: Limits, options: Options) -> Result<Self> {
        let leases = Leases::new(&limits.buckets(), options.lease, options.lease_keys).map_err(|reason| {
            Error::Invalid(ratomic::Error::InvalidArgument {
                name: "lease",
                value: format!("{:?}", options.lease),
                reason: reason.into(),
            })
        })?;
        let fallback = (options.policy == FailurePolicy::Fallback).then(|| {
            let rules = limits.names().map(str::to_owned).zip(limits.core_rules().iter().copied());
            // The same rules were accepted by the in-memory engine already.
            ratomic::Limiter::new(rules).expect("rules accepted by Limits::new")
        });
        Ok(Driver {
            breaker: Breaker::new(options.breaker_threshold, options.breaker_cooldown, options.breaker_failure_time),
            denials: DenyCache::new(options.deny_cache),
            limits,
            options,
            fallback,
            leases,
        })
    }

    /// The largest lease this driver takes, or `None` if it takes none.
    pub fn lease_max(&self) -> Option<u64> {
        self.leases.as_ref().map(Leases::max)
    }

    /// Keys holding a lease now.
    pub fn leases_held(&self) -> usize {
        self.leases.as_ref().map_or(0, Leases::held)
    }

    /// The rules and prefix.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Whether the circuit breaker is open: calls answer by the failure
    /// policy without reaching the server until its cool-down ends.
    pub fn breaker_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// Starts an `Allow` or `Peek` of `cost` on `key`, at `now` (ns on the
    /// caller's clock) or, when `None`, at the server's clock. Bad input
    /// is an [`Error::Invalid`] here, before anything is sent.
    pub fn begin(&self, op: Op, key: &[u8], cost: u64, now: Option<u64>) -> Result<Step> {
        if !matches!(op, Op::Allow | Op::Peek) {
            return Err(Error::Invalid(ratomic::Error::InvalidArgument {
                name: "op",
                value: format!("{op:?}"),
                reason: "refunds start with begin_refund, resets with begin_reset".into(),
            }));
        }
        let mut call = self.call(op, key, cost, now)?;
        // The lease first: its slots are this process's whatever the server
        // answered others since (a cached denial included).
        if let (Some(leases), Op::Allow, true) = (&self.leases, op, cost > 0) {
            let caller = call.at_us.map(|us| us as u64);
            match leases.grant(key, cost, leases.local_us(), caller, 0, true) {
                Ok(entries) => return Ok(Step::Answer(self.limits.lease_decision(entries))),
                Err(size) => call.lease = size,
            }
        }
        let local = if now.is_none() && op == Op::Allow {
            self.denials.get(key, cost).map(|d| Ok(self.limits.cached_decision(d)))
        } else {
            None
        };
        let local = local.or_else(|| {
            self.breaker
                .is_open()
                .then(|| self.on_failure(Error::Connection("the circuit breaker is open".into()), &call))
        });
        match local {
            Some(answer) => {
                if call.lease > 0 {
                    // Asked for, never sent: the key may ask again.
                    self.leases.as_ref().expect("asked for a lease").failed(key);
                }
                answer.map(Step::Answer)
            }
            None => Ok(Step::Send(call)),
        }
    }

    /// Ends a call [`begin`](Self::begin) asked to send, with the row's
    /// `bigint[]` or the way sending it failed. A backend failure
    /// (connection, timeout, server, reply) counts towards the breaker and
    /// is answered by the failure policy; a reply that does not decode is
    /// such a failure.
    pub fn finish(&self, call: &Call, reply: Result<Vec<i64>>) -> Result<MultiDecision> {
        self.finish_after(call, reply, call.started.elapsed())
    }

    /// [`finish`](Self::finish) of a call that took `spent` (towards
    /// [`Options::breaker_failure_time`]).
    ///
    /// A lease the call brought is kept only if it was made (its
    /// [`begin`](Self::begin)) before it was sent, as the `Call` records;
    /// `spent` is no such bound and is not used for it.
    pub fn finish_after(&self, call: &Call, reply: Result<Vec<i64>>, spent: Duration) -> Result<MultiDecision> {
        let received = Instant::now();
        let leased = self.leases.as_ref().filter(|_| call.op == Op::Allow);
        let n = self.limits.rules().len();
        let decoded = reply.and_then(|r| {
            if leased.is_some() && r.len() == 1 + 5 * n + 2 + n {
                self.limits.decode_lease(&r).map(|(d, g)| (d, Some(g)))
            } else if call.one_bucket && r.len() == 1 {
                // Statement::Allow's reply (the general one is 1 + 5 long).
                self.limits.decode_allow(&r).map(|d| (d, None))
            } else {
                self.limits.decode(&r).map(|d| (d, None))
            }
        });
        match decoded {
            Ok((d, grant)) => {
                self.breaker.success();
                if call.now.is_none() && call.op == Op::Allow {
                    self.denials.insert(&call.key, call.cost, d.decision);
                }
                if let Some(leases) = leased {
                    let asked = call.lease > 0;
                    let (sent, x) = (leases.local_us_at(call.started), leases.local_us_at(received));
                    let grant = grant.filter(|_| asked && d.allowed());
                    leases.arrived(&call.key, sent, x, call.now.is_some(), grant, asked);
                }
                Ok(d)
            }
            Err(e) => {
                if let Some(leases) = leased {
                    leases.failed(&call.key);
                }
                if !e.is_backend() {
                    return Err(e);
                }
                self.breaker.failure(spent);
                self.on_failure(e, call)
            }
        }
    }

    /// Takes every lease this driver holds and returns the give-backs of
    /// their unused tokens (send each, [`schema::GIVE_BACK`](crate::schema::GIVE_BACK),
    /// and hand its reply to [`finish_give_back`](Self::finish_give_back)):
    /// for a limiter that is closing. Calls after this take new leases.
    pub fn begin_give_backs(&self) -> Vec<GiveBack> {
        let Some(leases) = &self.leases else { return Vec::new() };
        let us = |v: Vec<u64>| v.into_iter().map(|x| i64::try_from(x).unwrap_or(i64::MAX)).collect();
        leases.drain().into_iter().map(|u| GiveBack { key: u.key, ends: us(u.ends), next: us(u.next) }).collect()
    }

    /// Ends a give-back: how many limits took their tokens back (0 when
    /// other calls were granted after the lease, whose slots it cannot take
    /// back).
    pub fn finish_give_back(&self, reply: Result<Vec<i64>>) -> Result<usize> {
        match reply? {
            r if r.len() == 1 && r[0] >= 0 && r[0] as usize <= self.limits.rules().len() => Ok(r[0] as usize),
            r => Err(Error::Reply(format!("expected the number of limits given back, got {r:?}"))),
        }
    }

    /// Gives `tokens` back to this process's lease of `key`, if it holds one
    /// that granted at least that many of its slots, still ahead: then no
    /// round trip is needed (returns true). Otherwise nothing changed:
    /// refund through the server ([`begin_refund`](Self::begin_refund)),
    /// which never takes back slots a lease holds.
    pub fn refund_lease(&self, key: &[u8], tokens: u64) -> bool {
        match &self.leases {
            Some(leases) if tokens > 0 && self.limits.check(key, 0).is_ok() => {
                leases.refund(key, tokens, leases.local_us())
            }
            _ => false,
        }
    }

    /// Starts giving back `tokens` to every limit on `key` (never above
    /// full). Always a round trip: the failure policy does not answer
    /// refunds, their errors are returned.
    pub fn begin_refund(&self, key: &[u8], tokens: u64, now: Option<u64>) -> Result<Call> {
        self.limits.check(key, 0)?;
        let call = self.call(Op::Refund, key, 0, now).map(|c| Call { cost: tokens, ..c })?;
        self.denials.forget(key);
        Ok(call)
    }

    /// Ends a refund: how many limits changed.
    pub fn finish_refund(&self, reply: Result<Vec<i64>>) -> Result<usize> {
        self.limits.decode_refund(&reply?)
    }

    /// Starts forgetting `key` (every limit full again, but for the slots
    /// leases still hold: a token bucket stays at the end of its latest
    /// lease until that time).
    pub fn begin_reset(&self, key: &[u8]) -> Result<Call> {
        let call = self.call(Op::Reset, key, 0, None)?;
        self.denials.forget(key);
        Ok(call)
    }

    /// Ends a reset.
    pub fn finish_reset(&self, reply: Result<Vec<i64>>) -> Result<()> {
        match reply? {
            r if r == [1] => Ok(()),
            r => Err(Error::Reply(format!("expected 1, got {r:?}"))),
        }
    }

    /// Starts a batch of allows: every request is checked first (an invalid
    /// one fails the whole batch with its index, and nothing is sent).
    pub fn begin_many<'k>(
        &self,
        requests: impl IntoIterator<Item = (&'k [u8], u64)>,
        now: Option<u64>,
    ) -> Result<BatchStep> {
        let at_us = self.limits.at_us(now)?;
        let mut calls = Vec::new();
        for (index, (key, cost)) in requests.into_iter().enumerate() {
            match self.call(Op::Allow, key, cost, now) {
                Ok(c) => calls.push(c),
                Err(Error::Invalid(e)) => {
                    return Err(ratomic::Error::InvalidRequest { index, error: Box::new(e) }.into());
                }
                Err(e) => return Err(e),
            }
        }
        if calls.is_empty() {
            return Ok(BatchStep::Answer(Vec::new()));
        }
        if self.breaker.is_open() && self.options.policy != FailurePolicy::ReturnError {
            let e = Error::Connection("the circuit breaker is open".into());
            return calls.iter().map(|c| self.on_failure(e.clone(), c)).collect::<Result<_>>().map(BatchStep::Answer);
        }
        Ok(BatchStep::Send(Batch { calls, at_us, started: Instant::now() }))
    }

    /// Ends a batch with its reply (the row's `bigint[]`), or the way the
    /// statement failed (then the policy answers every request).
    pub fn finish_many(&self, batch: &Batch, reply: Result<Vec<i64>>) -> Result<Vec<MultiDecision>> {
        match reply.and_then(|r| self.limits.decode_many(&r, batch.calls.len())) {
            Ok(ds) => {
                self.breaker.success();
                if batch.at_us.is_none() {
                    for (c, d) in batch.calls.iter().zip(&ds) {
                        self.denials.insert(&c.key, c.cost, d.decision);
                    }
                }
                Ok(ds)
            }
            Err(e) if e.is_backend() => {
                self.breaker.failure(batch.started.elapsed());
                batch.calls.iter().map(|c| self.on_failure(e.clone(), c)).collect()
            }
            Err(e) => Err(e),
        }
    }

    /// Calls begun apart, sent together: for a face that coalesces the
    /// calls in flight at the same time, the [`Step::Send`] calls that came
    /// while a statement was out become one batch statement
    /// ([`schema::MANY`](crate::schema::MANY) with op `a`, the batch's
    /// `keys()`, `amounts()` and `at_us()`), fewer statements for the same
    /// decisions. Each call must be [`coalescible`](Call::coalescible);
    /// those that are not are refused here (an [`Error::Invalid`]), so a
    /// face's slip cannot send an explicit time, a peek or a lease ask as a
    /// plain allow at the server's time.
    ///
    /// If the circuit breaker opened while they waited (a statement out
    /// meanwhile failed: the server crashed, say), nothing is to be sent:
    /// [`Coalesced::Answered`] holds the failure policy's answers, as a
    /// call begun now would get, rather than each waiting out another
    /// timeout on a server known to be down. Under
    /// [`FailurePolicy::ReturnError`] each answer is the error, as
    /// [`begin`](Self::begin)'s while the breaker is open.
    ///
    /// A batch decides its calls in key order at one reading of the
    /// server's clock, each as it would have been alone at that time:
    /// every call was made before the statement was sent and is answered
    /// after it ran, so that time lies within each call. End it with
    /// [`finish_coalesced`](Self::finish_coalesced).
    pub fn coalesce(&self, calls: Vec<Call>) -> Result<Coalesced> {
        if let Some(c) = calls.iter().find(|c| !c.coalescible()) {
            return Err(Error::Invalid(ratomic::Error::InvalidArgument {
                name: "calls",
                value: format!("{:?} at {:?}, lease {}", c.op, c.now, c.lease),
                reason: "only allows at the server's time that ask for no lease go in one statement".into(),
            }));
        }
        if self.breaker.is_open() {
            let e = Error::Connection("the circuit breaker is open".into());
            // Coalescible calls ask no lease: nothing to tell the leases.
            return Ok(Coalesced::Answered(calls.iter().map(|c| self.on_failure(e.clone(), c)).collect()));
        }
        Ok(Coalesced::Send(Batch { calls, at_us: None, started: Instant::now() }))
    }

    /// Ends a batch made by [`coalesce`](Self::coalesce): each call's
    /// answer, in order, exactly as [`finish`](Self::finish) would give it
    /// for that call with its part of the reply (each decision goes to the
    /// deny cache). A failed statement (or a reply of the wrong length)
    /// counts once towards the breaker, as a batch does, and the failure
    /// policy answers each call.
    pub fn finish_coalesced(&self, batch: &Batch, reply: Result<Vec<i64>>) -> Vec<Result<MultiDecision>> {
        let spent = batch.started.elapsed();
        let size = 1 + 5 * self.limits.rules().len();
        let reply = reply.and_then(|r| {
            if r.len() == size * batch.calls.len() {
                Ok(r)
            } else {
                Err(Error::Reply(format!(
                    "expected {} integers for {} calls, got {}",
                    size * batch.calls.len(),
                    batch.calls.len(),
                    r.len()
                )))
            }
        });
        match reply {
            Ok(r) => batch
                .calls
                .iter()
                .zip(r.chunks_exact(size))
                .map(|(c, part)| self.finish_after(c, Ok(part.to_vec()), spent))
                .collect(),
            Err(e) => {
                // One statement failed: one failure towards the breaker
                // (as a batch's), the policy answers each call.
                if e.is_backend() {
                    self.breaker.failure(spent);
                }
                batch
                    .calls
                    .iter()
                    .map(|c| {
                        if let Some(leases) = &self.leases {
                            leases.failed(&c.key);
                        }
                        if e.is_backend() {
                            self.on_failure(e.clone(), c)
                        } else {
                            Err(e.clone())
                        }
                    })
                    .collect()
            }
        }
    }

    fn call(&self, op: Op, key: &[u8], cost: u64, now: Option<u64>) -> Result<Call> {
        self.limits.check(key, cost)?;
        let at_us = self.limits.at_us(now)?;
        let bucket = if op == Op::Allow { self.limits.one_bucket() } else { None };
        // check() held the cost to the capacity: cost × T ≤ τ < 2^61.
        let increment = bucket.map_or(0, |(t, _)| cost as i64 * t);
        Ok(Call {
            op,
            key: key.to_vec(),
            cost,
            now,
            at_us,
            started: Instant::now(),
            lease: 0,
            one_bucket: bucket.is_some(),
            increment,
        })
    }

    fn on_failure(&self, e: Error, call: &Call) -> Result<MultiDecision> {
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
                let now = call.now.unwrap_or_else(|| local.now());
                let d = match call.op {
                    Op::Peek => local.peek_at(&call.key, call.cost, now)?,
                    _ => local.allow_at(&call.key, call.cost, now)?,
                };
                Ok(self.limits.fallback_decision(&d))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Source;
    use ratomic::Rule;

    fn driver(policy: FailurePolicy, threshold: u32) -> Driver {
        Driver::new(
            Limits::single(Rule::parse("2/s").unwrap()).unwrap(),
            Options { policy, breaker_threshold: threshold, ..Options::default() },
        )
    }

    fn send(step: Step) -> Call {
        match step {
            Step::Send(c) => c,
            Step::Answer(d) => panic!("answered without a round trip: {d:?}"),
        }
    }

    #[test]
    fn denials_at_the_server_time_are_answered_from_the_cache() {
        let d = driver(FailurePolicy::ReturnError, 5);
        let call = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        let denied = d.finish(&call, Ok(vec![0, 0, 0, 2, 400_000, 1_000_000])).unwrap();
        assert!(!denied.allowed() && denied.source == Source::Postgres);
        match d.begin(Op::Allow, b"k", 1, None).unwrap() {
            Step::Answer(a) => assert_eq!(a.source, Source::DenyCache),
            Step::Send(_) => panic!("the cached denial was not used"),
        }
        // Another cost, an explicit time, a peek: to the server.
        let _ = send(d.begin(Op::Allow, b"k", 2, None).unwrap());
        let _ = send(d.begin(Op::Allow, b"k", 1, Some(5)).unwrap());
        let _ = send(d.begin(Op::Peek, b"k", 1, None).unwrap());
        // A reset through this limiter forgets it.
        d.begin_reset(b"k").unwrap();
        let _ = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
    }

    #[test]
    fn failures_follow_the_policy_and_open_the_breaker() {
        let d = driver(FailurePolicy::FailClosed { retry_after: Duration::from_secs(3) }, 2);
        for _ in 0..2 {
            let call = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
            let a = d.finish(&call, Err(Error::Timeout)).unwrap();
            assert!(!a.allowed() && a.source == Source::Policy);
            assert_eq!(a.decision.retry_after, Duration::from_secs(3));
        }
        assert!(d.breaker_open());
        match d.begin(Op::Allow, b"k", 1, None).unwrap() {
            Step::Answer(a) => assert_eq!(a.source, Source::Policy),
            Step::Send(_) => panic!("the open breaker let a call through"),
        }
        let d = driver(FailurePolicy::ReturnError, 0);
        let call = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        assert_eq!(d.finish(&call, Err(Error::Server("ERR".into()))).unwrap_err(), Error::Server("ERR".into()));
        assert!(!d.breaker_open(), "threshold 0: no breaker");
        let call = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        assert!(matches!(d.finish(&call, Ok(vec![1, 2])), Err(Error::Reply(_))), "an undecodable reply is a failure");
    }

    #[test]
    fn calls_that_waited_while_the_breaker_opened_are_answered_without_a_statement() {
        let answered = |c: Result<Coalesced>| match c.unwrap() {
            Coalesced::Answered(a) => a,
            Coalesced::Send(_) => panic!("the open breaker let waiting calls through"),
        };
        let d = driver(FailurePolicy::FailClosed { retry_after: Duration::from_secs(3) }, 1);
        let out = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        let waiting: Vec<Call> = (0..3).map(|_| send(d.begin(Op::Allow, b"k", 1, None).unwrap())).collect();
        match d.coalesce(waiting.clone()).unwrap() {
            Coalesced::Send(b) => assert_eq!(b.len(), 3, "a closed breaker: send them"),
            Coalesced::Answered(_) => panic!("answered with the breaker closed"),
        }
        // A call that may not wait (its own time, a peek) is refused, never sent as a plain allow.
        for c in [d.begin(Op::Allow, b"k", 1, Some(5_000)), d.begin(Op::Peek, b"k", 1, None)] {
            assert!(matches!(d.coalesce(vec![send(c.unwrap())]), Err(Error::Invalid(_))));
        }
        let a = d.finish(&out, Err(Error::Connection("server closed the connection".into()))).unwrap();
        assert_eq!(a.source, Source::Policy);
        assert!(d.breaker_open());
        let answers = answered(d.coalesce(waiting));
        assert_eq!(answers.len(), 3);
        for a in answers {
            let a = a.unwrap();
            assert!(!a.allowed() && a.source == Source::Policy);
            assert_eq!(a.decision.retry_after, Duration::from_secs(3));
        }
        let d = driver(FailurePolicy::ReturnError, 1);
        let out = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        let waiting = vec![send(d.begin(Op::Allow, b"k", 1, None).unwrap())];
        let _ = d.finish(&out, Err(Error::Timeout));
        let answers = answered(d.coalesce(waiting));
        assert!(matches!(answers[0], Err(Error::Connection(_))), "{answers:?}");
    }

    #[test]
    fn the_fallback_decides_in_memory_and_bad_input_never_reaches_the_policy() {
        let d = driver(FailurePolicy::Fallback, 0);
        let granted = (0..3)
            .filter(|_| {
                let call = send(d.begin(Op::Allow, b"k", 1, Some(1_000)).unwrap());
                let a = d.finish(&call, Err(Error::Connection("refused".into()))).unwrap();
                assert_eq!(a.source, Source::Fallback);
                a.allowed()
            })
            .count();
        assert_eq!(granted, 2);
        assert!(matches!(d.begin(Op::Allow, b"k", 3, None), Err(Error::Invalid(_))));
        assert!(matches!(d.begin(Op::Refund, b"k", 1, None), Err(Error::Invalid(_))));
        let err = d.begin_many([(&b"a"[..], 1), (&b"b"[..], 9)], None).unwrap_err();
        assert!(matches!(err, Error::Invalid(ratomic::Error::InvalidRequest { index: 1, .. })), "{err}");
    }

    #[test]
    fn a_failed_batch_is_answered_by_the_policy_for_every_request() {
        let d = driver(FailurePolicy::FailOpen, 0);
        let BatchStep::Send(batch) = d.begin_many([(&b"a"[..], 1), (&b"b"[..], 1)], None).unwrap() else {
            panic!("no breaker: the batch is sent")
        };
        assert_eq!((batch.keys(), batch.amounts()), (vec![&b"a"[..], b"b"], vec![1, 1]));
        let out = d.finish_many(&batch, Err(Error::Timeout)).unwrap();
        assert!(out.iter().all(|a| a.allowed() && a.source == Source::Policy));
        let short = d.finish_many(&batch, Ok(vec![1, 1, 1, 2, 0, 1])).unwrap();
        assert!(short.iter().all(|a| a.source == Source::Policy), "a short reply is a failure");
    }
}
