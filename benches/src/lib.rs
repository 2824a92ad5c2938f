//! Shared set-up for ratomic's benchmarks: the quotas both limiters are given
//! and the pre-generated key sets.
//!
//! The benches themselves are in `benches/` (criterion: `cargo bench -p
//! ratomic-benches`), the one-off measurements in `src/bin/` (`clocks`,
//! `memory`, `sliding_accuracy`, `algorithms_paired`, `rounds` for the
//! ratios against governor in interleaved rounds, and `ops` for profiling).
//! Results and the commands that produced them are in the root
//! `BENCHMARKS.md`.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// The largest burst governor accepts (its burst is a `NonZeroU32`).
pub const HUGE_BURST: u32 = u32::MAX;

/// A quota that never denies in a benchmark run: a burst of 2^32 − 1 tokens
/// refilled at one a second. Every call is allowed and every call writes, so
/// the benches measure the full allow path (read, decide, CAS). It also keeps
/// every key that was charged once "not full" for a second at least, so
/// ratomic's store keeps the keys it was given instead of dropping them as
/// full buckets (which would turn a lookup benchmark into an insert one).
pub fn ratomic_huge() -> ratomic::Quota {
    ratomic::Quota::new(u64::from(HUGE_BURST), 1.0).expect("valid quota")
}

/// [`ratomic_huge`] for governor: one token a second, the same burst.
pub fn governor_huge() -> governor::Quota {
    governor::Quota::with_period(Duration::from_secs(1)).expect("non-zero period").allow_burst(NonZeroU32::MAX)
}

/// The denial scenario's quota: 1000 a second, bursts of 50.
pub fn ratomic_deny() -> ratomic::Quota {
    ratomic::Quota::new(50, 1000.0).expect("valid quota")
}

/// [`ratomic_deny`] for governor.
pub fn governor_deny() -> governor::Quota {
    governor::Quota::per_second(NonZeroU32::new(1000).unwrap()).allow_burst(NonZeroU32::new(50).unwrap())
}

/// splitmix64's finaliser: a bijection on `u64`, so distinct inputs give
/// distinct, well-spread outputs.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `n` distinct pseudo-random `u64` keys, in random order. `seed` picks
/// a disjoint-looking set (different seeds give different keys).
pub fn u64_keys(n: usize, seed: u64) -> Vec<u64> {
    (0..n as u64).map(|i| mix(i ^ seed.rotate_left(40))).collect()
}

/// `n` distinct 16-byte string keys (16 lowercase hex digits), in random order.
pub fn str_keys(n: usize, seed: u64) -> Vec<String> {
    u64_keys(n, seed).into_iter().map(|k| format!("{k:016x}")).collect()
}

// ---- timing helpers shared by the benches ---------------------------------

/// The median of `v` (the mean of the two middle values for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Cycles through a key array forever: the access order of the many-key
/// benchmarks (the arrays are already in random order).
#[derive(Debug)]
pub struct Cycle<'a, T> {
    keys: &'a [T],
    i: usize,
}
impl<'a, T> Cycle<'a, T> {
    /// A cycle over `keys` (not empty) starting at index `start` (modulo the length).
    pub fn new(keys: &'a [T], start: usize) -> Self {
        Cycle { keys, i: start % keys.len() }
    }
    /// The next key, wrapping to the first after the last.
    #[inline]
    pub fn next_key(&mut self) -> &'a T {
        let k = &self.keys[self.i];
        self.i += 1;
        if self.i == self.keys.len() {
            self.i = 0;
        }
        k
    }
}

/// Times `iters` first calls on new keys: batches of up to `keys.len()` keys,
/// each into a limiter made (and afterwards dropped) outside the timing.
pub fn time_inserts<L>(
    iters: u64,
    keys: &[impl Sync],
    make: impl Fn() -> L,
    call: impl Fn(&L, usize) -> bool,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters as usize;
    while left > 0 {
        let n = left.min(keys.len());
        let limiter = make();
        let start = Instant::now();
        for i in 0..n {
            black_box(call(&limiter, i));
        }
        total += start.elapsed();
        drop(limiter);
        left -= n;
    }
    total
}

/// Two threads each make `iters` calls at once (thread `t` starting at key
/// `t·len/2`); returns the slower thread's time, so criterion reports wall
/// time per call per thread.
pub fn two_threads<T: Sync>(iters: u64, keys: &[T], call: impl Fn(&T) -> bool + Sync) -> Duration {
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|t| {
                let (barrier, call) = (&barrier, &call);
                s.spawn(move || {
                    let mut cycle = Cycle::new(keys, t * keys.len() / 2);
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        black_box(call(cycle.next_key()));
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).max().unwrap()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn keys_are_distinct_and_sized() {
        let k = u64_keys(10_000, 1);
        assert_eq!(k.iter().collect::<HashSet<_>>().len(), 10_000);
        let s = str_keys(10_000, 2);
        assert!(s.iter().all(|s| s.len() == 16));
        assert_eq!(s.iter().collect::<HashSet<_>>().len(), 10_000);
        assert!(u64_keys(100, 1).iter().zip(u64_keys(100, 2).iter()).all(|(a, b)| a != b));
    }

    #[test]
    fn quotas_agree() {
        assert_eq!(ratomic_huge().capacity(), u64::from(governor_huge().burst_size().get()));
        assert_eq!(ratomic_huge().emission_interval(), governor_huge().replenish_interval());
        assert_eq!(ratomic_deny().capacity(), u64::from(governor_deny().burst_size().get()));
        assert_eq!(ratomic_deny().emission_interval(), governor_deny().replenish_interval());
    }
}
