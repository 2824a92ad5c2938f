//! `_PostgresDriver`: ratomic-postgres's sans-IO [`Driver`] for
//! `ratomic.postgres`, whose classes run its statements through the user's
//! own psycopg connection or pool. Everything but the I/O is here (or in
//! the driver): input checks, the statement's parameters, the decoding of
//! its row, the deny cache, the circuit breaker and the failure policy. The
//! Python side only executes `driver.statement` with `call.params` and says
//! how the client failed.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use ratomic_postgres::{
    Batch, BatchStep, Call, Coalesced, Driver, Error as PgError, FailurePolicy, Limits, Op, Options, Statement, Step,
};

use crate::clock::{seconds_to_nanos, time_to_nanos};
use crate::decision::{make_names, Decision, MultiDecision, Names};
use crate::error::py_float_repr;
use crate::error::{core_error, invalid_argument, Exceptions};
use crate::headers::{self, Fields};
use crate::key::{key_bytes, not_whole, number, size, whole, Cost};
use crate::keyed::{batch, keys_of};
use crate::limiter::limits_arg;
use crate::rule::rule_arg;

/// The statements with psycopg's placeholders and explicit types (so that
/// any client's parameter types resolve to the functions' own).
const CALL: &str = "SELECT ratomic_v1_call(%s::text, %s::text, %s::bytea, %s::bigint, %s::bigint, %s::text, \
                    %s::bigint[], %s::bigint[])";
const MANY: &str = "SELECT ratomic_v1_many(%s::text, %s::text, %s::bytea[], %s::bigint[], %s::bigint, %s::text, \
                    %s::bigint[], %s::bigint[])";
const GC: &str = "SELECT ratomic_v1_gc(%s::text, %s::bigint, %s::int)";
/// The common call's upsert ([`ratomic_postgres::schema::ALLOW`]) with
/// psycopg's named placeholders (each of its parameters is read more than
/// once): `p1` … `p5`.
static ALLOW: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    (1..=5).fold(ratomic_postgres::schema::ALLOW.replace('%', "%%"), |sql, i| {
        sql.replace(&format!("${i}"), &format!("%(p{i})s"))
    })
});
const LEASE: &str = "SELECT ratomic_v1_lease(%s::text, %s::bytea, %s::bigint, %s::bigint, %s::bigint, %s::text, \
                     %s::bigint[], %s::bigint[])";
const GIVE_BACK: &str =
    "SELECT ratomic_v1_give_back(%s::text, %s::bytea, %s::bigint, %s::text, %s::bigint[], %s::bigint[])";

/// One statement to run: `cursor.execute(driver.statement, call.params)`.
#[pyclass(frozen, module = "ratomic._ratomic", name = "_PostgresCall")]
pub struct PostgresCall {
    call: Call,
    /// A tuple, or a dict for the upsert's named placeholders.
    params: Py<PyAny>,
}

#[pymethods]
impl PostgresCall {
    /// The statement's parameters (five, by name, for the common call's
    /// upsert, else a tuple of eight).
    #[getter]
    fn params(&self, py: Python<'_>) -> Py<PyAny> {
        self.params.clone_ref(py)
    }

    /// The statement to run: `ratomic_v1_lease` when the call asks for a
    /// lease, the common call's upsert for an allow on one token bucket
    /// (see `upsert`), else `ratomic_v1_call` (psycopg placeholders).
    #[getter]
    fn statement(&self) -> &'static str {
        match self.call.statement() {
            Statement::Lease => LEASE,
            Statement::Allow => ALLOW.as_str(),
            Statement::Call => CALL,
        }
    }

    /// Whether it goes by the common call's upsert, which returns no row
    /// when it does not grant: then run `driver.general(call)` and finish
    /// this call with that reply.
    #[getter]
    fn upsert(&self) -> bool {
        self.call.statement() == Statement::Allow
    }

    /// Whether it may wait for others and go with them in one statement
    /// (`driver.coalesce`): an allow at the server's time asking no lease.
    #[getter]
    fn coalescible(&self) -> bool {
        self.call.coalescible()
    }
}

/// One batch to run: `cursor.execute(driver.many_statement, batch.params)`.
#[pyclass(frozen, module = "ratomic._ratomic", name = "_PostgresBatch")]
pub struct PostgresBatch {
    batch: Batch,
    params: Py<PyTuple>,
}

#[pymethods]
impl PostgresBatch {
    /// The statement's eight parameters.
    #[getter]
    fn params(&self, py: Python<'_>) -> Py<PyTuple> {
        self.params.clone_ref(py)
    }
}

/// The driver of one PostgreSQL-backed limiter (see `ratomic.postgres`).
#[pyclass(frozen, module = "ratomic._ratomic", name = "_PostgresDriver")]
pub struct PostgresDriver {
    driver: Driver,
    names: Names,
    /// A `Limiter`'s driver answers `MultiDecision`s; the others `Decision`s.
    multi: bool,
    rules: Vec<ratomic::Rule>,
}

impl PostgresDriver {
    fn tail(&self) -> (&str, &str, &[i64], &[i64]) {
        let l = self.driver.limits();
        (l.prefix(), l.kinds(), l.p1(), l.p2())
    }

    fn wrap(&self, py: Python<'_>, call: Call) -> PyResult<Py<PyAny>> {
        let (prefix, kinds, p1, p2) = self.tail();
        if let (Statement::Allow, Some((_, tau))) = (call.statement(), self.driver.limits().one_bucket()) {
            let params = pyo3::types::PyDict::new(py);
            params.set_item("p1", prefix)?;
            params.set_item("p2", PyBytes::new(py, call.key()))?;
            params.set_item("p3", call.at_us())?;
            params.set_item("p4", call.increment())?;
            params.set_item("p5", tau)?;
            return Ok(Py::new(py, PostgresCall { call, params: params.into_any().unbind() })?.into_any());
        }
        if call.lease() > 0 {
            let params = (
                prefix,
                PyBytes::new(py, call.key()),
                call.at_us(),
                call.amount(),
                call.lease_size(),
                kinds,
                p1.to_vec(),
                p2.to_vec(),
            )
                .into_pyobject(py)?
                .into_any()
                .unbind();
            return Ok(Py::new(py, PostgresCall { call, params })?.into_any());
        }
        let params = (
            call.op().code(),
            prefix,
            PyBytes::new(py, call.key()),
            call.at_us(),
            call.amount(),
            kinds,
            p1.to_vec(),
            p2.to_vec(),
        )
            .into_pyobject(py)?
            .unbind();
        Ok(Py::new(py, PostgresCall { call, params: params.into_any() })?.into_any())
    }

    /// A batch as the `_PostgresBatch` to run (`MANY` with op `a`).
    fn wrap_batch(&self, py: Python<'_>, batch: Batch) -> PyResult<Py<PyAny>> {
        let (prefix, kinds, p1, p2) = self.tail();
        let keys: Vec<Bound<'_, PyBytes>> = batch.keys().into_iter().map(|k| PyBytes::new(py, k)).collect();
        let params =
            ("a", prefix, keys, batch.amounts(), batch.at_us(), kinds, p1.to_vec(), p2.to_vec()).into_pyobject(py)?;
        Ok(Py::new(py, PostgresBatch { batch, params: params.unbind() })?.into_any())
    }

    fn answer(&self, py: Python<'_>, d: &ratomic_postgres::MultiDecision) -> PyResult<Py<PyAny>> {
        if self.multi {
            Ok(Py::new(py, MultiDecision::from_postgres(d, &self.names))?.into_any())
        } else {
            Ok(Py::new(py, Decision(d.decision, d.source.into()))?.into_any())
        }
    }
}

/// A driver error as a Python exception: misuse as the in-memory engine's
/// exceptions, a backend failure as `BackendError` whose `__cause__` is the
/// client's exception.
fn pg_error(py: Python<'_>, e: PgError, cause: Option<&Bound<'_, PyAny>>) -> PyErr {
    match e {
        PgError::Invalid(e) => core_error(py, e),
        e => {
            let err = PyErr::from_type(Exceptions::get(py).backend.bind(py).clone(), e.to_string());
            if let Some(c) = cause.filter(|c| !c.is_none()) {
                err.set_cause(py, Some(PyErr::from_value(c.clone())));
            }
            err
        }
    }
}

/// How the client failed, from the Python side's classification.
fn failure(kind: &str, error: &Bound<'_, PyAny>) -> PgError {
    let msg = error.str().map(|s| s.to_string()).unwrap_or_default();
    match kind {
        "timeout" => PgError::Timeout,
        "connection" => PgError::Connection(msg),
        "server" => PgError::Server(msg),
        _ => PgError::Reply(msg),
    }
}

/// A statement's value: a list of integers, or the common call's upsert's
/// one integer (its reset, which the driver makes a reply of).
fn reply_of(reply: &Bound<'_, PyAny>) -> Result<Vec<i64>, PgError> {
    if let Ok(reset) = reply.extract::<i64>() {
        return Ok(vec![reset]);
    }
    reply.extract::<Vec<i64>>().map_err(|_| {
        PgError::Reply(format!(
            "expected a list of integers from ratomic_v1_call, got {}",
            crate::error::type_name(reply)
        ))
    })
}

/// The reply, or (`kind` given) the client's failure.
fn outcome(reply: &Bound<'_, PyAny>, kind: Option<&str>) -> Result<Vec<i64>, PgError> {
    match kind {
        Some(kind) => Err(failure(kind, reply)),
        None => reply_of(reply),
    }
}

fn now_of(py: Python<'_>, now: Option<f64>) -> PyResult<Option<u64>> {
    now.map(|s| time_to_nanos(py, s, "now", || py_float_repr(s))).transpose()
}

#[pymethods]
impl PostgresDriver {
    /// `limits`: a `Rule` (a single-rule limiter) when `multi` is false,
    /// else `{name: rule}` or `(name, rule)` pairs. `on_error`: `"raise"`,
    /// `"allow"`, `"deny"` or `"fallback"`.
    #[new]
    #[pyo3(signature = (limits, *, multi, prefix, on_error, deny_retry_after, deny_cache, breaker_threshold, breaker_cooldown, breaker_failure_time, max_key_len, lease, lease_keys))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        limits: &Bound<'_, PyAny>,
        multi: bool,
        prefix: &str,
        on_error: &str,
        deny_retry_after: &Bound<'_, PyAny>,
        deny_cache: &Bound<'_, PyAny>,
        breaker_threshold: &Bound<'_, PyAny>,
        breaker_cooldown: &Bound<'_, PyAny>,
        breaker_failure_time: &Bound<'_, PyAny>,
        max_key_len: &Bound<'_, PyAny>,
        lease: &Bound<'_, PyAny>,
        lease_keys: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let lease = crate::redis::lease_arg(lease)?;
        let lease_keys = size(lease_keys, "lease_keys", 1)?;
        let deny_cache = size(deny_cache, "deny_cache", 0)?;
        let max_key_len = size(max_key_len, "max_key_len", 0)?;
        let breaker_threshold = u32::try_from(whole(breaker_threshold, "breaker_threshold")?)
            .map_err(|_| not_whole(breaker_threshold, "breaker_threshold", 0, u64::from(u32::MAX)))?;
        let seconds = |value: &Bound<'_, PyAny>, name: &str| -> PyResult<Duration> {
            Ok(Duration::from_nanos(seconds_to_nanos(py, number(value, name)?, name)?))
        };
        let (made, rules) = if multi {
            let pairs = limits_arg(limits)?;
            let rules = pairs.iter().map(|(_, r)| *r).collect();
            (Limits::new(pairs), rules)
        } else {
            let rule = rule_arg(limits)?;
            (Limits::single(rule), vec![rule])
        };
        let limits =
            made.and_then(|l| l.with_prefix(prefix)).map_err(|e| pg_error(py, e, None))?.with_max_key_len(max_key_len);
        let policy = match on_error {
            "raise" => FailurePolicy::ReturnError,
            "allow" => FailurePolicy::FailOpen,
            "deny" => FailurePolicy::FailClosed { retry_after: seconds(deny_retry_after, "deny_retry_after")? },
            "fallback" => FailurePolicy::Fallback,
            other => {
                return Err(invalid_argument(
                    py,
                    format!("invalid on_error: {other:?} (must be \"raise\", \"allow\", \"deny\" or \"fallback\")"),
                ))
            }
        };
        let options = Options {
            timeout: Duration::ZERO, // the connection's statement_timeout bounds a call
            policy,
            breaker_threshold,
            breaker_cooldown: seconds(breaker_cooldown, "breaker_cooldown")?,
            breaker_failure_time: seconds(breaker_failure_time, "breaker_failure_time")?,
            deny_cache,
            lease,
            lease_keys,
            ..Options::default()
        };
        let names = make_names(py, limits.names());
        let driver = Driver::try_new(limits, options).map_err(|e| pg_error(py, e, None))?;
        Ok(PostgresDriver { driver, names, multi, rules })
    }

    /// The statement of one call (psycopg placeholders).
    #[getter]
    fn statement(&self) -> &'static str {
        CALL
    }

    /// The statement of a batch (psycopg placeholders).
    #[getter]
    fn many_statement(&self) -> &'static str {
        MANY
    }

    /// The statement of a gc: parameters (prefix, at_us or None, max rows).
    #[getter]
    fn gc_statement(&self) -> &'static str {
        GC
    }

    /// The migration: the table (unlogged if asked) and the functions.
    #[staticmethod]
    fn schema(unlogged: bool) -> String {
        ratomic_postgres::schema::sql(unlogged)
    }

    /// `now` (seconds) as the statements' `at_us`, checked; None stays None.
    fn at_us(&self, py: Python<'_>, now: Option<f64>) -> PyResult<Option<i64>> {
        self.driver.limits().at_us(now_of(py, now)?).map_err(|e| pg_error(py, e, None))
    }

    /// HTTP fields for `decision` as `ratomic.redis`'s driver gives them
    /// (the same code): `name` names a single rule's limit.
    #[pyo3(signature = (decision, name, legacy, *, draft = "draft-11"))]
    fn headers(
        &self,
        py: Python<'_>,
        decision: &Bound<'_, PyAny>,
        name: &str,
        legacy: bool,
        draft: &str,
    ) -> PyResult<Fields> {
        let names = self.driver.limits().names();
        headers::with_backend(py, self.multi, names, &self.rules, decision, name, headers::fields(py, draft, legacy)?)
    }

    /// The RFC 9457 problem document for a 429 answering `decision`, or None.
    fn problem(&self, py: Python<'_>, decision: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<String>> {
        let names = self.driver.limits().names();
        headers::with_backend(py, self.multi, names, &self.rules, decision, name, headers::problem)
    }

    /// Checks `name` as the name of a single rule's limit in the header fields.
    fn check_name(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        headers::check_name(py, &self.rules[0], name)
    }

    /// A local limiter's decision (the `on_error` limiter), marked as the fallback's.
    fn fallback(&self, py: Python<'_>, decision: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        headers::fallback(py, decision)
    }

    /// The limits' rules, in order.
    #[getter]
    fn rules(&self) -> Vec<crate::rule::Rule> {
        self.rules.iter().map(|r| crate::rule::Rule(*r)).collect()
    }

    /// The limits' names, in order.
    #[getter]
    fn names(&self) -> Vec<&str> {
        self.driver.limits().names().collect()
    }

    /// The largest cost a call may ask (the smallest limit).
    #[getter]
    fn limit(&self) -> u64 {
        self.driver.limits().max_cost()
    }

    /// The row prefix.
    #[getter]
    fn prefix(&self) -> &str {
        self.driver.limits().prefix()
    }

    /// Whether the circuit breaker is open.
    #[getter]
    fn breaker_open(&self) -> bool {
        self.driver.breaker_open()
    }

    /// Starts `op` ("allow" or "peek"): a decision, or a `_PostgresCall`.
    #[pyo3(signature = (op, key, cost, now=None))]
    fn begin(
        &self,
        py: Python<'_>,
        op: &str,
        key: &Bound<'_, PyAny>,
        cost: Cost,
        now: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        let op = match op {
            "allow" => Op::Allow,
            "peek" => Op::Peek,
            _ => return Err(invalid_argument(py, format!("unknown operation {op:?}"))),
        };
        let now = now_of(py, now)?;
        match self.driver.begin(op, key_bytes(key)?, cost.0, now).map_err(|e| pg_error(py, e, None))? {
            Step::Answer(d) => self.answer(py, &d),
            Step::Send(call) => self.wrap(py, call),
        }
    }

    /// Ends a call with the row's value, or (`kind` given: "timeout",
    /// "connection", "server" or "reply") the client's failure: the
    /// decision (the policy's, on a failure) or `BackendError`.
    #[pyo3(signature = (call, reply, kind=None))]
    fn finish(
        &self,
        py: Python<'_>,
        call: &PostgresCall,
        reply: &Bound<'_, PyAny>,
        kind: Option<&str>,
    ) -> PyResult<Py<PyAny>> {
        let d =
            self.driver.finish(&call.call, outcome(reply, kind)).map_err(|e| pg_error(py, e, kind.map(|_| reply)))?;
        self.answer(py, &d)
    }

    /// The same call by `ratomic_v1_call`: what runs when the common
    /// call's upsert returned no row (it did not grant).
    fn general(&self, py: Python<'_>, call: &PostgresCall) -> PyResult<Py<PyAny>> {
        self.wrap(py, call.call.general())
    }

    /// Starts a refund: the `_PostgresCall` to run.
    #[pyo3(signature = (key, tokens, now=None))]
    fn begin_refund(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        tokens: &Bound<'_, PyAny>,
        now: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        let tokens = whole(tokens, "tokens")?;
        let now = now_of(py, now)?;
        let call = self.driver.begin_refund(key_bytes(key)?, tokens, now).map_err(|e| pg_error(py, e, None))?;
        self.wrap(py, call)
    }

    /// Ends a refund with the row's value, or (`kind` given) the failure.
    #[pyo3(signature = (reply, kind=None))]
    fn finish_refund(&self, py: Python<'_>, reply: &Bound<'_, PyAny>, kind: Option<&str>) -> PyResult<()> {
        self.driver.finish_refund(outcome(reply, kind)).map(drop).map_err(|e| pg_error(py, e, kind.map(|_| reply)))
    }

    /// Starts a reset: the `_PostgresCall` to run.
    fn begin_reset(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let call = self.driver.begin_reset(key_bytes(key)?).map_err(|e| pg_error(py, e, None))?;
        self.wrap(py, call)
    }

    /// Ends a reset with the row's value, or (`kind` given) the failure.
    #[pyo3(signature = (reply, kind=None))]
    fn finish_reset(&self, py: Python<'_>, reply: &Bound<'_, PyAny>, kind: Option<&str>) -> PyResult<()> {
        self.driver.finish_reset(outcome(reply, kind)).map_err(|e| pg_error(py, e, kind.map(|_| reply)))
    }

    /// Starts a batch: a list of decisions (nothing to send), or a
    /// `_PostgresBatch` to run in one statement.
    #[pyo3(signature = (requests, now=None))]
    fn begin_many(&self, py: Python<'_>, requests: &Bound<'_, PyAny>, now: Option<f64>) -> PyResult<Py<PyAny>> {
        let limits = self.driver.limits();
        let items = batch(requests, |k, c| {
            limits.check(k, c).map_err(|e| match e {
                PgError::Invalid(e) => e,
                other => ratomic::Error::InvalidArgument {
                    name: "request",
                    value: String::new(),
                    reason: other.to_string().into(),
                },
            })
        })?;
        let now = now_of(py, now)?;
        match self.driver.begin_many(keys_of(&items)?, now).map_err(|e| pg_error(py, e, None))? {
            BatchStep::Answer(ds) => {
                let out: Vec<Py<PyAny>> = ds.iter().map(|d| self.answer(py, d)).collect::<PyResult<_>>()?;
                Ok(out.into_pyobject(py)?.into_any().unbind())
            }
            BatchStep::Send(b) => self.wrap_batch(py, b),
        }
    }

    /// Ends a batch with the row's value, or (`kind` given) the failure.
    #[pyo3(signature = (batch, reply, kind=None))]
    fn finish_many(
        &self,
        py: Python<'_>,
        batch: &PostgresBatch,
        reply: &Bound<'_, PyAny>,
        kind: Option<&str>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let ds = self
            .driver
            .finish_many(&batch.batch, outcome(reply, kind))
            .map_err(|e| pg_error(py, e, kind.map(|_| reply)))?;
        ds.iter().map(|d| self.answer(py, d)).collect()
    }

    /// Calls that waited while this limiter's statements were out, as one
    /// `_PostgresBatch` to run with `many_statement`: each must be
    /// `coalescible` (an `InvalidArgumentError` otherwise). If the circuit
    /// breaker opened while they waited (a statement out failed), nothing
    /// is to be sent: a list of their answers by the failure policy instead,
    /// each as `finish_coalesced` gives it.
    fn coalesce(&self, py: Python<'_>, calls: Vec<Bound<'_, PostgresCall>>) -> PyResult<Py<PyAny>> {
        let calls = calls.iter().map(|c| c.get().call.clone()).collect();
        match self.driver.coalesce(calls).map_err(|e| pg_error(py, e, None))? {
            Coalesced::Send(batch) => self.wrap_batch(py, batch),
            Coalesced::Answered(answers) => {
                let answers = answers
                    .into_iter()
                    .map(|r| match r {
                        Ok(d) => self.answer(py, &d),
                        Err(e) => Ok(pg_error(py, e, None).into_value(py).into_any()),
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(PyList::new(py, answers)?.into_any().unbind())
            }
        }
    }

    /// Ends a `coalesce`d batch with the row's value, or (`kind` given) the
    /// client's failure: per call, in order, its decision as `finish` would
    /// give it (the policy's, on a failure), or the exception `finish`
    /// would raise (`BackendError`, its `__cause__` the client's exception),
    /// for the caller to raise.
    #[pyo3(signature = (batch, reply, kind=None))]
    fn finish_coalesced(
        &self,
        py: Python<'_>,
        batch: &PostgresBatch,
        reply: &Bound<'_, PyAny>,
        kind: Option<&str>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        self.driver
            .finish_coalesced(&batch.batch, outcome(reply, kind))
            .into_iter()
            .map(|r| match r {
                Ok(d) => self.answer(py, &d),
                Err(e) => Ok(pg_error(py, e, kind.map(|_| reply)).into_value(py).into_any()),
            })
            .collect()
    }

    /// The largest lease this driver takes, or None if it takes none.
    #[getter]
    fn lease_max(&self) -> Option<u64> {
        self.driver.lease_max()
    }

    /// Keys holding a lease now.
    #[getter]
    fn leases_held(&self) -> usize {
        self.driver.leases_held()
    }

    /// The statement of a give-back (psycopg placeholders).
    #[getter]
    fn give_back_statement(&self) -> &'static str {
        GIVE_BACK
    }

    /// Takes every lease held: the parameters of each give-back to run
    /// (then `finish_give_back` with each reply).
    fn begin_give_backs(&self, py: Python<'_>) -> PyResult<Vec<Py<PyTuple>>> {
        let (prefix, kinds, _, _) = self.tail();
        self.driver
            .begin_give_backs()
            .into_iter()
            .map(|g| {
                let params =
                    (prefix, PyBytes::new(py, g.key()), None::<i64>, kinds, g.ends().to_vec(), g.next().to_vec());
                Ok(params.into_pyobject(py)?.unbind())
            })
            .collect()
    }

    /// Ends a give-back: how many limits took tokens back.
    #[pyo3(signature = (reply, kind=None))]
    fn finish_give_back(&self, py: Python<'_>, reply: &Bound<'_, PyAny>, kind: Option<&str>) -> PyResult<usize> {
        self.driver.finish_give_back(outcome(reply, kind)).map_err(|e| pg_error(py, e, kind.map(|_| reply)))
    }

    /// Gives `tokens` back to this process's lease of `key` if it can
    /// (no statement needed): whether it did.
    fn refund_lease(&self, key: &Bound<'_, PyAny>, tokens: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.driver.refund_lease(key_bytes(key)?, whole(tokens, "tokens")?))
    }

    /// The `BackendError` for a client failure outside a decision (a gc).
    fn backend_error(&self, py: Python<'_>, kind: &str, error: &Bound<'_, PyAny>) -> Py<PyAny> {
        pg_error(py, failure(kind, error), Some(error)).into_value(py).into_any()
    }
}
