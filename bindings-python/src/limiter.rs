//! `Limiter`: several named limits on one key, all or nothing, with
//! per-request limit sets.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyMapping, PyString, PyTuple};

use ratomic::LimitSet as CoreLimitSet;

use crate::clock::Time;
use crate::decision::{make_names, MultiDecision, Names};
use crate::error::{argument_type, invalid_argument, type_name, CoreResultExt};
use crate::headers::{self, Fields};
use crate::key::{key_bytes, whole, Cost};
use crate::keyed::{batch, keys_of};
use crate::rule::{rule_arg, Rule};
use crate::store::StoreArgs;

/// `(name, value)` pairs from a mapping (its items, in order) or an
/// iterable of pairs.
pub fn named_pairs<'py>(arg: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<(String, Bound<'py, PyAny>)>> {
    let py = arg.py();
    let items = if let Ok(m) = arg.cast::<PyMapping>() { m.items()?.into_any() } else { arg.clone() };
    if items.is_instance_of::<PyString>() {
        return Err(argument_type(py, format!("{what} must be a mapping or a list of (name, value) pairs, not str")));
    }
    let mut out = Vec::new();
    let iter = items.try_iter().map_err(|_| {
        argument_type(py, format!("{what} must be a mapping or a list of (name, value) pairs, not {}", type_name(arg)))
    })?;
    for item in iter {
        let item = item?;
        let pair = item.cast::<PyTuple>().ok().filter(|t| t.len() == 2).ok_or_else(|| {
            argument_type(py, format!("each of {what} must be a (name, value) pair, not {}", type_name(&item)))
        })?;
        let name = pair.get_item(0)?;
        let name = name
            .cast::<PyString>()
            .map_err(|_| argument_type(py, format!("a name in {what} must be a str, not {}", type_name(&name))))?;
        out.push((name.to_cow()?.into_owned(), pair.get_item(1)?));
    }
    Ok(out)
}

/// A `Limiter`'s limits: a mapping `{name: rule}`, `(name, rule)` pairs, or
/// one string of rates in the notation of Python's `limits` (slowapi,
/// Flask-Limiter), `"10/second;1000/day"` (separated by `;`, `,` or `|`):
/// token buckets, each named by its rate string as written.
pub fn limits_arg(arg: &Bound<'_, PyAny>) -> PyResult<Vec<(String, ratomic::Rule)>> {
    if let Ok(s) = arg.cast::<PyString>() {
        return ratomic::parse_limits(&s.to_cow()?).py_err(arg.py());
    }
    named_pairs(arg, "limits")?.into_iter().map(|(name, rule)| Ok((name, rule_arg(&rule)?))).collect()
}

/// Several named limits on the same key, decided all or nothing: a call is
/// allowed only if every limit allows it, and then every limit is charged.
#[pyclass(frozen, module = "ratomic", name = "Limiter")]
pub struct Limiter {
    pub(crate) inner: Arc<ratomic::Limiter<[u8], Time>>,
    pub(crate) names: Names,
}

/// Which of a `Limiter`'s limits a call is subject to. Made once with
/// `Limiter.limit_set(names)`; passing it as `limits=` costs nothing per
/// call, where a list of names is resolved on every call.
#[pyclass(frozen, eq, hash, module = "ratomic", name = "LimitSet")]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LimitSet {
    set: CoreLimitSet,
    /// The limiter it was made for (its address), to refuse it elsewhere.
    owner: usize,
    names: Vec<String>,
}

#[pymethods]
impl LimitSet {
    /// The names of the limits in the set, in the limiter's order.
    #[getter]
    fn names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.names)
    }

    fn __len__(&self) -> usize {
        self.set.len()
    }

    fn __repr__(&self) -> String {
        format!("LimitSet({:?})", self.names)
    }
}

impl Limiter {
    fn owner(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    fn resolve(&self, py: Python<'_>, names: &[String]) -> PyResult<LimitSet> {
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let set = self.inner.limit_set(&refs).py_err(py)?;
        let names =
            self.inner.names().enumerate().filter(|(i, _)| set.contains(*i)).map(|(_, n)| n.to_owned()).collect();
        Ok(LimitSet { set, owner: self.owner(), names })
    }

    /// The set a call is subject to: all limits, a `LimitSet`, or names.
    fn set_of(&self, limits: Option<&Bound<'_, PyAny>>) -> PyResult<CoreLimitSet> {
        let Some(limits) = limits.filter(|l| !l.is_none()) else {
            return Ok(self.inner.all_limits());
        };
        let py = limits.py();
        if let Ok(s) = limits.cast::<LimitSet>() {
            let s = s.get();
            if s.owner != self.owner() {
                return Err(invalid_argument(py, "this LimitSet was made by another Limiter".to_owned()));
            }
            return Ok(s.set);
        }
        if limits.is_instance_of::<PyString>() {
            return Err(argument_type(
                py,
                "limits must be a LimitSet or a list of limit names, not a str (write limits=[name])".to_owned(),
            ));
        }
        let names: Vec<String> = limits.extract().map_err(|_| {
            argument_type(py, format!("limits must be a LimitSet or a list of limit names, not {}", type_name(limits)))
        })?;
        Ok(self.resolve(py, &names)?.set)
    }

    fn now(&self, py: Python<'_>) -> PyResult<u64> {
        self.inner.clock().read(py)
    }

    fn multi(&self, d: ratomic::Result<ratomic::MultiDecision<'_>>, py: Python<'_>) -> PyResult<MultiDecision> {
        Ok(MultiDecision::from_core(&d.py_err(py)?, &self.names))
    }
}

#[pymethods]
impl Limiter {
    /// `limits`: a mapping `{name: rule}` or a list of `(name, rule)` pairs,
    /// where a rule is a rate string (a token bucket, e.g. `"10/s"`) or a
    /// `Rule` (`Rule.fixed_window("1000/day")`, ...); or one string of
    /// rates as Python's `limits` and slowapi write them,
    /// `"10/second;1000/day"`: token buckets named by their rate strings.
    /// At most 16 limits.
    #[new]
    #[pyo3(signature = (
        limits, *, clock=None, max_keys=None, max_key_len=None, max_key_bytes=None, reserve_keys=None, eviction=None, shared_file=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        limits: &Bound<'_, PyAny>,
        clock: Option<&Bound<'_, PyAny>>,
        max_keys: Option<&Bound<'_, PyAny>>,
        max_key_len: Option<&Bound<'_, PyAny>>,
        max_key_bytes: Option<&Bound<'_, PyAny>>,
        reserve_keys: Option<&Bound<'_, PyAny>>,
        eviction: Option<&Bound<'_, PyAny>>,
        shared_file: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let time = Time::from_arg(clock)?;
        let store = StoreArgs { max_keys, max_key_len, max_key_bytes, reserve_keys, eviction, shared_file };
        let mut builder = ratomic::Limiter::builder().options(store.options()?).clock(time);
        for (name, rule) in limits_arg(limits)? {
            builder = builder.limit(name, rule);
        }
        let inner = builder.build().py_err(py)?;
        let names = make_names(py, inner.names());
        Ok(Limiter { inner: Arc::new(inner), names })
    }

    /// Takes `cost` from every limit (or every limit in `limits`) of `key`,
    /// or from none.
    #[pyo3(signature = (key, cost = Cost::ONE, *, limits=None), text_signature = "($self, key, cost=1, *, limits=None)")]
    fn allow(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        cost: Cost,
        limits: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<MultiDecision> {
        let key = key_bytes(key)?;
        let set = self.set_of(limits)?;
        let now = self.now(py)?;
        self.multi(self.inner.select(set).allow_at(key, cost.0, now), py)
    }

    /// What `allow` would answer, changing nothing.
    #[pyo3(signature = (key, cost = Cost::ONE, *, limits=None), text_signature = "($self, key, cost=1, *, limits=None)")]
    fn peek(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        cost: Cost,
        limits: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<MultiDecision> {
        let key = key_bytes(key)?;
        let set = self.set_of(limits)?;
        let now = self.now(py)?;
        self.multi(self.inner.select(set).peek_at(key, cost.0, now), py)
    }

    /// Gives `tokens` back to every limit (or every limit in `limits`) of
    /// `key`, never above full.
    #[pyo3(signature = (key, tokens, *, limits=None))]
    fn refund(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        tokens: &Bound<'_, PyAny>,
        limits: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let key = key_bytes(key)?;
        let tokens = whole(tokens, "tokens")?;
        let set = self.set_of(limits)?;
        let now = self.now(py)?;
        self.inner.select(set).refund_at(key, tokens, now).py_err(py)
    }

    /// Forgets `key` in every limit: it is full again.
    fn reset(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = key_bytes(key)?;
        let now = self.now(py)?;
        self.inner.reset_at(key, now).py_err(py)
    }

    /// Many requests at one clock reading; each item a key or a `(key,
    /// cost)` pair. Every item is checked first: if one is invalid, the
    /// error (its `index` set) names the first invalid one, and nothing is
    /// charged.
    #[pyo3(signature = (requests, *, limits=None))]
    fn allow_many(
        &self,
        py: Python<'_>,
        requests: &Bound<'_, PyAny>,
        limits: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<MultiDecision>> {
        let selected = self.inner.select(self.set_of(limits)?);
        let items = batch(requests, |key, cost| selected.check(key, cost))?;
        let requests = keys_of(&items)?;
        let mut out = Vec::with_capacity(requests.len());
        selected.allow_many_at(requests.iter().copied(), self.now(py)?, &mut out).py_err(py)?;
        Ok(out.iter().map(|d| MultiDecision::from_core(d, &self.names)).collect())
    }

    /// The set of limits with these names, to pass as `limits=`.
    fn limit_set(&self, py: Python<'_>, names: &Bound<'_, PyAny>) -> PyResult<LimitSet> {
        if names.is_instance_of::<PyString>() {
            return Err(argument_type(py, "limit_set takes a list of names, not a str".to_owned()));
        }
        let names: Vec<String> = names
            .extract()
            .map_err(|_| argument_type(py, format!("limit_set takes a list of names, not {}", type_name(names))))?;
        self.resolve(py, &names)
    }

    /// The limits' names, in order.
    #[getter]
    fn names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.names.iter().map(|(_, n)| n.bind(py)))
    }

    /// `{name: Rule}`, in order.
    #[getter]
    fn rules<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for ((_, name), rule) in self.names.iter().zip(self.inner.rules()) {
            d.set_item(name.bind(py), Rule(*rule))?;
        }
        Ok(d)
    }

    /// The clock given to the constructor (None: the monotonic default).
    #[getter]
    fn clock(&self, py: Python<'_>) -> Py<PyAny> {
        self.inner.clock().to_object(py)
    }

    /// The longest key accepted, in bytes.
    #[getter]
    fn max_key_len(&self) -> usize {
        self.inner.max_key_len()
    }

    /// The HTTP header fields for `decision` (a decision of this limiter),
    /// as `(name, value)` pairs: one `RateLimit-Policy` and `RateLimit` item
    /// per limit the call was subject to, `Retry-After` on a denial, and
    /// with `legacy=True` the `X-RateLimit-*` fields (combined decision).
    /// `draft` as in `Keyed.headers`: drafts 7 and 6 list each limit's
    /// policy unnamed and give the rest from the combined decision.
    #[pyo3(signature = (decision, *, legacy = false, draft = "draft-11"))]
    fn headers(
        &self,
        py: Python<'_>,
        decision: PyRef<'_, MultiDecision>,
        legacy: bool,
        draft: &str,
    ) -> PyResult<Fields> {
        let fields = headers::fields(py, draft, legacy)?;
        headers::with_multi(py, self.inner.names(), self.inner.rules(), &decision, fields)
    }

    /// The RFC 9457 problem document (JSON) for a 429 answering `decision`,
    /// naming the limits that denied; None when it was allowed.
    fn problem(&self, py: Python<'_>, decision: PyRef<'_, MultiDecision>) -> PyResult<Option<String>> {
        headers::with_multi(py, self.inner.names(), self.inner.rules(), &decision, headers::problem)
    }

    /// Drops every key all of whose limits are full again; returns how many.
    fn gc(&self, py: Python<'_>) -> PyResult<usize> {
        self.inner.gc_at(self.now(py)?).py_err(py)
    }

    /// Bytes of memory the store holds (see `Keyed.memory_bytes`).
    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    /// Keys held.
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// `Limiter({"burst": token bucket 3 per 1s, "daily": fixed window 5 per
    /// 1d}, keys=0)`: each limit's rule with its unit.
    fn __repr__(&self) -> String {
        let limits: Vec<String> =
            self.inner.names().zip(self.inner.rules()).map(|(n, r)| format!("{n:?}: {r}")).collect();
        format!("Limiter({{{}}}, keys={})", limits.join(", "), self.inner.len())
    }
}
