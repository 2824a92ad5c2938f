//! The one opaque handle for every limiter (`ratomic_limiter`) and the
//! engine inside it. The constructors are in [`limiter`](crate::limiter)
//! (one rule), [`multi`](crate::multi) (several) and [`redis`](crate::redis)
//! (state on Redis); the operations in [`ops`](crate::ops).
//!
//! A handle holds core's own "any limiter" types: a `Keyed<Rule>` for one
//! rule (token bucket, fixed or sliding window) or a `Limiter` for several
//! named ones, both on the caller's clock ([`FfiClock`]), or a Redis-backed
//! one ([`RedisEngine`]).

use std::ffi::CString;
use std::sync::Arc;

use ratomic_core::{Keyed, Limiter, Rule};

use crate::boundary::write_out;
use crate::options::FfiClock;
use crate::postgres_engine::PostgresEngine;
use crate::redis_engine::RedisEngine;

/// A rate limiter of any kind: token bucket, fixed window, sliding window,
/// or several named limits on one key. Opaque: made by a `ratomic_*_new` /
/// `ratomic_*_from_rate` function, used through a `const ratomic_limiter *`,
/// released with `ratomic_limiter_free`.
///
/// Thread-safety: every operation on a limiter is safe to call from many
/// threads at once (it is lock-free inside), except `ratomic_limiter_free`,
/// which must not race with any other use of the same limiter.
pub struct ratomic_limiter {
    pub(crate) engine: Engine,
    /// One name per limit, in order, NUL-terminated for C: a multi-limit
    /// limiter's names, or the algorithm's name for a single rule.
    pub(crate) names: Box<[CString]>,
}

impl std::fmt::Debug for ratomic_limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ratomic_limiter").field("names", &self.names).finish_non_exhaustive()
    }
}

/// Core's limiter behind a handle.
pub(crate) enum Engine {
    /// One rule, any algorithm. Shared, so a `ratomic_stack` can hold it
    /// past the handle's own free.
    One(Arc<Keyed<Rule, [u8], FfiClock>>),
    /// Several named rules on each key, all or nothing (shared likewise).
    Many(Arc<Limiter<[u8], FfiClock>>),
    /// One or several rules, their state on a Redis server.
    Redis(Box<RedisEngine>),
    /// One or several rules, their state in a PostgreSQL database.
    Postgres(Box<PostgresEngine>),
}

/// Applies `$one` to a single-rule limiter or `$many` to a multi-limit one:
/// core's two types share their method names, not a trait. A Redis-backed
/// limiter is handled before this by the operations it supports; the rest
/// return `RATOMIC_OTHER_ERROR` for it.
macro_rules! with_engine {
    ($l:expr, $k:ident => $one:expr, $m:ident => $many:expr) => {
        match &$l.engine {
            $crate::handle::Engine::One($k) => $one,
            $crate::handle::Engine::Many($m) => $many,
            $crate::handle::Engine::Redis(_) => {
                return Err($crate::boundary::Failure::Unsupported(
                    "this operation is not available on a Redis-backed limiter",
                ))
            }
            $crate::handle::Engine::Postgres(_) => {
                return Err($crate::boundary::Failure::Unsupported(
                    "this operation is not available on a PostgreSQL-backed limiter",
                ))
            }
        }
    };
}

impl ratomic_limiter {
    /// The clock's reading for the calls without `_at` (unchecked: the
    /// engine refuses a reading past `MAX_TIME`).
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        match &self.engine {
            Engine::One(k) => k.now(),
            Engine::Many(m) => m.now(),
            Engine::Redis(r) => r.now(),
            Engine::Postgres(p) => p.now(),
        }
    }

    /// The longest key this limiter accepts.
    #[inline]
    pub(crate) fn max_key_len(&self) -> usize {
        match &self.engine {
            Engine::One(k) => k.max_key_len(),
            Engine::Many(m) => m.max_key_len(),
            Engine::Redis(r) => r.limits().max_key_len(),
            Engine::Postgres(p) => p.limits().max_key_len(),
        }
    }

    /// The limiter's rules, in order.
    pub(crate) fn rules(&self) -> &[Rule] {
        match &self.engine {
            Engine::One(k) => std::slice::from_ref(k.algorithm()),
            Engine::Many(m) => m.rules(),
            Engine::Redis(r) => r.limits().core_rules(),
            Engine::Postgres(p) => p.limits().core_rules(),
        }
    }

    /// What `ratomic_describe` writes for this limiter, its limits (if
    /// several) joined by `separator`.
    pub(crate) fn describe(&self, separator: &str) -> String {
        match self.rules() {
            [rule] => rule.to_string(),
            rules => self
                .names
                .iter()
                .zip(rules)
                .map(|(name, rule)| format!("{}: {rule}", name.to_string_lossy()))
                .collect::<Vec<_>>()
                .join(separator),
        }
    }

    /// Boxes the limiter and hands it to C through `out`.
    ///
    /// # Safety
    /// `out` must have passed [`out_ptr`].
    pub(crate) unsafe fn hand_out(engine: Engine, names: Box<[CString]>, out: *mut *mut ratomic_limiter) {
        let handle = Box::into_raw(Box::new(ratomic_limiter { engine, names }));
        // SAFETY: `out` is non-NULL and writable, as the caller checked.
        unsafe { write_out(out, handle) };
    }
}
