//! HTTP header fields and problem bodies from a decision, written once for
//! every face and middleware (no HTTP framework here: names and values are
//! plain strings).
//!
//! The fields are those of the IETF draft "RateLimit header fields for
//! HTTP" (draft-ietf-httpapi-ratelimit-headers-11):
//!
//! - `RateLimit-Policy`: one item per limit, `"name";q=<quota>;w=<window s>`;
//! - `RateLimit`: one item per limit, `"name";r=<remaining>;t=<s until full>`;
//! - `Retry-After` on a denial: whole seconds, rounded **up**, never 0;
//! - optionally the legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
//!   `X-RateLimit-Reset` (seconds until full, as a delta: ratomic reads a
//!   monotonic clock, not the wall clock);
//! - on a denial, an RFC 9457 problem document (`application/problem+json`)
//!   of the draft's type `quota-exceeded`, naming the limits that denied in
//!   `violated-policies`.
//!
//! Clients written against earlier revisions get their fields with
//! [`Headers::fields_in`]: [`Draft::Draft7`] (`RateLimit-Policy:
//! 100;w=60` and `RateLimit: limit=100, remaining=99, reset=42`) and
//! [`Draft::Draft6`] (`RateLimit-Policy` and `RateLimit-Limit`,
//! `RateLimit-Remaining`, `RateLimit-Reset`), the forms express-rate-limit
//! writes for `standardHeaders: 'draft-7'` / `'draft-6'`. Draft 8 has the
//! fields of draft 11.
//!
//! Durations are rounded up to whole seconds, so a client that waits what a
//! header says never comes back early: `t` is 0 only when the key is full,
//! `w` is at least 1. Counts above the largest Structured Field integer
//! (999 999 999 999 999) are written as that integer.
//!
//! ```
//! use ratomic::headers::{Headers, Policy};
//! use ratomic::{ManualClock, Quota, TokenBucket};
//!
//! let limiter = TokenBucket::builder(Quota::parse("2/s")?).clock(ManualClock::new()).build()?;
//! let policy = Policy::of("api", limiter.algorithm())?; // once, at setup
//!
//! let d = limiter.allow("10.0.0.1")?;
//! let h = Headers::single(&policy, d);
//! assert_eq!(h.policy(), r#""api";q=2;w=1"#);
//! assert_eq!(h.ratelimit(), r#""api";r=1;t=1"#);
//! assert_eq!(h.retry_after(), None);
//!
//! let _ = limiter.allow("10.0.0.1")?;
//! let h = Headers::single(&policy, limiter.allow("10.0.0.1")?);
//! assert_eq!(h.retry_after(), Some(1)); // 500 ms, rounded up
//! assert!(h.problem_json().unwrap().contains(r#""violated-policies":["api"]"#));
//! # Ok::<(), ratomic::Error>(())
//! ```

use std::fmt::Write as _;
use std::time::Duration;

use smallvec::SmallVec;

use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::limit::limiter::{Limiter, MultiDecision};
use crate::store::key::Key;

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

/// The problem type the draft defines for a request over its quota: the
/// `type` of every [`Headers::problem_json`].
///
/// ```
/// assert!(ratomic::headers::PROBLEM_TYPE.ends_with("#quota-exceeded"));
/// ```
pub const PROBLEM_TYPE: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The media type of [`Headers::problem_json`], for a 429's `Content-Type`.
///
/// ```
/// assert_eq!(ratomic::headers::PROBLEM_CONTENT_TYPE, "application/problem+json");
/// ```
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

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
    quoted: Box<str>,
    /// Its `RateLimit-Policy` item, `"name";q=<quota>;w=<window s>`:
    /// formatted once, copied per response.
    item: Box<str>,
    quota: u64,
    window_secs: u64,
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

/// The header fields for one answer: each [`Policy`] the call was subject
/// to with that limit's [`Decision`], and the combined decision.
///
/// ```
/// use ratomic::headers::{Headers, Policy};
/// use ratomic::{ManualClock, TokenBucket};
///
/// let limiter = TokenBucket::builder("1/min").clock(ManualClock::new()).build()?;
/// let policy = Policy::of("per-user", limiter.algorithm())?;
/// let _ = limiter.allow("u")?;
/// let h = Headers::single(&policy, limiter.allow("u")?);
/// assert_eq!(
///     h.lines(false),
///     "RateLimit-Policy: \"per-user\";q=1;w=60\r\nRateLimit: \"per-user\";r=0;t=60\r\nRetry-After: 60\r\n"
/// );
/// assert_eq!(h.denied_by().collect::<Vec<_>>(), ["per-user"]);
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Headers<'p> {
    items: SmallVec<[(&'p Policy, Decision); 3]>,
    combined: Decision,
}

/// A header field: its name and value.
///
/// ```
/// use std::time::Duration;
/// use ratomic::headers::{Field, Headers, Policy};
/// use ratomic::Decision;
///
/// let p = Policy::new("api", 10, Duration::from_secs(1))?;
/// let d = Decision { allowed: true, remaining: 9, limit: 10, retry_after: Duration::ZERO, reset_after: Duration::from_millis(100) };
/// let legacy: [Field; 3] = Headers::single(&p, d).legacy();
/// assert_eq!(legacy[1], ("X-RateLimit-Remaining", "9".to_owned()));
/// # Ok::<(), ratomic::Error>(())
/// ```
pub type Field = (&'static str, String);

/// What a field's value is, for [`Headers::write`].
#[derive(Clone, Copy)]
enum Value {
    Int(u64),
    /// Draft 11: `"name";q=<quota>;w=<window s>` per limit.
    Policy,
    /// Draft 11: `"name";r=<remaining>;t=<s until full>` per limit.
    RateLimit,
    /// Drafts 6 and 7: `<quota>;w=<window s>` per limit.
    UnnamedPolicy,
    /// Draft 7's `RateLimit`: `limit=…, remaining=…, reset=…` of the
    /// combined decision.
    Draft7,
}

/// The revision of the IETF draft the standard fields follow (see
/// [`Headers::fields_in`] for each form).
///
/// ```
/// use ratomic::headers::Draft;
/// assert_eq!(Draft::default(), Draft::Draft11);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Draft {
    /// draft-ietf-httpapi-ratelimit-headers-11 (and -08, whose fields are
    /// the same): a named item per limit in `RateLimit-Policy` and
    /// `RateLimit`.
    #[default]
    Draft11,
    /// -07: `RateLimit-Policy: <quota>;w=<window s>` per limit and one
    /// `RateLimit: limit=<l>, remaining=<r>, reset=<s>` from the combined
    /// decision.
    Draft7,
    /// -06: `RateLimit-Policy` as in -07, and `RateLimit-Limit`,
    /// `RateLimit-Remaining`, `RateLimit-Reset` from the combined decision.
    Draft6,
}

impl<'p> Headers<'p> {
    /// The fields for a single limit's decision.
    ///
    /// ```
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("10/s").build()?;
    /// let policy = Policy::of("api", limiter.algorithm())?;
    /// let h = Headers::single(&policy, limiter.allow("k")?);
    /// assert_eq!(h.decision().remaining, 9);
    /// assert_eq!(h.retry_after(), None);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn single(policy: &'p Policy, decision: Decision) -> Self {
        let mut items = SmallVec::new();
        items.push((policy, decision));
        Headers { items, combined: decision }
    }

    /// The fields for a [`Limiter`]'s decision, `policies` being
    /// [`Policy::for_limiter`] of the same limiter. Lists only the limits
    /// the call was subject to. Errors if `policies` has fewer entries than
    /// the limiter has limits.
    ///
    /// ```
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("1/s;100/h")?;
    /// let policies = Policy::for_limiter(&limiter)?;
    /// let _ = limiter.allow("k")?;
    /// let h = Headers::multi(&policies, &limiter.allow("k")?)?;
    /// assert_eq!(h.denied_by().collect::<Vec<_>>(), ["1/s"]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn multi(policies: &'p [Policy], decision: &MultiDecision<'_>) -> Result<Self> {
        Headers::from_parts(policies, decision.entries().map(|e| (e.index, e.decision)), decision.decision)
    }

    /// The fields from `(index into policies, decision)` pairs and the
    /// combined decision: what a face builds when it keeps the pieces apart.
    /// Errors on an index past `policies` or on no pairs at all.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::Decision;
    ///
    /// let policies = [Policy::new("burst", 10, Duration::from_secs(1))?, Policy::new("daily", 1000, Duration::from_secs(86_400))?];
    /// let d = Decision { allowed: true, remaining: 5, limit: 10, retry_after: Duration::ZERO, reset_after: Duration::from_millis(500) };
    /// let h = Headers::from_parts(&policies, [(0, d)], d)?; // subject to "burst" only
    /// assert_eq!(h.policy(), r#""burst";q=10;w=1"#);
    /// let e = Headers::from_parts(&policies, [(2, d)], d).unwrap_err();
    /// assert_eq!(e.to_string(), "invalid policy index: 2 (there are only 2 policies)");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn from_parts(
        policies: &'p [Policy],
        entries: impl IntoIterator<Item = (usize, Decision)>,
        combined: Decision,
    ) -> Result<Self> {
        let mut items = SmallVec::new();
        for (index, d) in entries {
            let policy = policies.get(index).ok_or_else(|| {
                Error::invalid("policy index", index, format!("there are only {} policies", policies.len()))
            })?;
            items.push((policy, d));
        }
        if items.is_empty() {
            return Err(Error::invalid("decision entries", "[]", "must name at least one policy"));
        }
        Ok(Headers { items, combined })
    }

    /// The combined decision.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::Decision;
    ///
    /// let p = Policy::new("api", 10, Duration::from_secs(1))?;
    /// let d = Decision { allowed: false, remaining: 0, limit: 10, retry_after: Duration::from_millis(100), reset_after: Duration::from_millis(1_500) };
    /// let h = Headers::single(&p, d);
    /// assert_eq!(h.decision(), &d);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn decision(&self) -> &Decision {
        &self.combined
    }

    /// The `RateLimit-Policy` value: `"name";q=<quota>;w=<window s>` per
    /// limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::Decision;
    ///
    /// let p = Policy::new("api", 10, Duration::from_secs(1))?;
    /// let d = Decision { allowed: false, remaining: 0, limit: 10, retry_after: Duration::from_millis(100), reset_after: Duration::from_millis(1_500) };
    /// let h = Headers::single(&p, d);
    /// assert_eq!(h.policy(), r#""api";q=10;w=1"#);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn policy(&self) -> String {
        let mut out = String::new();
        self.write(Value::Policy, &mut out);
        out
    }

    /// The `RateLimit` value: `"name";r=<remaining>;t=<s until full>` per
    /// limit.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::Decision;
    ///
    /// let p = Policy::new("api", 10, Duration::from_secs(1))?;
    /// let d = Decision { allowed: false, remaining: 0, limit: 10, retry_after: Duration::from_millis(100), reset_after: Duration::from_millis(1_500) };
    /// let h = Headers::single(&p, d);
    /// assert_eq!(h.ratelimit(), r#""api";r=0;t=2"#); // 1.5 s until full, rounded up
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn ratelimit(&self) -> String {
        let mut out = String::new();
        self.write(Value::RateLimit, &mut out);
        out
    }

    /// `Retry-After` in whole seconds, rounded up and at least 1, on a
    /// denial; `None` when the call was allowed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::Decision;
    ///
    /// let p = Policy::new("api", 10, Duration::from_secs(1))?;
    /// let d = Decision { allowed: false, remaining: 0, limit: 10, retry_after: Duration::from_millis(1), reset_after: Duration::from_secs(1) };
    /// assert_eq!(Headers::single(&p, d).retry_after(), Some(1)); // 1 ms, rounded up
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn retry_after(&self) -> Option<u64> {
        (!self.combined.allowed).then(|| ceil_secs(self.combined.retry_after).max(1))
    }

    /// The legacy fields, from the combined decision: `X-RateLimit-Limit`,
    /// `X-RateLimit-Remaining` and `X-RateLimit-Reset` (seconds until full,
    /// rounded up).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::Decision;
    ///
    /// let p = Policy::new("api", 10, Duration::from_secs(1))?;
    /// let d = Decision { allowed: false, remaining: 0, limit: 10, retry_after: Duration::from_millis(100), reset_after: Duration::from_millis(1_500) };
    /// let h = Headers::single(&p, d);
    /// assert_eq!(h.legacy()[2], ("X-RateLimit-Reset", "2".to_owned()));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn legacy(&self) -> [Field; 3] {
        let d = &self.combined;
        [
            ("X-RateLimit-Limit", d.limit.to_string()),
            ("X-RateLimit-Remaining", d.remaining.to_string()),
            ("X-RateLimit-Reset", ceil_secs(d.reset_after).to_string()),
        ]
    }

    /// Each field `draft` and `legacy` call for, in order, as its name and
    /// what its value is: the one list [`fields_in`](Self::fields_in) and
    /// [`write_lines_in`](Self::write_lines_in) both follow.
    fn each(&self, draft: Draft, legacy: bool, mut field: impl FnMut(&'static str, Value)) {
        let d = &self.combined;
        match draft {
            Draft::Draft11 => {
                field("RateLimit-Policy", Value::Policy);
                field("RateLimit", Value::RateLimit);
            }
            Draft::Draft7 => {
                field("RateLimit-Policy", Value::UnnamedPolicy);
                field("RateLimit", Value::Draft7);
            }
            Draft::Draft6 => {
                field("RateLimit-Policy", Value::UnnamedPolicy);
                field("RateLimit-Limit", Value::Int(sf_int(d.limit)));
                field("RateLimit-Remaining", Value::Int(sf_int(d.remaining)));
                field("RateLimit-Reset", Value::Int(sf_int(ceil_secs(d.reset_after))));
            }
        }
        if let Some(s) = self.retry_after() {
            field("Retry-After", Value::Int(s));
        }
        if legacy {
            field("X-RateLimit-Limit", Value::Int(d.limit));
            field("X-RateLimit-Remaining", Value::Int(d.remaining));
            field("X-RateLimit-Reset", Value::Int(ceil_secs(d.reset_after)));
        }
    }

    /// Appends the value `v` stands for.
    fn write(&self, v: Value, out: &mut String) {
        match v {
            Value::Int(n) => push_int(out, n),
            Value::Policy => {
                for (i, (p, _)) in self.items.iter().enumerate() {
                    sep(out, i);
                    out.push_str(&p.item);
                }
            }
            Value::RateLimit => {
                for (i, (p, d)) in self.items.iter().enumerate() {
                    sep(out, i);
                    out.push_str(&p.quoted);
                    out.push_str(";r=");
                    push_int(out, sf_int(d.remaining));
                    out.push_str(";t=");
                    push_int(out, sf_int(ceil_secs(d.reset_after)));
                }
            }
            Value::UnnamedPolicy => {
                for (i, (p, _)) in self.items.iter().enumerate() {
                    sep(out, i);
                    push_int(out, sf_int(p.quota));
                    out.push_str(";w=");
                    push_int(out, sf_int(p.window_secs));
                }
            }
            Value::Draft7 => {
                let d = &self.combined;
                out.push_str("limit=");
                push_int(out, sf_int(d.limit));
                out.push_str(", remaining=");
                push_int(out, sf_int(d.remaining));
                out.push_str(", reset=");
                push_int(out, sf_int(ceil_secs(d.reset_after)));
            }
        }
    }

    /// Every field a response carries: `RateLimit-Policy`, `RateLimit`,
    /// `Retry-After` on a denial, and the legacy fields when asked.
    ///
    /// ```
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("10/s").build()?;
    /// let policy = Policy::of("api", limiter.algorithm())?;
    /// let names: Vec<_> = Headers::single(&policy, limiter.allow("k")?).fields(true).into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names, ["RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn fields(&self, legacy: bool) -> Vec<Field> {
        self.fields_in(Draft::Draft11, legacy)
    }

    /// [`fields`](Self::fields) with the standard ones as `draft` writes
    /// them.
    ///
    /// ```
    /// # use ratomic::headers::{Draft, Headers, Policy};
    /// # use std::time::Duration;
    /// # use ratomic::Decision;
    /// let p = Policy::new("burst", 100, Duration::from_secs(60))?;
    /// let d = Decision {
    ///     allowed: true, remaining: 99, limit: 100,
    ///     retry_after: Duration::ZERO, reset_after: Duration::from_millis(41_200),
    /// };
    /// let h = Headers::single(&p, d);
    /// assert_eq!(
    ///     h.fields_in(Draft::Draft7, false),
    ///     [("RateLimit-Policy", "100;w=60".to_owned()), ("RateLimit", "limit=100, remaining=99, reset=42".to_owned())]
    /// );
    /// assert_eq!(h.fields_in(Draft::Draft6, false)[1..], [
    ///     ("RateLimit-Limit", "100".to_owned()),
    ///     ("RateLimit-Remaining", "99".to_owned()),
    ///     ("RateLimit-Reset", "42".to_owned()),
    /// ]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn fields_in(&self, draft: Draft, legacy: bool) -> Vec<Field> {
        let mut out = Vec::with_capacity(7);
        self.each(draft, legacy, |name, v| {
            let mut value = String::new();
            self.write(v, &mut value);
            out.push((name, value));
        });
        out
    }

    /// The fields as HTTP/1.1 header lines, `Name: value\r\n` each.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::Decision;
    ///
    /// let p = Policy::new("api", 10, Duration::from_secs(1))?;
    /// let d = Decision { allowed: false, remaining: 0, limit: 10, retry_after: Duration::from_millis(100), reset_after: Duration::from_millis(1_500) };
    /// let h = Headers::single(&p, d);
    /// assert!(h.lines(true).contains("Retry-After: 1\r\nX-RateLimit-Limit: 10\r\n"));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn lines(&self, legacy: bool) -> String {
        self.lines_in(Draft::Draft11, legacy)
    }

    /// [`lines`](Self::lines) in `draft`'s form.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::headers::{Draft, Headers, Policy};
    /// use ratomic::Decision;
    ///
    /// let p = Policy::new("api", 10, Duration::from_secs(1))?;
    /// let d = Decision { allowed: true, remaining: 9, limit: 10, retry_after: Duration::ZERO, reset_after: Duration::from_millis(100) };
    /// assert_eq!(
    ///     Headers::single(&p, d).lines_in(Draft::Draft7, false),
    ///     "RateLimit-Policy: 10;w=1\r\nRateLimit: limit=10, remaining=9, reset=1\r\n"
    /// );
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn lines_in(&self, draft: Draft, legacy: bool) -> String {
        let mut out = String::with_capacity(128);
        self.write_lines_in(draft, legacy, &mut out);
        out
    }

    /// Appends [`lines_in`](Self::lines_in) to `out`: one buffer and no
    /// allocation per field, for a face or server that writes many
    /// responses.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::headers::{Draft, Headers, Policy};
    /// use ratomic::Decision;
    ///
    /// let p = Policy::new("api", 10, Duration::from_secs(1))?;
    /// let d = Decision { allowed: true, remaining: 9, limit: 10, retry_after: Duration::ZERO, reset_after: Duration::from_millis(100) };
    /// let mut response = String::from("HTTP/1.1 200 OK\r\n");
    /// Headers::single(&p, d).write_lines_in(Draft::Draft11, false, &mut response);
    /// assert!(response.ends_with("RateLimit: \"api\";r=9;t=1\r\n"));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn write_lines_in(&self, draft: Draft, legacy: bool, out: &mut String) {
        self.each(draft, legacy, |name, v| {
            out.push_str(name);
            out.push_str(": ");
            self.write(v, out);
            out.push_str("\r\n");
        });
    }

    /// The names of the limits that denied the call (empty when allowed).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::headers::{Headers, Policy};
    /// use ratomic::Decision;
    ///
    /// let p = Policy::new("api", 10, Duration::from_secs(1))?;
    /// let d = Decision { allowed: false, remaining: 0, limit: 10, retry_after: Duration::from_millis(100), reset_after: Duration::from_millis(1_500) };
    /// let h = Headers::single(&p, d);
    /// assert_eq!(h.denied_by().collect::<Vec<_>>(), ["api"]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn denied_by(&self) -> impl Iterator<Item = &'p str> + '_ {
        self.items.iter().filter(|(_, d)| !d.allowed).map(|(p, _)| p.name())
    }

    /// On a denial, the RFC 9457 problem document for a 429 response
    /// ([`PROBLEM_CONTENT_TYPE`]); `None` when the call was allowed.
    ///
    /// ```
    /// # use ratomic::headers::{Headers, Policy};
    /// # use std::time::Duration;
    /// # use ratomic::Decision;
    /// let p = Policy::new("burst", 10, Duration::from_secs(1))?;
    /// let denied = Decision {
    ///     allowed: false, remaining: 0, limit: 10,
    ///     retry_after: Duration::from_millis(100), reset_after: Duration::from_secs(1),
    /// };
    /// assert_eq!(
    ///     Headers::single(&p, denied).problem_json().unwrap(),
    ///     r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Quota exceeded for burst; retry after 1 s.","violated-policies":["burst"],"retry-after":1}"#
    /// );
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn problem_json(&self) -> Option<String> {
        let retry = self.retry_after()?;
        let denied: Vec<&str> = self.denied_by().collect();
        let mut out = String::with_capacity(200);
        out.push_str(r#"{"type":""#);
        out.push_str(PROBLEM_TYPE);
        out.push_str(r#"","title":"Too Many Requests","status":429,"detail":"Quota exceeded for "#);
        for (i, name) in denied.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            json_escape_into(&mut out, name);
        }
        let _ = write!(out, r#"; retry after {retry} s.","violated-policies":["#);
        for (i, name) in denied.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push('"');
            json_escape_into(&mut out, name);
            out.push('"');
        }
        let _ = write!(out, r#"],"retry-after":{retry}}}"#);
        Some(out)
    }
}

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

fn sf_int(v: u64) -> u64 {
    v.min(MAX_SF_INTEGER)
}

/// Appends `v` in decimal (what `write!` does, without the formatter).
fn push_int(out: &mut String, mut v: u64) {
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

fn sep(out: &mut String, i: usize) {
    if i > 0 {
        out.push_str(", ");
    }
}

/// Policy names are printable ASCII (checked in [`Policy::new`]): only `"`
/// and `\` need escaping in JSON.
fn json_escape_into(out: &mut String, s: &str) {
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FixedWindowCounter, Gcra, ManualClock, Quota, Rate, Rule};

    fn decision(allowed: bool, remaining: u64, limit: u64, retry_ns: u64, reset_ns: u64) -> Decision {
        Decision {
            allowed,
            remaining,
            limit,
            retry_after: Duration::from_nanos(retry_ns),
            reset_after: Duration::from_nanos(reset_ns),
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn integers_are_written_as_write_does() {
        for v in [0, 7, 10, 99, 100, 4_294_967_296, MAX_SF_INTEGER, u64::MAX] {
            let mut out = String::new();
            push_int(&mut out, v);
            assert_eq!(out, v.to_string());
        }
    }

    #[test]
    fn seconds_round_up_at_every_edge() {
        for (ns, secs) in [(0, 0), (1, 1), (S - 1, 1), (S, 1), (S + 1, 2), (200_000_000, 1), (u64::MAX, 18_446_744_074)]
        {
            assert_eq!(ceil_secs(Duration::from_nanos(ns)), secs, "{ns} ns");
        }
    }

    #[test]
    fn reset_time_rounds_up_in_the_ratelimit_field() {
        let p = Policy::new("default", 10, Duration::from_secs(1)).unwrap();
        for (ns, t) in [(0, "0"), (1, "1"), (S, "1"), (S + 1, "2")] {
            let h = Headers::single(&p, decision(true, 3, 10, 0, ns));
            assert_eq!(h.ratelimit(), format!(r#""default";r=3;t={t}"#));
            assert_eq!(h.legacy()[2], ("X-RateLimit-Reset", t.to_owned()));
        }
    }

    #[test]
    fn retry_after_rounds_up_and_is_never_zero() {
        let p = Policy::new("default", 10, Duration::from_secs(1)).unwrap();
        // A denial's retry_after is positive by contract; 0 still gives 1.
        for (ns, secs) in [(0, 1), (1, 1), (200_000_000, 1), (S, 1), (S + 1, 2), (90 * S, 90)] {
            let h = Headers::single(&p, decision(false, 0, 10, ns, 5 * S));
            assert_eq!(h.retry_after(), Some(secs), "{ns} ns");
            assert!(h.fields(false).contains(&("Retry-After", secs.to_string())));
        }
        let allowed = Headers::single(&p, decision(true, 9, 10, 0, S));
        assert_eq!(allowed.retry_after(), None);
        assert!(allowed.fields(true).iter().all(|(n, _)| *n != "Retry-After"));
        assert_eq!(allowed.problem_json(), None);
    }

    #[test]
    fn policy_window_rounds_up_to_at_least_one_second() {
        for (window, w) in [
            (Duration::ZERO, 1),
            (Duration::from_nanos(1), 1),
            (Duration::from_secs(1), 1),
            (Duration::from_nanos(S + 1), 2),
        ] {
            assert_eq!(Policy::new("p", 3, window).unwrap().window_secs(), w);
        }
        let p = Policy::new("p", 3, Duration::from_millis(250)).unwrap();
        let h = Headers::single(&p, decision(true, 2, 3, 0, 1));
        assert_eq!(h.policy(), r#""p";q=3;w=1"#);
    }

    #[test]
    fn names_are_structured_field_strings() {
        let p = Policy::new(r#"a "quoted" \ name"#, 5, Duration::from_secs(60)).unwrap();
        let h = Headers::single(&p, decision(true, 4, 5, 0, 12 * S));
        assert_eq!(h.policy(), r#""a \"quoted\" \\ name";q=5;w=60"#);
        assert_eq!(h.ratelimit(), r#""a \"quoted\" \\ name";r=4;t=12"#);
        assert_eq!(p.name(), r#"a "quoted" \ name"#);
    }

    #[test]
    fn names_outside_printable_ascii_are_errors() {
        for bad in ["", "tab\there", "new\nline", "caf\u{e9}", "\u{7f}"] {
            let err = Policy::new(bad, 1, Duration::from_secs(1)).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { name: "policy name", .. }), "{bad:?}: {err}");
        }
        assert!(Policy::new(" ~", 1, Duration::from_secs(1)).is_ok(), "space and tilde are the bounds");
    }

    #[test]
    fn large_values_are_capped_at_the_largest_structured_field_integer() {
        let p = Policy::new("big", u64::MAX, Duration::from_nanos(u64::MAX)).unwrap();
        let h = Headers::single(&p, decision(true, u64::MAX, u64::MAX, 0, u64::MAX));
        assert_eq!(h.policy(), r#""big";q=999999999999999;w=18446744074"#);
        assert_eq!(h.ratelimit(), r#""big";r=999999999999999;t=18446744074"#);
        // The legacy fields are plain integers, not Structured Fields.
        assert_eq!(h.legacy()[0].1, u64::MAX.to_string());
    }

    #[test]
    fn fields_and_lines_in_order() {
        let p = Policy::new("default", 10, Duration::from_secs(1)).unwrap();
        let h = Headers::single(&p, decision(false, 0, 10, 100_000_000, S));
        assert_eq!(
            h.lines(true),
            "RateLimit-Policy: \"default\";q=10;w=1\r\n\
             RateLimit: \"default\";r=0;t=1\r\n\
             Retry-After: 1\r\n\
             X-RateLimit-Limit: 10\r\n\
             X-RateLimit-Remaining: 0\r\n\
             X-RateLimit-Reset: 1\r\n"
        );
        assert_eq!(h.fields(false).len(), 3);
    }

    #[test]
    fn earlier_drafts_list_each_limit_unnamed_and_answer_for_the_combined_decision() {
        let policies = [
            Policy::new("burst", 2, Duration::from_secs(1)).unwrap(),
            Policy::new("daily", 100, Duration::from_secs(86_400)).unwrap(),
        ];
        let h = Headers::from_parts(
            &policies,
            [(0, decision(false, 0, 2, 200_000_000, S)), (1, decision(true, 98, 100, 0, 86_400 * S))],
            decision(false, 0, 2, 200_000_000, S),
        )
        .unwrap();
        assert_eq!(
            h.lines_in(Draft::Draft7, true),
            "RateLimit-Policy: 2;w=1, 100;w=86400\r\n\
             RateLimit: limit=2, remaining=0, reset=1\r\n\
             Retry-After: 1\r\n\
             X-RateLimit-Limit: 2\r\n\
             X-RateLimit-Remaining: 0\r\n\
             X-RateLimit-Reset: 1\r\n"
        );
        assert_eq!(
            h.lines_in(Draft::Draft6, false),
            "RateLimit-Policy: 2;w=1, 100;w=86400\r\n\
             RateLimit-Limit: 2\r\n\
             RateLimit-Remaining: 0\r\n\
             RateLimit-Reset: 1\r\n\
             Retry-After: 1\r\n"
        );
        assert_eq!(h.lines_in(Draft::Draft11, true), h.lines(true));
    }

    #[test]
    fn lines_are_the_fields_in_every_draft() {
        let policies = [
            Policy::new("burst", 2, Duration::from_secs(1)).unwrap(),
            Policy::new("daily", 100, Duration::from_secs(86_400)).unwrap(),
        ];
        for allowed in [true, false] {
            let d = decision(allowed, 1, 2, if allowed { 0 } else { 1 }, S + 1);
            let h = Headers::from_parts(&policies, [(0, d), (1, decision(true, 98, 100, 0, 7 * S))], d).unwrap();
            for draft in [Draft::Draft11, Draft::Draft7, Draft::Draft6] {
                for legacy in [false, true] {
                    let joined: String =
                        h.fields_in(draft, legacy).iter().map(|(n, v)| format!("{n}: {v}\r\n")).collect();
                    let mut appended = String::from("before\r\n");
                    h.write_lines_in(draft, legacy, &mut appended);
                    assert_eq!(h.lines_in(draft, legacy), joined, "{draft:?} legacy={legacy} allowed={allowed}");
                    assert_eq!(appended, format!("before\r\n{joined}"));
                }
            }
        }
    }

    #[test]
    fn a_limiter_names_every_limit_and_the_ones_that_denied() {
        let limiter = Limiter::builder()
            .limit("burst", Rule::token_bucket(Quota::parse("2/s").unwrap()))
            .limit("daily", Rule::fixed_window(Rate::parse("100/d").unwrap()).unwrap())
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let policies = Policy::for_limiter(&limiter).unwrap();
        let d = limiter.allow("k").unwrap();
        let h = Headers::multi(&policies, &d).unwrap();
        assert_eq!(h.policy(), r#""burst";q=2;w=1, "daily";q=100;w=86400"#);
        assert_eq!(h.ratelimit(), r#""burst";r=1;t=1, "daily";r=99;t=86400"#);
        let _ = limiter.allow("k").unwrap();
        let d = limiter.allow("k").unwrap();
        let h = Headers::multi(&policies, &d).unwrap();
        assert_eq!(h.retry_after(), Some(1));
        assert_eq!(h.denied_by().collect::<Vec<_>>(), ["burst"]);
        let body = h.problem_json().unwrap();
        assert!(body.contains(r#""detail":"Quota exceeded for burst; retry after 1 s.","violated-policies":["burst"],"retry-after":1}"#), "{body}");

        // A call subject to some limits lists only those.
        let daily = limiter.limit_set(&["daily"]).unwrap();
        let d = limiter.select(daily).allow("k").unwrap();
        let h = Headers::multi(&policies, &d).unwrap();
        assert_eq!(h.policy(), r#""daily";q=100;w=86400"#);
        assert_eq!(h.ratelimit(), r#""daily";r=97;t=86400"#);
    }

    #[test]
    fn problem_body_escapes_names_and_lists_every_denier() {
        let a = Policy::new(r#"x"y"#, 1, Duration::from_secs(1)).unwrap();
        let b = Policy::new(r"back\slash", 1, Duration::from_secs(1)).unwrap();
        let policies = [a, b];
        let h = Headers::from_parts(
            &policies,
            [(0, decision(false, 0, 1, S, S)), (1, decision(false, 0, 1, 2 * S + 1, 3 * S))],
            decision(false, 0, 1, 2 * S + 1, 3 * S),
        )
        .unwrap();
        assert_eq!(
            h.problem_json().unwrap(),
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Too Many Requests","status":429,"detail":"Quota exceeded for x\"y, back\\slash; retry after 3 s.","violated-policies":["x\"y","back\\slash"],"retry-after":3}"#
        );
    }

    #[test]
    fn from_parts_rejects_bad_indexes_and_empty_entries() {
        let p = [Policy::new("p", 1, Duration::from_secs(1)).unwrap()];
        assert!(Headers::from_parts(&p, [(1, decision(true, 0, 1, 0, 0))], decision(true, 0, 1, 0, 0)).is_err());
        assert!(Headers::from_parts(&p, [], decision(true, 0, 1, 0, 0)).is_err());
        assert!(
            Policy::for_limiter(&Limiter::builder().limit("a", Rule::parse("1/s").unwrap()).build().unwrap()).is_ok()
        );
    }

    #[test]
    fn policies_of_each_algorithm() {
        let tb = Policy::of("tb", &Gcra::new(Quota::new(5, 2.0).unwrap())).unwrap();
        assert_eq!((tb.quota(), tb.window_secs()), (5, 3), "5 tokens at 2/s fill in 2.5 s");
        let fw = Policy::of("fw", &FixedWindowCounter::new(Rate::parse("100/min").unwrap()).unwrap()).unwrap();
        assert_eq!((fw.quota(), fw.window_secs()), (100, 60));
    }
}
