//! Human-readable numbers and durations for the reports.

use std::time::Duration;

/// A whole number with thin thousands separators: `12,345,678`.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration with a unit that suits its size: `100ms`, `1.5s`, `250µs`, `3m20s`.
pub fn duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0".into();
    }
    let trim = |x: f64, unit: &str| {
        let s = if x >= 100.0 || x.fract() == 0.0 {
            format!("{x:.0}")
        } else if x >= 10.0 {
            format!("{x:.1}")
        } else {
            format!("{x:.2}")
        };
        let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
        format!("{s}{unit}")
    };
    match ns {
        0..=999 => format!("{ns}ns"),
        1_000..=999_999 => trim(ns as f64 / 1e3, "µs"),
        1_000_000..=999_999_999 => trim(ns as f64 / 1e6, "ms"),
        1_000_000_000..=59_999_999_999 => trim(ns as f64 / 1e9, "s"),
        _ => {
            let s = d.as_secs();
            let exact = ns.is_multiple_of(1_000_000_000);
            match s {
                _ if exact && s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
                _ if exact && s < 86_400 && s.is_multiple_of(3_600) => format!("{}h", s / 3_600),
                _ if exact && s < 3_600 && s.is_multiple_of(60) => format!("{}m", s / 60),
                0..=3_599 => format!("{}m{:02}s", s / 60, s % 60),
                3_600..=86_399 => format!("{}h{:02}m", s / 3_600, s / 60 % 60),
                _ => format!("{}d{:02}h", s / 86_400, s / 3_600 % 24),
            }
        }
    }
}

/// Nanoseconds as a duration string.
pub fn nanos(ns: u64) -> String {
    duration(Duration::from_nanos(ns))
}

/// A point in the run, in seconds with millisecond precision: `1.950s`.
pub fn instant(ns: u64) -> String {
    format!("{:.3}s", ns as f64 / 1e9)
}

/// A rate per second with sensible precision: `10/s`, `10.8/s`, `0.28/s`.
pub fn per_sec(x: f64) -> String {
    // Three significant digits, trailing zeros dropped.
    let decimals = if x >= 100.0 || x <= 0.0 { 0 } else { (2 - x.log10().floor() as i32).clamp(0, 9) as usize };
    let s = format!("{x:.decimals$}");
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { &s };
    format!("{s}/s")
}

/// An operations-per-second figure: `4.12 M ops/s`.
pub fn ops(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.2} G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        format!("{x:.0} ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_get_separators() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1_000), "1,000");
        assert_eq!(count(12_345_678), "12,345,678");
    }

    #[test]
    fn durations_pick_a_unit() {
        assert_eq!(nanos(0), "0");
        assert_eq!(nanos(750), "750ns");
        assert_eq!(nanos(250_000), "250µs");
        assert_eq!(nanos(100_000_000), "100ms");
        assert_eq!(nanos(60_000_000), "60ms");
        assert_eq!(nanos(1_500_000_000), "1.5s");
        assert_eq!(nanos(12_340_000), "12.3ms");
        assert_eq!(nanos(200_000_000_000), "3m20s");
        assert_eq!(nanos(7_200_000_000_000), "2h");
        assert_eq!(nanos(60_000_000_000), "1m");
        assert_eq!(nanos(86_400_000_000_000), "1d");
        assert_eq!(nanos(7_260_000_000_000), "2h01m");
        assert_eq!(instant(1_950_000_000), "1.950s");
    }

    #[test]
    fn rates_and_ops() {
        assert_eq!(per_sec(10.0), "10/s");
        assert_eq!(per_sec(10.8), "10.8/s");
        assert_eq!(per_sec(0.2777), "0.278/s");
        assert_eq!(per_sec(6.9), "6.9/s");
        assert_eq!(per_sec(1000.0 / 86_400.0), "0.0116/s");
        assert_eq!(per_sec(1234.6), "1235/s");
        assert_eq!(per_sec(0.0), "0/s");
        assert_eq!(ops(4_123_456.0), "4.12 M");
        assert_eq!(ops(512.0), "512 ");
    }
}
