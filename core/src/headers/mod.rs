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

use smallvec::SmallVec;

use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::limit::limiter::MultiDecision;

mod format;
mod policy;

pub use format::{ceil_secs, MAX_SF_INTEGER};
use format::{json_escape_into, push_int, sep, sf_int};
pub use policy::Policy;

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

    /// The fields for a [`Limiter`](crate::Limiter)'s decision, `policies` being
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

#[cfg(test)]
mod tests;
