//! Token buckets whose quota comes with each call: per-customer quotas read
//! from a database, a request that carries its own limit (each bucket a
//! GCRA token bucket, as [`TokenBucket`](crate::TokenBucket)'s).
//!
//! # One store for every quota
//!
//! A bucket is kept per (quota, key): the store's key is the quota's
//! emission interval and capacity (LEB128, so the pair is self-delimiting
//! and two different quotas never share a bucket) followed by the caller's
//! key. All buckets live in one bounded store, with the same forgetting,
//! `max_keys`, `max_key_bytes` and [`Eviction`](crate::Eviction) policy as
//! every keyed limiter.
//!
//! That needs no per-key record of the quota: a GCRA state is a theoretical
//! arrival time, and everything the store asks of a state without a call
//! at hand — when it is full again (`TAT ≤ now`), the state of a key never
//! seen (`0`), and the join of forgotten states (the later TAT, which holds
//! fewer tokens under *every* quota) — is the same for every quota. So the
//! store forgets, evicts and answers for forgotten keys exactly as a
//! [`TokenBucket`](crate::TokenBucket)'s does, and never grants more than
//! remembering every bucket would.

use std::fmt;
use std::time::Duration;

use smallvec::SmallVec;

use crate::algorithm::gcra::Gcra;
use crate::algorithm::{charge_in, peek_in, refund_in, Algorithm};
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::{Error, Result};
use crate::limit::base::{self, Base, Builder};
use crate::quota::Quota;
use crate::store::key::AsKey;
use crate::store::{Credit, Options, Retention};

/// Longest quota prefix: two LEB128-encoded `u64`s.
const MAX_PREFIX: usize = 20;

/// Token buckets whose [`Quota`] is given with each call, kept per
/// (quota, key) in one bounded store.
///
/// Use it when the limits are data, not configuration: each customer's
/// quota read from a table, a plan that changes at run time, a request
/// that names its own limit. A call with a quota the limiter has not seen
/// before simply starts that bucket full; nothing needs declaring first.
/// Calls on one key with two different quotas use two buckets.
///
/// ```
/// use std::collections::HashMap;
/// use ratomic::{ManualClock, Quota, Quotas};
///
/// // Per-customer quotas, as they would come from a database.
/// let plans: HashMap<&str, Quota> = HashMap::from([
///     ("free", Quota::parse("2/s")?),
///     ("pro", Quota::parse("100/s")?),
/// ]);
/// let customers = [("alice", "free"), ("bob", "pro")];
///
/// let limiter = Quotas::builder().clock(ManualClock::new()).max_keys(100_000).build()?;
/// for (customer, plan) in customers {
///     let quota = &plans[plan];
///     let granted = (0..5).filter(|_| limiter.allow(customer, quota).unwrap().allowed).count();
///     println!("{customer} ({plan}): {granted} of 5");
/// }
/// assert!(!limiter.allow("alice", &plans["free"])?.allowed); // 2 a second
/// assert!(limiter.allow("bob", &plans["pro"])?.allowed);
/// # Ok::<(), ratomic::Error>(())
/// ```
///
/// Every method is safe to call from many threads at once; each has an
/// `_at` form taking the time (ns on the limiter's clock), like
/// [`Keyed`](crate::Keyed)'s.
pub struct Quotas<C: Clock = MonotonicClock> {
    base: Base<QuotaFree, [u8], C>,
    /// The longest key a caller may pass (the store's own bound is this
    /// plus room for the quota prefix).
    max_key_len: usize,
}

/// What the store asks of a GCRA state when no call is at hand, which is
/// the same for every quota (see the module docs): the retention of a
/// [`Gcra`] of any quota.
///
/// It also remembers the longest window (`capacity × emission interval`)
/// any call has charged, for [`Retention::linger`]: a full key then stays
/// through growth for at least its own window.
#[derive(Debug, Default)]
pub(crate) struct QuotaFree {
    /// ns; a heuristic (how long full keys stay), never a decision: std's
    /// atomic even under loom, like [`Counter`](crate::sync::Counter).
    longest_window: std::sync::atomic::AtomicU64,
}

impl QuotaFree {
    /// Notes that a call charged `quota`.
    #[inline]
    fn saw(&self, quota: &Quota) {
        use std::sync::atomic::Ordering::Relaxed;
        let window = quota.capacity().saturating_mul(quota.emission_interval_nanos());
        // One load of a word that seldom changes; a write only for a longer window.
        if window > self.longest_window.load(Relaxed) {
            self.longest_window.fetch_max(window, Relaxed);
        }
    }

    /// Any GCRA: its `PRISTINE`, `idle_after` and `join` never read the quota.
    fn gcra() -> Gcra {
        Gcra::new(Quota::new(1, 1.0).expect("a valid quota"))
    }
}

impl Retention for QuotaFree {
    fn pristine(&self, out: &mut [u64]) {
        out[0] = Gcra::PRISTINE;
    }
    fn idle_after(&self, states: &[u64], now: u64) -> u64 {
        Algorithm::idle_after(&Self::gcra(), states[0], now)
    }
    fn linger(&self) -> u64 {
        // Each key's quota is part of the key, not known here: the longest
        // window any call has charged (a key may stay longer than its own
        // window, never shorter).
        self.longest_window.load(std::sync::atomic::Ordering::Relaxed)
    }
    fn join_word(&self, _: usize, a: u64, b: u64) -> u64 {
        Self::gcra().join(a, b)
    }
    fn describe(&self) -> String {
        // Each call names its quota, which is part of the stored key.
        "QuotaFree".into()
    }
    fn label(&self) -> String {
        "Quotas (token buckets of each call's quota)".into()
    }
}

/// A (quota, key) pair as the store's key: the quota's emission interval
/// and capacity, LEB128, then the key.
fn store_key(quota: &Quota, key: &[u8]) -> SmallVec<[u8; 64]> {
    let mut out = SmallVec::with_capacity(MAX_PREFIX + key.len());
    for mut v in [quota.emission_interval_nanos(), quota.capacity()] {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                break;
            }
            out.push(byte | 0x80);
        }
    }
    out.extend_from_slice(key);
    out
}

impl Quotas {
    /// Token buckets per (quota, byte-string key) with the default clock
    /// and options.
    ///
    /// ```
    /// use ratomic::{Quota, Quotas};
    ///
    /// let limiter = Quotas::new();
    /// assert!(limiter.allow("acme", &Quota::parse("100/min")?)?.allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn new() -> Self {
        Self::with_options(MonotonicClock::new(), Options::default()).expect("the default options are valid")
    }

    /// Starts building a limiter whose quotas come with each call.
    ///
    /// ```
    /// use ratomic::Quotas;
    ///
    /// let limiter = Quotas::builder().max_keys(100_000).max_key_len(64).build()?;
    /// assert_eq!(limiter.max_key_len(), 64);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn builder() -> Builder<PerCall> {
        Builder::new(Ok(PerCall(())))
    }
}

impl Default for Quotas {
    fn default() -> Self {
        Self::new()
    }
}

/// What a [`Quotas`] builder builds: quotas given with each call (see
/// [`Quotas::builder`]).
///
/// ```
/// use ratomic::Quotas;
///
/// let builder = Quotas::builder(); // a Builder<PerCall>
/// assert!(builder.build().is_ok());
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Debug)]
pub struct PerCall(());

impl<C: Clock> Builder<PerCall, [u8], C> {
    /// The limiter; errors if an option is out of range.
    ///
    /// ```
    /// use ratomic::Quotas;
    ///
    /// assert!(Quotas::builder().max_keys(0).build().is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn build(self) -> Result<Quotas<C>> {
        Quotas::with_options(self.clock, self.options)
    }
}

impl<C: Clock> Quotas<C> {
    /// A limiter on `clock`, storing buckets as `options` say (`max_key_len`
    /// bounds the caller's key; the quota is stored beside it).
    ///
    /// ```
    /// use ratomic::{ManualClock, Options, Quotas};
    ///
    /// let limiter = Quotas::with_options(ManualClock::new(), Options::default().max_keys(1_000))?;
    /// assert!(limiter.is_empty());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn with_options(clock: C, options: Options) -> Result<Self> {
        options.validate()?;
        let max_key_len = options.max_key_len;
        let store_options = options.max_key_len((max_key_len + MAX_PREFIX).min(u32::MAX as usize));
        Ok(Quotas { base: Base::new(QuotaFree::default(), 1, clock, &store_options)?, max_key_len })
    }

    /// The limiter's clock.
    ///
    /// ```
    /// use ratomic::{Clock, ManualClock, Quota, Quotas};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Quotas::builder().clock(clock.clone()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// clock.advance_nanos(4);
    /// assert_eq!(limiter.clock().now(), 4);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.base.clock
    }

    /// The clock's reading now, as the `*_at` methods expect it.
    ///
    /// ```
    /// use ratomic::{Clock, ManualClock, Quota, Quotas};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Quotas::builder().clock(clock.clone()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// clock.advance_nanos(4);
    /// assert_eq!(limiter.now(), 4);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn now(&self) -> u64 {
        self.base.clock.now()
    }

    /// The longest key, in bytes, this limiter accepts.
    ///
    /// ```
    /// use ratomic::Quotas;
    ///
    /// assert_eq!(Quotas::builder().max_key_len(40).build()?.max_key_len(), 40);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn max_key_len(&self) -> usize {
        self.max_key_len
    }

    /// The store key for a call, after checking the caller's key length.
    #[inline]
    fn key_for(&self, key: &[u8], quota: &Quota) -> Result<SmallVec<[u8; 64]>> {
        if key.len() > self.max_key_len {
            return Err(Error::KeyTooLong { len: key.len(), max: self.max_key_len });
        }
        Ok(store_key(quota, key))
    }

    /// Takes one token from `key`'s bucket under `quota`, if it has one.
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// for _ in 0..3 {
    ///     assert!(limiter.allow("tiny-startup", &plan)?.allowed);
    /// }
    /// assert!(!limiter.allow("tiny-startup", &plan)?.allowed);
    /// assert!(limiter.allow("tiny-startup", &Quota::parse("10/s")?)?.allowed, "another quota is another bucket");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q, quota: &Quota) -> Result<Decision> {
        self.allow_at(key, quota, 1, self.now())
    }

    /// Takes `cost` tokens from `key`'s bucket under `quota`; cost 0
    /// answers like [`peek`](Self::peek). Errors (changing nothing) if
    /// `cost` exceeds the quota's capacity or the key is too long.
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// assert_eq!(limiter.allow_n("k", &plan, 2)?.remaining, 1);
    /// assert!(limiter.allow_n("k", &plan, 4).is_err(), "more than the plan holds");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow_n<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q, quota: &Quota, cost: u64) -> Result<Decision> {
        self.allow_at(key, quota, cost, self.now())
    }

    /// [`allow_n`](Self::allow_n) at time `now`.
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// assert_eq!(limiter.allow_at("k", &plan, 3, limiter.now())?.remaining, 0);
    /// assert!(limiter.allow_at("k", &plan, 1, limiter.now() + 333_333_333)?.allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn allow_at<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q, quota: &Quota, cost: u64, now: u64) -> Result<Decision> {
        let alg = Gcra::new(*quota);
        alg.check_cost(cost)?;
        let k = self.key_for(key.as_key(), quota)?;
        self.base.rules.saw(quota);
        let verdict = self.base.update::<false, _>(&k, now, |cells| Ok(charge_in(&alg, cells, 0, now, cost)?.0))?;
        Ok(verdict.decision())
    }

    /// What `allow` would answer for one token, changing nothing.
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// assert_eq!(limiter.peek("k", &plan)?.remaining, 2);
    /// assert_eq!(limiter.peek("k", &plan)?.remaining, 2, "nothing taken");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn peek<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q, quota: &Quota) -> Result<Decision> {
        self.peek_at(key, quota, 1, self.now())
    }

    /// What `allow_n(key, quota, cost)` would answer at `now`, changing nothing.
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// assert!(limiter.peek_at("k", &plan, 3, limiter.now())?.allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn peek_at<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q, quota: &Quota, cost: u64, now: u64) -> Result<Decision> {
        let alg = Gcra::new(*quota);
        alg.check_cost(cost)?;
        let k = self.key_for(key.as_key(), quota)?;
        let verdict = self.base.update::<false, _>(&k, now, |cells| peek_in(&alg, cells, 0, now, cost))?;
        Ok(verdict.decision())
    }

    /// Gives `tokens` back to `key`'s bucket under `quota` (never above full).
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// let _ = limiter.allow_n("k", &plan, 3)?;
    /// limiter.refund("k", &plan, 2)?;
    /// assert_eq!(limiter.peek_at("k", &plan, 0, limiter.now())?.remaining, 2);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refund<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q, quota: &Quota, tokens: u64) -> Result<()> {
        self.refund_at(key, quota, tokens, self.now())
    }

    /// [`refund`](Self::refund) at time `now`.
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// let _ = limiter.allow_n("k", &plan, 3)?;
    /// limiter.refund_at("k", &plan, 1, limiter.now())?;
    /// assert!(limiter.allow("k", &plan)?.allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refund_at<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q, quota: &Quota, tokens: u64, now: u64) -> Result<()> {
        let alg = Gcra::new(*quota);
        let k = self.key_for(key.as_key(), quota)?;
        self.base.credit(&k, now, Credit::Refund, |cells| refund_in(&alg, cells, 0, now, tokens).map(drop)).map(drop)
    }

    /// Forgets `key`'s bucket under `quota`: it is full again.
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// let _ = limiter.allow_n("k", &plan, 3)?;
    /// limiter.reset("k", &plan)?;
    /// assert_eq!(limiter.allow_n("k", &plan, 3)?.remaining, 0);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn reset<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q, quota: &Quota) -> Result<()> {
        self.reset_at(key, quota, self.now())
    }

    /// [`reset`](Self::reset) at time `now`.
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// let _ = limiter.allow_n("k", &plan, 3)?;
    /// limiter.reset_at("k", &plan, limiter.now())?;
    /// assert!(limiter.allow("k", &plan)?.allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn reset_at<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q, quota: &Quota, now: u64) -> Result<()> {
        let k = self.key_for(key.as_key(), quota)?;
        self.base.reset_at(&k, now)
    }

    /// Takes `cost` from `key` under `quota`, waiting out each denial with
    /// the clock's [`sleep`](Clock::sleep), as
    /// [`Keyed::acquire`](crate::Keyed::acquire) does.
    ///
    /// ```
    /// use ratomic::{Clock, ManualClock, Quota, Quotas};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Quotas::builder().clock(clock.clone()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// let _ = limiter.allow_n("k", &plan, 3)?;
    /// assert!(limiter.acquire("k", &plan, 1, None)?.allowed);
    /// assert_eq!(clock.now(), 333_333_333);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn acquire<Q: ?Sized + AsKey<[u8]>>(
        &self,
        key: &Q,
        quota: &Quota,
        cost: u64,
        timeout: Option<Duration>,
    ) -> Result<Decision> {
        base::acquire(
            timeout,
            || self.allow_n(key, quota, cost),
            |d| (d.allowed, d.retry_after),
            |d| self.base.clock.sleep(d),
        )
    }

    /// [`acquire`](Self::acquire) for async code on any runtime (`sleep(d)`
    /// returns a future that completes after `d`).
    pub async fn acquire_with<Q, F, Fut>(
        &self,
        key: &Q,
        quota: &Quota,
        cost: u64,
        timeout: Option<Duration>,
        sleep: F,
    ) -> Result<Decision>
    where
        Q: ?Sized + AsKey<[u8]>,
        F: FnMut(Duration) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        base::acquire_async(timeout, || self.allow_n(key, quota, cost), |d| (d.allowed, d.retry_after), sleep).await
    }

    /// Buckets currently held, across all quotas (see
    /// [`Keyed::len`](crate::Keyed::len)).
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// let _ = limiter.allow("a", &plan)?;
    /// let _ = limiter.allow("a", &Quota::parse("9/s")?)?;
    /// assert_eq!(limiter.len(), 2, "one bucket per (quota, key)");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.base.len()
    }

    /// Whether no bucket is held.
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// assert!(limiter.is_empty());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every bucket that is full again; returns how many.
    ///
    /// ```
    /// use ratomic::{Clock, ManualClock, Quota, Quotas};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Quotas::builder().clock(clock.clone()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// let _ = limiter.allow("a", &plan)?;
    /// clock.advance(std::time::Duration::from_secs(1));
    /// assert_eq!(limiter.gc()?, 1);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn gc(&self) -> Result<usize> {
        self.gc_at(self.now())
    }

    /// [`gc`](Self::gc) at time `now`.
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// let _ = limiter.allow("a", &plan)?;
    /// assert_eq!(limiter.gc_at(limiter.now())?, 0);
    /// assert_eq!(limiter.gc_at(limiter.now() + 1_000_000_000)?, 1);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn gc_at(&self, now: u64) -> Result<usize> {
        self.base.gc_at(now)
    }

    /// Bytes of memory the store holds.
    ///
    /// ```
    /// use ratomic::{ManualClock, Quota, Quotas};
    ///
    /// let limiter = Quotas::builder().clock(ManualClock::new()).build()?;
    /// let plan = Quota::parse("3/s")?;
    /// let empty = limiter.memory_bytes();
    /// for i in 0..10_000 {
    ///     let _ = limiter.allow(&format!("customer:{i}"), &plan)?;
    /// }
    /// assert!(limiter.memory_bytes() > empty);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn memory_bytes(&self) -> usize {
        self.base.memory_bytes()
    }
}

impl<C: Clock + fmt::Debug> fmt::Debug for Quotas<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Quotas").field("clock", &self.base.clock).field("keys", &self.len()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_is_self_delimiting_so_pairs_never_collide() {
        let a = Quota::new(1, 1.0).unwrap(); // T = 1e9
        let b = Quota::new(300, 1.0).unwrap();
        // Same bytes overall would need the same quota and the same key.
        assert_ne!(store_key(&a, b"x"), store_key(&b, b"x"));
        assert_ne!(store_key(&a, b""), store_key(&a, b"\0"));
        let k = store_key(&Quota::new(u64::MAX >> 2, 1e12).unwrap(), b"key");
        assert!(k.len() <= MAX_PREFIX + 3);
    }

    #[test]
    fn retention_is_that_of_every_gcra() {
        for q in [Quota::new(1, 1.0).unwrap(), Quota::new(1000, 0.001).unwrap(), Quota::new(7, 1e9).unwrap()] {
            let g = Gcra::new(q);
            for (s, now) in [(0, 0), (5, 10), (10, 5), (u64::MAX >> 1, 3)] {
                assert_eq!(QuotaFree::default().idle_after(&[s], now), Algorithm::idle_after(&g, s, now));
                let mut f = [s];
                QuotaFree::default().join_into(&mut f, &[now]);
                assert_eq!(f[0], g.join(s, now));
            }
        }
    }
}
