//! The shared table for loom models (`tests/loom.rs`, cfg `ratomic_loom`):
//! a region of words in this process standing for the file, and
//! "processes" — threads, each with its own owner id — that a model can
//! kill after any step of a protocol. A killed process stops forever (its
//! call returns `None` and touches nothing more), as a SIGKILLed one does,
//! and from then on the others see it as dead. A *stopped* process
//! (SIGSTOP) stops the same way but stays alive to the others: whatever
//! it holds, they must finish without it.

use std::cell::Cell;

use super::table::{Ctx, Halt, Region, Table, CREDIT_STRIDE};
use crate::algorithm::gcra::Gcra;
use crate::algorithm::{charge_in, refund_in};
use crate::quota::Quota;
use crate::store::Credit;
use crate::sync::{AtomicBool, AtomicU64, Ordering};

/// A shared table of token buckets (one word of state per key).
#[allow(missing_debug_implementations)]
pub struct Model {
    slots: Box<[AtomicU64]>,
    floor: Box<[AtomicU64]>,
    live: AtomicU64,
    hand: AtomicU64,
    credits: [AtomicU64; CREDIT_STRIDE],
    dead: Box<[AtomicBool]>,
    gcra: Gcra,
    max_keys: usize,
    strict: bool,
}

impl Model {
    /// `cap` slots, `cells` floor cells (a power of two), at most `max_keys`
    /// keys, for processes `1..=processes`.
    pub fn new(quota: Quota, cap: usize, cells: usize, max_keys: usize, strict: bool, processes: usize) -> Self {
        let words = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect();
        Model {
            slots: words(Table::slot_words(cap, 1)),
            floor: words(cells),
            live: AtomicU64::new(0),
            hand: AtomicU64::new(0),
            credits: std::array::from_fn(|_| AtomicU64::new(0)),
            dead: (0..=processes).map(|_| AtomicBool::new(false)).collect(),
            gcra: Gcra::new(quota),
            max_keys,
            strict,
        }
    }

    fn table(&self) -> Table<'_> {
        Table::new(
            Region {
                slots: &self.slots,
                floor: &self.floor,
                live: &self.live,
                hand: &self.hand,
                credits: &self.credits,
                backed: None,
            },
            1,
            self.max_keys,
            self.strict,
        )
    }

    /// Process `id` (≥ 1), killed after `budget` steps (`usize::MAX`: never).
    pub fn process(&self, id: u32, budget: usize) -> Process<'_> {
        assert!(id >= 1 && (id as usize) < self.dead.len());
        Process { m: self, me: id, budget: Cell::new(budget), stops: false, halted: Cell::new(false) }
    }

    /// Process `id` (≥ 1), stopped after `budget` steps: it never takes
    /// another, and never dies either (a SIGSTOPped process).
    pub fn stopped_process(&self, id: u32, budget: usize) -> Process<'_> {
        assert!(id >= 1 && (id as usize) < self.dead.len());
        Process { m: self, me: id, budget: Cell::new(budget), stops: true, halted: Cell::new(false) }
    }

    /// Keys counted as held (the `max_keys` policy's count).
    pub fn live(&self) -> u64 {
        self.live.load(Ordering::SeqCst)
    }

    /// Fingerprints of the keys held.
    pub fn fingerprints(&self) -> Vec<u64> {
        self.table().fingerprints()
    }
}

/// One process's view of the table.
#[allow(missing_debug_implementations)]
pub struct Process<'a> {
    m: &'a Model,
    me: u32,
    budget: Cell<usize>,
    /// Stopped rather than killed at the end of its budget.
    stops: bool,
    /// Killed or stopped: takes no step again.
    halted: Cell<bool>,
}

impl Process<'_> {
    /// Runs `f` as this process; `None` if it was killed (or stopped) on
    /// the way (it takes no step from then on), `Some(Err(owner))` if it
    /// gave up on a slot process `owner` holds.
    fn run<R>(&self, f: impl FnOnce(&Table<'_>, &Ctx<'_>) -> Result<R, Halt>) -> Option<Result<R, u32>> {
        if self.m.dead[self.me as usize].load(Ordering::SeqCst) || self.halted.get() {
            return None;
        }
        let dead = &self.m.dead;
        let alive = |o: u32| !dead.get(o as usize).is_some_and(|d| d.load(Ordering::SeqCst));
        let me = self.me as usize;
        let stops = self.stops;
        let kill = move || {
            if !stops {
                dead[me].store(true, Ordering::SeqCst);
            }
        };
        let ctx = Ctx { me: self.me, alive: &alive, budget: Cell::new(self.budget.get()), on_kill: &kill };
        let r = f(&self.m.table(), &ctx);
        self.budget.set(ctx.budget.get());
        match r {
            Ok(r) => Some(Ok(r)),
            // Killed: the call stopped forever (and the process is dead, or stopped).
            Err(Halt::Killed) => {
                self.halted.set(true);
                None
            }
            Err(Halt::Stalled(owner)) => Some(Err(owner)),
        }
    }

    /// [`run`](Self::run) for calls that never give up.
    fn run_sure<R>(&self, f: impl FnOnce(&Table<'_>, &Ctx<'_>) -> Result<R, Halt>) -> Option<R> {
        self.run(f).map(|r| r.unwrap_or_else(|o| panic!("gave up on process {o}")))
    }

    /// Takes one token from key `fp` at `now`: whether it was granted.
    pub fn allow(&self, fp: u64, now: u64) -> Option<bool> {
        let g = &self.m.gcra;
        self.run_sure(|t, ctx| {
            t.update::<false, _>(ctx, fp | 1, now, g, &mut |cells| Ok(charge_in(g, cells, 0, now, 1)?.0.allowed))
        })
    }

    /// A call on key `fp` at `now` that charges its token and then gives it
    /// back, as a multi-limit call does when a later limit denies it:
    /// whether its charge was allowed.
    pub fn charge_and_give_back(&self, fp: u64, now: u64) -> Option<bool> {
        let g = &self.m.gcra;
        self.run_sure(|t, ctx| {
            t.update::<true, _>(ctx, fp | 1, now, g, &mut |cells| {
                let allowed = charge_in(g, cells, 0, now, 1)?.0.allowed;
                cells.give_back();
                Ok(allowed)
            })
        })
    }

    /// Gives `tokens` back to key `fp` at `now`.
    pub fn refund(&self, fp: u64, now: u64, tokens: u64) -> Option<()> {
        self.try_refund(fp, now, tokens).map(|r| r.unwrap_or_else(|o| panic!("gave up on process {o}")))
    }

    /// [`refund`](Self::refund), or `Err(owner)` if it gave up on the key's
    /// slot, held by process `owner` (then it changed nothing).
    pub fn try_refund(&self, fp: u64, now: u64, tokens: u64) -> Option<Result<(), u32>> {
        let g = &self.m.gcra;
        self.run(|t, ctx| {
            t.credit(ctx, fp | 1, now, g, Credit::Refund, &mut |cells| refund_in(g, cells, 0, now, tokens)).map(drop)
        })
    }

    /// Makes key `fp` full.
    pub fn reset(&self, fp: u64, now: u64) -> Option<()> {
        self.run_sure(|t, ctx| t.reset(ctx, fp | 1, now, &self.m.gcra))
    }

    /// Forgets every idle key: how many.
    pub fn gc(&self, now: u64) -> Option<usize> {
        self.run_sure(|t, ctx| t.gc(ctx, now, &self.m.gcra))
    }

    /// What `peek` answers on key `fp` at `now` (tokens left: changes nothing).
    pub fn remaining(&self, fp: u64, now: u64) -> Option<u64> {
        let g = &self.m.gcra;
        self.run_sure(|t, ctx| {
            t.update::<false, _>(ctx, fp | 1, now, g, &mut |cells| {
                Ok(crate::algorithm::peek_in(g, cells, 0, now, 0)?.decision().remaining)
            })
        })
    }
}
