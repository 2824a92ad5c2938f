//! A PostgreSQL-backed limiter's engine behind the handle: the blocking
//! client of `ratomic-postgres` and the clock `ratomic_now` reads. The
//! constructors that make one are in [`postgres`](crate::postgres).

use std::time::Duration;

use ratomic_core::{Clock, Decision, MonotonicClock};
use ratomic_postgres::{BlockingPostgresLimiter, Limits, MultiDecision};

use crate::boundary::Failure;

/// A PostgreSQL-backed limiter behind the handle.
#[derive(Debug)]
pub(crate) struct PostgresEngine {
    pub(crate) limiter: BlockingPostgresLimiter,
    /// What `ratomic_now` reads; the calls without `_at` use the server's
    /// clock.
    pub(crate) clock: MonotonicClock,
}

impl Drop for PostgresEngine {
    /// `ratomic_limiter_free`: the leases' unused tokens go back (one
    /// statement per key held, each bounded by the timeout; a failure
    /// leaves them to come back when their time passes).
    fn drop(&mut self) {
        if self.limiter.inner().driver().leases_held() > 0 {
            let _ = self.limiter.give_back();
        }
    }
}

impl PostgresEngine {
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
        match (refund, now) {
            (Some(tokens), Some(t)) => l.refund_at(key, tokens, t).map(drop),
            (Some(tokens), None) => l.refund(key, tokens).map(drop),
            (None, _) => l.reset(key),
        }?;
        Ok(())
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

    /// Removes the rows full again at `now` (or the server's time).
    pub(crate) fn gc(&self, now: Option<u64>) -> Result<usize, Failure> {
        let n = match now {
            Some(t) => self.limiter.gc_at(t),
            None => self.limiter.gc(),
        }?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }
}
