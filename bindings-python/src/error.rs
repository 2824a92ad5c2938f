//! The Python exception hierarchy, and the one place core errors become
//! Python exceptions.
//!
//! ```text
//! RatomicError(Exception)
//! ├── InvalidArgumentError(RatomicError, ValueError)
//! │   ├── InvalidRateError          a rate string that does not parse
//! │   ├── CostExceedsLimitError     a cost above the limit: could never pass
//! │   └── KeyTooLongError           a key longer than max_key_len
//! └── ArgumentTypeError(RatomicError, TypeError)
//!     └── KeyTypeError              a key that is neither str nor bytes
//! ```
//!
//! The classes have two bases each, which `create_exception!` cannot make,
//! so they are built once with `type(name, bases, namespace)`.

use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

/// The exception classes, made when the module is first imported.
pub struct Exceptions {
    pub ratomic_error: Py<PyType>,
    pub invalid_argument: Py<PyType>,
    pub invalid_rate: Py<PyType>,
    pub cost_exceeds_limit: Py<PyType>,
    pub key_too_long: Py<PyType>,
    pub argument_type: Py<PyType>,
    pub key_type: Py<PyType>,
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
        let base = make_class(py, "RatomicError", &[&exc], "Base class of every error ratomic raises.")?;
        let base_b = base.bind(py);
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
            key_type: make_class(
                py,
                "KeyTypeError",
                &[argument_type.bind(py)],
                "A key is neither str nor bytes. Also a TypeError.",
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
            ("ArgumentTypeError", &e.argument_type),
            ("KeyTypeError", &e.key_type),
        ] {
            m.add(name, ty.clone_ref(py))?;
        }
        Ok(())
    }
}

fn raise(py: Python<'_>, ty: &Py<PyType>, msg: String) -> PyErr {
    PyErr::from_type(ty.bind(py).clone(), msg)
}

/// A core error as the matching Python exception, with the core's message.
#[cold]
pub fn core_error(py: Python<'_>, err: ratomic::Error) -> PyErr {
    let e = Exceptions::get(py);
    let ty = match &err {
        ratomic::Error::InvalidRate { .. } => &e.invalid_rate,
        ratomic::Error::CostExceedsLimit { .. } => &e.cost_exceeds_limit,
        ratomic::Error::KeyTooLong { .. } => &e.key_too_long,
        _ => &e.invalid_argument,
    };
    raise(py, ty, err.to_string())
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
