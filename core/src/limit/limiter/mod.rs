//! Several named limits on one key, all or nothing: a call is allowed only
//! if every limit allows it, and then every limit is charged.

use std::fmt;
use std::time::Duration;

use crate::algorithm::rule::Rule;
use crate::algorithm::{settle_in, Algorithm};
use crate::clock::{checked, Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::limit::base::{Base, Builder};
use crate::store::key::{AsKey, BoundedKey, Key};
use crate::store::Charge;
use crate::store::{Cells, Credit, Frozen, Retention};

mod builder;
mod decision;
mod selected;
mod set;

pub use builder::{LimiterBuilder, Limits};
use decision::{Decided, INLINE_ENTRIES};
pub(crate) use decision::{Entries, Entry, Receipts};
pub use decision::{MultiDecision, NamedDecision};
pub use selected::Selected;
pub use set::{LimitSet, MAX_LIMITS};

/// Several named limits on the same key — say a burst of `10/s` and
/// `1000/day` — decided all or nothing: a call is allowed only if every
/// limit allows it, and then every limit is charged; otherwise none is.
///
/// One key lookup serves all the limits: a key's state is one `AtomicU64`
/// per limit, side by side in one slot. The protocol is lock-free: each
/// limit is charged by its own CAS, in order; if one denies, the ones
/// already charged are given back. Under concurrency a call may be denied
/// spuriously while another call's tokens are on their way back, but no
/// limit ever grants more than it allows alone. A give-back is exact, or
/// none: if a limit's word moved on meanwhile, or the key was refunded or
/// reset meanwhile, the denied call's charge stays and comes back by
/// refill (a token denied, never one granted).
///
/// # Per-request limits
///
/// A limiter may hold limits that apply only to some requests — a free and
/// an enterprise plan, reads and writes — and each call chooses which apply
/// with a [`LimitSet`] (resolved from names once, then a bitmask): see
/// [`select`](Self::select). A call on all limits pays nothing for this.
///
/// Each limit keeps its own state per key, so moving a key from one set of
/// limits to another (an upgrade from the free plan to the enterprise plan)
/// starts it on the new limits with whatever it has used of *those* —
/// usually nothing, a full allowance — while its state in the old limits
/// stays, and counts again if it moves back. The limits themselves are fixed
/// when the limiter is built; to change a quota for everyone, build a new
/// limiter (and, for a gradual switch, stack the old one with it: see
/// [`Stack`](crate::Stack)).
///
/// ```
/// use ratomic::{Limiter, ManualClock, Quota, Rate, Rule};
///
/// let limiter = Limiter::builder()
///     .limit("burst", Rule::token_bucket(Quota::parse("3/s")?))
///     .limit("daily", Rule::fixed_window(Rate::parse("5/d")?)?)
///     .clock(ManualClock::new())
///     .build()?;
///
/// for _ in 0..3 {
///     assert!(limiter.allow("user:1")?.allowed());
/// }
/// let d = limiter.allow("user:1")?;
/// assert!(!d.allowed());
/// assert_eq!(d.denied_by().collect::<Vec<_>>(), ["burst"]);
/// assert!(d.get("daily").unwrap().allowed, "daily alone would have allowed it");
/// let daily_now = limiter.peek_n("user:1", 0)?.get("daily").unwrap();
/// assert_eq!(daily_now.remaining, 2, "and it was not charged: 5 a day, 3 used");
/// # Ok::<(), ratomic::Error>(())
/// ```
pub struct Limiter<K: ?Sized + Key = [u8], C: Clock = MonotonicClock> {
    pub(super) base: Base<Rules, K, C>,
    pub(super) names: Box<[Box<str>]>,
    pub(super) all: LimitSet,
}

/// The rules as the store sees them: every limit's state in one slot.
pub(super) struct Rules(pub(super) Box<[Rule]>);

impl Retention for Rules {
    fn pristine(&self, out: &mut [u64]) {
        out.fill(Rule::PRISTINE);
    }
    fn idle_after(&self, states: &[u64], now: u64) -> u64 {
        self.0.iter().zip(states).map(|(r, &s)| Algorithm::idle_after(r, s, now)).max().unwrap_or(0)
    }
    fn linger(&self) -> u64 {
        self.0.iter().map(Retention::linger).max().unwrap_or(0)
    }
    fn join_word(&self, i: usize, a: u64, b: u64) -> u64 {
        self.0[i].join(a, b)
    }
    fn describe(&self) -> String {
        format!("{:?}", self.0)
    }
    fn label(&self) -> String {
        self.0.iter().map(ToString::to_string).collect::<Vec<_>>().join(" and ")
    }
}

impl<K: ?Sized + Key, C: Clock> Limiter<K, C> {
    /// The limiter's limits, in order, by name.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// assert_eq!(limiter.names().collect::<Vec<_>>(), ["2/s", "5/day"]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn names(&self) -> impl ExactSizeIterator<Item = &str> {
        self.names.iter().map(|n| &**n)
    }

    /// The limiter's rules, in the same order as [`names`](Self::names).
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let rules: Vec<String> = limiter.rules().iter().map(|r| r.to_string()).collect();
    /// assert_eq!(rules, ["token bucket 2 per 1s", "token bucket 5 per 1d"]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn rules(&self) -> &[Rule] {
        &self.base.rules.0
    }

    /// The set of limits with these names; errors on an unknown name or an
    /// empty list.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// assert_eq!(limiter.limit_set(&["5/day"])?.len(), 1);
    /// assert!(limiter.limit_set(&["10/h"]).is_err());
    /// assert!(limiter.limit_set(&[]).is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn limit_set(&self, names: &[&str]) -> Result<LimitSet> {
        let mut bits = 0u16;
        for name in names {
            let i = self.names.iter().position(|n| **n == **name).ok_or_else(|| {
                Error::invalid("limit name", format!("{name:?}"), "is not one of this limiter's limits")
            })?;
            bits |= 1 << i;
        }
        if bits == 0 {
            return Err(Error::invalid("limit set", "[]", "must name at least one limit"));
        }
        Ok(LimitSet(bits))
    }

    /// The set with these bits (see [`LimitSet::bits`]); errors if a bit
    /// names no limit of this limiter or the set is empty.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// assert!(limiter.limit_set_from_bits(0b01).is_ok());
    /// assert!(limiter.limit_set_from_bits(0b100).is_err(), "no third limit");
    /// assert!(limiter.limit_set_from_bits(0).is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn limit_set_from_bits(&self, bits: u16) -> Result<LimitSet> {
        let set = LimitSet(bits);
        self.check_set(set, 0)?;
        Ok(set)
    }

    /// Every limit: what the plain methods use.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// assert_eq!(limiter.all_limits().len(), 2);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn all_limits(&self) -> LimitSet {
        self.all
    }

    /// The same operations, subject only to the limits in `set`.
    ///
    /// ```
    /// use ratomic::{Limiter, ManualClock, Rule};
    ///
    /// let limiter = Limiter::builder()
    ///     .limit("free", Rule::parse("2/s")?)
    ///     .limit("enterprise", Rule::parse("100/s")?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// // Resolve names once, at setup; per call a set is a bitmask.
    /// let free = limiter.limit_set(&["free"])?;
    /// let enterprise = limiter.limit_set(&["enterprise"])?;
    /// let plan_of = |user: &str| if user.starts_with("ent:") { enterprise } else { free };
    ///
    /// for user in ["ent:acme", "bob"] {
    ///     let granted = (0..5).filter(|_| limiter.select(plan_of(user)).allow(user).unwrap().allowed()).count();
    ///     assert_eq!(granted, if user == "bob" { 2 } else { 5 });
    /// }
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn select(&self, set: LimitSet) -> Selected<'_, K, C> {
        Selected { limiter: self, set }
    }

    /// The clock's reading now, as the `*_at` methods expect it.
    ///
    /// ```
    /// use ratomic::{Limiter, ManualClock, Rule};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Limiter::builder()
    ///     .limit("burst", Rule::parse("2/s")?)
    ///     .limit("daily", Rule::parse("5/day")?)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// clock.advance_nanos(7);
    /// assert_eq!(limiter.now(), 7);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn now(&self) -> u64 {
        self.base.clock.now()
    }

    /// The longest key, in bytes, this limiter accepts (see [`Options::max_key_len`](crate::Options::max_key_len)).
    ///
    /// ```
    /// use ratomic::{Limiter, Rule};
    ///
    /// let limiter = Limiter::builder().limit("l", Rule::parse("1/s")?).max_key_len(16).build()?;
    /// assert_eq!(limiter.max_key_len(), 16);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn max_key_len(&self) -> usize {
        self.base.max_key_len()
    }

    /// For tests of a shared store: the fingerprints of the keys its file
    /// holds (`None` for an in-process store). Not part of the API.
    #[doc(hidden)]
    #[cfg(all(target_os = "linux", not(ratomic_loom)))]
    pub fn shared_fingerprints(&self) -> Option<Vec<u64>> {
        self.base.shared_fingerprints()
    }

    /// The limiter's clock.
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
    /// assert_eq!(limiter.clock().now(), 0);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.base.clock
    }

    /// Checks a call's arguments (the cost against every limit, the key's
    /// length) as `allow_n` would, changing nothing.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// assert!(limiter.check("k", 2).is_ok());
    /// assert!(limiter.check("k", 3).is_err(), "more than 2/s holds");
    /// assert!(limiter.is_empty(), "check changes nothing");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn check<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64) -> Result<()> {
        self.select(self.all).check(key, cost)
    }

    /// Takes `cost` from every limit of `key`, or from none.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// assert_eq!(limiter.allow_n("k", 2)?.get("5/day").unwrap().remaining, 3);
    /// assert!(!limiter.allow_n("k", 2)?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow_n<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64) -> Result<MultiDecision<'_>> {
        self.select(self.all).allow_n(key, cost)
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
    /// let now = limiter.now();
    /// assert!(limiter.allow_at("k", 2, now)?.allowed());
    /// assert!(!limiter.allow_at("k", 1, now)?.allowed());
    /// assert!(limiter.allow_at("k", 1, now + 500_000_000)?.allowed(), "half a second later");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64, now: u64) -> Result<MultiDecision<'_>> {
        self.select(self.all).allow_at(key, cost, now)
    }

    /// Many calls at one clock reading, all checked before any is decided;
    /// see [`Keyed::allow_many`](crate::Keyed::allow_many).
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let out = limiter.allow_many([("a", 2), ("a", 1), ("b", 1)])?;
    /// assert_eq!(out.iter().map(|d| d.allowed()).collect::<Vec<_>>(), [true, false, true]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn allow_many<'q, Q, I>(&self, requests: I) -> Result<Vec<MultiDecision<'_>>>
    where
        Q: ?Sized + AsKey<K> + 'q,
        I: IntoIterator<Item = (&'q Q, u64)>,
    {
        self.select(self.all).allow_many(requests)
    }

    /// What `allow_n` would answer, changing nothing.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let _ = limiter.allow("k")?;
    /// assert_eq!(limiter.peek_n("k", 0)?.get("5/day").unwrap().remaining, 4);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn peek_n<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64) -> Result<MultiDecision<'_>> {
        self.select(self.all).peek_n(key, cost)
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
    /// let _ = limiter.allow_n("k", 2)?;
    /// assert!(!limiter.peek_at("k", 1, limiter.now())?.allowed());
    /// assert!(limiter.peek_at("k", 1, limiter.now() + 1_000_000_000)?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn peek_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64, now: u64) -> Result<MultiDecision<'_>> {
        self.select(self.all).peek_at(key, cost, now)
    }

    /// Gives `tokens` back to every limit of `key` (never above full).
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let _ = limiter.allow_n("k", 2)?;
    /// limiter.refund("k", 1)?;
    /// assert_eq!(limiter.peek_n("k", 0)?.get("2/s").unwrap().remaining, 1);
    /// assert_eq!(limiter.peek_n("k", 0)?.get("5/day").unwrap().remaining, 4);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refund<Q: ?Sized + AsKey<K>>(&self, key: &Q, tokens: u64) -> Result<()> {
        self.select(self.all).refund(key, tokens)
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
    /// let _ = limiter.allow_n("k", 2)?;
    /// limiter.refund_at("k", 2, limiter.now())?;
    /// assert_eq!(limiter.peek_n("k", 0)?.decision.remaining, 2);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refund_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, tokens: u64, now: u64) -> Result<()> {
        self.select(self.all).refund_at(key, tokens, now)
    }

    /// Forgets `key` in every limit: it is full again.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let _ = limiter.allow_n("k", 2)?;
    /// limiter.reset("k")?;
    /// assert_eq!(limiter.peek_n("k", 0)?.get("5/day").unwrap().remaining, 5);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn reset<Q: ?Sized + AsKey<K>>(&self, key: &Q) -> Result<()> {
        self.reset_at(key, self.now())
    }

    /// [`reset`](Self::reset) at time `now`.
    ///
    /// ```
    /// use ratomic::{Limiter, ManualClock, Rule};
    ///
    /// let limiter = Limiter::builder()
    ///     .limit("burst", Rule::parse("2/s")?)
    ///     .limit("daily", Rule::parse("5/day")?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let _ = limiter.allow_n("k", 2)?;
    /// limiter.reset_at("k", limiter.now())?;
    /// assert!(limiter.allow_n("k", 2)?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn reset_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, now: u64) -> Result<()> {
        self.base.reset_at(key.as_key(), now)
    }

    /// Takes `cost` from every limit of `key`, waiting out denials; see
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
    /// let _ = limiter.allow_n("k", 2)?;
    /// assert!(limiter.acquire("k", 1, None)?.allowed()); // waits half a second of the clock's time
    /// assert_eq!(clock.now(), 500_000_000);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn acquire<Q: ?Sized + AsKey<K>>(
        &self,
        key: &Q,
        cost: u64,
        timeout: Option<Duration>,
    ) -> Result<MultiDecision<'_>> {
        self.select(self.all).acquire(key, cost, timeout)
    }

    /// [`acquire`](Self::acquire) for async code on any runtime; see
    /// [`Keyed::acquire_with`](crate::Keyed::acquire_with).
    pub async fn acquire_with<Q, F, Fut>(
        &self,
        key: &Q,
        cost: u64,
        timeout: Option<Duration>,
        sleep: F,
    ) -> Result<MultiDecision<'_>>
    where
        Q: ?Sized + AsKey<K>,
        F: FnMut(Duration) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        self.select(self.all).acquire_with(key, cost, timeout, sleep).await
    }

    /// Keys currently held (see [`Keyed::len`](crate::Keyed::len)).
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let _ = limiter.allow("a")?;
    /// assert_eq!(limiter.len(), 1);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.base.len()
    }

    /// Whether no key is held.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// assert!(limiter.is_empty());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every key all of whose limits are full again (losslessly).
    /// Returns how many keys were dropped.
    ///
    /// ```
    /// use ratomic::{Limiter, ManualClock, Rule};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = Limiter::builder()
    ///     .limit("burst", Rule::parse("2/s")?)
    ///     .limit("daily", Rule::parse("5/day")?)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let _ = limiter.allow("a")?;
    /// clock.advance(std::time::Duration::from_secs(86_400)); // every limit full again
    /// assert_eq!(limiter.gc()?, 1);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn gc(&self) -> Result<usize> {
        self.gc_at(self.now())
    }

    /// [`gc`](Self::gc) at time `now`.
    ///
    /// ```
    /// use ratomic::{Limiter, ManualClock, Rule};
    ///
    /// let limiter = Limiter::builder()
    ///     .limit("burst", Rule::parse("2/s")?)
    ///     .limit("daily", Rule::parse("5/day")?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let _ = limiter.allow("a")?;
    /// assert_eq!(limiter.gc_at(limiter.now())?, 0, "still refilling");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn gc_at(&self, now: u64) -> Result<usize> {
        self.base.gc_at(now)
    }

    /// Moves every key to a new table now, as the store does when it grows:
    /// for tests and models of migration racing other calls. Not needed in
    /// normal use.
    #[doc(hidden)]
    pub fn force_migration_at(&self, now: u64) -> Result<()> {
        self.base.force_migration_at(now)
    }

    /// Bytes of memory the limiter's store holds (see
    /// [`Keyed::memory_bytes`](crate::Keyed::memory_bytes)).
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;5/day")?;
    /// let empty = limiter.memory_bytes();
    /// for i in 0..10_000 {
    ///     let _ = limiter.allow(&format!("user:{i}"))?;
    /// }
    /// assert!(limiter.memory_bytes() > empty);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn memory_bytes(&self) -> usize {
        self.base.memory_bytes()
    }

    /// Step 1 of a call (see [`charge`](Self::charge)), and the whole of a
    /// peek: every limit in `set` decides on one reading of its word, into
    /// `d` (fresh). Returns whether a limit denied; a denied call's entries
    /// answer as if nothing was charged, as a denial charges nothing. (Into
    /// the caller's scratch: returned by value, the arrays were copied, and
    /// a two-limit call took 34 → 40–46 ns.)
    #[inline(always)]
    fn decide<const N: usize>(
        &self,
        cells: &Cells<'_>,
        set: LimitSet,
        cost: u64,
        now: u64,
        d: &mut Decided<N>,
    ) -> Result<bool, Frozen> {
        debug_assert!(d.a.count == 0);
        let rules = &self.base.rules.0;
        let mut denied = false;
        let mut bits = u32::from(set.0);
        let count = count_of::<N>(set);
        for k in 0..count {
            let i = bits.trailing_zeros() as usize;
            bits &= bits.wrapping_sub(1);
            let s = cells.load(i)?;
            let (verdict, n) = rules[i].decide_inlined(s, now, cost);
            denied |= !verdict.allowed;
            d.a.index[k] = i;
            d.seen[k] = s;
            d.next[k] = n.unwrap_or(s);
            d.a.entries[k] = Entry::of(&verdict);
        }
        d.a.count = count;
        if denied {
            let seen = &d.seen;
            uncharge(rules, &mut d.a.entries[..d.a.count], &d.a.index, |k| seen[k], now);
        }
        Ok(denied)
    }

    /// Charges every limit in `set` (at most `N` limits), or none, and
    /// returns whether the call was allowed, its answers (in limit order)
    /// in `d.a`. On success `receipts`, if given, holds what was charged.
    ///
    /// The protocol (see [`restore`](crate::algorithm::restore) for why it
    /// never over-grants):
    /// 1. Every selected limit decides on one reading of its word. If any
    ///    denies, the call is denied and nothing is written — the common
    ///    denial costs no write and no give-back.
    /// 2. Otherwise the limits are charged tightest first (least remaining
    ///    after the call), each by a CAS from the word it read; a word that
    ///    moved meanwhile is decided again.
    /// 3. If a limit now denies (another call took its last tokens since
    ///    step 1), the call asks the store to take the limits already
    ///    charged back, exactly, with the slot locked once the run is over
    ///    (see `store/cells.rs`).
    ///
    /// Charging the tightest limit first makes step 3 rare: the limit most
    /// likely to deny is the one charged before any other.
    ///
    /// `N` sizes the scratch: a two-limit call keeps two of everything on
    /// the stack, not [`MAX_LIMITS`] (zeroing and indexing sixteen of each
    /// was a fifth of a two-limit call's instructions: 962 → 773 under
    /// callgrind). Callers pick it with [`Selected::dispatch`].
    ///
    /// `d` is the caller's and is written in place: returned by value, the
    /// answers were copied at each layer of the store's retry loop, and
    /// with cargo's default release profile (no LTO, 16 codegen units) a
    /// two-limit call took 36–37 ns against 28–29 (`rounds limiter2-hot`).
    #[inline(always)]
    fn charge<const N: usize>(
        &self,
        cells: &mut Cells<'_>,
        set: LimitSet,
        cost: u64,
        now: u64,
        receipts: Option<&mut Receipts>,
        d: &mut Decided<N>,
    ) -> Result<bool, Frozen> {
        let rules = &self.base.rules.0;
        d.a.count = 0; // a run that goes round again decides afresh
        if self.decide::<N>(cells, set, cost, now, d)? {
            return Ok(false);
        }
        let Decided { a, seen, next } = d;
        let count = count_of::<N>(set);
        if cost == 0 {
            return Ok(false); // cost 0 charges nothing and answers like peek
        }
        // Tightest first: a stable insertion sort of the (at most N) entries.
        let mut order = [0u8; N];
        for k in 0..count {
            let mut j = k;
            while j > 0 && a.entries[order[j - 1] as usize].remaining > a.entries[k].remaining {
                order[j] = order[j - 1];
                j -= 1;
            }
            order[j] = k as u8;
        }
        for &k in &order[..count] {
            let (k, i) = (k as usize, a.index[k as usize]);
            let Some((verdict, charge)) = settle_in(&rules[i], cells, i, seen[k], next[k], now, cost)? else {
                continue; // charged as decided: the entry stands
            };
            // The word moved since it was read: decided again.
            a.entries[k] = Entry::of(&verdict);
            match charge {
                Some(c) => (seen[k], next[k]) = (c.before, c.after),
                None => {
                    // The limits charged so far (this run's only changes)
                    // are taken back by the store, exactly, once the run
                    // is over (see `store/cells.rs`).
                    cells.give_back();
                    uncharge(rules, &mut a.entries[..count], &a.index, |k| seen[k], now);
                    return Ok(false);
                }
            }
        }
        if let Some(r) = receipts {
            r.mark = cells.mark();
            for k in 0..count {
                let i = a.index[k];
                r.charges[i] = Charge { before: seen[k], after: next[k] };
                r.charged |= 1 << i;
            }
        }
        Ok(true)
    }

    /// A call's charge for a [`Stack`](crate::Stack): like `allow_at`, plus
    /// the receipts to take it back.
    pub(crate) fn charge_at(&self, key: &K, cost: u64, now: u64) -> Result<(MultiDecision<'_>, Option<Receipts>)> {
        self.check_set(self.all, cost)?;
        let mut d = Decided::<MAX_LIMITS>::new();
        let receipts = self.base.update::<true, _>(key, now, |cells| {
            let mut receipts = Receipts::new();
            let allowed = self.charge::<MAX_LIMITS>(cells, self.all, cost, now, Some(&mut receipts), &mut d)?;
            let charged = allowed && receipts.charged != 0;
            Ok(charged.then_some(receipts))
        })?;
        Ok((MultiDecision::of_answers(&d.a, self.all.0, &self.names), receipts))
    }

    /// Takes back a charge made by [`charge_at`](Self::charge_at), exactly
    /// (see [`restore`](crate::algorithm::restore)); a key that has been
    /// forgotten since keeps nothing to take back.
    pub(crate) fn give_back_at(&self, key: &K, receipts: &Receipts) {
        // The key was probed when charged, so it cannot be refused now;
        // `now` only matters to an insert, and there is none.
        let _ = self.base.credit(key, 0, Credit::GiveBack(receipts.mark), |cells| {
            receipts.restore(cells);
            Ok(())
        });
    }

    #[inline]
    fn check_set(&self, set: LimitSet, cost: u64) -> Result<()> {
        let rules = &self.base.rules.0;
        // Every limit is at least 1: a cost of 0 or 1 fits any non-empty set
        // of this limiter's (the common call, checked without a pass over
        // the rules).
        if cost <= 1 && set.0 != 0 && u32::from(set.0) >> rules.len() == 0 {
            return Ok(());
        }
        self.check_set_slow(set, cost)
    }

    #[inline(never)]
    fn check_set_slow(&self, set: LimitSet, cost: u64) -> Result<()> {
        let rules = &self.base.rules.0;
        // Widened: a limiter may hold 16 limits, and a u16 shifted by 16 overflows.
        if u32::from(set.0) >> rules.len() != 0 {
            return Err(Error::invalid("limit set", format!("{:#x}", set.0), "was made for another limiter"));
        }
        let selected = (0..rules.len()).filter(|&i| set.contains(i));
        match selected.map(|i| rules[i].limit()).min() {
            None => Err(Error::invalid("limit set", "[]", "must name at least one limit")),
            Some(limit) if cost > limit => Err(Error::CostExceedsLimit { cost, limit }),
            Some(_) => Ok(()),
        }
    }
}

/// How many limits a call with scratch for `N` decides: all of `set`'s.
/// The calls of one to three limits get scratch of exactly their size
/// (see [`Selected::dispatch`]), so for them it is the constant `N`, and
/// their loops over the limits unroll, with each limit's words in
/// registers rather than in arrays indexed at run time.
#[inline(always)]
fn count_of<const N: usize>(set: LimitSet) -> usize {
    if N <= INLINE_ENTRIES {
        debug_assert_eq!(set.len(), N, "scratch of {N} for a set of {}", set.len());
        N
    } else {
        debug_assert!(set.len() <= N);
        set.len()
    }
}

/// A denied call's entries (entry `k` is limit `index[k]`): each limit that
/// would have allowed it answers for `state(k)`, its state as the call saw
/// it, charged nothing (see [`Entry::uncharged`]).
#[inline(never)] // the denial path: keep it out of the hot charge loop
fn uncharge(rules: &[Rule], entries: &mut [Entry], index: &[usize], state: impl Fn(usize) -> u64, now: u64) {
    for (k, entry) in entries.iter_mut().enumerate() {
        if entry.allowed() {
            *entry = Entry::uncharged(&rules[index[k]].decide(state(k), now, 0).0);
        }
    }
}

/// `allow` and `peek` for byte keys, which may be refused for their length.
impl<C: Clock> Limiter<[u8], C> {
    /// Takes one token from every limit of `key`, or from none. Errors
    /// (changing nothing) only if the key is longer than `max_key_len` or
    /// the clock reads past [`MAX_TIME`](crate::MAX_TIME).
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;3/min")?;
    /// assert!(limiter.allow("k")?.allowed());
    /// assert!(limiter.allow("k")?.allowed());
    /// assert_eq!(limiter.allow("k")?.denied_by().collect::<Vec<_>>(), ["2/s"]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q) -> Result<MultiDecision<'_>> {
        self.select(self.all).allow(key)
    }

    /// What `allow` would answer, changing nothing. Errors as `allow`.
    ///
    /// ```
    /// use ratomic::Limiter;
    ///
    /// let limiter = Limiter::parse("2/s;3/min")?;
    /// assert_eq!(limiter.peek("k")?.decision.remaining, 1);
    /// assert_eq!(limiter.peek("k")?.decision.remaining, 1, "peek takes nothing");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn peek<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q) -> Result<MultiDecision<'_>> {
        self.select(self.all).peek(key)
    }
}

/// `allow` and `peek` for keys no limiter can refuse (`u64`, IP addresses):
/// a plain [`MultiDecision`], nothing to handle.
impl<K: BoundedKey, C: Clock> Limiter<K, C> {
    /// Takes one token from every limit of `key`, or from none. Cannot
    /// fail: the key has no length to check and one token never exceeds a
    /// limit.
    ///
    /// # Panics
    ///
    /// If the clock reads past [`MAX_TIME`](crate::MAX_TIME), as
    /// [`Keyed::allow`](crate::Keyed::allow) does.
    ///
    /// ```
    /// use ratomic::{Limiter, Rule};
    ///
    /// let limiter = Limiter::builder().limit("burst", Rule::parse("1/s")?).keys::<u64>().build()?;
    /// assert!(limiter.allow(&7).allowed());
    /// assert!(!limiter.allow(&7).allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow(&self, key: &K) -> MultiDecision<'_> {
        // Not through `allow_at`: its `Result` was unwrapped by a copy of
        // the whole answer, read back wider than it had just been written.
        let now = checked(self.now()).unwrap_or_else(|e| crate::limit::keyed::clock_broke_its_contract(e));
        let (hash, probe) = self.base.probe(key).unwrap_or_else(|e| crate::limit::keyed::clock_broke_its_contract(e));
        self.select(self.all).dispatch(hash, &probe, 1, now)
    }

    /// What `allow` would answer, changing nothing. Cannot fail; panics as
    /// `allow` on a clock past [`MAX_TIME`](crate::MAX_TIME).
    ///
    /// ```
    /// use ratomic::Limiter;
    /// use std::net::IpAddr;
    ///
    /// let limiter = Limiter::builder().limit("per-ip", ratomic::Rule::parse("5/min")?).keys::<IpAddr>().build()?;
    /// assert_eq!(limiter.peek(&"192.0.2.1".parse().unwrap()).decision.remaining, 4);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn peek(&self, key: &K) -> MultiDecision<'_> {
        // As `allow`: the answer built where it is returned.
        let now = checked(self.now()).unwrap_or_else(|e| crate::limit::keyed::clock_broke_its_contract(e));
        let (hash, probe) = self.base.probe(key).unwrap_or_else(|e| crate::limit::keyed::clock_broke_its_contract(e));
        self.select(self.all).peek_probed_any(hash, &probe, 1, now)
    }
}

/// The limits by name, each rule with its units, and the keys held:
/// `Limiter { limits: {"burst": token bucket 10 per 1s, "daily": fixed window 1000 per 1d}, keys: 0 }`.
///
/// ```
/// use ratomic::{Limiter, Rule};
///
/// let limiter = Limiter::new([("burst", Rule::parse("10/s")?), ("daily", Rule::fixed_window("1000/day".parse()?)?)])?;
/// assert_eq!(
///     format!("{limiter:?}"),
///     r#"Limiter { limits: {"burst": token bucket 10 per 1s, "daily": fixed window 1000 per 1d}, keys: 0 }"#
/// );
/// # Ok::<(), ratomic::Error>(())
/// ```
impl<K: ?Sized + Key, C: Clock> fmt::Debug for Limiter<K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Rules<'a, K: ?Sized + Key, C: Clock>(&'a Limiter<K, C>);
        impl<K: ?Sized + Key, C: Clock> fmt::Debug for Rules<'_, K, C> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_map().entries(self.0.names().zip(self.0.rules().iter().map(Shown))).finish()
            }
        }
        f.debug_struct("Limiter").field("limits", &Rules(self)).field("keys", &self.len()).finish()
    }
}

/// Debug-formats a rule as its `Display` (`token bucket 10 per 1s`).
struct Shown<'a>(&'a Rule);

impl fmt::Debug for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.0, f)
    }
}

impl Limiter {
    /// Starts building a limiter: add limits with
    /// [`LimiterBuilder::limit`](Builder::limit).
    ///
    /// ```
    /// use ratomic::{Limiter, Rule};
    ///
    /// let limiter = Limiter::builder().limit("burst", Rule::parse("10/s")?).keys::<u64>().max_keys(1_000).build()?;
    /// assert!(limiter.allow(&42).allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn builder() -> LimiterBuilder {
        Builder::new(Ok(Limits(Vec::new())))
    }

    /// A limiter over byte-string keys with the default clock and options.
    ///
    /// ```
    /// use ratomic::{Limiter, Rule};
    /// let limiter = Limiter::new([("burst", Rule::parse("10/s")?), ("sustained", Rule::parse("1000/h")?)])?;
    /// assert!(limiter.allow("k")?.allowed());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn new<N: Into<String>>(limits: impl IntoIterator<Item = (N, Rule)>) -> Result<Self> {
        limits.into_iter().fold(Self::builder(), |b, (name, rule)| b.limit(name, rule)).build()
    }

    /// A limiter from several limits in one string, as Python's `limits`
    /// (slowapi, Flask-Limiter) writes them: token buckets named by their
    /// rate strings (see [`parse_limits`](crate::parse_limits)).
    ///
    /// ```
    /// use ratomic::Limiter;
    /// let limiter = Limiter::parse("10/second;1000/day")?;
    /// assert_eq!(limiter.names().collect::<Vec<_>>(), ["10/second", "1000/day"]);
    /// assert!(limiter.allow("k")?.get("1000/day").is_some());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn parse(limits: &str) -> Result<Self> {
        Self::new(crate::parse_limits(limits)?)
    }
}
