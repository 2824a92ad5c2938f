//! `Stack`: limiters on different keys (per IP, per user, global), all or
//! nothing.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use ratomic::StackMember;

use crate::clock::Time;
use crate::decision::{make_names, MultiDecision, Names};
use crate::direct::DirectTokenBucket;
use crate::error::{argument_type, invalid_argument, type_name, CoreResultExt};
use crate::key::{key_bytes, Cost};
use crate::keyed::KeyedCore;
use crate::limiter::{named_pairs, Limiter};
use crate::token_bucket::TokenBucket;
use crate::window::{FixedWindow, SlidingWindow};

/// Several limiters, each on its own key, decided all or nothing: a call
/// passes only if every member allows it, and then every member is charged.
#[pyclass(frozen, module = "ratomic", name = "Stack")]
pub struct Stack {
    inner: ratomic::Stack,
    time: Time,
    names: Names,
    members: Py<PyTuple>,
}

/// A member's core limiter, its clock object and whether that is the
/// monotonic default.
fn member(obj: &Bound<'_, PyAny>) -> PyResult<(Arc<dyn StackMember>, Py<PyAny>, bool)> {
    let py = obj.py();
    fn keyed<A: ratomic::Algorithm>(
        py: Python<'_>,
        c: &KeyedCore<A>,
    ) -> PyResult<(Arc<dyn StackMember>, Py<PyAny>, bool)> {
        Ok((c.inner.clone(), c.time.to_object(py)?, c.time.is_monotonic()))
    }
    if let Ok(t) = obj.cast::<TokenBucket>() {
        keyed(py, &t.get().core)
    } else if let Ok(f) = obj.cast::<FixedWindow>() {
        keyed(py, &f.get().core)
    } else if let Ok(s) = obj.cast::<SlidingWindow>() {
        keyed(py, &s.get().core)
    } else if let Ok(l) = obj.cast::<Limiter>() {
        let l = l.get();
        Ok((l.inner.clone(), l.time.to_object(py)?, l.time.is_monotonic()))
    } else if let Ok(d) = obj.cast::<DirectTokenBucket>() {
        let d = d.get();
        Ok((d.inner.clone(), d.time.to_object(py)?, d.time.is_monotonic()))
    } else {
        Err(argument_type(
            py,
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
    /// member. `clock=None` uses the members' clock, which must then be the
    /// same for all of them (all the default, or the same object).
    #[new]
    #[pyo3(signature = (members, *, clock=None))]
    fn new(py: Python<'_>, members: &Bound<'_, PyAny>, clock: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        let pairs = named_pairs(members, "members")?;
        let mut builder = ratomic::Stack::builder();
        let mut clocks: Vec<(Py<PyAny>, bool)> = Vec::new();
        let mut objects = Vec::new();
        for (name, obj) in &pairs {
            let (m, c, mono) = member(obj)?;
            builder = builder.member_dyn(name.clone(), m);
            clocks.push((c, mono));
            objects.push(obj.clone());
        }
        let inner = builder.build().py_err(py)?;
        let time = match clock.filter(|c| !c.is_none()) {
            Some(c) => Time::from_arg(Some(c))?,
            None => {
                let (first, first_mono) = &clocks[0];
                let same = clocks.iter().all(|(c, mono)| mono == first_mono && c.bind(py).is(first.bind(py)));
                if !same {
                    return Err(invalid_argument(
                        py,
                        "the stack's members use different clocks: pass clock= to say which one the stack reads"
                            .to_owned(),
                    ));
                }
                if *first_mono {
                    Time::Monotonic
                } else {
                    Time::from_arg(Some(first.bind(py)))?
                }
            }
        };
        let names = make_names(py, inner.names());
        Ok(Stack { inner, time, names, members: PyTuple::new(py, objects)?.unbind() })
    }

    /// Takes `cost` from every member, each on its key (`keys[i]` for member
    /// `i`), or from none.
    #[pyo3(signature = (keys, cost = Cost::ONE), text_signature = "($self, keys, cost=1)")]
    fn allow(&self, py: Python<'_>, keys: &Bound<'_, PyAny>, cost: Cost) -> PyResult<MultiDecision> {
        let held = self.keys(keys)?;
        let keys: Vec<&[u8]> = held.iter().map(key_bytes).collect::<PyResult<_>>()?;
        let now = self.time.now(py, || self.inner.now())?;
        Ok(MultiDecision::from_core(&self.inner.allow_at(&keys, cost.0, now).py_err(py)?, &self.names))
    }

    /// What `allow` would answer, changing nothing.
    #[pyo3(signature = (keys, cost = Cost::ONE), text_signature = "($self, keys, cost=1)")]
    fn peek(&self, py: Python<'_>, keys: &Bound<'_, PyAny>, cost: Cost) -> PyResult<MultiDecision> {
        let held = self.keys(keys)?;
        let keys: Vec<&[u8]> = held.iter().map(key_bytes).collect::<PyResult<_>>()?;
        let now = self.time.now(py, || self.inner.now())?;
        Ok(MultiDecision::from_core(&self.inner.peek_at(&keys, cost.0, now).py_err(py)?, &self.names))
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
    fn keys<'py>(&self, keys: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        if keys.is_instance_of::<PyString>() || keys.is_instance_of::<pyo3::types::PyBytes>() {
            return Err(argument_type(
                keys.py(),
                format!("a stack call takes one key per member (a list of {}), not a single key", self.names.len()),
            ));
        }
        keys.try_iter()?.collect()
    }
}
