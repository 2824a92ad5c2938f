//! What the backend crates (Redis, PostgreSQL) share: what keeps a
//! limiter's traffic off a backend that cannot help — the circuit breaker
//! (a failing server is not called for a cool-down) and the local deny
//! cache (a key the server denied is answered here until its retry_after)
//! — and what keeps it off a backend that need not be asked: leased tokens
//! ([`lease`]: a slice of a hot key's token buckets granted in memory,
//! exactly fleet-wide).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::decision::Decision;

pub mod lease;
pub use lease::{Answers, Grant, Lease, Leases, Unused, DRIFT_PPM};

/// Opens after `threshold` backend failures in a row, or once failures in a
/// row have taken `failure_time` in all (a client whose calls stall for
/// seconds, retrying inside, opens it on the first such call rather than
/// the `threshold`-th); while open, calls do not reach the server until
/// `cooldown` has passed since it opened. Then calls go through again: a
/// success closes it, a failure opens it anew.
#[derive(Debug)]
pub struct Breaker {
    threshold: u32,
    cooldown: Duration,
    /// ns; 0: no bound on time.
    failure_time: u64,
    failures: AtomicU32,
    /// ns the failures in a row took, together.
    failed_for: AtomicU64,
    /// ns since `epoch` until which the breaker is open; 0 when closed.
    open_until: AtomicU64,
    epoch: Instant,
}

impl Breaker {
    /// A closed breaker: `threshold` failures in a row open it (0: never),
    /// or failures in a row that took `failure_time` in all (zero: no bound
    /// on time); it stays open for `cooldown`.
    pub fn new(threshold: u32, cooldown: Duration, failure_time: Duration) -> Self {
        Breaker {
            threshold,
            cooldown,
            failure_time: u64::try_from(failure_time.as_nanos()).unwrap_or(u64::MAX),
            failures: AtomicU32::new(0),
            failed_for: AtomicU64::new(0),
            open_until: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether calls should skip the server now.
    pub fn is_open(&self) -> bool {
        self.threshold != 0 && self.now() < self.open_until.load(Ordering::Relaxed)
    }

    /// A call the server answered: the failures in a row start again.
    pub fn success(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
            self.failed_for.store(0, Ordering::Relaxed);
        }
    }

    /// A backend failure of a call that took `spent`.
    pub fn failure(&self, spent: Duration) {
        if self.threshold == 0 {
            return;
        }
        let spent = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
        let took = self.failed_for.fetch_add(spent, Ordering::Relaxed).saturating_add(spent);
        let slow = self.failure_time != 0 && took >= self.failure_time;
        if self.failures.fetch_add(1, Ordering::Relaxed) + 1 >= self.threshold || slow {
            let until = self.now().saturating_add(u64::try_from(self.cooldown.as_nanos()).unwrap_or(u64::MAX));
            self.open_until.store(until.max(1), Ordering::Relaxed);
        }
    }
}

/// Denials the server gave, by key, until their retry_after ends. Only calls at
/// the server's time use it (an `*_at` call's time is the caller's).
///
/// Sound for the same cost: a call for that cost before the wait ends would
/// be denied too, as long as nothing gives tokens back. The price: a
/// `refund` or `reset` made elsewhere is seen here only when the cached
/// denial expires (a `reset` or `refund` through this limiter clears it).
#[derive(Debug)]
pub struct DenyCache {
    capacity: usize,
    entries: Mutex<HashMap<Vec<u8>, Denied>>,
}

#[derive(Clone, Copy, Debug)]
struct Denied {
    cost: u64,
    at: Instant,
    decision: Decision,
}

impl DenyCache {
    /// A cache of at most `capacity` keys' denials (0: off).
    pub fn new(capacity: usize) -> Self {
        DenyCache { capacity, entries: Mutex::new(HashMap::new()) }
    }

    /// The cached denial of `cost` on `key`, its waits shortened by the
    /// time since the server gave it; `None` when there is none or it ended.
    pub fn get(&self, key: &[u8], cost: u64) -> Option<Decision> {
        if self.capacity == 0 {
            return None;
        }
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let d = entries.get(key)?;
        let elapsed = d.at.elapsed();
        if d.cost != cost || elapsed >= d.decision.retry_after {
            return None;
        }
        Some(Decision {
            retry_after: d.decision.retry_after - elapsed,
            reset_after: d.decision.reset_after.saturating_sub(elapsed),
            ..d.decision
        })
    }

    /// Keeps `decision`, the server's denial of `cost` on `key`, until its
    /// retry_after ends (allowed decisions are not kept; a full cache of live
    /// denials keeps no more).
    pub fn insert(&self, key: &[u8], cost: u64, decision: Decision) {
        if self.capacity == 0 || decision.allowed {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= self.capacity && !entries.contains_key(key) {
            entries.retain(|_, d| d.at.elapsed() < d.decision.retry_after);
            if entries.len() >= self.capacity {
                return; // full of live denials: this one goes uncached
            }
        }
        entries.insert(key.to_vec(), Denied { cost, at: Instant::now(), decision });
    }

    /// Drops `key`'s denial (a refund or reset changed its state).
    pub fn forget(&self, key: &[u8]) {
        if self.capacity != 0 {
            self.entries.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
        }
    }
}
