//! Keys and the other call arguments (whole numbers, numbers), taken from
//! Python objects without copying.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyInt, PyString};

use crate::error::py_float_repr;
use crate::error::{argument_type, invalid_argument, key_encoding, key_type, type_name};

/// A key's bytes: a `str`'s UTF-8 encoding, or a `bytes`' contents. Borrowed
/// from the object, which the caller holds for as long as the slice lives.
///
/// A str is read with `PyUnicode_AsUTF8AndSize` (stable ABI from 3.10),
/// which returns the str's cached UTF-8 bytes (for an ASCII str, its own
/// buffer): no copy and no allocation, where `PyUnicode_AsUTF8String` would
/// make a bytes object on every call.
#[inline]
pub fn key_bytes<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    if let Ok(s) = obj.cast::<PyString>() {
        let mut size: ffi::Py_ssize_t = 0;
        // SAFETY: `s` is a str (checked above) and we are attached to the
        // interpreter; the returned buffer is owned by the str object and
        // lives as long as it, which outlives `'a` because `obj` is borrowed
        // for `'a`.
        let data = unsafe { ffi::PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut size) };
        if data.is_null() {
            return Err(not_utf8(obj.py(), PyErr::fetch(obj.py())));
        }
        // SAFETY: CPython guarantees `size` valid bytes at `data`.
        return Ok(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size as usize) });
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes());
    }
    Err(not_a_key(obj))
}

/// A str with a lone surrogate has no UTF-8 form: rather than pick an
/// encoding for it (which Node could not match), the key is refused, with
/// what to do instead.
#[cold]
fn not_utf8(py: Python<'_>, err: PyErr) -> PyErr {
    let value = err.value(py);
    let at = value.getattr("start").and_then(|s| s.extract::<usize>()).ok();
    let ch = at.and_then(|i| value.getattr("object").ok()?.get_item(i).ok()?.repr().ok().map(|r| r.to_string()));
    let what = match (ch, at) {
        (Some(ch), Some(at)) => format!("{ch} at position {at} is a lone surrogate"),
        _ => "it holds a lone surrogate".to_owned(),
    };
    key_encoding(
        py,
        format!(
            "invalid key: {what}, so the str has no UTF-8 form; encode the key yourself and pass \
             bytes (for example key.encode('utf-8', 'surrogatepass'))"
        ),
        err,
    )
}

#[cold]
fn not_a_key(obj: &Bound<'_, PyAny>) -> PyErr {
    key_type(obj.py(), format!("a key must be str or bytes, not {}", type_name(obj)))
}

/// A whole number ≥ 0 (a cost, a token count), with errors a Python user
/// expects: `ArgumentTypeError` for a non-int (a float, a str),
/// `InvalidArgumentError` for a negative or too large int. Each names the
/// parameter, the value as given and the accepted range.
#[inline]
pub fn whole(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<u64> {
    whole_from(obj, name, 0)
}

/// [`whole`] with a smallest accepted value (`1` for a capacity or a limit).
#[inline]
pub fn whole_from(obj: &Bound<'_, PyAny>, name: &str, min: u64) -> PyResult<u64> {
    match obj.extract::<u64>() {
        Ok(n) if n >= min && !obj.is_instance_of::<pyo3::types::PyBool>() => Ok(n),
        _ => Err(not_whole(obj, name, min, u64::MAX)),
    }
}

/// The error for `obj`, not a whole number from `min` to `max`, naming
/// `name` and quoting `obj` as given.
#[cold]
pub fn not_whole(obj: &Bound<'_, PyAny>, name: &str, min: u64, max: u64) -> PyErr {
    let py = obj.py();
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<pyo3::types::PyBool>() {
        invalid_argument(py, format!("invalid {name}: {} (must be a whole number from {min} to {max})", as_given(obj)))
    } else {
        argument_type(py, format!("{name} must be an int, not {}: {}", type_name(obj), as_given(obj)))
    }
}

/// [`whole_from`] as a `usize` (for sizes).
pub fn size(obj: &Bound<'_, PyAny>, name: &str, min: usize) -> PyResult<usize> {
    let n = whole_from(obj, name, min as u64)?;
    usize::try_from(n).map_err(|_| not_whole(obj, name, min as u64, usize::MAX as u64))
}

/// A number (int or float, not bool or str) as an `f64`.
pub fn number(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<f64> {
    let numeric = (obj.is_instance_of::<PyInt>() || obj.is_instance_of::<pyo3::types::PyFloat>())
        && !obj.is_instance_of::<pyo3::types::PyBool>();
    if !numeric {
        return Err(argument_type(
            obj.py(),
            format!("{name} must be a number (int or float), not {}: {}", type_name(obj), as_given(obj)),
        ));
    }
    obj.extract::<f64>().map_err(|_| {
        invalid_argument(
            obj.py(),
            format!(
                "invalid {name}: {} (too large for a float: must be at most {})",
                as_given(obj),
                py_float_repr(f64::MAX)
            ),
        )
    })
}

/// An argument as the user wrote it, for messages: its `repr` (`1e-300`,
/// `10`, `'1m'`), shortened when it is very long (a 400-digit int).
pub fn as_given(obj: &Bound<'_, PyAny>) -> String {
    let text = obj.repr().map(|r| r.to_string()).unwrap_or_else(|_| "?".to_owned());
    const MAX: usize = 60;
    if text.chars().count() <= MAX {
        return text;
    }
    let head: String = text.chars().take(MAX - 20).collect();
    let tail: String = text.chars().rev().take(10).collect::<Vec<_>>().into_iter().rev().collect();
    format!("{head}...{tail} ({} characters)", text.chars().count())
}

/// A call's cost (or a refund's token count): a whole number ≥ 0.
#[derive(Clone, Copy, Debug)]
pub struct Cost(pub u64);

impl Cost {
    pub const ONE: Cost = Cost(1);
}

impl<'a, 'py> FromPyObject<'a, 'py> for Cost {
    type Error = PyErr;

    #[inline]
    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        whole(&obj, "cost").map(Cost)
    }
}
