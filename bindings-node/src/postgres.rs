//! `NativePostgres`: ratomic-postgres's sans-IO [`Driver`] for
//! `ratomic/postgres`, whose classes run its statements through the user's
//! own `pg` Pool (or Client). Everything but the I/O is here (or in the
//! driver): input checks, the statement's parameters, the decoding of its
//! row, the deny cache, the circuit breaker and the failure policy.
//! JavaScript runs `statement` with `call.params` and says how the query
//! failed; decisions come back in the layout of `decision.rs`, read by the
//! same decoder as the in-memory limiters'.

use std::time::Duration;

use napi::bindgen_prelude::{Either, Unknown};
use napi::{Env, JsValue, Result};
use napi_derive::napi;

use ratomic_postgres::{
    Batch, BatchStep, Call, Coalesced, Driver, Error as PgError, FailurePolicy, Limits, Op, Options, Statement, Step,
};

use crate::batch;
use crate::clock::{ms_to_ns, ns_to_ms};
use crate::error::{whole, JsFailure, Res};
use crate::headers::{self, DecisionIn, EntryIn};
use crate::key::with_key;
use crate::rule::{rule, RuleSpec};

/// The statements with `pg`'s placeholders and explicit types.
const CALL: &str =
    "SELECT ratomic_v1_call($1::text, $2::text, $3::bytea, $4::bigint, $5::bigint, $6::text, $7::bigint[], $8::bigint[]) AS r";
const MANY: &str = "SELECT ratomic_v1_many($1::text, $2::text, $3::bytea[], $4::bigint[], $5::bigint, $6::text, \
                    $7::bigint[], $8::bigint[]) AS r";
const GC: &str = "SELECT ratomic_v1_gc($1::text, $2::bigint, $3::int) AS r";
/// Typed already, its one column named `r`.
const ALLOW: &str = ratomic_postgres::schema::ALLOW;
const LEASE: &str = "SELECT ratomic_v1_lease($1::text, $2::bytea, $3::bigint, $4::bigint, $5::bigint, $6::text, \
                     $7::bigint[], $8::bigint[]) AS r";
const GIVE_BACK: &str =
    "SELECT ratomic_v1_give_back($1::text, $2::bytea, $3::bigint, $4::text, $5::bigint[], $6::bigint[]) AS r";

/// Who answers, in the order of the code an answer starts with.
const SOURCES: [&str; 5] = ["postgres", "deny_cache", "policy", "fallback", "lease"];

/// How a PostgreSQL-backed limiter behaves (every field optional).
#[napi(object)]
#[derive(Clone, Debug, Default)]
pub struct PostgresOptions {
    /// Where the rows live (default `"ratomic"`).
    pub prefix: Option<String>,
    /// `"raise"` (the default), `"allow"`, `"deny"` or `"fallback"`.
    pub on_error: Option<String>,
    /// The `retryAfterMs` of a denial by `onError: "deny"` (default 1000).
    pub deny_retry_after_ms: Option<f64>,
    /// Keys whose denial is answered locally (default 10,000; 0: off).
    pub deny_cache: Option<f64>,
    /// Failures in a row that open the circuit breaker (default 5; 0: off).
    pub breaker_threshold: Option<f64>,
    /// How long the breaker stays open, ms (default 1000).
    pub breaker_cooldown_ms: Option<f64>,
    /// The longest key in bytes (default 1024).
    pub max_key_len: Option<f64>,
    /// `"off"` (the default), `"auto"`, or the most tokens a lease takes.
    pub lease: Option<Either<String, f64>>,
    /// Keys whose leases are kept (default 10,000).
    pub lease_keys: Option<f64>,
}

/// How running a statement failed.
#[napi(object)]
pub struct PostgresFailure {
    /// "timeout", "connection", "server" or "reply".
    pub kind: String,
    /// The client's error message.
    pub message: String,
}

/// A statement parameter as JavaScript gets it.
type JsParam =
    Option<Either<String, Either<napi::bindgen_prelude::Buffer, Vec<Either<String, napi::bindgen_prelude::Buffer>>>>>;

/// A statement parameter: text, bytes, NULL, or an array of either.
#[derive(Clone, Debug)]
enum Param {
    Null,
    Text(String),
    Bytes(Vec<u8>),
    Texts(Vec<String>),
    ByteArrays(Vec<Vec<u8>>),
}

impl Param {
    fn js(&self) -> JsParam {
        match self {
            Param::Null => None,
            Param::Text(s) => Some(Either::A(s.clone())),
            Param::Bytes(b) => Some(Either::B(Either::A(b.clone().into()))),
            Param::Texts(v) => Some(Either::B(Either::B(v.iter().map(|s| Either::A(s.clone())).collect()))),
            Param::ByteArrays(v) => Some(Either::B(Either::B(v.iter().map(|b| Either::B(b.clone().into())).collect()))),
        }
    }
}

/// One statement to run, or the answer given without one.
#[napi]
pub struct NativePostgresCall {
    call: Option<Call>,
    answer: Option<Vec<f64>>,
    params: Vec<Param>,
}

#[napi]
impl NativePostgresCall {
    /// The answer when no statement is needed: `[source, ...decision]`.
    #[napi(getter)]
    pub fn answer(&self) -> Option<Vec<f64>> {
        self.answer.clone()
    }

    /// The statement's parameters (64-bit numbers as text, so none is rounded).
    #[napi(getter, ts_return_type = "Array<string | Buffer | Array<string | Buffer> | null>")]
    pub fn params(&self) -> Vec<JsParam> {
        self.params.iter().map(Param::js).collect()
    }

    /// Whether it may wait for others and go with them in one statement
    /// (`NativePostgres.coalesce`): an allow at the server's time that
    /// asks for no lease.
    #[napi(getter)]
    pub fn coalescible(&self) -> bool {
        self.call.as_ref().is_some_and(Call::coalescible)
    }

    /// The statement to run: `ratomic_v1_lease` when the call asks for a
    /// lease, the common call's upsert for an allow on one token bucket, else
    /// `ratomic_v1_call`.
    #[napi(getter)]
    pub fn statement(&self) -> &'static str {
        match self.call.as_ref().map(Call::statement) {
            Some(Statement::Lease) => LEASE,
            Some(Statement::Allow) => ALLOW,
            _ => CALL,
        }
    }
}

/// One batch to run (`manyStatement` with `params`).
#[napi]
pub struct NativePostgresBatch {
    batch: Batch,
    params: Vec<Param>,
}

#[napi]
impl NativePostgresBatch {
    /// The batch statement's parameters.
    #[napi(getter, ts_return_type = "Array<string | Buffer | Array<string | Buffer> | null>")]
    pub fn params(&self) -> Vec<JsParam> {
        self.params.iter().map(Param::js).collect()
    }
}

/// The driver of one PostgreSQL-backed limiter.
#[napi]
pub struct NativePostgres {
    driver: Driver,
    multi: bool,
    /// The rules as given (the header fields' policies, as for Redis).
    rules: Vec<ratomic::Rule>,
    /// Calls begun by `beginAllow` (or `park`ed) until they finish, by id:
    /// a number crosses to JavaScript for a fraction of what a class
    /// instance costs (~0.45 µs against ~1.75 µs a `beginAllow`).
    pending: std::sync::Mutex<Pending>,
}

/// A slab of calls in flight.
#[derive(Default)]
struct Pending {
    calls: Vec<Option<Call>>,
    free: Vec<u32>,
}

impl Pending {
    fn put(&mut self, call: Call) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.calls[id as usize] = Some(call);
                id
            }
            None => {
                self.calls.push(Some(call));
                u32::try_from(self.calls.len() - 1).expect("fewer than 2^32 calls in flight")
            }
        }
    }

    fn take(&mut self, id: u32) -> Res<Call> {
        match self.calls.get_mut(id as usize).and_then(Option::take) {
            Some(call) => {
                self.free.push(id);
                Ok(call)
            }
            None => Err(JsFailure::type_error(
                "ERR_RATOMIC_INVALID_ARGUMENT",
                format!("no call {id} in flight: each call begun is finished once"),
            )),
        }
    }
}

fn failure(e: PgError) -> JsFailure {
    match e {
        PgError::Invalid(e) => e.into(),
        e => JsFailure::error("ERR_RATOMIC_BACKEND", e.to_string()),
    }
}

fn outcome(reply: Option<String>, failed: Option<PostgresFailure>) -> std::result::Result<Vec<i64>, PgError> {
    if let Some(f) = failed {
        return Err(match f.kind.as_str() {
            "timeout" => PgError::Timeout,
            "connection" => PgError::Connection(f.message),
            "server" => PgError::Server(f.message),
            _ => PgError::Reply(f.message),
        });
    }
    let text = reply.ok_or_else(|| PgError::Reply("expected an array of integers from ratomic_v1_call".into()))?;
    // The common call's upsert answers one bigint (its reset, which the
    // driver makes a reply of).
    if let Ok(reset) = text.parse::<i64>() {
        return Ok(vec![reset]);
    }
    // The bigint[] in PostgreSQL's text form, as the server sent it: `{1,-2,3}`.
    let inner = text
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(|| PgError::Reply(format!("not an array of integers: {text:?}")))?;
    if inner.is_empty() {
        return Ok(Vec::new());
    }
    inner.split(',').map(|s| s.parse::<i64>().map_err(|_| PgError::Reply(format!("not an integer: {s:?}")))).collect()
}

fn texts(v: &[i64]) -> Param {
    Param::Texts(v.iter().map(i64::to_string).collect())
}

fn source(s: ratomic_postgres::Source) -> f64 {
    match s {
        ratomic_postgres::Source::Postgres => 0.0,
        ratomic_postgres::Source::DenyCache => 1.0,
        ratomic_postgres::Source::Fallback => 3.0,
        ratomic_postgres::Source::Lease => 4.0,
        _ => 2.0,
    }
}

/// Appends `d` in the layout of `decision::append` (entries for a limiter
/// of several limits, none for a single rule).
fn push(out: &mut Vec<f64>, d: &ratomic_postgres::MultiDecision, multi: bool) {
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

impl NativePostgres {
    fn answer(&self, ds: &[ratomic_postgres::MultiDecision]) -> Vec<f64> {
        let mut out = vec![ds.first().map_or(0.0, |d| source(d.source))];
        for d in ds {
            push(&mut out, d, self.multi);
        }
        out
    }

    fn params(&self, call: &Call) -> Vec<Param> {
        let l = self.driver.limits();
        if let (Statement::Allow, Some((_, tau))) = (call.statement(), l.one_bucket()) {
            return vec![
                Param::Text(l.prefix().to_owned()),
                Param::Bytes(call.key().to_vec()),
                call.at_us().map_or(Param::Null, |t| Param::Text(t.to_string())),
                Param::Text(call.increment().to_string()),
                Param::Text(tau.to_string()),
            ];
        }
        if call.lease() > 0 {
            return vec![
                Param::Text(l.prefix().to_owned()),
                Param::Bytes(call.key().to_vec()),
                call.at_us().map_or(Param::Null, |t| Param::Text(t.to_string())),
                Param::Text(call.amount().to_string()),
                Param::Text(call.lease_size().to_string()),
                Param::Text(l.kinds().to_owned()),
                texts(l.p1()),
                texts(l.p2()),
            ];
        }
        vec![
            Param::Text(call.op().code().to_owned()),
            Param::Text(l.prefix().to_owned()),
            Param::Bytes(call.key().to_vec()),
            call.at_us().map_or(Param::Null, |t| Param::Text(t.to_string())),
            Param::Text(call.amount().to_string()),
            Param::Text(l.kinds().to_owned()),
            texts(l.p1()),
            texts(l.p2()),
        ]
    }

    /// The parameters of a batch statement (`MANY`).
    fn many_params(&self, b: &Batch) -> Vec<Param> {
        let l = self.driver.limits();
        vec![
            Param::Text("a".to_owned()),
            Param::Text(l.prefix().to_owned()),
            Param::ByteArrays(b.keys().into_iter().map(<[u8]>::to_vec).collect()),
            texts(&b.amounts()),
            b.at_us().map_or(Param::Null, |t| Param::Text(t.to_string())),
            Param::Text(l.kinds().to_owned()),
            texts(l.p1()),
            texts(l.p2()),
        ]
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn call(&self, call: Call) -> NativePostgresCall {
        let params = self.params(&call);
        NativePostgresCall { call: Some(call), answer: None, params }
    }

    fn with_headers<T>(
        &self,
        d: &DecisionIn,
        entries: Option<Vec<EntryIn>>,
        name: &str,
        f: impl FnOnce(&ratomic::headers::Headers<'_>) -> T,
    ) -> Res<T> {
        let names = self.driver.limits().names();
        headers::with_backend(self.multi, names, &self.rules, "PostgresLimiter", d, entries, name, f)
    }

    fn key<R>(&self, env: &Env, key: &Unknown<'_>, f: impl FnOnce(&[u8]) -> R) -> Res<R> {
        let max = self.driver.limits().max_key_len();
        // SAFETY: env and key are live values of the call in progress.
        unsafe { with_key(env.raw(), key.raw(), || max, f) }
    }
}

#[napi]
impl NativePostgres {
    /// A driver for `rules` (one unnamed rule, or named ones: a limiter).
    #[napi(constructor)]
    pub fn new(env: Env, rules: Vec<RuleSpec>, options: Option<PostgresOptions>) -> Result<Self> {
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
            let ms = |name: &str, v: Option<f64>, default: f64| -> Res<Duration> {
                let v = v.unwrap_or(default);
                if v.is_finite() && (0.0..1.8e13).contains(&v) {
                    Ok(Duration::from_nanos((v * 1e6).round() as u64))
                } else {
                    Err(JsFailure::range(
                        "ERR_RATOMIC_INVALID_ARGUMENT",
                        format!(
                            "invalid {name}: {} (must be a finite number of milliseconds >= 0)",
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
                Some("fallback") => FailurePolicy::Fallback,
                Some(other) => {
                    return Err(JsFailure::range(
                        "ERR_RATOMIC_INVALID_ARGUMENT",
                        format!("invalid onError: {other:?} (expected \"raise\", \"allow\", \"deny\" or \"fallback\")"),
                    ))
                }
            };
            let threshold = o.breaker_threshold.unwrap_or(5.0);
            let options = Options {
                timeout: Duration::ZERO, // the connection's statement_timeout bounds a call
                policy,
                breaker_threshold: u32::try_from(whole("breakerThreshold", threshold, 0)?).unwrap_or(u32::MAX),
                breaker_cooldown: ms("breakerCooldownMs", o.breaker_cooldown_ms, 1000.0)?,
                deny_cache: usize::try_from(whole("denyCache", o.deny_cache.unwrap_or(10_000.0), 0)?)
                    .unwrap_or(usize::MAX),
                lease: crate::redis::lease_of(o.lease)?,
                lease_keys: usize::try_from(whole("leaseKeys", o.lease_keys.unwrap_or(10_000.0), 1)?)
                    .unwrap_or(usize::MAX),
                ..Options::default()
            };
            Ok(NativePostgres {
                driver: Driver::try_new(limits, options).map_err(failure)?,
                multi,
                rules: parsed,
                pending: Default::default(),
            })
        };
        build().map_err(|e| e.into_napi(&env))
    }

    /// The statement of one call (`pg` placeholders).
    #[napi(getter)]
    pub fn statement(&self) -> &'static str {
        CALL
    }

    /// The statement of a batch.
    #[napi(getter)]
    pub fn many_statement(&self) -> &'static str {
        MANY
    }

    /// The statement of a gc: (prefix, at_us as text or null, max rows).
    #[napi(getter)]
    pub fn gc_statement(&self) -> &'static str {
        GC
    }

    /// The migration: the table (unlogged if asked) and the functions.
    #[napi]
    pub fn schema(unlogged: bool) -> String {
        ratomic_postgres::schema::sql(unlogged)
    }

    /// Who answered, by the code an answer starts with.
    #[napi(getter)]
    pub fn sources(&self) -> Vec<&'static str> {
        SOURCES.to_vec()
    }

    /// The limits' names, in order (`["limit"]` for a single rule).
    #[napi(getter)]
    pub fn names(&self) -> Vec<String> {
        self.driver.limits().names().map(str::to_owned).collect()
    }

    /// The rule with its units (`"fixed window 5 per 1m"`), or a limiter's
    /// named rules, as `NativeRedis` describes them.
    #[napi(getter)]
    pub fn description(&self) -> String {
        headers::describe_backend(self.multi, self.driver.limits().names(), &self.rules)
    }

    /// The HTTP header fields for a decision of this limiter, as
    /// `Name: value\r\n` lines (see `NativeRedis::headers`).
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

    /// The RFC 9457 problem document for a 429 answering the decision, or
    /// null when it was allowed.
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

    /// The largest cost a call may ask.
    #[napi(getter)]
    pub fn limit(&self) -> f64 {
        self.driver.limits().max_cost() as f64
    }

    /// The row prefix.
    #[napi(getter)]
    pub fn prefix(&self) -> String {
        self.driver.limits().prefix().to_owned()
    }

    /// Whether the circuit breaker is open.
    #[napi(getter)]
    pub fn breaker_open(&self) -> bool {
        self.driver.breaker_open()
    }

    /// `nowMs` as the statements' time in whole µs (text), or null.
    #[napi]
    pub fn at_us(&self, env: Env, now_ms: Option<f64>) -> Result<Option<String>> {
        let run = || -> Res<Option<String>> {
            let now = now_ms.map(ms_to_ns).transpose()?;
            Ok(self.driver.limits().at_us(now).map_err(failure)?.map(|t| t.to_string()))
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Starts an allow (`op` 0) or a peek (1): the statement to run, or the
    /// answer given without one.
    #[napi]
    pub fn begin(
        &self,
        env: Env,
        op: u32,
        key: Unknown<'_>,
        cost: f64,
        now_ms: Option<f64>,
    ) -> Result<NativePostgresCall> {
        let run = || -> Res<_> {
            let op = if op == 1 { Op::Peek } else { Op::Allow };
            let (cost, now) = (crate::error::cost(cost)?, now_ms.map(ms_to_ns).transpose()?);
            Ok(match self.key(&env, &key, |k| self.driver.begin(op, k, cost, now))?.map_err(failure)? {
                Step::Answer(d) => {
                    NativePostgresCall { call: None, answer: Some(self.answer(&[d])), params: Vec::new() }
                }
                Step::Send(call) => self.call(call),
            })
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// `begin` of an allow at the server's time, for a limiter that leases
    /// nothing: the answer, or the id of the call to run (end it with
    /// `finishAllow`, or send it with others by `coalesce`) — whose
    /// parameters are not made here: JavaScript puts them together from
    /// the key it holds and `callParams`.
    #[napi]
    pub fn begin_allow(&self, env: Env, key: Unknown<'_>, cost: f64) -> Result<Either<Vec<f64>, u32>> {
        let run = || -> Res<_> {
            let cost = crate::error::cost(cost)?;
            Ok(match self.key(&env, &key, |k| self.driver.begin(Op::Allow, k, cost, None))?.map_err(failure)? {
                Step::Answer(d) => Either::A(self.answer(&[d])),
                Step::Send(call) => Either::B(self.pending().put(call)),
            })
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Ends the call `id` (from `beginAllow` or `park`) as `finish` does.
    #[napi]
    pub fn finish_allow(
        &self,
        env: Env,
        id: u32,
        reply: Option<String>,
        failed: Option<PostgresFailure>,
    ) -> Result<Vec<f64>> {
        let run = || -> Res<_> {
            let call = self.pending().take(id)?;
            let d = self.driver.finish(&call, outcome(reply, failed)).map_err(failure)?;
            Ok(self.answer(&[d]))
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Keeps a `coalescible` call begun by `begin` for `coalesce`: its id.
    #[napi]
    pub fn park(&self, env: Env, call: &NativePostgresCall) -> Result<u32> {
        match &call.call {
            Some(c) if c.coalescible() => Ok(self.pending().put(c.clone())),
            _ => Err(JsFailure::type_error("ERR_RATOMIC_INVALID_ARGUMENT", "park: only a coalescible call waits")
                .into_napi(&env)),
        }
    }

    /// How an allow `beginAllow` starts is sent: `[CALL statement, kinds,
    /// p1, p2]` — `ratomic_v1_call` with `['a', prefix, key bytes, null,
    /// cost as text, kinds, p1, p2]`, the rules' parameters as PostgreSQL
    /// array literals — then, for one token bucket, `[ALLOW statement, T,
    /// τ]` (µs, as text): the upsert with `[prefix, key bytes, null, cost ×
    /// T as text, τ]`, which answers the bucket's reset when it grants and
    /// no row when it does not (then the call goes by `ratomic_v1_call`).
    #[napi(getter)]
    pub fn call_params(&self) -> Vec<String> {
        let l = self.driver.limits();
        let literal = |v: &[i64]| format!("{{{}}}", v.iter().map(i64::to_string).collect::<Vec<_>>().join(","));
        let mut out = vec![CALL.to_owned(), l.kinds().to_owned(), literal(l.p1()), literal(l.p2())];
        if let Some((t, tau)) = l.one_bucket() {
            out.extend([ALLOW.to_owned(), t.to_string(), tau.to_string()]);
        }
        out
    }

    /// The same call by `ratomic_v1_call` (`statement` and `params`): sent
    /// when the common call's upsert returned no row.
    #[napi]
    pub fn general(&self, call: &NativePostgresCall) -> NativePostgresCall {
        let general = call.call.as_ref().map(Call::general);
        let params = general.as_ref().map(|c| self.params(c)).unwrap_or_default();
        NativePostgresCall { call: general, answer: call.answer.clone(), params }
    }

    /// The common call's statement: an upsert that returns no row when it
    /// does not grant.
    #[napi(getter)]
    pub fn allow_statement(&self) -> &'static str {
        ALLOW
    }

    /// Calls that waited while this limiter's statements were out (their
    /// ids, from `beginAllow` or `park`), as one batch statement
    /// (`manyStatement` with the batch's `params`). If the circuit breaker
    /// opened while they waited (a statement out failed: the server
    /// crashed, say), nothing is to be sent: their answers by the failure
    /// policy instead, each as `finishCoalesced` gives it. Either way their
    /// ids are done with.
    #[napi]
    #[allow(clippy::type_complexity)] // napi's typings need the type spelt out, not an alias
    pub fn coalesce(
        &self,
        env: Env,
        ids: Vec<u32>,
    ) -> Result<Either<Vec<Either<Vec<f64>, String>>, NativePostgresBatch>> {
        let run = || -> Res<_> {
            let calls = {
                let mut pending = self.pending();
                ids.iter().map(|&id| pending.take(id)).collect::<Res<Vec<_>>>()?
            };
            Ok(match self.driver.coalesce(calls).map_err(failure)? {
                Coalesced::Send(b) => {
                    let params = self.many_params(&b);
                    Either::B(NativePostgresBatch { batch: b, params })
                }
                Coalesced::Answered(answers) => Either::A(
                    answers
                        .into_iter()
                        .map(|r| match r {
                            Ok(d) => Either::A(self.answer(&[d])),
                            Err(e) => Either::B(e.to_string()),
                        })
                        .collect(),
                ),
            })
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Ends a `coalesce`d batch with the row's value or how the statement
    /// failed: per call, in order, its answer (`[source, ...decision]`) or,
    /// when the failure policy raises, the error's message.
    #[napi]
    pub fn finish_coalesced(
        &self,
        batch: &NativePostgresBatch,
        reply: Option<String>,
        failed: Option<PostgresFailure>,
    ) -> Vec<Either<Vec<f64>, String>> {
        self.driver
            .finish_coalesced(&batch.batch, outcome(reply, failed))
            .into_iter()
            .map(|r| match r {
                Ok(d) => Either::A(self.answer(&[d])),
                Err(e) => Either::B(e.to_string()),
            })
            .collect()
    }

    /// Ends a call with the row's value (the bigint[] as `pg` gives it: text),
    /// or how it failed: `[source, ...decision]`.
    #[napi]
    pub fn finish(
        &self,
        env: Env,
        call: &NativePostgresCall,
        reply: Option<String>,
        failed: Option<PostgresFailure>,
    ) -> Result<Vec<f64>> {
        let Some(c) = &call.call else { return Ok(call.answer.clone().unwrap_or_default()) };
        let d = self.driver.finish(c, outcome(reply, failed)).map_err(|e| failure(e).into_napi(&env))?;
        Ok(self.answer(&[d]))
    }

    /// Starts a refund of `tokens` on `key`.
    #[napi]
    pub fn begin_refund(
        &self,
        env: Env,
        key: Unknown<'_>,
        tokens: f64,
        now_ms: Option<f64>,
    ) -> Result<NativePostgresCall> {
        let run = || -> Res<_> {
            let tokens = whole("tokens", tokens, 0)?;
            let now = now_ms.map(ms_to_ns).transpose()?;
            Ok(self.call(self.key(&env, &key, |k| self.driver.begin_refund(k, tokens, now))?.map_err(failure)?))
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Starts a reset of `key`.
    #[napi]
    pub fn begin_reset(&self, env: Env, key: Unknown<'_>) -> Result<NativePostgresCall> {
        let run =
            || -> Res<_> { Ok(self.call(self.key(&env, &key, |k| self.driver.begin_reset(k))?.map_err(failure)?)) };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Ends a refund or a reset (`refund`: which).
    #[napi]
    pub fn finish_change(
        &self,
        env: Env,
        refund: bool,
        reply: Option<String>,
        failed: Option<PostgresFailure>,
    ) -> Result<()> {
        let r = outcome(reply, failed);
        let done = if refund { self.driver.finish_refund(r).map(drop) } else { self.driver.finish_reset(r) };
        done.map_err(|e| failure(e).into_napi(&env))
    }

    /// Starts a batch: its answers (nothing to run) or the batch to run.
    #[napi]
    pub fn begin_many(
        &self,
        env: Env,
        requests: Unknown<'_>,
        now_ms: Option<f64>,
    ) -> Result<Either<Vec<f64>, NativePostgresBatch>> {
        let run = || -> Res<_> {
            let limits = self.driver.limits();
            let check = |k: &[u8], c: u64| match limits.check(k, c) {
                Err(PgError::Invalid(e)) => Err(e),
                _ => Ok(()),
            };
            // SAFETY: env and requests are live values of the call in progress.
            let read = unsafe { batch::read(env.raw(), requests.raw(), limits.max_key_len())? };
            let requests = read.map_err(|unread| unread.first_invalid(check))?;
            let now = now_ms.map(ms_to_ns).transpose()?;
            match self.driver.begin_many(requests.pairs(), now).map_err(failure)? {
                BatchStep::Answer(ds) => Ok(Either::A(self.answer(&ds))),
                BatchStep::Send(b) => {
                    let params = self.many_params(&b);
                    Ok(Either::B(NativePostgresBatch { batch: b, params }))
                }
            }
        };
        run().map_err(|e| e.into_napi(&env))
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

    /// The statement of a give-back.
    #[napi(getter)]
    pub fn give_back_statement(&self) -> &'static str {
        GIVE_BACK
    }

    /// Takes every lease held: each give-back's parameters (run
    /// `giveBackStatement` with each, then `finishGiveBack`).
    #[napi(ts_return_type = "Array<Array<string | Buffer | Array<string | Buffer> | null>>")]
    pub fn begin_give_backs(&self) -> Vec<Vec<JsParam>> {
        let l = self.driver.limits();
        self.driver
            .begin_give_backs()
            .into_iter()
            .map(|g| {
                [
                    Param::Text(l.prefix().to_owned()),
                    Param::Bytes(g.key().to_vec()),
                    Param::Null,
                    Param::Text(l.kinds().to_owned()),
                    texts(g.ends()),
                    texts(g.next()),
                ]
                .iter()
                .map(Param::js)
                .collect()
            })
            .collect()
    }

    /// Ends a give-back: how many limits took tokens back.
    #[napi]
    pub fn finish_give_back(&self, env: Env, reply: Option<String>, failed: Option<PostgresFailure>) -> Result<u32> {
        self.driver.finish_give_back(outcome(reply, failed)).map(|n| n as u32).map_err(|e| failure(e).into_napi(&env))
    }

    /// Gives `tokens` back to this process's lease of `key` if it can (no
    /// statement needed): whether it did.
    #[napi]
    pub fn refund_lease(&self, env: Env, key: Unknown<'_>, tokens: f64) -> Result<bool> {
        let run = || -> Res<bool> {
            let tokens = whole("tokens", tokens, 0)?;
            self.key(&env, &key, |k| self.driver.refund_lease(k, tokens))
        };
        run().map_err(|e| e.into_napi(&env))
    }

    /// Ends a batch with the row's value, or how it failed.
    #[napi]
    pub fn finish_many(
        &self,
        env: Env,
        batch: &NativePostgresBatch,
        reply: Option<String>,
        failed: Option<PostgresFailure>,
    ) -> Result<Vec<f64>> {
        let ds =
            self.driver.finish_many(&batch.batch, outcome(reply, failed)).map_err(|e| failure(e).into_napi(&env))?;
        Ok(self.answer(&ds))
    }
}
