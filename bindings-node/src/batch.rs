//! Batches (`allowMany`): requests read from a JavaScript array and decided
//! by core's whole-batch `allow_many_at` (SPEC §4.6): every request is
//! checked before any is decided, and the first invalid one fails the whole
//! call with an error naming its index.

use std::ptr;

use napi::sys;

use crate::error::{whole, JsFailure, Res};
use crate::hot::status;
use crate::key::with_key;

/// A batch's requests: every key's bytes in one buffer, and each request's
/// span of it and cost.
#[derive(Debug, Default)]
pub struct Requests {
    bytes: Vec<u8>,
    spans: Vec<(usize, usize, u64)>,
}

impl Requests {
    /// The requests as `(key, cost)` pairs, in order.
    pub fn pairs(&self) -> impl Iterator<Item = (&[u8], u64)> + '_ {
        self.spans.iter().map(|&(start, end, cost)| (&self.bytes[start..end], cost))
    }
}

/// Reads `requests`, an array of keys or `[key, cost?]` pairs. A request
/// the face cannot even read (not a key, a cost that is not a whole number)
/// is returned as `Err((index, failure, requests before it))`, so the caller
/// can let core check the earlier ones first: the error must name the
/// first invalid request.
///
/// # Safety
/// `env` must be live and `requests` a value of the current call.
pub unsafe fn read(
    env: sys::napi_env,
    requests: sys::napi_value,
    max_len: usize,
) -> Res<Result<Requests, (usize, JsFailure, Requests)>> {
    let mut is_array = false;
    // SAFETY: env and requests are live (caller's contract) throughout.
    unsafe {
        status(sys::napi_is_array(env, requests, &mut is_array), "napi_is_array")?;
        if !is_array {
            return Err(JsFailure::type_error(
                "ERR_RATOMIC_INVALID_ARGUMENT",
                "allowMany takes an array of keys or [key, cost] pairs",
            ));
        }
        let mut len = 0u32;
        status(sys::napi_get_array_length(env, requests, &mut len), "napi_get_array_length")?;
        let mut out = Requests::default();
        for i in 0..len {
            let mut item = ptr::null_mut();
            status(sys::napi_get_element(env, requests, i, &mut item), "napi_get_element")?;
            match request(env, item, max_len, &mut out) {
                Ok(()) => {}
                Err(e) => return Ok(Err((i as usize, e, out))),
            }
        }
        Ok(Ok(out))
    }
}

/// Appends one request: a key, or a `[key, cost?]` pair.
unsafe fn request(env: sys::napi_env, item: sys::napi_value, max_len: usize, out: &mut Requests) -> Res<()> {
    let mut pair = false;
    // SAFETY: env and item are live (caller's contract) throughout.
    unsafe {
        status(sys::napi_is_array(env, item, &mut pair), "napi_is_array")?;
        let (key, cost) = if pair {
            let (mut key, mut cost, mut t) = (ptr::null_mut(), ptr::null_mut(), 0);
            status(sys::napi_get_element(env, item, 0, &mut key), "napi_get_element")?;
            status(sys::napi_get_element(env, item, 1, &mut cost), "napi_get_element")?;
            status(sys::napi_typeof(env, cost, &mut t), "napi_typeof")?;
            let cost = match t {
                sys::ValueType::napi_undefined => 1,
                sys::ValueType::napi_number => {
                    let mut c = 0.0;
                    status(sys::napi_get_value_double(env, cost, &mut c), "napi_get_value_double")?;
                    whole("cost", c, 0)?
                }
                _ => return Err(JsFailure::type_error("ERR_RATOMIC_INVALID_ARGUMENT", "cost must be a number")),
            };
            (key, cost)
        } else {
            (item, 1)
        };
        let start = out.bytes.len();
        with_key(env, key, || max_len, |k| out.bytes.extend_from_slice(k))?;
        out.spans.push((start, out.bytes.len(), cost));
        Ok(())
    }
}

/// The failure of a batch whose request `index` the face could not read:
/// the first request before it that core finds invalid (`check`), or it.
pub fn first_invalid(
    index: usize,
    failure: JsFailure,
    before: &Requests,
    check: impl Fn(&[u8], u64) -> ratomic::Result<()>,
) -> JsFailure {
    for (i, (key, cost)) in before.pairs().enumerate() {
        if let Err(e) = check(key, cost) {
            return JsFailure::from(ratomic::Error::InvalidRequest { index: i, error: Box::new(e) });
        }
    }
    failure.in_batch(index)
}
