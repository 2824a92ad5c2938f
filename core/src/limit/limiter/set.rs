//! Which of a limiter's limits a call is subject to.

use crate::store::MAX_WIDTH;

/// The most limits one [`Limiter`](crate::Limiter) holds.
///
/// ```
/// use ratomic::{Limiter, Rule, MAX_LIMITS};
///
/// let too_many = (0..=MAX_LIMITS).fold(Limiter::builder(), |b, i| b.limit(format!("l{i}"), Rule::parse("1/s").unwrap()));
/// assert!(too_many.build().is_err());
/// # Ok::<(), ratomic::Error>(())
/// ```
pub const MAX_LIMITS: usize = MAX_WIDTH;

/// Which of a [`Limiter`](crate::Limiter)'s limits a call is subject to: a bitmask, made
/// once from names with [`Limiter::limit_set`](crate::Limiter::limit_set).
///
/// ```
/// use ratomic::Limiter;
///
/// let limiter = Limiter::parse("2/s;5/day")?;
/// let daily = limiter.limit_set(&["5/day"])?;
/// assert!(daily.contains(1) && !daily.contains(0));
/// assert_eq!(limiter.select(daily).allow("k")?.entries().count(), 1);
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LimitSet(pub(super) u16);

impl LimitSet {
    /// Whether the set holds the limit at position `index`.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// assert!(limiter.all_limits().contains(0));
    /// assert!(!limiter.all_limits().contains(2));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn contains(self, index: usize) -> bool {
        index < MAX_LIMITS && self.0 & (1 << index) != 0
    }

    /// The union of two sets.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let both = limiter.limit_set(&["2/s"])?.union(limiter.limit_set(&["5/day"])?);
    /// assert_eq!(both, limiter.all_limits());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn union(self, other: LimitSet) -> LimitSet {
        LimitSet(self.0 | other.0)
    }

    /// How many limits the set holds.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// assert_eq!(limiter.all_limits().len(), 2);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the set is empty.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// assert!(!limiter.all_limits().is_empty());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The set as a bitmask: bit `i` for the limit at position `i`. Rebuild
    /// it with [`Limiter::limit_set_from_bits`](crate::Limiter::limit_set_from_bits).
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let bits = limiter.limit_set(&["5/day"])?.bits();
    /// assert_eq!(bits, 0b10);
    /// assert_eq!(limiter.limit_set_from_bits(bits)?, limiter.limit_set(&["5/day"])?);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn bits(self) -> u16 {
        self.0
    }
}

/// The positions of `bits`' set bits, lowest first.
#[inline]
pub(super) fn set_bits(mut bits: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (bits != 0).then(|| {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            i
        })
    })
}
