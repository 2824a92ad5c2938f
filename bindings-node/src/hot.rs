//! The hot path: plain native functions per JavaScript environment,
//! written against raw N-API, that write decisions into the environment's
//! buffer (the tables and the buffer are [`env`](crate::env)'s).
//!
//! napi-rs class methods unwrap `this` and build the returned object with one
//! `napi_set_named_property` per field; measured, that is most of the cost of
//! a call. So each environment (the main thread, each worker) gets functions
//! — `allow` and `op` (peek, refund, reset) for single-rule limiters, for
//! `Limiter` views and, without a key, for direct buckets — that take the
//! limiter as a small integer id, an index into this environment's table of
//! limiters of that kind, and write the decision into one output buffer;
//! `ratomic.js` builds the Decision object from it in JavaScript. The same
//! for a Redis-backed limiter's allow at the server's time (`redisAllow`,
//! for `redis.js`): a call answered from a lease cost about 1 µs more
//! through the napi-rs class method `NativeRedis.begin`.
//!
//! One function for every limiter, not one per limiter, keeps each call site
//! in `ratomic.js` monomorphic: V8 then calls the native function directly.
//! With a function per limiter, a program with three limiters made the call
//! megamorphic, measured at about 17 ns more per call.
//!
//! Safety rests on these facts, stated where they are used:
//! - the functions, the limiter handles and the instance data each hold an
//!   `Rc` of the [`EnvState`], so it lives as long as any of them;
//! - a limiter id is checked against the table on every call: a stale or
//!   forged id is an error, never a dangling pointer;
//! - the output buffer is native memory that is never freed (environments
//!   reuse it through a pool), so the `ArrayBuffer` JavaScript sees cannot
//!   dangle even if it is detached or transferred; where V8 refuses external
//!   buffers, the buffer is V8's and every call looks it up and checks it;
//! - everything here runs on the environment's JavaScript thread, one call
//!   at a time, so the output slice is never borrowed twice, and no table
//!   borrow is held across anything that can run JavaScript or the GC.

use std::ffi::c_void;
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::rc::Rc;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;

use crate::batch;
use crate::clock::ms_to_ns;
use crate::decision::{self, slot};
use crate::env::{stale, DirectHandle, EnvState, KeyedHandle, Target, View};
use crate::error::{status, whole, JsFailure, Res};
use crate::key::with_key;

/// Operation codes of the `op` functions.
pub mod op {
    /// Answer like allow, change nothing; returns `allowed`.
    pub const PEEK: u32 = 1;
    /// Give `cost` tokens back.
    pub const REFUND: u32 = 2;
    /// Forget the key.
    pub const RESET: u32 = 3;
}

unsafe extern "C" fn drop_function_data(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Box<Rc<EnvState>>` made in `function`; N-API calls this once.
    drop(unsafe { Box::from_raw(data.cast::<Rc<EnvState>>()) });
}

type Callback = unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// A native function whose callback data is an `Rc` of `state`.
///
/// # Safety
/// `env` must be live.
unsafe fn function(env: sys::napi_env, state: &Rc<EnvState>, name: &str, cb: Callback) -> Res<sys::napi_value> {
    let data = Box::into_raw(Box::new(state.clone()));
    let mut f = ptr::null_mut();
    // SAFETY: `data` stays valid until `drop_function_data`, which N-API calls
    // once, after the function is collected (or at the environment's end).
    unsafe {
        let made = status(
            sys::napi_create_function(
                env,
                name.as_ptr().cast::<c_char>(),
                name.len() as isize,
                Some(cb),
                data.cast(),
                &mut f,
            ),
            "napi_create_function",
        )
        .and_then(|()| {
            status(
                sys::napi_add_finalizer(
                    env,
                    f,
                    data.cast(),
                    Some(drop_function_data),
                    ptr::null_mut(),
                    ptr::null_mut(),
                ),
                "napi_add_finalizer",
            )
        });
        if let Err(e) = made {
            drop(Box::from_raw(data));
            return Err(e);
        }
    }
    Ok(f)
}

/// The hot-path functions of this environment, for `ratomic.js` only:
/// `{ allowKeyed, opKeyed, allowLimiter, opLimiter, manyKeyed, manyLimiter,
/// allowDirect, opDirect, out, entryCount, firstEntry, entryLen }`.
///
/// `allow*(id, key, cost?, nowMs?) => boolean` charges `cost` (default 1) to
/// `key` on limiter `id`, at `nowMs` (default: the limiter's monotonic
/// clock), and writes the decision into `out` (a `Float64Array`):
/// `[remaining, limit, retryAfterMs, resetAfterMs, entryCount, ...entries]`,
/// each entry `[index, allowed, remaining, limit, retryAfterMs,
/// resetAfterMs]`, their number at `entryCount`, the first at `firstEntry`,
/// `entryLen` numbers each.
/// `op*(code, id, key, cost, nowMs?)` peeks (1, returns `allowed`, writes
/// `out`), refunds `cost` (2) or resets the key (3). `many*(id, requests,
/// nowMs?)` decides a batch (keys or `[key, cost?]` pairs) at one reading,
/// each decision led by `allowed`, one after another: into `out`, returning
/// how many numbers it wrote, when they fit, else into a new `Float64Array`
/// it returns. A bad request fails the whole batch, naming its index.
/// `allowDirect(id, cost?, nowMs?)` and `opDirect(code, id, cost, nowMs?)`
/// are `allow*` and `op*` for a direct bucket: no key (its reset reads no
/// clock).
/// `redisAllow(id, key, cost?, demand?)` begins a Redis-backed limiter's
/// allow at the server's time (`NativeRedis.begin`'s work, for
/// `ratomic/redis` only, `id` its `hotId`): answered here (a lease, a cached
/// denial, the policy), it writes the decision into `out` and returns
/// `source × 2 + allowed` (a number); for a call to send, it writes the
/// lease it asks for and its stamp into `out[0]` and `out[1]` and returns
/// the Redis key (a string, or a `Buffer` if it is not UTF-8). `demand` -1:
/// `NativeRedis.beginLocal`'s work (answered, or the Redis key and nothing
/// asked for).
#[napi(
    ts_return_type = "{\n  allowKeyed: (id: number, key: string | Uint8Array, cost?: number, nowMs?: number) => boolean\n  opKeyed: (code: number, id: number, key: string | Uint8Array, cost: number, nowMs?: number) => boolean | undefined\n  allowLimiter: (id: number, key: string | Uint8Array, cost?: number, nowMs?: number) => boolean\n  opLimiter: (code: number, id: number, key: string | Uint8Array, cost: number, nowMs?: number) => boolean | undefined\n  manyKeyed: (id: number, requests: Array<string | Uint8Array | [string | Uint8Array, number?]>, nowMs?: number) => number | Float64Array\n  manyLimiter: (id: number, requests: Array<string | Uint8Array | [string | Uint8Array, number?]>, nowMs?: number) => number | Float64Array\n  allowDirect: (id: number, cost?: number, nowMs?: number) => boolean\n  opDirect: (code: number, id: number, cost: number, nowMs?: number) => boolean | undefined\n  redisAllow: (id: number, key: string | Uint8Array, cost?: number, demand?: number) => number | string | Buffer\n  out: Float64Array\n  entryCount: number\n  firstEntry: number\n  entryLen: number\n}"
)]
pub fn hot_path(env: &Env) -> Result<Unknown<'_>> {
    // SAFETY: env is the live environment of this call.
    unsafe { make_hot_path(env.raw()) }.map_err(|e| e.into_napi(env))
}

unsafe fn make_hot_path<'env>(env: sys::napi_env) -> Res<Unknown<'env>> {
    // SAFETY: env is live (caller's contract) throughout.
    unsafe {
        let state = EnvState::of(env)?;
        let mut obj = ptr::null_mut();
        status(sys::napi_create_object(env, &mut obj), "napi_create_object")?;
        let set = |name: &std::ffi::CStr, v: sys::napi_value| {
            status(sys::napi_set_named_property(env, obj, name.as_ptr(), v), "napi_set_named_property")
        };
        set(c"allowKeyed", function(env, &state, "allow", allow_cb::<KeyedHandle>)?)?;
        set(c"opKeyed", function(env, &state, "op", op_cb::<KeyedHandle>)?)?;
        set(c"allowLimiter", function(env, &state, "allow", allow_cb::<View>)?)?;
        set(c"opLimiter", function(env, &state, "op", op_cb::<View>)?)?;
        set(c"manyKeyed", function(env, &state, "many", many_cb::<KeyedHandle>)?)?;
        set(c"manyLimiter", function(env, &state, "many", many_cb::<View>)?)?;
        set(c"allowDirect", function(env, &state, "allow", allow_direct_cb)?)?;
        set(c"opDirect", function(env, &state, "op", op_direct_cb)?)?;
        set(c"redisAllow", function(env, &state, "allow", redis_allow_cb)?)?;
        set(c"out", state.view(env)?)?;
        for (name, n) in
            [(c"entryCount", slot::ENTRIES), (c"firstEntry", slot::FIRST_ENTRY), (c"entryLen", slot::ENTRY_LEN)]
        {
            let mut v = ptr::null_mut();
            status(sys::napi_create_uint32(env, n as u32, &mut v), "napi_create_uint32")?;
            set(name, v)?;
        }
        Ok(Unknown::from_raw_unchecked(env, obj))
    }
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
#[inline(always)]
unsafe fn args<'a, const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
) -> Res<([sys::napi_value; N], usize, &'a EnvState)> {
    let mut argc = N;
    let mut argv = [ptr::null_mut(); N];
    let mut data = ptr::null_mut();
    status(
        // SAFETY: argv has room for argc values; N-API fills missing ones with undefined.
        unsafe { sys::napi_get_cb_info(env, info, &mut argc, argv.as_mut_ptr(), ptr::null_mut(), &mut data) },
        "napi_get_cb_info",
    )?;
    // SAFETY: data is the live `Box<Rc<EnvState>>` of this function (see
    // `function`): the function object is alive while it is being called.
    Ok((argv, argc, unsafe { &**data.cast::<Rc<EnvState>>() }))
}

#[inline(always)]
unsafe fn number(env: sys::napi_env, v: sys::napi_value, name: &str) -> Res<f64> {
    let mut x = 0.0;
    // SAFETY: v is a live argument of the current call.
    if unsafe { sys::napi_get_value_double(env, v, &mut x) } != sys::Status::napi_ok {
        // SAFETY: as above.
        return Err(unsafe { not_a_number(env, v, name) });
    }
    Ok(x)
}

/// A `TypeError` naming `name` and what it was given instead (`a string`).
///
/// # Safety
/// `v` must be a live value of the current call.
#[cold]
unsafe fn not_a_number(env: sys::napi_env, v: sys::napi_value, name: &str) -> JsFailure {
    let mut t = 0;
    // SAFETY: v is a live value (caller's contract).
    let got = if unsafe { sys::napi_typeof(env, v, &mut t) } != sys::Status::napi_ok {
        "something else"
    } else {
        match t {
            sys::ValueType::napi_undefined => "undefined",
            sys::ValueType::napi_null => "null",
            sys::ValueType::napi_boolean => "a boolean",
            sys::ValueType::napi_string => "a string",
            sys::ValueType::napi_symbol => "a symbol",
            sys::ValueType::napi_function => "a function",
            sys::ValueType::napi_bigint => "a bigint",
            _ => "an object",
        }
    };
    JsFailure::type_error("ERR_RATOMIC_INVALID_ARGUMENT", format!("{name} must be a number, got {got}"))
}

#[inline(always)]
unsafe fn id(env: sys::napi_env, v: sys::napi_value) -> Res<u32> {
    let mut x = 0.0;
    // SAFETY: v is a live argument of the current call.
    status(unsafe { sys::napi_get_value_double(env, v, &mut x) }, "limiter id")?;
    // Exactly a table index: no truncation may turn a forged id into another limiter's.
    match x as u32 {
        id if f64::from(id) == x => Ok(id),
        _ => Err(stale(u32::MAX)),
    }
}

/// A call's time: `nowMs` if passed, else (`None`) the limiter's own clock.
#[inline(always)]
unsafe fn time(env: sys::napi_env, v: Option<sys::napi_value>) -> Res<Option<u64>> {
    match v {
        None => Ok(None),
        // SAFETY: forwarded from the caller.
        Some(v) => Ok(Some(ms_to_ns(unsafe { number(env, v, "the clock reading")? })?)),
    }
}

unsafe fn boolean(env: sys::napi_env, b: bool) -> Res<sys::napi_value> {
    let mut v = ptr::null_mut();
    // SAFETY: env is live.
    status(unsafe { sys::napi_get_boolean(env, b, &mut v) }, "napi_get_boolean")?;
    Ok(v)
}

/// Runs `f` on limiter `id` with `key`'s bytes. The key is read first (that
/// may allocate, and so run the GC), the table borrowed only for `f`.
#[inline(always)]
unsafe fn on_key<T: Target, R>(
    env: sys::napi_env,
    state: &EnvState,
    id: u32,
    key: sys::napi_value,
    f: impl FnOnce(&T, &[u8]) -> Res<R>,
) -> Res<R> {
    let max_len = || T::table(state).borrow().get(id).map_or(usize::MAX, T::max_key_len);
    // SAFETY: forwarded from the caller.
    unsafe { with_key(env, key, max_len, |k| f(T::table(state).borrow().get(id)?, k)) }?
}

unsafe extern "C" fn allow_cb<T: Target>(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: env and info are the live arguments of this callback.
    unsafe {
        guard(env, || {
            // Omitted arguments (the common case) cost no conversion: cost 1, the limiter's clock.
            let ([i, key, c, now], argc, state) = args::<4>(env, info)?;
            let id = id(env, i)?;
            let cost = if argc < 3 { 1 } else { crate::error::cost(number(env, c, "cost")?)? };
            let now = time(env, (argc >= 4).then_some(now))?;
            let allowed = on_key(env, state, id, key, |t: &T, k| {
                let out = state.out(env)?;
                Ok(t.allow(k, cost, now.unwrap_or_else(|| t.now()), out)?)
            })?;
            boolean(env, allowed)
        })
    }
}

unsafe extern "C" fn redis_allow_cb(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    use crate::env::Hot;
    use crate::redis::HotStep;
    // SAFETY: env and info are the live arguments of this callback.
    unsafe {
        guard(env, || {
            let ([i, key, c, dem], argc, state) = args::<4>(env, info)?;
            let id = id(env, i)?;
            let cost = if argc < 3 { 1 } else { crate::error::cost(number(env, c, "cost")?)? };
            // A count JavaScript made (anything but a whole number >= 0 is
            // none); -1: begin nothing, ask for nothing (`beginLocal`).
            let demand = if argc < 4 {
                Some(0)
            } else {
                match number(env, dem, "demand")? {
                    d if d < 0.0 => None,
                    d if d.is_finite() => Some(d as u64),
                    _ => Some(0),
                }
            };
            let max_len = || state.redis.borrow().get(id).map_or(usize::MAX, Hot::max_key_len);
            // The key is read first (that may run the GC); the table is
            // borrowed only for the driver's work, which runs no JavaScript.
            let step = with_key(env, key, max_len, |k| {
                let out = state.out(env)?;
                state.redis.borrow().get(id)?.allow(k, cost, demand, out)
            })??;
            let mut v = ptr::null_mut();
            match step {
                HotStep::Answer(code) => status(sys::napi_create_uint32(env, code, &mut v), "napi_create_uint32")?,
                HotStep::Send(rkey) => match std::str::from_utf8(&rkey) {
                    Ok(s) => status(
                        sys::napi_create_string_utf8(env, s.as_ptr().cast::<c_char>(), s.len() as isize, &mut v),
                        "napi_create_string_utf8",
                    )?,
                    Err(_) => status(
                        sys::napi_create_buffer_copy(env, rkey.len(), rkey.as_ptr().cast(), ptr::null_mut(), &mut v),
                        "napi_create_buffer_copy",
                    )?,
                },
            }
            Ok(v)
        })
    }
}

unsafe extern "C" fn op_cb<T: Target>(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: env and info are the live arguments of this callback.
    unsafe {
        guard(env, || {
            let ([code, i, key, c, now], argc, state) = args::<5>(env, info)?;
            let code = number(env, code, "op")? as u32;
            let id = id(env, i)?;
            let n = if code == op::REFUND {
                whole("tokens", number(env, c, "tokens")?, 0)?
            } else {
                crate::error::cost(number(env, c, "cost")?)?
            };
            let now = time(env, (argc >= 5).then_some(now))?;
            match code {
                op::PEEK => {
                    let allowed = on_key(env, state, id, key, |t: &T, k| {
                        let out = state.out(env)?;
                        Ok(t.peek(k, n, now.unwrap_or_else(|| t.now()), out)?)
                    })?;
                    boolean(env, allowed)
                }
                op::REFUND => {
                    on_key(env, state, id, key, |t: &T, k| Ok(t.refund(k, n, now.unwrap_or_else(|| t.now()))?))?;
                    Ok(ptr::null_mut())
                }
                op::RESET => {
                    on_key(env, state, id, key, |t: &T, k| Ok(t.reset(k, now.unwrap_or_else(|| t.now()))?))?;
                    Ok(ptr::null_mut())
                }
                _ => Err(JsFailure::error("ERR_RATOMIC", format!("unknown op {code}"))),
            }
        })
    }
}

unsafe extern "C" fn many_cb<T: Target>(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: env and info are the live arguments of this callback.
    unsafe {
        guard(env, || {
            let ([i, requests, now], argc, state) = args::<3>(env, info)?;
            let id = id(env, i)?;
            let now = time(env, (argc >= 3).then_some(now))?;
            let max_len = T::table(state).borrow().get(id).map(T::max_key_len)?;
            // Reading the requests may run the GC: the table is not borrowed meanwhile.
            let requests = batch::read(env, requests, max_len)?;
            let mut all = Vec::new();
            {
                let table = T::table(state).borrow();
                let t = table.get(id)?;
                t.allow_many(requests, now.unwrap_or_else(|| t.now()), &mut all)?;
            }
            let out = state.out(env)?;
            match out.get_mut(..all.len()) {
                Some(fits) => {
                    fits.copy_from_slice(&all);
                    let mut n = ptr::null_mut();
                    status(sys::napi_create_uint32(env, all.len() as u32, &mut n), "napi_create_uint32")?;
                    Ok(n)
                }
                None => batch::float64_array(env, &all),
            }
        })
    }
}

/// Runs `f` on direct bucket `id`, the table borrowed only for `f` (which
/// runs no JavaScript: there is no key to read).
#[inline(always)]
fn on_direct<R>(state: &EnvState, id: u32, f: impl FnOnce(&DirectHandle) -> Res<R>) -> Res<R> {
    f(state.direct.borrow().get(id)?)
}

/// `allowDirect(id, cost?, nowMs?)`: `allow_cb` without a key.
unsafe extern "C" fn allow_direct_cb(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: env and info are the live arguments of this callback.
    unsafe {
        guard(env, || {
            let ([i, c, now], argc, state) = args::<3>(env, info)?;
            let id = id(env, i)?;
            let cost = if argc < 2 { 1 } else { crate::error::cost(number(env, c, "cost")?)? };
            let now = time(env, (argc >= 3).then_some(now))?;
            let allowed = on_direct(state, id, |b| {
                let out = state.out(env)?;
                Ok(decision::write(out, &b.allow_at(cost, now.unwrap_or_else(|| b.now()))?))
            })?;
            boolean(env, allowed)
        })
    }
}

/// `opDirect(code, id, cost, nowMs?)`: `op_cb` without a key.
unsafe extern "C" fn op_direct_cb(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: env and info are the live arguments of this callback.
    unsafe {
        guard(env, || {
            let ([code, i, c, now], argc, state) = args::<4>(env, info)?;
            let code = number(env, code, "op")? as u32;
            let id = id(env, i)?;
            let n = if code == op::REFUND {
                whole("tokens", number(env, c, "tokens")?, 0)?
            } else {
                crate::error::cost(number(env, c, "cost")?)?
            };
            let now = time(env, (argc >= 4).then_some(now))?;
            match code {
                op::PEEK => {
                    let allowed = on_direct(state, id, |b| {
                        let out = state.out(env)?;
                        Ok(decision::write(out, &b.peek_at(n, now.unwrap_or_else(|| b.now()))?))
                    })?;
                    boolean(env, allowed)
                }
                op::REFUND => {
                    on_direct(state, id, |b| Ok(b.refund_at(n, now.unwrap_or_else(|| b.now()))?))?;
                    Ok(ptr::null_mut())
                }
                op::RESET => {
                    on_direct(state, id, |b| {
                        b.reset();
                        Ok(())
                    })?;
                    Ok(ptr::null_mut())
                }
                _ => Err(JsFailure::error("ERR_RATOMIC", format!("unknown op {code}"))),
            }
        })
    }
}
