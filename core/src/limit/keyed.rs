//! A keyed limiter: one algorithm, a state word per key, in a bounded store.

use std::fmt;
use std::time::Duration;

use crate::algorithm::rule::Rule;
use crate::algorithm::{charge_in, peek_in, refund_in, Algorithm};
use crate::clock::{checked, Clock, MonotonicClock};
use crate::decision::{Decision, Verdict};
use crate::error::{Error, Result};
use crate::limit::base::{self, Base, Builder};
use crate::store::key::{AsKey, BoundedKey, Key, Probe};
use crate::store::Charge;
use crate::store::{Credit, Mark, Options, Retention};

/// Runs `$body` with `$alg` bound to the limiter's algorithm — for a
/// `Keyed<Rule>`, to the concrete algorithm inside the rule, so the call
/// dispatches on the rule once and then runs the same monomorphic code as a
/// `Keyed` of that algorithm. (Deciding through `Rule` inside the CAS loop
/// measured twice as slow on a hot key, 40 ns against 20 ns: the rule's
/// arms kept the decision out of registers.) For any other algorithm the
/// check is a constant and the match folds away.
macro_rules! on_algorithm {
    ($self:ident, $alg:ident => $body:expr) => {
        match as_rule(&$self.base.rules) {
            Some(Rule::TokenBucket($alg)) => $body,
            Some(Rule::FixedWindow($alg)) => $body,
            Some(Rule::SlidingWindow($alg)) => $body,
            _ => {
                let $alg = &$self.base.rules;
                $body
            }
        }
    };
}

/// A batch's requests, checked and probed: each key's hash, probe and cost.
type Prepared<'q, K> = Vec<(u64, Probe<'q, K>, u64)>;

/// `alg` as a [`Rule`], if it is one (known at compile time).
#[inline(always)]
fn as_rule<A: Algorithm>(alg: &A) -> Option<&Rule> {
    (alg as &dyn std::any::Any).downcast_ref::<Rule>()
}

/// A rate limiter that keeps one state word per key, for any algorithm.
///
/// You will normally use it through its aliases: [`TokenBucket`](crate::TokenBucket),
/// [`FixedWindow`](crate::FixedWindow) and [`SlidingWindow`](crate::SlidingWindow)
/// — or `Keyed<Rule>` for a limiter whose algorithm is chosen at run time. `K`
/// is the key type (`[u8]` by default, or `u64`); `C` the clock.
///
/// Every method is safe to call from many threads at once through a shared
/// reference: wrap the limiter in an `Arc` or a `static` and share it.
///
/// Each operation comes in two forms: one that reads the limiter's clock,
/// and one ending in `_at` that takes the time (`now`, nanoseconds on the
/// clock's timeline, at most [`MAX_TIME`](crate::MAX_TIME)) from the
/// caller, so one timestamp can drive several decisions and tests need no
/// clock at all.
///
/// ```
/// use std::sync::Arc;
/// use ratomic::{FixedWindow, Keyed, ManualClock, Options, Rule};
///
/// // The algorithm chosen at run time, say from a configuration file.
/// let rule = Rule::parse("3/min")?; // a token bucket; Rule::fixed_window(..) for a window
/// let limiter: Keyed<Rule, [u8], ManualClock> = Keyed::with_algorithm(rule, ManualClock::new(), Options::default())?;
/// assert_eq!(limiter.allow("k")?.remaining, 2);
///
/// // Shared between threads through an Arc.
/// let shared = Arc::new(FixedWindow::builder("100/min").build()?);
/// let worker = Arc::clone(&shared);
/// std::thread::spawn(move || worker.allow("k").map(|d| d.allowed)).join().unwrap()?;
/// assert_eq!(shared.peek("k")?.remaining, 98);
/// # Ok::<(), ratomic::Error>(())
/// ```
pub struct Keyed<A: Algorithm, K: ?Sized + Key = [u8], C: Clock = MonotonicClock> {
    base: Base<A, K, C>,
}

impl<A: Algorithm> Retention for A {
    fn pristine(&self, out: &mut [u64]) {
        out[0] = A::PRISTINE;
    }
    fn idle_after(&self, states: &[u64], now: u64) -> u64 {
        Algorithm::idle_after(self, states[0], now)
    }
    fn linger(&self) -> u64 {
        crate::store::nanos_of(self.window())
    }
    fn join_word(&self, _: usize, a: u64, b: u64) -> u64 {
        self.join(a, b)
    }
    fn describe(&self) -> String {
        format!("{self:?}")
    }
    fn label(&self) -> String {
        self.to_string()
    }
}

impl<A: Algorithm, K: ?Sized + Key, C: Clock> Keyed<A, K, C> {
    /// A limiter running `algorithm` on `clock`, storing keys as `options` say.
    ///
    /// ```
    /// use ratomic::{Gcra, Keyed, ManualClock, Options, Quota};
    ///
    /// let limiter: Keyed<Gcra, u64, ManualClock> =
    ///     Keyed::with_algorithm(Gcra::new(Quota::parse("5/min")?), ManualClock::new(), Options::default().max_keys(1000))?;
    /// assert_eq!(limiter.limit(), 5);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn with_algorithm(algorithm: A, clock: C, options: Options) -> Result<Self> {
        Ok(Keyed { base: Base::new(algorithm, 1, clock, &options)? })
    }

    /// The algorithm (and through it the quota) this limiter enforces.
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("3/s").build()?;
    /// assert_eq!(limiter.algorithm().to_string(), "token bucket 3 per 1s");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn algorithm(&self) -> &A {
        &self.base.rules
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
    /// use ratomic::{Clock, ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder("3/s").clock(clock.clone()).build()?;
    /// clock.advance_nanos(5);
    /// assert_eq!(limiter.clock().now(), 5);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.base.clock
    }

    /// The clock's reading now, as the `*_at` methods expect it.
    ///
    /// ```
    /// use ratomic::{ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder("3/s").clock(clock.clone()).build()?;
    /// clock.advance_nanos(42);
    /// assert_eq!(limiter.now(), 42);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn now(&self) -> u64 {
        self.base.clock.now()
    }

    /// The most a key can hold: the largest cost a call may ask.
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("3/s").build()?;
    /// assert_eq!(limiter.limit(), 3);
    /// assert!(limiter.allow_n("k", 4).is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn limit(&self) -> u64 {
        self.base.rules.limit()
    }

    /// The longest key, in bytes, this limiter accepts (see [`Options::max_key_len`]).
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("3/s").max_key_len(64).build()?;
    /// assert_eq!(limiter.max_key_len(), 64);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn max_key_len(&self) -> usize {
        self.base.max_key_len()
    }

    /// Takes `cost` tokens from `key`'s bucket if it has that many; cost 0
    /// answers like [`peek`](Self::peek).
    ///
    /// Errors (and changes nothing) if `cost` exceeds the limit or the key is
    /// too long.
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("3/s").build()?;
    /// assert_eq!(limiter.allow_n("k", 2)?.remaining, 1);
    /// assert!(!limiter.allow_n("k", 2)?.allowed, "only one left");
    /// assert!(limiter.allow_n("k", 4).is_err(), "more than the bucket holds");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow_n<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64) -> Result<Decision> {
        self.allow_at(key, cost, self.now())
    }

    /// [`allow_n`](Self::allow_n) at time `now` (ns on this limiter's clock).
    ///
    /// ```
    /// use ratomic::{ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder("3/s").clock(clock.clone()).build()?;
    /// let now = limiter.now();
    /// assert_eq!(limiter.allow_at("k", 3, now)?.remaining, 0);
    /// // One token refills in 1/3 s of the clock's time.
    /// assert!(limiter.allow_at("k", 1, now + 333_333_334)?.allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64, now: u64) -> Result<Decision> {
        on_algorithm!(self, alg => {
            alg.check_cost(cost)?;
            let verdict = self.base.update::<false, _>(key.as_key(), now, |cells| Ok(charge_in(alg, cells, 0, now, cost)?.0))?;
            Ok(verdict.decision())
        })
    }

    /// [`allow_at`](Self::allow_at), answering the engine's [`Verdict`]
    /// (durations in nanoseconds) rather than a [`Decision`]: for the
    /// faces that hand nanoseconds on (the C ABI), which would otherwise
    /// convert nanoseconds to a `Duration` and back on every call. Not part
    /// of the API.
    ///
    /// Its own copy of `allow_at`'s body, on purpose: `allow_at` as
    /// `allow_verdict_at(..).map(Verdict::decision)` (`9d6ad4d`) made a hot
    /// `u64` call in cargo's default release profile store the verdict's
    /// `allowed` as one byte and read it back as eight, a failed store
    /// forward (16.9 → 20.6–23.6 ns a call, `ops ratomic-hot-u64-default`),
    /// and one shared body with the conversion passed in moved other calls'
    /// code generation for the worse in both profiles (`rounds`' one-bucket
    /// side 20 → 24–30 ns).
    #[doc(hidden)]
    #[inline]
    pub fn allow_verdict_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64, now: u64) -> Result<Verdict> {
        on_algorithm!(self, alg => {
            alg.check_cost(cost)?;
            self.base.update::<false, _>(key.as_key(), now, |cells| Ok(charge_in(alg, cells, 0, now, cost)?.0))
        })
    }

    /// Many calls in one, all at one clock reading: each `(key, cost)` pair
    /// is decided as by [`allow_n`](Self::allow_n), in order. Every pair is
    /// checked before any is decided: if one is invalid the whole call fails
    /// with [`Error::InvalidRequest`] naming the first bad pair, and nothing
    /// changes.
    ///
    /// ```
    /// use ratomic::{Error, Quota, TokenBucket};
    ///
    /// let limiter = TokenBucket::new(Quota::per_second(1)?);
    /// let out = limiter.allow_many([("a", 1), ("a", 1), ("b", 1)])?;
    /// let allowed: Vec<_> = out.iter().map(|d| d.allowed).collect();
    /// assert_eq!(allowed, [true, false, true]);
    /// // Cost 2 exceeds the limit 1: the whole batch fails, nothing is charged.
    /// let err = limiter.allow_many([("c", 1), ("d", 2)]).unwrap_err();
    /// assert!(matches!(err, Error::InvalidRequest { index: 1, .. }));
    /// assert_eq!(limiter.peek_n("c", 0)?.remaining, 1);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn allow_many<'q, Q, I>(&self, requests: I) -> Result<Vec<Decision>>
    where
        Q: ?Sized + AsKey<K> + 'q,
        I: IntoIterator<Item = (&'q Q, u64)>,
    {
        let mut out = Vec::new();
        self.allow_many_at(requests, self.now(), &mut out)?;
        Ok(out)
    }

    /// [`allow_many`](Self::allow_many) at time `now`, appending to `out` (so
    /// a caller can reuse one buffer across batches). On an error nothing is
    /// appended and nothing changes.
    ///
    /// ```
    /// use ratomic::{ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder("3/s").clock(clock.clone()).build()?;
    /// let mut out = Vec::new();
    /// limiter.allow_many_at([("a", 2), ("a", 2)], limiter.now(), &mut out)?;
    /// assert_eq!(out.iter().map(|d| d.allowed).collect::<Vec<_>>(), [true, false]);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn allow_many_at<'q, Q, I>(&self, requests: I, now: u64, out: &mut Vec<Decision>) -> Result<()>
    where
        Q: ?Sized + AsKey<K> + 'q,
        I: IntoIterator<Item = (&'q Q, u64)>,
    {
        let (now, prepared) = self.prepare_batch(requests, now)?;
        out.reserve(prepared.len());
        self.charge_prepared(prepared, now, |v| out.push(v.decision()));
        Ok(())
    }

    /// [`allow_many_at`](Self::allow_many_at), handing each request's
    /// [`Verdict`] (durations in nanoseconds) to `each`, in order, rather
    /// than appending `Decision`s: for the faces that write nanoseconds
    /// into their caller's own array (the C ABI), which would otherwise fill
    /// a vector of `Decision`s only to copy and convert it. On an error
    /// `each` is never called and nothing changes. Not part of the API.
    #[doc(hidden)]
    pub fn allow_many_verdicts_at<'q, Q, I>(&self, requests: I, now: u64, each: impl FnMut(Verdict)) -> Result<()>
    where
        Q: ?Sized + AsKey<K> + 'q,
        I: IntoIterator<Item = (&'q Q, u64)>,
    {
        let (now, prepared) = self.prepare_batch(requests, now)?;
        self.charge_prepared(prepared, now, each);
        Ok(())
    }

    /// A batch's time and requests, every one checked and probed before
    /// any is decided (the whole batch fails on the first bad one).
    #[inline]
    fn prepare_batch<'q, Q, I>(&self, requests: I, now: u64) -> Result<(u64, Prepared<'q, K>)>
    where
        Q: ?Sized + AsKey<K> + 'q,
        I: IntoIterator<Item = (&'q Q, u64)>,
    {
        let now = checked(now)?;
        let alg = &self.base.rules;
        Ok((now, self.base.prepare(requests, |cost| alg.check_cost(cost))?))
    }

    /// A batch's calls, every request checked and probed, with the thread
    /// pinned once.
    #[inline]
    fn charge_prepared(&self, prepared: Prepared<'_, K>, now: u64, mut each: impl FnMut(Verdict)) {
        self.base.batch(|| {
            on_algorithm!(self, alg => for (hash, probe, cost) in prepared {
                each(self.base.update_probed::<false, _>(hash, &probe, now, |cells| Ok(charge_in(alg, cells, 0, now, cost)?.0)));
            })
        });
    }

    /// What `allow_n(key, cost)` would answer, changing nothing.
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("3/s").build()?;
    /// assert!(!limiter.peek_n("k", 4).is_ok());
    /// assert_eq!(limiter.peek_n("k", 0)?.remaining, 3, "a fresh key is full");
    /// assert_eq!(limiter.peek_n("k", 2)?.remaining, 1);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn peek_n<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64) -> Result<Decision> {
        self.peek_at(key, cost, self.now())
    }

    /// [`peek_n`](Self::peek_n) at time `now`.
    ///
    /// ```
    /// use ratomic::{ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder("3/s").clock(clock.clone()).build()?;
    /// let _ = limiter.allow_n("k", 3)?;
    /// assert!(!limiter.peek_at("k", 1, limiter.now())?.allowed);
    /// assert!(limiter.peek_at("k", 1, limiter.now() + 1_000_000_000)?.allowed, "a second later");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn peek_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64, now: u64) -> Result<Decision> {
        on_algorithm!(self, alg => {
            alg.check_cost(cost)?;
            let verdict = self.base.update::<false, _>(key.as_key(), now, |cells| peek_in(alg, cells, 0, now, cost))?;
            Ok(verdict.decision())
        })
    }

    /// [`peek_at`](Self::peek_at) answering a [`Verdict`], as
    /// [`allow_verdict_at`](Self::allow_verdict_at). Not part of the API.
    #[doc(hidden)]
    #[inline]
    pub fn peek_verdict_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64, now: u64) -> Result<Verdict> {
        on_algorithm!(self, alg => {
            alg.check_cost(cost)?;
            self.base.update::<false, _>(key.as_key(), now, |cells| peek_in(alg, cells, 0, now, cost))
        })
    }

    /// Gives `tokens` back to `key` (say, for work that was admitted but not
    /// done). The bucket never fills above full: refunding a full bucket, or
    /// a key never seen, does nothing.
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("3/s").build()?;
    /// let _ = limiter.allow_n("k", 3)?;
    /// limiter.refund("k", 2)?; // work admitted but not done
    /// assert_eq!(limiter.peek_n("k", 0)?.remaining, 2);
    /// limiter.refund("k", 100)?;
    /// assert_eq!(limiter.peek_n("k", 0)?.remaining, 3, "never above full");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refund<Q: ?Sized + AsKey<K>>(&self, key: &Q, tokens: u64) -> Result<()> {
        self.refund_at(key, tokens, self.now())
    }

    /// [`refund`](Self::refund) at time `now`.
    ///
    /// ```
    /// use ratomic::{ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder("3/s").clock(clock.clone()).build()?;
    /// let _ = limiter.allow_n("k", 3)?;
    /// limiter.refund_at("k", 1, limiter.now())?;
    /// assert_eq!(limiter.peek_n("k", 0)?.remaining, 1);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn refund_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, tokens: u64, now: u64) -> Result<()> {
        on_algorithm!(self, alg => {
            self.base.credit(key.as_key(), now, Credit::Refund, |cells| refund_in(alg, cells, 0, now, tokens).map(drop)).map(drop)
        })
    }

    /// Forgets `key`: it is full again.
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("3/s").build()?;
    /// let _ = limiter.allow_n("k", 3)?;
    /// limiter.reset("k")?;
    /// assert_eq!(limiter.peek_n("k", 0)?.remaining, 3);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn reset<Q: ?Sized + AsKey<K>>(&self, key: &Q) -> Result<()> {
        self.reset_at(key, self.now())
    }

    /// [`reset`](Self::reset) at time `now`.
    ///
    /// ```
    /// use ratomic::{ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder("3/s").clock(clock.clone()).build()?;
    /// let _ = limiter.allow_n("k", 3)?;
    /// limiter.reset_at("k", limiter.now())?;
    /// assert!(limiter.allow("k")?.allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn reset_at<Q: ?Sized + AsKey<K>>(&self, key: &Q, now: u64) -> Result<()> {
        self.base.reset_at(key.as_key(), now)
    }

    /// Takes `cost` from `key`, waiting out each denial's `retry_after` with
    /// the clock's [`sleep`](Clock::sleep) (a [`ManualClock`](crate::ManualClock)
    /// moves itself forward instead of sleeping). Returns the allowing
    /// decision; with a `timeout`, once the next wait would take the total
    /// past it, returns that denial instead, without waiting (a denial is a
    /// value). Errors at once on a bad call. Blocks the thread: from async
    /// code, use [`acquire_with`](Self::acquire_with).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratomic::{Clock, ManualClock, Quota, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder(Quota::per_second(2)?).clock(clock.clone()).build()?;
    /// let _ = limiter.allow_n("k", 2)?;
    /// let d = limiter.acquire("k", 1, None)?; // waits 500 ms of the clock's time
    /// assert!(d.allowed);
    /// assert_eq!(clock.now(), 500_000_000);
    /// let d = limiter.acquire("k", 1, Some(Duration::from_millis(100)))?;
    /// assert!(!d.allowed, "the wait would pass the timeout");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn acquire<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64, timeout: Option<Duration>) -> Result<Decision> {
        base::acquire(timeout, || self.allow_n(key, cost), answer, |d| self.base.clock.sleep(d))
    }

    /// [`acquire`](Self::acquire) for async code on any runtime: `sleep(d)`
    /// returns a future that completes after `d` — `tokio::time::sleep`,
    /// `async_std::task::sleep`, or a test's own.
    ///
    /// ```ignore
    /// let d = limiter.acquire_with("user:1", 1, None, tokio::time::sleep).await?;
    /// ```
    ///
    /// With a test's own sleep, which moves a manual clock:
    ///
    /// ```
    /// use ratomic::{Clock, ManualClock, TokenBucket};
    /// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
    /// #     fn clone(_: *const ()) -> RawWaker { RawWaker::new(std::ptr::null(), &VTABLE) }
    /// #     fn noop(_: *const ()) {}
    /// #     static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, noop);
    /// #     // SAFETY: the vtable's functions do nothing with the null data pointer.
    /// #     let waker = unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) };
    /// #     let mut f = std::pin::pin!(f);
    /// #     loop {
    /// #         if let Poll::Ready(v) = f.as_mut().poll(&mut Context::from_waker(&waker)) { return v; }
    /// #     }
    /// # }
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder("2/s").clock(clock.clone()).build()?;
    /// let _ = limiter.allow_n("user:1", 2)?;
    /// let sleep = |d| {
    ///     clock.advance(d);
    ///     std::future::ready(())
    /// };
    /// let d = block_on(limiter.acquire_with("user:1", 1, None, sleep))?;
    /// assert!(d.allowed);
    /// assert_eq!(clock.now(), 500_000_000);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub async fn acquire_with<Q, F, Fut>(
        &self,
        key: &Q,
        cost: u64,
        timeout: Option<Duration>,
        sleep: F,
    ) -> Result<Decision>
    where
        Q: ?Sized + AsKey<K>,
        F: FnMut(Duration) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        base::acquire_async(timeout, || self.allow_n(key, cost), answer, sleep).await
    }

    /// Checks a call's arguments (the cost against the limit, the key's
    /// length) as `allow_n` would, changing nothing.
    ///
    /// ```
    /// use ratomic::{Error, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder("3/s").max_key_len(4).build()?;
    /// assert!(limiter.check("k", 3).is_ok());
    /// assert_eq!(limiter.check("k", 4), Err(Error::CostExceedsLimit { cost: 4, limit: 3 }));
    /// assert_eq!(limiter.check("long key", 1), Err(Error::KeyTooLong { len: 8, max: 4 }));
    /// assert!(limiter.is_empty(), "check changes nothing");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn check<Q: ?Sized + AsKey<K>>(&self, key: &Q, cost: u64) -> Result<()> {
        self.base.rules.check_cost(cost)?;
        self.base.probe(key.as_key()).map(|_| ())
    }

    /// Keys currently held. A key whose bucket has become full again may be
    /// counted until the store next drops such keys (when a table would grow,
    /// or on [`gc`](Self::gc)); call `gc` first for an exact count of keys
    /// that are being limited.
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("3/s").build()?;
    /// let _ = limiter.allow("a")?;
    /// let _ = limiter.allow("b")?;
    /// assert_eq!(limiter.len(), 2);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.base.len()
    }

    /// Whether no key is held.
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("3/s").build()?;
    /// assert!(limiter.is_empty());
    /// let _ = limiter.allow("a")?;
    /// assert!(!limiter.is_empty());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops every key whose bucket is full (losslessly: no later decision
    /// changes) and shrinks sparse tables. Returns how many keys were dropped.
    /// Calling it is optional: inside calls, when the store grows, a key is
    /// dropped once it has been full for its limit's window.
    ///
    /// ```
    /// use ratomic::{ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder("3/s").clock(clock.clone()).build()?;
    /// let _ = limiter.allow("a")?;
    /// clock.advance(std::time::Duration::from_secs(1)); // "a" is full again
    /// assert_eq!(limiter.gc()?, 1);
    /// assert!(limiter.is_empty());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn gc(&self) -> Result<usize> {
        self.gc_at(self.now())
    }

    /// [`gc`](Self::gc) at time `now`.
    ///
    /// ```
    /// use ratomic::{ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = TokenBucket::builder("3/s").clock(clock.clone()).build()?;
    /// let _ = limiter.allow("a")?;
    /// assert_eq!(limiter.gc_at(limiter.now())?, 0, "still refilling");
    /// assert_eq!(limiter.gc_at(limiter.now() + 1_000_000_000)?, 1);
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

    /// Bytes of memory the limiter's store holds: its tables, the keys
    /// longer than 23 bytes (stored outside the tables) and the summaries of
    /// evicted keys. Bounded by the store's [`Options`].
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("3/s").build()?;
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
}

/// `allow` and `peek` for byte keys, which may be refused for their length.
impl<A: Algorithm, C: Clock> Keyed<A, [u8], C> {
    /// Takes one token from `key`'s bucket if it has one.
    ///
    /// Errors (and changes nothing) only if the key is longer than
    /// [`max_key_len`](Self::max_key_len) or the clock reads past
    /// [`MAX_TIME`](crate::MAX_TIME).
    ///
    /// ```
    /// use ratomic::{Error, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder("1/s").max_key_len(8).build()?;
    /// assert!(limiter.allow("user:42")?.allowed);
    /// assert!(!limiter.allow("user:42")?.allowed);
    /// assert_eq!(limiter.allow("user:123456").unwrap_err(), Error::KeyTooLong { len: 11, max: 8 });
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q) -> Result<Decision> {
        self.allow_at(key, 1, self.now())
    }

    /// What `allow` would answer for one token, changing nothing: like every
    /// decision, its `remaining` is what would be left *after* that token.
    /// `peek_n(key, 0)` reports the key's state as it is. Errors as `allow`.
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("3/s").build()?;
    /// assert_eq!(limiter.peek("k")?.remaining, 2);
    /// assert_eq!(limiter.peek("k")?.remaining, 2, "peek takes nothing");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn peek<Q: ?Sized + AsKey<[u8]>>(&self, key: &Q) -> Result<Decision> {
        self.peek_at(key, 1, self.now())
    }
}

/// `allow` and `peek` for keys no limiter can refuse (`u64`, IP addresses):
/// a plain [`Decision`], nothing to handle.
impl<A: Algorithm, K: BoundedKey, C: Clock> Keyed<A, K, C> {
    /// Takes one token from `key`'s bucket if it has one. Cannot fail: the
    /// key has no length to check and one token never exceeds the limit.
    ///
    /// On a [shared file](crate::Options::shared_file) whose file system
    /// is full, a key new to the file cannot be remembered: the call denies
    /// it (nothing is recorded, `retry_after` is the limit's window), where
    /// [`allow_at`](Self::allow_at) returns [`Error::SharedFile`].
    ///
    /// # Panics
    ///
    /// If the limiter's clock reads past [`MAX_TIME`](crate::MAX_TIME)
    /// (about 146 years), which breaks the [`Clock`] contract:
    /// [`MonotonicClock`] never does; a [`ManualClock`](crate::ManualClock)
    /// does only if set past it. To handle such a clock as an error, call
    /// [`allow_at`](Self::allow_at) with its reading.
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("2/s").keys::<u64>().build()?;
    /// assert!(limiter.allow(&42).allowed);
    /// assert!(limiter.allow(&42).allowed);
    /// assert!(!limiter.allow(&42).allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn allow(&self, key: &K) -> Decision {
        // The checked path, whose only error left here is the clock's: a
        // separate unchecked path measured 10% slower on a hot key (29.6
        // against 33 ns), the optimiser laying it out less well.
        self.allow_at(key, 1, self.now()).unwrap_or_else(|e| self.undecided(e))
    }

    /// What `allow` would answer for one token, changing nothing: its
    /// `remaining` is what would be left *after* that token. Cannot fail;
    /// denies as `allow` on a full shared file, and panics as `allow` on a
    /// clock past [`MAX_TIME`](crate::MAX_TIME).
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("3/s").keys::<u64>().build()?;
    /// assert_eq!(limiter.peek(&7).remaining, 2);
    /// assert_eq!(limiter.allow(&7).remaining, 2);
    /// assert_eq!(limiter.peek(&7).remaining, 1);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    #[inline]
    pub fn peek(&self, key: &K) -> Decision {
        self.peek_at(key, 1, self.now()).unwrap_or_else(|e| self.undecided(e))
    }

    /// The answer of an infallible call that met an error: a denial if the
    /// shared file cannot remember the key (fail closed: nothing is
    /// recorded, and nothing over-granted), else a broken contract.
    #[cold]
    #[inline(never)]
    fn undecided(&self, e: Error) -> Decision {
        match e {
            Error::SharedFile { .. } => {
                let window = on_algorithm!(self, alg => alg.window());
                Decision { allowed: false, remaining: 0, limit: self.limit(), retry_after: window, reset_after: window }
            }
            e => clock_broke_its_contract(e),
        }
    }
}

/// The one error an infallible call can meet: a clock reading past
/// [`MAX_TIME`](crate::MAX_TIME) (a `u64` or IP key is never refused and
/// one token never exceeds a limit, every limit being at least 1).
#[cold]
#[inline(never)]
pub(crate) fn clock_broke_its_contract(e: Error) -> ! {
    match e {
        Error::InvalidArgument { name: "now", .. } => panic!(
            "the limiter's clock read past MAX_TIME, which a Clock must never do ({e}); \
             call allow_at or peek_at to get this as an error"
        ),
        // Not reachable by the argument above; if it is, say what happened
        // rather than blame the clock.
        _ => panic!("a call that cannot fail failed, a bug in ratomic: {e}"),
    }
}

/// `(allowed, retry_after)` of a decision, for the acquire loops.
fn answer(d: &Decision) -> (bool, Duration) {
    (d.allowed, d.retry_after)
}

impl<A: Algorithm, K: ?Sized + Key, C: Clock> Keyed<A, K, C> {
    /// A call's charge for a [`Stack`](crate::Stack): the decision and, if
    /// it wrote, the receipt for taking it back.
    pub(crate) fn charge_at(&self, key: &K, cost: u64, now: u64) -> Result<(Decision, Option<(Charge, Mark)>)> {
        on_algorithm!(self, alg => {
            alg.check_cost(cost)?;
            let (verdict, charge) = self.base.update::<true, _>(key, now, |cells| {
                let (verdict, charge) = charge_in(alg, cells, 0, now, cost)?;
                Ok((verdict, charge.map(|c| (c, cells.mark()))))
            })?;
            Ok((verdict.decision(), charge))
        })
    }

    /// Takes back a charge made by [`charge_at`](Self::charge_at), exactly
    /// (see [`restore`](crate::algorithm::restore)); a key forgotten since
    /// keeps nothing to take back, and one refunded or reset since keeps the
    /// charge (see `store/cells.rs`'s `Mark`).
    pub(crate) fn give_back_at(&self, key: &K, (charge, mark): (Charge, Mark)) {
        // The key was probed when charged, so it cannot be refused now;
        // `now` only matters to an insert, and there is none.
        let _ = self.base.credit(key, 0, Credit::GiveBack(mark), |cells| {
            cells.restore(0, charge);
            Ok(())
        });
    }
}

/// The limiter's name, its rule with units and the keys it holds:
/// `TokenBucket { rule: token bucket 10 per 1s, keys: 3 }`.
///
/// ```
/// use ratomic::{FixedWindow, Keyed, MonotonicClock, Options, Rule, TokenBucket};
///
/// let limiter = TokenBucket::builder("10/s").build()?;
/// limiter.allow("a")?;
/// assert_eq!(format!("{limiter:?}"), "TokenBucket { rule: token bucket 10 per 1s, keys: 1 }");
/// let limiter = FixedWindow::builder("5 per minute").keys::<u64>().build()?;
/// assert_eq!(format!("{limiter:?}"), "FixedWindow { rule: fixed window 5 per 1m, keys: 0 }");
/// let limiter: Keyed<Rule> = Keyed::with_algorithm(Rule::parse("100/h")?, MonotonicClock::new(), Options::default())?;
/// assert_eq!(format!("{limiter:?}"), "Keyed { rule: token bucket 100 per 1h, keys: 0 }");
/// # Ok::<(), ratomic::Error>(())
/// ```
impl<A: Algorithm, K: ?Sized + Key, C: Clock> fmt::Debug for Keyed<A, K, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(limiter_name::<A>())
            .field("rule", &format_args!("{}", self.base.rules))
            .field("keys", &self.len())
            .finish()
    }
}

/// The name a user wrote for a keyed limiter of algorithm `A`.
fn limiter_name<A: Algorithm>() -> &'static str {
    use std::any::TypeId;
    let t = TypeId::of::<A>();
    if t == TypeId::of::<crate::Gcra>() {
        "TokenBucket"
    } else if t == TypeId::of::<crate::FixedWindowCounter>() {
        "FixedWindow"
    } else if t == TypeId::of::<crate::SlidingWindowCounter>() {
        "SlidingWindow"
    } else {
        "Keyed"
    }
}

impl<A: Algorithm, K: ?Sized + Key, C: Clock> Builder<A, K, C> {
    /// The limiter; errors if what it was started from is invalid (a rate
    /// string that does not parse, a window limit too large to pack) or an
    /// option is out of range.
    ///
    /// ```
    /// use ratomic::{Error, TokenBucket};
    ///
    /// assert!(TokenBucket::builder("3/s").max_keys(10).build().is_ok());
    /// let e = TokenBucket::builder("3/s").max_keys(0).build().unwrap_err();
    /// assert!(matches!(e, Error::InvalidArgument { name: "max_keys", .. }));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn build(self) -> Result<Keyed<A, K, C>> {
        Keyed::with_algorithm(self.what?, self.clock, self.options)
    }
}
