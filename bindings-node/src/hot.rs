//! The hot path: per-handle JavaScript functions written against raw N-API.
//!
//! napi-rs class methods unwrap `this` and build the returned object with one
//! `napi_set_named_property` per field; measured, that is most of the cost of
//! a call. Here each limiter handle gets two plain native functions whose
//! callback data points straight at the limiter (no unwrap), keys are read
//! into a stack buffer (no allocation for keys under 250 bytes), and the
//! decision is written into a `Float64Array` owned by JavaScript: the call
//! returns only a boolean, and `ratomic.js` builds the result object in
//! JavaScript, which V8 does quickly.
//!
//! Safety rests on three facts, stated where they are used: the callback data
//! is a `Box<Bound>` freed only by the function's finalizer; the output
//! buffer is kept alive by a strong reference held in that `Bound`; and a
//! handle's functions run only on the JavaScript thread that created them,
//! one at a time, so the output slice is never borrowed twice.

use std::ffi::c_void;
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::Arc;

use napi::sys;

use crate::engine::{Engine, OUT_LEN};
use crate::error::{whole, JsFailure};

/// Operation codes of the `op` function.
pub mod op {
    /// Answer like allow, change nothing; returns `allowed`.
    pub const PEEK: u32 = 1;
    /// Give `cost` tokens back.
    pub const REFUND: u32 = 2;
    /// Forget the key.
    pub const RESET: u32 = 3;
}

/// What a bound function's callback data points at.
struct Bound {
    engine: Arc<Engine>,
    out: *mut f64,
    out_ref: sys::napi_ref,
}

const STACK_KEY: usize = 256;

type Res<T> = Result<T, JsFailure>;

fn ok(status: sys::napi_status, what: &str) -> Res<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(JsFailure::error("ERR_RATOMIC_NAPI", format!("N-API call failed: {what} (status {status})")))
    }
}

/// Creates the handle's hot `allow(key, cost?, nowMs?)` function (`which == 0`)
/// or its `op(code, key, cost, nowMs)` function (`which == 1`).
///
/// # Safety
/// `env` must be the live environment of the current call and `out` a value in it.
pub unsafe fn create(
    env: sys::napi_env,
    engine: Arc<Engine>,
    out: sys::napi_value,
    which: u32,
) -> Res<sys::napi_value> {
    let mut kind = 0;
    let mut length = 0usize;
    let mut data: *mut c_void = ptr::null_mut();
    let mut buffer = ptr::null_mut();
    let mut offset = 0usize;
    let mut is_typed = false;
    // SAFETY: env and out are live (caller's contract); the out-params are valid locals.
    unsafe {
        ok(sys::napi_is_typedarray(env, out, &mut is_typed), "napi_is_typedarray")?;
        if is_typed {
            ok(
                sys::napi_get_typedarray_info(env, out, &mut kind, &mut length, &mut data, &mut buffer, &mut offset),
                "napi_get_typedarray_info",
            )?;
        }
    }
    if !is_typed || kind != sys::TypedarrayType::float64_array || length < OUT_LEN || data.is_null() {
        return Err(JsFailure::type_error(
            "ERR_RATOMIC_INVALID_ARGUMENT",
            format!("the output buffer must be a Float64Array of at least {OUT_LEN} numbers"),
        ));
    }
    let mut out_ref = ptr::null_mut();
    // SAFETY: a strong reference keeps the array, hence its backing store, alive
    // until the finalizer below deletes it.
    unsafe { ok(sys::napi_create_reference(env, out, 1, &mut out_ref), "napi_create_reference")? };
    let bound = Box::into_raw(Box::new(Bound { engine, out: data.cast(), out_ref }));
    let (name, cb): (&[u8], unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value) =
        if which == 0 { (b"allow", allow_cb) } else { (b"op", op_cb) };
    let mut func = ptr::null_mut();
    // SAFETY: `bound` stays valid until `finalize` runs, which N-API calls once,
    // after the function is collected (or at environment teardown).
    unsafe {
        let made = ok(
            sys::napi_create_function(
                env,
                name.as_ptr().cast::<c_char>(),
                name.len() as isize,
                Some(cb),
                bound.cast(),
                &mut func,
            ),
            "napi_create_function",
        )
        .and_then(|()| {
            ok(
                sys::napi_add_finalizer(env, func, bound.cast(), Some(finalize), ptr::null_mut(), ptr::null_mut()),
                "napi_add_finalizer",
            )
        });
        if let Err(e) = made {
            sys::napi_delete_reference(env, out_ref);
            drop(Box::from_raw(bound));
            return Err(e);
        }
    }
    Ok(func)
}

unsafe extern "C" fn finalize(env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Box<Bound>` leaked in `create`; N-API calls this once.
    let bound = unsafe { Box::from_raw(data.cast::<Bound>()) };
    // SAFETY: the reference was created in this env and is deleted exactly once.
    unsafe { sys::napi_delete_reference(env, bound.out_ref) };
}

/// Runs `body`, turning a failure or a panic into a pending exception.
unsafe fn guard(env: sys::napi_env, body: impl FnOnce() -> Res<sys::napi_value>) -> sys::napi_value {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => return v,
        Ok(Err(e)) => e,
        Err(_) => {
            JsFailure::error("ERR_RATOMIC_PANIC", "internal error in ratomic (a Rust panic); no state was changed")
        }
    };
    // SAFETY: env is the live environment of this callback.
    unsafe { failure.throw(env) };
    ptr::null_mut()
}

/// Reads up to `N` arguments, how many were passed, and the callback data.
unsafe fn args<const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Res<([sys::napi_value; N], usize, &'static Bound)> {
    let mut argc = N;
    let mut argv = [ptr::null_mut(); N];
    let mut data = ptr::null_mut();
    // SAFETY: argv has room for argc values; N-API fills missing ones with undefined.
    unsafe {
        ok(
            sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), &mut data),
            "napi_get_cb_info",
        )?;
    }
    // SAFETY: data is the live `Bound` of this function (see `create`/`finalize`):
    // the function object is alive while it is being called.
    Ok((argv, argc, unsafe { &*data.cast::<Bound>() }))
}

unsafe fn number(env: sys::napi_env, v: sys::napi_value, name: &str) -> Res<f64> {
    let mut x = 0.0;
    // SAFETY: v is a live argument of the current call.
    if unsafe { sys::napi_get_value_double(env, v, &mut x) } != sys::Status::napi_ok {
        return Err(JsFailure::type_error("ERR_RATOMIC_INVALID_ARGUMENT", format!("{name} must be a number")));
    }
    Ok(x)
}

/// `nowMs < 0` means the limiter's own monotonic clock.
#[inline]
unsafe fn now_ns(env: sys::napi_env, v: sys::napi_value, engine: &Engine) -> Res<u64> {
    // SAFETY: forwarded from the caller.
    let ms = unsafe { number(env, v, "the clock reading")? };
    if ms < 0.0 {
        return Ok(engine.now());
    }
    ms_to_ns(ms)
}

/// A clock reading in milliseconds (>= 0) as nanoseconds.
pub fn ms_to_ns(ms: f64) -> Res<u64> {
    let ns = (ms * 1e6).round();
    if !(ns.is_finite() && ns <= (1u64 << 62) as f64) {
        return Err(JsFailure::range(
            "ERR_RATOMIC_INVALID_CLOCK",
            format!("the clock returned {ms}: it must return a finite number of milliseconds >= 0 (below 2^62 ns)"),
        ));
    }
    Ok(ns as u64)
}

/// Calls `f` with the key's bytes: a string (as UTF-8) or a Buffer/Uint8Array.
#[inline]
unsafe fn with_key<R>(env: sys::napi_env, v: sys::napi_value, max_len: usize, f: impl FnOnce(&[u8]) -> R) -> Res<R> {
    // Left uninitialised: zeroing it would cost more than the copy of a short key.
    let mut stack = std::mem::MaybeUninit::<[u8; STACK_KEY]>::uninit();
    let mut len = 0usize;
    // SAFETY: the buffer has STACK_KEY bytes; N-API writes at most STACK_KEY - 1 plus a NUL.
    let status = unsafe { sys::napi_get_value_string_utf8(env, v, stack.as_mut_ptr().cast(), STACK_KEY, &mut len) };
    if status == sys::Status::napi_ok {
        // V8 never splits a character, so a truncated copy is at most 3 bytes short of full.
        if len + 4 < STACK_KEY - 1 {
            // SAFETY: N-API initialised the first `len` bytes (len < STACK_KEY).
            return Ok(f(unsafe { std::slice::from_raw_parts(stack.as_ptr().cast::<u8>(), len) }));
        }
        let mut full = 0usize;
        // SAFETY: a null buffer asks only for the length.
        unsafe { ok(sys::napi_get_value_string_utf8(env, v, ptr::null_mut(), 0, &mut full), "string length")? };
        if full > max_len {
            return Err(ratomic::Error::KeyTooLong { len: full, max: max_len }.into());
        }
        let mut heap = vec![0u8; full + 1];
        // SAFETY: heap has full + 1 bytes.
        unsafe {
            ok(sys::napi_get_value_string_utf8(env, v, heap.as_mut_ptr().cast(), full + 1, &mut len), "string copy")?;
        }
        return Ok(f(&heap[..len]));
    }
    let mut is_buffer = false;
    // SAFETY: v is a live argument.
    unsafe { ok(sys::napi_is_buffer(env, v, &mut is_buffer), "napi_is_buffer")? };
    if !is_buffer {
        let mut t = 0;
        // SAFETY: v is a live argument.
        unsafe { sys::napi_typeof(env, v, &mut t) };
        let got = match t {
            sys::ValueType::napi_undefined => "undefined",
            sys::ValueType::napi_null => "null",
            sys::ValueType::napi_boolean => "a boolean",
            sys::ValueType::napi_number => "a number",
            sys::ValueType::napi_symbol => "a symbol",
            sys::ValueType::napi_function => "a function",
            sys::ValueType::napi_bigint => "a bigint",
            _ => "an object",
        };
        return Err(JsFailure::type_error(
            "ERR_RATOMIC_INVALID_KEY",
            format!("key must be a string or a Buffer, got {got}"),
        ));
    }
    let mut data: *mut c_void = ptr::null_mut();
    let mut blen = 0usize;
    // SAFETY: v is a Buffer (checked above).
    unsafe { ok(sys::napi_get_buffer_info(env, v, &mut data, &mut blen), "napi_get_buffer_info")? };
    if data.is_null() || blen == 0 {
        return Ok(f(&[]));
    }
    // SAFETY: N-API gives the Buffer's live bytes; no JavaScript runs while we borrow them.
    Ok(f(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), blen) }))
}

#[inline]
unsafe fn cost(env: sys::napi_env, v: sys::napi_value) -> Res<u64> {
    // SAFETY: forwarded from the caller.
    whole("cost", unsafe { number(env, v, "cost")? }, 0)
}

unsafe fn boolean(env: sys::napi_env, b: bool) -> Res<sys::napi_value> {
    let mut v = ptr::null_mut();
    // SAFETY: env is live.
    unsafe { ok(sys::napi_get_boolean(env, b, &mut v), "napi_get_boolean")? };
    Ok(v)
}

/// The output buffer of a bound function.
///
/// # Safety
/// `out` must be a `Bound`'s buffer (OUT_LEN or more f64s kept alive by its
/// `out_ref`), and the slice must not outlive the current call: calls run one
/// at a time on the JavaScript thread, so no other borrow of it exists.
unsafe fn out_slice<'a>(out: *mut f64) -> &'a mut [f64] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(out, OUT_LEN) }
}

unsafe extern "C" fn allow_cb(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: env and info are the live arguments of this callback.
    unsafe {
        guard(env, || {
            // Omitted arguments (the common case) cost no conversion: cost 1, the monotonic clock.
            let ([key, c, now], argc, bound) = args::<3>(env, info)?;
            let cost = if argc < 2 { 1 } else { cost(env, c)? };
            let engine = &*bound.engine;
            let now = if argc < 3 { engine.now() } else { now_ns(env, now, engine)? };
            let allowed =
                with_key(env, key, engine.max_key_len(), |k| engine.allow_at(k, cost, now, out_slice(bound.out)))??;
            boolean(env, allowed)
        })
    }
}

unsafe extern "C" fn op_cb(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: env and info are the live arguments of this callback.
    unsafe {
        guard(env, || {
            let ([code, key, c, now], _, bound) = args::<4>(env, info)?;
            let code = number(env, code, "op")? as u32;
            let n = cost(env, c)?;
            let engine = &*bound.engine;
            let now = now_ns(env, now, engine)?;
            let max = engine.max_key_len();
            match code {
                op::PEEK => {
                    let allowed = with_key(env, key, max, |k| engine.peek_at(k, n, now, out_slice(bound.out)))??;
                    boolean(env, allowed)
                }
                op::REFUND => {
                    with_key(env, key, max, |k| engine.refund_at(k, n, now))??;
                    boolean(env, true)
                }
                op::RESET => {
                    with_key(env, key, max, |k| engine.reset_at(k, now))??;
                    boolean(env, true)
                }
                _ => Err(JsFailure::error("ERR_RATOMIC", format!("unknown op {code}"))),
            }
        })
    }
}
