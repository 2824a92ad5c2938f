//! How a keyed limiter stores its keys: core's `Options` from the keyword
//! arguments every keyed limiter takes (`max_keys`, `max_key_len`,
//! `max_key_bytes`, `reserve_keys`, `eviction`, `shared_file`).

use pyo3::prelude::*;
use pyo3::types::PyString;

use ratomic::{Eviction, Options};

use crate::error::{argument_type, invalid_argument, type_name};
use crate::key::size;

/// The store keywords of a limiter's constructor, as given (None: core's default).
#[derive(Clone, Copy, Default)]
pub struct StoreArgs<'a, 'py> {
    pub max_keys: Option<&'a Bound<'py, PyAny>>,
    pub max_key_len: Option<&'a Bound<'py, PyAny>>,
    pub max_key_bytes: Option<&'a Bound<'py, PyAny>>,
    /// Keys to make room for up front (see `ratomic::Options::reserve_keys`).
    pub reserve_keys: Option<&'a Bound<'py, PyAny>>,
    pub eviction: Option<&'a Bound<'py, PyAny>>,
    /// A path (`str` or `os.PathLike`): the processes of this host that
    /// build the same limiter on it share its keys (see `ratomic::Options::shared_file`).
    pub shared_file: Option<&'a Bound<'py, PyAny>>,
}

impl<'a, 'py> StoreArgs<'a, 'py> {
    /// Core's options; core checks their ranges when the limiter is built.
    pub fn options(&self) -> PyResult<Options> {
        fn given<'a, 'py>(arg: Option<&'a Bound<'py, PyAny>>) -> Option<&'a Bound<'py, PyAny>> {
            arg.filter(|a| !a.is_none())
        }
        let mut o = Options::default();
        if let Some(n) = given(self.max_keys) {
            o = o.max_keys(size(n, "max_keys", 1)?);
        }
        if let Some(n) = given(self.max_key_len) {
            o = o.max_key_len(size(n, "max_key_len", 1)?);
        }
        if let Some(n) = given(self.max_key_bytes) {
            o = o.max_key_bytes(size(n, "max_key_bytes", 0)?);
        }
        if let Some(n) = given(self.reserve_keys) {
            o = o.reserve_keys(size(n, "reserve_keys", 0)?);
        }
        if let Some(e) = given(self.eviction) {
            o = o.eviction(eviction(e)?);
        }
        if let Some(p) = given(self.shared_file) {
            let py = p.py();
            let path: std::path::PathBuf = p.extract().map_err(|_| {
                argument_type(py, format!("shared_file must be a str or os.PathLike, not {}", type_name(p)))
            })?;
            o = o.shared_file(path);
        }
        Ok(o)
    }
}

/// `"fair"` or `"strict"` (see `ratomic::Eviction`).
fn eviction(arg: &Bound<'_, PyAny>) -> PyResult<Eviction> {
    let py = arg.py();
    let s = arg
        .cast::<PyString>()
        .map_err(|_| argument_type(py, format!("eviction must be \"fair\" or \"strict\", not {}", type_name(arg))))?;
    match &*s.to_cow()? {
        "fair" => Ok(Eviction::Fair),
        "strict" => Ok(Eviction::Strict),
        other => Err(invalid_argument(py, format!("invalid eviction: {other:?} (must be \"fair\" or \"strict\")"))),
    }
}
