//! Exact division by a divisor fixed at construction, as a multiply and a
//! shift (Granlund & Montgomery, "Division by invariant integers using
//! multiplication", 1994, theorem 4.2).
//!
//! A hardware 64-bit `div` costs tens of cycles and sits on every hot path
//! that reports whole tokens or finds a window, while the divisor (an
//! emission interval, a window length) never changes after a limiter is
//! built. Dividends here are nanosecond quantities, all below 2^63, which is
//! what lets the multiplier fit in 64 bits.

/// `n / d` for any `n < 2^63`, by multiplication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Divider {
    d: u64,
    /// `⌈2^(63+l) / d⌉`, where `l = ⌈log2 d⌉`; below 2^64.
    m: u64,
    /// `63 + l`.
    shift: u32,
}

impl Divider {
    /// A divider by `d` (`1 ≤ d < 2^63`).
    pub(crate) const fn new(d: u64) -> Self {
        assert!(d >= 1 && d < 1 << 63, "divisor out of range");
        let l = 64 - (d - 1).leading_zeros(); // ⌈log2 d⌉; 0 for d = 1
        let shift = 63 + l;
        // m·d ∈ [2^(63+l), 2^(63+l) + d − 1] ⊆ [2^(63+l), 2^(63+l) + 2^l]:
        // the theorem's condition for exactness on 63-bit dividends.
        let m = (1u128 << shift).div_ceil(d as u128);
        Divider { d, m: m as u64, shift }
    }

    /// `⌊n / d⌋`. Exact for `n < 2^63`.
    #[inline]
    pub(crate) fn div(&self, n: u64) -> u64 {
        debug_assert!(n < 1 << 63);
        ((n as u128 * self.m as u128) >> self.shift) as u64
    }

    /// `(⌊n / d⌋, n mod d)`. Exact for `n < 2^63`.
    #[inline]
    pub(crate) fn div_rem(&self, n: u64) -> (u64, u64) {
        let q = self.div(n);
        (q, n - q * self.d)
    }

    /// `⌈n / d⌉`. Exact for `n < 2^63`.
    #[inline]
    pub(crate) fn div_ceil(&self, n: u64) -> u64 {
        let (q, r) = self.div_rem(n);
        q + u64::from(r != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::Divider;
    use proptest::prelude::*;

    const TOP: u64 = (1 << 63) - 1;

    fn check(d: u64, n: u64) {
        let div = Divider::new(d);
        assert_eq!(div.div(n), n / d, "{n} / {d}");
        assert_eq!(div.div_rem(n), (n / d, n % d), "{n} divrem {d}");
        assert_eq!(div.div_ceil(n), n.div_ceil(d), "{n} div_ceil {d}");
    }

    #[test]
    fn edges() {
        let ds = [1, 2, 3, 5, 7, 10, 333_333_333, 1_000_000_000, 86_400_000_000_000, (1 << 62) + 1, TOP];
        let ds =
            ds.into_iter().chain((0..63).flat_map(|k| [(1u64 << k).saturating_sub(1).max(1), 1 << k, (1 << k) + 1]));
        for d in ds.filter(|&d| d <= TOP) {
            for n in [0, 1, d - 1, d, d + 1, 2 * d - 1, TOP - 1, TOP, TOP / d * d, (TOP / d * d).saturating_sub(1)] {
                if n <= TOP {
                    check(d, n);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn matches_hardware_division(d in 1..=TOP, n in 0..=TOP, small in 1u64..10_000_000_000) {
            check(d, n);
            check(small, n);
            check(d, n % (small * 1000 + 1));
        }
    }
}
