//! The token bucket as GCRA, the equations of
//! [the contract](https://github.com/ratomic/ratomic/blob/main/docs/CONTRACT.md#41-tokenbucket--gcra-normative).
//!
//! A key's whole state is its theoretical arrival time `TAT`, in nanoseconds
//! on the limiter's clock. With `T` the emission interval, `B` the capacity
//! and `τ = B·T`, a call for `n` tokens at `now` computes
//! `tat = max(TAT, now)` and `new = tat + n·T`, and passes iff
//! `new − now ≤ τ`. A new key (`TAT = 0`) is full. Time is tokens: no refill
//! step, no fractions lost.

use crate::algorithm::div::Divider;
use crate::algorithm::{sealed, Algorithm};
use crate::decision::Verdict;
use crate::quota::Quota;
use crate::rate::{round_period, Period, MAX_NANOS};

/// The GCRA token-bucket algorithm for one [`Quota`]: the rule behind
/// [`TokenBucket`](crate::TokenBucket) and
/// [`DirectTokenBucket`](crate::DirectTokenBucket).
///
/// ```
/// use ratomic::{Algorithm, Gcra, Quota};
///
/// let gcra = Gcra::new(Quota::parse("10/s")?.with_burst(20)?);
/// assert_eq!(gcra.limit(), 20);
/// assert_eq!(gcra.to_string(), "token bucket 20 per 2s"); // 20 tokens refill in 2 s
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gcra {
    quota: Quota,
    /// `T`, ns per token.
    t: u64,
    /// `τ = B·T`, < 2^63.
    tau: u64,
    /// Division by `T` without a `div` instruction.
    per_t: Divider,
}

impl Gcra {
    /// The algorithm for `quota`.
    ///
    /// ```
    /// use ratomic::{Algorithm, Gcra, Quota};
    ///
    /// assert_eq!(Gcra::new(Quota::per_minute(30)?).limit(), 30);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        let t = quota.emission_interval_nanos();
        Gcra { quota, t, tau: quota.capacity() * t, per_t: Divider::new(t) }
    }

    /// The quota this algorithm enforces.
    ///
    /// ```
    /// use ratomic::{Gcra, Quota};
    ///
    /// let q = Quota::parse("5/s")?;
    /// assert_eq!(Gcra::new(q).quota(), q);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Whole tokens in a bucket whose TAT is `d` ns after now: `⌊(τ − d)/T⌋`, ≥ 0.
    #[inline]
    fn tokens(&self, d: u64) -> u64 {
        self.per_t.div(self.tau.saturating_sub(d))
    }
}

/// `token bucket 10 per 1s`: a burst of 10 refilled over one second — a
/// rate string that parses back to this very bucket. `T` is a whole number
/// of nanoseconds rounded down, so `B·T` can fall short of the period the
/// rate was written with (`"3/s"`: 999,999,999 ns); the period shown is the
/// one in the largest whole unit, down to milliseconds, that gives the same
/// `T`. A bucket no such period gives (`Quota::new(10, 3.0)`: 10 tokens per
/// 3,333,333,330 ns) shows its refill rate instead: `token bucket 10,
/// refill 3/s`.
impl std::fmt::Display for Gcra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.quota.capacity();
        match round_period(self.tau, |p| (p / b).max(1) == self.t) {
            Some(p) => write!(f, "token bucket {b} per {}", Period(p)),
            None => {
                let r = self.quota.refill_per_sec();
                if r.fract() == 0.0 && r < 1e15 {
                    write!(f, "token bucket {b}, refill {}/s", r as u64)
                } else {
                    write!(f, "token bucket {b}, refill {r:?}/s")
                }
            }
        }
    }
}

impl sealed::Sealed for Gcra {}

impl Algorithm for Gcra {
    const PRISTINE: u64 = 0;

    #[inline]
    fn limit(&self) -> u64 {
        self.quota.capacity()
    }

    fn window(&self) -> std::time::Duration {
        self.quota.burst_window()
    }

    #[inline]
    fn decide(&self, tat: u64, now: u64, cost: u64) -> (Verdict, Option<u64>) {
        // Clamping `now` to 2^63 − 1 and τ < 2^63 keep every stored TAT below
        // 2^64 − 1, the store's "empty slot" marker.
        let now = now.min(MAX_NANOS);
        let tat = tat.max(now);
        let d = tat - now; // how far the bucket is "behind": τ − d is what it holds
        let need = cost * self.t; // ≤ τ because cost ≤ B was checked
        let slack = self.tau - need;
        if d > slack {
            // new − now = d + need > τ. Waiting d − slack makes it exactly τ.
            let decision = Verdict::denied(self.tokens(d), self.quota.capacity(), d - slack, d);
            (decision, None)
        } else {
            let after = d + need;
            let decision = Verdict::allowed(self.tokens(after), self.quota.capacity(), after);
            (decision, (cost != 0).then_some(tat + need))
        }
    }

    #[inline]
    fn refund(&self, tat: u64, now: u64, tokens: u64) -> Option<u64> {
        let now = now.min(MAX_NANOS);
        if tat <= now {
            return None; // already full
        }
        let new = tat.saturating_sub(tokens.saturating_mul(self.t)).max(now);
        (new != tat).then_some(new)
    }

    #[inline]
    fn idle_after(&self, tat: u64, now: u64) -> u64 {
        tat.saturating_sub(now)
    }

    #[inline]
    fn join(&self, a: u64, b: u64) -> u64 {
        a.max(b)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn prints_as_a_rate_string_that_parses_back_to_the_same_bucket() {
        for count in 1..=300u64 {
            for period in ["1s", "7s", "1m", "250ms", "15m", "1d", "3ms", "1h"] {
                let g = Gcra::new(Quota::parse(&format!("{count}/{period}")).unwrap());
                let shown = g.to_string();
                let rate = shown.strip_prefix("token bucket ").unwrap().replacen(" per ", "/", 1);
                let back = Gcra::new(Quota::parse(&rate).unwrap_or_else(|e| panic!("{shown}: {e}")));
                assert_eq!((back.t, back.tau), (g.t, g.tau), "{count}/{period} shown as {shown}");
            }
        }
    }

    use super::*;

    fn gcra(capacity: u64, t: u64) -> Gcra {
        Gcra::new(Quota::new(capacity, 1e9 / t as f64).unwrap())
    }

    /// The contract's GCRA equations, checked value by value.
    #[test]
    fn spec_equations_exactly() {
        let g = gcra(4, 100); // B = 4, T = 100 ns, τ = 400
                              // Fresh key at now = 1000: tat = 1000, new = 1100, allowed.
        let (d, next) = g.decide(0, 1000, 1);
        assert_eq!(next, Some(1100));
        assert_eq!((d.allowed, d.remaining, d.limit), (true, 3, 4));
        assert_eq!((d.retry_after_nanos(), d.reset_after_nanos()), (0, 100));
        // TAT = 1350 at now 1000: d = 350, cost 1 needs 100 > slack 300 -> denied.
        let (d, next) = g.decide(1350, 1000, 1);
        assert_eq!(next, None);
        assert_eq!((d.allowed, d.remaining), (false, 0));
        assert_eq!((d.retry_after_nanos(), d.reset_after_nanos()), (50, 350));
        // cost 3 at TAT = 1050: new = 1350, new - now = 350 ≤ 400.
        let (d, next) = g.decide(1050, 1000, 3);
        assert_eq!(next, Some(1350));
        assert_eq!((d.remaining, d.reset_after_nanos()), (0, 350));
        // cost 0 answers like peek and writes nothing.
        let (d, next) = g.decide(1050, 1000, 0);
        assert_eq!((d.allowed, d.remaining, next), (true, 3, None));
    }

    #[test]
    fn clock_stepping_back_never_grants_more() {
        let g = gcra(2, 100);
        // TAT far beyond now + τ, as after the clock stepped back.
        let (d, next) = g.decide(10_000, 1_000, 1);
        assert!(!d.allowed && next.is_none());
        assert_eq!(d.remaining, 0);
        assert_eq!(d.retry_after_nanos(), 10_000 + 100 - 200 - 1_000);
    }

    #[test]
    fn refund_never_fills_above_full() {
        let g = gcra(10, 100);
        assert_eq!(g.refund(500, 1000, 3), None); // already full
        assert_eq!(g.refund(1500, 1000, 3), Some(1200));
        assert_eq!(g.refund(1500, 1000, u64::MAX), Some(1000));
    }

    #[test]
    fn extreme_values_do_not_overflow() {
        let g = Gcra::new(Quota::new(1, 1e-9 * 2.0).unwrap()); // T = 5e17 ns
        let (d, next) = g.decide(0, u64::MAX, 1);
        assert!(d.allowed);
        assert!(next.unwrap() < u64::MAX);
        let (d, _) = g.decide(u64::MAX - 1, 0, 1);
        assert!(!d.allowed && d.retry_after_nanos() > 0);
    }
}
