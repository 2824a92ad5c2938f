//! Rate strings: `"<count>/<period>"` (`"10/s"`, `"100/min"`) or
//! `"<count> per <period>"`, the same in every face (see
//! [the contract](https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md#3-rates-and-quotas)).

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
    // As Python's `limits` (slowapi, Flask-Limiter) defines them, so a
    // migrated configuration keeps its meaning.
    ("month", 30 * 86_400 * NS_PER_S),
    ("months", 30 * 86_400 * NS_PER_S),
    ("year", 360 * 86_400 * NS_PER_S),
    ("years", 360 * 86_400 * NS_PER_S),
];

/// Every unit [`Rate::parse`] accepts, for error messages.
const UNIT_LIST: &str = "unknown unit (use ms, s/sec/second, m/min/minute, h/hr/hour, d/day, month (30 days) or \
                         year (360 days), plurals accepted, words in any letter case; or ns, us)";

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
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::Rate;
    ///
    /// let r = Rate::new(1000, Duration::from_secs(15 * 60))?;
    /// assert_eq!(r, "1000/15m".parse()?);
    /// assert!(Rate::new(0, Duration::from_secs(1)).is_err());
    /// assert!(Rate::new(10, Duration::ZERO).is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
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
    ///
    /// ```
    /// use ratomic::Rate;
    ///
    /// assert_eq!(Rate::per_second(10)?, Rate::parse("10/s")?);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn per_second(count: u64) -> Result<Self> {
        Self::new(count, Duration::from_secs(1))
    }

    /// `count` per minute.
    ///
    /// ```
    /// use ratomic::Rate;
    ///
    /// assert_eq!(Rate::per_minute(100)?, Rate::parse("100/min")?);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn per_minute(count: u64) -> Result<Self> {
        Self::new(count, Duration::from_secs(60))
    }

    /// `count` per hour.
    ///
    /// ```
    /// use ratomic::Rate;
    ///
    /// assert_eq!(Rate::per_hour(5000)?, Rate::parse("5000/h")?);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn per_hour(count: u64) -> Result<Self> {
        Self::new(count, Duration::from_secs(3_600))
    }

    /// Parses `"<count>/<period>"`, e.g. `"10/s"`, `"100/min"`, `"5000/h"`,
    /// `"1000/15m"`, `"3/250ms"`, `"86400/d"`, or the same in the notation of
    /// Python's `limits` (slowapi, Flask-Limiter): `"5 per minute"`,
    /// `"10 per 2 minutes"`, `"10/2 minutes"`.
    ///
    /// Units, plurals accepted, words (`Minute`, `SECONDS`) in any letter case: `ms`,
    /// `s`/`sec`/`second`, `m`/`min`/`minute`, `h`/`hr`/`hour`, `d`/`day`,
    /// `month` (30 days) and `year` (360 days) as `limits` defines them — and,
    /// so that every [`Rate`] prints as a string that parses back to it,
    /// `ns` and `us` (also `µs`) for periods finer than a millisecond. The
    /// count is a whole number from 1 to `u64::MAX`; the period must fit in
    /// 63 bits of nanoseconds (about 292 years). Surrounding whitespace is
    /// ignored; anything else is an error that quotes the input and says
    /// what is wrong. Several rates in one string (`"10/s;1000/d"`) are for
    /// [`parse_limits`](crate::parse_limits).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::Rate;
    ///
    /// assert_eq!(Rate::parse("5 per minute")?, Rate::parse("5/min")?);
    /// assert_eq!(Rate::parse("10 per 2 Minutes")?.period(), Duration::from_secs(120));
    /// let err = Rate::parse("99999999999999999999/s").unwrap_err().to_string();
    /// assert!(err.contains("at most 18446744073709551615"), "{err}");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn parse(input: &str) -> Result<Self> {
        let err = |reason| Error::InvalidRate { input: input.to_owned(), reason };
        let s = input.trim();
        if s.contains([';', ',', '|']) {
            return Err(err("this is several rates; a multi-limit Limiter takes them (\"10/s;1000/d\")"));
        }
        let (count, period) = split_rate(s).ok_or_else(|| err("missing '/' or ' per '"))?;
        let count = match parse_digits(count) {
            Some(Ok(0)) => return Err(err("the count must be at least 1")),
            Some(Ok(n)) => n,
            Some(Err(())) => return Err(err("the count is too large (at most 18446744073709551615)")),
            None => return Err(err("the count must be a whole number")),
        };
        let split = period.find(|c: char| !c.is_ascii_digit()).unwrap_or(period.len());
        let (multiplier, unit) = period.split_at(split);
        let multiplier = match parse_digits(multiplier) {
            _ if multiplier.is_empty() => 1,
            Some(Ok(n)) => n,
            _ => return Err(err("the period is too long (at most 2^63 - 1 ns, about 292 years)")),
        };
        if multiplier == 0 {
            return Err(err("the period must be longer than zero"));
        }
        let unit = unit.trim_start();
        // Words (`Minute`, `SECONDS`, `Day`) in any case; the short forms
        // exactly, so `M` is never read as a minute by one reader and a month
        // by another.
        let unit_ns = UNITS
            .iter()
            .find(|(name, _)| *name == unit || (name.len() >= 3 && name.is_ascii() && name.eq_ignore_ascii_case(unit)))
            .map(|&(_, ns)| ns)
            .ok_or_else(|| err(UNIT_LIST))?;
        let period_ns = multiplier
            .checked_mul(unit_ns)
            .filter(|&ns| ns <= MAX_NANOS)
            .ok_or_else(|| err("the period is too long (at most 2^63 - 1 ns, about 292 years)"))?;
        Ok(Rate { count, period_ns })
    }

    /// How many calls (or tokens) per period.
    ///
    /// ```
    /// use ratomic::Rate;
    ///
    /// assert_eq!(Rate::parse("10 per 2 minutes")?.count(), 10);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::Rate;
    ///
    /// assert_eq!(Rate::parse("10 per 2 minutes")?.period(), Duration::from_secs(120));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_ns)
    }

    /// The period in nanoseconds.
    ///
    /// ```
    /// use ratomic::Rate;
    ///
    /// assert_eq!(Rate::parse("3/250ms")?.period_nanos(), 250_000_000);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn period_nanos(&self) -> u64 {
        self.period_ns
    }

    /// Calls per second, as a float (for display).
    ///
    /// ```
    /// use ratomic::Rate;
    ///
    /// assert_eq!(Rate::parse("120/min")?.per_sec(), 2.0);
    /// assert_eq!(Rate::parse("3/250ms")?.per_sec(), 12.0);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn per_sec(&self) -> f64 {
        self.count as f64 * NS_PER_S as f64 / self.period_ns as f64
    }
}

/// Digits only — no sign, no separators, no whitespace — as `None`;
/// `Some(Err(()))` when the digits do not fit in a `u64`.
fn parse_digits(s: &str) -> Option<std::result::Result<u64, ()>> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse().map_err(|_| ()))
}

/// Splits a trimmed rate string into its count and its period, each
/// trimmed: `"10/2 minutes"` → (`"10"`, `"2 minutes"`), `"10 per minute"` →
/// (`"10"`, `"minute"`). `None` when there is neither a `/` nor a ` per `.
fn split_rate(s: &str) -> Option<(&str, &str)> {
    if let Some((count, period)) = s.split_once('/') {
        return Some((count.trim_end(), period.trim()));
    }
    // "<count> per <period>": `per` as a word of its own, in any case.
    let mut words = s.split_whitespace();
    let count = words.next()?;
    let per = words.next()?;
    if !per.eq_ignore_ascii_case("per") {
        return None;
    }
    let after_per = s[count.len()..].trim_start()[per.len()..].trim();
    (!after_per.is_empty()).then_some((count, after_per))
}

/// A period as a whole number of its largest exact unit, always with the
/// number: `1s`, `60ms`, `15m`, `90s`. How rules print (`fixed window 5 per
/// 60ms`).
pub(crate) struct Period(pub(crate) u64);

const SHOW: &[(&str, u64)] = &[
    ("d", 86_400 * NS_PER_S),
    ("h", 3_600 * NS_PER_S),
    ("m", 60 * NS_PER_S),
    ("s", NS_PER_S),
    ("ms", NS_PER_MS),
    ("us", NS_PER_US),
    ("ns", 1),
];

/// The period `p >= at_least` in whole units of the largest unit, from days
/// down to milliseconds, that `same` accepts (rounded up to that unit), if
/// any.
pub(crate) fn round_period(at_least: u64, same: impl Fn(u64) -> bool) -> Option<u64> {
    SHOW.iter()
        .take_while(|&&(_, unit)| unit >= NS_PER_MS)
        .filter_map(|&(_, unit)| at_least.div_ceil(unit).checked_mul(unit))
        .find(|&p| p <= MAX_NANOS && same(p))
}

/// The largest unit of [`SHOW`] that divides `ns`: (count of it, its name).
fn largest_unit(ns: u64) -> (u64, &'static str) {
    SHOW.iter().find(|&&(_, unit)| ns % unit == 0).map_or((ns, "ns"), |&(name, unit)| (ns / unit, name))
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, unit) = largest_unit(self.0);
        write!(f, "{n}{unit}")
    }
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
    /// The shortest canonical form that parses back to the same rate:
    /// `10/s`, `1000/15m`, `3/250ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match largest_unit(self.period_ns) {
            (1, unit) => write!(f, "{}/{unit}", self.count),
            (n, unit) => write!(f, "{}/{n}{unit}", self.count),
        }
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
            // The notation of Python's `limits` (slowapi, Flask-Limiter).
            ("5 per minute", 5, 60 * NS_PER_S),
            ("10 per 2 minutes", 10, 120 * NS_PER_S),
            ("10/2 minutes", 10, 120 * NS_PER_S),
            ("1 PER Second", 1, NS_PER_S),
            ("3 per day", 3, 86_400 * NS_PER_S),
            ("100/month", 100, 30 * 86_400 * NS_PER_S),
            ("1000 per 1 year", 1000, 360 * 86_400 * NS_PER_S),
            ("10 / s", 10, NS_PER_S),
            ("7/HOURS", 7, 3_600 * NS_PER_S),
            ("18446744073709551615/s", u64::MAX, NS_PER_S),
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
            "10/S",
            "10/M",
            "5 per",
            "5 pe minute",
            "per minute",
            "5 minute",
            "10/s;1000/d",
            "3/µS",
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
    fn errors_say_what_is_wrong() {
        let reason = |s: &str| match Rate::parse(s) {
            Err(Error::InvalidRate { reason, .. }) => reason,
            other => panic!("{s:?} gave {other:?}"),
        };
        assert_eq!(reason("99999999999999999999/s"), "the count is too large (at most 18446744073709551615)");
        assert_eq!(reason("5 minute"), "missing '/' or ' per '");
        assert!(reason("10/x").starts_with("unknown unit (use ms, s/sec/second"), "{}", reason("10/x"));
        assert!(reason("10/x").contains("month (30 days)"));
        assert!(reason("10/s;1000/d").contains("multi-limit Limiter"));
        assert_eq!(reason("1/99999999999d"), "the period is too long (at most 2^63 - 1 ns, about 292 years)");
        assert_eq!(reason("1/99999999999999999999999s"), reason("1/99999999999d"));
    }

    #[test]
    fn periods_print_with_their_number_and_unit() {
        for (ns, shown) in
            [(NS_PER_S, "1s"), (60 * NS_PER_MS, "60ms"), (900 * NS_PER_S, "15m"), (90 * NS_PER_S, "90s"), (7, "7ns")]
        {
            assert_eq!(Period(ns).to_string(), shown);
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
