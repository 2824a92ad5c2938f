//! A keyed limiter: one algorithm, a state word per key, in a bounded store.

use std::fmt;
use std::marker::PhantomData;

use crate::algorithm::{cas_charge, cas_refund, peek, restore, Algorithm, Charge};
use crate::clock::{Clock, MonotonicClock};
use crate::decision::Decision;
use crate::error::Result;
use crate::key::{AsKey, Key};
use crate::rate::MAX_NANOS;
use crate::store::{Options, Retention, Store};

/// A rate limiter that keeps one state word per key, for any algorithm.
///
/// You will normally use it through its aliases: [`TokenBucket`](crate::TokenBucket)
/// (and, as they arrive, the window algorithms). `K` is the key type (`[u8]`
/// by default, or `u64`); `C` the clock.
///
/// Every method is safe to call from many threads at once through a shared
/// reference: wrap the limiter in an `Arc` or a `static` and share it.
///
/// Each operation comes in two forms: one that reads the limiter's clock,
/// and one ending in `_at` that takes the time (`now`, nanoseconds on the
/// clock's timeline) from the caller, so one timestamp can drive several
/// decisions and tests need no clock at all.
pub struct Keyed<A: Algorithm, K: ?Sized + Key = [u8], C: Clock = MonotonicClock> {
    alg: A,
    store: Store<K::Stored>,
    clock: C,
    max_key_len: usize,
    _key: PhantomData<fn(&K)>,
}

impl<A: Algorithm> Retention for A {
    fn pristine(&self, out: &mut [u64]) {
        out[0] = A::PRISTINE;
    }
    fn idle_after(&self, states: &[u64], now: u64) -> u64 {
        Algorithm::idle_after(self, states[0], now)
    }
    fn join_into(&self, floor: &mut [u64], states: &[u64]) {
        floor[0] = self.join(floor[0], states[0]);
    }
}

impl<A: Algorithm, K: ?Sized + Key, C: Clock> Keyed<A, K, C> {
    /// A limiter running `algorithm` on `clock`, storing keys as `options` say.
    pub fn with_algorithm(algorithm: A, clock: C, options: Options) -> Result<Self> {
        let store = Store::new(&options, 1, &algorithm)?;
        Ok(Keyed { alg: algorithm, store, clock, max_key_len: options.max_key_len, _key: PhantomData })
    }

    /// The algorithm (and through it the quota) this limiter enforces.
    pub fn algorithm(&self) -> &A {
        &self.alg
    }

    /// The limiter's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The clock's reading now, as the `*_at` methods expect it.
    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.now().min(MAX_NANOS)
    }

    /// The most a key can hold: the largest cost a call may ask.
    pub fn limit(&self) -> u64 {
        self.alg.limit()
    }

    /// The longest key, in bytes, this limiter accepts (see [`Options::max_key_len`]).
    pub fn max_key_len(&self) -> usize {
        self.max_key_len
    }

    /// Takes one token from `key`'s bucket if it has one.
    ///
    /// Errors (and changes nothing) only if the key is longer than
    /// `max_key_len`.
    #[inline]
    pub fn allow<Q: ?Sized + AsKey<K>>(&self, key: &Q) -> Result<Decision> {
        self.allow_at(key, 1, self.now())
    }

    /// Takes `cost` tokens from `key`'s bucket if it has that many; cost 0
    /// answers like [`peek`](Self::peek).
    ///
    /// Errors (and changes nothing) if `cost` exceeds the limit or the key is
    /// too long.
    #[inline]
    pub fn allow_n<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64) -> Result<Decision> {
        self.allow_at(key, cost, self.now())
    }

    /// [`allow_n`](Self::allow_n) at time `now` (ns on this limiter's clock).
    #[inline]
    pub fn allow_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64, now: u64) -> Result<Decision> {
        self.alg.check_cost(cost)?;
        let (hash, probe) = key.as_key().probe(self.store.hasher(), self.max_key_len)?;
        let verdict = self.store.update(hash, &probe, now, &self.alg, |states| {
            let (verdict, charge) = cas_charge(&self.alg, &states[0], now, cost);
            (verdict, charge.is_some())
        });
        Ok(verdict.decision())
    }

    /// Many independent calls in one: each `(key, cost)` pair is decided as
    /// by [`allow_n`](Self::allow_n), in order, all at one clock reading.
    /// Each pair gets its own result; an invalid pair fails alone.
    ///
    /// ```
    /// use ratomic::{Quota, TokenBucket};
    ///
    /// let limiter = TokenBucket::new(Quota::per_second(1)?);
    /// let out = limiter.allow_many([("a", 1), ("a", 1), ("b", 1), ("c", 2)]);
    /// let allowed: Vec<_> = out.iter().map(|r| r.as_ref().map(|d| d.allowed)).collect();
    /// assert_eq!(allowed[..3], [Ok(true), Ok(false), Ok(true)]);
    /// assert!(out[3].is_err()); // cost 2 exceeds the limit 1
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn allow_many<'q, Q, I>(&self, requests: I) -> Vec<Result<Decision>>
    where
        Q: ?Sized + AsKey<K> + 'q,
        I: IntoIterator<Item = (&'q Q, u64)>,
    {
        let mut out = Vec::new();
        self.allow_many_at(requests, self.now(), &mut out);
        out
    }

    /// [`allow_many`](Self::allow_many) at time `now`, appending to `out` (so
    /// a caller can reuse one buffer across batches).
    pub fn allow_many_at<'q, Q, I>(&self, requests: I, now: u64, out: &mut Vec<Result<Decision>>)
    where
        Q: ?Sized + AsKey<K> + 'q,
        I: IntoIterator<Item = (&'q Q, u64)>,
    {
        let requests = requests.into_iter();
        out.reserve(requests.size_hint().0);
        out.extend(requests.map(|(key, cost)| self.allow_at(key, cost, now)));
    }

    /// What `allow` would answer for one token, changing nothing: like every
    /// decision, its `remaining` is what would be left *after* that token.
    /// `peek_n(key, 0)` reports the key's state as it is.
    #[inline]
    pub fn peek<Q: ?Sized + AsKey<K>>(&self, key: &Q) -> Result<Decision> {
        self.peek_at(key, 1, self.now())
    }

    /// What `allow_n(key, cost)` would answer, changing nothing.
    #[inline]
    pub fn peek_n<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64) -> Result<Decision> {
        self.peek_at(key, cost, self.now())
    }

    /// [`peek_n`](Self::peek_n) at time `now`.
    #[inline]
    pub fn peek_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64, now: u64) -> Result<Decision> {
        self.alg.check_cost(cost)?;
        let (hash, probe) = key.as_key().probe(self.store.hasher(), self.max_key_len)?;
        let verdict =
            self.store.update(hash, &probe, now, &self.alg, |states| (peek(&self.alg, &states[0], now, cost), false));
        Ok(verdict.decision())
    }

    /// Gives `tokens` back to `key` (say, for work that was admitted but not
    /// done). The bucket never fills above full: refunding a full bucket, or
    /// a key never seen, does nothing.
    pub fn refund<Q: ?Sized + AsKey<K>>(&self, key: &Q, tokens: u64) -> Result<()> {
        self.refund_at(key, tokens, self.now())
    }

    /// [`refund`](Self::refund) at time `now`.
    pub fn refund_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, tokens: u64, now: u64) -> Result<()> {
        let (hash, probe) = key.as_key().probe(self.store.hasher(), self.max_key_len)?;
        self.store.update(hash, &probe, now, &self.alg, |states| ((), cas_refund(&self.alg, &states[0], now, tokens)));
        Ok(())
    }

    /// Forgets `key`: it is full again.
    pub fn reset<Q: ?Sized + AsKey<K>>(&self, key: &Q) -> Result<()> {
        self.reset_at(key, self.now())
    }

    /// [`reset`](Self::reset) at time `now`.
    pub fn reset_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, now: u64) -> Result<()> {
        let (hash, probe) = key.as_key().probe(self.store.hasher(), self.max_key_len)?;
        self.store.reset(hash, &probe, now, &self.alg);
        Ok(())
    }

    /// Checks a call's arguments (the cost against the limit, the key's
    /// length) as `allow_n` would, changing nothing: for a batch that must be
    /// valid as a whole before any of it is charged.
    pub fn check<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64) -> Result<()> {
        self.validate(key.as_key(), cost)
    }

    /// Keys currently held. A key whose bucket has become full again may be
    /// counted until the store next drops such keys (when a table would grow,
    /// or on [`gc`](Self::gc)); call `gc` first for an exact count of keys
    /// that are being limited.
    pub fn len(&self) -> usize {
        self.store.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every key whose bucket is full (losslessly: no later decision
    /// changes) and shrinks sparse tables. Returns how many keys were dropped.
    /// Calling it is optional: the same work happens, amortised, inside calls.
    pub fn gc(&self) -> usize {
        self.gc_at(self.now())
    }

    /// [`gc`](Self::gc) at time `now`.
    pub fn gc_at(&self, now: u64) -> usize {
        self.store.gc(now, &self.alg)
    }

    /// Bytes of memory the limiter's store holds: its tables, the keys
    /// longer than 23 bytes (stored outside the tables) and the summaries of
    /// evicted keys. Bounded by the store's [`Options`].
    pub fn memory_bytes(&self) -> usize {
        self.store.memory_bytes()
    }
}

impl<A: Algorithm, K: ?Sized + Key, C: Clock> Keyed<A, K, C> {
    /// A call's charge for a [`Stack`](crate::Stack): the decision and, if
    /// it wrote, the receipt for taking it back.
    pub(crate) fn charge_at(&self, key: &K, cost: u64, now: u64) -> Result<(Decision, Option<Charge>)> {
        self.alg.check_cost(cost)?;
        let (hash, probe) = key.probe(self.store.hasher(), self.max_key_len)?;
        let (verdict, charge) = self.store.update(hash, &probe, now, &self.alg, |states| {
            let (verdict, charge) = cas_charge(&self.alg, &states[0], now, cost);
            ((verdict, charge), charge.is_some())
        });
        Ok((verdict.decision(), charge))
    }

    /// Takes back a charge made by [`charge_at`](Self::charge_at), exactly
    /// (see [`restore`]); a key forgotten since keeps nothing to take back.
    pub(crate) fn give_back_at(&self, key: &K, charge: Charge) {
        if let Ok((hash, probe)) = key.probe(self.store.hasher(), self.max_key_len) {
            self.store.with_existing(hash, &probe, |states| {
                restore(&states[0], charge);
            });
        }
    }

    /// Checks a call's arguments without touching any state.
    pub(crate) fn validate(&self, key: &K, cost: u64) -> Result<()> {
        self.alg.check_cost(cost)?;
        key.probe(self.store.hasher(), self.max_key_len).map(|_| ())
    }
}

impl<A: Algorithm + fmt::Debug, K: ?Sized + Key, C: Clock + fmt::Debug> fmt::Debug for Keyed<A, K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyed")
            .field("algorithm", &self.alg)
            .field("clock", &self.clock)
            .field("keys", &self.len())
            .finish_non_exhaustive()
    }
}

/// Builds a keyed limiter: choose the key type, the clock and the store
/// [`Options`]. Start from e.g. [`TokenBucket::builder`](crate::TokenBucket::builder).
///
/// ```
/// use ratomic::{ManualClock, Quota, TokenBucket};
///
/// let clock = ManualClock::new();
/// let limiter = TokenBucket::builder(Quota::per_second(5)?)
///     .keys::<u64>()
///     .clock(clock.clone())
///     .max_keys(10_000)
///     .build()?;
/// assert!(limiter.allow(&42)?.allowed);
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "call .build() to get the limiter"]
pub struct Builder<A, K: ?Sized = [u8], C = MonotonicClock> {
    alg: A,
    clock: C,
    options: Options,
    _key: PhantomData<fn(&K)>,
}

impl<A: Algorithm> Builder<A> {
    pub(crate) fn new(alg: A) -> Self {
        Builder { alg, clock: MonotonicClock::new(), options: Options::default(), _key: PhantomData }
    }
}

impl<A: Algorithm, K: ?Sized + Key, C: Clock> Builder<A, K, C> {
    /// Index keys by `K2` instead (`[u8]` or `u64`).
    pub fn keys<K2: ?Sized + Key>(self) -> Builder<A, K2, C> {
        Builder { alg: self.alg, clock: self.clock, options: self.options, _key: PhantomData }
    }

    /// Use `clock` instead of the default [`MonotonicClock`].
    pub fn clock<C2: Clock>(self, clock: C2) -> Builder<A, K, C2> {
        Builder { alg: self.alg, clock, options: self.options, _key: PhantomData }
    }

    /// Replace all store options at once.
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// See [`Options::max_keys`].
    pub fn max_keys(mut self, n: usize) -> Self {
        self.options.max_keys = n;
        self
    }

    /// See [`Options::max_key_len`].
    pub fn max_key_len(mut self, n: usize) -> Self {
        self.options.max_key_len = n;
        self
    }

    /// See [`Options::max_key_bytes`].
    pub fn max_key_bytes(mut self, n: usize) -> Self {
        self.options.max_key_bytes = n;
        self
    }

    /// See [`Options::eviction`] and [`Eviction`](crate::Eviction).
    pub fn eviction(mut self, policy: crate::Eviction) -> Self {
        self.options.eviction = policy;
        self
    }

    /// See [`Options::shards`].
    pub fn shards(mut self, n: usize) -> Self {
        self.options.shards = Some(n);
        self
    }

    /// The limiter; errors if an option is out of range.
    pub fn build(self) -> Result<Keyed<A, K, C>> {
        Keyed::with_algorithm(self.alg, self.clock, self.options)
    }
}
