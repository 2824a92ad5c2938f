//! Rules and store options: what JavaScript asks for, as core's [`Rule`]
//! and [`Options`], and a rule as JavaScript reads it back.
//!
//! The face only converts: numbers to whole numbers or durations, strings
//! to rates. Every range check (a limit of 0, a rate too fine, a window too
//! large for its limit) is core's.

use std::time::Duration;

use napi_derive::napi;
use ratomic::{Eviction, Options, Quota, Rate, Rule};

use crate::clock::ns_to_ms;
use crate::error::{js_number, whole, JsFailure, Res};

/// One rule: a token bucket or a window counter.
///
/// A token bucket is `capacity` + `refillPerSec`, or a `rate` string
/// (`"10/s"`: capacity 10, refilled over a second) whose capacity `burst`
/// (or `capacity`) overrides. A window is `limit` + `windowMs`, `limit` +
/// `window` (a duration such as `"1min"`), or a `rate` string (`"100/min"`).
#[napi(object)]
#[derive(Clone, Debug, PartialEq)]
pub struct RuleSpec {
    /// The limit's name (a `Limiter`'s limits only).
    pub name: Option<String>,
    /// `"tokenBucket"`, `"fixedWindow"` or `"slidingWindow"`.
    pub algorithm: String,
    /// Token bucket capacity (whole number >= 1).
    pub capacity: Option<f64>,
    /// Token bucket refill rate, tokens per second (finite, > 0).
    pub refill_per_sec: Option<f64>,
    /// A rate string such as `"10/s"` or `"1000/day"`.
    pub rate: Option<String>,
    /// Token bucket burst, overriding the capacity a `rate` string implies.
    pub burst: Option<f64>,
    /// Window limit (whole number >= 1).
    pub limit: Option<f64>,
    /// Window length in milliseconds (> 0).
    pub window_ms: Option<f64>,
    /// Window length as a duration string (`"1min"`, `"250ms"`, `"h"`).
    pub window: Option<String>,
}

/// How a limiter stores its keys: how many, how long, and where.
#[napi(object)]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoreOptions {
    /// Most keys held at once (default 4,194,304; 131,072 with `sharedFile`).
    pub max_keys: Option<f64>,
    /// Longest key in bytes (default 1024).
    pub max_key_len: Option<f64>,
    /// Most bytes of keys longer than 23 bytes held at once (default 64 MiB).
    pub max_key_bytes: Option<f64>,
    /// Keys to make room for when the limiter is built (default 0; at most
    /// `maxKeys`): no table grows while they come, at the price of
    /// allocating their slots at once.
    pub reserve_keys: Option<f64>,
    /// What happens to keys evicted at `maxKeys`: `"fair"` (the default) or `"strict"`.
    pub eviction: Option<String>,
    /// A file through which the processes of this host that build the same
    /// limiter on it share its keys (Linux; created `0600`, refused when it
    /// is a symbolic link, another user's, or in use with another rule, and
    /// made anew for this one once nobody uses it; the default clock only).
    pub shared_file: Option<String>,
}

/// A rule as JavaScript reads it back; every field is also an input a
/// constructor accepts.
#[napi(object)]
#[derive(Clone, Debug, PartialEq)]
pub struct RuleInfo {
    /// `"tokenBucket"`, `"fixedWindow"` or `"slidingWindow"`.
    pub algorithm: String,
    /// The most a key can hold: the capacity or the window's limit.
    pub limit: f64,
    /// Token bucket: the capacity (burst).
    pub capacity: Option<f64>,
    /// Token bucket: tokens refilled per second.
    pub refill_per_sec: Option<f64>,
    /// Window: its length in milliseconds.
    pub window_ms: Option<f64>,
    /// Window: the rule as a rate string (`"100/m"`), which parses back to it.
    pub rate: Option<String>,
}

fn missing(algorithm: &str, what: &str) -> JsFailure {
    JsFailure::type_error("ERR_RATOMIC_INVALID_ARGUMENT", format!("a {algorithm} needs {what}"))
}

/// Core's complaint about a parameter, reworded with the name and the value
/// JavaScript gave (core says `refill_per_sec`, `period` in nanoseconds).
fn as_given(name: &str, value: f64) -> impl FnOnce(ratomic::Error) -> JsFailure + '_ {
    move |e| match e {
        ratomic::Error::InvalidArgument { reason, .. } => {
            JsFailure::range("ERR_RATOMIC_INVALID_ARGUMENT", format!("invalid {name}: {} ({reason})", js_number(value)))
        }
        other => other.into(),
    }
}

/// Tokens per second: finite and above zero (what core can represent is
/// core's check).
fn refill_per_sec(v: f64) -> Res<f64> {
    if v.is_finite() && v > 0.0 {
        Ok(v)
    } else {
        Err(JsFailure::range(
            "ERR_RATOMIC_INVALID_ARGUMENT",
            format!("invalid refillPerSec: {} (must be a finite number of tokens per second > 0)", js_number(v)),
        ))
    }
}

fn quota(rule: &RuleSpec) -> Res<Quota> {
    let burst = |q: Quota, b: Option<f64>| -> Res<Quota> {
        match b {
            Some(b) => Ok(q.with_burst(whole("burst", b, 1)?).map_err(as_given("burst", b))?),
            None => Ok(q),
        }
    };
    match (&rule.rate, rule.capacity, rule.refill_per_sec) {
        (Some(rate), capacity, None) => burst(Quota::parse(rate)?, rule.burst.or(capacity)),
        (None, Some(capacity), Some(refill)) => {
            let q = Quota::new(whole("capacity", capacity, 1)?, refill_per_sec(refill)?).map_err(|e| match e {
                ratomic::Error::InvalidArgument { name: "capacity", .. } => as_given("capacity", capacity)(e),
                e => as_given("refillPerSec", refill)(e),
            })?;
            burst(q, rule.burst)
        }
        _ => Err(missing("token bucket", "a capacity and a refillPerSec, or a rate string")),
    }
}

/// The longest window, in milliseconds: the largest number of them whose
/// nanoseconds, rounded, stay below 2^63 (about 292 years).
const MAX_WINDOW_MS: f64 = 9_223_372_036_854.773;

/// Milliseconds as a duration: a whole number of nanoseconds (rounded)
/// from 1 ns to 2^63 − 1 ns, checked after rounding, so the bounds the
/// message states are the ones that hold.
fn window_ms(ms: f64) -> Res<Duration> {
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    let ns = (ms * 1e6).round();
    if ms.is_finite() && (1.0..TWO_POW_63).contains(&ns) {
        Ok(Duration::from_nanos(ns as u64))
    } else {
        let above = if ms > MAX_WINDOW_MS { "above the maximum: " } else { "" };
        Err(JsFailure::range(
            "ERR_RATOMIC_INVALID_ARGUMENT",
            format!(
                "invalid windowMs: {} ({above}must be a number of milliseconds from 0.000001 (1 ns) to {} (about 292 years))",
                js_number(ms),
                js_number(MAX_WINDOW_MS)
            ),
        ))
    }
}

fn window_rate(rule: &RuleSpec) -> Res<Rate> {
    match (&rule.rate, rule.limit, rule.window_ms, &rule.window) {
        (Some(rate), None, None, None) => Ok(Rate::parse(rate)?),
        (None, Some(limit), Some(ms), None) => {
            Ok(Rate::new(whole("limit", limit, 1)?, window_ms(ms)?).map_err(as_given("windowMs", ms))?)
        }
        // A duration string is a rate string's period.
        (None, Some(limit), None, Some(window)) => {
            Ok(Rate::parse(&format!("{}/{}", whole("limit", limit, 1)?, window.trim()))?)
        }
        _ => Err(missing(&rule.algorithm, "a limit and a windowMs (or a window string), or a rate string")),
    }
}

/// The limits of a string in the notation of Python's `limits` (slowapi):
/// `"10/second;1000/day"`, split on `;`, `,` or `|` by core's
/// `parse_limits`, which checks every rate and refuses a name given twice.
/// Each is a token bucket named by its rate string as written (trimmed),
/// given back as the rule spec core's parse of that string is.
#[napi]
pub fn parse_limits(env: napi::Env, limits: String) -> napi::Result<Vec<RuleSpec>> {
    let parsed = ratomic::parse_limits(&limits).map_err(|e| JsFailure::from(e).into_napi(&env))?;
    Ok(parsed
        .into_iter()
        .map(|(name, _)| RuleSpec {
            rate: Some(name.clone()),
            name: Some(name),
            algorithm: "tokenBucket".to_owned(),
            capacity: None,
            refill_per_sec: None,
            burst: None,
            limit: None,
            window_ms: None,
            window: None,
        })
        .collect())
}

/// Core's rule for `spec`.
pub fn rule(spec: &RuleSpec) -> Res<Rule> {
    match spec.algorithm.as_str() {
        "tokenBucket" => Ok(Rule::token_bucket(quota(spec)?)),
        "fixedWindow" => Ok(Rule::fixed_window(window_rate(spec)?)?),
        "slidingWindow" => Ok(Rule::sliding_window(window_rate(spec)?)?),
        other => Err(JsFailure::type_error(
            "ERR_RATOMIC_INVALID_ARGUMENT",
            format!("unknown algorithm {other:?} (expected \"tokenBucket\", \"fixedWindow\" or \"slidingWindow\")"),
        )),
    }
}

/// Core's store options for `o`.
pub fn options(o: &StoreOptions) -> Res<Options> {
    let size = |name, v: f64, min| whole(name, v, min).map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let mut options = Options::default();
    if let Some(n) = o.max_keys {
        options = options.max_keys(size("maxKeys", n, 1)?);
    }
    if let Some(n) = o.max_key_len {
        options = options.max_key_len(size("maxKeyLen", n, 1)?);
    }
    if let Some(n) = o.max_key_bytes {
        options = options.max_key_bytes(size("maxKeyBytes", n, 0)?);
    }
    if let Some(n) = o.reserve_keys {
        options = options.reserve_keys(size("reserveKeys", n, 0)?);
    }
    if let Some(path) = &o.shared_file {
        options = options.shared_file(path);
    }
    match o.eviction.as_deref() {
        None | Some("fair") => {}
        Some("strict") => options = options.eviction(Eviction::Strict),
        Some(other) => {
            return Err(JsFailure::range(
                "ERR_RATOMIC_INVALID_ARGUMENT",
                format!("invalid eviction: {other:?} (expected \"fair\" or \"strict\")"),
            ))
        }
    }
    Ok(options)
}

/// `rule` as JavaScript reads it back.
pub fn info(rule: &Rule) -> RuleInfo {
    let window = |algorithm: &str, limit: u64, window: Duration| RuleInfo {
        algorithm: algorithm.to_owned(),
        limit: limit as f64,
        capacity: None,
        refill_per_sec: None,
        window_ms: Some(ns_to_ms(window.as_nanos() as u64)),
        rate: Rate::new(limit, window).ok().map(|r| r.to_string()),
    };
    use ratomic::Algorithm as _;
    match rule {
        Rule::TokenBucket(g) => RuleInfo {
            algorithm: "tokenBucket".to_owned(),
            limit: g.quota().capacity() as f64,
            capacity: Some(g.quota().capacity() as f64),
            refill_per_sec: Some(g.quota().refill_per_sec()),
            window_ms: None,
            rate: None,
        },
        Rule::FixedWindow(w) => window("fixedWindow", w.limit(), w.window()),
        Rule::SlidingWindow(w) => window("slidingWindow", w.limit(), w.window()),
        // `Rule` is non-exhaustive: a kind added to core later reads back as its limit.
        other => RuleInfo {
            algorithm: format!("{other:?}"),
            limit: other.limit() as f64,
            capacity: None,
            refill_per_sec: None,
            window_ms: None,
            rate: None,
        },
    }
}

/// A short description of a spec, for error messages.
pub fn describe(rules: &[RuleSpec], options: &StoreOptions) -> String {
    let rule = |r: &RuleSpec| {
        let mut parts = vec![r.algorithm.clone()];
        let mut num = |k: &str, v: Option<f64>| {
            if let Some(v) = v {
                parts.push(format!("{k} {v}"));
            }
        };
        num("capacity", r.capacity);
        num("refillPerSec", r.refill_per_sec);
        num("burst", r.burst);
        num("limit", r.limit);
        num("windowMs", r.window_ms);
        if let Some(w) = &r.window {
            parts.push(format!("window {w:?}"));
        }
        if let Some(rate) = &r.rate {
            parts.push(format!("rate {rate:?}"));
        }
        match &r.name {
            Some(name) => format!("{name}: {}", parts.join(" ")),
            None => parts.join(" "),
        }
    };
    let mut s = rules.iter().map(rule).collect::<Vec<_>>().join(", ");
    for (k, v) in [
        ("maxKeys", options.max_keys),
        ("maxKeyLen", options.max_key_len),
        ("maxKeyBytes", options.max_key_bytes),
        ("reserveKeys", options.reserve_keys),
    ] {
        if let Some(v) = v {
            s.push_str(&format!(", {k} {v}"));
        }
    }
    if let Some(e) = &options.eviction {
        s.push_str(&format!(", eviction {e:?}"));
    }
    s
}
