//! What every keyed limiter is made of, once: the rule(s), the bounded key
//! store, the clock and the key rules, and the builder that assembles them.
//! [`Keyed`](crate::Keyed) (one rule) and [`Limiter`](crate::Limiter)
//! (several) are thin over it.

use std::marker::PhantomData;
use std::time::Duration;

use crate::clock::{checked, Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::store::key::{AsKey, Key, Probe};
#[cfg(all(target_os = "linux", not(ratomic_loom)))]
use crate::store::SharedStore;
use crate::store::{Cells, Credit, Eviction, Frozen, Options, Retention, Store};

/// Where a limiter's keys live: in this process, or in a file the host's
/// processes share (`Options::shared_file`). One predictable branch per
/// call (measured in `BENCHMARKS.md`, "shared store").
enum Backend<S: crate::store::key::StoredKey> {
    Local(Store<S>),
    #[cfg(all(target_os = "linux", not(ratomic_loom)))]
    Shared(SharedStore),
}

/// Dispatches `$body` on the backend: `$local` binds the in-process store,
/// `$shared` the shared one.
macro_rules! on_store {
    ($self:ident, $st:ident => $local:expr, $sh:ident => $shared:expr) => {
        match &$self.store {
            Backend::Local($st) => $local,
            #[cfg(all(target_os = "linux", not(ratomic_loom)))]
            Backend::Shared($sh) => $shared,
        }
    };
}

/// The rule(s), the store, the clock and the longest key.
pub(crate) struct Base<R, K: ?Sized + Key, C> {
    pub(crate) rules: R,
    store: Backend<K::Stored>,
    pub(crate) clock: C,
    max_key_len: usize,
    _key: PhantomData<fn(&K)>,
}

impl<R: Retention, K: ?Sized + Key, C: Clock> Base<R, K, C> {
    /// A store for `width` state words per key.
    pub(crate) fn new(rules: R, width: usize, clock: C, options: &Options) -> Result<Self> {
        let store = match &options.shared_file {
            None => Backend::Local(Store::new(options, width, &rules)?),
            #[cfg(all(target_os = "linux", not(ratomic_loom)))]
            Some(path) => {
                check_clock_for_file(&clock)?;
                // The key type by name, not only by how it is stored: `u64`
                // and `Ipv4Addr` keys share a storage but not a meaning.
                let key = std::any::type_name::<K>();
                let describe = format!("{}|{key}", rules.describe());
                let label = format!("{}, keys {key}", rules.label());
                Backend::Shared(SharedStore::open::<K::Stored>(path, options, width, &describe, &label, &rules)?)
            }
            #[cfg(not(all(target_os = "linux", not(ratomic_loom))))]
            Some(path) => {
                return Err(crate::error::Error::invalid("shared_file", path.display(), "is supported on Linux only"))
            }
        };
        Ok(Base { rules, store, clock, max_key_len: options.max_key_len, _key: PhantomData })
    }

    /// The longest key accepted.
    #[inline]
    pub(crate) fn max_key_len(&self) -> usize {
        self.max_key_len
    }

    /// The key's hash and prepared form; errors if it is too long.
    /// On a shared file, also reserves the backing store of the key's slots
    /// (an error, changing nothing, if its file system is full): every call
    /// probes its key first, before it changes anything.
    #[inline]
    pub(crate) fn probe<'k>(&self, key: &'k K) -> Result<(u64, Probe<'k, K>)> {
        on_store!(self, st => key.probe(st.hasher(), self.max_key_len), sh => {
            let (hash, probe) = key.probe(sh.hasher(), self.max_key_len)?;
            sh.reserve(hash)?;
            Ok((hash, probe))
        })
    }

    /// Runs `op` on `key`'s state words at `now` (see
    /// [`Store::update`]); errors, changing nothing, on an invalid time or
    /// key.
    /// `MARK`: the store reads the key's credit counter first, for `op` to
    /// give back (see `store/cells.rs`'s `Mark`).
    #[inline]
    pub(crate) fn update<const MARK: bool, T>(
        &self,
        key: &K,
        now: u64,
        op: impl FnMut(&mut Cells<'_>) -> Result<T, Frozen>,
    ) -> Result<T> {
        let now = checked(now)?;
        let (hash, probe) = self.probe(key)?;
        Ok(self.update_probed::<MARK, T>(hash, &probe, now, op))
    }

    /// Checks every request of a batch (`check` its cost, then its key)
    /// before any is decided, and probes its key: the error names the first
    /// invalid request's index, and then nothing is decided. A plain loop:
    /// `collect::<Result<Vec<_>>>()` passed each item through the stack and
    /// read it back wider (stalls seen with `perf annotate`).
    pub(crate) fn prepare<'q, Q, I>(
        &self,
        requests: I,
        check: impl Fn(u64) -> Result<()>,
    ) -> Result<Vec<(u64, Probe<'q, K>, u64)>>
    where
        Q: ?Sized + AsKey<K> + 'q,
        I: IntoIterator<Item = (&'q Q, u64)>,
    {
        let requests = requests.into_iter();
        let mut prepared = Vec::with_capacity(requests.size_hint().0);
        for (index, (key, cost)) in requests.enumerate() {
            match check(cost).and_then(|()| self.probe(key.as_key())) {
                Ok((hash, probe)) => prepared.push((hash, probe, cost)),
                Err(e) => return Err(Error::InvalidRequest { index, error: Box::new(e) }),
            }
        }
        Ok(prepared)
    }

    /// Runs `f`, a batch of calls, with this thread pinned once: each call's
    /// own pin is then nested, a count rather than a store to the thread's
    /// epoch word (`rounds many64-100k`: a batch of 64 went from 0.94–0.98
    /// to 0.88–0.90 of 64 single calls when a first pin was a fenced store).
    /// Memory the batch's calls retire waits for the batch's end, no longer.
    #[inline]
    pub(crate) fn batch<T>(&self, f: impl FnOnce() -> T) -> T {
        let _pinned = crate::store::epoch::pin();
        f()
    }

    /// [`update`](Self::update) for a key already probed, at a time
    /// already checked.
    #[inline]
    pub(crate) fn update_probed<const MARK: bool, T>(
        &self,
        hash: u64,
        probe: &Probe<'_, K>,
        now: u64,
        op: impl FnMut(&mut Cells<'_>) -> Result<T, Frozen>,
    ) -> T {
        on_store!(self, st => st.update::<MARK, T>(hash, probe, now, &self.rules, op),
            sh => sh.update::<MARK, T>(hash, now, &self.rules, op))
    }

    /// Runs an operation that credits `key` (a refund, a give-back) on its
    /// state words at `now`, with the key's slot locked (see
    /// [`Store::update_locked`]). A key the store does not hold is inserted
    /// with what `op` changed for a refund, and left alone (`None`) for a
    /// give-back.
    pub(crate) fn credit<T>(
        &self,
        key: &K,
        now: u64,
        credit: Credit,
        op: impl FnMut(&mut Cells<'_>) -> Result<T, Frozen>,
    ) -> Result<Option<T>> {
        let now = checked(now)?;
        let (hash, probe) = self.probe(key)?;
        on_store!(self, st => Ok(st.update_locked(hash, &probe, now, &self.rules, credit, op)),
            sh => sh.update_locked(hash, now, &self.rules, credit, op))
    }

    /// Forgets `key`: it is full again.
    pub(crate) fn reset_at(&self, key: &K, now: u64) -> Result<()> {
        let now = checked(now)?;
        let (hash, probe) = self.probe(key)?;
        on_store!(self, st => {
            st.reset(hash, &probe, now, &self.rules);
            Ok(())
        }, sh => sh.reset(hash, now, &self.rules))
    }

    /// Drops every key that carries no information at `now`.
    pub(crate) fn gc_at(&self, now: u64) -> Result<usize> {
        let now = checked(now)?;
        Ok(on_store!(self, st => st.gc(now, &self.rules), sh => sh.gc(now, &self.rules)))
    }

    pub(crate) fn len(&self) -> usize {
        on_store!(self, st => st.len(), sh => sh.len())
    }

    /// Migrates every shard now (see [`Store::force_migration`]).
    pub(crate) fn force_migration_at(&self, now: u64) -> Result<()> {
        let now = checked(now)?;
        // A shared table never migrates.
        on_store!(self, st => st.force_migration(now, &self.rules), _sh => ());
        Ok(())
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        on_store!(self, st => st.memory_bytes(), sh => sh.memory_bytes())
    }

    /// Fingerprints of the keys a shared store holds (`None` in process):
    /// for tests that no key is held twice.
    #[cfg(all(target_os = "linux", not(ratomic_loom)))]
    pub(crate) fn shared_fingerprints(&self) -> Option<Vec<u64>> {
        on_store!(self, _st => None, sh => Some(sh.fingerprints()))
    }
}

/// A shared file's processes must read one timeline: the host's
/// `CLOCK_MONOTONIC`, which [`MonotonicClock`] reads (its id,
/// [`ClockId::MONOTONIC`](crate::ClockId::MONOTONIC), is the only one that
/// promises it). Any other clock — a [`ManualClock`](crate::ManualClock), a
/// face's callable — is refused: its readings mean nothing to the other
/// processes, and a reading ahead of theirs would lock keys for all of them.
#[cfg(all(target_os = "linux", not(ratomic_loom)))]
fn check_clock_for_file<C: Clock>(clock: &C) -> Result<()> {
    if clock.id() == crate::ClockId::MONOTONIC {
        return Ok(());
    }
    Err(Error::invalid(
        "clock",
        "a clock of its own",
        "a limiter on a shared_file must read the host's monotonic clock (the default), the one timeline every \
         process sharing the file reads; build it without a clock (calls that take an explicit time, the `*_at` \
         methods, remain for tests and must be given readings of that clock)",
    ))
}

/// Waits out denials: calls `attempt` until it allows, sleeping with `sleep`
/// through each `retry_after`, and returns the allowing answer — or, once the
/// next wait would take the total past `timeout`, the denial, without
/// waiting (a denial is a value). `answer` reads `(allowed, retry_after)`.
pub(crate) fn acquire<D>(
    timeout: Option<Duration>,
    mut attempt: impl FnMut() -> Result<D>,
    answer: impl Fn(&D) -> (bool, Duration),
    mut sleep: impl FnMut(Duration),
) -> Result<D> {
    let mut waited = Duration::ZERO;
    loop {
        let d = attempt()?;
        let (allowed, wait) = answer(&d);
        if allowed || timeout.is_some_and(|t| waited + wait > t) {
            return Ok(d);
        }
        sleep(wait);
        waited += wait;
    }
}

/// [`acquire`] for any async runtime: `sleep(d)` returns a future that
/// completes after `d`.
pub(crate) async fn acquire_async<D, F, Fut>(
    timeout: Option<Duration>,
    mut attempt: impl FnMut() -> Result<D>,
    answer: impl Fn(&D) -> (bool, Duration),
    mut sleep: F,
) -> Result<D>
where
    F: FnMut(Duration) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut waited = Duration::ZERO;
    loop {
        let d = attempt()?;
        let (allowed, wait) = answer(&d);
        if allowed || timeout.is_some_and(|t| waited + wait > t) {
            return Ok(d);
        }
        sleep(wait).await;
        waited += wait;
    }
}

/// Builds a keyed limiter: what it enforces (`T`: an algorithm for a
/// [`Keyed`](crate::Keyed) limiter, named limits for a
/// [`Limiter`](crate::Limiter)), the key type, the clock and the store
/// [`Options`]. Start from [`TokenBucket::builder`](crate::TokenBucket::builder),
/// [`FixedWindow::builder`](crate::FixedWindow::builder), … or
/// [`Limiter::builder`](crate::Limiter::builder).
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
/// assert!(limiter.allow(&42).allowed); // a u64 key cannot be refused: no `?`
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "call .build() to get the limiter"]
pub struct Builder<T, K: ?Sized = [u8], C = MonotonicClock> {
    /// What the limiter will enforce, or why it cannot: a builder never
    /// fails, so that every check (the rate's, the options') comes out of
    /// one place, `build()`.
    pub(crate) what: Result<T>,
    pub(crate) clock: C,
    pub(crate) options: Options,
    _key: PhantomData<fn(&K)>,
}

impl<T> Builder<T> {
    pub(crate) fn new(what: Result<T>) -> Self {
        Builder { what, clock: MonotonicClock::new(), options: Options::default(), _key: PhantomData }
    }
}

impl<T, K: ?Sized + Key, C: Clock> Builder<T, K, C> {
    /// Index keys by `K2` instead (`[u8]` or `u64`).
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use ratomic::TokenBucket;
    ///
    /// let by_id = TokenBucket::builder("5/s").keys::<u64>().build()?;
    /// assert!(by_id.allow(&7).allowed);
    /// let by_ip = TokenBucket::builder("5/s").keys::<IpAddr>().build()?;
    /// assert!(by_ip.allow(&"192.0.2.1".parse().unwrap()).allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn keys<K2: ?Sized + Key>(self) -> Builder<T, K2, C> {
        Builder { what: self.what, clock: self.clock, options: self.options, _key: PhantomData }
    }

    /// Use `clock` instead of the default [`MonotonicClock`].
    ///
    /// ```
    /// use ratomic::{ManualClock, TokenBucket};
    ///
    /// let clock = ManualClock::starting_at(1_000);
    /// let limiter = TokenBucket::builder("5/s").clock(clock.clone()).build()?;
    /// assert_eq!(limiter.now(), 1_000);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn clock<C2: Clock>(self, clock: C2) -> Builder<T, K, C2> {
        Builder { what: self.what, clock, options: self.options, _key: PhantomData }
    }

    /// Replace all store options at once.
    ///
    /// ```
    /// use ratomic::{Options, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder("5/s").options(Options::default().max_key_len(32)).build()?;
    /// assert_eq!(limiter.max_key_len(), 32);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// See [`Options::max_keys`].
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// assert!(TokenBucket::builder("5/s").max_keys(100_000).build().is_ok());
    /// assert!(TokenBucket::builder("5/s").max_keys(0).build().is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn max_keys(mut self, n: usize) -> Self {
        self.options.max_keys = n;
        self
    }

    /// See [`Options::reserve_keys`].
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("5/s").keys::<u64>().reserve_keys(50_000).build()?;
    /// assert!(limiter.allow(&7).allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn reserve_keys(mut self, n: usize) -> Self {
        self.options.reserve_keys = n;
        self
    }

    /// See [`Options::max_key_len`].
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("5/s").max_key_len(3).build()?;
    /// assert!(limiter.allow("abc").is_ok());
    /// assert!(limiter.allow("abcd").is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn max_key_len(mut self, n: usize) -> Self {
        self.options.max_key_len = n;
        self
    }

    /// See [`Options::max_key_bytes`].
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let limiter = TokenBucket::builder("5/s").max_key_bytes(1 << 20).build()?;
    /// assert!(limiter.allow(&"x".repeat(100))?.allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn max_key_bytes(mut self, n: usize) -> Self {
        self.options.max_key_bytes = n;
        self
    }

    /// See [`Options::shards`].
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// assert!(TokenBucket::builder("5/s").shards(16).build().is_ok());
    /// assert!(TokenBucket::builder("5/s").shards(3).build().is_err(), "a power of two");
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn shards(mut self, n: usize) -> Self {
        self.options.shards = Some(n);
        self
    }

    /// Shares the limiter's keys with every process of this host that
    /// builds the same limiter on the file at `path`: see
    /// [`Options::shared_file`].
    ///
    /// ```
    /// use ratomic::TokenBucket;
    ///
    /// let path = std::env::temp_dir().join(format!("ratomic-doc-builder-{}.shm", std::process::id()));
    /// # #[cfg(target_os = "linux")] {
    /// let a = TokenBucket::builder("1/min").max_keys(1_000).shared_file(&path).build()?;
    /// let b = TokenBucket::builder("1/min").max_keys(1_000).shared_file(&path).build()?; // another process, say
    /// assert!(a.allow("k")?.allowed);
    /// assert!(!b.allow("k")?.allowed, "one bucket in the file");
    /// # drop((a, b)); std::fs::remove_file(&path).unwrap(); }
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn shared_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.options.shared_file = Some(path.into());
        self
    }

    /// See [`Options::eviction`] and [`Eviction`].
    ///
    /// ```
    /// use ratomic::{Eviction, TokenBucket};
    ///
    /// let limiter = TokenBucket::builder("5/s").max_keys(10_000).eviction(Eviction::Strict).build()?;
    /// assert!(limiter.allow("k")?.allowed);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn eviction(mut self, policy: Eviction) -> Self {
        self.options.eviction = policy;
        self
    }
}
