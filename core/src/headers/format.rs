//! Numbers and strings as the header fields and problem bodies write them.

use std::time::Duration;

/// The largest Integer a Structured Field may carry (RFC 9651, section
/// 3.3.1): larger counts are written as this.
///
/// ```
/// use std::time::Duration;
/// use ratomic::headers::{Headers, Policy, MAX_SF_INTEGER};
/// use ratomic::Decision;
///
/// let p = Policy::new("huge", u64::MAX, Duration::from_secs(1))?;
/// let d = Decision { allowed: true, remaining: u64::MAX - 1, limit: u64::MAX, retry_after: Duration::ZERO, reset_after: Duration::ZERO };
/// assert_eq!(Headers::single(&p, d).policy(), format!(r#""huge";q={MAX_SF_INTEGER};w=1"#));
/// # Ok::<(), ratomic::Error>(())
/// ```
pub const MAX_SF_INTEGER: u64 = 999_999_999_999_999;

/// Whole seconds, rounded up: 0 ns → 0, 1 ns → 1, 1 s → 1, 1 s + 1 ns → 2.
///
/// ```
/// use std::time::Duration;
/// use ratomic::headers::ceil_secs;
///
/// assert_eq!(ceil_secs(Duration::ZERO), 0);
/// assert_eq!(ceil_secs(Duration::from_nanos(1)), 1);
/// assert_eq!(ceil_secs(Duration::from_millis(1_001)), 2);
/// ```
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

pub(super) fn sf_int(v: u64) -> u64 {
    v.min(MAX_SF_INTEGER)
}

/// Appends `v` in decimal (what `write!` does, without the formatter).
pub(super) fn push_int(out: &mut String, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    // The digits are ASCII.
    out.push_str(std::str::from_utf8(&digits[at..]).unwrap_or_default());
}

pub(super) fn sep(out: &mut String, i: usize) {
    if i > 0 {
        out.push_str(", ");
    }
}

/// Policy names are printable ASCII (checked in [`Policy::new`]): only `"`
/// and `\` need escaping in JSON.
pub(super) fn json_escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
}
