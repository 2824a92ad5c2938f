//! The hot path: plain native functions per JavaScript environment,
//! written against raw N-API, and the buffer they write decisions into.
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

use std::cell::RefCell;
use std::ffi::c_void;
use std::mem::size_of;
use std::os::raw::c_char;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::rc::Rc;
use std::sync::Mutex;

use napi::bindgen_prelude::*;
use napi::sys;
use napi_derive::napi;

use crate::batch::{self, Requests, Unread};
use crate::clock::ms_to_ns;
use crate::decision::{self, slot, OUT_LEN};
use crate::error::{whole, JsFailure, Res};
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

/// A kind of handle the hot path keeps in a table per environment, by id:
/// single-rule limiters, `Limiter` views, direct buckets.
pub trait Tabled: Clone + 'static {
    /// This kind's table in an environment.
    fn table(state: &EnvState) -> &RefCell<Table<Self>>;
}

/// A handle registered in its environment's table under `id` for as long
/// as the JavaScript object holding this lives (dereferences to the handle).
pub struct Registered<T: Tabled> {
    handle: T,
    state: Rc<EnvState>,
    /// The handle's id in the table: what `ratomic.js` passes to the hot calls.
    pub id: u32,
}

impl<T: Tabled> Registered<T> {
    /// Registers `handle` in the environment of the call in progress.
    pub fn new(env: &Env, handle: T) -> Result<Self> {
        // SAFETY: env is the live environment of the call in progress.
        let state = unsafe { EnvState::of(env.raw()) }.map_err(|e| e.into_napi(env))?;
        let id = T::table(&state).borrow_mut().insert(handle.clone());
        Ok(Registered { handle, state, id })
    }
}

impl<T: Tabled> Drop for Registered<T> {
    fn drop(&mut self) {
        // Finalizers never run inside a hot call; if one ever did, the slot
        // would only leak, never dangle.
        if let Ok(mut table) = T::table(&self.state).try_borrow_mut() {
            table.remove(self.id);
        }
    }
}

impl<T: Tabled> std::ops::Deref for Registered<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.handle
    }
}

/// What the hot functions call: a single-rule limiter or a `Limiter` view.
pub trait Target: Tabled + Sized {
    /// The longest key accepted, bytes.
    fn max_key_len(&self) -> usize;
    /// The limiter's own clock, ns.
    fn now(&self) -> u64;
    /// Charges `cost` to `key` at `now`; writes the decision into `out`.
    fn allow(&self, key: &[u8], cost: u64, now: u64, out: &mut [f64]) -> ratomic::Result<bool>;
    /// Answers like `allow`, changing nothing.
    fn peek(&self, key: &[u8], cost: u64, now: u64, out: &mut [f64]) -> ratomic::Result<bool>;
    /// Gives `tokens` back to `key`.
    fn refund(&self, key: &[u8], tokens: u64, now: u64) -> ratomic::Result<()>;
    /// Forgets `key`.
    fn reset(&self, key: &[u8], now: u64) -> ratomic::Result<()>;
    /// Decides a batch (core's whole-batch `allow_many_at`), appending each
    /// decision to `all`, led by `allowed`.
    fn allow_many(&self, requests: std::result::Result<Requests, Unread>, now: u64, all: &mut Vec<f64>) -> Res<()>;
}

/// The limiters of one kind an environment's JavaScript holds, by id.
pub struct Table<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table { slots: Vec::new(), free: Vec::new() }
    }
}

impl<T> Table<T> {
    /// Adds `t`; returns its id.
    pub fn insert(&mut self, t: T) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(t);
                id
            }
            None => {
                self.slots.push(Some(t));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Removes the limiter `id` (when its handle is collected).
    pub fn remove(&mut self, id: u32) {
        if let Some(slot @ Some(_)) = self.slots.get_mut(id as usize) {
            *slot = None;
            self.free.push(id);
        }
    }

    /// The limiter `id`.
    #[inline]
    pub fn get(&self, id: u32) -> Res<&T> {
        match self.slots.get(id as usize) {
            Some(Some(t)) => Ok(t),
            _ => Err(stale(id)),
        }
    }
}

#[cold]
fn stale(id: u32) -> JsFailure {
    JsFailure::type_error("ERR_RATOMIC_INVALID_ARGUMENT", format!("no limiter has id {id} in this thread"))
}

/// Where decisions are written.
enum Out {
    /// Native memory from the pool; never freed.
    Native(NonNull<f64>),
    /// A V8 `ArrayBuffer` (when V8 refuses external memory), looked up and
    /// checked on every call.
    Js,
}

/// One JavaScript environment's hot-path state: its limiters and its output buffer.
pub struct EnvState {
    out: Out,
    /// A strong reference to a `Float64Array` over the output buffer (for
    /// [`Out::Js`], the one every call looks up).
    view: sys::napi_ref,
    pub keyed: RefCell<Table<crate::keyed::Handle>>,
    pub views: RefCell<Table<crate::limiter::View>>,
    /// Direct buckets: keyless, so not a [`Target`]; see [`allow_direct_cb`].
    pub direct: RefCell<Table<crate::direct::Handle>>,
    /// Redis-backed limiters (`ratomic/redis`): see [`redis_allow_cb`].
    pub redis: RefCell<Table<crate::redis::Hot>>,
}

/// Output buffers released by environments that ended, for the next ones.
struct Pooled(NonNull<f64>);
// SAFETY: the memory is plain `f64`s, never freed; whoever pops it owns it.
unsafe impl Send for Pooled {}
static POOL: Mutex<Vec<Pooled>> = Mutex::new(Vec::new());

fn take_buffer() -> NonNull<f64> {
    let pooled = POOL.lock().unwrap_or_else(|p| p.into_inner()).pop();
    pooled.map_or_else(|| NonNull::from(Box::leak(Box::new([0.0f64; OUT_LEN]))).cast(), |p| p.0)
}

impl Drop for EnvState {
    fn drop(&mut self) {
        // The view (and any ArrayBuffer detached from it) may still name the
        // memory: it goes back to the pool, never to the allocator.
        if let Out::Native(p) = self.out {
            POOL.lock().unwrap_or_else(|p| p.into_inner()).push(Pooled(p));
        }
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

impl EnvState {
    /// The state of `env`, made on first use and kept as its instance data.
    ///
    /// # Safety
    /// `env` must be the live environment of the current call.
    pub unsafe fn of(env: sys::napi_env) -> Res<Rc<EnvState>> {
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: env is live. This addon sets its instance data only here.
        status(unsafe { sys::napi_get_instance_data(env, &mut data) }, "napi_get_instance_data")?;
        if !data.is_null() {
            // SAFETY: the data is the `Box<Rc<EnvState>>` set below, freed only
            // by `drop_instance` at the environment's end.
            return Ok(unsafe { &*data.cast::<Rc<EnvState>>() }.clone());
        }
        // SAFETY: env is live.
        let state = Rc::new(unsafe { EnvState::new(env)? });
        let boxed = Box::into_raw(Box::new(state.clone()));
        // SAFETY: N-API calls `drop_instance` once, at the environment's end.
        let set = unsafe { sys::napi_set_instance_data(env, boxed.cast(), Some(drop_instance), ptr::null_mut()) };
        if let Err(e) = status(set, "napi_set_instance_data") {
            // SAFETY: not handed to N-API.
            drop(unsafe { Box::from_raw(boxed) });
            return Err(e);
        }
        Ok(state)
    }

    /// # Safety
    /// `env` must be live.
    unsafe fn new(env: sys::napi_env) -> Res<EnvState> {
        let memory = take_buffer();
        // SAFETY: env is live.
        let (out, view) = match unsafe { external_view(env, memory) } {
            Ok(view) => (Out::Native(memory), view),
            Err(_) => {
                POOL.lock().unwrap_or_else(|p| p.into_inner()).push(Pooled(memory));
                let (mut data, mut buffer) = (ptr::null_mut(), ptr::null_mut());
                // SAFETY: env is live; V8 owns this buffer's memory.
                let made =
                    unsafe { sys::napi_create_arraybuffer(env, OUT_LEN * size_of::<f64>(), &mut data, &mut buffer) };
                status(made, "napi_create_arraybuffer")?;
                // SAFETY: env is live; `buffer` has room for OUT_LEN f64s.
                (Out::Js, unsafe { float64_view(env, buffer)? })
            }
        };
        let mut view_ref = ptr::null_mut();
        // SAFETY: env is live; a strong reference keeps the view alive.
        status(unsafe { sys::napi_create_reference(env, view, 1, &mut view_ref) }, "napi_create_reference")?;
        Ok(EnvState {
            out,
            view: view_ref,
            keyed: Default::default(),
            views: Default::default(),
            direct: Default::default(),
            redis: Default::default(),
        })
    }

    /// A `Float64Array` over the output buffer: a new `ArrayBuffer` over
    /// the same native memory on each call (so detaching one leaves the
    /// others, `ratomic.js`'s among them, untouched), or V8's one buffer.
    ///
    /// # Safety
    /// `env` must be this state's live environment.
    unsafe fn view(&self, env: sys::napi_env) -> Res<sys::napi_value> {
        match self.out {
            // SAFETY: forwarded.
            Out::Native(memory) => unsafe { external_view(env, memory) },
            Out::Js => {
                let mut view = ptr::null_mut();
                // SAFETY: the reference is live (strong, never deleted before the env ends).
                let got = unsafe { sys::napi_get_reference_value(env, self.view, &mut view) };
                status(got, "napi_get_reference_value")?;
                Ok(view)
            }
        }
    }

    /// The output buffer, for the current call only.
    ///
    /// # Safety
    /// `env` must be this state's live environment; the slice must not
    /// outlive the current call (calls run one at a time on the JavaScript
    /// thread, so no other borrow of it exists).
    #[inline]
    #[allow(clippy::mut_from_ref)] // the memory is not `self`'s: see the contract
    pub unsafe fn out(&self, env: sys::napi_env) -> Res<&mut [f64]> {
        match self.out {
            // SAFETY: OUT_LEN f64s that live forever; the caller's contract.
            Out::Native(p) => Ok(unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), OUT_LEN) }),
            // SAFETY: forwarded.
            Out::Js => unsafe { self.js_out(env) },
        }
    }

    #[cold]
    #[allow(clippy::mut_from_ref)] // V8's memory, not `self`'s: see `out`
    unsafe fn js_out(&self, env: sys::napi_env) -> Res<&mut [f64]> {
        let (mut view, mut kind, mut length, mut data) = (ptr::null_mut(), 0, 0usize, ptr::null_mut());
        let (mut buffer, mut offset) = (ptr::null_mut(), 0usize);
        // SAFETY: the reference is live (strong, never deleted before the env ends).
        unsafe {
            status(sys::napi_get_reference_value(env, self.view, &mut view), "napi_get_reference_value")?;
            status(
                sys::napi_get_typedarray_info(env, view, &mut kind, &mut length, &mut data, &mut buffer, &mut offset),
                "napi_get_typedarray_info",
            )?;
        }
        // A detached buffer has no data and length 0.
        if data.is_null() || length < OUT_LEN {
            return Err(JsFailure::error(
                "ERR_RATOMIC",
                "ratomic's decision buffer was detached; no state was changed",
            ));
        }
        // SAFETY: V8's live memory of at least OUT_LEN f64s; the caller's contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(data.cast::<f64>(), OUT_LEN) })
    }
}

/// A `Float64Array` over `memory` (OUT_LEN f64s that are never freed, so
/// the `ArrayBuffer` needs no finalizer and can never dangle); an error where
/// V8 refuses external memory.
///
/// # Safety
/// `env` must be live.
unsafe fn external_view(env: sys::napi_env, memory: NonNull<f64>) -> Res<sys::napi_value> {
    let mut buffer = ptr::null_mut();
    // SAFETY: env is live; see above for the memory.
    let made = unsafe {
        sys::napi_create_external_arraybuffer(
            env,
            memory.as_ptr().cast(),
            OUT_LEN * size_of::<f64>(),
            None,
            ptr::null_mut(),
            &mut buffer,
        )
    };
    status(made, "napi_create_external_arraybuffer")?;
    // SAFETY: env is live; `buffer` has room for OUT_LEN f64s.
    unsafe { float64_view(env, buffer) }
}

/// A `Float64Array` of OUT_LEN numbers over `buffer`.
///
/// # Safety
/// `env` must be live and `buffer` an `ArrayBuffer` of at least OUT_LEN f64s.
unsafe fn float64_view(env: sys::napi_env, buffer: sys::napi_value) -> Res<sys::napi_value> {
    let mut view = ptr::null_mut();
    // SAFETY: the caller's contract.
    let made =
        unsafe { sys::napi_create_typedarray(env, sys::TypedarrayType::float64_array, OUT_LEN, buffer, 0, &mut view) };
    status(made, "napi_create_typedarray")?;
    Ok(view)
}

unsafe extern "C" fn drop_instance(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Box<Rc<EnvState>>` set in `EnvState::of`; N-API calls this once.
    drop(unsafe { Box::from_raw(data.cast::<Rc<EnvState>>()) });
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
        set(c"allowKeyed", function(env, &state, "allow", allow_cb::<crate::keyed::Handle>)?)?;
        set(c"opKeyed", function(env, &state, "op", op_cb::<crate::keyed::Handle>)?)?;
        set(c"allowLimiter", function(env, &state, "allow", allow_cb::<crate::limiter::View>)?)?;
        set(c"opLimiter", function(env, &state, "op", op_cb::<crate::limiter::View>)?)?;
        set(c"manyKeyed", function(env, &state, "many", many_cb::<crate::keyed::Handle>)?)?;
        set(c"manyLimiter", function(env, &state, "many", many_cb::<crate::limiter::View>)?)?;
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
    use crate::redis::{Hot, HotStep};
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
            let max_len = || Hot::table(state).borrow().get(id).map_or(usize::MAX, Hot::max_key_len);
            // The key is read first (that may run the GC); the table is
            // borrowed only for the driver's work, which runs no JavaScript.
            let step = with_key(env, key, max_len, |k| {
                let out = state.out(env)?;
                Hot::table(state).borrow().get(id)?.allow(k, cost, demand, out)
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
fn on_direct<R>(state: &EnvState, id: u32, f: impl FnOnce(&crate::direct::Handle) -> Res<R>) -> Res<R> {
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
