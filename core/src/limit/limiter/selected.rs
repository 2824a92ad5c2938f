//! A limiter seen through a set of its limits.

use std::fmt;
use std::time::Duration;

use crate::algorithm::refund_in;
use crate::clock::{checked, Clock, MonotonicClock};
use crate::error::Result;
use crate::limit::base::{self};
use crate::store::key::{AsKey, Key, Probe};
use crate::store::{Cells, Credit};

use super::decision::{answer, Decided};
use super::{LimitSet, Limiter, MultiDecision, MAX_LIMITS};

/// A [`Limiter`] seen through a [`LimitSet`]: the same calls, subject only
/// to the limits in the set. Made by [`Limiter::select`]; cheap to make.
///
/// ```
/// use ratomic::Limiter;
///
/// let limiter = Limiter::parse("2/s;5/day")?;
/// let daily = limiter.select(limiter.limit_set(&["5/day"])?);
/// assert_eq!(daily.allow("k")?.entries().map(|e| e.name).collect::<Vec<_>>(), ["5/day"]);
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct Selected<'l, K: ?Sized + Key = [u8], C: Clock = MonotonicClock> {
    pub(super) limiter: &'l Limiter<K, C>,
    pub(super) set: LimitSet,
}

impl<K: ?Sized + Key, C: Clock> fmt::Debug for Selected<'_, K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> =
            self.limiter.names().enumerate().filter(|(i, _)| self.set.contains(*i)).map(|(_, n)| n).collect();
        f.debug_struct("Selected").field("limits", &names).finish()
    }
}

impl<'l, K: ?Sized + Key, C: Clock> Selected<'l, K, C> {
    /// The limits this view's calls are subject to.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let set = limiter.limit_set(&["2/s"])?;
    /// assert_eq!(limiter.select(set).limits(), set);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn limits(&self) -> LimitSet {
        self.set
    }

    /// Checks a call's arguments (the cost against every selected limit, the
    /// key's length, the set itself) as `allow_n` would, changing nothing.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let burst = limiter.select(limiter.limit_set(&["2/s"])?);
    /// assert!(burst.check("k", 2).is_ok());
    /// assert!(burst.check("k", 3).is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn check<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64) -> Result<()> {
        self.limiter.check_set(self.set, cost)?;
        self.limiter.base.probe(key.as_key()).map(|_| ())
    }

    /// Takes one token from every selected limit of `key`, or from none.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let daily = limiter.select(limiter.limit_set(&["5/day"])?);
    /// for _ in 0..5 {
    ///     assert!(daily.allow("k")?.allowed(), "2/s is not consulted");
    /// }
    /// assert!(!daily.allow("k")?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow<Q: ?Sized + AsKey<K>>(&self, key: &Q) -> Result<MultiDecision<'l>> {
        self.allow_at(key, 1, self.limiter.now())
    }

    /// Takes `cost` from every selected limit of `key`, or from none.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let daily = limiter.select(limiter.limit_set(&["5/day"])?);
    /// assert_eq!(daily.allow_n("k", 5)?.decision.remaining, 0);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow_n<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64) -> Result<MultiDecision<'l>> {
        self.allow_at(key, cost, self.limiter.now())
    }

    /// [`allow_n`](Self::allow_n) at time `now`.
    ///
    /// ```
    /// use ratomic::{Limiter, ManualClock, Rule};
    ///
    /// let limiter = Limiter::builder()
    ///     .limit("burst", Rule::parse("2/s")?)
    ///     .limit("daily", Rule::parse("5/day")?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let daily = limiter.select(limiter.limit_set(&["daily"])?);
    /// assert_eq!(daily.allow_at("k", 3, limiter.now())?.decision.remaining, 2);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64, now: u64) -> Result<MultiDecision<'l>> {
        let l = self.limiter;
        l.check_set(self.set, cost)?;
        let now = checked(now)?;
        let (hash, probe) = l.base.probe(key.as_key())?;
        Ok(self.dispatch_out_of_line(hash, &probe, cost, now))
    }

    /// `dispatch` for the calls that answer a `Result`. Inlined there, the
    /// answer was built on the stack and copied into the `Result` by a call
    /// to `memcpy`, whose wide loads waited on the narrow stores just made:
    /// out of line, it is built in place. A two-limit call on a 13-byte key
    /// whose decision is copied out (`ops
    /// ratomic-limiter2-hot-bytes13-at-decision`, 30M calls) took 1.49–1.55
    /// s inlined, 1.31–1.36 out of line (1.37–1.43 before `6572e5a`).
    #[inline(never)]
    fn dispatch_out_of_line(&self, hash: u64, probe: &Probe<'_, K>, cost: u64, now: u64) -> MultiDecision<'l> {
        self.dispatch(hash, probe, cost, now)
    }

    /// One call on a probed key: the charge, its scratch sized for the
    /// set, then the answer. One and two limits, the common limiters, have
    /// their copy of the loop inline; three or more go out of line, which
    /// keeps this small enough to be inlined where it is called (not
    /// inlined into `rounds`' loop, with the workspace's profile, a
    /// two-limit `Limiter::allow` took 31.1–35.4 ns against 28.5–30.6; a
    /// three-limit call times the same either way). `peek_probed_any` is
    /// its twin for peeks (one body for both measured slower).
    #[inline]
    pub(super) fn dispatch(&self, hash: u64, probe: &Probe<'_, K>, cost: u64, now: u64) -> MultiDecision<'l> {
        match self.set.len() {
            0 | 1 => self.call::<1>(hash, probe, cost, now),
            2 => self.call::<2>(hash, probe, cost, now),
            3 => self.call_out_of_line::<3>(hash, probe, cost, now),
            _ => self.call_out_of_line::<MAX_LIMITS>(hash, probe, cost, now),
        }
    }

    #[inline(never)] // see `dispatch`
    fn call_out_of_line<const N: usize>(
        &self,
        hash: u64,
        probe: &Probe<'_, K>,
        cost: u64,
        now: u64,
    ) -> MultiDecision<'l> {
        self.call::<N>(hash, probe, cost, now)
    }

    #[inline(always)]
    fn call<const N: usize>(&self, hash: u64, probe: &Probe<'_, K>, cost: u64, now: u64) -> MultiDecision<'l> {
        let l = self.limiter;
        // The answers are written where they are read (see `charge`).
        let mut d = Decided::<N>::new();
        let op = |cells: &mut Cells<'_>| l.charge::<N>(cells, self.set, cost, now, None, &mut d);
        // One limit charged in a run has nothing to give back (a charge that
        // fails charged nothing), so it needs no credit mark read first.
        if N > 1 {
            l.base.update_probed::<true, _>(hash, probe, now, op);
        } else {
            l.base.update_probed::<false, _>(hash, probe, now, op);
        }
        MultiDecision::of_answers(&d.a, self.set.0, &l.names)
    }

    /// Many calls at one clock reading, all checked before any is decided;
    /// see [`Keyed::allow_many`](crate::Keyed::allow_many).
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let daily = limiter.select(limiter.limit_set(&["5/day"])?);
    /// let out = daily.allow_many([("a", 3), ("a", 3)])?;
    /// assert_eq!(out.iter().map(|d| d.allowed()).collect::<Vec<_>>(), [true, false]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn allow_many<'q, Q, I>(&self, requests: I) -> Result<Vec<MultiDecision<'l>>>
    where
        Q: ?Sized + AsKey<K> + 'q,
        I: IntoIterator<Item = (&'q Q, u64)>,
    {
        let mut out = Vec::new();
        self.allow_many_at(requests, self.limiter.now(), &mut out)?;
        Ok(out)
    }

    /// [`allow_many`](Self::allow_many) at time `now`, appending to `out`.
    /// On an error nothing is appended and nothing changes.
    ///
    /// ```
    /// use ratomic::{Limiter, ManualClock, Rule};
    ///
    /// let limiter = Limiter::builder()
    ///     .limit("burst", Rule::parse("2/s")?)
    ///     .limit("daily", Rule::parse("5/day")?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let daily = limiter.select(limiter.limit_set(&["daily"])?);
    /// let mut out = Vec::new();
    /// daily.allow_many_at([("a", 5)], limiter.now(), &mut out)?;
    /// assert!(out[0].allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn allow_many_at<'q, Q, I>(&self, requests: I, now: u64, out: &mut Vec<MultiDecision<'l>>) -> Result<()>
    where
        Q: ?Sized + AsKey<K> + 'q,
        I: IntoIterator<Item = (&'q Q, u64)>,
    {
        let l = self.limiter;
        let now = checked(now)?;
        let prepared = l.base.prepare(requests, |cost| l.check_set(self.set, cost))?;
        out.reserve(prepared.len());
        l.base.batch(|| {
            out.extend(prepared.into_iter().map(|(hash, probe, cost)| self.dispatch(hash, &probe, cost, now)))
        });
        Ok(())
    }

    /// What `allow` would answer, changing nothing.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let daily = limiter.select(limiter.limit_set(&["5/day"])?);
    /// assert_eq!(daily.peek("k")?.decision.remaining, 4);
    /// assert_eq!(daily.peek("k")?.decision.remaining, 4);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn peek<Q: ?Sized + AsKey<K>>(&self, key: &Q) -> Result<MultiDecision<'l>> {
        self.peek_at(key, 1, self.limiter.now())
    }

    /// What `allow_n` would answer, changing nothing.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let daily = limiter.select(limiter.limit_set(&["5/day"])?);
    /// assert!(daily.peek_n("k", 5)?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn peek_n<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64) -> Result<MultiDecision<'l>> {
        self.peek_at(key, cost, self.limiter.now())
    }

    /// [`peek_n`](Self::peek_n) at time `now`.
    ///
    /// ```
    /// use ratomic::{Limiter, ManualClock, Rule};
    ///
    /// let limiter = Limiter::builder()
    ///     .limit("burst", Rule::parse("2/s")?)
    ///     .limit("daily", Rule::parse("5/day")?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let daily = limiter.select(limiter.limit_set(&["daily"])?);
    /// assert!(daily.peek_at("k", 5, limiter.now())?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn peek_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64, now: u64) -> Result<MultiDecision<'l>> {
        let l = self.limiter;
        l.check_set(self.set, cost)?;
        let now = checked(now)?;
        let (hash, probe) = l.base.probe(key.as_key())?;
        Ok(self.peek_out_of_line_any(hash, &probe, cost, now))
    }

    #[inline(never)] // as `dispatch_out_of_line`
    fn peek_out_of_line_any(&self, hash: u64, probe: &Probe<'_, K>, cost: u64, now: u64) -> MultiDecision<'l> {
        self.peek_probed_any(hash, probe, cost, now)
    }

    /// A peek on a probed key, its scratch sized for the set (as
    /// [`dispatch`](Self::dispatch)).
    #[inline]
    pub(super) fn peek_probed_any(&self, hash: u64, probe: &Probe<'_, K>, cost: u64, now: u64) -> MultiDecision<'l> {
        match self.set.len() {
            0 | 1 => self.peek_probed::<1>(hash, probe, cost, now),
            2 => self.peek_probed::<2>(hash, probe, cost, now),
            3 => self.peek_out_of_line::<3>(hash, probe, cost, now),
            _ => self.peek_out_of_line::<MAX_LIMITS>(hash, probe, cost, now),
        }
    }

    #[inline(never)] // as `call_out_of_line`
    fn peek_out_of_line<const N: usize>(
        &self,
        hash: u64,
        probe: &Probe<'_, K>,
        cost: u64,
        now: u64,
    ) -> MultiDecision<'l> {
        self.peek_probed::<N>(hash, probe, cost, now)
    }

    /// A peek on a probed key: every limit's answer on one reading of its
    /// word, with scratch for `N` limits.
    #[inline(always)]
    fn peek_probed<const N: usize>(&self, hash: u64, probe: &Probe<'_, K>, cost: u64, now: u64) -> MultiDecision<'l> {
        let l = self.limiter;
        // Into the caller's scratch, as a charge (see `charge`).
        let mut d = Decided::<N>::new();
        l.base.update_probed::<false, _>(hash, probe, now, |cells| {
            d.a.count = 0; // a run that goes round again decides afresh
            l.decide::<N>(cells, self.set, cost, now, &mut d).map(drop)
        });
        MultiDecision::of_answers(&d.a, self.set.0, &l.names)
    }

    /// Gives `tokens` back to every selected limit of `key`.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let daily = limiter.select(limiter.limit_set(&["5/day"])?);
    /// let _ = daily.allow_n("k", 5)?;
    /// daily.refund("k", 1)?;
    /// assert!(daily.allow("k")?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refund<Q: ?Sized + AsKey<K>>(&self, key: &Q, tokens: u64) -> Result<()> {
        self.refund_at(key, tokens, self.limiter.now())
    }

    /// [`refund`](Self::refund) at time `now`.
    ///
    /// ```
    /// use ratomic::{Limiter, ManualClock, Rule};
    ///
    /// let limiter = Limiter::builder()
    ///     .limit("burst", Rule::parse("2/s")?)
    ///     .limit("daily", Rule::parse("5/day")?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let daily = limiter.select(limiter.limit_set(&["daily"])?);
    /// let _ = daily.allow_n("k", 5)?;
    /// daily.refund_at("k", 5, limiter.now())?;
    /// assert_eq!(daily.peek_n("k", 0)?.decision.remaining, 5);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refund_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, tokens: u64, now: u64) -> Result<()> {
        let l = self.limiter;
        l.check_set(self.set, 0)?;
        let rules = &l.base.rules.0;
        l.base
            .credit(key.as_key(), now, Credit::Refund, |cells| {
                for (i, rule) in rules.iter().enumerate() {
                    if self.set.contains(i) {
                        refund_in(rule, cells, i, now, tokens)?;
                    }
                }
                Ok(())
            })
            .map(drop)
    }

    /// Takes `cost` from every selected limit, waiting out denials; see
    /// [`Keyed::acquire`](crate::Keyed::acquire).
    ///
    /// ```
    /// use ratomic::{Clock, Limiter, ManualClock, Rule};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Limiter::builder()
    ///     .limit("burst", Rule::parse("2/s")?)
    ///     .limit("daily", Rule::parse("5/day")?)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let burst = limiter.select(limiter.limit_set(&["burst"])?);
    /// let _ = burst.allow_n("k", 2)?;
    /// assert!(burst.acquire("k", 2, None)?.allowed());
    /// assert_eq!(clock.now(), 1_000_000_000);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn acquire<Q: ?Sized + AsKey<K>>(
        &self,
        key: &Q,
        cost: u64,
        timeout: Option<Duration>,
    ) -> Result<MultiDecision<'l>> {
        let clock = &self.limiter.base.clock;
        base::acquire(timeout, || self.allow_n(key, cost), answer, |d| clock.sleep(d))
    }

    /// [`acquire`](Self::acquire) for async code on any runtime; see
    /// [`Keyed::acquire_with`](crate::Keyed::acquire_with).
    pub async fn acquire_with<Q, F, Fut>(
        &self,
        key: &Q,
        cost: u64,
        timeout: Option<Duration>,
        sleep: F,
    ) -> Result<MultiDecision<'l>>
    where
        Q: ?Sized + AsKey<K>,
        F: FnMut(Duration) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        base::acquire_async(timeout, || self.allow_n(key, cost), answer, sleep).await
    }
}
