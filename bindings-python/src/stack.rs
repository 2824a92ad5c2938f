//! `Stack`: limiters on different keys (per IP, per user, global), all or
//! nothing.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString, PyTuple};

use ratomic::headers::Policy;
use ratomic::StackMember;

use crate::clock::Time;
use crate::decision::{make_names, MultiDecision, Names};
use crate::direct::DirectTokenBucket;
use crate::error::{argument_type, core_error, invalid_argument, type_name, CoreResultExt};
use crate::headers::{self, Fields};
use crate::key::{key_bytes, whole, Cost};
use crate::keyed::Keyed;
use crate::limiter::{named_pairs, Limiter};

/// Several limiters, each on its own key, decided all or nothing: a call
/// passes only if every member allows it, and then every member is charged.
#[pyclass(frozen, module = "ratomic", name = "Stack")]
pub struct Stack {
    inner: ratomic::Stack<Time>,
    pub(crate) names: Names,
    members: Py<PyTuple>,
    /// One header policy per member, named as the member (core's
    /// `Stack::policies`), made at construction; an error if a member has
    /// none (a `Limiter`), raised only by `headers()` and `problem()`.
    pub(crate) policies: ratomic::Result<Vec<Policy>>,
}

/// A member's core limiter and its clock.
fn member<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<(Arc<dyn StackMember>, &'a Time)> {
    if let Ok(k) = obj.cast::<Keyed>() {
        let inner = &k.get().inner;
        Ok((inner.clone(), inner.clock()))
    } else if let Ok(l) = obj.cast::<Limiter>() {
        let inner = &l.get().inner;
        Ok((inner.clone(), inner.clock()))
    } else if let Ok(d) = obj.cast::<DirectTokenBucket>() {
        let inner = &d.get().inner;
        Ok((inner.clone(), inner.clock()))
    } else {
        Err(argument_type(
            obj.py(),
            format!(
                "a stack member must be a TokenBucket, FixedWindow, SlidingWindow, Limiter or DirectTokenBucket, not {}",
                type_name(obj)
            ),
        ))
    }
}

#[pymethods]
impl Stack {
    /// `members`: a mapping `{name: limiter}` or a list of `(name, limiter)`
    /// pairs, each a `TokenBucket`, `FixedWindow`, `SlidingWindow`,
    /// `Limiter` or `DirectTokenBucket` (whose key is ignored). Members are
    /// shared: each keeps working on its own too. At most 16.
    ///
    /// The stack reads one clock per call and gives that time to every
    /// member, so all members must read the same clock (all the default,
    /// one `ManualClock`, or one callable); core refuses a member on
    /// another. `clock=None` is that clock; a `clock=` given must be it too.
    #[new]
    #[pyo3(signature = (members, *, clock=None))]
    fn new(py: Python<'_>, members: &Bound<'_, PyAny>, clock: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let pairs = named_pairs(members, "members")?;
        let mut parts = Vec::with_capacity(pairs.len());
        for (name, obj) in &pairs {
            parts.push((name, member(obj)?));
        }
        let time = match (clock.filter(|c| !c.is_none()), parts.first()) {
            (Some(c), _) => Time::from_arg(Some(c))?,
            (None, Some((_, (_, first)))) => first.clone_ref(py),
            // No members: core refuses the stack, whatever its clock.
            (None, None) => Time::from_arg(None)?,
        };
        let mut builder = ratomic::Stack::builder().clock(time);
        for (name, (m, _)) in parts {
            builder = builder.member_dyn(name.clone(), m);
        }
        let inner = builder.build().py_err(py)?;
        let names = make_names(py, inner.names());
        let policies = inner.policies();
        let objects = pairs.into_iter().map(|(_, obj)| obj);
        Ok(Stack { inner, names, members: PyTuple::new(py, objects)?.unbind(), policies })
    }

    /// Takes `cost` from every member, each on its key (`keys[i]` for member
    /// `i`), or from none.
    #[pyo3(signature = (keys, cost = Cost::ONE), text_signature = "($self, keys, cost=1)")]
    fn allow(&self, py: Python<'_>, keys: &Bound<'_, PyAny>, cost: Cost) -> PyResult<MultiDecision> {
        let held = self.keys(keys)?;
        let keys = bytes_of(&held)?;
        let d = self.inner.allow_at(&keys, cost.0, self.now(py)?).py_err(py)?;
        Ok(MultiDecision::from_core(&d, &self.names))
    }

    /// What `allow` would answer, changing nothing.
    #[pyo3(signature = (keys, cost = Cost::ONE), text_signature = "($self, keys, cost=1)")]
    fn peek(&self, py: Python<'_>, keys: &Bound<'_, PyAny>, cost: Cost) -> PyResult<MultiDecision> {
        let held = self.keys(keys)?;
        let keys = bytes_of(&held)?;
        let d = self.inner.peek_at(&keys, cost.0, self.now(py)?).py_err(py)?;
        Ok(MultiDecision::from_core(&d, &self.names))
    }

    /// Gives `tokens` back to every member, each on its key (never above
    /// full): for work that was admitted but not done.
    fn refund(&self, py: Python<'_>, keys: &Bound<'_, PyAny>, tokens: &Bound<'_, PyAny>) -> PyResult<()> {
        let held = self.keys(keys)?;
        let keys = bytes_of(&held)?;
        let tokens = whole(tokens, "tokens")?;
        self.inner.refund_at(&keys, tokens, self.now(py)?).py_err(py)
    }

    /// Forgets every member's key: each is full again (a `DirectTokenBucket`
    /// member is reset for everyone).
    fn reset(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<()> {
        let held = self.keys(keys)?;
        let keys = bytes_of(&held)?;
        self.inner.reset_at(&keys, self.now(py)?).py_err(py)
    }

    /// The HTTP header fields for `decision` (a decision of this stack), as
    /// `(name, value)` pairs: one `RateLimit-Policy` and `RateLimit` item
    /// per member, named as the member, `Retry-After` on a denial, and with
    /// `legacy=True` the `X-RateLimit-*` fields (combined decision). `draft`
    /// as in `Limiter.headers`. A stack with a `Limiter` member (several
    /// limits, no single policy) raises `InvalidArgumentError` naming it:
    /// make each of its limits a member of its own to describe it.
    #[pyo3(signature = (decision, *, legacy = false, draft = "draft-11"))]
    fn headers(
        &self,
        py: Python<'_>,
        decision: PyRef<'_, MultiDecision>,
        legacy: bool,
        draft: &str,
    ) -> PyResult<Fields> {
        let fields = headers::fields(py, draft, legacy)?;
        headers::with_policies(py, self.policies_for(py, &decision)?, &decision, fields)
    }

    /// The RFC 9457 problem document (JSON) for a 429 answering `decision`
    /// (a decision of this stack), naming the members that denied; None
    /// when it was allowed. Errors as `headers`.
    fn problem(&self, py: Python<'_>, decision: PyRef<'_, MultiDecision>) -> PyResult<Option<String>> {
        headers::with_policies(py, self.policies_for(py, &decision)?, &decision, headers::problem)
    }

    /// The members' names, in order.
    #[getter]
    fn names<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.names.iter().map(|(_, n)| n.bind(py)))
    }

    /// The member limiters, in order.
    #[getter]
    fn members<'py>(&self, py: Python<'py>) -> Bound<'py, PyTuple> {
        self.members.bind(py).clone()
    }

    /// The clock every call reads, the members' (None: the monotonic default).
    #[getter]
    fn clock(&self, py: Python<'_>) -> Py<PyAny> {
        self.inner.clock().to_object(py)
    }

    /// How many members.
    fn __len__(&self) -> usize {
        self.names.len()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let parts: Vec<String> = self
            .names
            .iter()
            .zip(self.members.bind(py).iter())
            .map(|((n, _), m)| format!("{n:?}: {}", m.repr().map(|r| r.to_string()).unwrap_or_default()))
            .collect();
        format!("Stack({{{}}})", parts.join(", "))
    }
}

impl Stack {
    fn now(&self, py: Python<'_>) -> PyResult<u64> {
        self.inner.clock().read(py)
    }

    /// The members' header policies, to format `d`: an error if a member
    /// has none, or if `d` is not a decision of this stack (whose entries
    /// would be read against other members' policies).
    fn policies_for(&self, py: Python<'_>, d: &MultiDecision) -> PyResult<&[Policy]> {
        let policies = self.policies.as_deref().map_err(|e| core_error(py, e.clone()))?;
        if !Arc::ptr_eq(d.names(), &self.names) {
            let theirs: Vec<&str> = d.names().iter().map(|(n, _)| &**n).collect();
            let ours: Vec<&str> = self.names.iter().map(|(n, _)| &**n).collect();
            return Err(invalid_argument(
                py,
                format!("decision is not one of this Stack's (it answers for {theirs:?}; this stack's members are {ours:?})"),
            ));
        }
        Ok(policies)
    }

    /// A call's keys, one per member (core checks the count).
    fn keys<'py>(&self, keys: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        if keys.is_instance_of::<PyString>() || keys.is_instance_of::<PyBytes>() {
            return Err(argument_type(
                keys.py(),
                format!("a stack call takes one key per member (a list of {}), not a single key", self.names.len()),
            ));
        }
        keys.try_iter()?.collect()
    }
}

/// Keys as bytes, borrowed from the key objects.
fn bytes_of<'a>(keys: &'a [Bound<'_, PyAny>]) -> PyResult<Vec<&'a [u8]>> {
    keys.iter().map(key_bytes).collect()
}
