//! Each JavaScript environment's hot-path state ([`EnvState`]): its tables
//! of limiter handles by id, and the buffer decisions are written into. The
//! functions that read them are in [`hot`](crate::hot) (see there for the
//! safety argument); the handles' operations in [`keyed`](crate::keyed),
//! [`limiter`](crate::limiter) and [`direct`](crate::direct).

use std::cell::RefCell;
use std::ffi::c_void;
use std::mem::size_of;
use std::ptr::{self, NonNull};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::*;
use napi::sys;
use ratomic::{Keyed, LimitSet, Limiter, Rule};
use ratomic_redis::Driver;

use crate::batch::{Requests, Unread};
use crate::clock::FaceClock;
use crate::decision::OUT_LEN;
use crate::error::{status, JsFailure, Res};

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
pub(crate) fn stale(id: u32) -> JsFailure {
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

/// What the hot path's `redisAllow` calls: a Redis limiter's driver, shared
/// with its `NativeRedis` (its calls are `redis.rs`'s).
#[derive(Clone)]
pub struct Hot {
    pub(crate) driver: Arc<Driver>,
    pub(crate) multi: bool,
}

impl Tabled for Hot {
    fn table(state: &EnvState) -> &std::cell::RefCell<Table<Self>> {
        &state.redis
    }
}

/// One JavaScript environment's hot-path state: its limiters and its output buffer.
pub struct EnvState {
    out: Out,
    /// A strong reference to a `Float64Array` over the output buffer (for
    /// [`Out::Js`], the one every call looks up).
    view: sys::napi_ref,
    pub keyed: RefCell<Table<KeyedHandle>>,
    pub views: RefCell<Table<View>>,
    /// Direct buckets: keyless, so not a [`Target`]; see [`allow_direct_cb`].
    pub direct: RefCell<Table<DirectHandle>>,
    /// Redis-backed limiters (`ratomic/redis`): see `hot.rs`'s `redis_allow_cb`.
    pub redis: RefCell<Table<Hot>>,
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
    pub(crate) unsafe fn view(&self, env: sys::napi_env) -> Res<sys::napi_value> {
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

/// The limiter behind a `TokenBucket`, `FixedWindow` or `SlidingWindow`.
pub type KeyedRule = Keyed<Rule, [u8], FaceClock>;

/// What the hot path holds of a single-rule limiter (its calls are
/// [`Target`]'s, in [`keyed`](crate::keyed)).
pub type KeyedHandle = Arc<KeyedRule>;

impl Tabled for KeyedHandle {
    fn table(state: &EnvState) -> &RefCell<Table<Self>> {
        &state.keyed
    }
}

/// The limiter behind a `Limiter`.
pub type MultiLimiter = Limiter<[u8], FaceClock>;

/// A limiter and the limits a handle's calls are subject to (its calls are
/// [`Target`]'s, in [`limiter`](crate::limiter)).
#[derive(Clone, Debug)]
pub struct View {
    pub(crate) limiter: Arc<MultiLimiter>,
    pub(crate) set: LimitSet,
}

impl Tabled for View {
    fn table(state: &EnvState) -> &RefCell<Table<Self>> {
        &state.views
    }
}

/// The bucket behind a `DirectTokenBucket`.
pub type DirectBucket = ratomic::DirectTokenBucket<FaceClock>;

/// What the hot path holds of a direct bucket.
pub type DirectHandle = Arc<DirectBucket>;

impl Tabled for DirectHandle {
    fn table(state: &EnvState) -> &RefCell<Table<Self>> {
        &state.direct
    }
}
