//! The one place where failures become JavaScript exceptions (SPEC §7):
//! bad arguments throw `TypeError`/`RangeError`, everything else an `Error`;
//! every exception carries a `code`.

use std::ffi::CString;

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

/// A failure on its way to JavaScript.
#[derive(Clone, Debug)]
pub struct JsFailure {
    pub kind: Kind,
    pub code: &'static str,
    pub message: String,
}

impl JsFailure {
    pub fn type_error(code: &'static str, message: impl Into<String>) -> Self {
        JsFailure { kind: Kind::Type, code, message: message.into() }
    }

    pub fn range(code: &'static str, message: impl Into<String>) -> Self {
        JsFailure { kind: Kind::Range, code, message: message.into() }
    }

    pub fn error(code: &'static str, message: impl Into<String>) -> Self {
        JsFailure { kind: Kind::Error, code, message: message.into() }
    }

    /// Throws this failure as a pending JavaScript exception.
    ///
    /// # Safety
    /// `env` must be the live environment of the current call.
    pub unsafe fn throw(&self, env: sys::napi_env) {
        let code = CString::new(self.code).unwrap_or_default();
        let message = CString::new(self.message.replace('\0', "\\0")).unwrap_or_default();
        // SAFETY: env is live (caller's contract); both strings are NUL-terminated and outlive the call.
        unsafe {
            match self.kind {
                Kind::Type => sys::napi_throw_type_error(env, code.as_ptr(), message.as_ptr()),
                Kind::Range => sys::napi_throw_range_error(env, code.as_ptr(), message.as_ptr()),
                Kind::Error => sys::napi_throw_error(env, code.as_ptr(), message.as_ptr()),
            };
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
    fn from(e: ratomic::Error) -> Self {
        let message = e.to_string();
        match e {
            ratomic::Error::InvalidRate { .. } => JsFailure::range("ERR_RATOMIC_INVALID_RATE", message),
            ratomic::Error::InvalidArgument { .. } => JsFailure::range("ERR_RATOMIC_INVALID_ARGUMENT", message),
            ratomic::Error::CostExceedsLimit { .. } => JsFailure::range("ERR_RATOMIC_COST_EXCEEDS_LIMIT", message),
            ratomic::Error::KeyTooLong { .. } => JsFailure::range("ERR_RATOMIC_KEY_TOO_LONG", message),
            // `Error` is non-exhaustive: a kind added to the core later is still an Error with a code.
            _ => JsFailure::error("ERR_RATOMIC", message),
        }
    }
}

/// A whole number in `[min, 2^53]`, or a `RangeError` naming `name`.
pub fn whole(name: &str, value: f64, min: u64) -> Result<u64, JsFailure> {
    const MAX_SAFE: f64 = 9_007_199_254_740_991.0;
    if value.is_finite() && value.fract() == 0.0 && value >= min as f64 && value <= MAX_SAFE {
        Ok(value as u64)
    } else {
        Err(JsFailure::range(
            "ERR_RATOMIC_INVALID_ARGUMENT",
            format!("invalid {name}: {value} (must be a whole number >= {min})"),
        ))
    }
}
