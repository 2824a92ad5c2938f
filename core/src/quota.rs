//! Token-bucket quotas: capacity `B` (the burst) and emission interval `T`
//! (one token refills every `T`).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::rate::{Rate, MAX_NANOS};

const NS_PER_S: f64 = 1e9;

/// What a token bucket allows: a burst of `capacity` tokens, refilled at
/// `refill_per_sec` tokens per second.
///
/// Internally a quota is the pair (`B` = capacity, `T` = emission interval,
/// the time one token takes to refill, in whole nanoseconds, rounded down and
/// at least 1 ns). `B·T` must fit in 63 bits of nanoseconds.
///
/// ```
/// use std::time::Duration;
/// use ratomic::Quota;
///
/// let q = Quota::new(10, 2.0)?;             // burst 10, 2 tokens a second
/// assert_eq!(q.emission_interval(), Duration::from_millis(500));
///
/// let q: Quota = "100/min".parse()?;        // burst 100, refilled over a minute
/// assert_eq!(q.capacity(), 100);
/// assert_eq!(q.emission_interval(), Duration::from_millis(600));
///
/// let q = Quota::parse("10/s")?.with_burst(50)?; // 10/s sustained, bursts of 50
/// assert_eq!((q.capacity(), q.emission_interval_nanos()), (50, 100_000_000));
///
/// assert!(Quota::new(10, f64::NAN).is_err());
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quota {
    capacity: u64,
    interval_ns: u64,
    refill_per_sec: f64,
}

impl Quota {
    /// A bucket of `capacity` tokens (≥ 1) refilled at `refill_per_sec`
    /// tokens per second (finite, > 0).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::Quota;
    ///
    /// let q = Quota::new(5, 0.5)?; // a burst of 5, one token every 2 s
    /// assert_eq!(q.emission_interval(), Duration::from_secs(2));
    /// assert!(Quota::new(0, 1.0).is_err()); // no capacity
    /// assert!(Quota::new(5, 0.0).is_err()); // never refills
    /// assert!(Quota::new(5, -1.0).is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn new(capacity: u64, refill_per_sec: f64) -> Result<Self> {
        if !refill_per_sec.is_finite() || refill_per_sec <= 0.0 {
            return Err(Error::invalid("refill_per_sec", refill_per_sec, "must be a finite number greater than 0"));
        }
        let exact = NS_PER_S / refill_per_sec;
        if exact > MAX_NANOS as f64 {
            return Err(Error::invalid(
                "refill_per_sec",
                refill_per_sec,
                "is too small: one token would take more than 2^63 ns to refill",
            ));
        }
        Self::from_parts(capacity, floor_interval(exact), refill_per_sec)
    }

    /// `rate.count()` tokens of burst, refilled over `rate.period()`: the
    /// emission interval is `period / count`, computed exactly in integers.
    ///
    /// ```
    /// use ratomic::{Quota, Rate};
    ///
    /// let q = Quota::from_rate(Rate::parse("3/250ms")?)?;
    /// assert_eq!(q.capacity(), 3);
    /// assert_eq!(q.emission_interval_nanos(), 83_333_333); // 250 ms / 3, rounded down
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn from_rate(rate: Rate) -> Result<Self> {
        let interval = (rate.period_nanos() / rate.count()).max(1);
        Self::from_parts(rate.count(), interval, rate.per_sec())
    }

    /// Parses a rate string (see [`Rate::parse`]) into a quota.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::Quota;
    ///
    /// let q = Quota::parse("5 per minute")?;
    /// assert_eq!((q.capacity(), q.emission_interval()), (5, Duration::from_secs(12)));
    /// assert!(Quota::parse("five per minute").is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn parse(rate: &str) -> Result<Self> {
        Self::from_rate(Rate::parse(rate)?)
    }

    /// `n` tokens a second, burst `n`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::Quota;
    ///
    /// let q = Quota::per_second(10)?;
    /// assert_eq!((q.capacity(), q.emission_interval()), (10, Duration::from_millis(100)));
    /// assert!(Quota::per_second(0).is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn per_second(n: u64) -> Result<Self> {
        Self::from_rate(Rate::per_second(n)?)
    }

    /// `n` tokens a minute, burst `n`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::Quota;
    ///
    /// let q = Quota::per_minute(30)?;
    /// assert_eq!((q.capacity(), q.emission_interval()), (30, Duration::from_secs(2)));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn per_minute(n: u64) -> Result<Self> {
        Self::from_rate(Rate::per_minute(n)?)
    }

    /// `n` tokens an hour, burst `n`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::Quota;
    ///
    /// let q = Quota::per_hour(3600)?;
    /// assert_eq!((q.capacity(), q.emission_interval()), (3600, Duration::from_secs(1)));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn per_hour(n: u64) -> Result<Self> {
        Self::from_rate(Rate::per_hour(n)?)
    }

    /// The same refill rate with a different burst.
    ///
    /// ```
    /// use ratomic::Quota;
    ///
    /// let smooth = Quota::per_second(10)?.with_burst(1)?; // 10/s, one at a time
    /// assert_eq!((smooth.capacity(), smooth.emission_interval_nanos()), (1, 100_000_000));
    /// assert!(Quota::per_second(10)?.with_burst(0).is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn with_burst(self, capacity: u64) -> Result<Self> {
        Self::from_parts(capacity, self.interval_ns, self.refill_per_sec)
    }

    fn from_parts(capacity: u64, interval_ns: u64, refill_per_sec: f64) -> Result<Self> {
        if capacity == 0 {
            return Err(Error::invalid("capacity", capacity, "must be at least 1"));
        }
        match capacity.checked_mul(interval_ns) {
            Some(tau) if tau <= MAX_NANOS => Ok(Quota { capacity, interval_ns, refill_per_sec }),
            _ => Err(Error::invalid(
                "capacity",
                capacity,
                "is too large for this refill rate: capacity × emission interval must fit in 63 bits of nanoseconds",
            )),
        }
    }

    /// `B`: the most tokens a key can hold, and the largest cost a call may ask.
    ///
    /// ```
    /// use ratomic::Quota;
    ///
    /// assert_eq!(Quota::per_minute(100)?.capacity(), 100);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// `T`: the time one token takes to refill.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::Quota;
    ///
    /// assert_eq!(Quota::per_hour(60)?.emission_interval(), Duration::from_secs(60));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns)
    }

    /// `T` in nanoseconds.
    ///
    /// ```
    /// use ratomic::Quota;
    ///
    /// assert_eq!(Quota::per_second(1000)?.emission_interval_nanos(), 1_000_000);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn emission_interval_nanos(&self) -> u64 {
        self.interval_ns
    }

    /// The refill rate this quota was made from, in tokens per second.
    ///
    /// ```
    /// use ratomic::Quota;
    ///
    /// assert_eq!(Quota::new(10, 2.5)?.refill_per_sec(), 2.5);
    /// assert_eq!(Quota::per_minute(120)?.refill_per_sec(), 2.0);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refill_per_sec(&self) -> f64 {
        self.refill_per_sec
    }

    /// `τ = B·T`: how long an empty bucket takes to become full again.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::Quota;
    ///
    /// // 10 tokens at 2 a second: empty to full in 5 s.
    /// assert_eq!(Quota::new(10, 2.0)?.burst_window(), Duration::from_secs(5));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn burst_window(&self) -> Duration {
        Duration::from_nanos(self.capacity * self.interval_ns)
    }
}

/// `floor(exact)`, at least 1, except that a value within float noise of a
/// whole number is that whole number: `1e9 / 0.1` must give 10 s, not
/// 10 s − 1 ns because the division landed a hair low.
fn floor_interval(exact: f64) -> u64 {
    let nearest = exact.round();
    let ns = if (exact - nearest).abs() <= nearest * 4.0 * f64::EPSILON { nearest } else { exact.floor() };
    (ns as u64).max(1)
}

impl FromStr for Quota {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Quota::parse(s)
    }
}

impl TryFrom<Rate> for Quota {
    type Error = Error;
    fn try_from(rate: Rate) -> Result<Self> {
        Quota::from_rate(rate)
    }
}

impl TryFrom<&str> for Quota {
    type Error = Error;
    fn try_from(rate: &str) -> Result<Self> {
        Quota::parse(rate)
    }
}

impl fmt::Display for Quota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "burst {} refilled at {}/s (one token every {:?})",
            self.capacity,
            self.refill_per_sec,
            self.emission_interval()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emission_interval_is_rounded_down_and_at_least_one_ns() {
        assert_eq!(Quota::new(1, 3.0).unwrap().emission_interval_nanos(), 333_333_333);
        assert_eq!(Quota::new(1, 7.0).unwrap().emission_interval_nanos(), 142_857_142);
        assert_eq!(Quota::new(1, 0.1).unwrap().emission_interval_nanos(), 10_000_000_000);
        assert_eq!(Quota::new(1, 1e12).unwrap().emission_interval_nanos(), 1);
        assert_eq!(Quota::parse("3/250ms").unwrap().emission_interval_nanos(), 83_333_333);
        assert_eq!(Quota::parse("7/s").unwrap().emission_interval_nanos(), 142_857_142);
    }

    #[test]
    fn invalid_quotas_name_the_field() {
        for r in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, -1.0, 1e-300] {
            match Quota::new(10, r) {
                Err(Error::InvalidArgument { name: "refill_per_sec", .. }) => {}
                other => panic!("{r}: {other:?}"),
            }
        }
        assert!(matches!(Quota::new(0, 1.0), Err(Error::InvalidArgument { name: "capacity", .. })));
        // B·T overflows 63 bits.
        assert!(matches!(Quota::new(u64::MAX, 1.0), Err(Error::InvalidArgument { name: "capacity", .. })));
        assert!(matches!(
            Quota::per_second(10).unwrap().with_burst(1 << 62),
            Err(Error::InvalidArgument { name: "capacity", .. })
        ));
        assert!(Quota::new(1 << 20, 1.0).is_ok());
    }

    #[test]
    fn messages_quote_the_value() {
        let msg = Quota::new(3, -2.5).unwrap_err().to_string();
        assert!(msg.contains("refill_per_sec") && msg.contains("-2.5"), "{msg}");
        let msg = Quota::parse("3/fortnight").unwrap_err().to_string();
        assert!(msg.contains("\"3/fortnight\""), "{msg}");
    }
}
