//! Batches (`allowMany`): requests read from a JavaScript array and decided
//! by core's whole-batch `allow_many_at`: every request is
//! checked before any is decided, and the first invalid one fails the whole
//! call with an error naming its index.

use std::ptr;

use napi::sys;

use crate::error::status;
use crate::error::{JsFailure, Res};
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

/// A batch with a request the face could not even read (not a key, a cost
/// that is not a whole number): its index, what is wrong, and the requests
/// before it, which core must check first, since the error must name the
/// first invalid request.
#[derive(Debug)]
pub struct Unread {
    index: usize,
    failure: JsFailure,
    before: Requests,
}

impl Unread {
    /// The failure of the batch: the first request before the unreadable one
    /// that core finds invalid (`check`), or the unreadable one.
    pub fn first_invalid(self, check: impl Fn(&[u8], u64) -> ratomic::Result<()>) -> JsFailure {
        for (i, (key, cost)) in self.before.pairs().enumerate() {
            if let Err(e) = check(key, cost) {
                return JsFailure::from(ratomic::Error::InvalidRequest { index: i, error: Box::new(e) });
            }
        }
        self.failure.in_batch(self.index)
    }
}

/// Reads `requests`, an array of keys or `[key, cost?]` pairs (see [`Unread`]).
///
/// # Safety
/// `env` must be live and `requests` a value of the current call.
pub unsafe fn read(env: sys::napi_env, requests: sys::napi_value, max_len: usize) -> Res<Result<Requests, Unread>> {
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
            if let Err(failure) = request(env, item, max_len, &mut out) {
                return Ok(Err(Unread { index: i as usize, failure, before: out }));
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
                    crate::error::cost(c)?
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

/// A batch's decisions as a `Float64Array` over a V8-owned `ArrayBuffer`
/// they are copied into: napi-rs's `Float64Array` from a `Vec` hands V8
/// external memory with a finalizer, which measured twice the cost of a
/// four-request batch.
///
/// # Safety
/// `env` must be the live environment of the current call.
pub unsafe fn float64_array(env: sys::napi_env, numbers: &[f64]) -> Res<sys::napi_value> {
    let (mut data, mut buffer, mut array) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    let bytes = std::mem::size_of_val(numbers);
    // SAFETY: env is live (the caller's contract); V8 gives `bytes` writable
    // bytes at `data`, which `numbers` fills exactly.
    unsafe {
        status(sys::napi_create_arraybuffer(env, bytes, &mut data, &mut buffer), "napi_create_arraybuffer")?;
        if bytes > 0 {
            ptr::copy_nonoverlapping(numbers.as_ptr().cast::<u8>(), data.cast::<u8>(), bytes);
        }
        let made =
            sys::napi_create_typedarray(env, sys::TypedarrayType::float64_array, numbers.len(), buffer, 0, &mut array);
        status(made, "napi_create_typedarray")?;
        Ok(array)
    }
}
