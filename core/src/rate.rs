//! Rate strings: `"<count>/<period>"`, as in SPEC §3.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};

const NS_PER_MS: u64 = 1_000_000;
const NS_PER_S: u64 = 1_000_000_000;
const NS_PER_US: u64 = 1_000;
const UNITS: &[(&str, u64)] = &[
    ("ns", 1),
    ("us", NS_PER_US),
    ("µs", NS_PER_US),
    ("μs", NS_PER_US),
    ("ms", NS_PER_MS),
    ("s", NS_PER_S),
    ("sec", NS_PER_S),
    ("secs", NS_PER_S),
    ("second", NS_PER_S),
    ("seconds", NS_PER_S),
    ("m", 60 * NS_PER_S),
    ("min", 60 * NS_PER_S),
    ("mins", 60 * NS_PER_S),
    ("minute", 60 * NS_PER_S),
    ("minutes", 60 * NS_PER_S),
    ("h", 3_600 * NS_PER_S),
    ("hr", 3_600 * NS_PER_S),
    ("hrs", 3_600 * NS_PER_S),
    ("hour", 3_600 * NS_PER_S),
    ("hours", 3_600 * NS_PER_S),
    ("d", 86_400 * NS_PER_S),
    ("day", 86_400 * NS_PER_S),
    ("days", 86_400 * NS_PER_S),
];

/// A count over a period, such as 10 per second or 1000 per 15 minutes.
///
/// A token bucket reads it as capacity `count` refilled over `period`; a
/// window reads it as `count` calls per window of length `period`.
///
/// ```
/// use std::time::Duration;
/// use ratomic::Rate;
///
/// let r: Rate = "1000/15m".parse()?;
/// assert_eq!(r.count(), 1000);
/// assert_eq!(r.period(), Duration::from_secs(900));
/// assert!("ten per second".parse::<Rate>().is_err());
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u64,
    period_ns: u64,
}

/// Largest period a rate may have: it must fit in 63 bits of nanoseconds
/// (about 292 years), like every duration in the engine.
pub(crate) const MAX_NANOS: u64 = (1 << 63) - 1;

impl Rate {
    /// `count` per `period`. Both must be non-zero; the period must fit in 63
    /// bits of nanoseconds.
    pub fn new(count: u64, period: Duration) -> Result<Self> {
        if count == 0 {
            return Err(Error::invalid("count", count, "must be at least 1"));
        }
        if period.is_zero() {
            return Err(Error::invalid("period", format!("{period:?}"), "must be longer than zero"));
        }
        let period_ns = u64::try_from(period.as_nanos())
            .ok()
            .filter(|&ns| ns <= MAX_NANOS)
            .ok_or_else(|| Error::invalid("period", format!("{period:?}"), "must fit in 63 bits of nanoseconds"))?;
        Ok(Rate { count, period_ns })
    }

    /// `count` per second.
    pub fn per_second(count: u64) -> Result<Self> {
        Self::new(count, Duration::from_secs(1))
    }

    /// `count` per minute.
    pub fn per_minute(count: u64) -> Result<Self> {
        Self::new(count, Duration::from_secs(60))
    }

    /// `count` per hour.
    pub fn per_hour(count: u64) -> Result<Self> {
        Self::new(count, Duration::from_secs(3_600))
    }

    /// Parses `"<count>/<period>"`, e.g. `"10/s"`, `"100/min"`, `"5000/h"`,
    /// `"1000/15m"`, `"3/250ms"`, `"86400/d"`. Units: `ms`, `s`/`sec`/`second`,
    /// `m`/`min`/`minute`, `h`/`hr`/`hour`, `d`/`day`, plurals accepted — and,
    /// so that every [`Rate`] prints as a string that parses back to it, `ns`
    /// and `us` (also `µs`) for periods finer than a millisecond. Surrounding
    /// whitespace is ignored; anything else is an error that quotes the input.
    pub fn parse(input: &str) -> Result<Self> {
        let err = |reason| Error::InvalidRate { input: input.to_owned(), reason };
        let s = input.trim();
        let (count, period) = s.split_once('/').ok_or_else(|| err("missing '/'"))?;
        let count = parse_digits(count).ok_or_else(|| err("the count must be a whole number"))?;
        if count == 0 {
            return Err(err("the count must be at least 1"));
        }
        let split = period.find(|c: char| !c.is_ascii_digit()).unwrap_or(period.len());
        let (multiplier, unit) = period.split_at(split);
        let multiplier = if multiplier.is_empty() {
            1
        } else {
            parse_digits(multiplier).ok_or_else(|| err("the period's number is too large"))?
        };
        if multiplier == 0 {
            return Err(err("the period must be longer than zero"));
        }
        let unit_ns = UNITS.iter().find(|(name, _)| *name == unit).map(|&(_, ns)| ns).ok_or_else(|| {
            err("unknown unit (use ms, s/sec/second, m/min/minute, h/hr/hour or d/day, plurals accepted; or ns, us)")
        })?;
        let period_ns = multiplier
            .checked_mul(unit_ns)
            .filter(|&ns| ns <= MAX_NANOS)
            .ok_or_else(|| err("the period is too long"))?;
        Ok(Rate { count, period_ns })
    }

    /// How many calls (or tokens) per period.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// The period in nanoseconds.
    pub fn period_nanos(&self) -> u64 {
        self.period_ns
    }

    /// Calls per second, as a float (for display).
    pub fn per_sec(&self) -> f64 {
        self.count as f64 * NS_PER_S as f64 / self.period_ns as f64
    }
}

/// Digits only: no sign, no separators, no whitespace.
fn parse_digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl FromStr for Rate {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Rate::parse(s)
    }
}

impl TryFrom<&str> for Rate {
    type Error = Error;
    fn try_from(s: &str) -> Result<Self> {
        Rate::parse(s)
    }
}

impl fmt::Display for Rate {
    /// The shortest canonical form that parses back to the same rate.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOW: &[(&str, u64)] = &[
            ("d", 86_400 * NS_PER_S),
            ("h", 3_600 * NS_PER_S),
            ("m", 60 * NS_PER_S),
            ("s", NS_PER_S),
            ("ms", NS_PER_MS),
            ("us", NS_PER_US),
            ("ns", 1),
        ];
        for &(unit, ns) in SHOW {
            if self.period_ns % ns == 0 {
                let n = self.period_ns / ns;
                return if n == 1 { write!(f, "{}/{unit}", self.count) } else { write!(f, "{}/{n}{unit}", self.count) };
            }
        }
        unreachable!("every period is a whole number of nanoseconds")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_form() {
        let cases = [
            ("10/s", 10, NS_PER_S),
            ("100/min", 100, 60 * NS_PER_S),
            ("5000/h", 5000, 3_600 * NS_PER_S),
            ("1000/15m", 1000, 900 * NS_PER_S),
            ("3/250ms", 3, 250 * NS_PER_MS),
            ("86400/d", 86_400, 86_400 * NS_PER_S),
            ("  7/second\n", 7, NS_PER_S),
            ("1/2days", 1, 2 * 86_400 * NS_PER_S),
            ("4/hrs", 4, 3_600 * NS_PER_S),
            ("9/sec", 9, NS_PER_S),
            ("2/minutes", 2, 60 * NS_PER_S),
        ];
        for (input, count, ns) in cases {
            let r = Rate::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!((r.count(), r.period_nanos()), (count, ns), "{input:?}");
        }
    }

    #[test]
    fn rejects_malformed_rates_and_quotes_them() {
        for bad in [
            "",
            "10",
            "10/",
            "/s",
            "ten/s",
            "10/parsec",
            "-1/s",
            "+1/s",
            "0/s",
            "10/0s",
            "1.5/s",
            "10/1.5s",
            "10 / s",
            "10/S",
            "1_000/s",
            "10/s/s",
            "99999999999999999999/s",
            "1/99999999999d",
        ] {
            match Rate::parse(bad) {
                Err(Error::InvalidRate { input, .. }) => assert_eq!(input, bad),
                other => panic!("{bad:?} gave {other:?}"),
            }
            let msg = Rate::parse(bad).unwrap_err().to_string();
            assert!(msg.contains(&format!("{bad:?}")), "{msg}");
        }
    }

    #[test]
    fn display_round_trips() {
        for s in ["10/s", "100/m", "5000/h", "1000/15m", "3/250ms", "86400/d", "1/90s", "3/500us", "7/1ns"] {
            let r = Rate::parse(s).unwrap();
            assert_eq!(Rate::parse(&r.to_string()).unwrap(), r, "{s}");
        }
        assert_eq!(Rate::parse("60/60s").unwrap().to_string(), "60/m");
        assert_eq!(Rate::parse("3/500µs").unwrap().to_string(), "3/500us");
        // Every period, however built, prints as a rate that parses back to it.
        for ns in [1, 999, 1_000, 500_000, 1_000_001, 123_456_789, 86_400 * NS_PER_S + 1, MAX_NANOS] {
            let r = Rate::new(3, Duration::from_nanos(ns)).unwrap();
            assert_eq!(Rate::parse(&r.to_string()).unwrap(), r, "{r} from {ns} ns");
        }
    }

    #[test]
    fn new_rejects_zero_count_and_zero_or_huge_period() {
        assert!(matches!(Rate::new(0, Duration::from_secs(1)), Err(Error::InvalidArgument { name: "count", .. })));
        assert!(matches!(Rate::new(1, Duration::ZERO), Err(Error::InvalidArgument { name: "period", .. })));
        assert!(matches!(Rate::new(1, Duration::MAX), Err(Error::InvalidArgument { name: "period", .. })));
        assert_eq!(Rate::new(5, Duration::from_millis(10)).unwrap().period_nanos(), 10 * NS_PER_MS);
    }
}
