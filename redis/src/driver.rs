//! The sans-IO driver: everything a Redis-backed call does except moving
//! bytes — input checks, the deny cache, the circuit breaker, the script's
//! arguments, the decoding of its reply and the failure policy. The crate's
//! own client ([`RedisLimiter`](crate::RedisLimiter)) and the Python and
//! Node faces (which send the bytes through the user's own Redis client)
//! all run it, so every face decides the same way.
//!
//! A call is a [`Driver::begin`] that either answers at once
//! ([`Step::Answer`]: the deny cache, or the failure policy while the
//! breaker is open) or asks for one `EVALSHA` ([`Step::Send`]); the caller
//! sends it — loading the script and sending it once more if the server
//! answers `NOSCRIPT` — and hands the reply, or the way it failed, to
//! [`Driver::finish`].
//!
//! ```
//! use ratomic::Rule;
//! use ratomic_redis::{Driver, Limits, Op, Options, Source, Step};
//!
//! let driver = Driver::new(Limits::single(Rule::parse("10/s")?)?, Options::default());
//! let Step::Send(call) = driver.begin(Op::Allow, b"user:42", 1, None)? else { unreachable!() };
//! // EVALSHA <script::sha1()> 1 <call.redis_key()> <call.args()…> through any client; say it answered:
//! let d = driver.finish(&call, Ok(vec![1, 1, 9, 10, 0, 100_000]))?;
//! assert!(d.allowed() && d.source == Source::Redis);
//! # Ok::<(), ratomic_redis::Error>(())
//! ```

use std::time::{Duration, Instant};

use ratomic::Decision;

use crate::error::{Error, Result};
use crate::limits::{Limits, MultiDecision, Op};
use crate::rules::RedisRule;
use ratomic::backend::{Breaker, DenyCache};
use ratomic::backend::{Lease, Leases};

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
    /// The driver does not read it: whoever moves the bytes enforces it and
    /// reports [`Error::Timeout`].
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
    /// The time backend failures in a row may take in all before the
    /// breaker opens, whatever their count (default 1 s; zero: no bound on
    /// time). A call that stalls (a client retrying with backoff inside,
    /// seconds on a stopped server) then opens it at once, instead of
    /// `breaker_threshold` such calls stalling every request in turn. Each
    /// call's time runs from [`Driver::begin`] to its end.
    pub breaker_failure_time: Duration,
    /// Keys of Redis denials kept to answer locally until their
    /// `retry_after` ends, marked [`Source::DenyCache`](crate::Source::DenyCache)
    /// (default 10,000; 0 turns it off). Only calls at the server's time,
    /// and only for the same cost. The price: a `refund` or `reset` from
    /// another process is seen here only when the cached denial ends.
    pub deny_cache: usize,
    /// Whether calls lease tokens, so that most of a hot key's calls are
    /// answered in memory (default [`Lease::Off`]; [`Lease::Auto`] leases
    /// where exact, i.e. when every limit is a token bucket). Exact
    /// fleet-wide; the price is that tokens a process holds are not
    /// available to the others meanwhile, so near the limit the fleet may
    /// grant fewer than the bucket allows (see [`Lease`]).
    pub lease: Lease,
    /// Keys whose leases (and recent round trips, which size them) are kept
    /// (default 10,000). A lease dropped to make room is not given back:
    /// its tokens return to the fleet as their time passes.
    pub lease_keys: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_millis(50),
            policy: FailurePolicy::ReturnError,
            breaker_threshold: 5,
            breaker_cooldown: Duration::from_secs(1),
            breaker_failure_time: Duration::from_secs(1),
            deny_cache: 10_000,
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
    /// The origin of [`stamp`](Driver::stamp)s.
    base: Instant,
}

/// One script call to send: `EVALSHA <script::sha1()> 1 <redis_key> <args…>`.
#[derive(Clone, Debug)]
pub struct Call {
    op: Op,
    key: Vec<u8>,
    cost: u64,
    now: Option<u64>,
    redis_key: Vec<u8>,
    args: Vec<Vec<u8>>,
    /// When it was made: a failure's time counts towards the breaker, and a
    /// lease's bound on the server's time starts here.
    started: Instant,
    /// Tokens it asks to lease (0: none).
    lease: u64,
}

impl Call {
    /// The Redis key (`KEYS[1]`).
    pub fn redis_key(&self) -> &[u8] {
        &self.redis_key
    }

    /// The script's arguments (`ARGV`).
    pub fn args(&self) -> &[Vec<u8>] {
        &self.args
    }

    /// The user's key, as the call named it.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The cost asked (tokens, for a refund).
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The tokens it asks to lease beyond its own cost (0: none). While it
    /// is in flight the key's other calls ask for none: a face that
    /// coalesces calls may hold those back for the lease instead (see
    /// [`Lease`]).
    pub fn lease(&self) -> u64 {
        self.lease
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
    /// Send these calls in one pipeline, in order, and give the replies to
    /// [`Driver::finish_many`].
    Send(Vec<Call>),
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
        let buckets: Vec<Option<(u64, u64)>> = limits
            .rules()
            .iter()
            .map(|r| match *r {
                RedisRule::TokenBucket { interval_us, capacity } => Some((interval_us, capacity)),
                _ => None,
            })
            .collect();
        let leases = Leases::new(&buckets, options.lease, options.lease_keys).map_err(|reason| {
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
            base: Instant::now(),
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

    /// The rules and key layout.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Whether the circuit breaker is open: calls answer by the failure
    /// policy without reaching Redis until its cool-down ends.
    pub fn breaker_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// Starts an `Allow` or `Peek` of `cost` on `key`, at `now` (ns on the
    /// caller's clock) or, when `None`, at the server's `TIME`. Bad input
    /// is an [`Error::Invalid`] here, before anything is sent.
    pub fn begin(&self, op: Op, key: &[u8], cost: u64, now: Option<u64>) -> Result<Step> {
        self.begin_for(op, key, cost, now, 0)
    }

    /// [`begin`](Self::begin) for a call that `demand` more tokens on the
    /// same key wait behind (a face that coalesces calls knows): should it
    /// ask for a lease, it asks for at least that many (at most the
    /// largest lease), so that they can be answered from it.
    pub fn begin_for(&self, op: Op, key: &[u8], cost: u64, now: Option<u64>, demand: u64) -> Result<Step> {
        match self.begin_inner(op, key, cost, now, demand, true)? {
            Ok(d) => Ok(Step::Answer(d)),
            Err(lease) => {
                let mut call = self.call(op, key, cost, now)?;
                if lease > 0 {
                    call.args = self.limits.lease_args(now, cost, lease)?;
                    call.lease = lease;
                }
                Ok(Step::Send(call))
            }
        }
    }

    /// The answer [`begin`](Self::begin) would give without a round trip
    /// (a lease, a cached denial, the policy while the breaker is open), or
    /// `None` if the call needs one; asks for no lease. For a face that
    /// coalesces calls: a call that comes while a round trip is in flight
    /// is answered here or waits for the next one, where it is begun again
    /// (no call holds a lease ask while it waits).
    pub fn begin_local(&self, op: Op, key: &[u8], cost: u64, now: Option<u64>) -> Result<Option<MultiDecision>> {
        Ok(self.begin_inner(op, key, cost, now, 0, false)?.ok())
    }

    /// A call's answer without a round trip, or the lease its round trip
    /// asks for (0: none).
    fn begin_inner(
        &self,
        op: Op,
        key: &[u8],
        cost: u64,
        now: Option<u64>,
        demand: u64,
        ask: bool,
    ) -> Result<std::result::Result<MultiDecision, u64>> {
        if op == Op::Refund {
            return Err(Error::Invalid(ratomic::Error::InvalidArgument {
                name: "op",
                value: "Refund".into(),
                reason: "refunds start with begin_refund".into(),
            }));
        }
        self.limits.check(key, cost)?;
        let mut lease = 0;
        // The lease first: its slots are this process's whatever Redis
        // answered others since (a cached denial included).
        if let (Some(leases), Op::Allow, true) = (&self.leases, op, cost > 0) {
            let caller = now.map(|ns| ratomic::check_time(ns).map(|ns| ns / 1000)).transpose()?;
            match leases.grant(key, cost, leases.local_us(), caller, demand, ask) {
                Ok(entries) => return Ok(Ok(self.limits.lease_decision(entries))),
                Err(size) => lease = size,
            }
        }
        if now.is_none() && op == Op::Allow {
            if let Some(d) = self.denials.get(key, cost) {
                return Ok(Ok(self.limits.cached_decision(d)));
            }
        }
        if self.breaker.is_open() {
            return self
                .on_failure(Error::Connection("the circuit breaker is open".into()), op, key, cost, now)
                .map(Ok);
        }
        Ok(Err(lease))
    }

    /// Ends a call [`begin`](Self::begin) asked to send, with the script's
    /// reply or the way sending it failed. A backend failure (connection,
    /// timeout, server, reply) counts towards the breaker and is answered by
    /// the failure policy; a reply that does not decode is such a failure.
    ///
    /// The call's time runs from its `begin`, which came before it was sent:
    /// the bound on the server's time a lease needs.
    pub fn finish(&self, call: &Call, reply: Result<Vec<i64>>) -> Result<MultiDecision> {
        self.finish_inner(call.op, &call.key, call.cost, call.now, reply, Some(call.started), None)
    }

    /// [`finish`](Self::finish) for a call named by what [`begin`](Self::begin)
    /// was given (`op`, `key`, `cost`, `now`) rather than by its [`Call`]: for
    /// a client that would rather not keep the `Call` while the command is in
    /// flight (a JavaScript object wrapping one costs more than the call).
    ///
    /// A failure counts towards the breaker as one failure of no duration,
    /// and a lease the call brought at the server's time is not kept (its
    /// tokens return to the fleet as their time passes): say when the call
    /// was sent with [`finish_parts_sent`](Self::finish_parts_sent).
    pub fn finish_parts(
        &self,
        op: Op,
        key: &[u8],
        cost: u64,
        now: Option<u64>,
        reply: Result<Vec<i64>>,
    ) -> Result<MultiDecision> {
        self.finish_inner(op, key, cost, now, reply, None, None)
    }

    /// [`finish_parts`](Self::finish_parts) of a call that took `spent`
    /// (from its [`begin`](Self::begin)): a failure's time counts towards
    /// [`Options::breaker_failure_time`].
    ///
    /// A duration is no bound on when the call was sent (it was measured
    /// before this runs, by however much earlier), so a lease the call
    /// brought at the server's time is not kept:
    /// [`finish_parts_sent`](Self::finish_parts_sent) keeps it.
    pub fn finish_parts_after(
        &self,
        op: Op,
        key: &[u8],
        cost: u64,
        now: Option<u64>,
        reply: Result<Vec<i64>>,
        spent: Duration,
    ) -> Result<MultiDecision> {
        self.finish_inner(op, key, cost, now, reply, None, Some(spent))
    }

    /// [`finish_parts`](Self::finish_parts) of a call sent at `sent`, a
    /// [`stamp`](Self::stamp) taken before its bytes went out (earlier is
    /// fine: it only widens the bound; later is not). The call's time runs
    /// from there (towards the breaker), and a lease it brought is kept.
    #[allow(clippy::too_many_arguments)]
    pub fn finish_parts_sent(
        &self,
        op: Op,
        key: &[u8],
        cost: u64,
        now: Option<u64>,
        reply: Result<Vec<i64>>,
        sent: u64,
    ) -> Result<MultiDecision> {
        let sent = self.base.checked_add(Duration::from_micros(sent)).filter(|&t| t <= Instant::now());
        self.finish_inner(op, key, cost, now, reply, sent, None)
    }

    /// This driver's monotonic clock, whole µs rounded down: a stamp to take
    /// before a call's bytes go out and hand to
    /// [`finish_parts_sent`](Self::finish_parts_sent).
    pub fn stamp(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// The end of a call sent at `sent` (if known: a lease at the server's
    /// time is kept only then, its bound on the server's time starting at
    /// that instant) or that took `spent` (towards the breaker only).
    #[allow(clippy::too_many_arguments)]
    fn finish_inner(
        &self,
        op: Op,
        key: &[u8],
        cost: u64,
        now: Option<u64>,
        reply: Result<Vec<i64>>,
        sent: Option<Instant>,
        spent: Option<Duration>,
    ) -> Result<MultiDecision> {
        let received = Instant::now();
        let spent = spent.or_else(|| sent.map(|s| received.saturating_duration_since(s)));
        let leased = self.leases.as_ref().filter(|_| op == Op::Allow);
        let n = self.limits.rules().len();
        let decoded = reply.and_then(|r| {
            if leased.is_some() && r.len() == 1 + 5 * n + 2 + n {
                self.limits.decode_lease(&r).map(|(d, g)| (d, Some(g)))
            } else {
                self.limits.decode(&r).map(|d| (d, None))
            }
        });
        match decoded {
            Ok((d, grant)) => {
                self.breaker.success();
                if now.is_none() && op == Op::Allow {
                    self.denials.insert(key, cost, d.decision);
                }
                if let Some(leases) = leased {
                    let asked = grant.is_some();
                    let x = leases.local_us_at(received);
                    // Without the instant the call was sent, no bound on the
                    // server's time: a lease at the server's time is not kept.
                    let (sent, grant) = match sent {
                        Some(sent) => (leases.local_us_at(sent), grant),
                        None if now.is_some() => (x, grant),
                        None => (x, None),
                    };
                    leases.arrived(key, sent, x, now.is_some(), grant.filter(|_| d.allowed()), asked);
                }
                Ok(d)
            }
            Err(e) => {
                if let Some(leases) = leased {
                    leases.failed(key);
                }
                if !e.is_backend() {
                    return Err(e);
                }
                self.breaker.failure(spent.unwrap_or(Duration::ZERO));
                self.on_failure(e, op, key, cost, now)
            }
        }
    }

    /// Takes every lease this driver holds and returns the calls that give
    /// their unused tokens back (send each, and hand its reply to
    /// [`finish_give_back`](Self::finish_give_back)): for a limiter that is
    /// closing. Calls after this take new leases.
    pub fn begin_give_backs(&self) -> Vec<Call> {
        let Some(leases) = &self.leases else { return Vec::new() };
        leases
            .drain()
            .into_iter()
            .map(|u| Call {
                op: Op::Refund,
                redis_key: self.limits.key(&u.key),
                args: self.limits.give_back_args(&u.ends, &u.next),
                key: u.key,
                cost: 0,
                now: None,
                started: Instant::now(),
                lease: 0,
            })
            .collect()
    }

    /// Ends a give-back: how many limits took their tokens back (0 when
    /// other calls were granted after the lease, whose slots it cannot take
    /// back).
    pub fn finish_give_back(&self, reply: Result<Vec<i64>>) -> Result<usize> {
        match reply? {
            r if r.len() == 1 && r[0] >= 0 => Ok(r[0] as usize),
            r => Err(Error::Reply(format!("expected the number of limits given back, got {r:?}"))),
        }
    }

    /// Gives `tokens` back to this process's lease of `key`, if it holds one
    /// that granted at least that many of its slots, still ahead: then no
    /// round trip is needed (returns true). Otherwise nothing changed:
    /// refund through Redis ([`begin_refund`](Self::begin_refund)), which
    /// never takes back slots a lease holds.
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
        self.denials.forget(key);
        Ok(Call {
            op: Op::Refund,
            key: key.to_vec(),
            cost: tokens,
            now,
            redis_key: self.limits.key(key),
            args: self.limits.args(Op::Refund, now, tokens)?,
            started: Instant::now(),
            lease: 0,
        })
    }

    /// Ends a refund: how many limits changed.
    pub fn finish_refund(&self, reply: Result<Vec<i64>>) -> Result<usize> {
        self.limits.decode_refund(&reply?)
    }

    /// Starts forgetting `key`: the Redis key to `DEL`.
    ///
    /// `DEL` also forgets which slots leases hold, so after it the fleet may
    /// grant up to the tokens outstanding in leases more than the bucket
    /// allows: with leases, use [`begin_reset_call`](Self::begin_reset_call).
    pub fn begin_reset(&self, key: &[u8]) -> Result<Vec<u8>> {
        self.limits.check(key, 0)?;
        self.denials.forget(key);
        Ok(self.limits.key(key))
    }

    /// Starts forgetting `key` with the script (every limit full again, but
    /// for the slots leases still hold): send the call, and hand its reply
    /// to [`finish_reset`](Self::finish_reset).
    pub fn begin_reset_call(&self, key: &[u8], now: Option<u64>) -> Result<Call> {
        self.limits.check(key, 0)?;
        self.denials.forget(key);
        Ok(Call {
            op: Op::Refund,
            key: key.to_vec(),
            cost: 0,
            now,
            redis_key: self.limits.key(key),
            args: self.limits.reset_args(now)?,
            started: Instant::now(),
            lease: 0,
        })
    }

    /// Ends a reset.
    pub fn finish_reset(&self, reply: Result<Vec<i64>>) -> Result<()> {
        match reply? {
            r if r == [1] => Ok(()),
            r => Err(Error::Reply(format!("expected 1, got {r:?}"))),
        }
    }

    /// Starts a batch: every request is checked first (an invalid one fails
    /// the whole batch with its index, and nothing is sent).
    pub fn begin_many<'k>(
        &self,
        requests: impl IntoIterator<Item = (&'k [u8], u64)>,
        now: Option<u64>,
    ) -> Result<BatchStep> {
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
        if self.breaker.is_open() && self.options.policy != FailurePolicy::ReturnError {
            let e = Error::Connection("the circuit breaker is open".into());
            return calls
                .iter()
                .map(|c| self.on_failure(e.clone(), c.op, &c.key, c.cost, c.now))
                .collect::<Result<_>>()
                .map(BatchStep::Answer);
        }
        Ok(BatchStep::Send(calls))
    }

    /// Ends a batch with its replies, in order, or the way the pipeline
    /// failed (then the policy answers every request).
    pub fn finish_many(&self, calls: &[Call], replies: Result<Vec<Vec<i64>>>) -> Result<Vec<MultiDecision>> {
        let decoded = replies.and_then(|rs| {
            if rs.len() != calls.len() {
                return Err(Error::Reply(format!("{} replies to a batch of {}", rs.len(), calls.len())));
            }
            rs.iter().map(|r| self.limits.decode(r)).collect::<Result<Vec<_>>>()
        });
        match decoded {
            Ok(ds) => {
                self.breaker.success();
                Ok(ds)
            }
            Err(e) if e.is_backend() => {
                self.breaker.failure(calls.first().map_or(Duration::ZERO, |c| c.started.elapsed()));
                calls.iter().map(|c| self.on_failure(e.clone(), c.op, &c.key, c.cost, c.now)).collect()
            }
            Err(e) => Err(e),
        }
    }

    fn call(&self, op: Op, key: &[u8], cost: u64, now: Option<u64>) -> Result<Call> {
        self.limits.check(key, cost)?;
        let args = self.limits.args(op, now, cost)?;
        Ok(Call {
            op,
            key: key.to_vec(),
            cost,
            now,
            redis_key: self.limits.key(key),
            args,
            started: Instant::now(),
            lease: 0,
        })
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
                let now = now.unwrap_or_else(|| local.now());
                let d = match op {
                    Op::Peek => local.peek_at(key, cost, now)?,
                    _ => local.allow_at(key, cost, now)?,
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
        assert!(!denied.allowed() && denied.source == Source::Redis);
        match d.begin(Op::Allow, b"k", 1, None).unwrap() {
            Step::Answer(a) => assert_eq!(a.source, Source::DenyCache),
            Step::Send(_) => panic!("the cached denial was not used"),
        }
        // Another cost, an explicit time, a peek: to Redis.
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
    fn failures_that_took_the_failure_time_open_the_breaker_whatever_their_count() {
        let d = Driver::new(
            Limits::single(Rule::parse("2/s").unwrap()).unwrap(),
            Options {
                policy: FailurePolicy::FailOpen,
                breaker_threshold: 5,
                breaker_failure_time: Duration::from_secs(1),
                ..Options::default()
            },
        );
        let fail = |spent: Duration| {
            let a = d.finish_parts_after(Op::Allow, b"k", 1, None, Err(Error::Timeout), spent).unwrap();
            assert_eq!(a.source, Source::Policy);
        };
        // Quick failures: the count decides.
        for _ in 0..4 {
            fail(Duration::from_millis(50));
        }
        assert!(!d.breaker_open(), "4 failures of 50 ms: below both bounds");
        // A success starts both over.
        let call = send(d.begin(Op::Allow, b"k", 1, Some(1)).unwrap());
        assert!(d.finish(&call, Ok(vec![1, 1, 1, 2, 0, 500_000])).unwrap().allowed());
        // One call that stalled (a client retrying with backoff) opens it at once.
        fail(Duration::from_millis(999));
        assert!(!d.breaker_open());
        fail(Duration::from_millis(1));
        assert!(d.breaker_open(), "1 s of failures in a row, 2 failures");
        let off = Driver::new(
            Limits::single(Rule::parse("2/s").unwrap()).unwrap(),
            Options { breaker_failure_time: Duration::ZERO, ..Options::default() },
        );
        let _ = off.finish_parts_after(Op::Allow, b"k", 1, None, Err(Error::Timeout), Duration::from_secs(60));
        assert!(!off.breaker_open(), "zero: no bound on time");
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
        let err = d.begin_many([(&b"a"[..], 1), (&b"b"[..], 9)], None).unwrap_err();
        assert!(matches!(err, Error::Invalid(ratomic::Error::InvalidRequest { index: 1, .. })), "{err}");
    }

    /// A lease reply after `warm-up`: the call's own token and a lease of
    /// 4 tokens ending 5 ms after the server's `now`, on a bucket of 100
    /// refilling 1,000 a second.
    fn leasing() -> Driver {
        let d = Driver::new(
            Limits::single(Rule::token_bucket(ratomic::Quota::new(100, 1000.0).unwrap())).unwrap(),
            Options { lease: Lease::Max(4), ..Options::default() },
        );
        // A first round trip: the key is warm, the next asks for a lease.
        let call = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        assert!(d.finish(&call, Ok(vec![1, 1, 99, 100, 0, 1_000])).unwrap().allowed());
        d
    }

    const LEASE_REPLY: [i64; 9] = [1, 1, 94, 100, 0, 6_000, 4, 1_000_000, 1_005_000];

    #[test]
    fn a_lease_is_kept_only_with_a_bound_on_when_its_call_was_sent() {
        // finish: the call's begin came before it was sent.
        let d = leasing();
        let call = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        assert!(call.args()[0].starts_with(b"l"), "a warm key asks for a lease");
        assert!(d.finish(&call, Ok(LEASE_REPLY.to_vec())).unwrap().allowed());
        assert_eq!(d.leases_held(), 1);
        // finish_parts_sent: a stamp taken before the send.
        let d = leasing();
        let sent = d.stamp();
        let _ = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        assert!(d.finish_parts_sent(Op::Allow, b"k", 1, None, Ok(LEASE_REPLY.to_vec()), sent).unwrap().allowed());
        assert_eq!(d.leases_held(), 1);
        // finish_parts_after: a duration measured some time before this
        // runs says nothing of when the call was sent (subtracted from the
        // later instant it makes the send look later than it was, and the
        // server's time earlier): no lease is kept.
        let d = leasing();
        let _ = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        let spent = Duration::from_micros(300);
        std::thread::sleep(Duration::from_millis(2)); // the face's own work between measuring and finishing
        let a = d.finish_parts_after(Op::Allow, b"k", 1, None, Ok(LEASE_REPLY.to_vec()), spent).unwrap();
        assert!(a.allowed());
        assert_eq!(d.leases_held(), 0, "a lease kept on a bound that may be 2 ms too early");
        // A stamp from the future is no bound either.
        let d = leasing();
        let _ = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        let late = d.stamp() + 60_000_000;
        assert!(d.finish_parts_sent(Op::Allow, b"k", 1, None, Ok(LEASE_REPLY.to_vec()), late).unwrap().allowed());
        assert_eq!(d.leases_held(), 0);
    }

    /// A warm key on a bucket of 100 that refills one token an hour (a
    /// lease's slots lie hours ahead: no test machine is slow enough to
    /// pass them).
    fn leasing_slowly() -> Driver {
        let d = Driver::new(
            Limits::single(Rule::token_bucket(ratomic::Quota::new(100, 1.0 / 3600.0).unwrap())).unwrap(),
            Options { lease: Lease::Max(4), ..Options::default() },
        );
        let call = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        assert!(d.finish(&call, Ok(vec![1, 1, 99, 100, 0, HOUR])).unwrap().allowed());
        d
    }

    const HOUR: i64 = 3_600_000_000;
    /// The call's own token and a lease of 4: slots [now + T, now + 5T).
    const SLOW_LEASE_REPLY: [i64; 9] = [1, 1, 94, 100, 0, 6 * HOUR, 4, 1_000_000, 1_000_000 + 5 * HOUR];

    /// A lease's slots are this process's whatever Redis answered other
    /// calls on the key meanwhile: a denial cached while the lease was on
    /// its way does not answer calls the lease can grant.
    #[test]
    fn a_held_lease_answers_before_a_cached_denial() {
        let d = leasing_slowly();
        let asks = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        assert!(asks.args()[0].starts_with(b"l"), "a warm key asks for a lease");
        let plain = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        assert!(!plain.args()[0].starts_with(b"l"), "one lease asked at a time");
        // The plain call reaches Redis after the lease took the last
        // tokens: denied, and the denial is cached.
        let denied = d.finish(&plain, Ok(vec![0, 0, 0, 100, HOUR, 100 * HOUR])).unwrap();
        assert!(!denied.allowed());
        assert!(d.finish(&asks, Ok(SLOW_LEASE_REPLY.to_vec())).unwrap().allowed());
        assert_eq!(d.leases_held(), 1);
        for i in 0..4 {
            match d.begin(Op::Allow, b"k", 1, None).unwrap() {
                Step::Answer(a) => assert_eq!((a.source, a.allowed()), (Source::Lease, true), "token {i}"),
                Step::Send(_) => panic!("token {i}: the lease holds it"),
            }
        }
        // Spent: the cached denial answers again.
        match d.begin(Op::Allow, b"k", 1, None).unwrap() {
            Step::Answer(a) => assert_eq!((a.source, a.allowed()), (Source::DenyCache, false)),
            Step::Send(_) => panic!("the cached denial was not used"),
        }
    }

    /// `begin_local`: what a call can be answered without a round trip (a
    /// lease, a cached denial), and nothing else — it asks for no lease, so
    /// the call that does ask (the round trip's planner's) still can.
    #[test]
    fn begin_local_answers_from_a_lease_or_a_denial_and_asks_for_none() {
        let d = leasing_slowly();
        assert!(d.begin_local(Op::Allow, b"k", 1, None).unwrap().is_none(), "no lease held yet");
        let asks = send(d.begin(Op::Allow, b"k", 1, None).unwrap());
        assert!(asks.args()[0].starts_with(b"l"), "begin_local marked no lease on its way");
        assert!(d.finish(&asks, Ok(SLOW_LEASE_REPLY.to_vec())).unwrap().allowed());
        for _ in 0..4 {
            let a = d.begin_local(Op::Allow, b"k", 1, None).unwrap().expect("the lease answers");
            assert_eq!(a.source, Source::Lease);
        }
        assert!(d.begin_local(Op::Allow, b"k", 1, None).unwrap().is_none(), "spent");
        let denied = send(d.begin(Op::Allow, b"other", 1, None).unwrap());
        assert!(!d.finish(&denied, Ok(vec![0, 0, 0, 100, HOUR, 100 * HOUR])).unwrap().allowed());
        let a = d.begin_local(Op::Allow, b"other", 1, None).unwrap().expect("the cached denial answers");
        assert_eq!(a.source, Source::DenyCache);
        // Bad input is the same error as begin's.
        assert!(d.begin_local(Op::Refund, b"k", 1, None).is_err());
    }

    #[test]
    fn a_failed_batch_is_answered_by_the_policy_for_every_request() {
        let d = driver(FailurePolicy::FailOpen, 0);
        let BatchStep::Send(calls) = d.begin_many([(&b"a"[..], 1), (&b"b"[..], 1)], None).unwrap() else {
            panic!("no breaker: the batch is sent")
        };
        let out = d.finish_many(&calls, Err(Error::Timeout)).unwrap();
        assert!(out.iter().all(|a| a.allowed() && a.source == Source::Policy));
        assert!(
            matches!(d.finish_many(&calls, Ok(vec![vec![1, 1, 1, 2, 0, 1]])), Ok(v) if v.iter().all(|a| a.source == Source::Policy))
        );
    }
}
