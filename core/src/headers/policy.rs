//! One named limit as the header fields describe it.

use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::limit::limiter::Limiter;
use crate::store::key::Key;

use super::format::{ceil_secs, sf_int};

/// One named limit as the headers describe it: its name (checked and
/// quoted once), quota and window. Build it at setup, not per request.
///
/// ```
/// use std::time::Duration;
/// use ratomic::headers::Policy;
///
/// let p = Policy::new("per-ip", 100, Duration::from_millis(60_500))?;
/// assert_eq!((p.name(), p.quota(), p.window_secs()), ("per-ip", 100, 61)); // the window rounded up
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    name: Box<str>,
    /// The name as a Structured Field String, quotes included.
    pub(super) quoted: Box<str>,
    /// Its `RateLimit-Policy` item, `"name";q=<quota>;w=<window s>`:
    /// formatted once, copied per response.
    pub(super) item: Box<str>,
    pub(super) quota: u64,
    pub(super) window_secs: u64,
}

impl Policy {
    /// A policy of `quota` units per `window`.
    ///
    /// The name must be non-empty printable ASCII (a Structured Field
    /// String: `"` and `\` are escaped, anything else outside `0x20..=0x7E`
    /// is an error). The window is rounded up to whole seconds, at least 1.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::headers::Policy;
    ///
    /// assert_eq!(Policy::new("a\"b", 5, Duration::from_millis(1))?.window_secs(), 1);
    /// let e = Policy::new("naïve", 5, Duration::from_secs(1)).unwrap_err();
    /// assert_eq!(
    ///     e.to_string(),
    ///     r#"invalid policy name: "naïve" ('ï' is not printable ASCII, which an HTTP Structured Field String requires)"#
    /// );
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn new(name: &str, quota: u64, window: Duration) -> Result<Self> {
        if name.is_empty() {
            return Err(Error::invalid("policy name", "\"\"", "must not be empty"));
        }
        if let Some(c) = name.chars().find(|c| !(' '..='~').contains(c)) {
            return Err(Error::invalid(
                "policy name",
                format!("{name:?}"),
                format!("{c:?} is not printable ASCII, which an HTTP Structured Field String requires"),
            ));
        }
        let mut quoted = String::with_capacity(name.len() + 2);
        quoted.push('"');
        for c in name.chars() {
            if c == '"' || c == '\\' {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        quoted.push('"');
        let window_secs = ceil_secs(window).max(1);
        let item = format!("{quoted};q={};w={}", sf_int(quota), sf_int(window_secs)).into();
        Ok(Policy { name: name.into(), quoted: quoted.into(), item, quota, window_secs })
    }

    /// The policy of a limiter's algorithm (`limiter.algorithm()` or one of
    /// a [`Limiter`]'s [`rules`](Limiter::rules)): its limit per its window.
    ///
    /// ```
    /// use ratomic::headers::Policy;
    /// use ratomic::FixedWindow;
    ///
    /// let limiter = FixedWindow::builder("100/min").build()?;
    /// let p = Policy::of("api", limiter.algorithm())?;
    /// assert_eq!((p.quota(), p.window_secs()), (100, 60));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn of<A: Algorithm>(name: &str, algorithm: &A) -> Result<Self> {
        Policy::new(name, algorithm.limit(), algorithm.window())
    }

    /// One policy per limit of `limiter`, in its order, named as its limits.
    ///
    /// ```
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;1000/day")?;
    /// let policies = Policy::for_limiter(&limiter)?; // once, at setup
    /// let h = Headers::multi(&policies, &limiter.allow("k")?)?;
    /// assert_eq!(h.policy(), r#""2/s";q=2;w=1, "1000/day";q=1000;w=86400"#);
    /// assert_eq!(h.ratelimit(), r#""2/s";r=1;t=1, "1000/day";r=999;t=87"#);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn for_limiter<K: ?Sized + Key, C: Clock>(limiter: &Limiter<K, C>) -> Result<Vec<Policy>> {
        limiter.names().zip(limiter.rules()).map(|(name, rule)| Policy::of(name, rule)).collect()
    }

    /// The name, as given (unquoted).
    ///
    /// ```
    /// # use std::time::Duration;
    /// let p = ratomic::headers::Policy::new("a\"b", 1, Duration::from_secs(1))?;
    /// assert_eq!(p.name(), "a\"b");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The quota (`q`).
    ///
    /// ```
    /// # use std::time::Duration;
    /// assert_eq!(ratomic::headers::Policy::new("api", 7, Duration::from_secs(1))?.quota(), 7);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn quota(&self) -> u64 {
        self.quota
    }

    /// The window in whole seconds (`w`), rounded up, at least 1.
    ///
    /// ```
    /// # use std::time::Duration;
    /// use ratomic::headers::Policy;
    /// assert_eq!(Policy::new("api", 7, Duration::from_millis(1))?.window_secs(), 1);
    /// assert_eq!(Policy::new("api", 7, Duration::from_millis(2_001))?.window_secs(), 3);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn window_secs(&self) -> u64 {
        self.window_secs
    }
}
