//! The header fields and bodies of the layer's responses: each limiter's
//! policies prepared once (its `RateLimit-Policy` value, its quoted names,
//! the problem body around the wait), then per request only the numbers.
//!
//! The text is exactly what [`ratomic::headers`] writes (the unit tests
//! compare the two), so every ratomic face answers alike.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use http::{header, HeaderName, HeaderValue, Response, StatusCode};
use ratomic::headers::{ceil_secs, Draft, Headers, Policy, MAX_SF_INTEGER, PROBLEM_CONTENT_TYPE};
use ratomic::{Decision, Quota};
use smallvec::SmallVec;

/// Which fields a response carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Format {
    /// The standard fields' draft; `None`: no standard fields.
    pub draft: Option<Draft>,
    /// The legacy `X-RateLimit-*` fields.
    pub legacy: bool,
}

impl Default for Format {
    fn default() -> Self {
        Format { draft: Some(Draft::Draft11), legacy: false }
    }
}

pub(crate) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
pub(crate) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The fields one response gets: the two standard ones in place (no
/// allocation, little to move), the rest after them.
#[derive(Debug, Default)]
pub(crate) struct Fields {
    policy: Option<HeaderValue>,
    ratelimit: Option<HeaderValue>,
    more: Vec<(HeaderName, HeaderValue)>,
}

impl Fields {
    fn push(&mut self, name: HeaderName, value: HeaderValue) {
        if name == RATELIMIT_POLICY && self.policy.is_none() {
            self.policy = Some(value);
        } else if name == RATELIMIT && self.ratelimit.is_none() && self.more.is_empty() {
            self.ratelimit = Some(value);
        } else {
            self.more.push((name, value));
        }
    }

    pub(crate) fn len(&self) -> usize {
        usize::from(self.policy.is_some()) + usize::from(self.ratelimit.is_some()) + self.more.len()
    }

    /// The fields in order, by name.
    pub(crate) fn to_vec(&self) -> Vec<(HeaderName, HeaderValue)> {
        let mut out = Vec::with_capacity(self.len());
        out.extend(self.policy.iter().map(|v| (RATELIMIT_POLICY, v.clone())));
        out.extend(self.ratelimit.iter().map(|v| (RATELIMIT, v.clone())));
        out.extend(self.more.iter().cloned());
        out
    }
}

/// A limiter's policies, prepared for its responses.
#[derive(Debug)]
pub struct Heads {
    policies: Box<[Policy]>,
    /// Each policy's name as a Structured Field String, quotes included.
    quoted: Box<[Box<str>]>,
    /// `RateLimit-Policy` naming every policy, in order.
    all: HeaderValue,
    /// A single policy's problem body, cut where the wait goes.
    problem: Option<[Box<str>; 3]>,
}

/// Which limits answered, and what: `(policy index, decision)`.
pub(crate) type Entries = SmallVec<[(usize, Decision); 4]>;

impl Heads {
    pub(crate) fn new(policies: Vec<Policy>) -> ratomic::Result<Heads> {
        let quoted = policies.iter().map(|p| quote(p.name())).collect();
        let every: Entries = (0..policies.len()).map(|i| (i, FULL)).collect();
        let all = Headers::from_parts(&policies, every.iter().copied(), FULL)?.policy();
        let all = HeaderValue::from_static(interned(all));
        let problem = (policies.len() == 1).then(|| problem_template(&policies[0]));
        Ok(Heads { policies: policies.into(), quoted, all, problem })
    }

    /// The policy of a single rule, named `name`.
    pub(crate) fn single(name: &str, limit: u64, window: Duration) -> ratomic::Result<Heads> {
        Heads::new(vec![Policy::new(name, limit, window)?])
    }

    /// A quota's policy (as `Policy::of` a token bucket of it).
    pub(crate) fn of_quota(name: &str, quota: &Quota) -> ratomic::Result<Heads> {
        Heads::single(name, quota.capacity(), quota.burst_window())
    }

    pub(crate) fn len(&self) -> usize {
        self.policies.len()
    }

    /// The answer to one call: its fields (and its problem body on a denial).
    #[inline(always)]
    pub(crate) fn verdict(&self, entries: &[(usize, Decision)], combined: Decision, format: Format) -> Verdict {
        let mut fields = Fields::default();
        match format.draft {
            Some(Draft::Draft11) => {
                if let ([(0, d)], [_]) = (entries, &*self.policies) {
                    // A single limit (most layers): its item written at once.
                    fields.policy = Some(self.all.clone());
                    fields.ratelimit = Some(self.item(0, d));
                } else {
                    let every =
                        entries.len() == self.policies.len() && entries.iter().enumerate().all(|(i, e)| e.0 == i);
                    let policy = if every { self.all.clone() } else { self.joined(entries, Item::Policy) };
                    fields.policy = Some(policy);
                    fields.ratelimit = Some(self.joined(entries, Item::RateLimit));
                }
                self.tail(&combined, format.legacy, &mut fields);
            }
            Some(draft) => {
                let h = self.headers(entries, combined);
                for (name, value) in h.fields_in(draft, format.legacy) {
                    if let Ok(v) = HeaderValue::from_str(&value) {
                        fields.push(HeaderName::from_static(lower(name)), v);
                    }
                }
            }
            None => self.tail(&combined, format.legacy, &mut fields),
        }
        let problem = (!combined.allowed).then(|| self.problem(entries, combined));
        Verdict { decision: combined, fields, problem, plan: 0 }
    }

    /// `Retry-After` on a denial and the legacy fields if asked.
    fn tail(&self, d: &Decision, legacy: bool, fields: &mut Fields) {
        if !d.allowed {
            fields.push(header::RETRY_AFTER, HeaderValue::from(retry_secs(d)));
        }
        if legacy {
            fields.push(HeaderName::from_static("x-ratelimit-limit"), HeaderValue::from(d.limit));
            fields.push(HeaderName::from_static("x-ratelimit-remaining"), HeaderValue::from(d.remaining));
            fields.push(HeaderName::from_static("x-ratelimit-reset"), HeaderValue::from(ceil_secs(d.reset_after)));
        }
    }

    fn headers(&self, entries: &[(usize, Decision)], combined: Decision) -> Headers<'_> {
        Headers::from_parts(&self.policies, entries.iter().copied(), combined)
            .expect("the limiter's entries index its own policies")
    }

    /// Policy `i`'s `RateLimit` item for decision `d`.
    #[inline]
    fn item(&self, i: usize, d: &Decision) -> HeaderValue {
        let name = self.quoted[i].as_bytes();
        // The name, two labels of 3 bytes and two numbers of at most 15 digits.
        if name.len() + 36 > 96 {
            return self.joined(&[(i, *d)], Item::RateLimit);
        }
        let mut buf = [0u8; 96];
        let mut at = name.len();
        buf[..at].copy_from_slice(name);
        let mut n = itoa::Buffer::new();
        for (label, v) in [(b";r=", d.remaining), (b";t=", ceil_secs(d.reset_after))] {
            buf[at..at + 3].copy_from_slice(label);
            let digits = n.format(v.min(MAX_SF_INTEGER)).as_bytes();
            buf[at + 3..at + 3 + digits.len()].copy_from_slice(digits);
            at += 3 + digits.len();
        }
        value(&buf[..at])
    }

    /// One draft-11 item per entry, `, `-separated, formatted on the stack.
    fn joined(&self, entries: &[(usize, Decision)], item: Item) -> HeaderValue {
        // Each item: its quoted name, two labels of 3 bytes, two numbers of
        // at most 15 digits, and a separator.
        let bound: usize = entries.iter().map(|(i, _)| self.quoted[*i].len() + 38).sum();
        if bound <= 128 {
            let mut buf = [0u8; 128];
            let n = self.write_items(entries, item, &mut buf);
            value(&buf[..n])
        } else {
            let mut buf = vec![0u8; bound];
            let n = self.write_items(entries, item, &mut buf);
            value(&buf[..n])
        }
    }

    /// Writes the items into `out` (long enough); returns the length.
    #[inline]
    fn write_items(&self, entries: &[(usize, Decision)], item: Item, out: &mut [u8]) -> usize {
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        let mut n = itoa::Buffer::new();
        for (k, (i, d)) in entries.iter().enumerate() {
            if k > 0 {
                put(b", ");
            }
            put(self.quoted[*i].as_bytes());
            let (a, b) = match item {
                Item::Policy => ((b";q=", self.policies[*i].quota()), (b";w=", self.policies[*i].window_secs())),
                Item::RateLimit => ((b";r=", d.remaining), (b";t=", ceil_secs(d.reset_after))),
            };
            for (label, value) in [a, b] {
                put(label);
                put(n.format(value.min(MAX_SF_INTEGER)).as_bytes());
            }
        }
        at
    }

    /// The RFC 9457 document for a 429.
    fn problem(&self, entries: &[(usize, Decision)], combined: Decision) -> String {
        match &self.problem {
            Some([before, between, after]) => {
                let mut n = itoa::Buffer::new();
                let secs = n.format(retry_secs(&combined));
                let mut out = String::with_capacity(before.len() + between.len() + after.len() + 2 * secs.len());
                for part in [&**before, secs, &**between, secs, &**after] {
                    out.push_str(part);
                }
                out
            }
            None => self.headers(entries, combined).problem_json().unwrap_or_default(),
        }
    }
}

#[derive(Clone, Copy)]
enum Item {
    Policy,
    RateLimit,
}

/// `text`, kept for the life of the process, once per distinct text: a
/// `HeaderValue::from_static` of it is copied per response with no shared
/// count for threads to contend on, and the texts kept are bounded by the
/// policies a program describes, however many layers it builds.
fn interned(text: String) -> &'static str {
    static TEXTS: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
    let mut texts = TEXTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(kept) = texts.get(text.as_str()) {
        return kept;
    }
    let kept: &'static str = Box::leak(text.into_boxed_str());
    texts.insert(kept);
    kept
}

/// How much of a thread's buffer for field values is allocated at once.
const ARENA: usize = 4096;

thread_local! {
    /// Each thread's buffer the values it formats are cut from: a value
    /// shares it (one count on it, no allocation of its own), and the
    /// buffer is reused from its start once every value cut from it has
    /// been dropped (or a fresh one allocated while some are still held).
    static VALUES: std::cell::RefCell<bytes::BytesMut> = std::cell::RefCell::new(bytes::BytesMut::new());
}

/// A field value of quoted names, digits and punctuation.
fn value(bytes: &[u8]) -> HeaderValue {
    value_of(&[bytes])
}

/// A field value of quoted names, digits and punctuation: `pieces` joined.
#[inline]
fn value_of(pieces: &[&[u8]]) -> HeaderValue {
    let len = pieces.iter().map(|p| p.len()).sum();
    let shared = VALUES.with(|values| {
        let mut values = values.borrow_mut();
        if values.capacity() < len {
            values.reserve(ARENA.max(len));
        }
        for piece in pieces {
            values.extend_from_slice(piece);
        }
        values.split().freeze()
    });
    debug_assert!(HeaderValue::from_bytes(&shared).is_ok());
    // SAFETY: quoted names are printable ASCII (Policy::new checks it), the
    // rest digits and punctuation: all valid in a field value.
    unsafe { HeaderValue::from_maybe_shared_unchecked(shared) }
}

/// A full key's answer: what formats a policy without a call.
const FULL: Decision =
    Decision { allowed: true, remaining: 0, limit: 0, retry_after: Duration::ZERO, reset_after: Duration::ZERO };

/// `Retry-After`: whole seconds, rounded up, at least 1.
fn retry_secs(d: &Decision) -> u64 {
    ceil_secs(d.retry_after).max(1)
}

/// A name as a Structured Field String (as ratomic's `Policy` quotes it).
fn quote(name: &str) -> Box<str> {
    let mut quoted = String::with_capacity(name.len() + 2);
    quoted.push('"');
    for c in name.chars() {
        if c == '"' || c == '\\' {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    quoted.into()
}

/// `policy`'s problem body cut around its two mentions of the wait: the
/// parts where two bodies of different waits (same number of digits)
/// differ.
fn problem_template(policy: &Policy) -> [Box<str>; 3] {
    let body = |secs: u64| {
        let d = Decision {
            allowed: false,
            remaining: 0,
            limit: policy.quota(),
            retry_after: Duration::from_secs(secs),
            reset_after: Duration::from_secs(secs),
        };
        Headers::single(policy, d).problem_json().expect("a denial has a problem body")
    };
    let (a, b) = (body(111_111_111), body(222_222_222));
    let differ: Vec<usize> =
        a.bytes().zip(b.bytes()).enumerate().filter(|(_, (x, y))| x != y).map(|(i, _)| i).collect();
    assert_eq!(differ.len(), 18, "the wait appears twice in a problem body");
    let (first, second) = (differ[0], differ[9]);
    [a[..first].into(), a[first + 9..second].into(), a[second + 9..].into()]
}

/// Header names in the lower case `HeaderName::from_static` requires.
fn lower(name: &'static str) -> &'static str {
    match name {
        "RateLimit-Policy" => "ratelimit-policy",
        "RateLimit" => "ratelimit",
        "RateLimit-Limit" => "ratelimit-limit",
        "RateLimit-Remaining" => "ratelimit-remaining",
        "RateLimit-Reset" => "ratelimit-reset",
        "Retry-After" => "retry-after",
        "X-RateLimit-Limit" => "x-ratelimit-limit",
        "X-RateLimit-Remaining" => "x-ratelimit-remaining",
        "X-RateLimit-Reset" => "x-ratelimit-reset",
        _ => "x-ratelimit-unknown",
    }
}

/// A limiter's answer to one request.
#[derive(Debug)]
pub struct Verdict {
    pub(crate) decision: Decision,
    pub(crate) fields: Fields,
    /// The 429's document (a denial only).
    pub(crate) problem: Option<String>,
    /// The plan charged (a [`Plans`](crate::Plans) limiter), for a refund.
    pub(crate) plan: usize,
}

/// What a denied request was answered, for [`RateLimitLayer::on_deny`](crate::RateLimitLayer::on_deny).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Outcome {
    /// The call passed every limit (always `false` for `on_deny`).
    pub allowed: bool,
    /// The combined decision.
    pub decision: Decision,
    /// The fields the response gets: `RateLimit-Policy`, `RateLimit`,
    /// `Retry-After`, and the legacy fields when asked.
    pub fields: Vec<(HeaderName, HeaderValue)>,
    /// The RFC 9457 document the default 429 carries.
    pub problem: Option<String>,
}

impl Outcome {
    pub(crate) fn of(v: &Verdict) -> Self {
        Outcome {
            allowed: v.decision.allowed,
            decision: v.decision,
            fields: v.fields.to_vec(),
            problem: v.problem.clone(),
        }
    }
}

/// What the handler of an admitted request finds in its extensions
/// (`axum::Extension<RateLimitInfo>`): the limiter's decision and what the
/// request cost. A request the layer let through unchecked (a method it
/// does not limit, a backend failing open) carries none.
///
/// ```
/// use axum::{routing::get, Extension, Router};
/// use ratomic::TokenBucket;
/// use ratomic_tower::{RateLimitInfo, RateLimitLayer};
///
/// async fn hello(Extension(info): Extension<RateLimitInfo>) -> String {
///     format!("{} left", info.decision.remaining)
/// }
/// # fn app() -> Result<Router, ratomic::Error> {
/// let app = Router::new().route("/", get(hello)).layer(RateLimitLayer::new(TokenBucket::builder("10/s").build()?));
/// # Ok(app) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimitInfo {
    /// The decision (for several limits, the combined one).
    pub decision: Decision,
    /// What the request was charged.
    pub cost: u64,
}

/// Puts `fields` on a response (taking them), each replacing any the
/// response had of that name.
#[inline]
pub(crate) fn add_fields(headers: &mut http::HeaderMap, fields: &mut Fields) {
    if let Some(v) = fields.policy.take() {
        headers.insert(RATELIMIT_POLICY, v);
    }
    if let Some(v) = fields.ratelimit.take() {
        headers.insert(RATELIMIT, v);
    }
    if !fields.more.is_empty() {
        headers.reserve(fields.more.len());
        for (name, value) in fields.more.drain(..) {
            headers.insert(name, value);
        }
    }
}

fn plain<B: From<String>>(status: StatusCode, body: String) -> Response<B> {
    let mut r = Response::new(B::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_CONTENT_TYPE));
    r
}

/// The default 429: the problem document, with the fields.
pub(crate) fn too_many<RB: From<String>>(mut v: Verdict) -> Response<RB> {
    let mut r = plain(StatusCode::TOO_MANY_REQUESTS, v.problem.unwrap_or_default());
    add_fields(r.headers_mut(), &mut v.fields);
    r
}

/// A generic RFC 9457 document for a request the limiter did not decide;
/// `Retry-After: 1` on a 503.
pub(crate) fn refusal<RB: From<String>>(status: StatusCode) -> Response<RB> {
    let detail = match status {
        StatusCode::SERVICE_UNAVAILABLE => "Rate limiting is unavailable; try again later.",
        StatusCode::INTERNAL_SERVER_ERROR => "Rate limiting is misconfigured on this server.",
        _ => "This request cannot be rate limited.",
    };
    let body = format!(
        r#"{{"type":"about:blank","title":"{}","status":{},"detail":"{detail}"}}"#,
        status.canonical_reason().unwrap_or(""),
        status.as_u16()
    );
    let mut r = plain(status, body);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decisions() -> Vec<Decision> {
        let ms = Duration::from_millis;
        let mut out = Vec::new();
        for (remaining, limit) in [(0, 1), (9, 10), (u64::MAX - 1, u64::MAX), (MAX_SF_INTEGER + 5, u64::MAX)] {
            for (retry, reset) in
                [(ms(0), ms(0)), (ms(1), ms(1_001)), (ms(59_999), ms(120_000)), (ms(3), ms(86_400_000))]
            {
                let allowed = retry.is_zero();
                out.push(Decision { allowed, remaining, limit, retry_after: retry, reset_after: reset });
            }
        }
        out
    }

    fn text(fields: &[(HeaderName, HeaderValue)]) -> Vec<(String, String)> {
        fields.iter().map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap().to_owned())).collect()
    }

    fn core(h: &Headers<'_>, draft: Draft, legacy: bool) -> Vec<(String, String)> {
        h.fields_in(draft, legacy).into_iter().map(|(n, v)| (n.to_ascii_lowercase(), v)).collect()
    }

    /// Values cut from a thread's buffer stay whole while later ones are
    /// written, whether held past a buffer's end or dropped for its reuse.
    #[test]
    fn values_from_the_shared_buffer_keep_their_text() {
        let text = |i: usize| format!("\"p\";r={i};t={}", i % 7);
        let held: Vec<(usize, HeaderValue)> = (0..10_000).map(|i| (i, value(text(i).as_bytes()))).collect();
        for i in 0..10_000 {
            // Dropped at once: the buffer is reused from its start.
            assert_eq!(value(text(i).as_bytes()).as_bytes(), text(i).as_bytes());
        }
        let long = "x".repeat(3 * ARENA);
        assert_eq!(value(long.as_bytes()).as_bytes(), long.as_bytes());
        for (i, v) in &held {
            assert_eq!(v.as_bytes(), text(*i).as_bytes());
        }
    }

    #[test]
    fn fields_and_bodies_are_ratomic_s_own() {
        let names = ["per-ip", "a \"quoted\" \\ name", "x"];
        let policies: Vec<Policy> = names
            .iter()
            .zip([(5, 60_000), (u64::MAX, 1), (100, 86_400_500)])
            .map(|(n, (q, w))| Policy::new(n, q, Duration::from_millis(w)).unwrap())
            .collect();
        let single = Heads::new(vec![policies[1].clone()]).unwrap();
        let multi = Heads::new(policies.clone()).unwrap();
        for d in decisions() {
            for draft in [Draft::Draft11, Draft::Draft7, Draft::Draft6] {
                for legacy in [false, true] {
                    let format = Format { draft: Some(draft), legacy };
                    let v = single.verdict(&[(0, d)], d, format);
                    let h = Headers::single(&policies[1], d);
                    assert_eq!(text(&v.fields.to_vec()), core(&h, draft, legacy));
                    assert_eq!(v.problem, h.problem_json());
                    for entries in [vec![(0, d), (1, d), (2, d)], vec![(0, d), (2, d)], vec![(1, d)]] {
                        let v = multi.verdict(&entries, d, format);
                        let h = Headers::from_parts(&policies, entries.iter().copied(), d).unwrap();
                        assert_eq!(text(&v.fields.to_vec()), core(&h, draft, legacy), "{entries:?}");
                        assert_eq!(v.problem, h.problem_json());
                    }
                }
            }
            let v = single.verdict(&[(0, d)], d, Format { draft: None, legacy: true });
            let names: Vec<_> = v.fields.to_vec().into_iter().map(|(n, _)| n.as_str().to_owned()).collect();
            let expected: &[&str] = if d.allowed { &[] } else { &["retry-after"] };
            assert_eq!(names[..names.len() - 3], *expected);
        }
    }
}
