//! `NativeRedis`: ratomic-redis's sans-IO [`Driver`] for `ratomic/redis`,
//! whose classes send its calls through the user's own `ioredis` or
//! `node-redis` client. Everything but the I/O is here (or in the driver):
//! input checks, the script's arguments, reply decoding, the deny cache,
//! the circuit breaker and the failure policy. JavaScript sends `call.args`
//! and says how the client failed; decisions come back in the layout of
//! `decision.rs`, read by the same decoder as the in-memory limiters'.

use std::sync::Arc;
use std::time::Duration;

use napi::bindgen_prelude::{Buffer, Either, Either3, Float64ArraySlice, Unknown};
use napi::{Env, JsValue, Result};
use napi_derive::napi;

use ratomic_redis::{BatchStep, Call, Driver, Error as RedisError, FailurePolicy, Lease, Limits, Op, Options, Step};

use crate::batch;
use crate::clock::{ms_to_ns, ns_to_ms};
use crate::decision::{slot, OUT_LEN};
use crate::env::{Hot, Registered};
use crate::error::{whole, JsFailure, Res};
use crate::headers::{self, DecisionIn, EntryIn};
use crate::key::with_key;
use crate::rule::{rule, RuleSpec};

/// How a Redis-backed limiter behaves (every field optional).
#[napi(object)]
#[derive(Clone, Debug, Default)]
pub struct RedisOptions {
    /// Where the keys live (default `"ratomic:"`); no braces.
    pub prefix: Option<String>,
    /// `"raise"` (the default), `"allow"` or `"deny"`.
    pub on_error: Option<String>,
    /// The `retryAfterMs` of a denial by `onError: "deny"` (default 1000).
    pub deny_retry_after_ms: Option<f64>,
    /// Keys whose Redis denial is answered locally (default 10,000; 0: off).
    pub deny_cache: Option<f64>,
    /// Failures in a row that open the circuit breaker (default 5; 0: off).
    pub breaker_threshold: Option<f64>,
    /// How long the breaker stays open, ms (default 1000).
    pub breaker_cooldown_ms: Option<f64>,
    /// Failures in a row that took this long in all open the breaker too,
    /// whatever their count, ms (default 1000; 0: no bound on time).
    pub breaker_failure_time_ms: Option<f64>,
    /// The longest key in bytes (default 1024).
    pub max_key_len: Option<f64>,
    /// `"off"` (the default), `"auto"`, or the most tokens a lease takes.
    pub lease: Option<Either<String, f64>>,
    /// Keys whose leases are kept (default 10,000).
    pub lease_keys: Option<f64>,
}

// A batch's answer is a `Vec<f64>` (napi's typings cannot name an alias):
// who gave it (an index into `NativeRedis.sources`), then the decisions in
// `decision.rs`'s batch layout (each led by `allowed`). Plain numbers: N-API
// makes an array of numbers far faster than an object.

/// The longest reply (1 + 5 per limit) or answer (source, allowed, the
/// slots, an entry per limit).
const IO_LEN: usize = 2 + crate::decision::OUT_LEN;

/// Who answers, in the order of the code an answer starts with.
const SOURCES: [&str; 5] = ["redis", "deny_cache", "policy", "fallback", "lease"];

/// The arguments of one `EVALSHA`: the script's SHA1, 1, the Redis key,
/// ARGV; `client.call('EVALSHA', ...args)` (ioredis) or
/// `client.sendCommand(['EVALSHA', ...args])` (node-redis). Strings (a
/// JavaScript string is made far faster than a Buffer); the key is a Buffer
/// only when it is not UTF-8.
type Args = Vec<Either<String, Buffer>>;

/// How sending a call failed.
#[napi(object)]
pub struct RedisFailure {
    /// "timeout", "connection", "server" or "reply".
    pub kind: String,
    /// The client's error message.
    pub message: String,
}

/// The calls of a batch, to send in one pipeline, in order.
#[napi]
pub struct NativeRedisBatch {
    calls: Vec<Call>,
}

#[napi]
impl NativeRedisBatch {
    /// Each call's arguments (as `NativeRedis.begin` returns them).
    #[napi(getter, ts_return_type = "Array<Array<string | Buffer>>")]
    pub fn args(&self) -> Vec<Args> {
        self.calls.iter().map(argv).collect()
    }
}

fn text(b: &[u8]) -> Either<String, Buffer> {
    match std::str::from_utf8(b) {
        Ok(s) => Either::A(s.to_owned()),
        Err(_) => Either::B(Buffer::from(b.to_vec())),
    }
}

fn argv(call: &Call) -> Args {
    let mut out = Vec::with_capacity(3 + call.args().len());
    out.push(Either::A(ratomic_redis::script::sha1().to_owned()));
    out.push(Either::A("1".to_owned()));
    out.push(text(call.redis_key()));
    out.extend(call.args().iter().map(|a| text(a)));
    out
}

/// The driver of one Redis-backed limiter.
#[napi]
pub struct NativeRedis {
    driver: Arc<Driver>,
    /// This limiter in its environment's table of the hot path
    /// (`redisAllow`), when its answers fit the hot path's output buffer.
    hot: Option<Registered<Hot>>,
    /// Named limits (a `RedisLimiter`): decisions carry entries.
    multi: bool,
    /// The rules as given (the header fields' policies: limit and window,
    /// as the in-memory limiter of the same rule reports them).
    rules: Vec<ratomic::Rule>,
}

fn failure(e: RedisError) -> JsFailure {
    match e {
        RedisError::Invalid(e) => e.into(),
        e => JsFailure::error("ERR_RATOMIC_BACKEND", e.to_string()),
    }
}

fn kind_error(kind: &str, message: String) -> RedisError {
    match kind {
        "timeout" => RedisError::Timeout,
        "connection" => RedisError::Connection(message),
        "server" => RedisError::Server(message),
        _ => RedisError::Reply(message),
    }
}

fn reply(r: Option<Vec<f64>>) -> std::result::Result<Vec<i64>, RedisError> {
    // JavaScript passes null for anything but an array of integers.
    r.map(|v| v.into_iter().map(|x| x as i64).collect())
        .ok_or_else(|| RedisError::Reply("expected an array of integers from the script".into()))
}

fn op_of(op: u32) -> Op {
    if op == 1 {
        Op::Peek
    } else {
        Op::Allow
    }
}

fn now_of(now_ms: Option<f64>) -> Res<Option<u64>> {
    now_ms.map(ms_to_ns).transpose()
}

fn source(s: ratomic_redis::Source) -> f64 {
    match s {
        ratomic_redis::Source::Redis => 0.0,
        ratomic_redis::Source::DenyCache => 1.0,
        ratomic_redis::Source::Fallback => 3.0,
        ratomic_redis::Source::Lease => 4.0,
        _ => 2.0,
    }
}

/// Appends `d` in the layout of `decision::append` (entries for a limiter
/// of several limits, none for a single rule).
fn push(out: &mut Vec<f64>, d: &ratomic_redis::MultiDecision, multi: bool) {
    let c = &d.decision;
    out.push(f64::from(u8::from(c.allowed)));
    out.extend([c.remaining as f64, c.limit as f64, ns_to_ms(c.retry_after_nanos()), ns_to_ms(c.reset_after_nanos())]);
    if !multi {
        out.push(0.0);
        return;
    }
    out.push(d.entries().len() as f64);
    for (i, (_, e)) in d.entries().enumerate() {
        out.extend([
            i as f64,
            f64::from(u8::from(e.allowed)),
            e.remaining as f64,
            e.limit as f64,
            ns_to_ms(e.retry_after_nanos()),
            ns_to_ms(e.reset_after_nanos()),
        ]);
    }
}

/// `lease`: `"off"`, `"auto"` or the most tokens a lease takes (a whole
/// number >= 1).
pub(crate) fn lease_of(v: Option<Either<String, f64>>) -> Res<Lease> {
    const HELP: &str = "lease must be \"off\", \"auto\" or the most tokens a lease may take (a whole number >= 1)";
    match v {
        None => Ok(Lease::Off),
        Some(Either::A(s)) => match s.as_str() {
            "off" => Ok(Lease::Off),
            "auto" => Ok(Lease::Auto),
            other => {
                Err(JsFailure::range("ERR_RATOMIC_INVALID_ARGUMENT", format!("invalid lease: {other:?} ({HELP})")))
            }
        },
        Some(Either::B(n)) => match whole("lease", n, 1) {
            Ok(n) => Ok(Lease::Max(n)),
            Err(_) => Err(JsFailure::range(
                "ERR_RATOMIC_INVALID_ARGUMENT",
                format!("invalid lease: {} ({HELP})", crate::error::js_number(n)),
            )),
        },
    }
}

impl NativeRedis {
    fn answer(&self, ds: &[ratomic_redis::MultiDecision]) -> Vec<f64> {
        // A batch is answered by one source (the pipeline, or the policy for all).
        let mut numbers = vec![ds.first().map_or(0.0, |d| source(d.source))];
        for d in ds {
            push(&mut numbers, d, self.multi);
        }
        numbers
    }

    /// Ends a call sent after `sent` (a stamp `begin` wrote; anything but a
    /// whole number from 0 is none: no lease is kept then).
    fn end(
        &self,
        env: &Env,
        call: (u32, &Unknown<'_>, f64, Option<f64>),
        reply: std::result::Result<Vec<i64>, RedisError>,
        sent: f64,
        io: &mut Float64ArraySlice<'_>,
    ) -> Result<u32> {
        let (op, key, cost, now_ms) = call;
        let run = || -> Res<_> {
            let (op, cost, now) = (op_of(op), crate::error::cost(cost)?, now_of(now_ms)?);
            let d = self
                .key(env, key, |k| {
                    if sent.is_finite() && sent >= 0.0 && sent.fract() == 0.0 && sent < 9.007_199_254_740_992e15 {
                        self.driver.finish_parts_sent(op, k, cost, now, reply, sent as u64)
                    } else {
                        self.driver.finish_parts(op, k, cost, now, reply)
                    }
                })?
                .map_err(failure)?;
            Ok(self.write(&d, io))
        };
        run().map_err(|e| e.into_napi(env))
    }

    /// Writes one answer into `io` (as `answer` lays it out); returns its length.
    fn write(&self, d: &ratomic_redis::MultiDecision, io: &mut Float64ArraySlice<'_>) -> u32 {
        let mut numbers = Vec::with_capacity(IO_LEN);
        numbers.push(source(d.source));
        push(&mut numbers, d, self.multi);
        // SAFETY: JavaScript runs nothing while this synchronous call holds the view.
        let out = unsafe { io.as_mut() };
        let n = numbers.len().min(out.len());
        out[..n].copy_from_slice(&numbers[..n]);
        n as u32
    }

    /// The reply JavaScript copied into `io` (`len` < 0: it was not an
    /// array of integers).
    fn reply_in(io: &Float64ArraySlice<'_>, len: i32) -> std::result::Result<Vec<i64>, RedisError> {
        let len = usize::try_from(len)
            .map_err(|_| RedisError::Reply("expected an array of integers from the script".into()))?;
        Ok(io.iter().take(len).map(|&x| x as i64).collect())
    }

    fn with_headers<T>(
        &self,
        d: &DecisionIn,
        entries: Option<Vec<EntryIn>>,
        name: &str,
        f: impl FnOnce(&ratomic::headers::Headers<'_>) -> T,
    ) -> Res<T> {
        headers::with_backend(
            self.multi,
            self.driver.limits().names(),
            &self.rules,
            "RedisLimiter",
            d,
            entries,
            name,
            f,
        )
    }

    fn key<R>(&self, env: &Env, key: &Unknown<'_>, f: impl FnOnce(&[u8]) -> R) -> Res<R> {
        let max = self.driver.limits().max_key_len();
        // SAFETY: env and key are live values of the call in progress.
        unsafe { with_key(env.raw(), key.raw(), || max, f) }
    }
}

#[napi]
impl NativeRedis {
    /// A driver for `rules` (one unnamed rule, or named ones: a limiter).
    #[napi(constructor)]
    pub fn new(env: Env, rules: Vec<RuleSpec>, options: Option<RedisOptions>) -> Result<Self> {
        let build = || -> Res<Self> {
            let o = options.unwrap_or_default();
            let multi = !matches!(rules.as_slice(), [one] if one.name.is_none());
            let parsed = rules.iter().map(rule).collect::<Res<Vec<_>>>()?;
            let limits = match parsed.as_slice() {
                [one] if !multi => Limits::single(*one),
                many => Limits::new(rules.iter().zip(many).map(|(r, p)| (r.name.clone().unwrap_or_default(), *p))),
            };
            let mut limits = limits.map_err(failure)?;
            if let Some(p) = o.prefix {
                limits = limits.with_prefix(p).map_err(failure)?;
            }
            if let Some(n) = o.max_key_len {
                limits = limits.with_max_key_len(usize::try_from(whole("maxKeyLen", n, 0)?).unwrap_or(usize::MAX));
            }
            // A duration in whole ns: refused, quoting it, past 64 bits (never
            // saturated into range).
            let ms = |name: &str, v: Option<f64>, default: f64| -> Res<Duration> {
                const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
                let v = v.unwrap_or(default);
                let ns = (v * 1e6).round();
                if v.is_finite() && v >= 0.0 && ns < TWO_POW_64 {
                    Ok(Duration::from_nanos(ns as u64))
                } else {
                    let above = if v.is_finite() && v >= 0.0 { "above the maximum: " } else { "" };
                    Err(JsFailure::range(
                        "ERR_RATOMIC_INVALID_ARGUMENT",
                        format!(
                            "invalid {name}: {} ({above}must be a finite number of milliseconds from 0 to \
                             18446744073709.551615: 2^64 − 1 ns)",
                            crate::error::js_number(v)
                        ),
                    ))
                }
            };
            let policy = match o.on_error.as_deref() {
                None | Some("raise") => FailurePolicy::ReturnError,
                Some("allow") => FailurePolicy::FailOpen,
                Some("deny") => {
                    FailurePolicy::FailClosed { retry_after: ms("denyRetryAfterMs", o.deny_retry_after_ms, 1000.0)? }
                }
                Some(other) => {
                    return Err(JsFailure::range(
                        "ERR_RATOMIC_INVALID_ARGUMENT",
                        format!(
                            "invalid onError: {other:?} (expected \"raise\", \"allow\", \"deny\" or a ratomic limiter)"
                        ),
                    ))
                }
            };
            let options = Options {
                timeout: Duration::ZERO, // enforced by JavaScript
                policy,
                breaker_threshold: {
                    let n = o.breaker_threshold.unwrap_or(5.0);
                    u32::try_from(whole("breakerThreshold", n, 0)?).map_err(|_| {
                        JsFailure::range(
                            "ERR_RATOMIC_INVALID_ARGUMENT",
                            format!(
                                "invalid breakerThreshold: {} (above the maximum: must be a whole number from 0 to \
                                 4294967295)",
                                crate::error::js_number(n)
                            ),
                        )
                    })?
                },
                breaker_cooldown: ms("breakerCooldownMs", o.breaker_cooldown_ms, 1000.0)?,
                breaker_failure_time: ms("breakerFailureTimeMs", o.breaker_failure_time_ms, 1000.0)?,
                deny_cache: usize::try_from(whole("denyCache", o.deny_cache.unwrap_or(10_000.0), 0)?)
                    .unwrap_or(usize::MAX),
                lease: lease_of(o.lease)?,
                lease_keys: usize::try_from(whole("leaseKeys", o.lease_keys.unwrap_or(10_000.0), 1)?)
                    .unwrap_or(usize::MAX),
            };
            let driver = Arc::new(Driver::try_new(limits, options).map_err(failure)?);
            Ok(NativeRedis { driver, hot: None, multi, rules: parsed })
        };
        let mut native = build().map_err(|e| e.into_napi(&env))?;
        let fits = slot::FIRST_ENTRY + slot::ENTRY_LEN * native.driver.limits().names().count() <= OUT_LEN;
        if fits {
            native.hot = Some(Registered::new(&env, Hot { driver: native.driver.clone(), multi: native.multi })?);
        }
        Ok(native)
    }

    /// This limiter's id for the hot path's `redisAllow` (see `hot.rs`), or
    /// -1 when it has none.
    #[napi(getter)]
    pub fn hot_id(&self) -> f64 {
        self.hot.as_ref().map_or(-1.0, |h| f64::from(h.id))
    }

    /// The limits' names, in order (`["limit"]` for a single rule).
    #[napi(getter)]
    pub fn names(&self) -> Vec<String> {
        self.driver.limits().names().map(str::to_owned).collect()
    }

    /// The largest cost a call may ask.
    #[napi(getter)]
    pub fn limit(&self) -> f64 {
        self.driver.limits().max_cost() as f64
    }

    /// The rule with its units, as core prints it (`"fixed window 5 per
    /// 1m"`), or a limiter's named rules (`"burst": token bucket 5 per 1s, ...`).
    #[napi(getter)]
    pub fn description(&self) -> String {
        headers::describe_backend(self.multi, self.driver.limits().names(), &self.rules)
    }

    /// The key prefix.
    #[napi(getter)]
    pub fn prefix(&self) -> String {
        self.driver.limits().prefix().to_owned()
    }

    /// The HTTP header fields for a decision of this limiter, as
    /// `Name: value\r\n` lines: a single rule's, its limit named `name`, or
    /// a `RedisLimiter`'s with its `entries`.
    #[napi]
    pub fn headers(
        &self,
        env: Env,
        decision: DecisionIn,
        entries: Option<Vec<EntryIn>>,
        name: String,
        format: u32,
    ) -> Result<String> {
        self.with_headers(&decision, entries, &name, headers::fields(format)).map_err(|e| e.into_napi(&env))
    }

    /// The RFC 9457 problem document for a 429 answering the decision
    /// (naming the limits that denied), or null when it was allowed.
    #[napi]
    pub fn problem(
        &self,
        env: Env,
        decision: DecisionIn,
        entries: Option<Vec<EntryIn>>,
        name: String,
    ) -> Result<Option<String>> {
        self.with_headers(&decision, entries, &name, headers::problem).map_err(|e| e.into_napi(&env))
    }

    /// The script's source, for `SCRIPT LOAD` after `NOSCRIPT`.
    #[napi(getter)]
    pub fn script(&self) -> &'static str {
        ratomic_redis::script::SOURCE
    }

    /// Whether the circuit breaker is open.
    #[napi(getter)]
    pub fn breaker_open(&self) -> bool {
        self.driver.breaker_open()
    }

    /// The most tokens a lease takes, or null when this limiter leases none.
    #[napi(getter)]
    pub fn lease_max(&self) -> Option<f64> {
        self.driver.lease_max().map(|n| n as f64)
    }

    /// Keys holding a lease now.
    #[napi(getter)]
    pub fn leases_held(&self) -> u32 {
        u32::try_from(self.driver.leases_held()).unwrap_or(u32::MAX)
    }

    /// Takes every lease held: the calls that give their unused tokens back
    /// (send them in one pipeline, then `finishGiveBack` each reply), or
    /// null when none is held.
    #[napi]
    pub fn begin_give_backs(&self) -> Option<NativeRedisBatch> {
        let calls = self.driver.begin_give_backs();
        (!calls.is_empty()).then_some(NativeRedisBatch { calls })
    }

    /// Ends a give-back: how many limits took tokens back.
    #[napi]
    pub fn finish_give_back(&self, env: Env, reply_: Option<Vec<f64>>) -> Result<u32> {
        self.driver.finish_give_back(reply(reply_)).map(|n| n as u32).map_err(|e| failure(e).into_napi(&env))
    }

    /// Gives `tokens` back to this process's lease of `key` if it can (no
    /// round trip then): whether it did.
    #[napi(ts_args_type = "key: string | Uint8Array, tokens: number")]
    pub fn refund_lease(&self, env: Env, key: Unknown<'_>, tokens: f64) -> Result<bool> {
        let run = || -> Res<_> {
            let tokens = whole("tokens", tokens, 0)?;
            self.key(&env, &key, |k| self.driver.refund_lease(k, tokens))
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Starts a reset through the script (every limit full again, but for
    /// the slots leases hold): the arguments of the call to send.
    #[napi(ts_args_type = "key: string | Uint8Array, nowMs?: number", ts_return_type = "Array<string | Buffer>")]
    pub fn begin_reset_call(&self, env: Env, key: Unknown<'_>, now_ms: Option<f64>) -> Result<Args> {
        let run = || -> Res<_> {
            let now = now_of(now_ms)?;
            let call = self.key(&env, &key, |k| self.driver.begin_reset_call(k, now))?.map_err(failure)?;
            Ok(argv(&call))
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Ends a reset with the client's reply.
    #[napi]
    pub fn finish_reset(&self, env: Env, reply_: Option<Vec<f64>>) -> Result<()> {
        self.driver.finish_reset(reply(reply_)).map_err(|e| failure(e).into_napi(&env))
    }

    /// Starts an allow (`op` 0) or a peek (1): an answer written into `io`
    /// (its length), or the Redis key to send the call on (a string, or a
    /// Buffer when it is not UTF-8), with the arguments `argv` gives; then
    /// `finish` or `fail` with the same `op`, `key`, `cost` and `nowMs`.
    /// For a call to send, `io[0]` is the tokens it asks to lease (0: none;
    /// its first argument is then `"l" + io[0]`) and `io[1]` the stamp to
    /// hand back as `sent` (taken here, before the call goes out).
    /// `demand`: tokens other calls on the key wait for (a lease asked for
    /// is at least that large).
    #[napi(
        ts_args_type = "op: number, key: string | Uint8Array, cost: number, nowMs: number | undefined, io: Float64Array, demand?: number",
        ts_return_type = "number | string | Buffer"
    )]
    #[allow(clippy::too_many_arguments)] // the JavaScript call's arguments
    pub fn begin(
        &self,
        env: Env,
        op: u32,
        key: Unknown<'_>,
        cost: f64,
        now_ms: Option<f64>,
        mut io: Float64ArraySlice<'_>,
        demand: Option<f64>,
    ) -> Result<Either3<u32, String, Buffer>> {
        let mut run = || -> Res<_> {
            let (op, cost, now) = (op_of(op), crate::error::cost(cost)?, now_of(now_ms)?);
            // A count JavaScript made: anything but a whole number >= 0 is none.
            let demand = demand.filter(|d| d.is_finite() && *d >= 0.0).map_or(0, |d| d as u64);
            match self.key(&env, &key, |k| self.driver.begin_for(op, k, cost, now, demand))?.map_err(failure)? {
                Step::Answer(d) => Ok(Either3::A(self.write(&d, &mut io))),
                Step::Send(call) => {
                    // SAFETY: JavaScript runs nothing while this synchronous call holds the view.
                    let out = unsafe { io.as_mut() };
                    if out.len() >= 2 {
                        out[0] = call.lease() as f64;
                        out[1] = self.driver.stamp() as f64;
                    }
                    Ok(match text(call.redis_key()) {
                        Either::A(s) => Either3::B(s),
                        Either::B(b) => Either3::C(b),
                    })
                }
            }
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// What `begin` would answer without a round trip (a lease, a cached
    /// denial, the policy while the breaker is open), written into `io` as
    /// `begin` writes it (returns its length); or, when the call needs a
    /// round trip, its Redis key (and nothing asked for: no lease). For a
    /// call that comes while a round trip is in flight: it waits for the next
    /// one and is begun again then, where the lease its key asks for covers
    /// every call waiting on it.
    #[napi(
        ts_args_type = "op: number, key: string | Uint8Array, cost: number, nowMs: number | undefined, io: Float64Array",
        ts_return_type = "number | string | Buffer"
    )]
    pub fn begin_local(
        &self,
        env: Env,
        op: u32,
        key: Unknown<'_>,
        cost: f64,
        now_ms: Option<f64>,
        mut io: Float64ArraySlice<'_>,
    ) -> Result<Either3<u32, String, Buffer>> {
        let mut run = || -> Res<_> {
            let (op, cost, now) = (op_of(op), crate::error::cost(cost)?, now_of(now_ms)?);
            let local = self.key(&env, &key, |k| {
                self.driver.begin_local(op, k, cost, now).map(|d| d.ok_or_else(|| self.driver.limits().key(k)))
            })?;
            Ok(match local.map_err(failure)? {
                Ok(d) => Either3::A(self.write(&d, &mut io)),
                Err(rkey) => match text(&rkey) {
                    Either::A(s) => Either3::B(s),
                    Either::B(b) => Either3::C(b),
                },
            })
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// The script's arguments (`ARGV`) for an allow or peek of `cost` at
    /// `nowMs` (none: the server's time), whatever the key: the same for
    /// every call of that `op` and `cost` without `nowMs`.
    #[napi(ts_args_type = "op: number, cost: number, nowMs?: number")]
    pub fn argv(&self, env: Env, op: u32, cost: f64, now_ms: Option<f64>) -> Result<Vec<String>> {
        let run = || -> Res<_> {
            let (op, cost, now) = (op_of(op), crate::error::cost(cost)?, now_of(now_ms)?);
            let args = self.driver.limits().args(op, now, cost).map_err(failure)?;
            Ok(args.into_iter().map(|a| String::from_utf8_lossy(&a).into_owned()).collect())
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// The script's SHA1, for `EVALSHA`.
    #[napi(getter)]
    pub fn sha(&self) -> &'static str {
        ratomic_redis::script::sha1()
    }

    /// Who answers: the names of the codes answers start with.
    #[napi(getter)]
    pub fn sources(&self) -> Vec<&'static str> {
        SOURCES.to_vec()
    }

    /// Ends a call `begin` asked to send, with the client's reply copied
    /// into `io` (`replyLen` < 0: it was not an array of integers) and the
    /// stamp `begin` wrote as `sent`: writes the answer into `io`, returns
    /// its length.
    #[napi(
        ts_args_type = "op: number, key: string | Uint8Array, cost: number, nowMs: number | undefined, io: Float64Array, replyLen: number, sent: number"
    )]
    #[allow(clippy::too_many_arguments)] // the JavaScript call's arguments, as `begin` took them
    pub fn finish(
        &self,
        env: Env,
        op: u32,
        key: Unknown<'_>,
        cost: f64,
        now_ms: Option<f64>,
        mut io: Float64ArraySlice<'_>,
        reply_len: i32,
        sent: f64,
    ) -> Result<u32> {
        let reply = Self::reply_in(&io, reply_len);
        self.end(&env, (op, &key, cost, now_ms), reply, sent, &mut io)
    }

    /// Ends a call whose sending failed (sent at the stamp `begin` wrote,
    /// its time counting towards the breaker): the policy's answer written
    /// into `io` (its length), or an `ERR_RATOMIC_BACKEND` error.
    #[napi(
        ts_args_type = "op: number, key: string | Uint8Array, cost: number, nowMs: number | undefined, io: Float64Array, failure: RedisFailure, sent: number"
    )]
    #[allow(clippy::too_many_arguments)] // the JavaScript call's arguments, as `begin` took them
    pub fn fail(
        &self,
        env: Env,
        op: u32,
        key: Unknown<'_>,
        cost: f64,
        now_ms: Option<f64>,
        mut io: Float64ArraySlice<'_>,
        failure_: RedisFailure,
        sent: f64,
    ) -> Result<u32> {
        let e = Err(kind_error(&failure_.kind, failure_.message));
        self.end(&env, (op, &key, cost, now_ms), e, sent, &mut io)
    }

    /// Numbers an `io` array must hold: the longest reply or answer.
    #[napi(getter)]
    pub fn io_len(&self) -> u32 {
        IO_LEN as u32
    }

    /// Starts a refund: the arguments of the call to send.
    #[napi(
        ts_args_type = "key: string | Uint8Array, tokens: number, nowMs?: number",
        ts_return_type = "Array<string | Buffer>"
    )]
    pub fn begin_refund(&self, env: Env, key: Unknown<'_>, tokens: f64, now_ms: Option<f64>) -> Result<Args> {
        let run = || -> Res<_> {
            let (tokens, now) = (whole("tokens", tokens, 0)?, now_of(now_ms)?);
            let call = self.key(&env, &key, |k| self.driver.begin_refund(k, tokens, now))?.map_err(failure)?;
            Ok(argv(&call))
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Ends a refund with the client's reply.
    #[napi]
    pub fn finish_refund(&self, env: Env, reply_: Option<Vec<f64>>) -> Result<()> {
        self.driver.finish_refund(reply(reply_)).map(drop).map_err(|e| failure(e).into_napi(&env))
    }

    /// The `ERR_RATOMIC_BACKEND` error for a failed refund or reset.
    #[napi]
    pub fn backend_error(&self, env: Env, failure_: RedisFailure) -> Result<()> {
        Err(failure(kind_error(&failure_.kind, failure_.message)).into_napi(&env))
    }

    /// Starts a reset: the Redis key to `DEL`.
    #[napi(ts_args_type = "key: string | Uint8Array")]
    pub fn begin_reset(&self, env: Env, key: Unknown<'_>) -> Result<Buffer> {
        let run = || -> Res<_> { self.key(&env, &key, |k| self.driver.begin_reset(k))?.map_err(failure) };
        run().map(Buffer::from).map_err(|e| e.into_napi(&env))
    }

    /// Starts a batch (every request checked first): an answer (the breaker
    /// is open), or the calls to send in one pipeline.
    #[napi(ts_args_type = "requests: Array<string | Uint8Array | [string | Uint8Array, number?]>, nowMs?: number")]
    pub fn begin_many(
        &self,
        env: Env,
        requests: Unknown<'_>,
        now_ms: Option<f64>,
    ) -> Result<Either<Vec<f64>, NativeRedisBatch>> {
        let run = || -> Res<_> {
            let limits = self.driver.limits();
            let check = |k: &[u8], c: u64| match limits.check(k, c) {
                Err(RedisError::Invalid(e)) => Err(e),
                _ => Ok(()),
            };
            // SAFETY: env and requests are live values of the call in progress.
            let read = unsafe { batch::read(env.raw(), requests.raw(), limits.max_key_len())? };
            let requests = read.map_err(|unread| unread.first_invalid(check))?;
            let now = now_of(now_ms)?;
            match self.driver.begin_many(requests.pairs(), now).map_err(failure)? {
                BatchStep::Answer(ds) => Ok(Either::A(self.answer(&ds))),
                BatchStep::Send(calls) => Ok(Either::B(NativeRedisBatch { calls })),
            }
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Ends a batch with the pipeline's replies (null for a reply that is
    /// not an array of integers).
    #[napi]
    pub fn finish_many(&self, env: Env, batch: &NativeRedisBatch, replies: Vec<Option<Vec<f64>>>) -> Result<Vec<f64>> {
        let replies = replies.into_iter().map(reply).collect::<std::result::Result<Vec<_>, _>>();
        let ds = self.driver.finish_many(&batch.calls, replies).map_err(|e| failure(e).into_napi(&env))?;
        Ok(self.answer(&ds))
    }

    /// Ends a batch whose pipeline failed: the policy's answers, or an
    /// `ERR_RATOMIC_BACKEND` error.
    #[napi]
    pub fn fail_many(&self, env: Env, batch: &NativeRedisBatch, failure_: RedisFailure) -> Result<Vec<f64>> {
        let ds = self
            .driver
            .finish_many(&batch.calls, Err(kind_error(&failure_.kind, failure_.message)))
            .map_err(|e| failure(e).into_napi(&env))?;
        Ok(self.answer(&ds))
    }
}

/// What `redisAllow` does with an allow of `cost` on `key` at the server's
/// time: the answer written into `out` in `decision.rs`'s layout (as `begin`
/// writes it into `io` from index 2), and its code `source × 2 + allowed`;
/// or, for a call to send, its lease at `out[0]` and its stamp at `out[1]`,
/// and its Redis key.
pub enum HotStep {
    Answer(u32),
    Send(Vec<u8>),
}

impl Hot {
    pub fn max_key_len(&self) -> usize {
        self.driver.limits().max_key_len()
    }

    /// `demand`: as `begin`'s; `None`: `beginLocal`'s work (a call that
    /// needs a round trip asks for nothing, and is not begun).
    pub fn allow(&self, key: &[u8], cost: u64, demand: Option<u64>, out: &mut [f64]) -> Res<HotStep> {
        let Some(demand) = demand else {
            return Ok(match self.driver.begin_local(Op::Allow, key, cost, None).map_err(failure)? {
                Some(d) => HotStep::Answer(self.answer(&d, out)),
                None => HotStep::Send(self.driver.limits().key(key)),
            });
        };
        match self.driver.begin_for(Op::Allow, key, cost, None, demand).map_err(failure)? {
            Step::Answer(d) => Ok(HotStep::Answer(self.answer(&d, out))),
            Step::Send(call) => {
                out[0] = call.lease() as f64;
                out[1] = self.driver.stamp() as f64;
                Ok(HotStep::Send(call.redis_key().to_vec()))
            }
        }
    }

    /// Writes `d` into `out`; its code.
    fn answer(&self, d: &ratomic_redis::MultiDecision, out: &mut [f64]) -> u32 {
        let mut numbers = Vec::with_capacity(IO_LEN);
        push(&mut numbers, d, self.multi);
        // `push` leads with `allowed`: the code carries it.
        let n = (numbers.len() - 1).min(out.len());
        out[..n].copy_from_slice(&numbers[1..=n]);
        source(d.source) as u32 * 2 + u32::from(d.allowed())
    }
}
