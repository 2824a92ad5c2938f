//! One type for every limiter kind the binding offers, and the layout of the
//! shared output buffer decisions are written into.

use std::sync::Arc;

use ratomic::{
    Decision, FixedWindow, LimitSet, Limiter, MultiDecision, SlidingWindow, StackMember, TokenBucket, MAX_LIMITS,
};

/// Slots of the output buffer, a `Float64Array` of [`OUT_LEN`] numbers owned
/// by JavaScript: the hot call returns only `allowed` and writes the rest here.
pub mod slot {
    /// Whole tokens left after the call.
    pub const REMAINING: usize = 0;
    /// The most the key can hold.
    pub const LIMIT: usize = 1;
    /// Wait before retrying, ms (0 when allowed).
    pub const RETRY_AFTER_MS: usize = 2;
    /// Wait until the key is full again, ms.
    pub const RESET_AFTER_MS: usize = 3;
    /// Number of per-limit entries that follow (0 for a single limiter).
    pub const ENTRIES: usize = 4;
    /// First entry: `[index, allowed, remaining, limit, retryAfterMs, resetAfterMs]`.
    pub const FIRST_ENTRY: usize = 5;
    /// Numbers per entry.
    pub const ENTRY_LEN: usize = 6;
}

/// Length of the output buffer.
pub const OUT_LEN: usize = slot::FIRST_ENTRY + slot::ENTRY_LEN * MAX_LIMITS;

/// A limiter of any kind, on the monotonic clock; calls pass `now` explicitly.
#[derive(Debug)]
pub enum Engine {
    TokenBucket(Arc<TokenBucket>),
    FixedWindow(Arc<FixedWindow>),
    SlidingWindow(Arc<SlidingWindow>),
    /// A multi-limit limiter and the limits this handle's calls are subject to.
    Multi(Arc<Limiter>, LimitSet),
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

#[inline]
fn write(out: &mut [f64], d: &Decision) {
    out[slot::REMAINING] = d.remaining as f64;
    out[slot::LIMIT] = d.limit as f64;
    out[slot::RETRY_AFTER_MS] = ms(d.retry_after);
    out[slot::RESET_AFTER_MS] = ms(d.reset_after);
}

fn write_multi(out: &mut [f64], limiter: &Limiter, d: &MultiDecision<'_>) {
    write_entries(out, |name| limiter.names().position(|n| n == name), d);
}

/// Writes a multi-limit decision; each entry carries `index_of(its name)`.
pub fn write_entries(out: &mut [f64], index_of: impl Fn(&str) -> Option<usize>, d: &MultiDecision<'_>) {
    write(out, &d.decision);
    let mut n = 0;
    for e in d.entries() {
        let index = index_of(e.name).unwrap_or(usize::MAX);
        let at = slot::FIRST_ENTRY + slot::ENTRY_LEN * n;
        out[at] = index as f64;
        out[at + 1] = f64::from(u8::from(e.decision.allowed));
        out[at + 2] = e.decision.remaining as f64;
        out[at + 3] = e.decision.limit as f64;
        out[at + 4] = ms(e.decision.retry_after);
        out[at + 5] = ms(e.decision.reset_after);
        n += 1;
    }
    out[slot::ENTRIES] = n as f64;
}

impl Engine {
    pub fn multi(limiter: Limiter) -> Self {
        let all = limiter.all_limits();
        Engine::Multi(Arc::new(limiter), all)
    }

    /// The limiter's own clock reading, ns.
    #[inline]
    pub fn now(&self) -> u64 {
        match self {
            Engine::TokenBucket(l) => l.now(),
            Engine::FixedWindow(l) => l.now(),
            Engine::SlidingWindow(l) => l.now(),
            Engine::Multi(l, _) => l.now(),
        }
    }

    /// Charges `cost` to `key` at `now`; writes the decision into `out`.
    #[inline]
    pub fn allow_at(&self, key: &[u8], cost: u64, now: u64, out: &mut [f64]) -> ratomic::Result<bool> {
        let d = match self {
            Engine::TokenBucket(l) => l.allow_at(key, cost, now)?,
            Engine::FixedWindow(l) => l.allow_at(key, cost, now)?,
            Engine::SlidingWindow(l) => l.allow_at(key, cost, now)?,
            Engine::Multi(l, set) => {
                let d = l.select(*set).allow_at(key, cost, now)?;
                write_multi(out, l, &d);
                return Ok(d.allowed());
            }
        };
        write(out, &d);
        out[slot::ENTRIES] = 0.0;
        Ok(d.allowed)
    }

    /// Answers like [`allow_at`](Self::allow_at) and changes nothing.
    pub fn peek_at(&self, key: &[u8], cost: u64, now: u64, out: &mut [f64]) -> ratomic::Result<bool> {
        let d = match self {
            Engine::TokenBucket(l) => l.peek_at(key, cost, now)?,
            Engine::FixedWindow(l) => l.peek_at(key, cost, now)?,
            Engine::SlidingWindow(l) => l.peek_at(key, cost, now)?,
            Engine::Multi(l, set) => {
                let d = l.select(*set).peek_at(key, cost, now)?;
                write_multi(out, l, &d);
                return Ok(d.allowed());
            }
        };
        write(out, &d);
        out[slot::ENTRIES] = 0.0;
        Ok(d.allowed)
    }

    /// Gives `tokens` back to `key` (never above full).
    pub fn refund_at(&self, key: &[u8], tokens: u64, now: u64) -> ratomic::Result<()> {
        match self {
            Engine::TokenBucket(l) => l.refund_at(key, tokens, now),
            Engine::FixedWindow(l) => l.refund_at(key, tokens, now),
            Engine::SlidingWindow(l) => l.refund_at(key, tokens, now),
            Engine::Multi(l, set) => l.select(*set).refund_at(key, tokens, now),
        }
    }

    /// Forgets `key`: it is full again.
    pub fn reset_at(&self, key: &[u8], now: u64) -> ratomic::Result<()> {
        match self {
            Engine::TokenBucket(l) => l.reset_at(key, now),
            Engine::FixedWindow(l) => l.reset_at(key, now),
            Engine::SlidingWindow(l) => l.reset_at(key, now),
            // Resetting a key forgets it for every limit, whichever this handle selects.
            Engine::Multi(l, _) => l.reset_at(key, now),
        }
    }

    /// Live keys.
    pub fn len(&self) -> usize {
        match self {
            Engine::TokenBucket(l) => l.len(),
            Engine::FixedWindow(l) => l.len(),
            Engine::SlidingWindow(l) => l.len(),
            Engine::Multi(l, _) => l.len(),
        }
    }

    /// Drops keys that are full again at `now`; returns how many.
    pub fn gc_at(&self, now: u64) -> ratomic::Result<usize> {
        match self {
            Engine::TokenBucket(l) => l.gc_at(now),
            Engine::FixedWindow(l) => l.gc_at(now),
            Engine::SlidingWindow(l) => l.gc_at(now),
            Engine::Multi(l, _) => l.gc_at(now),
        }
    }

    /// Longest key accepted, bytes.
    pub fn max_key_len(&self) -> usize {
        match self {
            Engine::TokenBucket(l) => l.max_key_len(),
            Engine::FixedWindow(l) => l.max_key_len(),
            Engine::SlidingWindow(l) => l.max_key_len(),
            Engine::Multi(l, _) => l.max_key_len(),
        }
    }

    /// This limiter as a member of a `Stack` (a `Limiter` only with all its limits).
    pub fn as_member(&self) -> Option<Arc<dyn StackMember>> {
        match self {
            Engine::TokenBucket(l) => Some(l.clone()),
            Engine::FixedWindow(l) => Some(l.clone()),
            Engine::SlidingWindow(l) => Some(l.clone()),
            Engine::Multi(l, set) => (*set == l.all_limits()).then(|| l.clone() as Arc<dyn StackMember>),
        }
    }

    /// The limit names, in order (empty for a single limiter).
    pub fn names(&self) -> Vec<String> {
        match self {
            Engine::Multi(l, _) => l.names().map(str::to_owned).collect(),
            _ => Vec::new(),
        }
    }
}
