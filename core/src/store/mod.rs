//! The keyed store: a map from key to that key's state words, sharded by
//! hash, bounded in keys and in bytes, and forgetting full buckets without
//! changing any decision.
//!
//! # Design: no locks on the way to a key's state
//!
//! Each shard is an open-addressing table (`table.rs`) of atomic words; a
//! slot's first state word is also its control word, so a call on a stored
//! key — the hot path — does the probe's loads, the algorithm's CAS on the
//! state and one re-read of the key (the slot may have been reused
//! meanwhile: the call then runs again, and what it changed stays, see
//! `cells.rs`). It takes no lock.
//!
//! Inserts, and everything that frees or fills slots — evicting and
//! forgetting keys, migrating to a new table — are done under a per-shard
//! insert lock ([`ShardLock`], issue 39). An insert whose lock-free probe
//! found its key absent probes again under the lock, where that answer is
//! final (nobody else places keys), and writes the key and publishes its
//! state with plain stores: no claim, no check for a racing copy (it also checks that the shard forgot no key
//! since it computed the states from what it remembers: see
//! `Store::insert`). An insert that takes its table past 3/4 grows it
//! before letting go of the lock: it forgets the idle keys in place, sizes
//! the new table for the keys left, sets the old table's `next` and moves
//! each live slot (locked, its states captured, copied into the new table,
//! marked MOVED) while calls go on — a call that meets its key being moved
//! waits for that one slot, then follows `next` — and then makes the new
//! table the shard's with one pointer store. Each key moves once per
//! growth. Old tables and long keys' heap blocks are freed through an
//! epoch (`epoch.rs`: a call pins its thread with a store, not a locked
//! instruction), once no call that might read them is still running.
//!
//! A thread stopped while it holds the lock stops the shard's inserts,
//! evictions and growth, never a call on a key the shard holds (but the one
//! whose slot it may hold at that moment): see [`ShardLock`].
//!
//! Operations that *credit* a key (refunds, give-backs, resets) lock its
//! slot instead (`update_locked`): a credit must not land on a slot reused
//! by another key. So does a multi-limit call that must give back the
//! charges it made before a later limit denied: it asks for it
//! (`Cells::give_back`), and the store does it once the call's run is over,
//! with the slot locked, if the slot held the key throughout and no refund
//! or reset of the key may have landed since its first charge: each of
//! those (and each eviction of a key that is not idle) bumps a per-shard
//! counter (striped by hash, on a line of its own) while it holds the
//! slot, and the store read that counter before the call ran
//! (`cells::Mark`). Every protocol here is model-checked with loom
//! (`core/tests/loom.rs`).
//!
//! The hasher is foldhash with a per-process random seed (plus a per-store
//! one): fast on short keys, and attackers who choose keys cannot predict
//! which keys collide, so they cannot build long probe runs.
//!
//! # Forgetting full buckets, losslessly
//!
//! A key whose bucket is full again carries no information. When a
//! table would grow past its load factor it is rebuilt without the keys
//! that have been full for at least their limit's window — the time an
//! empty bucket takes to fill, or a window's length; the longest of a
//! multi-limit key's (the migration forgets them on its way, and sizes the
//! new table for the keys that remain). `gc` forgets every full key at once,
//! on demand. No background thread, no timer: the work is amortised over
//! inserts (a rebuild leaves at least a quarter of the table free, so it
//! pays for itself over the inserts that fill it).
//!
//! Why wait one window: most clients are under their limit, so their bucket
//! is full again between their calls. Forgotten at the first growth, each of
//! them came back as an insert, and the table, rebuilt without them, never
//! grew to hold them: 100k such keys cost 144 ns a call instead of 35
//! (`rounds keys100k-returning`). A key idle longer than its window — the
//! TTL a Redis-backed limiter gives it — is gone at the next growth, and
//! `max_keys` and `max_key_bytes` evict full keys first, whatever their age.
//!
//! A full state says nothing about a call stamped at or after the moment it
//! was forgotten, so forgetting it changes no such decision. A call stamped
//! *earlier* (a thread that read the clock before a concurrent `gc`, or an
//! `*_at` caller going back in time) answers from the shard's summary
//! (`summary.rs`): its own forgotten state when the shard still has it,
//! otherwise the join of every full state the shard forgot — never more
//! generous than the forgotten state, possibly less.
//!
//! # `max_keys`, `max_key_bytes` and [`Eviction`]
//!
//! Each shard holds at most `ceil(max_keys / shards)` keys, and at most
//! `max_key_bytes / shards` bytes of keys too long to store inline (longer
//! than 23 bytes; at least one `max_key_len` key always fits). When a shard
//! is full of keys that are not yet full buckets, it evicts the eighth of
//! them that are closest to full (the ones whose loss matters least; when
//! the byte budget binds, long keys go first in the same order), so it never
//! blocks, never allocates beyond the bound and never panics. What an
//! evicted key answers when it comes back is the [`Eviction`] policy:
//! [`Eviction::Fair`] (the default) keeps each evicted key's own state in a
//! bounded array of per-hash summaries, so churn on other keys never denies
//! a key it does not own, at the price of a bounded over-grant for a key
//! whose summary was displaced; [`Eviction::Strict`] never grants more than
//! remembering every key would, at the price of letting heavy churn deny
//! new keys. Measured under attack and under honest churn in `BENCHMARKS.md`
//! ("eviction").

mod cells;
pub(crate) mod epoch;
pub(crate) mod key;
pub(crate) mod shared;
mod summary;
mod table;

use std::hash::BuildHasher;
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::store::key::StoredKey;
use crossbeam_utils::CachePadded;

use crate::sync::{AtomicBool, AtomicU64, Backoff, Counter, Ordering};
pub(crate) use cells::{Cells, Charge, Conflict, Frozen, Mark};
#[cfg(all(target_os = "linux", not(ratomic_loom)))]
pub(crate) use shared::SharedStore;
use summary::Summary;
use table::{Find, Table, DEAD, EMPTY, FIRST_MARKER, LOCKED, MOVED};

/// Most state words one key can have (the most limits one `Limiter` holds).
pub(crate) const MAX_WIDTH: usize = 16;

/// The home slot of `u64` key `key` in a fresh store's first table (of
/// `MIN_CAPACITY` slots), hashed as the store hashes it under loom (with
/// the fixed seed): for models that need two keys on one probe chain
/// (`tests/loom.rs`).
#[cfg(ratomic_loom)]
pub fn first_home_of(key: u64) -> usize {
    use crate::store::key::Key;
    let (hash, _) = key.probe(&Hasher::default(), 0).expect("a u64 key is never refused");
    table::home_slot(hash, MIN_CAPACITY)
}

/// The home slot of byte key `key` in a fresh store's first table, as
/// [`first_home_of`] for `u64` keys.
#[cfg(ratomic_loom)]
pub fn first_home_of_bytes(key: &[u8]) -> usize {
    use crate::store::key::Key;
    let (hash, _) = key.probe(&Hasher::default(), usize::MAX).expect("no length limit");
    table::home_slot(hash, MIN_CAPACITY)
}

/// A table is rebuilt before its load would exceed 3/4...
const MAX_LOAD: (usize, usize) = (3, 4);
/// ...to a load of 1/2, so it grows by 1.5× when nothing can be dropped and a
/// full table holds between 1/2 and 3/4 of its slots (memory per key within
/// 4/3 and 2 slots). A rebuild for room keeps at least the table's capacity
/// (its load may then fall below 1/2 until keys return); `gc` rebuilds to 1/2.
const TARGET_LOAD: (usize, usize) = (1, 2);
const MIN_CAPACITY: usize = 8;

/// `d` in nanoseconds, saturating.
pub(crate) fn nanos_of(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// How a store decides what it may forget: provided by the algorithm(s)
/// whose state the store holds.
pub(crate) trait Retention {
    /// State words of a key never seen.
    fn pristine(&self, out: &mut [u64]);
    /// Nanoseconds until these states carry no information; 0 = droppable.
    /// Once droppable, states stay droppable as time goes on.
    fn idle_after(&self, states: &[u64], now: u64) -> u64;
    /// How long a key stays in the store once its states are droppable,
    /// when the store grows: the key's window, ns (see
    /// [`Algorithm::window`](crate::Algorithm::window); the longest, for
    /// several limits). `gc` and the memory bounds do not wait for it.
    fn linger(&self) -> u64;
    /// The join of two states of word `i` (that word's limit's `join`).
    fn join_word(&self, i: usize, a: u64, b: u64) -> u64;
    /// `floor := join(floor, states)`, word by word.
    fn join_into(&self, floor: &mut [u64], states: &[u64]) {
        for (i, (f, &s)) in floor.iter_mut().zip(states).enumerate() {
            *f = self.join_word(i, *f, s);
        }
    }
    /// What is enforced, the same in every process that builds the same
    /// limiter (a shared file's header keeps its fingerprint).
    #[cfg_attr(not(all(target_os = "linux", not(ratomic_loom))), allow(dead_code))]
    fn describe(&self) -> String;
    /// [`describe`](Self::describe) for people (a shared file's header
    /// keeps it, for the error of a process that builds another limiter).
    #[cfg_attr(not(all(target_os = "linux", not(ratomic_loom))), allow(dead_code))]
    fn label(&self) -> String {
        self.describe()
    }
}

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
            shared::DEFAULT_MAX_KEYS
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
        if let Some(s) = self.shards {
            if !s.is_power_of_two() || s > 1 << 16 {
                return Err(Error::invalid("shards", s, "must be a power of two, at most 65536"));
            }
        }
        Ok(())
    }

    fn shard_count(&self) -> usize {
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

/// Per-process random seeds in production. loom needs every execution of a
/// model to make the same choices, so under loom the seed is fixed.
#[cfg(not(ratomic_loom))]
type Hasher = foldhash::fast::RandomState;
#[cfg(ratomic_loom)]
type Hasher = foldhash::fast::FixedState;

struct Shard<S: StoredKey> {
    table: epoch::Atomic<Table<S>>,
    /// What the shard remembers of keys it no longer holds.
    summary: Summary,
    /// Keys held (published slots).
    live: Counter,
    /// Bytes of keys stored outside their slots.
    key_bytes: Counter,
    /// The shard's insert lock: held to place a key, to evict or forget
    /// keys, and to migrate. Its holder is the summary's single writer.
    /// Lookups of stored keys never take it (see [`ShardLock`]).
    lock: AtomicBool,
    /// The credit counters of the shard's keys, by stripe (see [`Mark`]):
    /// bumped by every refund and reset, on a line of their own so they
    /// never disturb a lookup.
    credits: CachePadded<[AtomicU64; CREDIT_STRIPES]>,
}

/// A shard's insert lock, held (a spin on one flag, with [`Backoff`]) to
/// place keys, evict, forget and migrate: never by a lookup of a stored key,
/// nor by a call that changes one (those CAS its states; a credit locks its
/// slot alone).
///
/// A thread stopped while it holds the lock (preempted for long, or
/// SIGSTOPped with the process's other threads running on) stops the
/// shard's inserts, evictions and growth until it runs again; calls on the
/// keys the shard holds go on, a moved key included (migration sets the
/// next table before it moves a key, and copies a key there before it marks
/// its old slot). Only a call on the one key whose slot it holds at that
/// moment waits (`tests/loom.rs`: an inserter stopped for good, at every
/// point of an insert and of a growth).
struct ShardLock<'s>(&'s AtomicBool);

impl<'s> ShardLock<'s> {
    #[inline]
    fn take<S: StoredKey>(shard: &'s Shard<S>) -> Self {
        let mut backoff = Backoff::new();
        while shard.lock.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            backoff.snooze();
        }
        ShardLock(&shard.lock)
    }

    /// Lets go of the lock (as dropping it does).
    #[inline]
    fn release(self) {}

    /// (Models only) the holder stopped for good: the lock stays taken.
    #[cfg_attr(not(ratomic_loom), allow(dead_code))]
    fn abandon(self) {
        std::mem::forget(self);
    }
}

impl Drop for ShardLock<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Hooks for the loom models of a thread that stops for good in the middle
/// of an insert or a growth, holding the shard's insert lock: `here(at)`
/// is true once, at `at`, in a thread that asked for it, and `stopped()`
/// from then on (the thread then returns at once, touching nothing more).
/// Outside loom both are constant `false`.
pub mod stop {
    /// Where a model's thread stops.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum At {
        /// With the key's words written, before its state is published.
        Insert,
        /// A growth, after its first key moved.
        Migration,
    }

    #[cfg(ratomic_loom)]
    loom::thread_local! {
        static PLAN: std::cell::Cell<(Option<At>, bool)> = std::cell::Cell::new((None, false));
    }

    /// (Models only) this thread stops for good when it reaches `at`.
    #[cfg(ratomic_loom)]
    pub fn at(at: At) {
        PLAN.with(|p| p.set((Some(at), false)));
    }

    #[inline(always)]
    pub(crate) fn here(_at: At) -> bool {
        #[cfg(ratomic_loom)]
        if PLAN.with(|p| p.get().0 == Some(_at)) {
            PLAN.with(|p| p.set((None, true)));
            return true;
        }
        false
    }

    /// Whether this thread stopped (see [`at`]).
    #[inline(always)]
    pub fn stopped() -> bool {
        #[cfg(ratomic_loom)]
        if PLAN.with(|p| p.get().1) {
            return true;
        }
        false
    }
}

/// Credit counters per shard (see [`Mark`]).
const CREDIT_STRIPES: usize = 8;

/// What a credit ([`Store::update_locked`]) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Credit {
    /// A refund: inserts a key the store does not hold, and bumps the key's
    /// credit counter, so no give-back of an earlier charge lands after it
    /// (see [`Mark`]).
    Refund,
    /// A reset (the shared file's; the in-memory store's is
    /// [`Store::reset`]): bumps the counter as a refund does, and inserts
    /// an absent key only if `insert`.
    Reset { insert: bool },
    /// A give-back of a call's own charges, read before the call as this
    /// [`Mark`]: only on a key the store holds, and only if its credit
    /// counter still reads the same.
    GiveBack(Mark),
}

impl Credit {
    /// Whether a key the store does not hold is inserted.
    pub(crate) fn inserts(self) -> bool {
        match self {
            Credit::Refund => true,
            Credit::Reset { insert } => insert,
            Credit::GiveBack(_) => false,
        }
    }

    /// Whether the key's credit counter is bumped.
    pub(crate) fn bumps(self) -> bool {
        !matches!(self, Credit::GiveBack(_))
    }

    /// Whether the credit must not run on a key whose counter reads `now`.
    pub(crate) fn stale(self, now: u64) -> bool {
        matches!(self, Credit::GiveBack(mark) if mark.0 != now)
    }
}

pub(crate) struct Store<S: StoredKey> {
    /// Each shard on cache lines of its own (crossbeam's `CachePadded`: two
    /// lines on x86-64, for the adjacent-line prefetcher), so threads
    /// inserting into different shards do not contend. Lookups of existing
    /// keys touch no shard word but the table pointer, which only changes
    /// when the shard migrates.
    shards: Box<[CachePadded<Shard<S>>]>,
    mask: usize,
    hasher: Hasher,
    width: usize,
    max_per_shard: usize,
    max_bytes_per_shard: usize,
    /// Most summary cells a shard grows to (a power of two).
    max_cells: usize,
}

/// Why an operation went round again.
enum Next {
    /// Done.
    Done,
    /// Look the key up again from the shard's current table.
    Retry,
}

impl<S: StoredKey> Store<S> {
    pub(crate) fn new(options: &Options, width: usize, retention: &impl Retention) -> Result<Self> {
        options.validate()?;
        assert!((1..=MAX_WIDTH).contains(&width));
        // The epoch's one-time set-up (a `membarrier` registration, which
        // can take milliseconds) happens here, not in the first call.
        epoch::init();
        let count = options.shard_count();
        let shards = (0..count)
            .map(|_| {
                CachePadded::new(Shard {
                    table: epoch::Atomic::new(Table::new(MIN_CAPACITY, width)),
                    summary: Summary::new(width, options.eviction, retention),
                    live: Counter::new(0),
                    key_bytes: Counter::new(0),
                    lock: AtomicBool::new(false),
                    credits: CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))),
                })
            })
            .collect();
        let max_per_shard = options.max_keys.div_ceil(count);
        Ok(Store {
            shards,
            mask: count - 1,
            hasher: Hasher::default(),
            width,
            max_per_shard,
            max_bytes_per_shard: (options.max_key_bytes / count).max(options.max_key_len),
            max_cells: (max_per_shard / 4).max(8).next_power_of_two(),
        })
    }

    #[inline]
    pub(crate) fn hasher(&self) -> &impl BuildHasher {
        &self.hasher
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard<S> {
        &self.shards[hash as usize & self.mask]
    }

    /// The credit counter of the keys hashed to `hash` in `shard`.
    #[inline]
    fn credits<'s>(&self, shard: &'s Shard<S>, hash: u64) -> &'s AtomicU64 {
        &shard.credits[(hash >> (64 - CREDIT_STRIPES.trailing_zeros())) as usize]
    }

    /// Runs `op` on the key's state words and returns its result. `op` may
    /// run more than once (only the last result is returned) and must touch
    /// nothing but the words it is given, and what it owns itself (an
    /// `FnMut` may fill its caller's scratch: each run starts it afresh);
    /// what it changed is judged from what it wrote through the words. A run that asks to give its changes back
    /// ([`Cells::give_back`]) has them taken back exactly: at once on a
    /// private copy, and under the slot's lock on a stored key whose slot
    /// held it throughout the run and that no refund or reset may have
    /// reached since (see `cells.rs`).
    ///
    /// `MARK`: read the key's credit counter before `op` runs, for `op` to
    /// give back (in its run, or later as a receipt's [`Cells::mark`]); an
    /// `op` that never gives back skips the read.
    ///
    /// A key that is absent answers from what its shard remembers of it
    /// (see `summary.rs`); it is inserted only if `op` changed that state,
    /// so denials and peeks never allocate.
    #[inline]
    pub(crate) fn update<const MARK: bool, R>(
        &self,
        hash: u64,
        probe: &S::Probe<'_>,
        now: u64,
        retention: &impl Retention,
        mut op: impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
    ) -> R {
        let guard = epoch::pin();
        let shard = self.shard(hash);
        let mut table = shard.table.load(Ordering::Acquire, &guard);
        loop {
            // SAFETY: tables are freed only through the epoch, and we are pinned.
            let t = unsafe { table.deref() };
            // Before this run's first charge (see `Mark`); a run that goes
            // round again leaves its charges where they landed.
            let mark = if MARK { Mark(self.credits(shard, hash).load(Ordering::SeqCst)) } else { Mark::default() };
            match t.find(hash, probe, &guard) {
                Find::Found(i) => {
                    let mut cells = Cells::new(t.states(i), mark);
                    match op(&mut cells) {
                        Ok(r) if t.holds(i, probe, &guard) => {
                            if let Some(give_back) = cells.to_give_back() {
                                // The run is over and the slot held the key
                                // throughout: take its changes back, locked.
                                let credit = Credit::GiveBack(give_back.mark);
                                self.update_locked(hash, probe, now, retention, credit, |cells| {
                                    give_back.apply(cells);
                                    Ok(())
                                });
                            }
                            return r;
                        }
                        // The slot was given to another key meanwhile: look
                        // again. What the call changed stays where it landed
                        // (see `cells.rs`): a token denied, never granted.
                        Ok(_) => {}
                        // Being forgotten or moved: wait for it to settle.
                        Err(Frozen) => {
                            t.wait_change(i, LOCKED);
                        }
                    }
                    table = shard.table.load(Ordering::Acquire, &guard);
                }
                Find::Absent { .. } => {
                    // While the table migrates, a key absent here may have moved on.
                    if let Some(next) = Self::absent_while_migrating(table, &guard) {
                        table = next;
                        continue;
                    }
                    if let Some(r) = self.run_absent(shard, t, hash, probe, mark, now, retention, &mut op, &guard) {
                        return r;
                    }
                    table = shard.table.load(Ordering::Acquire, &guard);
                }
            }
        }
    }

    /// Like [`update`](Self::update), but for an operation that *credits*
    /// a key (a refund, a give-back): on a stored key, `op` runs while the
    /// slot is locked and known to hold this key. A lock-free credit can
    /// land on a slot that was forgotten and reused by another key between
    /// the probe and the CAS (an ABA on the state's value), and if that key
    /// moves on before the credit is taken back (see `cells.rs`) it keeps
    /// tokens that were never its own: a charge that lands that way only
    /// denies, a credit would over-grant. Credits are rare; the lock makes
    /// them exact. Calls on the key meanwhile wait for the slot, for a few
    /// loads and stores.
    ///
    /// A key the store does not hold is inserted with what `op` changed for
    /// a [`Credit::Refund`], and left alone (`None`) for a give-back, as is
    /// a key whose credit counter moved since the give-back's [`Mark`]. A
    /// refund bumps the key's credit counter while it holds the slot.
    pub(crate) fn update_locked<R>(
        &self,
        hash: u64,
        probe: &S::Probe<'_>,
        now: u64,
        retention: &impl Retention,
        credit: Credit,
        mut op: impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
    ) -> Option<R> {
        let guard = epoch::pin();
        let shard = self.shard(hash);
        let credits = self.credits(shard, hash);
        let mut table = shard.table.load(Ordering::Acquire, &guard);
        loop {
            // SAFETY: as in `update`.
            let t = unsafe { table.deref() };
            match t.find(hash, probe, &guard) {
                Find::Found(i) => {
                    if let Some(states) = self.lock_key(t, i, probe, &guard) {
                        if credit.stale(credits.load(Ordering::SeqCst)) {
                            t.unlock(i, &states[..self.width]);
                            return None;
                        }
                        let mut words = Scratch(states);
                        let (r, _) = on_copy(&mut words, self.width, Mark::default(), &mut op);
                        if credit.bumps() {
                            credits.fetch_add(1, Ordering::SeqCst);
                        }
                        t.unlock(i, &words.0[..self.width]);
                        return Some(r);
                    }
                    table = shard.table.load(Ordering::Acquire, &guard);
                }
                Find::Absent { .. } => {
                    if let Some(next) = Self::absent_while_migrating(table, &guard) {
                        table = next;
                        continue;
                    }
                    if !credit.inserts() {
                        return None;
                    }
                    // Before the credited key can be published.
                    credits.fetch_add(1, Ordering::SeqCst);
                    let mark = Mark::default();
                    if let Some(r) = self.run_absent(shard, t, hash, probe, mark, now, retention, &mut op, &guard) {
                        return Some(r);
                    }
                    table = shard.table.load(Ordering::Acquire, &guard);
                }
            }
        }
    }

    /// Locks slot `i`, found to hold the probed key, and captures its
    /// states; `None` (after waiting for a slot being forgotten or moved to
    /// settle) if the slot no longer holds a live copy of the key: look again.
    fn lock_key(&self, t: &Table<S>, i: usize, probe: &S::Probe<'_>, guard: &epoch::Guard) -> Option<[u64; MAX_WIDTH]> {
        let first = t.control(i);
        if first >= FIRST_MARKER {
            if first == LOCKED {
                t.wait_change(i, LOCKED);
            }
            return None;
        }
        let states = t.lock_all(i, first)?;
        // Locked, the slot cannot change hands: check it is still ours (it
        // may have been reused by another key since the probe found it).
        if !t.holds(i, probe, guard) {
            t.unlock(i, &states[..self.width]);
            return None;
        }
        Some(states)
    }

    /// After a probe of `table` found the key absent: `None` if the table
    /// is not migrating (the key is absent), else the table to look in
    /// next. A migration sets `next` before it moves any key, and copies a
    /// key there before it marks the key's old slot MOVED; places happen
    /// under the insert lock, which the migration holds, so none lands in
    /// `table` once `next` is set. A key placed after this probe passed its
    /// slot is one this call may answer as absent (it was, when the probe
    /// passed); an insert of it checks again under the lock.
    #[inline]
    fn absent_while_migrating<'g>(
        table: epoch::Shared<'g, Table<S>>,
        guard: &'g epoch::Guard,
    ) -> Option<epoch::Shared<'g, Table<S>>> {
        // SAFETY: as in `update`.
        let t = unsafe { table.deref() };
        let next = t.next.load(Ordering::Acquire, guard);
        (!next.is_null()).then_some(next)
    }

    /// Runs `op` for a key absent from `t` (which is not migrating): on
    /// what its shard remembers of it, inserting it if `op` changed that.
    /// `None` when the caller must look again (see [`insert`](Self::insert)).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn run_absent<R>(
        &self,
        shard: &Shard<S>,
        t: &Table<S>,
        hash: u64,
        probe: &S::Probe<'_>,
        mark: Mark,
        now: u64,
        retention: &impl Retention,
        op: &mut impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
        guard: &epoch::Guard,
    ) -> Option<R> {
        // Filled, changed and inserted in place: copies of the whole array
        // were read back wider than they were written (a stall each).
        let mut words = Scratch([0; MAX_WIDTH]);
        let seen = shard.summary.changes();
        shard.summary.initial_into(hash, retention, guard, &mut words.0[..self.width]);
        let (r, changed) = on_copy(&mut words, self.width, mark, op);
        if !changed {
            return Some(r);
        }
        match self.insert(shard, t, hash, probe, &words.0, Some(seen), now, retention, guard) {
            Next::Done => Some(r),
            Next::Retry => None,
        }
    }

    /// Inserts a key found absent from `t` with `states`: computed from what the shard remembered of it when its summary had
    /// taken in `seen` forgets, if they were (a reset's fresh states are
    /// not). `Retry` when the caller must look again (the table was
    /// replaced, the key was placed meanwhile, the shard needed room first,
    /// or it has forgotten a key since).
    ///
    /// Under the shard's insert lock: the lock holder is the only thread
    /// that places keys, so its own probe, under the lock, is final (the
    /// key absent, the slot free), and the key is placed with plain stores,
    /// no claim, no check for a racing copy. (The lock-free probe before it
    /// is not trusted: a key may have been placed since. A table version
    /// read before it would spare this second probe, warm in the cache, at
    /// the price of a load on every lookup; `rounds keys100k-u64` read
    /// worse with it in 5 of 6 pairs, within the noise of a loaded machine.) Growth, when
    /// the insert takes the table past 3/4, is done here too, by this
    /// thread, before it lets go of the lock.
    #[allow(clippy::too_many_arguments)]
    fn insert(
        &self,
        shard: &Shard<S>,
        t: &Table<S>,
        hash: u64,
        probe: &S::Probe<'_>,
        states: &[u64; MAX_WIDTH],
        seen: Option<u64>,
        now: u64,
        retention: &impl Retention,
        guard: &epoch::Guard,
    ) -> Next {
        let bytes = S::probe_heap_bytes(probe);
        let lock = ShardLock::take(shard);
        // The states must not have been outdated by a forget since the
        // summary was read: another copy of the key inserted after ours was
        // computed, charged and forgotten left its charges in the summary,
        // not in our states, and publishing them would grant those tokens
        // twice. Forgets happen under this lock, and count themselves.
        // (Comparing the key's summary itself instead of the count cost 11
        // ns an insert: `rounds insert-u64`.)
        if seen.is_some_and(|seen| shard.summary.changes() != seen)
            || !std::ptr::eq(shard.table.load(Ordering::Acquire, guard).as_raw(), t)
        {
            return Next::Retry;
        }
        let free = match t.find(hash, probe, guard) {
            Find::Found(_) => return Next::Retry,
            Find::Absent { free } => free,
        };
        // Room first: a chain must always end at an EMPTY slot, and the
        // bounds hold before the key comes in, not after.
        let full = t.used.load(Ordering::Relaxed) + 1 > t.capacity() * 7 / 8;
        let over = shard.live.load(Ordering::Relaxed) + 1 > self.max_per_shard
            || shard.key_bytes.load(Ordering::Relaxed) + bytes > self.max_bytes_per_shard;
        let Some((i, from)) = free.filter(|_| !full && !over) else {
            self.maintain_locked(shard, now, retention, guard, Trigger::Insert { bytes });
            lock.release();
            return Next::Retry;
        };
        // Counted before it is published: once published, the key may be
        // forgotten by a reset (and uncounted) at once, and the counts must
        // never go below zero.
        shard.live.fetch_add(1, Ordering::Relaxed);
        if bytes > 0 {
            shard.key_bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        t.place(i, from, probe, states, guard);
        if stop::stopped() {
            lock.abandon();
            return Next::Done;
        }
        if t.used.load(Ordering::Relaxed) > t.capacity() * MAX_LOAD.0 / MAX_LOAD.1 {
            self.maintain_locked(shard, now, retention, guard, Trigger::Insert { bytes: 0 });
            if stop::stopped() {
                lock.abandon();
                return Next::Done;
            }
        }
        lock.release();
        Next::Done
    }

    /// Forgets the key: afterwards it answers as a key never seen, for any
    /// call stamped at or after `now`.
    pub(crate) fn reset(&self, hash: u64, probe: &S::Probe<'_>, now: u64, retention: &impl Retention) {
        let guard = epoch::pin();
        let shard = self.shard(hash);
        let mut pristine = [0; MAX_WIDTH];
        retention.pristine(&mut pristine[..self.width]);
        // Would the key, absent, start less than full (its own summary, or
        // a join)? Then it is stored with fresh states, so the reset is exact.
        let summary_matters = || {
            let mut initial = [0; MAX_WIDTH];
            shard.summary.initial_into(hash, retention, &guard, &mut initial[..self.width]);
            retention.idle_after(&initial[..self.width], now) > 0
        };
        let mut table = shard.table.load(Ordering::Acquire, &guard);
        loop {
            // SAFETY: as in `update`.
            let t = unsafe { table.deref() };
            match t.find(hash, probe, &guard) {
                Find::Found(i) => {
                    if self.lock_key(t, i, probe, &guard).is_some() {
                        // While the slot is held (see `Mark`).
                        self.credits(shard, hash).fetch_add(1, Ordering::SeqCst);
                        if summary_matters() {
                            t.unlock(i, &pristine[..self.width]);
                        } else {
                            shard.key_bytes.fetch_sub(S::heap_bytes(t.key(i)), Ordering::Relaxed);
                            t.release(i, &guard);
                            shard.live.fetch_sub(1, Ordering::Relaxed);
                        }
                        return;
                    }
                    table = shard.table.load(Ordering::Acquire, &guard);
                }
                Find::Absent { .. } => {
                    if let Some(next) = Self::absent_while_migrating(table, &guard) {
                        table = next;
                        continue;
                    }
                    if !summary_matters() {
                        return;
                    }
                    // Before the fresh states can be published.
                    self.credits(shard, hash).fetch_add(1, Ordering::SeqCst);
                    match self.insert(shard, t, hash, probe, &pristine, None, now, retention, &guard) {
                        Next::Done => return,
                        Next::Retry => table = shard.table.load(Ordering::Acquire, &guard),
                    }
                }
            }
        }
    }

    /// Keys currently stored (including full buckets not yet forgotten).
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.live.load(Ordering::Relaxed)).sum()
    }

    /// Bytes the store holds: every shard's table, the keys stored outside
    /// their slots, and the summaries of evicted keys.
    pub(crate) fn memory_bytes(&self) -> usize {
        let guard = epoch::pin();
        self.shards
            .iter()
            .map(|s| {
                let shard: &Shard<S> = s;
                let table = shard.table.load(Ordering::Acquire, &guard);
                // SAFETY: as in `update`.
                let cap = unsafe { table.deref() }.capacity();
                Table::<S>::bytes_for(cap, self.width)
                    + shard.key_bytes.load(Ordering::Relaxed)
                    + shard.summary.bytes(&guard)
            })
            .sum()
    }

    /// Migrates every shard to a new table of the same size, now: what
    /// growth does, on demand, for tests and models of migration racing
    /// other calls.
    pub(crate) fn force_migration(&self, now: u64, retention: &impl Retention) {
        let guard = epoch::pin();
        for s in self.shards.iter() {
            let shard: &Shard<S> = s;
            let lock = ShardLock::take(shard);
            let table = shard.table.load(Ordering::Acquire, &guard);
            // SAFETY: as in `update`.
            let cap = unsafe { table.deref() }.capacity();
            self.migrate(shard, table, |_| cap, now, now, retention, &guard);
            lock.release();
        }
    }

    /// Forgets every key that carries no information at `now`, shrinking
    /// tables that have become sparse. Returns how many keys were dropped.
    pub(crate) fn gc(&self, now: u64, retention: &impl Retention) -> usize {
        let guard = epoch::pin();
        self.shards
            .iter()
            .map(|s| {
                let before = s.live.load(Ordering::Relaxed);
                let lock = ShardLock::take(s);
                self.maintain_locked(s, now, retention, &guard, Trigger::Gc);
                lock.release();
                before.saturating_sub(s.live.load(Ordering::Relaxed))
            })
            .sum()
    }
}

/// What asked for maintenance.
#[derive(Clone, Copy, Debug)]
enum Trigger {
    /// An insert: room for one more key of `bytes` long-key bytes.
    Insert { bytes: usize },
    /// `gc`: forget every full key and shrink a sparse table.
    Gc,
}

impl<S: StoredKey> Store<S> {
    /// Maintains a shard, under its insert lock: evicts keys to respect the
    /// bounds, then migrates to a new table if the current one is too full
    /// (dropping full keys on the way) or, on `gc`, to forget full keys and
    /// shrink.
    fn maintain_locked(
        &self,
        shard: &Shard<S>,
        now: u64,
        retention: &impl Retention,
        guard: &epoch::Guard,
        why: Trigger,
    ) {
        let table = shard.table.load(Ordering::Acquire, guard);
        // SAFETY: as in `update`; only the maintainer replaces it.
        let t = unsafe { table.deref() };
        let extra = matches!(why, Trigger::Insert { .. }) as usize;
        let extra_bytes = match why {
            Trigger::Insert { bytes, .. } => bytes,
            Trigger::Gc => 0,
        };

        // Pass 1, only when a bound binds (or on `gc`): every live key, with
        // how long until it would be droppable (0: it carries no
        // information now). Growth alone needs no scan here: the migration
        // forgets idle keys on its way.
        let limit = self.max_per_shard;
        let byte_limit = self.max_bytes_per_shard;
        let over_keys = shard.live.load(Ordering::Relaxed) + extra > limit;
        let over_bytes = shard.key_bytes.load(Ordering::Relaxed) + extra_bytes > byte_limit;
        let w = self.width;
        let mut keys: Vec<(u64, usize, usize, u64)> = Vec::new(); // (wait, bytes, slot, first)
        let (mut kept, idle) = if over_keys || over_bytes || matches!(why, Trigger::Gc) {
            for i in 0..t.capacity() {
                let mut states = [0u64; MAX_WIDTH];
                if !Self::read_live(t, i, &mut states[..w]) {
                    continue;
                }
                let wait = retention.idle_after(&states[..w], now);
                keys.push((wait, S::heap_bytes(t.key(i)), i, states[0]));
            }
            let idle = keys.iter().filter(|k| k.0 == 0).count();
            (keys.len() - idle, idle)
        } else {
            (shard.live.load(Ordering::Relaxed), 0)
        };

        // Pass 2: if a bound binds, forget in place every full key and,
        // among the others, the ones closest to full — an eighth of the
        // shard at a time, so eviction is amortised over the inserts that
        // refill it — then, while the byte budget binds, long keys in the
        // same order.
        if over_keys || over_bytes {
            let survivors = kept;
            let survivor_bytes: usize = keys.iter().filter(|k| k.0 > 0).map(|k| k.1).sum();
            keys.sort_unstable_by_key(|&(wait, ..)| wait);
            let keep_keys = if survivors + extra > limit {
                survivors.min((limit - limit / 8).min(limit - extra))
            } else {
                survivors
            };
            let cells = (t.capacity() / 8).max(8).next_power_of_two().min(self.max_cells);
            let byte_target = (byte_limit - byte_limit / 8).min(byte_limit.saturating_sub(extra_bytes));
            let mut bytes = survivor_bytes;
            let cut = keys.len() - keep_keys; // the idle keys, then the survivors to evict
            for (k, &(wait, b, i, first)) in keys.iter().enumerate() {
                let evict = k < cut || (bytes > byte_target && b > 0);
                if evict && self.forget(shard, t, i, first, now, cells, retention, guard) && wait > 0 {
                    bytes -= b;
                    kept -= 1;
                }
            }
        }

        // Pass 3: migrate when the table is too full (dead slots count: they
        // lengthen chains), dropping full keys on the way; or on gc when that
        // drops or shrinks something. The new table holds the keys that
        // move at a load of 1/2.
        let used = t.used.load(Ordering::Relaxed);
        let at_target = |keys: usize| (keys * TARGET_LOAD.1).div_ceil(TARGET_LOAD.0).max(MIN_CAPACITY);
        match why {
            // A rebuild for room never shrinks the table: keys that went
            // idle and come back (most clients of a per-IP limit) would
            // otherwise shrink and regrow it over and over. `gc` shrinks it.
            // Sized by the migration's own count of the keys that move
            // (idle keys are forgotten on its way).
            Trigger::Insert { .. } => {
                if (used + extra) * MAX_LOAD.1 > t.capacity() * MAX_LOAD.0 {
                    let cap = t.capacity();
                    // Keys idle for less than their window stay: most come
                    // back (a client under its limit), and forgetting them
                    // would make every return an insert.
                    let since = now.saturating_sub(retention.linger());
                    self.migrate(
                        shard,
                        table,
                        |moving| at_target(moving + extra).max(cap),
                        now,
                        since,
                        retention,
                        guard,
                    );
                }
            }
            Trigger::Gc => {
                let cap = if kept == 0 { 0 } else { at_target(kept) };
                if idle > 0 || cap < t.capacity() {
                    self.migrate(shard, table, |_| cap, now, now, retention, guard);
                }
            }
        }
    }

    /// Reads live slot `i`'s states into `out`; false if the slot is not live
    /// or holds a marker.
    fn read_live(t: &Table<S>, i: usize, out: &mut [u64]) -> bool {
        for (o, w) in out.iter_mut().zip(t.states(i)) {
            *o = w.load(Ordering::Acquire);
            if *o >= FIRST_MARKER {
                return false;
            }
        }
        true
    }

    /// Forgets live slot `i` (first state `first`) in place: locks it,
    /// captures its states, remembers them in the summary and releases the
    /// slot. False if the slot changed since it was read (it is then left
    /// alone).
    #[allow(clippy::too_many_arguments)]
    fn forget(
        &self,
        shard: &Shard<S>,
        t: &Table<S>,
        i: usize,
        first: u64,
        now: u64,
        cells: usize,
        retention: &impl Retention,
        guard: &epoch::Guard,
    ) -> bool {
        let Some(states) = t.lock_all(i, first) else { return false };
        let wait = retention.idle_after(&states[..self.width], now);
        self.drop_locked(shard, t, i, &states[..self.width], wait, now, cells, retention, guard);
        true
    }

    /// Forgets locked slot `i`, whose captured states are `states` (`wait`
    /// ns from idle): remembered in the summary, the slot released.
    #[allow(clippy::too_many_arguments)]
    fn drop_locked(
        &self,
        shard: &Shard<S>,
        t: &Table<S>,
        i: usize,
        states: &[u64],
        wait: u64,
        now: u64,
        cells: usize,
        retention: &impl Retention,
        guard: &epoch::Guard,
    ) {
        let hash = S::rehash(t.key(i), &self.hasher);
        if wait > 0 {
            // Evicted while not idle: the key may come back fuller than it
            // left (a displaced summary, under `Fair`), where a give-back of
            // a charge made before must not land (see `Mark`).
            self.credits(shard, hash).fetch_add(1, Ordering::SeqCst);
        }
        shard.summary.forget(hash, states, wait, now, cells, retention, guard);
        shard.key_bytes.fetch_sub(S::heap_bytes(t.key(i)), Ordering::Relaxed);
        t.release(i, guard);
        shard.live.fetch_sub(1, Ordering::Relaxed);
    }

    /// Moves every key of `old` to a new table of `size(n)` slots (`n`: at
    /// most how many keys will move; the table is made larger if it could
    /// not hold them), forgetting the keys already droppable at `since`
    /// (`now`, or earlier to keep keys that have been idle less than their
    /// window; droppable then means droppable now), under the shard's
    /// insert lock, while lookups go on: each live slot is locked, captured,
    /// copied into the new table and marked MOVED on its own (a key moves
    /// once per growth); lookups of a key not moved yet find it in `old`,
    /// and of a moved key follow `old`'s `next`, set before the first move.
    /// The shard's table becomes the new one with one pointer store at the
    /// end; new keys wait for the lock until then. `old` is freed through
    /// the epoch.
    #[allow(clippy::too_many_arguments)]
    fn migrate(
        &self,
        shard: &Shard<S>,
        old: epoch::Shared<'_, Table<S>>,
        size: impl FnOnce(usize) -> usize,
        now: u64,
        since: u64,
        retention: &impl Retention,
        guard: &epoch::Guard,
    ) {
        // SAFETY: as in `update`.
        let from = unsafe { old.deref() };
        // No key is placed in the old table while the lock is held, so the
        // keys to move are at most the slots live or locked now.
        let cells = (from.capacity() / 8).max(8).next_power_of_two().min(self.max_cells);
        let w = self.width;
        // One scan: keys that carry no information are forgotten in place,
        // and every other slot that holds a key (live, or locked by a
        // credit) is counted, so the new table is sized for the keys that
        // will move.
        let mut bound = 0usize;
        // One buffer for both scans, written and read word by word in place.
        let mut buffer = [0u64; MAX_WIDTH];
        let states = &mut buffer[..w];
        for i in 0..from.capacity() {
            if matches!(from.control(i), EMPTY | DEAD | MOVED) {
                continue;
            }
            if Self::read_live(from, i, states)
                && retention.idle_after(states, since) == 0
                && from.lock_into(i, states[0], states)
            {
                if retention.idle_after(states, since) == 0 {
                    self.drop_locked(shard, from, i, states, 0, now, cells, retention, guard);
                    continue;
                }
                from.unlock(i, states);
            }
            bound += 1;
        }
        let cap = size(bound);
        let cap = cap.max(if bound == 0 { 0 } else { (bound * 8).div_ceil(7) + 1 });
        let new = epoch::Owned::new(Table::new(cap, self.width)).into_shared(guard);
        // SAFETY: just made; published below.
        let to = unsafe { new.deref() };
        // Before the first key moves: a lookup that finds its key MOVED, or
        // absent, follows it (see `absent_while_migrating`).
        from.next.store(new, Ordering::Release);
        for i in 0..from.capacity() {
            let mut backoff = Backoff::new();
            loop {
                let c = from.control(i);
                match c {
                    // Free slots stay as they are: nobody else places keys.
                    EMPTY | DEAD | MOVED => break,
                    // A credit or a reset holds the slot: wait.
                    LOCKED => backoff.snooze(),
                    first => {
                        if !from.lock_into(i, first, states) {
                            continue;
                        }
                        let hash = S::rehash(from.key(i), &self.hasher);
                        if retention.idle_after(states, since) == 0 {
                            // Full since `since`: forgotten on the way (the floor keeps it).
                            shard.summary.forget(hash, states, 0, now, cells, retention, guard);
                            shard.key_bytes.fetch_sub(S::heap_bytes(from.key(i)), Ordering::Relaxed);
                            S::retire(from.key(i), guard);
                            shard.live.fetch_sub(1, Ordering::Relaxed);
                        } else {
                            to.adopt(hash, from.key(i), states);
                        }
                        from.mark_moved(i);
                        if stop::here(stop::At::Migration) {
                            return;
                        }
                        break;
                    }
                }
            }
        }
        shard.table.store(new, Ordering::Release);
        // SAFETY: replaced above; threads pinned now may still read it.
        unsafe { guard.defer_destroy(old) };
        // Seal the old table now rather than when this thread's bag of
        // deferred frees fills up (64 of them): a growing store would
        // otherwise keep dozens of old tables alive at once. After a growth
        // it is freed as soon as this call ends, at the price of two
        // `membarrier`s: a growing store's memory is mostly its tables, and
        // the allocator reuses a block freed at once for the next table
        // (with the old tables' frees left to the epoch's next collection,
        // RSS per key after 100k inserts rose by a quarter, and freeing only
        // the old tables of 16 KiB or more at once did not help: `bin
        // memory`). Other rebuilds wait for the epoch's next collection, at
        // most one a millisecond: those that do not grow, and those of a
        // shard near its `max_keys` share, whose table shrinks and grows
        // again under churn (one every ~3,000 keys in `bin churn`), so that
        // churn does not pay two `membarrier`s each time.
        let near_bound = shard.live.load(Ordering::Relaxed) >= self.max_per_shard / 2;
        if to.capacity() > from.capacity() && !near_bound {
            guard.flush_now();
        } else {
            guard.flush();
        }
    }
}

/// A key's state words outside any table (an absent key's, a copy of a
/// locked slot's), aligned as atomics so [`on_copy`] runs on them in place.
#[repr(C, align(8))]
pub(crate) struct Scratch(pub(crate) [u64; MAX_WIDTH]);

/// Runs `op` on the first `width` of `words`, a private copy, in place:
/// the answer for an absent key, and whether `op` changed the words (then
/// they are the states to insert).
pub(crate) fn on_copy<R>(
    words: &mut Scratch,
    width: usize,
    mark: Mark,
    op: &mut impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
) -> (R, bool) {
    #[cfg(not(ratomic_loom))]
    {
        // Seen as atomics: only the words in use are touched, with no
        // per-word construction (this runs on every call for a key the
        // store does not hold).
        let ptr = words.0.as_mut_ptr().cast::<AtomicU64>();
        // SAFETY: `AtomicU64` has the size and bit validity of `u64`, and
        // `Scratch` gives the alignment it needs (8); the slice borrows the
        // private copy exclusively until `op` returns.
        let atomics = unsafe { std::slice::from_raw_parts(ptr, width) };
        let mut cells = Cells::new(atomics, mark);
        let r = op(&mut cells).expect("a private copy holds no marker");
        (r, cells.settle_private())
    }
    #[cfg(ratomic_loom)]
    {
        let atomics: [AtomicU64; MAX_WIDTH] = std::array::from_fn(|w| AtomicU64::new(words.0[w]));
        let mut cells = Cells::new(&atomics[..width], mark);
        let r = op(&mut cells).expect("a private copy holds no marker");
        let changed = cells.settle_private();
        for (w, a) in words.0.iter_mut().zip(&atomics) {
            *w = a.load(Ordering::Relaxed);
        }
        (r, changed)
    }
}

impl<S: StoredKey> Drop for Store<S> {
    fn drop(&mut self) {
        // SAFETY: dropping the store: no other thread can reach its tables.
        unsafe {
            let guard = epoch::unprotected();
            for s in self.shards.iter() {
                let table = s.table.load(Ordering::Relaxed, guard);
                let next = table.deref().next.load(Ordering::Relaxed, guard);
                if !next.is_null() {
                    drop(next.into_owned());
                }
                drop(table.into_owned());
            }
        }
    }
}

#[cfg(all(test, not(ratomic_loom)))]
mod tests {
    use std::cell::Cell;
    use std::hash::BuildHasher;
    use std::time::Duration;

    use super::*;
    use crate::algorithm::charge_in;
    use crate::{Gcra, Quota, Rate};

    /// A one-word store of 8 slots in one shard, with a bucket of 3, and
    /// two keys X and K with one home slot.
    struct Collide {
        gcra: Gcra,
        store: Store<u64>,
        x: u64,
        k: u64,
    }

    impl Collide {
        fn new() -> Self {
            let gcra = Gcra::new(Quota::from_rate(Rate::new(3, Duration::from_nanos(30)).unwrap()).unwrap());
            let store: Store<u64> = Store::new(&Options::default().shards(1).max_keys(16), 1, &gcra).unwrap();
            // Production hashers are seeded per store: hash with this one.
            let home = |k: u64| table::home_slot(store.hasher.hash_one(k), MIN_CAPACITY);
            let (x, k) = (1u64, (2u64..).find(|&k| home(k) == home(1)).unwrap());
            Collide { gcra, store, x, k }
        }

        fn hash(&self, key: u64) -> u64 {
            self.store.hasher.hash_one(key)
        }

        /// One call of cost `cost` (0: a peek) on `key` at time 0.
        fn call(&self, key: u64, cost: u64) -> crate::decision::Verdict {
            self.store.update::<false, _>(self.hash(key), &key, 0, &self.gcra, |cells| {
                Ok(charge_in(&self.gcra, cells, 0, 0, cost)?.0)
            })
        }

        fn slot_of(&self, key: u64) -> Find {
            let guard = epoch::pin();
            // SAFETY: tables are freed only through the epoch, and we are pinned.
            let t = unsafe { self.store.shard(self.hash(key)).table.load(Ordering::Acquire, &guard).deref() };
            t.find(self.hash(key), &key, &guard)
        }

        /// Forgets X, then charges K twice from full at time 0, which
        /// leaves K in X's old slot with the state a second charge of X
        /// from full leaves (TAT 20).
        fn forget_x_and_charge_k_twice(&self) {
            let x_slot = self.slot_of(self.x);
            self.store.reset(self.hash(self.x), &self.x, 0, &self.gcra);
            assert!(self.call(self.k, 1).allowed && self.call(self.k, 1).allowed);
            assert_eq!(self.slot_of(self.k), x_slot, "the race this test is for: K took X's slot");
        }
    }

    /// A call whose slot is forgotten and given to another key between its
    /// charge and its check leaves the new key's charges alone, even when
    /// the new key's state is exactly the value the call stored (both keys
    /// charged from a full bucket at the same clock reading). Taking the
    /// call's charge back by a CAS from that value erased one of them: the
    /// new key then had a token more than its limit allows.
    #[test]
    fn a_call_on_a_slot_reused_meanwhile_leaves_the_new_key_s_charges_alone() {
        let c = Collide::new();
        assert!(c.call(c.x, 1).allowed);
        // X's second call: after its charge, and before its check, X is
        // forgotten and K takes the slot and is charged twice, which leaves
        // K's state where X's call left X's. Then the call looks again and
        // charges X's new copy.
        let meanwhile = Cell::new(true);
        let second = c.store.update::<false, _>(c.hash(c.x), &c.x, 0, &c.gcra, |cells| {
            let r = charge_in(&c.gcra, cells, 0, 0, 1)?.0;
            if meanwhile.replace(false) {
                c.forget_x_and_charge_k_twice();
            }
            Ok(r)
        });
        assert!(second.allowed);
        assert_eq!(c.call(c.k, 0).remaining, 1, "K keeps both of its charges");
        assert!(c.call(c.x, 0).remaining <= 2, "X's call counted at least once");
    }

    /// The same race for a run that gives its charge back (a multi-limit
    /// call whose later limit denied): given back by a CAS from the value
    /// it stored, in the run, the charge took K's instead. The store gives
    /// it back only for a slot that held the key throughout, locked.
    #[test]
    fn a_give_back_on_a_slot_reused_meanwhile_leaves_the_new_key_s_charges_alone() {
        let c = Collide::new();
        assert!(c.call(c.x, 1).allowed);
        let meanwhile = Cell::new(true);
        c.store.update::<true, _>(c.hash(c.x), &c.x, 0, &c.gcra, |cells| {
            assert!(charge_in(&c.gcra, cells, 0, 0, 1)?.0.allowed);
            if meanwhile.replace(false) {
                c.forget_x_and_charge_k_twice();
            }
            cells.give_back();
            Ok(())
        });
        assert_eq!(c.call(c.k, 0).remaining, 1, "K keeps both of its charges");
        assert_eq!(c.call(c.x, 0).remaining, 3, "X's call, run again after the reset, gave its charge back");
    }

    /// A run that gives its changes back leaves a stored key as it found
    /// it, and does not insert a key the store does not hold.
    #[test]
    fn a_give_back_takes_the_run_s_changes_back_exactly() {
        let c = Collide::new();
        assert!(c.call(c.x, 1).allowed);
        let give_back = |key: u64| {
            c.store.update::<true, _>(c.hash(key), &key, 0, &c.gcra, |cells| {
                assert!(charge_in(&c.gcra, cells, 0, 0, 2)?.0.allowed);
                cells.give_back();
                Ok(())
            })
        };
        give_back(c.x);
        assert_eq!(c.call(c.x, 0).remaining, 2, "X as before: one charge");
        give_back(c.k);
        assert_eq!(c.store.len(), 1, "K, absent, not inserted");
        assert_eq!(c.call(c.k, 0).remaining, 3);
    }

    /// An eviction of a key that is not idle moves its credit counter (the
    /// key may come back fuller than it left, see `Mark`); forgetting idle
    /// keys does not.
    #[test]
    fn evicting_a_key_that_is_not_idle_moves_the_credit_counter_and_forgetting_idle_keys_does_not() {
        let c = Collide::new();
        let credits = || c.store.shards[0].credits.iter().map(|w| w.load(Ordering::Relaxed)).sum::<u64>();
        // 16 keys, each one token down at time 0: the shard is full of keys
        // that are not idle.
        for key in 100..116 {
            assert!(c.call(key, 1).allowed);
        }
        assert_eq!((c.store.len(), credits()), (16, 0));
        assert!(c.call(116, 1).allowed, "a new key gets in by evicting");
        let evicted = 17 - c.store.len() as u64;
        assert!(evicted >= 1);
        assert_eq!(credits(), evicted, "one bump per key evicted");
        // Much later every key is idle: forgetting them all bumps nothing.
        assert!(c.store.gc(1_000_000, &c.gcra) > 0);
        assert_eq!(credits(), evicted);
    }

    /// A refund or a reset of the key between a run's charge and its
    /// give-back, then a call charged from there to exactly the value the
    /// run stored (same clock reading, same cost): the give-back must keep
    /// its charge, or it erases that call's and the key has a token more
    /// than its limit allows after the reset.
    #[test]
    fn a_give_back_after_a_reset_or_refund_of_the_key_leaves_later_charges_alone() {
        for credit in ["reset", "refund"] {
            let c = Collide::new();
            // X is stored, full again by `now`.
            assert!(c.call(c.x, 1).allowed);
            let now = 1_000_000_000_000;
            let at_now = |cost: u64| {
                c.store.update::<false, _>(c.hash(c.x), &c.x, now, &c.gcra, |cells| {
                    Ok(charge_in(&c.gcra, cells, 0, now, cost)?.0)
                })
            };
            let meanwhile = Cell::new(true);
            c.store.update::<true, _>(c.hash(c.x), &c.x, now, &c.gcra, |cells| {
                assert!(charge_in(&c.gcra, cells, 0, now, 1)?.0.allowed);
                if meanwhile.replace(false) {
                    if credit == "reset" {
                        c.store.reset(c.hash(c.x), &c.x, now, &c.gcra);
                    } else {
                        let refunded =
                            c.store.update_locked(c.hash(c.x), &c.x, now, &c.gcra, Credit::Refund, |cells| {
                                crate::algorithm::refund_in(&c.gcra, cells, 0, now, 1)
                            });
                        assert_eq!(refunded, Some(true));
                    }
                    // Charged from full at `now`: the value the run stored.
                    assert_eq!(at_now(1).remaining, 2);
                }
                cells.give_back();
                Ok(())
            });
            assert_eq!(at_now(0).remaining, 2, "{credit}: the later call's charge stands");
        }
    }
}
