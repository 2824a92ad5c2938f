//! What a store is told: its bounds, shards and eviction policy.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// What a keyed limiter does with a key it must evict to respect
/// [`Options::max_keys`] (or [`Options::max_key_bytes`]) before the key's
/// bucket is full again.
///
/// No policy can keep memory bounded, never grant more than remembering
/// every key would, and keep one client's churn from denying another, all
/// at once, under unbounded churn. This is the trade, made explicit; the
/// measurements behind it (an attacker's single-use keys, and honest churn
/// beyond `max_keys`) are in `BENCHMARKS.md` ("eviction").
///
/// Both policies evict the keys closest to full first, and neither matters
/// to a store that never holds `max_keys` keys that are not full.
///
/// Measured on a simulated clock (`cargo run --release -p ratomic-benches
/// --bin eviction`; `100/h` per key, an attacker sending 3,000 requests a
/// second from new keys, 500 honest users at one request a minute):
///
/// | scenario | policy | honest requests denied | over-granted |
/// |---|---|---|---|
/// | attack, `max_keys` 1,000, 10 min | `Fair` | 0% | 0 |
/// | attack, `max_keys` 1,000, 10 min | `Strict` | 93.3% | 0 |
/// | attack, `max_keys` 10,000, 30 min | `Fair` | 0% | 0 |
/// | attack, `max_keys` 10,000, 30 min | `Strict` | 46.9% | 0 |
/// | attack + 200 users at 18× their rate, `max_keys` 1,000 | `Fair` | 0% | 36,800 extra grants (of 60,000 requests) |
/// | attack + 200 users at 18× their rate, `max_keys` 1,000 | `Strict` | 93.6% | 0 |
/// | 20,000 honest users at half their rate, `max_keys` 10,000 | both | 0% | 0 |
///
/// ```
/// use ratomic::{Eviction, Options};
///
/// assert_eq!(Options::default().eviction, Eviction::Fair);
/// let paid_quota = Options::default().eviction(Eviction::Strict);
/// assert_eq!(paid_quota.eviction, Eviction::Strict);
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Eviction {
    /// The default. An evicted key's state is kept in a bounded array of
    /// per-hash summaries (a quarter as many as `max_keys`), tagged with the
    /// key's 64-bit hash: the key finds its own state when it comes back,
    /// and no other key ever starts from it, so **churn on other keys never
    /// denies a call that would be allowed by itself**.
    ///
    /// The bound on what it can over-grant: a key evicted with `u` tokens
    /// used whose summary is displaced (by a later evicted key further from
    /// full that hashes to the same summary) before it comes back starts as
    /// a full bucket — at most `u` extra tokens, at most one limit's worth,
    /// per eviction of that key. A key is evicted only once its shard holds
    /// `max_keys / shards` keys that are not full and it is among the eighth
    /// closest to full.
    ///
    /// Those evictions can repeat. Under churn of new keys faster than the
    /// store turns over (in `BENCHMARKS.md`, 3,000 new keys a second against
    /// `max_keys` 1,000), a client being limited is evicted between its calls
    /// while its debt is still as small as every new key's, so it keeps
    /// coming back full and escapes its limit; honest clients are never
    /// denied. No bounded memory can remember a recurring key through
    /// unbounded churn: size `max_keys` above the distinct keys you expect
    /// within one refill period, or choose [`Strict`](Self::Strict) where
    /// an over-grant is worse than a denial.
    #[default]
    Fair,
    /// Never grants more than remembering every key would: evicted states
    /// are joined into the summary their key hashes to, and every key new to
    /// the store starts from its summary. The price: sustained churn beyond
    /// `max_keys` (an attacker's single-use keys) drives the summaries
    /// towards empty, and new keys — honest users included — are denied
    /// until they refill. For limits where an over-grant is worse than a
    /// denial (a paid quota, an upstream contract).
    Strict,
}

/// How a keyed limiter stores its keys: the memory bound, the longest key,
/// the number of shards and the eviction policy.
///
/// The memory a limiter holds, [`memory_bytes`](crate::Keyed::memory_bytes),
/// is at most about `2 × max_keys` slots (a slot is 24 bytes of key plus 8
/// per limit for byte keys, 8 plus 8 per limit for `u64` keys), plus
/// `max_key_bytes` of keys longer than 23 bytes, plus, once evictions
/// begin, summaries of 8 bytes plus 8 per limit for up to a quarter of the
/// keys held (at most `max_keys / 4`, rounded up to a power of two per
/// shard). With the defaults and one limit on byte keys: at most 256 MiB of
/// slots (typically 1.3–2 slots per key held), 64 MiB of long keys and
/// 16 MiB of summaries.
///
/// ```
/// use ratomic::{Eviction, Options, Quota, TokenBucket};
///
/// let limiter = TokenBucket::builder(Quota::per_second(10)?)
///     .options(Options::default().max_keys(100_000).max_key_len(64).eviction(Eviction::Strict))
///     .build()?;
/// assert!(limiter.allow(&[b'x'; 65]).is_err()); // too long: an error, no state change
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Options {
    /// Most keys held at once (approximately: enforced per shard, so the true
    /// bound is `max_keys` rounded up to a multiple of the shard count).
    /// Default 4,194,304. In a [shared file](Self::shared_file) it is a
    /// target: inserts racing in several processes can pass the count
    /// together, so the file may hold a few keys more (at most the inserts
    /// in flight, never more than its `2 × max_keys` slots) until the next
    /// inserts evict it back under.
    pub max_keys: usize,
    /// Longest key accepted, in bytes; longer keys are an error. Default 1024.
    pub max_key_len: usize,
    /// Most bytes of keys too long to be stored inline (longer than 23
    /// bytes) held at once, enforced per shard like `max_keys` (each shard
    /// can always hold at least one key of `max_key_len`). Default 64 MiB.
    pub max_key_bytes: usize,
    /// Number of shards (a power of two), or `None` for the default: four
    /// per CPU, at least 64, at most 1024, and fewer when `max_keys` is small
    /// so that each shard can hold at least 64 keys.
    pub shards: Option<usize>,
    /// What happens to keys evicted to respect the bounds; see [`Eviction`].
    pub eviction: Eviction,
    /// Keys to make room for up front (default 0: tables start small and
    /// grow as keys come). A limiter given the number of keys it will hold
    /// places them without growing its tables — growth moves every key
    /// about twice, most of an insert's time while a limiter fills — at the
    /// price of allocating their slots at once (two slots a key, as for the
    /// keys it holds; see [`Options`]) — and a margin for the keys' chance
    /// spread over the shards, so that no shard grows before its share has
    /// come (up to 7·√ of a shard's share more; it shows only when a shard's
    /// share is under about 200 keys). The tables never shrink below it
    /// (`gc` shrinks only what grew beyond). At most [`max_keys`](Self::max_keys);
    /// a [shared file](Self::shared_file) ignores it (its size is fixed by
    /// `max_keys`).
    pub reserve_keys: usize,
    /// A file through which every process of the host that names it shares
    /// the limiter's keys (see [`shared_file`](Self::shared_file)); `None`
    /// (the default) keeps keys in this process.
    pub shared_file: Option<std::path::PathBuf>,
    /// Whether [`max_keys`](Self::max_keys()) was called: a shared file
    /// otherwise holds its own default, 131,072 keys.
    max_keys_given: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_keys: 1 << 22,
            max_key_len: 1024,
            max_key_bytes: 64 << 20,
            shards: None,
            eviction: Eviction::Fair,
            reserve_keys: 0,
            shared_file: None,
            max_keys_given: false,
        }
    }
}

impl Options {
    /// Sets [`max_keys`](Self::max_keys).
    ///
    /// ```
    /// use ratomic::Options;
    ///
    /// assert_eq!(Options::default().max_keys(1_000).max_keys, 1_000);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn max_keys(mut self, n: usize) -> Self {
        self.max_keys = n;
        self.max_keys_given = true;
        self
    }

    /// The keys a shared file holds: [`max_keys`](Self::max_keys) if set
    /// (by the method, or the field to another value than the default),
    /// else the shared file's own default (see `store/shared/mod.rs`).
    #[cfg_attr(not(all(target_os = "linux", not(ratomic_loom))), allow(dead_code))]
    pub(crate) fn max_keys_for_file(&self) -> usize {
        if self.max_keys_given || self.max_keys != Options::default().max_keys {
            self.max_keys
        } else {
            super::shared::DEFAULT_MAX_KEYS
        }
    }

    /// Sets [`max_key_len`](Self::max_key_len).
    ///
    /// ```
    /// use ratomic::Options;
    ///
    /// assert_eq!(Options::default().max_key_len, 1024);
    /// assert_eq!(Options::default().max_key_len(64).max_key_len, 64);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn max_key_len(mut self, n: usize) -> Self {
        self.max_key_len = n;
        self
    }

    /// Sets [`max_key_bytes`](Self::max_key_bytes).
    ///
    /// ```
    /// use ratomic::Options;
    ///
    /// assert_eq!(Options::default().max_key_bytes(1 << 20).max_key_bytes, 1 << 20);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn max_key_bytes(mut self, n: usize) -> Self {
        self.max_key_bytes = n;
        self
    }

    /// Sets [`shards`](Self::shards).
    ///
    /// ```
    /// use ratomic::Options;
    ///
    /// assert_eq!(Options::default().shards, None);
    /// assert_eq!(Options::default().shards(8).shards, Some(8));
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn shards(mut self, n: usize) -> Self {
        self.shards = Some(n);
        self
    }

    /// Shares the limiter's keys with every process of this host that
    /// builds the same limiter on the same file (Linux only): one fixed
    /// table in a memory-mapped file, changed only by atomic
    /// compare-and-swap, usable by the others whatever instruction a process
    /// is killed at. Each process makes the same decisions as one process
    /// holding every key would.
    ///
    /// - **Opening**: the file is created `0600` if missing. A symbolic
    ///   link, a file owned by another user or readable by others, a
    ///   foreign file or one made by another version of ratomic is a clear
    ///   error ([`Error::InvalidArgument`] naming `shared_file`), never a
    ///   silent reinterpretation; the owner is checked before any lock, and
    ///   no step waits longer than 5 s (a process stopped while it opens the
    ///   file is named in the error, with what to do).
    /// - **Changing the limiter**: a file made for another rule, key type,
    ///   `max_keys` or eviction policy (or left half-made, or from before
    ///   the last boot) is made anew for this limiter as soon as no process
    ///   has it open; while one does, building is an error that names both
    ///   limiters and the command that switches now (`rm` the file:
    ///   processes still running keep the old one until they restart).
    /// - **Where**: in a directory only the service's user can write — a
    ///   runtime directory (`$XDG_RUNTIME_DIR/…`, `/run/<service>/…`,
    ///   systemd's `RuntimeDirectory=`) — not a world-writable `/tmp` path,
    ///   on tmpfs (those are), ext4 or xfs: a file system that can reserve
    ///   space (`fallocate`).
    /// - **Size**: a 4 KiB header and a bitmap (a bit per page of slots),
    ///   `2 × max_keys` slots of `16 + 8 × limits` bytes and `max_keys / 4`
    ///   (a power of two) floor cells of `8 × limits` bytes, fixed when the
    ///   file is made. `max_keys` defaults to 131,072 for a shared file (at
    ///   most 6.3 MiB for one limit; set it, and the in-memory default does
    ///   not apply). The file is sparse: it holds the header, bitmap and
    ///   floor, and each page of slots from the first call whose key may
    ///   land there; [`memory_bytes`](crate::Keyed::memory_bytes) reports
    ///   those bytes. On a full file system a call whose key needs a new
    ///   page fails with [`Error::SharedFile`], changing nothing (keys
    ///   already held work on).
    /// - **Time**: every process must read one timeline: the host's
    ///   monotonic clock ([`MonotonicClock`](crate::MonotonicClock), the
    ///   default). A limiter with any other clock is refused; the `*_at`
    ///   methods take their time as given, and are for tests and callers
    ///   holding a reading of that clock.
    /// - **Keys**: stored as 64-bit fingerprints under the file's secret
    ///   key (SipHash-1-3), so `shards` and `max_key_bytes` do not apply.
    ///   Two keys whose fingerprints collide (about one pair in 2^64 / keys²)
    ///   share one state: each gets less than its limit, never more.
    /// - **Eviction**: an insert that finds `max_keys` keys held makes room
    ///   for itself, looking at 512 slots at most: idle keys are forgotten,
    ///   else a key close to idle is evicted. Under [`Eviction::Fair`] an
    ///   evicted key comes back full (the file cannot keep per-key
    ///   summaries: at most one limit's worth of extra grants per
    ///   eviction); under [`Eviction::Strict`] its state is joined into its
    ///   floor cell, so nothing is over-granted and heavy churn may deny new
    ///   keys. Size `max_keys` above the distinct keys you expect within one
    ///   refill period and neither happens.
    /// - **No lock**: calls and maintenance change the table by
    ///   compare-and-swap only. A process killed at any instruction blocks
    ///   nobody; one stopped (SIGSTOP) delays only other inserts of the one
    ///   key it was inserting, by at most 10 ms, and credits (refunds,
    ///   resets) of a key it was crediting, which give up after 100 ms with
    ///   [`Error::SharedFile`].
    /// - **Processes** must share a pid namespace (a dead process is told
    ///   from a live one by its pid).
    ///
    /// ```
    /// use ratomic::{Options, TokenBucket};
    ///
    /// let path = std::env::temp_dir().join(format!("ratomic-doc-options-{}.shm", std::process::id()));
    /// # #[cfg(target_os = "linux")] {
    /// let options = Options::default().max_keys(1_000).shared_file(&path);
    /// let limiter = TokenBucket::builder("10/s").options(options).build()?;
    /// assert!(limiter.allow("k")?.allowed);
    /// # drop(limiter); std::fs::remove_file(&path).unwrap(); }
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn shared_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.shared_file = Some(path.into());
        self
    }

    /// Sets [`reserve_keys`](Self::reserve_keys).
    ///
    /// ```
    /// use ratomic::{Options, TokenBucket};
    ///
    /// assert_eq!(Options::default().reserve_keys, 0);
    /// let options = Options::default().reserve_keys(10_000);
    /// let limiter = TokenBucket::builder("5/s").keys::<u64>().options(options).build()?;
    /// for user in 0..10_000 {
    ///     assert!(limiter.allow(&user).allowed); // no table grows on the way
    /// }
    /// assert!(TokenBucket::builder("5/s").max_keys(100).reserve_keys(101).build().is_err());
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn reserve_keys(mut self, n: usize) -> Self {
        self.reserve_keys = n;
        self
    }

    /// Sets [`eviction`](Self::eviction).
    ///
    /// ```
    /// use ratomic::{Eviction, Options};
    ///
    /// assert_eq!(Options::default().eviction(Eviction::Strict).eviction, Eviction::Strict);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn eviction(mut self, policy: Eviction) -> Self {
        self.eviction = policy;
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.max_keys == 0 {
            return Err(Error::invalid("max_keys", self.max_keys, "must be at least 1"));
        }
        if self.max_key_len == 0 || self.max_key_len > u32::MAX as usize {
            return Err(Error::invalid("max_key_len", self.max_key_len, "must be between 1 and 2^32 − 1"));
        }
        if self.reserve_keys > self.max_keys {
            return Err(Error::invalid(
                "reserve_keys",
                self.reserve_keys,
                format!("must be at most max_keys ({}): raise max_keys, or ask for fewer keys up front", self.max_keys),
            ));
        }
        if let Some(s) = self.shards {
            if !s.is_power_of_two() || s > 1 << 16 {
                return Err(Error::invalid("shards", s, "must be a power of two, at most 65536"));
            }
        }
        Ok(())
    }

    pub(super) fn shard_count(&self) -> usize {
        if let Some(s) = self.shards {
            return s;
        }
        static CPUS: OnceLock<usize> = OnceLock::new();
        let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let mut shards = (cpus * 4).next_power_of_two().clamp(64, 1024);
        while shards > 1 && self.max_keys / shards < 64 {
            shards /= 2;
        }
        shards
    }
}
