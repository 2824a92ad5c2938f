//! `_RedisDriver`: ratomic-redis's sans-IO [`Driver`] for `ratomic.redis`,
//! whose classes send its calls through the user's own redis-py client.
//! Everything but the I/O is here (or in the driver): input checks, the
//! script's arguments, reply decoding, the deny cache, the circuit breaker
//! and the failure policy. The Python side only sends `call.argv` and says
//! how the client failed.

use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

use ratomic_redis::{BatchStep, Call, Driver, Error as RedisError, FailurePolicy, Lease, Limits, Op, Options, Step};

use crate::clock::{seconds_to_nanos, time_to_nanos};
use crate::decision::{make_names, Decision, MultiDecision, Names};
use crate::error::py_float_repr;
use crate::error::{core_error, invalid_argument, Exceptions};
use crate::headers::{self, Fields};
use crate::key::{key_bytes, not_whole, number, size, whole, Cost};
use crate::keyed::{batch, keys_of};
use crate::limiter::limits_arg;
use crate::rule::rule_arg;

/// One `EVALSHA` to send: `client.execute_command(*call.argv)`.
#[pyclass(frozen, module = "ratomic._ratomic", name = "_RedisCall")]
pub struct RedisCall {
    call: Call,
    argv: Py<PyTuple>,
}

#[pymethods]
impl RedisCall {
    /// `("EVALSHA", sha1, 1, key, *args)`, for `execute_command`.
    #[getter]
    fn argv(&self, py: Python<'_>) -> Py<PyTuple> {
        self.argv.clone_ref(py)
    }

    /// Tokens the call asks to lease (0: none).
    #[getter]
    fn lease(&self) -> u64 {
        self.call.lease()
    }

    /// The user's key, as bytes.
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.call.key())
    }
}

/// `lease=`: `"off"`, `"auto"` or the most tokens a lease takes (a whole
/// number >= 1).
pub(crate) fn lease_arg(value: &Bound<'_, PyAny>) -> PyResult<Lease> {
    let py = value.py();
    let help = "lease must be \"off\", \"auto\" or the most tokens a lease may take (an int >= 1)";
    if let Ok(s) = value.extract::<&str>() {
        return match s {
            "off" => Ok(Lease::Off),
            "auto" => Ok(Lease::Auto),
            other => Err(invalid_argument(py, format!("invalid lease: {other:?} ({help})"))),
        };
    }
    if value.is_instance_of::<pyo3::types::PyInt>() && !value.is_instance_of::<pyo3::types::PyBool>() {
        return match value.extract::<u64>() {
            Ok(n) if n >= 1 => Ok(Lease::Max(n)),
            _ => Err(invalid_argument(py, format!("invalid lease: {} ({help})", crate::key::as_given(value)))),
        };
    }
    Err(crate::error::argument_type(
        py,
        format!("{help}, not {}: {}", crate::error::type_name(value), crate::key::as_given(value)),
    ))
}

/// The driver of one Redis-backed limiter (see `ratomic.redis`).
#[pyclass(frozen, module = "ratomic._ratomic", name = "_RedisDriver")]
pub struct RedisDriver {
    driver: Driver,
    names: Names,
    /// A `Limiter`'s driver answers `MultiDecision`s; the others `Decision`s.
    multi: bool,
    /// The rules as given (the header fields' policies, as the in-memory
    /// limiter of the same rules reports them).
    rules: Vec<ratomic::Rule>,
}

impl RedisDriver {
    fn wrap(&self, py: Python<'_>, call: Call) -> PyResult<Py<PyAny>> {
        let mut argv: Vec<Py<PyAny>> = Vec::with_capacity(4 + call.args().len());
        argv.push("EVALSHA".into_pyobject(py)?.into_any().unbind());
        argv.push(ratomic_redis::script::sha1().into_pyobject(py)?.into_any().unbind());
        argv.push(1u8.into_pyobject(py)?.into_any().unbind());
        argv.push(PyBytes::new(py, call.redis_key()).into_any().unbind());
        for a in call.args() {
            argv.push(PyBytes::new(py, a).into_any().unbind());
        }
        let argv = PyTuple::new(py, argv)?.unbind();
        Ok(Py::new(py, RedisCall { call, argv })?.into_any())
    }

    fn answer(&self, py: Python<'_>, d: &ratomic_redis::MultiDecision) -> PyResult<Py<PyAny>> {
        if self.multi {
            Ok(Py::new(py, MultiDecision::from_redis(d, &self.names))?.into_any())
        } else {
            Ok(Py::new(py, Decision(d.decision, d.source.into()))?.into_any())
        }
    }

    fn with_headers<T>(
        &self,
        py: Python<'_>,
        decision: &Bound<'_, PyAny>,
        name: &str,
        f: impl FnOnce(&ratomic::headers::Headers<'_>) -> T,
    ) -> PyResult<T> {
        headers::with_backend(py, self.multi, self.driver.limits().names(), &self.rules, decision, name, f)
    }

    fn step(&self, py: Python<'_>, step: Step) -> PyResult<Py<PyAny>> {
        match step {
            Step::Answer(d) => self.answer(py, &d),
            Step::Send(call) => self.wrap(py, call),
        }
    }
}

/// A driver error as a Python exception: misuse as the in-memory
/// engine's exceptions, a backend failure as `BackendError` whose
/// `__cause__` is the client's exception.
fn redis_error(py: Python<'_>, e: RedisError, cause: Option<&Bound<'_, PyAny>>) -> PyErr {
    match e {
        RedisError::Invalid(e) => core_error(py, e),
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
fn failure(kind: &str, error: &Bound<'_, PyAny>) -> RedisError {
    let msg = error.str().map(|s| s.to_string()).unwrap_or_default();
    match kind {
        "timeout" => RedisError::Timeout,
        "connection" => RedisError::Connection(msg),
        "server" => RedisError::Server(msg),
        _ => RedisError::Reply(msg),
    }
}

fn reply_of(reply: &Bound<'_, PyAny>) -> Result<Vec<i64>, RedisError> {
    reply.extract::<Vec<i64>>().map_err(|_| {
        RedisError::Reply(format!(
            "expected a list of integers from the script, got {}",
            crate::error::type_name(reply)
        ))
    })
}

fn now_of(py: Python<'_>, now: Option<f64>) -> PyResult<Option<u64>> {
    now.map(|s| time_to_nanos(py, s, "now", || py_float_repr(s))).transpose()
}

fn op_of(py: Python<'_>, op: &str) -> PyResult<Op> {
    match op {
        "allow" => Ok(Op::Allow),
        "peek" => Ok(Op::Peek),
        _ => Err(invalid_argument(py, format!("unknown operation {op:?}"))),
    }
}

#[pymethods]
impl RedisDriver {
    /// `limits`: a `Rule` (a single-rule limiter) when `multi` is false,
    /// else `{name: rule}` or `(name, rule)` pairs. `on_error`: `"raise"`,
    /// `"allow"` or `"deny"`.
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
        // Each number checked here, by name, as given: a value out of range
        // is an error quoting it, never a Python OverflowError or a clamp.
        let deny_cache = size(deny_cache, "deny_cache", 0)?;
        let lease = lease_arg(lease)?;
        let lease_keys = size(lease_keys, "lease_keys", 1)?;
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
        let limits = made
            .and_then(|l| l.with_prefix(prefix))
            .map_err(|e| redis_error(py, e, None))?
            .with_max_key_len(max_key_len);
        let policy = match on_error {
            "raise" => FailurePolicy::ReturnError,
            "allow" => FailurePolicy::FailOpen,
            "deny" => FailurePolicy::FailClosed { retry_after: seconds(deny_retry_after, "deny_retry_after")? },
            other => {
                return Err(invalid_argument(
                    py,
                    format!(
                        "invalid on_error: {other:?} (must be \"raise\", \"allow\", \"deny\" or a ratomic limiter)"
                    ),
                ))
            }
        };
        let options = Options {
            timeout: Duration::ZERO, // enforced by the Python side
            policy,
            breaker_threshold,
            breaker_cooldown: seconds(breaker_cooldown, "breaker_cooldown")?,
            breaker_failure_time: seconds(breaker_failure_time, "breaker_failure_time")?,
            deny_cache,
            lease,
            lease_keys,
        };
        let names = make_names(py, limits.names());
        let driver = Driver::try_new(limits, options).map_err(|e| redis_error(py, e, None))?;
        Ok(RedisDriver { driver, names, multi, rules })
    }

    /// The HTTP header fields for `decision` (one of this limiter's), as the
    /// in-memory limiters' `headers()` give them; `name` names a single
    /// rule's limit.
    #[pyo3(signature = (decision, name, legacy, *, draft = "draft-11"))]
    fn headers(
        &self,
        py: Python<'_>,
        decision: &Bound<'_, PyAny>,
        name: &str,
        legacy: bool,
        draft: &str,
    ) -> PyResult<Fields> {
        self.with_headers(py, decision, name, headers::fields(py, draft, legacy)?)
    }

    /// The RFC 9457 problem document for a 429 answering `decision`, or None.
    fn problem(&self, py: Python<'_>, decision: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<String>> {
        self.with_headers(py, decision, name, headers::problem)
    }

    /// Checks `name` as the name of a single rule's limit in the header
    /// fields (a middleware's set-up, before any request).
    fn check_name(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        headers::check_name(py, &self.rules[0], name)
    }

    /// The script's source, for `SCRIPT LOAD` after a `NOSCRIPT` answer.
    #[getter]
    fn script(&self) -> &'static str {
        ratomic_redis::script::SOURCE
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

    /// The key prefix.
    #[getter]
    fn prefix(&self) -> &str {
        self.driver.limits().prefix()
    }

    /// Whether the circuit breaker is open.
    #[getter]
    fn breaker_open(&self) -> bool {
        self.driver.breaker_open()
    }

    /// The most tokens a lease takes, or None when this limiter leases none.
    #[getter]
    fn lease_max(&self) -> Option<u64> {
        self.driver.lease_max()
    }

    /// Keys holding a lease now.
    #[getter]
    fn leases_held(&self) -> usize {
        self.driver.leases_held()
    }

    /// Takes every lease held: the `_RedisCall`s that give their unused
    /// tokens back (send each, then `finish_give_back`).
    fn begin_give_backs(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        self.driver.begin_give_backs().into_iter().map(|c| self.wrap(py, c)).collect()
    }

    /// Ends a give-back with the client's reply, or (`kind` given) its
    /// failure: how many limits took tokens back.
    #[pyo3(signature = (reply, kind=None))]
    fn finish_give_back(&self, py: Python<'_>, reply: &Bound<'_, PyAny>, kind: Option<&str>) -> PyResult<usize> {
        let r = match kind {
            Some(kind) => Err(failure(kind, reply)),
            None => reply_of(reply),
        };
        self.driver.finish_give_back(r).map_err(|e| redis_error(py, e, kind.map(|_| reply)))
    }

    /// Gives `tokens` back to this process's lease of `key` if it can (no
    /// round trip then): whether it did.
    fn refund_lease(&self, key: &Bound<'_, PyAny>, tokens: &Bound<'_, PyAny>) -> PyResult<bool> {
        let tokens = crate::key::whole(tokens, "tokens")?;
        Ok(self.driver.refund_lease(key_bytes(key)?, tokens))
    }

    /// Starts a reset through the script (every limit full again, but for
    /// the slots leases hold): the `_RedisCall` to send.
    #[pyo3(signature = (key, now=None))]
    fn begin_reset_call(&self, py: Python<'_>, key: &Bound<'_, PyAny>, now: Option<f64>) -> PyResult<Py<PyAny>> {
        let now = now_of(py, now)?;
        let call = self.driver.begin_reset_call(key_bytes(key)?, now).map_err(|e| redis_error(py, e, None))?;
        self.wrap(py, call)
    }

    /// Ends a reset with the client's reply, or (`kind` given) its failure.
    #[pyo3(signature = (reply, kind=None))]
    fn finish_reset(&self, py: Python<'_>, reply: &Bound<'_, PyAny>, kind: Option<&str>) -> PyResult<()> {
        let r = match kind {
            Some(kind) => Err(failure(kind, reply)),
            None => reply_of(reply),
        };
        self.driver.finish_reset(r).map_err(|e| redis_error(py, e, kind.map(|_| reply)))
    }

    /// Starts `op` ("allow" or "peek"): a decision, or a `_RedisCall` to
    /// send. `demand`: tokens other calls on the key wait for (a lease asked
    /// for is at least that large).
    #[pyo3(signature = (op, key, cost, now=None, demand=0))]
    fn begin(
        &self,
        py: Python<'_>,
        op: &str,
        key: &Bound<'_, PyAny>,
        cost: Cost,
        now: Option<f64>,
        demand: u64,
    ) -> PyResult<Py<PyAny>> {
        let (op, now) = (op_of(py, op)?, now_of(py, now)?);
        let step =
            self.driver.begin_for(op, key_bytes(key)?, cost.0, now, demand).map_err(|e| redis_error(py, e, None))?;
        self.step(py, step)
    }

    /// What `begin` would answer without a round trip (a lease, a cached
    /// denial, the policy while the breaker is open), or `None`: the call
    /// needs one. Asks for no lease: for a call that comes while a round
    /// trip is in flight, which waits for the next one and is begun again
    /// then (the lease its key asks for covering every call waiting on it).
    #[pyo3(signature = (op, key, cost, now=None))]
    fn begin_local(
        &self,
        py: Python<'_>,
        op: &str,
        key: &Bound<'_, PyAny>,
        cost: Cost,
        now: Option<f64>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let (op, now) = (op_of(py, op)?, now_of(py, now)?);
        match self.driver.begin_local(op, key_bytes(key)?, cost.0, now).map_err(|e| redis_error(py, e, None))? {
            Some(d) => Ok(Some(self.answer(py, &d)?)),
            None => Ok(None),
        }
    }

    /// Ends a call with the client's reply.
    fn finish(&self, py: Python<'_>, call: &RedisCall, reply: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let d = self.driver.finish(&call.call, reply_of(reply)).map_err(|e| redis_error(py, e, None))?;
        self.answer(py, &d)
    }

    /// Ends a call whose sending failed (`kind`: "timeout", "connection",
    /// "server" or "reply"): the policy's answer, or `BackendError`.
    fn fail(&self, py: Python<'_>, call: &RedisCall, kind: &str, error: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let d =
            self.driver.finish(&call.call, Err(failure(kind, error))).map_err(|e| redis_error(py, e, Some(error)))?;
        self.answer(py, &d)
    }

    /// Starts a refund: the `_RedisCall` to send.
    #[pyo3(signature = (key, tokens, now=None))]
    fn begin_refund(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        tokens: &Bound<'_, PyAny>,
        now: Option<f64>,
    ) -> PyResult<Py<PyAny>> {
        let tokens = crate::key::whole(tokens, "tokens")?;
        let now = now_of(py, now)?;
        let call = self.driver.begin_refund(key_bytes(key)?, tokens, now).map_err(|e| redis_error(py, e, None))?;
        self.wrap(py, call)
    }

    /// Ends a refund with the client's reply, or (`kind` given) its failure.
    #[pyo3(signature = (reply, kind=None))]
    fn finish_refund(&self, py: Python<'_>, reply: &Bound<'_, PyAny>, kind: Option<&str>) -> PyResult<()> {
        let r = match kind {
            Some(kind) => Err(failure(kind, reply)),
            None => reply_of(reply),
        };
        self.driver.finish_refund(r).map(drop).map_err(|e| redis_error(py, e, kind.map(|_| reply)))
    }

    /// Starts a reset: the Redis key to `DEL`.
    fn begin_reset<'py>(&self, py: Python<'py>, key: &Bound<'_, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
        let k = self.driver.begin_reset(key_bytes(key)?).map_err(|e| redis_error(py, e, None))?;
        Ok(PyBytes::new(py, &k))
    }

    /// Starts a batch: a list of decisions (the breaker is open), or a list
    /// of `_RedisCall`s to send in one pipeline.
    #[pyo3(signature = (requests, now=None))]
    fn begin_many(&self, py: Python<'_>, requests: &Bound<'_, PyAny>, now: Option<f64>) -> PyResult<Vec<Py<PyAny>>> {
        let limits = self.driver.limits();
        let items = batch(requests, |k, c| {
            limits.check(k, c).map_err(|e| match e {
                RedisError::Invalid(e) => e,
                other => ratomic::Error::InvalidArgument {
                    name: "request",
                    value: String::new(),
                    reason: other.to_string().into(),
                },
            })
        })?;
        let now = now_of(py, now)?;
        match self.driver.begin_many(keys_of(&items)?, now).map_err(|e| redis_error(py, e, None))? {
            BatchStep::Answer(ds) => ds.iter().map(|d| self.answer(py, d)).collect(),
            BatchStep::Send(calls) => calls.into_iter().map(|c| self.wrap(py, c)).collect(),
        }
    }

    /// Ends a batch with the pipeline's replies, or (`kind` given) its failure.
    #[pyo3(signature = (calls, replies, kind=None))]
    fn finish_many(
        &self,
        py: Python<'_>,
        calls: &Bound<'_, PyList>,
        replies: &Bound<'_, PyAny>,
        kind: Option<&str>,
    ) -> PyResult<Vec<Py<PyAny>>> {
        let calls: Vec<Call> =
            calls.iter().map(|c| Ok(c.cast::<RedisCall>()?.get().call.clone())).collect::<PyResult<_>>()?;
        let r = match kind {
            Some(kind) => Err(failure(kind, replies)),
            None => replies
                .try_iter()
                .map_err(|_| RedisError::Reply("the pipeline's replies are not a list".into()))
                .and_then(|it| {
                    it.map(|r| r.map_err(|e| RedisError::Reply(e.to_string())).and_then(|r| reply_of(&r))).collect()
                }),
        };
        let ds = self.driver.finish_many(&calls, r).map_err(|e| redis_error(py, e, kind.map(|_| replies)))?;
        ds.iter().map(|d| self.answer(py, d)).collect()
    }

    /// The `BackendError` for a client failure outside a decision (a reset).
    fn backend_error(&self, py: Python<'_>, kind: &str, error: &Bound<'_, PyAny>) -> Py<PyAny> {
        redis_error(py, failure(kind, error), Some(error)).into_value(py).into_any()
    }

    /// A local limiter's decision, marked as the fallback's.
    fn fallback(&self, py: Python<'_>, decision: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        headers::fallback(py, decision)
    }
}
