//! The one place where failures become JavaScript exceptions:
//! bad arguments throw `TypeError`/`RangeError`, everything else an `Error`;
//! every exception carries a `code`, and an error about one request of a
//! batch also its `index`.

use std::ffi::CString;
use std::ptr;

use napi::sys;

/// Which JavaScript constructor an error is thrown with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An argument of the wrong type.
    Type,
    /// An argument of the right type but out of range.
    Range,
    /// Anything else.
    Error,
}

/// A failure on its way to JavaScript. Boxed: a `Res<T>` is then two
/// words, returned in registers on the hot path, where failures are rare.
#[derive(Clone, Debug)]
pub struct JsFailure(Box<Failure>);

#[derive(Clone, Debug)]
struct Failure {
    kind: Kind,
    code: &'static str,
    message: String,
    /// The position of the request a batch failed on (a batch is checked whole before
    /// anything is decided).
    index: Option<usize>,
}

/// `Result` with a [`JsFailure`].
pub type Res<T> = Result<T, JsFailure>;

impl JsFailure {
    fn new(kind: Kind, code: &'static str, message: String, index: Option<usize>) -> Self {
        JsFailure(Box::new(Failure { kind, code, message, index }))
    }

    #[cold]
    pub fn type_error(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(Kind::Type, code, message.into(), None)
    }

    #[cold]
    pub fn range(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(Kind::Range, code, message.into(), None)
    }

    #[cold]
    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(Kind::Error, code, message.into(), None)
    }

    /// This failure as the failure of request `index` of a batch, worded as
    /// core words [`ratomic::Error::InvalidRequest`].
    pub fn in_batch(self, index: usize) -> Self {
        let f = *self.0;
        let message = format!("request {index} of the batch: {} (nothing in the batch was decided)", f.message);
        Self::new(f.kind, f.code, message, Some(index))
    }

    /// Throws this failure as a pending JavaScript exception.
    ///
    /// # Safety
    /// `env` must be the live environment of the current call.
    pub unsafe fn throw(&self, env: sys::napi_env) {
        let f = &*self.0;
        // SAFETY: env is live (caller's contract).
        if unsafe { self.throw_object(env) }.is_none() {
            // Creating the error object failed: throw the plain kind, without the index.
            let code = CString::new(f.code).unwrap_or_default();
            let message = CString::new(f.message.replace('\0', "\\0")).unwrap_or_default();
            // SAFETY: both strings are NUL-terminated and outlive the call.
            unsafe {
                match f.kind {
                    Kind::Type => sys::napi_throw_type_error(env, code.as_ptr(), message.as_ptr()),
                    Kind::Range => sys::napi_throw_range_error(env, code.as_ptr(), message.as_ptr()),
                    Kind::Error => sys::napi_throw_error(env, code.as_ptr(), message.as_ptr()),
                };
            }
        }
    }

    /// Builds the error object (with `code` and, for a batch, `index`) and throws it.
    unsafe fn throw_object(&self, env: sys::napi_env) -> Option<()> {
        let f = &*self.0;
        let ok = |s: sys::napi_status| (s == sys::Status::napi_ok).then_some(());
        let (mut code, mut message, mut error) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        // SAFETY: env is live; every out-param is a valid local; the strings are
        // passed with their byte lengths.
        unsafe {
            ok(sys::napi_create_string_utf8(env, f.code.as_ptr().cast(), f.code.len() as isize, &mut code))?;
            ok(sys::napi_create_string_utf8(env, f.message.as_ptr().cast(), f.message.len() as isize, &mut message))?;
            ok(match f.kind {
                Kind::Type => sys::napi_create_type_error(env, code, message, &mut error),
                Kind::Range => sys::napi_create_range_error(env, code, message, &mut error),
                Kind::Error => sys::napi_create_error(env, code, message, &mut error),
            })?;
            if let Some(index) = f.index {
                let mut value = ptr::null_mut();
                ok(sys::napi_create_double(env, index as f64, &mut value))?;
                ok(sys::napi_set_named_property(env, error, c"index".as_ptr(), value))?;
            }
            ok(sys::napi_throw(env, error))
        }
    }

    /// Throws this failure and returns the napi-rs error that tells napi-rs
    /// an exception is already pending (so it does not throw a second one).
    pub fn into_napi(self, env: &napi::Env) -> napi::Error {
        // SAFETY: `env` is the environment of the napi-rs call in progress.
        unsafe { self.throw(env.raw()) };
        napi::Error::from_status(napi::Status::PendingException)
    }
}

impl From<ratomic::Error> for JsFailure {
    #[cold]
    fn from(e: ratomic::Error) -> Self {
        let message = match e.cause() {
            // Named as a Node user sets it.
            ratomic::Error::KeyTooLong { .. } => e.to_string().replace("max_key_len", "maxKeyLen"),
            _ => e.to_string(),
        };
        let index = match e {
            ratomic::Error::InvalidRequest { index, .. } => Some(index),
            _ => None,
        };
        // A batch's error is thrown as what is wrong with its request.
        let (kind, code) = match e.cause() {
            ratomic::Error::InvalidRate { .. } => (Kind::Range, "ERR_RATOMIC_INVALID_RATE"),
            ratomic::Error::InvalidArgument { name: "now", .. } => (Kind::Range, "ERR_RATOMIC_INVALID_CLOCK"),
            ratomic::Error::InvalidArgument { .. } => (Kind::Range, "ERR_RATOMIC_INVALID_ARGUMENT"),
            ratomic::Error::CostExceedsLimit { .. } => (Kind::Range, "ERR_RATOMIC_COST_EXCEEDS_LIMIT"),
            ratomic::Error::KeyTooLong { .. } => (Kind::Range, "ERR_RATOMIC_KEY_TOO_LONG"),
            ratomic::Error::SharedFile { .. } => (Kind::Error, "ERR_RATOMIC_SHARED_FILE"),
            // `Error` is non-exhaustive: a kind added to the core later is still an Error with a code.
            _ => (Kind::Error, "ERR_RATOMIC"),
        };
        Self::new(kind, code, message, index)
    }
}

/// The largest whole number JavaScript holds exactly (`Number.MAX_SAFE_INTEGER`).
pub const MAX_SAFE: u64 = 9_007_199_254_740_991;

/// `v` as JavaScript prints it (`String(v)`): the value as the user wrote
/// it, not Rust's spelling (`1e+300`, not three hundred digits).
pub fn js_number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "Infinity" } else { "-Infinity" }.to_owned()
    } else if v == 0.0 {
        "0".to_owned()
    } else if v.abs() >= 1e21 || v.abs() < 1e-6 {
        // JavaScript's exponent form: `1e+21`, `1.5e-7`.
        let s = format!("{v:e}");
        match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        }
    } else {
        format!("{v}")
    }
}

/// A whole number in `[min, Number.MAX_SAFE_INTEGER]`, or a `RangeError`
/// naming `name`, the value and the range.
pub fn whole(name: &str, value: f64, min: u64) -> Res<u64> {
    if value.is_finite() && value.fract() == 0.0 && value >= min as f64 && value <= MAX_SAFE as f64 {
        Ok(value as u64)
    } else {
        Err(not_whole(name, value, min))
    }
}

#[cold]
fn not_whole(name: &str, value: f64, min: u64) -> JsFailure {
    let above = if value > MAX_SAFE as f64 { "above the maximum: " } else { "" };
    JsFailure::range(
        "ERR_RATOMIC_INVALID_ARGUMENT",
        format!(
            "invalid {name}: {} ({above}must be a whole number from {min} to {MAX_SAFE}, Number.MAX_SAFE_INTEGER)",
            js_number(value)
        ),
    )
}

/// A call's cost: a whole number from 0 to the limit (core checks the
/// limit). One above `Number.MAX_SAFE_INTEGER` is above every limit: a
/// `RangeError` coded as a cost above the limit.
pub fn cost(value: f64) -> Res<u64> {
    if value.is_finite() && value.fract() == 0.0 && value >= 0.0 && value <= MAX_SAFE as f64 {
        Ok(value as u64)
    } else {
        Err(bad_cost(value))
    }
}

#[cold]
fn bad_cost(value: f64) -> JsFailure {
    if value > MAX_SAFE as f64 && value.is_finite() {
        JsFailure::range(
            "ERR_RATOMIC_COST_EXCEEDS_LIMIT",
            format!(
                "cost {} exceeds the limit: a cost must be a whole number from 0 to the limit, which is at most {MAX_SAFE}",
                js_number(value)
            ),
        )
    } else {
        JsFailure::range(
            "ERR_RATOMIC_INVALID_ARGUMENT",
            format!("invalid cost: {} (must be a whole number from 0 to the limit)", js_number(value)),
        )
    }
}

/// `Ok` on `napi_ok`, else an `Error` naming the N-API call.
#[inline]
pub fn status(s: sys::napi_status, what: &str) -> Res<()> {
    if s == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi_failed(s, what))
    }
}

#[cold]
fn napi_failed(s: sys::napi_status, what: &str) -> JsFailure {
    JsFailure::error("ERR_RATOMIC_NAPI", format!("N-API call failed: {what} (status {s})"))
}

#[cfg(test)]
mod tests {
    use super::js_number;

    #[test]
    fn numbers_print_as_javascript_prints_them() {
        for (v, js) in [
            (2f64.powi(64), "18446744073709552000"),
            (2f64.powi(60), "1152921504606847000"),
            (1e21, "1e+21"),
            (1e300, "1e+300"),
            (1.5e-7, "1.5e-7"),
            (-1.0, "-1"),
            (1.5, "1.5"),
            (0.1, "0.1"),
            (-0.0, "0"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(js_number(v), js, "{v:?}");
        }
    }
}
