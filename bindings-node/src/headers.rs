//! HTTP header fields and problem bodies from decisions: core's
//! `ratomic::headers`, for each limiter's `headers()` and `problem()`.
//! Decisions come back from JavaScript as the plain objects the limiters
//! returned; nothing is formatted here.

use std::cell::RefCell;
use std::time::Duration;

use napi_derive::napi;
use ratomic::headers::{Draft, Headers, Policy};
use ratomic::{Algorithm, Decision, Rule};

use crate::error::{whole, JsFailure, Res};

/// A decision as JavaScript holds it (what `allow` returned).
#[napi(object)]
#[derive(Clone, Debug)]
pub struct DecisionIn {
    pub allowed: bool,
    pub remaining: f64,
    pub limit: f64,
    pub retry_after_ms: f64,
    pub reset_after_ms: f64,
}

/// One entry of a `Limiter` decision as JavaScript holds it.
#[napi(object)]
#[derive(Clone, Debug)]
pub struct EntryIn {
    pub name: String,
    pub allowed: bool,
    pub remaining: f64,
    pub limit: f64,
    pub retry_after_ms: f64,
    pub reset_after_ms: f64,
}

/// Milliseconds as a duration, rounded **up** to the nanosecond, so a
/// header never tells a client to come back before it should.
fn duration(name: &str, ms: f64) -> Res<Duration> {
    if ms.is_finite() && ms >= 0.0 {
        Ok(Duration::from_nanos((ms * 1e6).ceil().min(u64::MAX as f64) as u64))
    } else {
        Err(JsFailure::range(
            "ERR_RATOMIC_INVALID_ARGUMENT",
            format!("invalid {name}: {} (must be a finite number of milliseconds >= 0)", crate::error::js_number(ms)),
        ))
    }
}

fn decision(allowed: bool, remaining: f64, limit: f64, retry_ms: f64, reset_ms: f64) -> Res<Decision> {
    Ok(Decision {
        allowed,
        remaining: whole("decision.remaining", remaining, 0)?,
        limit: whole("decision.limit", limit, 0)?,
        retry_after: duration("decision.retryAfterMs", retry_ms)?,
        reset_after: duration("decision.resetAfterMs", reset_ms)?,
    })
}

impl DecisionIn {
    fn core(&self) -> Res<Decision> {
        decision(self.allowed, self.remaining, self.limit, self.retry_after_ms, self.reset_after_ms)
    }
}

/// The fields of a headers value as `Name: value\r\n` lines: one string
/// crosses to JavaScript, which splits it into pairs (one N-API string is
/// far cheaper than an array of arrays of them). `format` is what
/// `ratomic.js`'s `headerOptions` packs: bit 0 the legacy `X-RateLimit-*`
/// fields, the bits above it the draft (0: 11 or 8, 1: 7, 2: 6).
pub fn fields(format: u32) -> impl FnOnce(&Headers<'_>) -> String {
    let draft = match format >> 1 {
        1 => Draft::Draft7,
        2 => Draft::Draft6,
        _ => Draft::Draft11,
    };
    move |h| h.lines_in(draft, format & 1 == 1)
}

/// The problem body of a headers value (None when allowed).
pub fn problem(h: &Headers<'_>) -> Option<String> {
    h.problem_json()
}

/// `f` of the headers of a single limit's decision under `policy`.
pub fn with_policy<T>(policy: &Policy, d: &DecisionIn, f: impl FnOnce(&Headers<'_>) -> T) -> Res<T> {
    let h = Headers::single(policy, d.core()?);
    Ok(f(&h))
}

/// The policy a single-rule limiter's `headers`/`problem` last asked for:
/// a middleware asks for the same one on every request, so it is built once.
#[derive(Default)]
pub struct PolicyCache(RefCell<Option<Policy>>);

impl PolicyCache {
    /// `f` of `alg`'s policy named `name`, built once per name in a row.
    pub fn with<T>(&self, name: &str, alg: &impl Algorithm, f: impl FnOnce(&Policy) -> Res<T>) -> Res<T> {
        let mut cached = self.0.borrow_mut();
        if cached.as_ref().is_none_or(|p| p.name() != name) {
            *cached = Some(Policy::of(name, alg)?);
        }
        f(cached.as_ref().expect("just set"))
    }
}

/// `f` of the headers of a single limit's decision, the limit named `name`.
pub fn with_single<T>(name: &str, alg: &impl Algorithm, d: &DecisionIn, f: impl FnOnce(&Headers<'_>) -> T) -> Res<T> {
    let p = Policy::of(name, alg)?;
    let h = Headers::single(&p, d.core()?);
    Ok(f(&h))
}

/// `f` of the headers of a multi-limit decision of a limiter whose limits
/// are `names` / `rules`: its combined decision and one entry per limit the
/// call was subject to, named.
pub fn with_multi<'a, T>(
    names: impl Iterator<Item = &'a str>,
    rules: &[Rule],
    combined: &DecisionIn,
    entries: &[EntryIn],
    f: impl FnOnce(&Headers<'_>) -> T,
) -> Res<T> {
    let policies = names.zip(rules).map(|(n, r)| Policy::of(n, r)).collect::<ratomic::Result<Vec<_>>>()?;
    with_policies(&policies, "limit", "limiter", combined, entries, f)
}

/// `f` of the headers of a decision of a limiter in a shared backend
/// (`ratomic/redis`, `ratomic/postgres`) of `rules` as given: a single
/// rule's, its limit named `name`, or, for named limits (`multi`, named
/// `names`), one with its `entries`. `class` names the limiter whose
/// decisions carry entries, for the error when they are missing.
#[allow(clippy::too_many_arguments)]
pub fn with_backend<'a, T>(
    multi: bool,
    names: impl Iterator<Item = &'a str>,
    rules: &[Rule],
    class: &str,
    d: &DecisionIn,
    entries: Option<Vec<EntryIn>>,
    name: &str,
    f: impl FnOnce(&Headers<'_>) -> T,
) -> Res<T> {
    match (multi, entries) {
        (false, _) => with_single(name, &rules[0], d, f),
        (true, Some(entries)) => with_multi(names, rules, d, &entries, f),
        (true, None) => Err(JsFailure::type_error(
            "ERR_RATOMIC_INVALID_ARGUMENT",
            format!("decision must be a {class} decision (with entries)"),
        )),
    }
}

/// The rule of a shared backend's limiter with its units, as core prints
/// it (`"fixed window 5 per 1m"`), or its named rules (`"burst": token
/// bucket 5 per 1s, ...`).
pub fn describe_backend<'a>(multi: bool, names: impl Iterator<Item = &'a str>, rules: &[Rule]) -> String {
    if !multi {
        return rules[0].to_string();
    }
    names.zip(rules).map(|(name, rule)| format!("{name:?}: {rule}")).collect::<Vec<_>>().join(", ")
}

/// `f` of the headers of a decision with entries (a `Limiter`'s or a
/// `Stack`'s) under `policies`, one per limit or member and named as they
/// are: each entry is matched to its policy by name. `part` / `whole` name
/// what the policies are of in the error for an unknown name ("limit" of a
/// "limiter", "member" of a "stack").
pub fn with_policies<T>(
    policies: &[Policy],
    part: &str,
    whole: &str,
    combined: &DecisionIn,
    entries: &[EntryIn],
    f: impl FnOnce(&Headers<'_>) -> T,
) -> Res<T> {
    let parts = entries
        .iter()
        .map(|e| {
            let index = policies.iter().position(|p| p.name() == e.name).ok_or_else(|| {
                JsFailure::range(
                    "ERR_RATOMIC_INVALID_ARGUMENT",
                    format!("no {part} named {:?} in this {whole}", e.name),
                )
            })?;
            Ok((index, decision(e.allowed, e.remaining, e.limit, e.retry_after_ms, e.reset_after_ms)?))
        })
        .collect::<Res<Vec<_>>>()?;
    let h = Headers::from_parts(policies, parts, combined.core()?)?;
    Ok(f(&h))
}
