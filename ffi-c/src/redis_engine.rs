//! A Redis-backed limiter's engine behind the handle: the blocking client
//! of `ratomic-redis` and the clock `ratomic_now` reads. The constructors
//! that make one are in [`redis`](crate::redis).

use std::time::Duration;

use ratomic_core::{Clock, Decision, MonotonicClock};
use ratomic_redis::{BlockingRedisLimiter, Limits, MultiDecision};

use crate::boundary::Failure;

/// A Redis-backed limiter behind the handle.
#[derive(Debug)]
pub(crate) struct RedisEngine {
    pub(crate) limiter: BlockingRedisLimiter,
    /// What `ratomic_now` reads; the calls without `_at` use the server's TIME.
    pub(crate) clock: MonotonicClock,
}

impl Drop for RedisEngine {
    /// `ratomic_limiter_free`: the leases' unused tokens go back (one call
    /// per key held, each bounded by the timeout; a failure leaves them to
    /// come back when their time passes).
    fn drop(&mut self) {
        if self.limiter.inner().driver().leases_held() > 0 {
            let _ = self.limiter.give_back();
        }
    }
}

impl RedisEngine {
    pub(crate) fn limits(&self) -> &Limits {
        self.limiter.inner().limits()
    }

    pub(crate) fn now(&self) -> u64 {
        self.clock.now()
    }

    /// Allow or peek, at `now` or at the server's time.
    pub(crate) fn decide(
        &self,
        key: &[u8],
        cost: u64,
        now: Option<u64>,
        consume: bool,
    ) -> Result<MultiDecision, Failure> {
        let l = &self.limiter;
        Ok(match (consume, now) {
            (true, Some(t)) => l.allow_at(key, cost, t),
            (true, None) => l.allow_n(key, cost),
            (false, Some(t)) => l.peek_at(key, cost, t),
            (false, None) => l.peek(key, cost),
        }?)
    }

    /// Refund (`Some(tokens)`) or reset.
    pub(crate) fn restore(&self, key: &[u8], refund: Option<u64>, now: Option<u64>) -> Result<(), Failure> {
        let l = &self.limiter;
        Ok(match (refund, now) {
            (Some(tokens), Some(t)) => l.refund_at(key, tokens, t),
            (Some(tokens), None) => l.refund(key, tokens),
            (None, _) => l.reset(key),
        }?)
    }

    /// Waits for `cost` on `key` at most `timeout` (forever when `None`); a
    /// call that would wait past it gets the denial.
    pub(crate) fn acquire(&self, key: &[u8], cost: u64, timeout: Option<Duration>) -> Result<Decision, Failure> {
        let deadline = timeout.unwrap_or(Duration::MAX / 4);
        match self.limiter.acquire(key, cost, deadline)? {
            Some(d) => Ok(d.decision),
            None => Ok(self.limiter.peek(key, cost)?.decision),
        }
    }

    pub(crate) fn allow_many(&self, requests: &[(&[u8], u64)], now: Option<u64>) -> Result<Vec<Decision>, Failure> {
        let ds = match now {
            Some(t) => self.limiter.allow_many_at(requests, t),
            None => self.limiter.allow_many(requests),
        }?;
        Ok(ds.into_iter().map(|d| d.decision).collect())
    }
}
