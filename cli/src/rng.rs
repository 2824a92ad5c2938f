//! A tiny deterministic random number generator (SplitMix64), so that a
//! simulation with `--seed N` gives the same traffic on every machine and
//! every version of every dependency.

/// SplitMix64: 64 bits of state, passes BigCrush, a few instructions a draw.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float uniformly distributed in `(0, 1]` (never 0, so `ln` is finite).
    pub fn next_unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// A number in `0..n` (`n ≥ 1`), by Lemire's multiply-shift (bias below 2^-32 for small `n`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence_and_different_seed_differs() {
        let a: Vec<_> = (0..8).scan(SplitMix64::new(7), |r, _| Some(r.next_u64())).collect();
        let b: Vec<_> = (0..8).scan(SplitMix64::new(7), |r, _| Some(r.next_u64())).collect();
        let c: Vec<_> = (0..8).scan(SplitMix64::new(8), |r, _| Some(r.next_u64())).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn unit_floats_are_in_the_half_open_interval_and_below_stays_in_range() {
        let mut r = SplitMix64::new(1);
        for _ in 0..10_000 {
            let u = r.next_unit();
            assert!(u > 0.0 && u <= 1.0, "{u}");
            assert!(r.below(3) < 3);
        }
        assert_eq!(r.below(1), 0);
    }
}
