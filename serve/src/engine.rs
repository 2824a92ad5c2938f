//! The decisions: a request's descriptors matched against the configuration
//! and decided by ratomic's limiters, all or nothing.
//!
//! **All or nothing.** envoyproxy/ratelimit counts every descriptor of a
//! request, also when another descriptor puts the request over its limit:
//! a request Envoy rejects still spends the budget of the descriptors that
//! were within theirs. ratomic serve gives that back: when a descriptor that
//! is not in shadow mode is over its limit, the hits taken from the other
//! descriptors of the same request are refunded, so a rejected request
//! costs nothing (ratomic's `Stack` rule, §4.5 of the contract: a call may be
//! denied spuriously while another call's hits are being given back, but
//! hits are never over-granted). The statuses are the reference's:
//! `OVER_LIMIT` for the descriptors over their limit, `OK` for the others,
//! and the overall code `OVER_LIMIT` if any descriptor is.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ratomic::{Decision, Options};

use crate::config::{Config, Limit, Match, Rule, Unit};
use crate::limiters::{self, Algorithm, BackendError, Limiters, RateLimiter, Storage};
use crate::metrics::Metrics;

/// Bounds on what one request may carry.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Most descriptors in one request.
    pub max_descriptors: usize,
    /// Most entries in one descriptor.
    pub max_entries: usize,
    /// Most bytes of a descriptor's key (domain, keys and values).
    pub max_key_len: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds { max_descriptors: 64, max_entries: crate::config::MAX_DEPTH, max_key_len: 1024 }
    }
}

/// One descriptor of a request.
#[derive(Clone, Debug)]
pub struct Descriptor<'a> {
    /// `(key, value)` entries, outermost first.
    pub entries: Vec<(&'a str, &'a str)>,
    /// The hits this descriptor asks for.
    pub hits: u64,
}

/// What a descriptor got.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// No rule matched (or its rule was replaced): OK, not counted.
    NoRule,
    /// `unlimited: true`: OK, not counted.
    Unlimited,
    /// Decided by a rule.
    Limited {
        /// The rule's limit.
        requests_per_unit: u32,
        /// The rule's unit.
        unit: Unit,
        /// The rule's name (may be empty).
        name: String,
        /// The rule's path (`domain.key_value.key`).
        path: String,
        /// Within its limit (before shadow mode).
        within: bool,
        /// In shadow mode: an over-limit answer is reported as OK.
        shadow_mode: bool,
        /// Hits left and the wait until the key is full again.
        remaining: u64,
        /// The wait until the key is full again.
        reset_after: Duration,
        /// The wait before the same call could pass (0 when within).
        retry_after: Duration,
    },
}

impl Outcome {
    /// Whether this descriptor's code is `OVER_LIMIT`.
    pub fn over_limit(&self) -> bool {
        matches!(self, Outcome::Limited { within: false, shadow_mode: false, .. })
    }
}

/// Why a request got no decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// A bad request: a message for the caller; no state changed.
    BadRequest(String),
    /// The state's backend failed and its policy is to report it: the
    /// text is for the operator's log, never for the caller. Hits the
    /// request had taken are given back.
    Backend(String),
}

/// A configuration and its limiters.
#[derive(Debug)]
pub struct State {
    /// The rules.
    pub config: Config,
    /// The limiters, by rate.
    pub limiters: Limiters,
}

/// The decision engine: the current state, swapped whole on a reload.
#[derive(Debug)]
pub struct Engine {
    state: RwLock<Arc<State>>,
    algorithm: Algorithm,
    options: Options,
    storage: Storage,
    bounds: Bounds,
    metrics: Arc<Metrics>,
}

impl Engine {
    /// An engine for `config`.
    pub async fn new(
        config: Config,
        algorithm: Algorithm,
        options: Options,
        storage: Storage,
        bounds: Bounds,
        metrics: Arc<Metrics>,
    ) -> Result<Engine, BackendError> {
        let options = options.max_key_len(bounds.max_key_len);
        let limiters = limiters::build(&config.rates(), None, algorithm, &options, &storage).await?;
        Ok(Engine {
            state: RwLock::new(Arc::new(State { config, limiters })),
            algorithm,
            options,
            storage,
            bounds,
            metrics,
        })
    }

    /// Replaces the configuration; the limiters of the rates it keeps keep
    /// their state. On an error nothing changes.
    pub async fn reload(&self, config: Config) -> Result<(), BackendError> {
        let old = self.snapshot();
        let limiters =
            limiters::build(&config.rates(), Some(&old.limiters), self.algorithm, &self.options, &self.storage).await?;
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(State { config, limiters });
        // A rate the new configuration drops: its leased tokens go back to
        // Redis now rather than when their time passes.
        let now = self.snapshot();
        let dropped: Vec<Arc<RateLimiter>> =
            old.limiters.iter().filter(|(rate, _)| !now.limiters.contains_key(*rate)).map(|(_, l)| l.clone()).collect();
        RateLimiter::give_back_all(dropped).await;
        Ok(())
    }

    /// Gives back the unused tokens of every lease the current limiters
    /// hold (at shutdown); how many limits took tokens back. A failure is
    /// logged: those tokens come back when their time passes.
    pub async fn give_back(&self) -> usize {
        let limiters: Vec<Arc<RateLimiter>> = self.snapshot().limiters.values().cloned().collect();
        RateLimiter::give_back_all(limiters).await
    }

    /// The current state.
    pub fn snapshot(&self) -> Arc<State> {
        self.state.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The request bounds.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// Decides a request: one outcome per descriptor, in order.
    pub async fn decide(&self, domain: &str, descriptors: &[Descriptor<'_>]) -> Result<Vec<Outcome>, Refused> {
        // Every check before any decision: a bad request changes nothing.
        if domain.is_empty() {
            return Err(Refused::BadRequest("rate limit domain must not be empty".into()));
        }
        if descriptors.is_empty() {
            return Err(Refused::BadRequest("rate limit descriptor list must not be empty".into()));
        }
        if descriptors.len() > self.bounds.max_descriptors {
            return Err(Refused::BadRequest(format!(
                "{} descriptors in one request: at most {} are accepted",
                descriptors.len(),
                self.bounds.max_descriptors
            )));
        }
        let mut keys = Vec::with_capacity(descriptors.len());
        for (i, d) in descriptors.iter().enumerate() {
            if d.entries.len() > self.bounds.max_entries {
                return Err(Refused::BadRequest(format!(
                    "descriptor {i} has {} entries: at most {} are accepted",
                    d.entries.len(),
                    self.bounds.max_entries
                )));
            }
            let key = key_of(domain, &d.entries);
            if key.len() > self.bounds.max_key_len {
                return Err(Refused::BadRequest(format!(
                    "descriptor {i}: its domain, keys and values take {} bytes, more than the {} accepted",
                    key.len(),
                    self.bounds.max_key_len
                )));
            }
            keys.push(key);
        }

        let state = self.snapshot();
        let matches: Vec<Match<'_>> =
            descriptors.iter().map(|d| state.config.lookup(domain, d.entries.iter().copied())).collect();
        // `replaces`: a named rule matched by one descriptor is dropped when
        // another matched rule (unlimited ones too) replaces it.
        let replaced: HashSet<&str> = matches
            .iter()
            .filter_map(|m| match m {
                Match::Rule(r) => Some(r.replaces.iter().map(String::as_str)),
                Match::None => None,
            })
            .flatten()
            .collect();

        let mut outcomes = Vec::with_capacity(descriptors.len());
        let mut granted: Vec<(usize, &RateLimiter, u64)> = Vec::new();
        let mut rejected = false;
        for (i, (m, d)) in matches.iter().zip(descriptors).enumerate() {
            let rule: &Rule = match m {
                Match::Rule(r) if !r.name.is_empty() && replaced.contains(r.name.as_str()) => {
                    outcomes.push(Outcome::NoRule);
                    continue;
                }
                Match::Rule(r) => r,
                Match::None => {
                    outcomes.push(Outcome::NoRule);
                    continue;
                }
            };
            let (requests_per_unit, unit) = match rule.limit {
                Limit::Unlimited => {
                    outcomes.push(Outcome::Unlimited);
                    continue;
                }
                Limit::Rate { requests_per_unit, unit } => (requests_per_unit, unit),
            };
            let decision = match state.limiters.get(&(requests_per_unit, unit)) {
                // A rate of 0 refuses every call (the reference's way to
                // block a value outright).
                None => Decision {
                    allowed: false,
                    remaining: 0,
                    limit: 0,
                    retry_after: unit.duration(),
                    reset_after: Duration::ZERO,
                },
                Some(limiter) => {
                    let key = &keys[i][..];
                    let result = if d.hits > u64::from(requests_per_unit) {
                        // More hits than the limit could ever grant: over the
                        // limit (as the reference answers), nothing taken.
                        limiter.peek(key, 0).await.map(|d| Decision {
                            allowed: false,
                            retry_after: unit.duration(),
                            ..d
                        })
                    } else {
                        limiter.allow(key, d.hits).await.map(|(decision, leased)| {
                            if leased {
                                self.metrics.lease_decision();
                            }
                            decision
                        })
                    };
                    match result {
                        Ok(decision) => {
                            if decision.allowed && d.hits > 0 {
                                granted.push((i, limiter, d.hits));
                            }
                            decision
                        }
                        // The backend failed and its policy is to say so: give
                        // back what this request took, report no decision.
                        Err(BackendError(e)) => {
                            for (i, limiter, hits) in granted {
                                if let Err(BackendError(e)) = limiter.refund(&keys[i], hits).await {
                                    tracing::error!(error = %e, "refund failed");
                                }
                            }
                            return Err(Refused::Backend(format!("{}: {e}", rule.path)));
                        }
                    }
                }
            };
            if !decision.allowed && !rule.shadow_mode {
                rejected = true;
            }
            outcomes.push(Outcome::Limited {
                requests_per_unit,
                unit,
                name: rule.name.clone(),
                path: rule.path.clone(),
                within: decision.allowed,
                shadow_mode: rule.shadow_mode,
                remaining: decision.remaining,
                reset_after: decision.reset_after,
                retry_after: decision.retry_after,
            });
        }
        if rejected {
            for (i, limiter, hits) in granted {
                if let Err(BackendError(e)) = limiter.refund(&keys[i], hits).await {
                    tracing::error!(error = %e, "refund failed");
                }
                if let Outcome::Limited { remaining, requests_per_unit, .. } = &mut outcomes[i] {
                    *remaining = (*remaining + hits).min(u64::from(*requests_per_unit));
                }
            }
        }
        Ok(outcomes)
    }
}

/// A descriptor's key in its rate's limiter: the domain and every entry,
/// each length-prefixed so that no two descriptors share a key.
pub fn key_of(domain: &str, entries: &[(&str, &str)]) -> Vec<u8> {
    let mut key =
        Vec::with_capacity(domain.len() + 4 + entries.iter().map(|(k, v)| k.len() + v.len() + 8).sum::<usize>());
    let mut push = |s: &str| {
        key.extend_from_slice(&(s.len() as u32).to_le_bytes());
        key.extend_from_slice(s.as_bytes());
    };
    push(domain);
    for (k, v) in entries {
        push(k);
        push(v);
    }
    key
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn engine(yaml: &str) -> Engine {
        let (d, n) = crate::config::parse(Path::new("t.yaml"), yaml).unwrap();
        let config = Config { domains: [(d, n)].into() };
        block_on(Engine::new(
            config,
            Algorithm::FixedWindow,
            Options::default(),
            Storage::default(),
            Bounds::default(),
            Arc::default(),
        ))
        .unwrap()
    }

    /// In memory every future is ready at once: a current-thread runtime runs it.
    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    impl Engine {
        fn decide_now(&self, domain: &str, descriptors: &[Descriptor<'_>]) -> Result<Vec<Outcome>, Refused> {
            block_on(self.decide(domain, descriptors))
        }
    }

    fn one<'a>(entries: &[(&'a str, &'a str)], hits: u64) -> Descriptor<'a> {
        Descriptor { entries: entries.to_vec(), hits }
    }

    const YAML: &str = "\
domain: d
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
";

    #[test]
    fn a_rejected_request_spends_nothing_on_its_other_descriptors() {
        let e = engine(YAML);
        for _ in 0..3 {
            let out = e.decide_now("d", &[one(&[("user", "u")], 1), one(&[("ip", "1")], 1)]).unwrap();
            assert!(out.iter().all(|o| !o.over_limit()));
        }
        let out = e.decide_now("d", &[one(&[("user", "u")], 1), one(&[("ip", "1")], 1)]).unwrap();
        assert!(out[0].over_limit());
        assert!(!out[1].over_limit());
        // ip has spent 3 of 10: the rejected request gave its hit back.
        let Outcome::Limited { remaining, .. } = &out[1] else { panic!() };
        assert_eq!(*remaining, 7);
        let out = e.decide_now("d", &[one(&[("ip", "1")], 7)]).unwrap();
        assert!(!out[0].over_limit());
        let out = e.decide_now("d", &[one(&[("ip", "1")], 1)]).unwrap();
        assert!(out[0].over_limit());
    }

    #[test]
    fn shadow_mode_reports_ok_and_does_not_reject_the_request() {
        let e = engine(YAML);
        e.decide_now("d", &[one(&[("shadow", "s")], 1)]).unwrap();
        let out = e.decide_now("d", &[one(&[("shadow", "s")], 1), one(&[("user", "v")], 1)]).unwrap();
        assert!(matches!(out[0], Outcome::Limited { within: false, shadow_mode: true, .. }));
        assert!(!out[0].over_limit());
        let Outcome::Limited { remaining, .. } = &out[1] else { panic!() };
        assert_eq!(*remaining, 2, "the user's hit stays spent: the request was not rejected");
    }

    #[test]
    fn hits_above_the_limit_are_over_limit_and_take_nothing() {
        let e = engine(YAML);
        let out = e.decide_now("d", &[one(&[("user", "u")], 4)]).unwrap();
        assert!(out[0].over_limit());
        let out = e.decide_now("d", &[one(&[("user", "u")], 3)]).unwrap();
        assert!(!out[0].over_limit());
    }

    #[test]
    fn bad_requests_change_nothing() {
        let e = engine(YAML);
        let long = "x".repeat(2000);
        let err = e.decide_now("d", &[one(&[("user", "u")], 3), one(&[("user", &long)], 1)]).unwrap_err();
        assert!(matches!(&err, Refused::BadRequest(m) if m.contains("descriptor 1")), "{err:?}");
        assert!(e.decide_now("", &[one(&[("user", "u")], 1)]).is_err());
        assert!(e.decide_now("d", &[]).is_err());
        let out = e.decide_now("d", &[one(&[("user", "u")], 3)]).unwrap();
        assert!(!out[0].over_limit(), "the bad request took nothing");
    }

    #[test]
    fn a_reload_keeps_the_state_of_unchanged_rates() {
        let e = engine(YAML);
        e.decide_now("d", &[one(&[("user", "u")], 3), one(&[("ip", "1")], 1)]).unwrap();
        let changed = YAML.replace("requests_per_unit: 10", "requests_per_unit: 20");
        let (d, n) = crate::config::parse(Path::new("t.yaml"), &changed).unwrap();
        block_on(e.reload(Config { domains: [(d, n)].into() })).unwrap();
        assert!(e.decide_now("d", &[one(&[("user", "u")], 1)]).unwrap()[0].over_limit(), "user kept its state");
        let Outcome::Limited { remaining, .. } = &e.decide_now("d", &[one(&[("ip", "1")], 1)]).unwrap()[0] else {
            panic!()
        };
        assert_eq!(*remaining, 19, "ip's rate changed: a new limiter");
    }

    #[test]
    fn keys_do_not_collide() {
        assert_ne!(key_of("d", &[("a", "bc")]), key_of("d", &[("ab", "c")]));
        assert_ne!(key_of("d", &[("a", "b"), ("c", "d")]), key_of("d", &[("a", "b\0c")]));
    }
}
