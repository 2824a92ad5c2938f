//! A single bucket: one limit for everything, no key lookup.

use std::fmt;

use std::time::Duration;

use crate::algorithm::{cas_charge, cas_decide, cas_refund, peek, restore, Algorithm};
use crate::clock::{checked, Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::Result;
use crate::limit::base;
use crate::store::Charge;
use crate::store::Mark;
use crate::sync::{AtomicU64, Ordering};

/// One limit with one state word: the cheapest limiter there is, for a
/// global limit (all traffic to a backend, one outbound API quota).
///
/// Used through its alias [`DirectTokenBucket`](crate::DirectTokenBucket).
/// Safe to share between threads.
///
/// ```
/// use std::time::Duration;
/// use ratomic::{DirectTokenBucket, ManualClock, Quota};
///
/// // At most 2 calls a second to an outbound API, from every thread together.
/// let clock = ManualClock::new();
/// let limiter = DirectTokenBucket::with_clock(Quota::parse("2/s")?, clock.clone());
/// assert!(limiter.allow().allowed);
/// assert!(limiter.allow().allowed);
/// let d = limiter.allow();
/// assert!(!d.allowed);
/// assert_eq!(d.retry_after, Duration::from_millis(500));
/// # Ok::<(), ratomic::Error>(())
/// ```
pub struct Direct<A: Algorithm, C: Clock = MonotonicClock> {
    alg: A,
    state: AtomicU64,
    clock: C,
    /// Credits (refunds, resets, a [`Stack`](crate::Stack)'s give-backs)
    /// run one at a time: bit 0 is set while one does; the bits above count
    /// refunds and resets, so a give-back applies only if none landed since
    /// its charge (see `store/cells.rs`'s `Mark`). Calls never look.
    credits: AtomicU64,
}

impl<A: Algorithm, C: Clock> Direct<A, C> {
    /// A full bucket running `algorithm` on `clock`.
    ///
    /// ```
    /// use ratomic::{Direct, FixedWindowCounter, ManualClock, Rate};
    ///
    /// // Any algorithm can run unkeyed: here at most 2 calls in each minute.
    /// let limiter = Direct::with_algorithm(FixedWindowCounter::new(Rate::parse("2/min")?)?, ManualClock::new());
    /// assert!(limiter.allow().allowed && limiter.allow().allowed);
    /// assert!(!limiter.allow().allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn with_algorithm(algorithm: A, clock: C) -> Self {
        Direct { alg: algorithm, state: AtomicU64::new(A::PRISTINE), clock, credits: AtomicU64::new(0) }
    }

    /// The algorithm this limiter enforces.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectTokenBucket::with_clock(Quota::parse("3/s")?, clock.clone());
    /// assert_eq!(limiter.algorithm().to_string(), "token bucket 3 per 1s");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn algorithm(&self) -> &A {
        &self.alg
    }

    /// The limiter's clock.
    ///
    /// ```
    /// use ratomic::{Clock, DirectTokenBucket, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectTokenBucket::with_clock(Quota::parse("3/s")?, clock.clone());
    /// clock.advance_nanos(9);
    /// assert_eq!(limiter.clock().now(), 9);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The clock's reading now, as the `*_at` methods expect it.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectTokenBucket::with_clock(Quota::parse("3/s")?, clock.clone());
    /// clock.advance_nanos(9);
    /// assert_eq!(limiter.now(), 9);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    /// The most the bucket can hold.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectTokenBucket::with_clock(Quota::parse("3/s")?, clock.clone());
    /// assert_eq!(limiter.limit(), 3);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn limit(&self) -> u64 {
        self.alg.limit()
    }

    /// Takes one token if there is one. Cannot fail: one token never
    /// exceeds the limit.
    ///
    /// # Panics
    ///
    /// If the clock reads past [`MAX_TIME`](crate::MAX_TIME) (about 146
    /// years), which breaks the [`Clock`] contract; call
    /// [`allow_at`](Self::allow_at) with the reading to get it as an error.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, Quota};
    ///
    /// let limiter = DirectTokenBucket::new(Quota::parse("1/s")?);
    /// assert!(limiter.allow().allowed);
    /// assert!(!limiter.allow().allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow(&self) -> Decision {
        match checked(self.now()) {
            Ok(now) => cas_decide(&self.alg, &self.state, now, 1).decision(),
            Err(e) => crate::limit::keyed::clock_broke_its_contract(e),
        }
    }

    /// Takes `cost` tokens if there are that many. Errors (changing nothing)
    /// if `cost` exceeds the limit.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectTokenBucket::with_clock(Quota::parse("3/s")?, clock.clone());
    /// assert_eq!(limiter.allow_n(2)?.remaining, 1);
    /// assert!(!limiter.allow_n(2)?.allowed);
    /// assert!(limiter.allow_n(4).is_err(), "more than the bucket holds");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow_n(&self, cost: u64) -> Result<Decision> {
        self.allow_at(cost, self.now())
    }

    /// [`allow_n`](Self::allow_n) at time `now`.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectTokenBucket::with_clock(Quota::parse("3/s")?, clock.clone());
    /// assert_eq!(limiter.allow_at(3, 0)?.remaining, 0);
    /// assert!(limiter.allow_at(1, 333_333_334)?.allowed, "one token back after a third of a second");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow_at(&self, cost: u64, now: u64) -> Result<Decision> {
        let now = checked(now)?;
        self.alg.check_cost(cost)?;
        Ok(cas_decide(&self.alg, &self.state, now, cost).decision())
    }

    /// What `allow` would answer, changing nothing. Cannot fail; panics as
    /// `allow` on a clock past [`MAX_TIME`](crate::MAX_TIME).
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, Quota};
    ///
    /// let limiter = DirectTokenBucket::new(Quota::parse("3/s")?);
    /// assert_eq!(limiter.peek().remaining, 2);
    /// assert_eq!(limiter.allow().remaining, 2);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn peek(&self) -> Decision {
        self.peek_at(1, self.now()).unwrap_or_else(|e| crate::limit::keyed::clock_broke_its_contract(e))
    }

    /// What `allow_n(cost)` would answer at `now`, changing nothing.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectTokenBucket::with_clock(Quota::parse("3/s")?, clock.clone());
    /// let _ = limiter.allow_n(3)?;
    /// assert!(!limiter.peek_at(1, 0)?.allowed);
    /// assert_eq!(limiter.peek_at(0, 1_000_000_000)?.remaining, 3);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn peek_at(&self, cost: u64, now: u64) -> Result<Decision> {
        let now = checked(now)?;
        self.alg.check_cost(cost)?;
        Ok(peek(&self.alg, &self.state, now, cost).decision())
    }

    /// Gives `tokens` back, never filling above full.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectTokenBucket::with_clock(Quota::parse("3/s")?, clock.clone());
    /// let _ = limiter.allow_n(3)?;
    /// limiter.refund(1)?;
    /// assert_eq!(limiter.peek().remaining, 0, "the refunded token, taken by the peek's one");
    /// limiter.refund(10)?;
    /// assert_eq!(limiter.peek_at(0, 0)?.remaining, 3, "never above full");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refund(&self, tokens: u64) -> Result<()> {
        self.refund_at(tokens, self.now())
    }

    /// [`refund`](Self::refund) at time `now`.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectTokenBucket::with_clock(Quota::parse("3/s")?, clock.clone());
    /// let _ = limiter.allow_n(3)?;
    /// limiter.refund_at(2, 0)?;
    /// assert_eq!(limiter.peek_at(0, 0)?.remaining, 2);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refund_at(&self, tokens: u64, now: u64) -> Result<()> {
        let now = checked(now)?;
        self.credit(true, |_| {
            cas_refund(&self.alg, &self.state, now, tokens);
        });
        Ok(())
    }

    /// Makes the bucket full again.
    ///
    /// ```
    /// use ratomic::{DirectTokenBucket, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectTokenBucket::with_clock(Quota::parse("3/s")?, clock.clone());
    /// let _ = limiter.allow_n(3)?;
    /// limiter.reset();
    /// assert_eq!(limiter.peek().remaining, 2);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn reset(&self) {
        self.credit(true, |_| {
            // A swap, not a store: a read of the word, for `credit`'s order.
            self.state.swap(A::PRISTINE, Ordering::Relaxed);
        });
    }

    /// Runs credit `f` with the credits held (given the count it holds
    /// them at); `bump` if `f` is a refund or a reset.
    ///
    /// Why `f`'s writes and the bump are ordered as they are: a give-back
    /// must not land after a refund or reset whose writes came after its
    /// charge. A charge reads the count, then (after a release fence)
    /// charges; a credit writes by a read-modify-write, then (after an
    /// acquire fence) bumps. If the credit's write read the charge's, the
    /// charge's read of the count happened before the bump, so the charge
    /// holds the count from before it, and its give-back finds the count
    /// moved.
    fn credit<R>(&self, bump: bool, f: impl FnOnce(u64) -> R) -> R {
        let mut backoff = crate::sync::Backoff::new();
        let held = loop {
            let v = self.credits.load(Ordering::Relaxed);
            if v & 1 == 0 && self.credits.compare_exchange_weak(v, v | 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                break v;
            }
            backoff.snooze();
        };
        let r = f(held);
        crate::sync::fence(Ordering::Acquire);
        self.credits.store(if bump { held + 2 } else { held }, Ordering::SeqCst);
        r
    }

    /// Takes `cost`, waiting out denials; see
    /// [`Keyed::acquire`](crate::Keyed::acquire).
    ///
    /// ```
    /// use ratomic::{Clock, DirectTokenBucket, ManualClock, Quota};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = DirectTokenBucket::with_clock(Quota::parse("3/s")?, clock.clone());
    /// let _ = limiter.allow_n(3)?;
    /// assert!(limiter.acquire(1, None)?.allowed); // the manual clock moves itself forward
    /// assert_eq!(clock.now(), 333_333_333); // one token: a third of a second, rounded down to the ns
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn acquire(&self, cost: u64, timeout: Option<Duration>) -> Result<Decision> {
        base::acquire(timeout, || self.allow_n(cost), |d| (d.allowed, d.retry_after), |d| self.clock.sleep(d))
    }

    /// [`acquire`](Self::acquire) for async code on any runtime; see
    /// [`Keyed::acquire_with`](crate::Keyed::acquire_with).
    pub async fn acquire_with<F, Fut>(&self, cost: u64, timeout: Option<Duration>, sleep: F) -> Result<Decision>
    where
        F: FnMut(Duration) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        base::acquire_async(timeout, || self.allow_n(cost), |d| (d.allowed, d.retry_after), sleep).await
    }
}

impl<A: Algorithm, C: Clock> Direct<A, C> {
    /// A call's charge for a [`Stack`](crate::Stack), with its receipt.
    pub(crate) fn charge_at(&self, cost: u64, now: u64) -> Result<(Decision, Option<(Charge, Mark)>)> {
        let now = checked(now)?;
        self.alg.check_cost(cost)?;
        // The count before the charge (see `credit`), without the holding
        // bit: a credit under way leaves the count as it found it (a
        // give-back) or moves it on (a refund or reset, whose give-back
        // check then fails, as it must: its writes may follow this charge).
        let mark = Mark(self.credits.load(Ordering::SeqCst) & !1);
        crate::sync::fence(Ordering::Release);
        let (verdict, charge) = cas_charge(&self.alg, &self.state, now, cost);
        Ok((verdict.decision(), charge.map(|c| (c, mark))))
    }

    /// Takes back a charge made by [`charge_at`](Self::charge_at), exactly,
    /// unless the bucket was refunded or reset since: then it stays.
    pub(crate) fn give_back_at(&self, (charge, mark): (Charge, Mark)) {
        self.credit(false, |held| {
            if held == mark.0 {
                restore(&self.state, charge);
            }
        });
    }
}

/// The limiter's name and its rule with units:
/// `DirectTokenBucket { rule: token bucket 100 per 1s }`.
///
/// ```
/// use ratomic::{DirectTokenBucket, Quota};
///
/// let limiter = DirectTokenBucket::new(Quota::parse("100/s")?);
/// assert_eq!(format!("{limiter:?}"), "DirectTokenBucket { rule: token bucket 100 per 1s }");
/// # Ok::<(), ratomic::Error>(())
/// ```
impl<A: Algorithm, C: Clock> fmt::Debug for Direct<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = if std::any::TypeId::of::<A>() == std::any::TypeId::of::<crate::Gcra>() {
            "DirectTokenBucket"
        } else {
            "Direct"
        };
        f.debug_struct(name).field("rule", &format_args!("{}", self.alg)).finish()
    }
}

#[cfg(all(test, not(ratomic_loom)))]
mod tests {
    use crate::{DirectTokenBucket, ManualClock, Quota};

    fn bucket() -> DirectTokenBucket<ManualClock> {
        DirectTokenBucket::with_clock(Quota::parse("3/s").unwrap(), ManualClock::new())
    }

    /// A charge made while another call's give-back holds the bucket's
    /// credit word is given back too: only refunds and resets move the
    /// count a give-back checks.
    #[test]
    fn a_charge_made_during_another_give_back_can_be_given_back() {
        let d = bucket();
        let receipt = d.credit(false, |_| d.charge_at(1, 0).unwrap().1.expect("charged"));
        d.give_back_at(receipt);
        assert_eq!(d.peek_at(0, 0).unwrap().remaining, 3, "given back");
    }

    /// A reset (or refund) between a charge and its give-back, then a call
    /// charged from there to exactly the value the charge stored: the
    /// give-back keeps its charge, so the later call's stands.
    #[test]
    fn a_give_back_after_a_reset_or_refund_leaves_later_charges_alone() {
        for credit in ["reset", "refund"] {
            let d = bucket();
            let receipt = d.charge_at(1, 0).unwrap().1.expect("charged");
            if credit == "reset" {
                d.reset();
            } else {
                d.refund_at(1, 0).unwrap();
            }
            assert!(d.allow_at(1, 0).unwrap().allowed);
            d.give_back_at(receipt);
            assert_eq!(d.peek_at(0, 0).unwrap().remaining, 2, "{credit}: the later call's charge stands");
        }
    }
}
