//! What the limiters in a shared backend behind the layer (features `redis`
//! and `postgres`) have in common: their header policies from the backend's
//! limits, their one key, and the report when their own failure policy
//! answers.

use std::sync::Arc;

use ratomic::headers::Policy;
use ratomic::Rule;

use crate::config::Throttle;
use crate::fields::Heads;
use crate::key::Keys;
use crate::limiter::DecideError;

/// The policies of a backend's limits named `names` with `rules`: the one
/// rule's named after the layer's `single_name` when the limits are a
/// single rule (`one`: see [`is_single`]), else one per named limit.
pub(crate) fn heads<'a>(
    names: impl Iterator<Item = &'a str>,
    rules: &[Rule],
    one: bool,
    single_name: &str,
) -> ratomic::Result<Arc<Heads>> {
    let policies = names
        .zip(rules)
        .map(|(n, r)| Policy::of(if one { single_name } else { n }, r))
        .collect::<ratomic::Result<Vec<_>>>()?;
    Ok(Arc::new(Heads::new(policies)?))
}

/// Whether limits named `names` are a single rule (named `single`).
pub(crate) fn is_single<'a>(mut names: impl Iterator<Item = &'a str>, single: &str) -> bool {
    matches!((names.next(), names.next()), (Some(n), None) if n == single)
}

/// The request's one key, owned for the backend's future.
pub(crate) fn owned(keys: Keys<'_>) -> Result<Vec<u8>, DecideError> {
    match keys {
        Keys::One(k) => Ok(k.to_vec()),
        Keys::Each(_) => Err("per-member keys need a Stack behind the layer".into()),
    }
}

/// Reports (throttled) that the limiter's `backend` is failing and its own
/// failure policy answered (`source`).
pub(crate) fn report_policy(by_policy: &Throttle, backend: &str, source: &dyn std::fmt::Debug) {
    if let Some(more) = by_policy.due() {
        tracing::warn!(
            target: "ratomic_tower",
            source = ?source,
            more,
            "the limiter's {backend} is failing; its own failure policy answers"
        );
    }
}
