//! The Python exception hierarchy, and the one place core errors become
//! Python exceptions.
//!
//! ```text
//! RatomicError(Exception)
//! ├── InvalidArgumentError(RatomicError, ValueError)
//! │   ├── InvalidRateError          a rate string that does not parse
//! │   ├── CostExceedsLimitError     a cost above the limit: could never pass
//! │   ├── KeyTooLongError           a key longer than max_key_len
//! │   └── KeyEncodingError(.., UnicodeError)  a str key with no UTF-8 form
//! ├── ArgumentTypeError(RatomicError, TypeError)
//! │   └── KeyTypeError              a key that is neither str nor bytes
//! └── BackendError                  Redis failed (ratomic.redis, on_error="raise"),
//!                                   or a shared_file could not serve a call
//! ```
//!
//! The classes have two bases each, which `create_exception!` cannot make,
//! so they are built once with `type(name, bases, namespace)`. Every class
//! has an `index` attribute: None, or for a batch (`allow_many`), the
//! position of the first invalid request (nothing in the batch was decided).

use pyo3::exceptions::{PyException, PyTypeError, PyUnicodeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyFloat, PyTuple, PyType};

/// The exception classes, made when the module is first imported.
pub struct Exceptions {
    pub ratomic_error: Py<PyType>,
    pub invalid_argument: Py<PyType>,
    pub invalid_rate: Py<PyType>,
    pub cost_exceeds_limit: Py<PyType>,
    pub key_too_long: Py<PyType>,
    pub key_encoding: Py<PyType>,
    pub argument_type: Py<PyType>,
    pub key_type: Py<PyType>,
    pub backend: Py<PyType>,
}

static EXCEPTIONS: PyOnceLock<Exceptions> = PyOnceLock::new();

fn make_class<'py>(py: Python<'py>, name: &str, bases: &[&Bound<'py, PyType>], doc: &str) -> PyResult<Py<PyType>> {
    let ns = PyDict::new(py);
    ns.set_item("__module__", "ratomic")?;
    ns.set_item("__doc__", doc)?;
    let bases = PyTuple::new(py, bases)?;
    let class = py.get_type::<PyType>().call1((name, bases, ns))?;
    Ok(class.cast_into::<PyType>()?.unbind())
}

impl Exceptions {
    pub fn get(py: Python<'_>) -> &Exceptions {
        EXCEPTIONS.get_or_init(py, || Self::make(py).expect("making ratomic's exception classes cannot fail"))
    }

    fn make(py: Python<'_>) -> PyResult<Exceptions> {
        let exc = py.get_type::<PyException>();
        let value = py.get_type::<PyValueError>();
        let type_ = py.get_type::<PyTypeError>();
        let base = make_class(
            py,
            "RatomicError",
            &[&exc],
            "Base class of every error ratomic raises. `index` is None, or for a batch \
             (allow_many), the position of the first invalid request: nothing in the batch was decided.",
        )?;
        let base_b = base.bind(py);
        base_b.setattr("index", py.None())?;
        let invalid = make_class(
            py,
            "InvalidArgumentError",
            &[base_b, &value],
            "An argument is out of range: a NaN, negative or zero rate, a bad option, \
             a cost above the limit, an overlong key. Also a ValueError.",
        )?;
        let invalid_b = invalid.bind(py);
        let argument_type = make_class(
            py,
            "ArgumentTypeError",
            &[base_b, &type_],
            "An argument has the wrong type (a float where a whole number is needed, \
             a clock that returned something other than a number). Also a TypeError.",
        )?;
        Ok(Exceptions {
            invalid_rate: make_class(
                py,
                "InvalidRateError",
                &[invalid_b],
                "A rate string such as \"10/s\" could not be parsed.",
            )?,
            cost_exceeds_limit: make_class(
                py,
                "CostExceedsLimitError",
                &[invalid_b],
                "A call asked for more than the key can ever hold, so it could never be allowed.",
            )?,
            key_too_long: make_class(
                py,
                "KeyTooLongError",
                &[invalid_b],
                "A key is longer than the limiter's max_key_len.",
            )?,
            key_encoding: make_class(
                py,
                "KeyEncodingError",
                &[invalid_b, &py.get_type::<PyUnicodeError>()],
                "A str key has no UTF-8 form (it holds a lone surrogate such as '\\ud800'): \
                 encode it yourself and pass bytes. Also a UnicodeError.",
            )?,
            key_type: make_class(
                py,
                "KeyTypeError",
                &[argument_type.bind(py)],
                "A key is neither str nor bytes. Also a TypeError.",
            )?,
            backend: make_class(
                py,
                "BackendError",
                &[base_b],
                "A Redis-backed limiter (ratomic.redis) could not get an answer from Redis: the \
                 connection failed, the call timed out, or the server answered an error, and its \
                 on_error policy is \"raise\". `__cause__` is the client's exception. Also a \
                 limiter on a shared_file that could not serve a call (its file system is full, or \
                 another process holds the key): nothing changed, and the message says what to do.",
            )?,
            ratomic_error: base,
            invalid_argument: invalid,
            argument_type,
        })
    }

    /// Adds every class to the module.
    pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
        let py = m.py();
        let e = Self::get(py);
        for (name, ty) in [
            ("RatomicError", &e.ratomic_error),
            ("InvalidArgumentError", &e.invalid_argument),
            ("InvalidRateError", &e.invalid_rate),
            ("CostExceedsLimitError", &e.cost_exceeds_limit),
            ("KeyTooLongError", &e.key_too_long),
            ("KeyEncodingError", &e.key_encoding),
            ("ArgumentTypeError", &e.argument_type),
            ("KeyTypeError", &e.key_type),
            ("BackendError", &e.backend),
        ] {
            m.add(name, ty.clone_ref(py))?;
        }
        Ok(())
    }
}

fn raise(py: Python<'_>, ty: &Py<PyType>, msg: String) -> PyErr {
    PyErr::from_type(ty.bind(py).clone(), msg)
}

/// A core error as the matching Python exception, with the core's message;
/// a batch's error is its invalid request's class, with `index` set.
#[cold]
pub fn core_error(py: Python<'_>, err: ratomic::Error) -> PyErr {
    let e = Exceptions::get(py);
    let ty = match err.cause() {
        ratomic::Error::InvalidRate { .. } => &e.invalid_rate,
        ratomic::Error::CostExceedsLimit { .. } => &e.cost_exceeds_limit,
        ratomic::Error::KeyTooLong { .. } => &e.key_too_long,
        ratomic::Error::SharedFile { .. } => &e.backend,
        _ => &e.invalid_argument,
    };
    let index = match err {
        ratomic::Error::InvalidRequest { index, .. } => Some(index),
        _ => None,
    };
    with_index(py, raise(py, ty, err.to_string()), index)
}

/// An error this face found in request `index` of a batch (a key or a cost
/// of the wrong type), said as core says its own (`Error::InvalidRequest`):
/// the same class, the message naming the request, `index` set. Errors that
/// are not ratomic's pass unchanged.
#[cold]
pub fn in_batch(py: Python<'_>, index: usize, err: PyErr) -> PyErr {
    if !err.is_instance(py, Exceptions::get(py).ratomic_error.bind(py)) {
        return err;
    }
    let msg = format!("request {index} of the batch: {} (nothing in the batch was decided)", err.value(py));
    let out = PyErr::from_type(err.get_type(py), msg);
    out.set_cause(py, err.cause(py));
    with_index(py, out, Some(index))
}

fn with_index(py: Python<'_>, err: PyErr, index: Option<usize>) -> PyErr {
    if let Some(i) = index {
        // Setting an attribute on a fresh exception of our own classes cannot fail.
        let _ = err.value(py).setattr("index", i);
    }
    err
}

/// `InvalidArgumentError(msg)`.
#[cold]
pub fn invalid_argument(py: Python<'_>, msg: String) -> PyErr {
    raise(py, &Exceptions::get(py).invalid_argument, msg)
}

/// `ArgumentTypeError(msg)`.
#[cold]
pub fn argument_type(py: Python<'_>, msg: String) -> PyErr {
    raise(py, &Exceptions::get(py).argument_type, msg)
}

/// `KeyEncodingError(msg)`, caused by `cause` (the `UnicodeEncodeError`).
#[cold]
pub fn key_encoding(py: Python<'_>, msg: String, cause: PyErr) -> PyErr {
    let err = raise(py, &Exceptions::get(py).key_encoding, msg);
    err.set_cause(py, Some(cause));
    err
}

/// `KeyTypeError(msg)`.
#[cold]
pub fn key_type(py: Python<'_>, msg: String) -> PyErr {
    raise(py, &Exceptions::get(py).key_type, msg)
}

/// The name of an object's type, for messages.
pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_owned())
}

/// Converts a core `Result` in one call: `core(py, limiter.allow(..))?`.
pub trait CoreResultExt<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> CoreResultExt<T> for Result<T, ratomic::Error> {
    #[inline]
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| core_error(py, e))
    }
}

/// A float as Python's `repr` writes it (`0.1`, `1.0`, `1e-09`).
pub fn py_float_repr(x: f64) -> String {
    Python::attach(|py| PyFloat::new(py, x).repr().map(|r| r.to_string())).unwrap_or_else(|_| x.to_string())
}
