//! The shared table's protocol: a fixed region of atomic words that several
//! *processes* change by compare-and-swap, any of which may be killed at any
//! instruction.
//!
//! It is the in-process table's protocol (`store/table.rs`) over a region
//! that cannot grow or point at a heap: open addressing from a key's home
//! slot, a free slot claimed by one CAS, the key written and then checked
//! to be its only copy before it is published, operations that run on the
//! states and then re-read the slot (running again if the slot changed
//! hands meanwhile, `cells.rs`), credits under a per-slot
//! lock, and forgotten keys remembered by a join. What differs is what a
//! dead process forces: every transient slot state names its owner, and
//! anyone who finds one whose owner is gone rolls it back (or forward) with
//! one CAS; there is no migration (the table is sized once, from
//! `max_keys`); and maintenance takes no lock at all (below). What a
//! *stopped* process (SIGSTOP: alive, not moving) forces is a bound on
//! every wait (invariant 6).
//!
//! # Layout
//!
//! `cap` slots of `2 + width` words: a control word, the key's fingerprint
//! (a 64-bit hash of the key under the file's own random seed, never 0) and
//! the key's `width` state words (one per limit). Keys are stored by
//! fingerprint only — a region shared between processes cannot point at a
//! heap — so two keys whose fingerprints collide share one state: each
//! then gets *less*, never more, than its limit (about one pair in 2^64 /
//! (keys held)²; the seed is secret to the processes that open the file, so
//! callers cannot aim for a collision).
//!
//! Then the **floor**: `cells` × `width` words, cell `fp mod cells` the join
//! of every state forgotten from a key hashing to it (every idle key, and
//! under [`Eviction::Strict`](crate::Eviction::Strict) every evicted key).
//! A key the table does not hold starts from its cell. An idle state says
//! nothing about a call stamped at or after the moment it was forgotten, so
//! joining it changes no such decision; a call stamped earlier (a process
//! that read the clock before another's `gc`, an `*_at` caller going back
//! in time) gets an answer at least as restrictive as the forgotten state's.
//! Joins are word by word, each a CAS loop towards the more restrictive
//! value, so any interleaving of them — and a joiner killed half-way — leaves
//! each word at least as restrictive as every completed join asked.
//!
//! # The control word
//!
//! `kind` (3 bits) · `gen` (29 bits) · `owner` (32 bits). `owner` names the
//! process that holds a transient kind (see `file.rs`: pid and a tag of its
//! start time, so a reused pid is not taken for its dead holder); `gen`
//! changes every time the slot stops holding a key, and whenever a forget is
//! cancelled, so a control word read once identifies one tenure of one key
//! (wrapping would need 2^29 reuses of one slot during one call).
//!
//! ```text
//! EMPTY ─claim→ CLAIMED(g) ─(fp, states written)→ BUSY(g) ─publish→ LIVE(g) ─hold→ HELD(g) ─release→ LIVE(g)
//!                  │                                 │                │
//!                  └───recover (owner dead)──────────┴─lost→ DEAD(g+1)│─forget→ FORGET(g) ─drop→ DEAD(g+1) ─claim→ CLAIMED(g+1)
//!                                                                     │            ├─keep→ LIVE(g)
//!                                                                     │            └─cancel/recover→ LIVE(g+1)
//! ```
//!
//! # Invariants (each holds at every instruction of every process)
//!
//! 1. **No lock anyone waits on while its holder is dead.** The transient
//!    kinds (CLAIMED, BUSY, FORGET, HELD) carry their
//!    owner; any process that finds one whose owner is dead recovers it with
//!    one CAS: CLAIMED/BUSY → DEAD (the interrupted insert never happened),
//!    FORGET → LIVE(g+1) (the forget never happened: a forget changes no
//!    state word), HELD → LIVE(g) (a credit in progress is partly applied,
//!    which gives back no more than the whole credit would).
//! 2. **A key is read only from LIVE or HELD slots** (and FORGET, which a
//!    lookup cancels first): its fingerprint and states are written before
//!    the CAS that makes it BUSY, and BUSY becomes LIVE only by its owner's
//!    CAS after the uniqueness check. A slot whose insert was interrupted
//!    is never read as a key.
//! 3. **At most one LIVE/HELD/FORGET copy of a fingerprint.** An inserter's
//!    slot is BUSY during its check (`verify`): a LIVE/HELD/FORGET copy wins
//!    over it; of two BUSY copies the earlier in the probe order wins and
//!    kills the later (BUSY → DEAD), which its owner learns when its
//!    publishing CAS fails. A CLAIMED slot is skipped without waiting: its
//!    owner checks after it becomes BUSY, and will see ours (control words
//!    are SeqCst).
//! 4. **A charge is judged on the key it landed on.** An operation reads the
//!    control word `c` (LIVE/HELD of generation g), changes the states by
//!    CAS, and then re-reads the control word: unless it is still LIVE(g) or
//!    HELD(g), the slot was forgotten (or reused) meanwhile and the
//!    operation runs again; what it did stays (`cells.rs`: taken back by a
//!    CAS, it could erase another key's equal state). A forget decides on
//!    the states it reads *after* its FORGET CAS and joins them into the
//!    floor *before* the slot turns DEAD, so a charge is either seen by it
//!    (and then counted once more when the call runs again, on the key's
//!    new copy, which starts from the floor) or sees FORGET/DEAD and runs
//!    again (left on a slot whose next key's insert overwrites it).
//! 5. **Credits never land on another key.** A credit (refund, give-back,
//!    reset) first turns LIVE(g) into HELD(g) — which no forget can take, so
//!    the slot cannot change key while it is held — and releases it
//!    afterwards. Charges do not wait on HELD; only other credits of that
//!    key do, while the holder is alive. A refund or reset bumps the key's
//!    credit counter (the header's, striped by fingerprint) after its writes
//!    and before it releases the slot, and a give-back, HELD, keeps its
//!    charges if the counter moved since the call read it before charging
//!    (`cells::Mark`): else a call charged after the refund to exactly the
//!    value the give-back restores from would be erased. Recovering a dead
//!    holder's HELD slot bumps the counter too (the dead credit may have
//!    written and not bumped).
//! 6. **Nothing waits on a dead process, nor long on a stopped one.**
//!    Lookups skip CLAIMED/BUSY slots and cancel FORGET ones, and a dead
//!    owner's slot is recovered. Two waits are left, each on one key and
//!    bounded: an inserter that meets an earlier BUSY copy of its key loses
//!    and tries again, and once that copy has stayed BUSY for [`TAKE_OVER`]
//!    (10 ms) it kills it, BUSY → DEAD (safe whatever its owner does next:
//!    an unpublished copy was never charged, and its owner's publishing
//!    CAS fails); a credit that meets its key HELD by a live process waits,
//!    and after [`GIVE_UP`] (100 ms) gives up having changed nothing — a
//!    give-back is dropped (the call keeps its charge: it can only deny
//!    more), a refund or a reset fails with an error. Charges never wait on
//!    a held key, and maintenance waits on nobody.
//!
//! 7. **A key comes back as its floor cell stands when it is published.**
//!    An absent key's states are computed from its cell; after the
//!    inserter's check (`verify`) and before it publishes, it reads the
//!    cell again and gives the insert up (the call runs again) if the cell
//!    changed. Otherwise a copy of the key inserted after ours was computed,
//!    charged and forgotten before our check — its slot DEAD, so the check
//!    passed it, and its charges joined into the cell — would have those
//!    charges granted twice: an over-grant the stress test found under
//!    eviction. Once our copy has passed its check no other copy can be
//!    published before it (invariant 3), so nothing can slip in later.
//!
//! The key count (`live`) steers the `max_keys` policy only; a process
//! killed between its count and its publish leaves it one too high (only
//! ever high) until a `gc` recounts.
//!
//! # Maintenance
//!
//! Incremental, bounded per call, and lock-free. An insert that finds
//! `max_keys` keys held makes room for itself (`make_room`): it takes the
//! next [`STEP`] (64) slots from a shared hand (a `fetch_add`, so
//! concurrent inserts take different slots), forgets the idle keys among
//! them, or else evicts the key closest to idle if those slots hold their
//! share of the keys; at most [`MAX_STEPS`] (8) such steps, 512 slots,
//! whatever `max_keys` is. `gc` is one pass over the slots that forgets
//! idle keys one by one (each forget holds one slot for a few
//! instructions). Every forget is the per-slot protocol above, so any
//! number of processes maintain the table at once, and none waits for
//! another: a process stopped mid-maintenance holds at most the one slot
//! it is forgetting, which a lookup of its key takes back.
//!
//! # Backing store
//!
//! The file is sparse (see `file.rs`): the slots have backing store only
//! where it was reserved (`fallocate`) before any write, one chunk (a page)
//! at a time, recorded in a bitmap ([`Backed`]). A call reserves its key's
//! window before it starts, so the table only ever writes to reserved
//! chunks; a scan (a maintenance step, `gc`, a count) skips a chunk whose
//! bit is clear, whose slots were never written (all EMPTY) — it never
//! reads a hole, which on tmpfs would allocate a page (and raise SIGBUS on
//! a full file system) as a write does.

use crate::store::cells::{Cells, Frozen, FIRST_MARKER};
use crate::store::{on_copy, Credit, Mark, Retention, Scratch, MAX_WIDTH};
use crate::sync::{AtomicU64, Backoff, Ordering};

pub(crate) const EMPTY: u64 = 0;
pub(crate) const CLAIMED: u64 = 1;
pub(crate) const BUSY: u64 = 2;
pub(crate) const LIVE: u64 = 3;
pub(crate) const HELD: u64 = 4;
pub(crate) const FORGET: u64 = 5;
pub(crate) const DEAD: u64 = 6;

const GEN_MASK: u64 = (1 << 29) - 1;

#[inline]
pub(crate) fn kind(c: u64) -> u64 {
    c >> 61
}
#[inline]
pub(crate) fn generation(c: u64) -> u64 {
    (c >> 32) & GEN_MASK
}
#[inline]
pub(crate) fn owner(c: u64) -> u32 {
    c as u32
}
#[inline]
pub(crate) fn ctl(kind: u64, generation: u64, owner: u32) -> u64 {
    (kind << 61) | ((generation & GEN_MASK) << 32) | u64::from(owner)
}

/// Words from one credit counter to the next (a cache line each).
pub(crate) const CREDIT_STRIDE: usize = 8;

/// Most slots a key may be from its home. At the table's load (at most
/// one half) a window this long is full about once in 2^40 keys; then the
/// key closest to full in the window is evicted to make room.
pub(crate) const WINDOW: usize = 64;

/// Slots one maintenance step looks at (see `make_room`): at the table's
/// load of at most one half, about 32 keys.
pub(crate) const STEP: usize = 64;

/// The most steps one insert into a full table takes (see `make_room`), so
/// the most slots it looks at is `STEP × MAX_STEPS` (512), whatever
/// `max_keys` is.
pub(crate) const MAX_STEPS: usize = 8;

/// The calling process, and how to tell whether another is still running.
pub(crate) struct Ctx<'a> {
    /// This process's owner id (never 0).
    pub(crate) me: u32,
    /// Whether the process with this owner id may still be running (false
    /// only when it is certainly gone).
    pub(crate) alive: &'a (dyn Fn(u32) -> bool + Sync),
    /// Models only: steps left before this thread "is killed" (stops
    /// forever, as a SIGKILLed process does).
    #[cfg(ratomic_loom)]
    pub(crate) budget: std::cell::Cell<usize>,
    /// Models only: marks this process dead, at the instant it is killed.
    #[cfg(ratomic_loom)]
    pub(crate) on_kill: &'a (dyn Fn() + Sync),
}

/// Why a protocol stopped before finishing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Halt {
    /// The thread was stopped by a model (stands for a killed process).
    /// Never returned outside the models.
    #[cfg_attr(not(ratomic_loom), allow(dead_code))]
    Killed,
    /// A credit (a refund or a reset) met its key's slot held by another
    /// process (this owner id) that is alive but has not released it within
    /// [`GIVE_UP`]: stopped (SIGSTOP), or starved of CPU. Nothing was
    /// changed.
    Stalled(u32),
}

/// How long an insert waits on an earlier, unpublished copy of its key that
/// another live process is inserting (BUSY) before it kills that copy
/// (always safe: an unpublished copy was never charged; its owner, if it
/// runs again, sees its publishing CAS fail and goes round again).
#[cfg(not(ratomic_loom))]
pub(crate) const TAKE_OVER: std::time::Duration = std::time::Duration::from_millis(10);
/// How long a credit waits on its key's slot HELD by another live process
/// before it gives up: a give-back is dropped (the call keeps its charge,
/// which can only deny more), a refund or reset fails with an error. Longer
/// than [`TAKE_OVER`]: a holder merely preempted should not fail a refund.
#[cfg(not(ratomic_loom))]
pub(crate) const GIVE_UP: std::time::Duration = std::time::Duration::from_millis(100);

/// Counts how long one slot has stayed in one transient state another live
/// process holds it in. In production, time; in the models, sightings (a
/// model's "time" is the scheduler's: the second sighting of the same
/// control word stands for a holder that has not moved for the bound, so
/// the models explore acting both before and after the holder resumes).
pub(crate) struct Patience {
    seen: Option<(usize, u64)>,
    #[cfg(not(ratomic_loom))]
    since: Option<std::time::Instant>,
}

impl Patience {
    pub(crate) fn new() -> Self {
        Patience {
            seen: None,
            #[cfg(not(ratomic_loom))]
            since: None,
        }
    }

    /// Whether slot `i` has read `c` for at least `bound` (each new slot
    /// or word starts the count again).
    #[cfg_attr(ratomic_loom, allow(unused_variables))]
    fn out(&mut self, i: usize, c: u64, bound: std::time::Duration) -> bool {
        if self.seen != Some((i, c)) {
            self.seen = Some((i, c));
            #[cfg(not(ratomic_loom))]
            {
                self.since = None;
            }
            return false;
        }
        #[cfg(ratomic_loom)]
        {
            true
        }
        #[cfg(not(ratomic_loom))]
        {
            let since = *self.since.get_or_insert_with(std::time::Instant::now);
            since.elapsed() >= bound
        }
    }
}

/// The bounds the models use (any: see [`Patience`]).
#[cfg(ratomic_loom)]
pub(crate) const TAKE_OVER: std::time::Duration = std::time::Duration::ZERO;
#[cfg(ratomic_loom)]
pub(crate) const GIVE_UP: std::time::Duration = std::time::Duration::ZERO;

/// One step of a protocol after which a process may die. Free outside
/// the models.
macro_rules! step {
    ($ctx:expr) => {
        #[cfg(ratomic_loom)]
        {
            let b = $ctx.budget.get();
            if b == 0 {
                ($ctx.on_kill)();
                return Err(Halt::Killed);
            }
            $ctx.budget.set(b - 1);
        }
    };
}

/// What a probe found.
enum Find {
    /// The key is held in slot `i`, whose control word read `c`.
    Found(usize, u64),
    /// Absent; where it may be inserted (the first DEAD slot, else the EMPTY
    /// one that ends the probe), with the control word to claim it from.
    Absent(Option<(usize, u64)>),
}

/// Why a key is being forgotten.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Why {
    /// Only if it carries no information (`gc`).
    Idle,
    /// To make room (`max_keys`, or a full probe window).
    Evict,
}

/// The words a table lives in (see the module docs).
pub(crate) struct Region<'a> {
    pub(crate) slots: &'a [AtomicU64],
    pub(crate) floor: &'a [AtomicU64],
    /// Keys published (the `max_keys` policy's count; see the module docs).
    pub(crate) live: &'a AtomicU64,
    /// The maintenance hand: slots handed out to maintenance steps so far
    /// (a step looks at the next [`STEP`] slots, modulo `cap`).
    pub(crate) hand: &'a AtomicU64,
    /// The keys' credit counters (see `Mark`): a power of two of
    /// stripes, each the first word of [`CREDIT_STRIDE`], bumped by every
    /// refund and reset after its writes, while it holds the slot.
    pub(crate) credits: &'a [AtomicU64],
    /// Which chunks of `slots` have backing store (see the module docs);
    /// `None`: all of them.
    pub(crate) backed: Option<Backed<'a>>,
}

/// The chunks of the slots that have backing store reserved: one bit per
/// chunk of `1 << shift` words, set (after the reservation succeeded) and
/// never cleared. A chunk whose bit is clear was never written: its words
/// are all zero (EMPTY slots), known without reading them.
pub(crate) struct Backed<'a> {
    pub(crate) bits: &'a [AtomicU64],
    pub(crate) shift: u32,
}

impl Backed<'_> {
    /// Whether word `w` of the slots has backing store.
    #[inline]
    pub(crate) fn has(&self, w: usize) -> bool {
        let c = w >> self.shift;
        self.bits[c / 64].load(Ordering::Acquire) & (1 << (c % 64)) != 0
    }
}

/// A fixed region of slots (see the module docs).
pub(crate) struct Table<'a> {
    r: Region<'a>,
    cap: usize,
    /// Slots a key may be from its home: probes end there (chains need no
    /// EMPTY end, so slots freed by forgetting — DEAD, never EMPTY again —
    /// cannot make probes long).
    window: usize,
    width: usize,
    stride: usize,
    cell_mask: usize,
    max_keys: usize,
    /// Evicted keys are joined into the floor (`Eviction::Strict`).
    strict: bool,
}

impl<'a> Table<'a> {
    /// A table over `r` (whose `slots` hold `cap` slots and `floor` a power
    /// of two of cells) for `width` state words per key.
    #[cfg_attr(not(ratomic_loom), allow(dead_code))]
    pub(crate) fn new(r: Region<'a>, width: usize, max_keys: usize, strict: bool) -> Self {
        let (cap, cells) = (r.slots.len() / (2 + width), r.floor.len() / width);
        Self::with_sizes(r, cap, cells, width, max_keys, strict)
    }

    /// [`new`](Self::new) for sizes already known (no division on the way
    /// to every call).
    #[inline]
    pub(crate) fn with_sizes(
        r: Region<'a>,
        cap: usize,
        cells: usize,
        width: usize,
        max_keys: usize,
        strict: bool,
    ) -> Self {
        debug_assert!(cap > 0 && cells.is_power_of_two() && (1..=MAX_WIDTH).contains(&width));
        debug_assert!(r.slots.len() == cap * (2 + width) && r.floor.len() == cells * width);
        Table { r, cap, window: cap.min(WINDOW), width, stride: 2 + width, cell_mask: cells - 1, max_keys, strict }
    }

    /// Words the slots of `cap` slots occupy.
    pub(crate) fn slot_words(cap: usize, width: usize) -> usize {
        cap * (2 + width)
    }

    #[cfg_attr(ratomic_loom, allow(dead_code))]
    /// Floor cells for `max_keys` keys: a quarter as many, a power of two.
    pub(crate) fn cells_for(max_keys: usize) -> usize {
        (max_keys / 4).clamp(8, 1 << 30).next_power_of_two()
    }

    #[inline]
    fn control(&self, i: usize) -> &AtomicU64 {
        &self.r.slots[i * self.stride]
    }
    #[inline]
    fn fp(&self, i: usize) -> &AtomicU64 {
        &self.r.slots[i * self.stride + 1]
    }
    #[inline]
    fn states(&self, i: usize) -> &[AtomicU64] {
        let at = i * self.stride + 2;
        &self.r.slots[at..at + self.width]
    }
    #[inline]
    fn cell(&self, fp: u64) -> &[AtomicU64] {
        // Bit 0 of a fingerprint is always set: use the bits above it.
        let at = ((fp >> 1) as usize & self.cell_mask) * self.width;
        &self.r.floor[at..at + self.width]
    }
    #[inline]
    fn load(&self, i: usize) -> u64 {
        self.control(i).load(Ordering::SeqCst)
    }
    /// The control word by a read-modify-write, which reads the latest
    /// value in its modification order: two inserters of one key each make
    /// their slot BUSY and then read the other's slot, and with these reads
    /// at least one sees the other's BUSY under any model of the memory
    /// order, not only under SeqCst's total order (loom's model of SeqCst
    /// is weaker). Inserts only.
    #[inline]
    fn load_latest(&self, i: usize) -> u64 {
        self.control(i).fetch_add(0, Ordering::SeqCst)
    }
    #[inline]
    fn cas(&self, i: usize, from: u64, to: u64) -> Result<(), u64> {
        self.control(i).compare_exchange(from, to, Ordering::SeqCst, Ordering::SeqCst).map(drop)
    }
    /// The credit counter of fingerprint `fp`.
    #[inline]
    fn credits(&self, fp: u64) -> &AtomicU64 {
        let stripes = self.r.credits.len() / CREDIT_STRIDE;
        debug_assert!(stripes.is_power_of_two() && self.r.credits.len() == stripes * CREDIT_STRIDE);
        &self.r.credits[(((fp >> 32) as usize) & (stripes - 1)) * CREDIT_STRIDE]
    }

    #[inline]
    fn home(&self, fp: u64) -> usize {
        crate::store::table::home_slot(fp, self.cap)
    }
    #[inline]
    fn next(&self, i: usize) -> usize {
        if i + 1 == self.cap {
            0
        } else {
            i + 1
        }
    }

    /// Recovers slot `i` (control `c`, a transient kind) if its owner is
    /// dead (invariant 1). Returns the control word to go on with.
    fn recover(&self, ctx: &Ctx<'_>, i: usize, c: u64) -> u64 {
        let o = owner(c);
        if o == ctx.me || (ctx.alive)(o) {
            return c;
        }
        let to = match kind(c) {
            CLAIMED | BUSY => ctl(DEAD, generation(c) + 1, 0),
            FORGET => ctl(LIVE, generation(c) + 1, 0),
            HELD => {
                // The dead holder may have been a refund or a reset that
                // wrote and did not get to bump its counter: bump it.
                self.credits(self.fp(i).load(Ordering::Relaxed)).fetch_add(1, Ordering::SeqCst);
                ctl(LIVE, generation(c), 0)
            }
            _ => return c,
        };
        match self.cas(i, c, to) {
            Ok(()) => to,
            Err(now) => now,
        }
    }

    /// Finds `fp` (invariants 2 and 6: never waits).
    fn find(&self, ctx: &Ctx<'_>, fp: u64) -> Find {
        let mut i = self.home(fp);
        let mut free = None;
        for _ in 0..self.window {
            let mut c = self.load(i);
            loop {
                match kind(c) {
                    EMPTY => return Find::Absent(free.or(Some((i, c)))),
                    DEAD => {
                        free.get_or_insert((i, c));
                    }
                    LIVE | HELD => {
                        if self.fp(i).load(Ordering::Relaxed) == fp {
                            return Find::Found(i, c);
                        }
                    }
                    FORGET if self.fp(i).load(Ordering::Relaxed) == fp => {
                        // Ours, being forgotten: cancel the forget (always
                        // safe: it has not touched the states) and use it.
                        let to = ctl(LIVE, generation(c) + 1, 0);
                        c = match self.cas(i, c, to) {
                            Ok(()) => to,
                            Err(now) => now,
                        };
                        continue;
                    }
                    _ => {
                        let r = self.recover(ctx, i, c);
                        if r != c {
                            c = r;
                            continue;
                        }
                    }
                }
                break;
            }
            i = self.next(i);
        }
        Find::Absent(free)
    }

    /// What a key the table does not hold starts from: its floor cell.
    fn initial(&self, fp: u64) -> [u64; MAX_WIDTH] {
        let mut s = [0u64; MAX_WIDTH];
        for (s, w) in s.iter_mut().zip(self.cell(fp)) {
            *s = w.load(Ordering::SeqCst);
            // Only a corrupted file holds a marker here: read it as pristine.
            if *s >= FIRST_MARKER {
                *s = 0;
            }
        }
        s
    }

    /// Runs `op` on the states of `fp`, inserting it (from its floor cell)
    /// if `op` changes a key the table does not hold. `MARK`: read the
    /// key's credit counter first, for `op` to give back (see `Mark`).
    pub(crate) fn update<const MARK: bool, R>(
        &self,
        ctx: &Ctx<'_>,
        fp: u64,
        now: u64,
        retention: &impl Retention,
        op: &mut impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
    ) -> Result<R, Halt> {
        let mut backoff = Backoff::new();
        let mut patience = Patience::new();
        loop {
            // Before this run's first charge (see `Mark`); a run that goes
            // round again leaves its charges where they landed.
            let mark = if MARK { Mark(self.credits(fp).load(Ordering::SeqCst)) } else { Mark::default() };
            match self.find(ctx, fp) {
                Find::Found(i, c) => {
                    let mut cells = Cells::new(self.states(i), mark);
                    let r = op(&mut cells);
                    step!(ctx);
                    // Invariant 4.
                    let after = self.load(i);
                    match r {
                        Ok(r) if generation(after) == generation(c) && matches!(kind(after), LIVE | HELD) => {
                            if let Some(give_back) = cells.to_give_back() {
                                // As in the in-memory store: the slot held the
                                // key throughout; take the changes back held.
                                let mut op = |cells: &mut Cells<'_>| {
                                    give_back.apply(cells);
                                    Ok(())
                                };
                                // A give-back is never refused: it is dropped
                                // (the charge kept) if it cannot be applied.
                                self.credit(ctx, fp, now, retention, Credit::GiveBack(give_back.mark), &mut op)?;
                            }
                            return Ok(r);
                        }
                        // What the call changed stays (see `cells.rs`): the
                        // slot may hold another key's equal state by now.
                        _ => {}
                    }
                }
                Find::Absent(free) => {
                    let floor = self.initial(fp);
                    let mut words = Scratch(floor);
                    let (r, changed) = on_copy(&mut words, self.width, mark, op);
                    if !changed {
                        return Ok(r);
                    }
                    match self.insert(ctx, fp, free, &words.0[..self.width], &floor, now, retention)? {
                        Insert::Done => return Ok(r),
                        Insert::Retry => {}
                        Insert::Blocked(j, c) => self.wait_on_copy(ctx, &mut patience, j, c)?,
                    }
                    // Another process is inserting the key, or took the
                    // slot: give it a moment.
                    backoff.snooze();
                }
            }
        }
    }

    /// An insert lost to an earlier copy of its key, BUSY in slot `j` as
    /// `c`, that another live process is inserting: once it has stayed so
    /// for [`TAKE_OVER`], kills it (invariant 6).
    #[cfg_attr(not(ratomic_loom), allow(unused_variables))]
    fn wait_on_copy(&self, ctx: &Ctx<'_>, patience: &mut Patience, j: usize, c: u64) -> Result<(), Halt> {
        if patience.out(j, c, TAKE_OVER) {
            step!(ctx);
            let _ = self.cas(j, c, ctl(DEAD, generation(c) + 1, 0));
        }
        Ok(())
    }

    /// Runs a crediting `op` on `fp`'s states while its slot is HELD
    /// (invariant 5). A key the table does not hold is inserted with what
    /// `op` changed if the credit [inserts](Credit::inserts), else left
    /// alone (`None`), as is a key whose credit counter moved since a
    /// give-back's mark. A refund or a reset bumps the key's credit counter
    /// after its writes, still HELD (see `Mark`). A slot another live
    /// process has held for [`GIVE_UP`] drops a give-back (`None`) and
    /// fails a refund or a reset ([`Halt::Stalled`]), changing nothing.
    pub(crate) fn credit<R>(
        &self,
        ctx: &Ctx<'_>,
        fp: u64,
        now: u64,
        retention: &impl Retention,
        credit: Credit,
        op: &mut impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
    ) -> Result<Option<R>, Halt> {
        let mut backoff = Backoff::new();
        let mut patience = Patience::new();
        loop {
            match self.find(ctx, fp) {
                Find::Found(i, c) if kind(c) == HELD => {
                    // Another credit of this key: wait for it (or recover it).
                    if self.recover(ctx, i, c) == c {
                        if patience.out(i, c, GIVE_UP) {
                            return match credit {
                                Credit::GiveBack(_) => Ok(None),
                                _ => Err(Halt::Stalled(owner(c))),
                            };
                        }
                        backoff.snooze();
                    }
                }
                Find::Found(i, c) => {
                    let held = ctl(HELD, generation(c), ctx.me);
                    if self.cas(i, c, held).is_err() {
                        continue;
                    }
                    step!(ctx);
                    if credit.stale(self.credits(fp).load(Ordering::SeqCst)) {
                        let _ = self.cas(i, held, ctl(LIVE, generation(c), 0));
                        return Ok(None);
                    }
                    let mut cells = Cells::new(self.states(i), Mark::default());
                    let r = op(&mut cells);
                    step!(ctx);
                    if credit.bumps() {
                        self.credits(fp).fetch_add(1, Ordering::SeqCst);
                        step!(ctx);
                    }
                    // Only we release a slot we hold while we live.
                    let _ = self.cas(i, held, ctl(LIVE, generation(c), 0));
                    if let Ok(r) = r {
                        return Ok(Some(r));
                    }
                }
                Find::Absent(free) => {
                    if !credit.inserts() {
                        return Ok(None);
                    }
                    // Before the credited key can be published.
                    self.credits(fp).fetch_add(1, Ordering::SeqCst);
                    let floor = self.initial(fp);
                    let mut words = Scratch(floor);
                    let (r, changed) = on_copy(&mut words, self.width, Mark::default(), op);
                    if !changed {
                        return Ok(Some(r));
                    }
                    match self.insert(ctx, fp, free, &words.0[..self.width], &floor, now, retention)? {
                        Insert::Done => return Ok(Some(r)),
                        Insert::Retry => {}
                        Insert::Blocked(j, c) => self.wait_on_copy(ctx, &mut patience, j, c)?,
                    }
                    backoff.snooze();
                }
            }
        }
    }

    /// Makes `fp` a full bucket: a credit that writes the pristine states.
    /// A key the table does not hold is inserted full only when its floor
    /// cell would make it start less than full.
    pub(crate) fn reset(&self, ctx: &Ctx<'_>, fp: u64, now: u64, retention: &impl Retention) -> Result<(), Halt> {
        let mut pristine = [0u64; MAX_WIDTH];
        retention.pristine(&mut pristine[..self.width]);
        let insert = retention.idle_after(&self.initial(fp)[..self.width], now) > 0;
        let mut op = |cells: &mut Cells<'_>| -> Result<(), Frozen> {
            for (w, &p) in pristine[..self.width].iter().enumerate() {
                let mut v = cells.load(w)?;
                while v != p {
                    match cells.cas(w, v, p) {
                        Ok(()) => break,
                        Err(crate::store::Conflict::Changed(now)) => v = now,
                        Err(crate::store::Conflict::Frozen) => return Err(Frozen),
                    }
                }
            }
            Ok(())
        };
        self.credit(ctx, fp, now, retention, Credit::Reset { insert }, &mut op).map(drop)
    }

    /// Inserts `fp` with `states`, computed from its floor cell read as
    /// `floor`, at `free` (invariants 3 and 7).
    #[allow(clippy::too_many_arguments)]
    fn insert(
        &self,
        ctx: &Ctx<'_>,
        fp: u64,
        free: Option<(usize, u64)>,
        states: &[u64],
        floor: &[u64; MAX_WIDTH],
        now: u64,
        retention: &impl Retention,
    ) -> Result<Insert, Halt> {
        // Room: at most `max_keys` keys (one bounded maintenance step makes
        // room), and a free slot in the key's window (else the key closest
        // to full in it is evicted).
        if self.r.live.load(Ordering::Relaxed) >= self.max_keys as u64 && self.make_room(ctx, now, retention)? {
            return Ok(Insert::Retry);
        }
        // (Room-making that found no key to forget — the slots it looked at
        // all empty or held by others' calls in flight, a count left high
        // by killed processes — lets the insert go ahead: the table has
        // room for twice `max_keys`, and `gc` recounts.)
        let Some((i, from)) = free else {
            self.evict_window(ctx, fp, now, retention)?;
            return Ok(Insert::Retry);
        };
        let g = generation(from);
        let claimed = ctl(CLAIMED, g, ctx.me);
        if self.cas(i, from, claimed).is_err() {
            return Ok(Insert::Retry);
        }
        step!(ctx);
        self.fp(i).store(fp, Ordering::Relaxed);
        for (w, &v) in self.states(i).iter().zip(states) {
            w.store(v, Ordering::Relaxed);
        }
        step!(ctx);
        let busy = ctl(BUSY, g, ctx.me);
        if self.cas(i, claimed, busy).is_err() {
            return Ok(Insert::Retry);
        }
        self.r.live.fetch_add(1, Ordering::Relaxed);
        step!(ctx);
        let check = self.verify(ctx, fp, i)?;
        step!(ctx);
        // Invariant 7: the states were computed from the floor as read
        // before; a copy of this key published and forgotten since then
        // (its charges now in the floor, its slot DEAD, so `verify` did not
        // see it) would have them lost.
        if check == Check::Unique && self.initial(fp) == *floor && self.cas(i, busy, ctl(LIVE, g, 0)).is_ok() {
            return Ok(Insert::Done);
        }
        // Lost, or killed by an earlier copy (then already DEAD).
        let _ = self.cas(i, busy, ctl(DEAD, g + 1, 0));
        self.r.live.fetch_sub(1, Ordering::Relaxed);
        Ok(match check {
            Check::Busy(j, c) => Insert::Blocked(j, c),
            _ => Insert::Retry,
        })
    }

    /// Whether BUSY slot `mine` holds the only copy of `fp` (invariant 3).
    fn verify(&self, ctx: &Ctx<'_>, fp: u64, mine: usize) -> Result<Check, Halt> {
        let mut i = self.home(fp);
        let mut seen_mine = false;
        for _ in 0..self.window {
            if i == mine {
                seen_mine = true;
            } else {
                let mut c = self.load_latest(i);
                loop {
                    let same = || self.fp(i).load(Ordering::Relaxed) == fp;
                    match kind(c) {
                        EMPTY => return Ok(Check::Unique),
                        DEAD | CLAIMED => {}
                        LIVE | HELD | FORGET if same() => return Ok(Check::Copy),
                        BUSY if same() => {
                            let r = self.recover(ctx, i, c);
                            if r != c {
                                c = r;
                                continue;
                            }
                            if !seen_mine {
                                return Ok(Check::Busy(i, c));
                            }
                            step!(ctx);
                            if let Err(now) = self.cas(i, c, ctl(DEAD, generation(c) + 1, 0)) {
                                c = now;
                                continue;
                            }
                        }
                        _ => {}
                    }
                    break;
                }
            }
            i = self.next(i);
        }
        Ok(Check::Unique)
    }

    /// Joins `states` into `fp`'s floor cell, word by word, each by a CAS
    /// loop towards the more restrictive value.
    fn join(&self, fp: u64, states: &[u64], retention: &impl Retention) {
        for (i, (word, &s)) in self.cell(fp).iter().zip(states).enumerate() {
            let mut cur = word.load(Ordering::SeqCst);
            loop {
                let next = retention.join_word(i, cur, s);
                if next == cur {
                    break;
                }
                match word.compare_exchange(cur, next, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(_) => break,
                    Err(now) => cur = now,
                }
            }
        }
    }

    /// Forgets slot `i`, read LIVE as `c`: for `Why::Idle` only if its
    /// states, read once the slot is taken, carry no information at `now`
    /// (invariant 4). Idle states — and, under `Eviction::Strict`, evicted
    /// ones — are joined into the floor before the slot is freed. True if
    /// it was dropped.
    fn forget(
        &self,
        ctx: &Ctx<'_>,
        i: usize,
        c: u64,
        now: u64,
        retention: &impl Retention,
        why: Why,
    ) -> Result<bool, Halt> {
        let taken = ctl(FORGET, generation(c), ctx.me);
        if self.cas(i, c, taken).is_err() {
            return Ok(false);
        }
        step!(ctx);
        let mut states = [0u64; MAX_WIDTH];
        for (s, w) in states.iter_mut().zip(self.states(i)) {
            *s = w.load(Ordering::SeqCst);
        }
        let idle = retention.idle_after(&states[..self.width], now) == 0;
        if why == Why::Idle && !idle {
            let _ = self.cas(i, taken, ctl(LIVE, generation(c), 0));
            return Ok(false);
        }
        if idle || self.strict {
            self.join(self.fp(i).load(Ordering::Relaxed), &states[..self.width], retention);
        } else {
            // Evicted while not idle, under `Fair`: the key may come back
            // fuller than it left, where a give-back of a charge made
            // before must not land (see `Mark`).
            self.credits(self.fp(i).load(Ordering::Relaxed)).fetch_add(1, Ordering::SeqCst);
        }
        step!(ctx);
        if self.cas(i, taken, ctl(DEAD, generation(c) + 1, 0)).is_ok() {
            self.r.live.fetch_sub(1, Ordering::Relaxed);
            return Ok(true);
        }
        Ok(false)
    }

    /// Evicts the key closest to idle from `fp`'s window, which has no free
    /// slot.
    fn evict_window(&self, ctx: &Ctx<'_>, fp: u64, now: u64, retention: &impl Retention) -> Result<(), Halt> {
        let mut best: Option<(u64, usize, u64)> = None;
        let mut i = self.home(fp);
        for _ in 0..self.window {
            if let Some((w, c)) = self.look(ctx, i, now, retention) {
                if best.is_none_or(|b| w < b.0) {
                    best = Some((w, i, c));
                }
            }
            i = self.next(i);
        }
        match best {
            Some((_, i, c)) => {
                self.forget(ctx, i, c, now, retention, Why::Evict)?;
            }
            None => Backoff::new().snooze(),
        }
        Ok(())
    }

    /// Slot `i` as maintenance sees it: a dead owner's transient state
    /// recovered, and if it then holds a key (LIVE), how long until the
    /// key's states carry no information at `now`, with the control word
    /// read. Slots without backing store are never read (module docs).
    fn look(&self, ctx: &Ctx<'_>, i: usize, now: u64, retention: &impl Retention) -> Option<(u64, u64)> {
        if !self.backed(i) {
            return None;
        }
        let mut c = self.load(i);
        if !matches!(kind(c), EMPTY | DEAD | LIVE) {
            c = self.recover(ctx, i, c);
        }
        if kind(c) != LIVE {
            return None;
        }
        let mut s = [0u64; MAX_WIDTH];
        for (s, word) in s.iter_mut().zip(self.states(i)) {
            *s = word.load(Ordering::Relaxed);
        }
        Some((retention.idle_after(&s[..self.width], now), c))
    }

    /// Makes room for an insert into a table holding `max_keys` keys, in
    /// at most [`MAX_STEPS`] steps, each on the next [`STEP`] slots from
    /// the shared hand: a step forgets every idle key among its slots, and
    /// if that freed nothing and its slots hold at least their share of the
    /// keys, evicts the one closest to idle among them (a step on sparse
    /// slots passes on: evicting one key per step wherever the hand stood
    /// would let the keys of some stretches of the table run out, as a
    /// random walk does). After the last step, the key closest to idle
    /// seen in any. Bounded, and it waits on nobody: any number of
    /// processes make room at once, on different slots. True if it freed a
    /// slot, or lost the key it chose to another call (the insert then
    /// runs again: the table may be full again); false if it found no key
    /// to forget.
    fn make_room(&self, ctx: &Ctx<'_>, now: u64, retention: &impl Retention) -> Result<bool, Halt> {
        let steps = STEP.min(self.cap);
        // Keys a step's slots hold on average.
        let share = (self.r.live.load(Ordering::Relaxed) as usize).min(self.cap) * steps / self.cap;
        let mut best: Option<(u64, usize, u64)> = None;
        for _ in 0..MAX_STEPS {
            let mut i = (self.r.hand.fetch_add(steps as u64, Ordering::Relaxed) % self.cap as u64) as usize;
            let mut freed = false;
            let mut here: Option<(u64, usize, u64)> = None;
            let mut held = 0;
            for _ in 0..steps {
                match self.look(ctx, i, now, retention) {
                    Some((0, c)) => freed |= self.forget(ctx, i, c, now, retention, Why::Idle)?,
                    Some((w, c)) => {
                        held += 1;
                        if here.is_none_or(|b| w < b.0) {
                            here = Some((w, i, c));
                        }
                    }
                    None => {}
                }
                i = self.next(i);
            }
            if freed {
                return Ok(true);
            }
            if held >= share.max(1) {
                if let Some((_, i, c)) = here {
                    self.forget(ctx, i, c, now, retention, Why::Evict)?;
                    return Ok(true);
                }
            }
            if here.is_some_and(|h| best.is_none_or(|b| h.0 < b.0)) {
                best = here;
            }
        }
        match best {
            Some((_, i, c)) => {
                self.forget(ctx, i, c, now, retention, Why::Evict)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Forgets every key that carries no information at `now`, in one pass
    /// over the slots that takes no lock: it waits on nobody, and nobody
    /// waits on it (each forget holds one slot, which a lookup of its key
    /// takes back). Recounts the keys held if no other call changed the
    /// count meanwhile. Returns how many keys were forgotten.
    pub(crate) fn gc(&self, ctx: &Ctx<'_>, now: u64, retention: &impl Retention) -> Result<usize, Halt> {
        let before = self.r.live.load(Ordering::Relaxed);
        let mut dropped = 0;
        let mut held = 0u64;
        for i in 0..self.cap {
            match self.look(ctx, i, now, retention) {
                Some((0, c)) if self.forget(ctx, i, c, now, retention, Why::Idle)? => dropped += 1,
                Some(_) => held += 1,
                None => held += u64::from(self.backed(i) && matches!(kind(self.load(i)), HELD | FORGET | BUSY)),
            }
        }
        // The count is a heuristic (module docs) that only killed processes
        // leave off, always high. Recount only where nothing else moved it,
        // so a pass racing inserts cannot leave it low.
        let _ = self.r.live.compare_exchange(
            before.wrapping_sub(dropped as u64),
            held,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        Ok(dropped)
    }

    /// Whether slot `i`'s control word has backing store (see [`Backed`]).
    #[inline]
    fn backed(&self, i: usize) -> bool {
        self.r.backed.as_ref().is_none_or(|b| b.has(i * self.stride))
    }

    /// Keys held now (a scan: exact when nothing runs concurrently).
    #[cfg_attr(ratomic_loom, allow(dead_code))]
    pub(crate) fn count(&self) -> usize {
        (0..self.cap).filter(|&i| self.backed(i) && matches!(kind(self.load(i)), LIVE | HELD | FORGET)).count()
    }

    /// Fingerprints of every key held (tests: no key is held twice).
    pub(crate) fn fingerprints(&self) -> Vec<u64> {
        (0..self.cap)
            .filter(|&i| self.backed(i) && matches!(kind(self.load(i)), LIVE | HELD | FORGET))
            .map(|i| self.fp(i).load(Ordering::Relaxed))
            .collect()
    }
}

/// What an insert came to.
enum Insert {
    /// Published.
    Done,
    /// Not inserted: run the call again.
    Retry,
    /// Not inserted: an earlier copy of the key is BUSY in slot `.0`,
    /// control word `.1`, held by a live process (see `wait_on_copy`).
    Blocked(usize, u64),
}

/// What an inserter's check of its window found (invariant 3).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Its copy is the only one.
    Unique,
    /// A published copy (LIVE, HELD or FORGET) wins.
    Copy,
    /// An earlier BUSY copy wins, held by a live process: slot, control word.
    Busy(usize, u64),
}
