//! Epoch-based memory reclamation whose readers execute no fence.
//!
//! The keyed store frees old tables, old summary cells and long keys' heap
//! blocks only once no call that might still read them is running. This
//! module is that guarantee: a call *pins* its thread for its length, and
//! memory unlinked meanwhile is *deferred* and freed two epochs later.
//!
//! # Why not crossbeam-epoch or seize
//!
//! Both make every pin a locked instruction (crossbeam-epoch's `pin` stores
//! the thread's epoch and executes a SeqCst fence; seize's `leave` is an
//! `xchg`): `cargo run --release -p ratomic-benches --bin reclaim` measured
//! +5.9 and +6.8 ns around one CAS that costs 5.1 ns, 35% of a hot keyed call
//! (`BENCHMARKS.md`, "where ratomic still loses"). The scheme here is
//! crossbeam-epoch's algorithm with its one per-pin fence made *asymmetric*:
//! the reader's half is a compiler fence, and the rare thread that advances
//! the epoch pays a process-wide `membarrier(2)`, which executes a full
//! barrier on every CPU running one of this process's threads (the pairing
//! liburcu's "memb" flavour and folly's `asymmetric_thread_fence_*` use).
//! Where `membarrier` is not available (not Linux, or refused), the reader's
//! half is a real SeqCst fence: the scheme is then crossbeam-epoch's exactly.
//!
//! # The protocol
//!
//! - The global epoch `G` advances by 2. A thread's `Local::epoch` is 0 when
//!   it is not pinned, `e | 1` while pinned at epoch `e`.
//! - **Pin**: read `G` (relaxed), store `G | 1` to the thread's word
//!   (relaxed), *light fence*; then read the shared pointers. **Unpin**: store
//!   0 (release), ordering every read of the pinned section before it.
//! - **Retire**: after unlinking an object, its free is pushed to the
//!   thread's bag. A bag is *sealed* (when full, or on `flush`): a SeqCst
//!   fence, then `t = G` (the unlink is ordered before that read), and the
//!   bag goes on the global stack of sealed bags, tagged `t`.
//! - **Advance** (one thread at a time): read `G`, *heavy fence*, read every
//!   thread's word (acquire); if every pinned thread is pinned at `G`, store
//!   `G + 2` (release). Bags tagged `t` are freed once `G >= t + 4`.
//!
//! Why a bag tagged `t` is never freed under a reader that read one of its
//! objects (the light and heavy fences acting as a pair of SeqCst fences):
//! the bag is freed only after the advance from `t + 2`. That advance read
//! `G = t + 2`, stored by the advance from `t` after the seal read `t`, and
//! the seal read it after the unlink: so its heavy fence comes after the
//! unlink. The reader read the pointer before the unlink, so that advance
//! sees the reader's pin store: the reader is pinned, at some `e`. Had it
//! pinned at `e = t + 2`, it would have read `G` after it became `t + 2`,
//! so after the unlink, and its read of the pointer, after its light fence,
//! would have seen the unlink. So `e ≠ t + 2`, and the advance fails for as
//! long as the reader stays pinned. Once the reader unpins, its release
//! store, the advancer's acquire read of it, the advancer's release store
//! of `G` and the freeing thread's acquire read of `G` order the reader's
//! last access before the free.
//!
//! Under loom (`--cfg ratomic_loom`) both fences are SeqCst fences, the
//! standard model of a `membarrier` pair, and `tests/loom.rs` checks that no
//! deferred free runs while a thread that read the pointer is pinned.
//!
//! # Costs and bounds
//!
//! A pin costs a thread-local access, two loads and a store; an unpin a
//! store. Nested pins (a batch pins once, then each call) only count. Frees
//! are batched 64 to a bag. A collection (an advance, and the frees it
//! makes due) starts on its own when a bag fills, when a store retires a
//! small old table (`flush`), and every 1,024th pin of a thread while
//! sealed bags wait (so memory retired just before a store goes quiet is
//! freed once anything pins again), but at most once a millisecond: its
//! `membarrier` costs about a microsecond here and interrupts every CPU
//! running the process. Those frees wait a few milliseconds. The table a
//! store outgrew is freed when the call that grew it ends (`flush_now`:
//! two advances once that thread is unpinned): growths are few, and their
//! old tables are most of a growing store's memory. A thread
//! pinned for a long time (a long batch) delays every free meanwhile, and
//! never lets one happen early.
//! Per-thread records are reused after their thread exits; a thread that
//! exits hands its bag to the global stack of sealed bags, which is
//! lock-free so that a `fork` cannot leave a lock held; in the child of a
//! `fork`, the records of the parent's other threads are released
//! (`forked_child`).

use std::cell::{Cell, UnsafeCell};
use std::marker::PhantomData;
use std::ptr;

#[cfg(ratomic_loom)]
use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64};
use std::sync::atomic::Ordering;
#[cfg(not(ratomic_loom))]
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64};

use crate::sync::Counter;

/// Deferred frees in a thread's bag before it is sealed.
const BAG: usize = 64;
/// Collections that start on their own (a full bag, a growing store's
/// `flush`, the idle check) start at most once per this many nanoseconds.
/// Each is an advance, so a `membarrier`, which interrupts every CPU
/// running the process (on a VM, each interrupt is a VM exit): under churn
/// of long keys, whose heap blocks are retired as their keys are evicted,
/// a collection per bag made two threads 25% slower than with
/// crossbeam-epoch. Frees then wait two or three milliseconds.
#[cfg(not(ratomic_loom))]
const MIN_INTERVAL_NS: u64 = 1_000_000;
/// A thread checks for garbage nobody is freeing once per this many pins.
const IDLE_CHECK: u32 = 1024;

/// A free to run once no pinned thread can reach its object: `call(arg)`.
#[derive(Clone, Copy)]
struct Deferred {
    call: unsafe fn(usize),
    arg: usize,
}

/// A sealed bag: the epoch it was sealed at and its frees; a node of the
/// global stack of bags waiting to be freed.
struct Sealed {
    epoch: u64,
    bag: Vec<Deferred>,
    next: *mut Sealed,
}

/// One thread's pin word. Records are never freed: a thread that exits
/// gives its record back for the next thread to use.
#[repr(align(128))]
struct Local {
    epoch: AtomicU64,
    in_use: AtomicBool,
    next: *mut Local,
}

/// Pushes `node`, the caller's until published, on the lock-free stack at
/// `head`; `next` is its link. (Stacks are only pushed, or taken whole.)
fn push<T>(head: &AtomicPtr<T>, node: *mut T, next: impl Fn(&mut T) -> &mut *mut T) {
    let mut h = head.load(Ordering::Relaxed);
    loop {
        // SAFETY: not yet published: only this thread can reach `node`.
        *next(unsafe { &mut *node }) = h;
        match head.compare_exchange_weak(h, node, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => h = now,
        }
    }
}

/// What every pin reads, on a cache line of its own: the other fields of
/// [`Global`] are written by seals and collections, which would otherwise
/// make every other thread's next pin miss.
#[repr(C, align(128))]
struct ReadMostly {
    epoch: AtomicU64,
    /// How many sealed bags wait in `garbage` (a hint: when to collect).
    pending: Counter,
}

#[repr(C)]
struct Global {
    read: ReadMostly,
    /// Every `Local` ever made, newest first (pushed, never removed).
    locals: AtomicPtr<Local>,
    /// Sealed bags waiting for their epoch, newest first: a lock-free
    /// stack, so that no lock can be held across a `fork` (see
    /// [`forked_child`]).
    garbage: AtomicPtr<Sealed>,
    /// Set by the one thread advancing the epoch and freeing.
    collecting: AtomicBool,
    /// When a collection last started on its own ([`Global::maybe_collect`]):
    /// nanoseconds since the process's first, plus one (0: never).
    #[cfg(not(ratomic_loom))]
    last: std::sync::atomic::AtomicU64,
}

// SAFETY: `Local`s and sealed bags are only reached through atomics, and a
// bag is owned by whoever took it off the stack.
unsafe impl Send for Global {}
// SAFETY: as above.
unsafe impl Sync for Global {}

macro_rules! global_new {
    () => {
        Global {
            read: ReadMostly { epoch: AtomicU64::new(0), pending: Counter::new(0) },
            locals: AtomicPtr::new(ptr::null_mut()),
            garbage: AtomicPtr::new(ptr::null_mut()),
            collecting: AtomicBool::new(false),
            #[cfg(not(ratomic_loom))]
            last: std::sync::atomic::AtomicU64::new(0),
        }
    };
}

#[cfg(not(ratomic_loom))]
static GLOBAL: Global = global_new!();

// Under loom the global state is made afresh for each execution, and each
// thread's handle keeps it alive until the handle is dropped (loom drops
// its statics before the main thread's locals); loom's `Arc`, so that its
// drop is ordered after every thread's last use.
#[cfg(ratomic_loom)]
loom::lazy_static! {
    static ref GLOBAL: loom::sync::Arc<Global> = loom::sync::Arc::new(global_new!());
}

impl Global {
    /// Takes a free `Local`, or makes one.
    fn acquire_local(&self) -> *const Local {
        let mut l = self.locals.load(Ordering::Acquire);
        // SAFETY: `Local`s are never freed (under loom, not before `self`).
        while let Some(local) = unsafe { l.as_ref() } {
            if !local.in_use.load(Ordering::Relaxed)
                && local.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                return l;
            }
            l = local.next;
        }
        let new = Box::into_raw(Box::new(Local {
            epoch: AtomicU64::new(0),
            in_use: AtomicBool::new(true),
            next: ptr::null_mut(),
        }));
        push(&self.locals, new, |l| &mut l.next);
        new
    }

    /// Queues a bag of frees, tagged with the epoch now.
    fn seal(&self, bag: Vec<Deferred>) {
        if bag.is_empty() {
            return;
        }
        // Orders the unlinks of the bag's objects before the read of the tag.
        fence(Ordering::SeqCst);
        let epoch = self.read.epoch.load(Ordering::Relaxed);
        let node = Box::into_raw(Box::new(Sealed { epoch, bag, next: ptr::null_mut() }));
        push(&self.garbage, node, |s| &mut s.next);
        self.read.pending.fetch_add(1, Ordering::Relaxed);
    }

    /// [`collect`](Self::collect), unless a collection started on its own
    /// less than [`MIN_INTERVAL_NS`] ago (under loom, always).
    fn maybe_collect(&self) {
        #[cfg(not(ratomic_loom))]
        {
            static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
            let now = u64::try_from(START.get_or_init(std::time::Instant::now).elapsed().as_nanos())
                .unwrap_or(u64::MAX)
                .saturating_add(1);
            let last = self.last.load(Ordering::Relaxed);
            if last != 0 && now.saturating_sub(last) < MIN_INTERVAL_NS {
                return;
            }
            // Two threads may both get here; `collecting` lets one through.
            self.last.store(now, Ordering::Relaxed);
        }
        self.collect();
    }

    /// Advances the epoch if every pinned thread is pinned at it, and runs
    /// the frees of the bags two epochs old. Does nothing if another thread
    /// is at it.
    fn collect(&self) {
        if self.collecting.swap(true, Ordering::Acquire) {
            return;
        }
        let epoch = self.try_advance();
        // Take the whole stack, and put back the bags not yet due.
        let mut node = self.garbage.swap(ptr::null_mut(), Ordering::Acquire);
        let mut ready = Vec::new();
        while !node.is_null() {
            // SAFETY: taken off the stack by the swap: this thread's alone.
            let sealed = unsafe { Box::from_raw(node) };
            node = sealed.next;
            if epoch.wrapping_sub(sealed.epoch) >= 4 {
                ready.push(sealed);
            } else {
                push(&self.garbage, Box::into_raw(sealed), |s| &mut s.next);
            }
        }
        self.read.pending.fetch_sub(ready.len(), Ordering::Relaxed);
        self.collecting.store(false, Ordering::Release);
        for sealed in ready {
            for d in sealed.bag {
                // SAFETY: two epochs have passed since the bag was sealed: no
                // thread pinned now was pinned when its objects were unlinked.
                unsafe { (d.call)(d.arg) };
            }
        }
    }

    /// One advance attempt; returns the epoch after it.
    fn try_advance(&self) -> u64 {
        let epoch = self.read.epoch.load(Ordering::Relaxed);
        if !heavy_fence() {
            return epoch;
        }
        let mut l = self.locals.load(Ordering::Acquire);
        // SAFETY: `Local`s are never freed.
        while let Some(local) = unsafe { l.as_ref() } {
            let e = local.epoch.load(Ordering::Acquire);
            if e != 0 && e != epoch | 1 {
                return epoch;
            }
            l = local.next;
        }
        // Only the collecting thread stores the epoch.
        self.read.epoch.store(epoch.wrapping_add(2), Ordering::Release);
        epoch.wrapping_add(2)
    }
}

#[cfg(ratomic_loom)]
impl Drop for Global {
    fn drop(&mut self) {
        // Exclusive access: the last value of each list, not a relaxed
        // load (which loom may answer with an older head).
        let mut node = self.garbage.with_mut(|p| *p);
        while !node.is_null() {
            // SAFETY: made by `Box::into_raw`, unreachable once `self` goes.
            let sealed = unsafe { Box::from_raw(node) };
            node = sealed.next;
            for d in sealed.bag {
                // SAFETY: the execution is over: no thread is pinned.
                unsafe { (d.call)(d.arg) };
            }
        }
        let mut l = self.locals.with_mut(|p| *p);
        while !l.is_null() {
            // SAFETY: made by `Box::into_raw`, unreachable once `self` goes.
            let local = unsafe { Box::from_raw(l) };
            l = local.next;
        }
    }
}

// ---------------------------------------------------------------------------
// The light and heavy halves of the fence.

/// Whether readers may use a compiler fence: decided once, before any
/// thread registers, and never changed.
#[cfg(not(ratomic_loom))]
static ASYMMETRIC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[cfg(all(target_os = "linux", not(ratomic_loom)))]
mod membarrier {
    const CMD_GLOBAL: libc::c_long = 1;
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    fn call(cmd: libc::c_long) -> bool {
        // SAFETY: membarrier(cmd, flags = 0, cpu_id = 0) reads no memory of ours.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_long, 0 as libc::c_long) == 0 }
    }

    /// Registers the process for expedited barriers and tries one.
    pub(super) fn register() -> bool {
        call(CMD_REGISTER_PRIVATE_EXPEDITED) && call(CMD_PRIVATE_EXPEDITED)
    }

    /// A full barrier on every CPU running a thread of this process.
    pub(super) fn barrier() -> bool {
        // A process forked from a registered one may need to register again;
        // the global command (slow: it waits for a grace period) needs none.
        call(CMD_PRIVATE_EXPEDITED) || register() || call(CMD_GLOBAL)
    }
}

/// Settles, once per process, whether readers may use a compiler fence.
/// Registering for `membarrier` can take milliseconds (the kernel waits for
/// a grace period when the process has threads), so stores call this when
/// they are made, not in their first call.
pub fn init() {
    #[cfg(not(ratomic_loom))]
    decide_mode();
}

#[cfg(not(ratomic_loom))]
fn decide_mode() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        #[cfg(target_os = "linux")]
        ASYMMETRIC.store(membarrier::register(), Ordering::Relaxed);
        #[cfg(unix)]
        // SAFETY: registers a handler that only touches atomics and this
        // thread's handle (see `forked_child`).
        unsafe {
            libc::pthread_atfork(None, None, Some(forked_child));
        }
    });
}

/// Runs in the child of a `fork`, where only the forking thread exists. A
/// thread of the parent pinned at the fork would stay pinned in the child
/// forever, and no memory the child retires would ever be freed (a leak
/// that grows with every key churned through): every record but the
/// forking thread's is released. A collection or a seal the fork cut short
/// in another thread loses its bags (a leak of what the parent had retired,
/// never an early free); `pending` is recounted from what is left.
#[cfg(all(unix, not(ratomic_loom)))]
extern "C" fn forked_child() {
    let mine = HANDLE.try_with(|h| h.local.get()).unwrap_or(ptr::null());
    let mut l = GLOBAL.locals.load(Ordering::Relaxed);
    // SAFETY: records live forever.
    while let Some(local) = unsafe { l.as_ref() } {
        if !ptr::eq(l, mine) {
            local.epoch.store(0, Ordering::Relaxed);
            local.in_use.store(false, Ordering::Relaxed);
        }
        l = local.next;
    }
    let mut waiting = 0;
    let mut node = GLOBAL.garbage.load(Ordering::Relaxed);
    // SAFETY: bags on the stack are freed only once taken off it.
    while let Some(sealed) = unsafe { node.as_ref() } {
        waiting += 1;
        node = sealed.next;
    }
    GLOBAL.read.pending.store(waiting, Ordering::Relaxed);
    GLOBAL.collecting.store(false, Ordering::Relaxed);
}

/// The reader's half: keeps the pin's store before the pinned section's
/// loads, with a real fence when the heavy half cannot be asymmetric.
#[inline(always)]
fn light_fence(asymmetric: bool) {
    #[cfg(not(ratomic_loom))]
    if asymmetric {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        return;
    }
    let _ = asymmetric;
    fence(Ordering::SeqCst);
}

/// The advancer's half; `false` if no barrier could be had (then the epoch
/// must not advance: no memory is freed, none early).
fn heavy_fence() -> bool {
    #[cfg(all(target_os = "linux", not(ratomic_loom)))]
    if ASYMMETRIC.load(Ordering::Relaxed) {
        return membarrier::barrier();
    }
    fence(Ordering::SeqCst);
    true
}

// ---------------------------------------------------------------------------
// A thread's handle.

struct Handle {
    local: Cell<*const Local>,
    nest: Cell<usize>,
    asymmetric: Cell<bool>,
    pins: Cell<u32>,
    /// Set by [`Guard::flush_now`]: collect when the outermost pin ends.
    urgent: Cell<bool>,
    bag: UnsafeCell<Vec<Deferred>>,
    #[cfg(ratomic_loom)]
    global: std::cell::OnceCell<loom::sync::Arc<Global>>,
}

macro_rules! handle_new {
    ($($loom:tt)*) => {
        Handle {
            local: Cell::new(ptr::null()),
            nest: Cell::new(0),
            asymmetric: Cell::new(false),
            pins: Cell::new(0),
            urgent: Cell::new(false),
            bag: UnsafeCell::new(Vec::new()),
            $($loom)*
        }
    };
}

impl Handle {
    #[cfg(not(ratomic_loom))]
    const fn new() -> Handle {
        handle_new!()
    }

    #[cfg(ratomic_loom)]
    fn new() -> Handle {
        handle_new!(global: std::cell::OnceCell::new(),)
    }

    #[inline(always)]
    fn global(&self) -> &Global {
        #[cfg(not(ratomic_loom))]
        return &GLOBAL;
        #[cfg(ratomic_loom)]
        return self.global.get_or_init(|| GLOBAL.clone());
    }

    #[cold]
    #[inline(never)]
    fn register(&self) {
        #[cfg(not(ratomic_loom))]
        {
            decide_mode();
            self.asymmetric.set(ASYMMETRIC.load(Ordering::Relaxed));
        }
        self.local.set(self.global().acquire_local());
    }

    #[inline(always)]
    fn enter(&self) {
        let n = self.nest.get();
        self.nest.set(n + 1);
        if n == 0 {
            self.pin_first();
        }
    }

    #[inline(always)]
    fn pin_first(&self) {
        if self.local.get().is_null() {
            self.register();
        }
        // SAFETY: registered above; records live forever.
        let local = unsafe { &*self.local.get() };
        let global = self.global();
        let epoch = global.read.epoch.load(Ordering::Relaxed);
        local.epoch.store(epoch | 1, Ordering::Relaxed);
        light_fence(self.asymmetric.get());
        if global.read.pending.load(Ordering::Relaxed) != 0 {
            self.idle_check();
        }
    }

    /// While garbage waits, every [`IDLE_CHECK`]th pin of this thread tries
    /// to free what is due (so memory retired just before the store went
    /// quiet is freed once anything pins again).
    #[cold]
    #[inline(never)]
    fn idle_check(&self) {
        let pins = self.pins.get().wrapping_add(1);
        self.pins.set(pins);
        if pins % IDLE_CHECK == 0 {
            self.global().maybe_collect();
        }
    }

    #[inline(always)]
    fn leave(&self) {
        let n = self.nest.get() - 1;
        self.nest.set(n);
        if n == 0 {
            // SAFETY: pinned, so registered.
            unsafe { &*self.local.get() }.epoch.store(0, Ordering::Release);
            if self.urgent.get() {
                self.collect_urgent();
            }
        }
    }

    /// Frees what [`Guard::flush_now`] sealed, once this thread is no longer
    /// pinned: two advances in a row (pinned, a thread can advance the
    /// epoch only once past its own pin), so the bag is freed now unless
    /// another thread is pinned at an older epoch.
    #[cold]
    #[inline(never)]
    fn collect_urgent(&self) {
        self.urgent.set(false);
        let global = self.global();
        global.collect();
        global.collect();
    }

    fn defer(&self, d: Deferred) {
        // SAFETY: the bag is only touched by this thread, and by no caller
        // up the stack (a free that defers again runs after the take below).
        let bag = unsafe { &mut *self.bag.get() };
        bag.push(d);
        if bag.len() >= BAG {
            // The next bag at its full size at once (growing it from empty
            // cost five reallocations a bag, seen in a profile of churn).
            let bag = std::mem::replace(bag, Vec::with_capacity(BAG));
            let global = self.global();
            global.seal(bag);
            global.maybe_collect();
        }
    }

    fn flush(&self, now: bool) {
        // SAFETY: as in `defer`.
        let bag = std::mem::take(unsafe { &mut *self.bag.get() });
        let global = self.global();
        global.seal(bag);
        if now && self.nest.get() > 0 {
            self.urgent.set(true);
        } else if now {
            global.collect();
        } else {
            global.maybe_collect();
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        let local = self.local.get();
        if local.is_null() {
            return;
        }
        let bag = std::mem::take(self.bag.get_mut());
        self.global().seal(bag);
        if self.nest.get() != 0 {
            // A guard outlives the thread's handle: keep the record pinned
            // (frees wait forever; none runs early).
            return;
        }
        // SAFETY: records live forever.
        let local = unsafe { &*local };
        local.epoch.store(0, Ordering::Release);
        local.in_use.store(false, Ordering::Release);
    }
}

#[cfg(not(ratomic_loom))]
thread_local! {
    static HANDLE: Handle = const { Handle::new() };
}
#[cfg(ratomic_loom)]
loom::thread_local! {
    static HANDLE: Handle = Handle::new();
}

// ---------------------------------------------------------------------------
// The API the store uses: a subset of crossbeam-epoch's.

/// Proof that the thread is pinned: shared pointers loaded through it stay
/// valid while it lives.
pub struct Guard {
    /// The thread's handle, or null for [`unprotected`] and for a guard on
    /// a thread whose handle is gone (then `orphan` is its record).
    handle: *const Handle,
    orphan: *const Local,
    _not_send: PhantomData<*const ()>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Guard")
    }
}

/// Pins the thread until the guard is dropped.
#[inline]
pub fn pin() -> Guard {
    match HANDLE.try_with(|h| {
        h.enter();
        h as *const Handle
    }) {
        Ok(handle) => Guard { handle, orphan: ptr::null(), _not_send: PhantomData },
        Err(_) => pin_orphan(),
    }
}

/// A pin on a thread whose handle is already destroyed (a call from another
/// thread-local's destructor): a record of its own, always with a real fence.
#[cold]
fn pin_orphan() -> Guard {
    let global: &Global = &GLOBAL;
    let orphan = global.acquire_local();
    // SAFETY: records live forever.
    let local = unsafe { &*orphan };
    local.epoch.store(global.read.epoch.load(Ordering::Relaxed) | 1, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    Guard { handle: ptr::null(), orphan, _not_send: PhantomData }
}

/// A guard for memory no other thread can reach (a store being dropped):
/// deferred frees run at once.
///
/// # Safety
///
/// Only for data no other thread can access.
pub unsafe fn unprotected() -> &'static Guard {
    struct Unprotected(Guard);
    // SAFETY: this guard holds no handle or record; it is never pinned.
    unsafe impl Sync for Unprotected {}
    static UNPROTECTED: Unprotected =
        Unprotected(Guard { handle: ptr::null(), orphan: ptr::null(), _not_send: PhantomData });
    &UNPROTECTED.0
}

impl Guard {
    /// Runs `call(arg)` once no thread pinned now can still be pinned.
    ///
    /// # Safety
    ///
    /// What `call` frees must be unreachable to threads that pin from now on.
    pub unsafe fn defer(&self, call: unsafe fn(usize), arg: usize) {
        let d = Deferred { call, arg };
        if !self.handle.is_null() {
            // SAFETY: a guard lives on its thread, within its handle's life.
            unsafe { &*self.handle }.defer(d);
        } else if !self.orphan.is_null() {
            GLOBAL.seal(vec![d]);
        } else {
            // SAFETY: unprotected: the caller vouches that no thread can reach it.
            unsafe { call(arg) };
        }
    }

    /// Drops the object behind `ptr` once no pinned thread can reach it.
    ///
    /// # Safety
    ///
    /// `ptr` came from an [`Owned`], is unlinked, and is deferred once.
    pub unsafe fn defer_destroy<T>(&self, ptr: Shared<'_, T>) {
        unsafe fn drop_box<T>(p: usize) {
            // SAFETY: made by `Box::into_raw` (`Owned`), dropped once.
            drop(unsafe { Box::from_raw(p as *mut T) });
        }
        // SAFETY: the caller's contract.
        unsafe { self.defer(drop_box::<T>, ptr.ptr as usize) };
    }

    /// Seals this thread's deferred frees now, and tries to free what is
    /// due (at most one such collection a millisecond, process-wide).
    pub fn flush(&self) {
        if !self.handle.is_null() {
            // SAFETY: as in `defer`.
            unsafe { &*self.handle }.flush(false);
        }
    }

    /// [`flush`](Self::flush), and a collection whatever the last one's
    /// time, when this thread's outermost pin ends (so it can advance the
    /// epoch twice, and free what it sealed at once): for large frees (a
    /// growing store's old table), whose memory should not wait.
    pub fn flush_now(&self) {
        if !self.handle.is_null() {
            // SAFETY: as in `defer`.
            unsafe { &*self.handle }.flush(true);
        }
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        if !self.handle.is_null() {
            // SAFETY: as in `defer`.
            unsafe { &*self.handle }.leave();
        } else if !self.orphan.is_null() {
            // SAFETY: records live forever.
            let local = unsafe { &*self.orphan };
            local.epoch.store(0, Ordering::Release);
            local.in_use.store(false, Ordering::Release);
        }
    }
}

/// An atomic pointer to a heap object freed through the epoch.
pub struct Atomic<T> {
    ptr: AtomicPtr<T>,
    _owns: PhantomData<Box<T>>,
}

impl<T> std::fmt::Debug for Atomic<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Atomic")
    }
}

impl<T> Atomic<T> {
    pub fn null() -> Self {
        Atomic { ptr: AtomicPtr::new(ptr::null_mut()), _owns: PhantomData }
    }

    pub fn new(value: T) -> Self {
        Atomic { ptr: AtomicPtr::new(Box::into_raw(Box::new(value))), _owns: PhantomData }
    }

    #[inline(always)]
    pub fn load<'g>(&self, order: Ordering, _guard: &'g Guard) -> Shared<'g, T> {
        Shared { ptr: self.ptr.load(order), _guard: PhantomData }
    }

    #[inline]
    pub fn store(&self, new: Shared<'_, T>, order: Ordering) {
        self.ptr.store(new.ptr, order);
    }
}

/// A pointer loaded while pinned: valid for the guard's life.
pub struct Shared<'g, T> {
    ptr: *mut T,
    _guard: PhantomData<(&'g (), *const T)>,
}

impl<T> Clone for Shared<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Shared<'_, T> {}

impl<T> std::fmt::Debug for Shared<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shared({:p})", self.ptr)
    }
}

impl<'g, T> Shared<'g, T> {
    #[inline(always)]
    pub fn is_null(&self) -> bool {
        self.ptr.is_null()
    }

    /// The address it points to (to compare with a reference).
    #[inline(always)]
    pub fn as_raw(&self) -> *const T {
        self.ptr
    }

    /// # Safety
    ///
    /// Not null, and not freed before the guard was pinned.
    #[inline(always)]
    pub unsafe fn deref(&self) -> &'g T {
        // SAFETY: the caller's contract.
        unsafe { &*self.ptr }
    }

    /// # Safety
    ///
    /// As [`deref`](Self::deref), but may be null.
    #[inline(always)]
    pub unsafe fn as_ref(&self) -> Option<&'g T> {
        // SAFETY: the caller's contract.
        unsafe { self.ptr.as_ref() }
    }

    /// # Safety
    ///
    /// Not null, and no other thread can reach it any more.
    pub unsafe fn into_owned(self) -> Owned<T> {
        // SAFETY: the caller's contract; made by `Box::into_raw`.
        Owned(unsafe { Box::from_raw(self.ptr) })
    }
}

/// A heap object not yet shared.
#[derive(Debug)]
pub struct Owned<T>(Box<T>);

impl<T> Owned<T> {
    pub fn new(value: T) -> Self {
        Owned(Box::new(value))
    }

    pub fn into_shared<'g>(self, _guard: &'g Guard) -> Shared<'g, T> {
        Shared { ptr: Box::into_raw(self.0), _guard: PhantomData }
    }
}

#[cfg(all(test, not(ratomic_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    const MAGIC: u64 = 0x5eed_cafe_f00d_beef;

    /// One advance attempt and the frees it makes due, now: a collection
    /// that is not one of the throttled automatic ones.
    fn collect_now() {
        pin().flush_now();
    }

    /// An object whose drop poisons it before freeing it.
    struct Object([u64; 8]);

    impl Drop for Object {
        fn drop(&mut self) {
            for w in &mut self.0 {
                // SAFETY: a plain write through a live `&mut`; volatile so it
                // is not elided as a dead store before the free.
                unsafe { std::ptr::write_volatile(w, 0xdead) };
            }
        }
    }

    /// Real threads, real `membarrier` (where the platform has it): readers
    /// pin and check every word of the object they loaded many times while
    /// writers replace it and retire the old one. A free under a pinned
    /// reader shows as a poisoned or reused word. Every retired object is
    /// freed in the end.
    #[test]
    fn readers_never_see_a_freed_object_while_writers_retire() {
        static DROPPED: AtomicUsize = AtomicUsize::new(0);
        struct Counted(Object);
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
        let shared = Arc::new(Atomic::new(Counted(Object([MAGIC; 8]))));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let retired = Arc::new(AtomicUsize::new(0));
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (shared, stop) = (shared.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut reads = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let guard = pin();
                        // SAFETY: never null; freed only through the epoch.
                        let object = unsafe { shared.load(Ordering::Acquire, &guard).deref() };
                        for _ in 0..4 {
                            for w in &object.0 .0 {
                                // SAFETY: a read of a live object, volatile so each pass rereads.
                                assert_eq!(unsafe { std::ptr::read_volatile(w) }, MAGIC, "read after free");
                            }
                        }
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (shared, retired) = (shared.clone(), retired.clone());
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        let guard = pin();
                        let new = Owned::new(Counted(Object([MAGIC; 8]))).into_shared(&guard);
                        let old = Shared { ptr: shared.ptr.swap(new.ptr, Ordering::AcqRel), _guard: PhantomData };
                        // SAFETY: swapped out above, retired once.
                        unsafe { guard.defer_destroy(old) };
                        retired.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
        assert!(reads > 0);
        // Nobody else pinned: a few advances free everything retired.
        for _ in 0..4 {
            collect_now();
        }
        // Other tests of this binary run concurrently and may be pinned:
        // wait for them, boundedly.
        for _ in 0..10_000 {
            if DROPPED.load(Ordering::Relaxed) == retired.load(Ordering::Relaxed) {
                break;
            }
            collect_now();
            std::thread::yield_now();
        }
        assert_eq!(DROPPED.load(Ordering::Relaxed), retired.load(Ordering::Relaxed), "every retired object is freed");
    }

    /// A free deferred on a thread that then exits runs later, elsewhere.
    #[test]
    fn an_exiting_thread_hands_its_frees_over() {
        static FREED: AtomicUsize = AtomicUsize::new(0);
        unsafe fn count(_: usize) {
            FREED.fetch_add(1, Ordering::Relaxed);
        }
        std::thread::spawn(|| {
            let guard = pin();
            // SAFETY: nothing is freed.
            unsafe { guard.defer(count, 0) };
        })
        .join()
        .unwrap();
        for _ in 0..10_000 {
            if FREED.load(Ordering::Relaxed) == 1 {
                break;
            }
            collect_now();
            std::thread::yield_now();
        }
        assert_eq!(FREED.load(Ordering::Relaxed), 1);
    }

    /// A thread pinned in the parent at a `fork` does not hold back the
    /// child's frees (the child has only the forking thread).
    #[test]
    fn a_thread_pinned_at_a_fork_does_not_stall_the_child() {
        static FREED: AtomicUsize = AtomicUsize::new(0);
        unsafe fn count(_: usize) {
            FREED.fetch_add(1, Ordering::Relaxed);
        }
        init();
        let (pinned_tx, pinned_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _guard = pin();
            pinned_tx.send(()).unwrap();
            done_rx.recv().unwrap();
        });
        pinned_rx.recv().unwrap();
        // SAFETY: the child only pins, defers, collects and `_exit`s; it
        // takes no lock another thread of the parent may have held.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            {
                let guard = pin();
                // SAFETY: nothing is freed.
                unsafe { guard.defer(count, 0) };
            }
            let mut freed = false;
            for _ in 0..8 {
                collect_now();
                if FREED.load(Ordering::Relaxed) == 1 {
                    freed = true;
                    break;
                }
            }
            // SAFETY: ends the child without running the parent's atexit work.
            unsafe { libc::_exit(if freed { 0 } else { 1 }) };
        }
        assert!(pid > 0, "fork failed");
        let mut status = 0;
        // SAFETY: waits for the child just made.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the child's deferred free never ran (status {status:#x})"
        );
    }

    /// Nested pins count; only the outermost unpins.
    #[test]
    fn nested_pins_unpin_at_the_outermost() {
        let outer = pin();
        let inner = pin();
        drop(inner);
        // SAFETY: pinned, so registered.
        let local = HANDLE.with(|h| unsafe { &*h.local.get() });
        assert_ne!(local.epoch.load(Ordering::Relaxed), 0, "still pinned");
        drop(outer);
        assert_eq!(local.epoch.load(Ordering::Relaxed), 0);
    }
}
