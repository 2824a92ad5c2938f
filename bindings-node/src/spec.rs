//! Limiter specifications: what JavaScript asks for, checked and turned into
//! core limiters.

use std::sync::Arc;
use std::time::Duration;

use napi_derive::napi;
use ratomic::{FixedWindow, Limiter, Quota, Rate, Rule, SlidingWindow, TokenBucket};

use crate::engine::Engine;
use crate::error::{whole, JsFailure};

/// One rule: a token bucket or a window counter.
///
/// A token bucket is `capacity` + `refillPerSec`, or a `rate` string
/// (`"10/s"`: capacity 10, refilled over a second) with an optional `burst`
/// that overrides the capacity. A window is `limit` + `windowMs`, or a `rate`
/// string (`"100/min"`).
#[napi(object)]
#[derive(Clone, Debug, PartialEq)]
pub struct RuleSpec {
    /// The limit's name (used by `Limiter`; ignored for a single limiter).
    pub name: String,
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
}

/// A whole limiter: one rule (`multi: false`) or several named rules decided
/// all or nothing (`multi: true`), plus store options.
#[napi(object)]
#[derive(Clone, Debug, PartialEq)]
pub struct LimiterSpec {
    /// `true` for a `Limiter` of several named rules.
    pub multi: bool,
    /// The rules (exactly one unless `multi`).
    pub rules: Vec<RuleSpec>,
    /// Most keys held at once (default 4,194,304).
    pub max_keys: Option<f64>,
    /// Longest key in bytes (default 1024).
    pub max_key_len: Option<f64>,
}

fn missing(algorithm: &str, what: &str) -> JsFailure {
    JsFailure::type_error("ERR_RATOMIC_INVALID_ARGUMENT", format!("a {algorithm} needs {what}"))
}

fn quota(rule: &RuleSpec) -> Result<Quota, JsFailure> {
    let q = match (&rule.rate, rule.capacity, rule.refill_per_sec) {
        (Some(rate), capacity, None) => {
            let q = Quota::parse(rate)?;
            match rule.burst.or(capacity) {
                Some(b) => q.with_burst(whole("burst", b, 1)?)?,
                None => q,
            }
        }
        (None, Some(capacity), Some(refill)) => {
            let q = Quota::new(whole("capacity", capacity, 1)?, refill)?;
            match rule.burst {
                Some(b) => q.with_burst(whole("burst", b, 1)?)?,
                None => q,
            }
        }
        _ => return Err(missing("token bucket", "a capacity and a refillPerSec, or a rate string")),
    };
    Ok(q)
}

fn window_rate(rule: &RuleSpec) -> Result<Rate, JsFailure> {
    match (&rule.rate, rule.limit, rule.window_ms) {
        (Some(rate), None, None) => Ok(Rate::parse(rate)?),
        (None, Some(limit), Some(ms)) => {
            let limit = whole("limit", limit, 1)?;
            if !(ms.is_finite() && ms > 0.0 && ms * 1e6 < 9.2e18) {
                return Err(JsFailure::range(
                    "ERR_RATOMIC_INVALID_ARGUMENT",
                    format!("invalid window: {ms} ms (must be a finite number of milliseconds > 0)"),
                ));
            }
            Ok(Rate::new(limit, Duration::from_nanos((ms * 1e6).round() as u64))?)
        }
        _ => Err(missing(&rule.algorithm, "a limit and a window, or a rate string")),
    }
}

fn rule(rule: &RuleSpec) -> Result<Rule, JsFailure> {
    match rule.algorithm.as_str() {
        "tokenBucket" => Ok(Rule::token_bucket(quota(rule)?)),
        "fixedWindow" => Ok(Rule::fixed_window(window_rate(rule)?)?),
        "slidingWindow" => Ok(Rule::sliding_window(window_rate(rule)?)?),
        other => Err(JsFailure::type_error(
            "ERR_RATOMIC_INVALID_ARGUMENT",
            format!("unknown algorithm {other:?} (expected \"tokenBucket\", \"fixedWindow\" or \"slidingWindow\")"),
        )),
    }
}

/// Builds the core limiter `spec` describes, on the monotonic clock (a
/// JavaScript clock, when given, supplies `now` on every call instead).
pub fn build(spec: &LimiterSpec) -> Result<Engine, JsFailure> {
    let max_keys = spec.max_keys.map(|n| whole("maxKeys", n, 1)).transpose()?;
    let max_key_len = spec.max_key_len.map(|n| whole("maxKeyLen", n, 1)).transpose()?;
    let mut options = ratomic::Options::default();
    if let Some(n) = max_keys {
        options = options.max_keys(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if let Some(n) = max_key_len {
        options = options.max_key_len(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if spec.multi {
        if spec.rules.is_empty() {
            return Err(JsFailure::type_error("ERR_RATOMIC_INVALID_ARGUMENT", "a Limiter needs at least one limit"));
        }
        let mut builder = Limiter::builder().options(options);
        for r in &spec.rules {
            builder = builder.limit(r.name.clone(), rule(r)?);
        }
        let limiter = builder.build()?;
        return Ok(Engine::multi(limiter));
    }
    let [only] = spec.rules.as_slice() else {
        return Err(JsFailure::type_error("ERR_RATOMIC_INVALID_ARGUMENT", "a single limiter takes exactly one rule"));
    };
    Ok(match rule(only)? {
        Rule::TokenBucket(_) => {
            Engine::TokenBucket(Arc::new(TokenBucket::builder(quota(only)?).options(options).build()?))
        }
        Rule::FixedWindow(_) => {
            Engine::FixedWindow(Arc::new(FixedWindow::builder(window_rate(only)?)?.options(options).build()?))
        }
        Rule::SlidingWindow(_) => {
            Engine::SlidingWindow(Arc::new(SlidingWindow::builder(window_rate(only)?)?.options(options).build()?))
        }
        _ => return Err(JsFailure::error("ERR_RATOMIC", "this rule kind is not supported by the Node binding yet")),
    })
}

/// A short human description of a spec, for error messages.
pub fn describe(spec: &LimiterSpec) -> String {
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
        if let Some(rate) = &r.rate {
            parts.push(format!("rate {rate:?}"));
        }
        if spec.multi {
            format!("{}: {}", r.name, parts.join(" "))
        } else {
            parts.join(" ")
        }
    };
    let mut s = spec.rules.iter().map(rule).collect::<Vec<_>>().join(", ");
    if let Some(n) = spec.max_keys {
        s.push_str(&format!(", maxKeys {n}"));
    }
    if let Some(n) = spec.max_key_len {
        s.push_str(&format!(", maxKeyLen {n}"));
    }
    s
}
