//! What memory reclamation costs a limiter call: one reader critical
//! section (enter, read a shared pointer, leave) around one GCRA-like
//! compare-and-swap on an `AtomicU64`, the shape of a keyed call on a stored
//! key, measured in interleaved rounds in one process:
//!
//! - `ratomic`: ratomic's own epoch (`core/src/store/epoch.rs`), `pin()` and
//!   drop, what the store does since it stopped using crossbeam-epoch;
//! - `crossbeam-epoch`: `pin()` and drop, what the store did before;
//! - `seize`: `Collector::enter`, `protect` and drop (its Linux fast
//!   barrier is on by default);
//! - `asymmetric`: a relaxed store of the thread's epoch, a compiler fence,
//!   and a release store to leave: the reader's side of epoch reclamation
//!   with asymmetric fences (the reclaiming thread pays a process-wide
//!   barrier, `membarrier(2)`, instead), written inline: the least such a
//!   reader can cost, which neither crate offers;
//! - `bare`: the CAS alone.
//!
//! ```sh
//! cargo run --release -p ratomic-benches --bin reclaim [ROUNDS]
//! ```
//!
//! Prints the median ns per call of each over the rounds, and each one's
//! cost over the bare CAS.

use std::cell::Cell;
use std::hint::black_box;
use std::sync::atomic::{compiler_fence, AtomicPtr, AtomicU64, Ordering};
use std::time::Instant;

use ratomic_benches::median;
use seize::Guard as _;

const CALLS: u64 = 5_000_000;

thread_local! {
    static ACTIVE: AtomicU64 = const { AtomicU64::new(0) };
    static EPOCH: Cell<u64> = const { Cell::new(1) };
}

/// The shape of a call: read the state, CAS the next one in.
#[inline(always)]
fn charge(word: &AtomicU64, i: u64) {
    let v = word.load(Ordering::Acquire);
    let _ = black_box(word.compare_exchange(v, v.wrapping_add(i | 1), Ordering::AcqRel, Ordering::Acquire));
}

fn timed(f: impl Fn(u64)) -> f64 {
    let start = Instant::now();
    for i in 0..CALLS {
        f(i);
    }
    start.elapsed().as_secs_f64() * 1e9 / CALLS as f64
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|r| r.parse().ok()).unwrap_or(15);
    let word = AtomicU64::new(0);
    let table = AtomicPtr::new(Box::into_raw(Box::new(0u64)));
    let collector = seize::Collector::new();

    let contenders: [(&str, &dyn Fn(u64)); 5] = [
        ("ratomic", &|i| {
            let guard = ratomic::__epoch::pin();
            black_box(table.load(Ordering::Acquire));
            charge(&word, i);
            drop(guard);
        }),
        ("crossbeam-epoch", &|i| {
            let guard = crossbeam_epoch::pin();
            black_box(table.load(Ordering::Acquire));
            charge(&word, i);
            drop(guard);
        }),
        ("seize", &|i| {
            let guard = collector.enter();
            black_box(guard.protect(&table, Ordering::Acquire));
            charge(&word, i);
            drop(guard);
        }),
        ("asymmetric", &|i| {
            ACTIVE.with(|active| {
                active.store(EPOCH.get(), Ordering::Relaxed);
                compiler_fence(Ordering::SeqCst);
                black_box(table.load(Ordering::Acquire));
                charge(&word, i);
                active.store(0, Ordering::Release);
            })
        }),
        ("bare", &|i| charge(&word, i)),
    ];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
    for round in 0..rounds {
        // Each round starts with a different contender.
        for k in 0..contenders.len() {
            let c = (round + k) % contenders.len();
            times[c].push(timed(contenders[c].1));
        }
    }
    let bare = median(times[contenders.len() - 1].clone());
    println!("{rounds} rounds of {CALLS} calls each, interleaved; median ns per call:");
    for ((name, _), t) in contenders.iter().zip(&times) {
        let m = median(t.clone());
        println!("  {name:16} {m:6.2} ns  ({:+.2} ns over the bare CAS)", m - bare);
    }
    // SAFETY: made by Box::into_raw above, never freed elsewhere.
    drop(unsafe { Box::from_raw(table.load(Ordering::Relaxed)) });
}
