//! The hot calls — `allow` and `peek` on the keyed limiters (`Keyed`) — as
//! `METH_FASTCALL` methods.
//!
//! # Why
//!
//! The wheel targets the stable ABI from Python 3.9 (abi3-py39). PyO3 only
//! uses the vectorcall convention (`METH_FASTCALL`) when the ABI floor is
//! 3.10, where it entered the *limited* API; below that, every call packs
//! its arguments into a fresh tuple that the method then unpacks. Measured
//! on the benchmark machine (`benches/bench.py`), that convention was about
//! a third of the cost of a hot `allow`.
//!
//! `METH_FASTCALL | METH_KEYWORDS` has been implemented by every CPython
//! since 3.7 with this exact signature and flag value (stable ABI from
//! 3.10), so registering these methods ourselves is sound on the whole
//! range the wheel serves. Everything else stays on PyO3's generated code,
//! and so do these methods' semantics: the same argument names, errors and
//! results (the tests run against this path).

use std::ffi::{c_int, CStr};
use std::os::raw::c_char;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::decision::Decision;
use crate::key::whole;
use crate::keyed::Keyed;

/// `METH_FASTCALL` (CPython's `methodobject.h`, unchanged since 3.7).
const METH_FASTCALL: c_int = 0x0080;

type FastWithKeywords = unsafe extern "C" fn(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject;

#[derive(Clone, Copy)]
enum Op {
    Allow,
    Peek,
}

/// `(key, cost=1)` from a vectorcall: positional or by name.
fn parse_args<'py>(
    py: Python<'py>,
    name: &str,
    args: &[*mut ffi::PyObject],
    nargs: usize,
    kwnames: Option<&Bound<'py, PyTuple>>,
) -> PyResult<(Bound<'py, PyAny>, u64)> {
    let mut slots: [Option<Bound<'py, PyAny>>; 2] = [None, None];
    if nargs > 2 {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "{name}() takes from 1 to 2 positional arguments but {nargs} were given"
        )));
    }
    for (i, slot) in slots.iter_mut().enumerate().take(nargs) {
        // SAFETY: CPython passes `nargs` valid borrowed references.
        *slot = Some(unsafe { Bound::from_borrowed_ptr(py, args[i]) });
    }
    if let Some(kw) = kwnames {
        for (j, kwname) in kw.iter().enumerate() {
            let kwname = kwname.cast_into::<PyString>()?;
            let i = match &*kwname.to_cow()? {
                "key" => 0,
                "cost" => 1,
                other => {
                    return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                        "{name}() got an unexpected keyword argument '{other}'"
                    )))
                }
            };
            if slots[i].is_some() {
                let which = if i == 0 { "key" } else { "cost" };
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "{name}() got multiple values for argument '{which}'"
                )));
            }
            // SAFETY: keyword values follow the positional ones in `args`.
            slots[i] = Some(unsafe { Bound::from_borrowed_ptr(py, args[nargs + j]) });
        }
    }
    let [key, cost] = slots;
    let key = key.ok_or_else(|| {
        pyo3::exceptions::PyTypeError::new_err(format!("{name}() missing 1 required positional argument: 'key'"))
    })?;
    let cost = match cost {
        Some(c) => whole(&c, "cost")?,
        None => 1,
    };
    Ok((key, cost))
}

#[inline(always)]
unsafe fn call(
    op: Op,
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a method with the GIL held.
    let py = unsafe { Python::assume_attached() };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> PyResult<*mut ffi::PyObject> {
        // SAFETY: a method descriptor checks that `self` is an instance of
        // the type it was made for (`Keyed`, or a subclass) before calling.
        let slf = unsafe { Bound::from_borrowed_ptr(py, slf).cast_into_unchecked::<Keyed>() };
        let core = slf.get();
        let name = match op {
            Op::Allow => "allow",
            Op::Peek => "peek",
        };
        let nargs = nargs as usize;
        let (key, cost) = if kwnames.is_null() && nargs == 1 {
            // The hot path: allow(key).
            // SAFETY: one valid borrowed reference.
            (unsafe { Bound::from_borrowed_ptr(py, *args) }, 1)
        } else {
            let kw = if kwnames.is_null() {
                None
            } else {
                // SAFETY: CPython passes a tuple of str (or NULL).
                Some(unsafe { Bound::from_borrowed_ptr(py, kwnames).cast_into_unchecked::<PyTuple>() })
            };
            let total = nargs + kw.as_ref().map_or(0, |k| k.len());
            // SAFETY: `args` holds `nargs` positional plus one per keyword.
            let all = unsafe { std::slice::from_raw_parts(args, total) };
            parse_args(py, name, all, nargs, kw.as_ref())?
        };
        let d: Decision = match op {
            Op::Allow => core.allow_call(py, &key, cost)?,
            Op::Peek => core.peek_call(py, &key, cost)?,
        };
        Ok(Bound::new(py, d)?.into_ptr())
    }));
    match outcome {
        Ok(Ok(ptr)) => ptr,
        Ok(Err(e)) => {
            e.restore(py);
            std::ptr::null_mut()
        }
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic in ratomic".to_owned());
            pyo3::panic::PanicException::new_err(msg).restore(py);
            std::ptr::null_mut()
        }
    }
}

unsafe extern "C" fn allow(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: forwarded as received from CPython.
    unsafe { call(Op::Allow, slf, args, nargs, kwnames) }
}

unsafe extern "C" fn peek(
    slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: forwarded as received from CPython.
    unsafe { call(Op::Peek, slf, args, nargs, kwnames) }
}

/// Replaces `Keyed.allow` and `Keyed.peek` (made by PyO3) with the
/// fastcall versions, keeping their docs and signatures.
pub fn install(py: Python<'_>) -> PyResult<()> {
    let ty = py.get_type::<Keyed>();
    let fast: [(&CStr, FastWithKeywords); 2] = [(c"allow", allow), (c"peek", peek)];
    for (name, f) in fast {
        let doc = ty.getattr(name.to_str().expect("ASCII name"))?.getattr("__doc__")?;
        let doc = if doc.is_none() { String::new() } else { doc.extract::<String>()? };
        // `__text_signature__` comes from a "name(sig)\n--\n\n" doc prefix.
        let text = format!("{}($self, key, cost=1)\n--\n\n{doc}\0", name.to_str().expect("ASCII name"));
        // SAFETY: a fn pointer of the METH_FASTCALL | METH_KEYWORDS
        // signature, stored in the union as CPython expects for those flags
        // (the union only erases the pointer's type; CPython casts it back).
        let meth = unsafe { std::mem::transmute::<FastWithKeywords, ffi::PyCFunction>(f) };
        let def = Box::leak(Box::new(ffi::PyMethodDef {
            ml_name: name.as_ptr(),
            ml_meth: ffi::PyMethodDefPointer { PyCFunction: meth },
            ml_flags: METH_FASTCALL | ffi::METH_KEYWORDS,
            ml_doc: Box::leak(text.into_boxed_str()).as_ptr() as *const c_char,
        }));
        // SAFETY: `ty` is a live type object and `def` lives forever.
        let descr = unsafe { ffi::PyDescr_NewMethod(ty.as_type_ptr(), def) };
        // SAFETY: a new reference, or NULL with an exception set.
        let descr = unsafe { Bound::from_owned_ptr_or_err(py, descr)? };
        ty.setattr(name.to_str().expect("ASCII name"), descr)?;
    }
    Ok(())
}
