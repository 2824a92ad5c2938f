//! Key types: how a key is hashed, compared and stored in a slot.
//!
//! A slot stores its key as atomic words, so that lookups can read it while
//! another thread may be reusing the slot (the store validates what it read;
//! see `store/table.rs`). A `u64` key is one word. A byte key is three:
//! inline when it is at most 23 bytes long (the common case: user ids, IPs,
//! API keys), so looking it up never follows a pointer; longer keys live on
//! the heap, the slot keeping the block's address (in the word that also
//! says the key is on the heap: see [`ByteKey`] for why that must be one
//! word), their first and their last eight bytes, so a probe rarely
//! dereferences them. A heap key's block carries its own length, so even an
//! address read from a slot being rewritten is never read past its end, and
//! blocks are freed through the epoch only once no lookup can still be
//! reading them.

use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{Error, Result};
use crate::store::epoch;
use crate::sync::{fence, AtomicU64, Ordering};

/// The key types a keyed limiter can be indexed by: `[u8]` (any bytes, the
/// default; `&str`, `String`, `Vec<u8>` and byte arrays pass as keys),
/// `u64` (numeric ids, with the smallest slots), or an IP address
/// ([`IpAddr`], [`Ipv4Addr`], [`Ipv6Addr`]: stored in at most 16 bytes, no
/// allocation; see [`ip_key`] to group IPv6 clients by network).
///
/// Choose one with the builder's `.keys::<K>()`:
///
/// ```
/// use std::net::IpAddr;
/// use ratomic::TokenBucket;
///
/// let limiter = TokenBucket::builder("2/min").keys::<IpAddr>().build()?;
/// let client: IpAddr = "203.0.113.7".parse().unwrap();
/// assert!(limiter.allow(&client).allowed); // no Result: any address is a valid key
/// # Ok::<(), ratomic::Error>(())
/// ```
///
/// Sealed: implemented here for `[u8]`, `u64` and the three IP address
/// types (all `'static`, which the trait says so batches can hold probes
/// borrowed from the callers' keys).
pub trait Key: private::Sealed + 'static {
    #[doc(hidden)]
    type Stored: StoredKey;
    /// The key's hash and its form prepared for comparison with slots.
    #[doc(hidden)]
    fn probe<H: BuildHasher>(&self, hasher: &H, max_len: usize) -> Result<(u64, Probe<'_, Self>)>;
}

/// The prepared form of a `K` key.
pub(crate) type Probe<'a, K> = <<K as Key>::Stored as StoredKey>::Probe<'a>;

/// A value that can be used as a key of type `K`: for `[u8]` anything that
/// is `AsRef<[u8]>` (`str`, `String`, `[u8]`, `Vec<u8>`, `[u8; N]`); for `u64`
/// a `u64`.
///
/// ```
/// use ratomic::TokenBucket;
///
/// let limiter = TokenBucket::builder("1/s").build()?;
/// assert!(limiter.allow("user:1")?.allowed); // &str
/// assert!(!limiter.allow(&String::from("user:1"))?.allowed); // String: the same key
/// assert!(!limiter.allow(b"user:1")?.allowed); // bytes: the same key
/// # Ok::<(), ratomic::Error>(())
/// ```
pub trait AsKey<K: ?Sized + Key> {
    /// The key as `K`.
    fn as_key(&self) -> &K;
}

impl<T: AsRef<[u8]> + ?Sized> AsKey<[u8]> for T {
    #[inline]
    fn as_key(&self) -> &[u8] {
        self.as_ref()
    }
}

/// Key types every value of which is a valid key: `u64` and the IP address
/// types (no length to check). A keyed limiter over one of them answers
/// [`allow`](crate::Keyed::allow) and [`peek`](crate::Keyed::peek) with a
/// plain [`Decision`](crate::Decision), no `Result`; byte keys, which may be
/// longer than the limiter's `max_key_len`, keep the `Result`.
///
/// Sealed: implemented here for `u64`, [`IpAddr`], [`Ipv4Addr`] and [`Ipv6Addr`].
///
/// ```
/// use ratomic::{BoundedKey, Keyed, MonotonicClock, Options, Rule};
///
/// fn first_call_allowed<K: BoundedKey>(limiter: &Keyed<Rule, K>, key: &K) -> bool {
///     limiter.allow(key).allowed // a Decision, no Result to handle
/// }
/// let limiter = Keyed::with_algorithm(Rule::parse("1/s")?, MonotonicClock::new(), Options::default())?;
/// assert!(first_call_allowed::<u64>(&limiter, &7));
/// # Ok::<(), ratomic::Error>(())
/// ```
pub trait BoundedKey: Key {}

impl<K: BoundedKey> AsKey<K> for K {
    #[inline]
    fn as_key(&self) -> &K {
        self
    }
}

mod private {
    pub trait Sealed {}
    impl Sealed for [u8] {}
    impl Sealed for u64 {}
    impl Sealed for std::net::IpAddr {}
    impl Sealed for std::net::Ipv4Addr {}
    impl Sealed for std::net::Ipv6Addr {}
    /// Seals [`StoredKey`](super::StoredKey): its safety contract is the
    /// store's business, so no other crate implements it.
    pub trait SealedStored {}
}

/// How a key type is stored in a slot: `WORDS` atomic words. `Probe` is a
/// key prepared once per call for cheap comparison against many slots.
///
/// # Safety
/// `rehash` must agree with the `Key::probe` hash of the key the words were
/// stored from; `free`/`retire` must free exactly what `store` allocated.
pub unsafe trait StoredKey: private::SealedStored + Send + Sync + 'static {
    /// Words a stored key occupies.
    #[doc(hidden)]
    const WORDS: usize;
    /// Whether a stored key may own memory outside its slot (if not,
    /// `retire`, `clear` and `free` do nothing and tables skip them).
    #[doc(hidden)]
    const OWNS_HEAP: bool;
    #[doc(hidden)]
    type Probe<'a>: Copy;
    /// Whether `words` hold the probe's key. Reads atomically; the words
    /// may be being rewritten (the caller validates), but what this reads
    /// never outlives the caller's epoch guard.
    #[doc(hidden)]
    fn matches(words: &[AtomicU64], probe: &Self::Probe<'_>) -> bool;
    /// Writes the probe's key into words the caller owns (allocating a long
    /// key's bytes).
    #[doc(hidden)]
    fn store(words: &[AtomicU64], probe: &Self::Probe<'_>);
    /// The hash of the key the words hold.
    #[doc(hidden)]
    fn rehash<H: BuildHasher>(words: &[AtomicU64], hasher: &H) -> u64;
    /// Bytes the stored key holds outside its slot (0 for keys inline).
    #[doc(hidden)]
    fn heap_bytes(words: &[AtomicU64]) -> usize;
    /// Bytes a key made from this probe would hold outside its slot.
    #[doc(hidden)]
    fn probe_heap_bytes(probe: &Self::Probe<'_>) -> usize;
    /// Unlinks what the words own (afterwards they own nothing), then frees
    /// it once no thread pinned now can read it. The caller holds the slot.
    #[doc(hidden)]
    fn retire(words: &[AtomicU64], guard: &epoch::Guard);
    /// Makes the words own nothing (a key given up to another table, or
    /// after [`retire`](Self::retire)).
    #[doc(hidden)]
    fn clear(words: &[AtomicU64]);
    /// Frees what the words own now.
    ///
    /// # Safety
    /// No other thread may read the words' key any more.
    #[doc(hidden)]
    unsafe fn free(words: &[AtomicU64]);
}

// ---- u64 -------------------------------------------------------------------

impl Key for u64 {
    type Stored = u64;
    #[inline]
    fn probe<H: BuildHasher>(&self, hasher: &H, _max_len: usize) -> Result<(u64, u64)> {
        Ok((hasher.hash_one(*self), *self))
    }
}

impl BoundedKey for u64 {}

impl private::SealedStored for u64 {}

// SAFETY: `rehash` hashes the same u64 `probe` hashed; nothing is allocated.
unsafe impl StoredKey for u64 {
    const WORDS: usize = 1;
    const OWNS_HEAP: bool = false;
    type Probe<'a> = u64;
    #[inline]
    fn matches(words: &[AtomicU64], probe: &u64) -> bool {
        words[0].load(Ordering::Relaxed) == *probe
    }
    #[inline]
    fn store(words: &[AtomicU64], probe: &u64) {
        words[0].store(*probe, Ordering::Relaxed);
    }
    #[inline]
    fn rehash<H: BuildHasher>(words: &[AtomicU64], hasher: &H) -> u64 {
        hasher.hash_one(words[0].load(Ordering::Relaxed))
    }
    #[inline]
    fn heap_bytes(_: &[AtomicU64]) -> usize {
        0
    }
    #[inline]
    fn probe_heap_bytes(_: &u64) -> usize {
        0
    }
    #[inline]
    fn retire(_: &[AtomicU64], _: &epoch::Guard) {}
    #[inline]
    fn clear(_: &[AtomicU64]) {}
    #[inline]
    unsafe fn free(_: &[AtomicU64]) {}
}

// ---- IP addresses ----------------------------------------------------------

/// How [`ip_key`] groups IPv6 clients. One IPv6 subscriber is usually given
/// a whole /64 (often a /56 or /48), and can pick a new address in it for
/// every request: limiting each address alone lets such a client multiply
/// its limit by 2^64. IPv4 addresses are never grouped.
///
/// ```
/// use std::net::IpAddr;
/// use ratomic::{ip_key, Ipv6Grouping};
///
/// let a: IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
/// assert_eq!(ip_key(a, Ipv6Grouping::Address), a);
/// assert_eq!(ip_key(a, Ipv6Grouping::Slash56), "2001:db8:1::".parse::<IpAddr>().unwrap());
/// # Ok::<(), ratomic::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Ipv6Grouping {
    /// Each IPv6 address is its own key.
    Address,
    /// All addresses of a /64 (one subscriber's LAN) share a key.
    Slash64,
    /// All addresses of a /56 share a key.
    Slash56,
    /// All addresses of a /48 (one site) share a key.
    Slash48,
    /// All addresses that share their first `n` bits share a key (`n`
    /// above 128 is 128: the whole address; 0 groups every IPv6 client).
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use ratomic::{ip_key, Ipv6Grouping};
    ///
    /// let a: IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
    /// assert_eq!(ip_key(a, Ipv6Grouping::Bits(60)), "2001:db8:1::".parse::<IpAddr>().unwrap());
    /// assert_eq!(ip_key(a, Ipv6Grouping::Bits(200)), a);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    Bits(u8),
}

impl Ipv6Grouping {
    /// The prefix length in bits: 128 for [`Address`](Self::Address).
    ///
    /// ```
    /// use ratomic::Ipv6Grouping;
    ///
    /// assert_eq!(Ipv6Grouping::Slash64.prefix_len(), 64);
    /// assert_eq!(Ipv6Grouping::Address.prefix_len(), 128);
    /// # Ok::<(), ratomic::Error>(())
    /// ```
    pub fn prefix_len(self) -> u32 {
        match self {
            Ipv6Grouping::Address => 128,
            Ipv6Grouping::Slash64 => 64,
            Ipv6Grouping::Slash56 => 56,
            Ipv6Grouping::Slash48 => 48,
            Ipv6Grouping::Bits(n) => u32::from(n).min(128),
        }
    }
}

/// A client's address as a limiter key: an IPv4 address as it is; an
/// IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, what a dual-stack socket
/// reports for an IPv4 client) as its IPv4 address; any other IPv6 address
/// with the bits after `grouping`'s prefix cleared, so that every address
/// of one network is the same key.
///
/// An `IpAddr`-keyed limiter already treats `::ffff:a.b.c.d` and
/// `a.b.c.d` as one key; `ip_key` adds the grouping.
///
/// ```
/// use std::net::IpAddr;
/// use ratomic::{ip_key, Ipv6Grouping, TokenBucket};
///
/// let limiter = TokenBucket::builder("1/min").keys::<IpAddr>().build()?;
/// let a: IpAddr = "2001:db8:1:2::a".parse().unwrap();
/// let b: IpAddr = "2001:db8:1:2::b".parse().unwrap(); // same /64
/// assert!(limiter.allow(&ip_key(a, Ipv6Grouping::Slash64)).allowed);
/// assert!(!limiter.allow(&ip_key(b, Ipv6Grouping::Slash64)).allowed, "one key for the /64");
/// assert_eq!(ip_key(a, Ipv6Grouping::Slash64), "2001:db8:1:2::".parse::<IpAddr>().unwrap());
/// assert_eq!(ip_key("::ffff:192.0.2.1".parse().unwrap(), Ipv6Grouping::Slash64), "192.0.2.1".parse::<IpAddr>().unwrap());
/// # Ok::<(), ratomic::Error>(())
/// ```
pub fn ip_key(addr: IpAddr, grouping: Ipv6Grouping) -> IpAddr {
    match addr {
        IpAddr::V4(_) => addr,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let keep = grouping.prefix_len();
                let mask = if keep == 0 { 0 } else { u128::MAX << (128 - keep) };
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        },
    }
}

/// An address's 16 bytes as two words: IPv6 as it is, IPv4 in its
/// IPv4-mapped form, so that `a.b.c.d` and `::ffff:a.b.c.d` are one key.
#[inline]
fn v6_words(v6: Ipv6Addr) -> [u64; 2] {
    let bits = u128::from(v6);
    [(bits >> 64) as u64, bits as u64]
}

impl Key for IpAddr {
    type Stored = IpWords;
    #[inline]
    fn probe<H: BuildHasher>(&self, hasher: &H, _max_len: usize) -> Result<(u64, [u64; 2])> {
        let words = match *self {
            IpAddr::V4(v4) => v6_words(v4.to_ipv6_mapped()),
            IpAddr::V6(v6) => v6_words(v6),
        };
        Ok((hasher.hash_one(words), words))
    }
}

impl BoundedKey for IpAddr {}

impl Key for Ipv6Addr {
    type Stored = IpWords;
    #[inline]
    fn probe<H: BuildHasher>(&self, hasher: &H, _max_len: usize) -> Result<(u64, [u64; 2])> {
        let words = v6_words(*self);
        Ok((hasher.hash_one(words), words))
    }
}

impl BoundedKey for Ipv6Addr {}

impl Key for Ipv4Addr {
    type Stored = u64;
    #[inline]
    fn probe<H: BuildHasher>(&self, hasher: &H, max_len: usize) -> Result<(u64, u64)> {
        u64::from(u32::from(*self)).probe(hasher, max_len)
    }
}

impl BoundedKey for Ipv4Addr {}

/// The storage of an IPv6 (or any `IpAddr`) key: its 16 bytes in two words,
/// in the slot itself.
#[doc(hidden)]
#[derive(Debug)]
pub enum IpWords {}

impl private::SealedStored for IpWords {}

// SAFETY: `rehash` hashes the same two words `probe` hashed; nothing
// is allocated.
unsafe impl StoredKey for IpWords {
    const WORDS: usize = 2;
    const OWNS_HEAP: bool = false;
    type Probe<'a> = [u64; 2];
    #[inline]
    fn matches(words: &[AtomicU64], probe: &[u64; 2]) -> bool {
        words[0].load(Ordering::Relaxed) == probe[0] && words[1].load(Ordering::Relaxed) == probe[1]
    }
    #[inline]
    fn store(words: &[AtomicU64], probe: &[u64; 2]) {
        words[0].store(probe[0], Ordering::Relaxed);
        words[1].store(probe[1], Ordering::Relaxed);
    }
    #[inline]
    fn rehash<H: BuildHasher>(words: &[AtomicU64], hasher: &H) -> u64 {
        hasher.hash_one([words[0].load(Ordering::Relaxed), words[1].load(Ordering::Relaxed)])
    }
    #[inline]
    fn heap_bytes(_: &[AtomicU64]) -> usize {
        0
    }
    #[inline]
    fn probe_heap_bytes(_: &[u64; 2]) -> usize {
        0
    }
    #[inline]
    fn retire(_: &[AtomicU64], _: &epoch::Guard) {}
    #[inline]
    fn clear(_: &[AtomicU64]) {}
    #[inline]
    unsafe fn free(_: &[AtomicU64]) {}
}

// ---- bytes -----------------------------------------------------------------

/// Longest key kept inline in a slot.
const INLINE_MAX: usize = 23;
/// Bit 0 of a slot's first key word: set for a heap key (the word is then
/// its block's address, blocks being 8-aligned), clear for an inline key
/// (the word's low byte is twice its length).
const HEAP: u64 = 1;

/// A byte key prepared for lookup: the three words a slot would hold (for a
/// long key, [`HEAP`], its first and its last eight bytes: the address word
/// is never compared), plus the bytes themselves when they are too long to
/// inline.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct BytesProbe<'a> {
    words: [u64; 3],
    long: Option<&'a [u8]>,
}

impl Key for [u8] {
    type Stored = ByteKey;
    // Always inlined: in the C library and the Node addon it was a call
    // whose `Result` came back through memory (6-9 ns of a hot call).
    #[inline(always)]
    fn probe<H: BuildHasher>(&self, hasher: &H, max_len: usize) -> Result<(u64, BytesProbe<'_>)> {
        if self.len() > max_len {
            return Err(Error::KeyTooLong { len: self.len(), max: max_len });
        }
        Ok((hasher.hash_one(self), BytesProbe::new(self)))
    }
}

impl<'a> BytesProbe<'a> {
    // Always inlined: called, its 40-byte result came back through memory
    // and was read back wider than written.
    #[inline(always)]
    fn new(key: &'a [u8]) -> Self {
        if key.len() <= INLINE_MAX {
            BytesProbe { words: short_words(key), long: None }
        } else {
            let n = key.len();
            let first = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
            let last = u64::from_le_bytes(key[n - 8..].try_into().expect("8 bytes"));
            BytesProbe { words: [HEAP, first, last], long: Some(key) }
        }
    }
}

/// The three words of a key of at most 23 bytes stored inline: the 24
/// bytes `[2·len, key…, 0…]` as three little-endian numbers (numbers, not
/// memory: the same on every target). Computed from loads of the key
/// itself: writing the bytes into a stack array and reading it back as
/// words stalled every call (8-byte loads over narrower, unaligned stores;
/// seen with `perf annotate` on the C library's hot call).
///
/// Not inlined: its three words come back as three 8-byte stores, read as
/// such, and inlined it grew every keyed call enough that the Node addon
/// stopped inlining `Keyed::allow_at` (its hot call 2 ns slower).
#[inline(never)]
fn short_words(key: &[u8]) -> [u64; 3] {
    let n = key.len();
    debug_assert!(n <= INLINE_MAX);
    let first = (n as u64) << 1 | le_bytes(&key[..n.min(7)]) << 8;
    let second = if n > 7 { le_bytes(&key[7..n.min(15)]) } else { 0 };
    let third = if n > 15 { le_bytes(&key[15..]) } else { 0 };
    [first, second, third]
}

/// `bytes` (at most 8) as a little-endian number, with whole-width loads
/// that may overlap but never read outside `bytes`.
#[inline(always)]
fn le_bytes(bytes: &[u8]) -> u64 {
    let m = bytes.len();
    match m {
        8 => u64::from_le_bytes(bytes.try_into().expect("8 bytes")),
        4..=7 => {
            let lo = u64::from(u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")));
            let hi = u64::from(u32::from_le_bytes(bytes[m - 4..].try_into().expect("4 bytes")));
            lo | hi << ((m - 4) * 8)
        }
        1..=3 => {
            u64::from(bytes[0]) | u64::from(bytes[m / 2]) << (8 * (m / 2)) | u64::from(bytes[m - 1]) << (8 * (m - 1))
        }
        _ => 0,
    }
}

/// The byte-key storage: three words. A key of at most 23 bytes is inline
/// (see [`short_words`]). A longer key lives in a heap block: its first word
/// is the block's address with bit 0 set ([`HEAP`]), the other two its first
/// and last eight bytes (a filter: a probe follows the address only when
/// both agree).
///
/// # Reading a slot that is being reused
///
/// A lookup reads a slot's key words while another thread may forget the
/// key and write another one in its place, so the three words it reads may
/// belong to different keys. Only the first word decides whether there is
/// an address to follow, and it *is* the address: a word read once either
/// names a block or holds inline bytes, never a mix of the two. (With the
/// kind in one word and the address in another, a probe that read a long
/// key's kind and then a short key's bytes in their place followed those
/// bytes as an address: a segfault found by a hostile stress test.)
///
/// An address read from a slot, under an epoch guard, names a block that
/// stays allocated until the guard is dropped: a key's block is unlinked
/// from its slot (the word cleared, or overwritten by the next key) before
/// its free is deferred ([`retire`](StoredKey::retire)), and a migration's
/// copy of a key in the next table is freed the same way, only after the
/// old slot was marked moved, which lookups do not read keys from.
/// The address is stored with release and loaded with acquire, so the
/// block's bytes are visible to whoever reads the address.
#[doc(hidden)]
#[derive(Debug)]
pub enum ByteKey {}

impl private::SealedStored for ByteKey {}

/// A long key's heap block, 8-aligned: its length (a native-endian `u64`)
/// then its bytes. The block carries its own length so that a reader never
/// trusts anything else for how far it may read.
mod block {
    use std::alloc::Layout;

    /// Under loom, the blocks allocated and not yet freed: a read of any
    /// other address (a torn read taking a short key's bytes for a pointer,
    /// a block read after its free) fails the model instead of crashing it.
    #[cfg(ratomic_loom)]
    pub(super) static LIVE: std::sync::Mutex<std::collections::BTreeSet<usize>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(8 + len, 8).expect("a key's length is bounded by max_key_len")
    }

    /// Allocates a block for `key`; returns its address (8-aligned).
    pub(super) fn alloc(key: &[u8]) -> *mut u8 {
        let layout = layout(key.len());
        // SAFETY: the layout's size is at least 8.
        let ptr = unsafe { std::alloc::alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `ptr` is valid for `8 + len` bytes and 8-aligned.
        unsafe {
            ptr.cast::<u64>().write(key.len() as u64);
            std::ptr::copy_nonoverlapping(key.as_ptr(), ptr.add(8), key.len());
        }
        #[cfg(ratomic_loom)]
        LIVE.lock().unwrap_or_else(|e| e.into_inner()).insert(ptr as usize);
        ptr
    }

    /// The block's bytes.
    ///
    /// # Safety
    /// `ptr` must come from [`alloc`] and not be freed while the slice lives.
    pub(super) unsafe fn bytes<'a>(ptr: *const u8) -> &'a [u8] {
        #[cfg(ratomic_loom)]
        assert!(
            LIVE.lock().unwrap_or_else(|e| e.into_inner()).contains(&(ptr as usize)),
            "a key block read at {ptr:?}, which is not a live block"
        );
        // SAFETY: a block starts with its 8-byte length, then that many bytes.
        unsafe {
            let len = ptr.cast::<u64>().read() as usize;
            std::slice::from_raw_parts(ptr.add(8), len)
        }
    }

    /// Frees a block.
    ///
    /// # Safety
    /// `ptr` must come from [`alloc`], be freed once, and no longer be read.
    pub(super) unsafe fn free(ptr: *mut u8) {
        #[cfg(ratomic_loom)]
        assert!(
            LIVE.lock().unwrap_or_else(|e| e.into_inner()).remove(&(ptr as usize)),
            "a key block freed at {ptr:?}, which is not a live block"
        );
        // SAFETY: as above; allocated with this layout.
        unsafe {
            let len = ptr.cast::<u64>().read() as usize;
            std::alloc::dealloc(ptr, layout(len));
        }
    }

    /// A block's address as a slot's first key word: bit 0 set (the
    /// address is 8-aligned), its provenance exposed, to be recovered by
    /// [`from_word`].
    pub(super) fn to_word(ptr: *mut u8) -> u64 {
        ptr.expose_provenance() as u64 | super::HEAP
    }

    /// The block a heap key's first word names.
    pub(super) fn from_word(word: u64) -> *mut u8 {
        std::ptr::with_exposed_provenance_mut((word & !super::HEAP) as usize)
    }
}

/// A retired block's deferred free (the epoch runs it with the slot's word).
///
/// # Safety
/// As [`block::free`], for the block whose slot word `word` was.
unsafe fn free_block(word: usize) {
    // SAFETY: the caller's contract.
    unsafe { block::free(block::from_word(word as u64)) }
}

impl ByteKey {
    #[inline]
    fn is_heap(head: u64) -> bool {
        head & HEAP != 0
    }

    /// Calls `f` with the bytes of the key the words hold (at least as long
    /// as the caller's epoch guard: a heap block is freed through the epoch).
    /// For a slot nobody is rewriting (a locked one): an inline key's words
    /// are read one by one.
    fn with_bytes<R>(words: &[AtomicU64], f: impl FnOnce(&[u8]) -> R) -> R {
        let head = words[0].load(Ordering::Acquire);
        if Self::is_heap(head) {
            // SAFETY: the word names a live block (see the type's docs).
            f(unsafe { block::bytes(block::from_word(head)) })
        } else {
            let w = [head, words[1].load(Ordering::Relaxed), words[2].load(Ordering::Relaxed)];
            let mut all = [0u8; 24];
            for (i, x) in w.iter().enumerate() {
                all[i * 8..i * 8 + 8].copy_from_slice(&x.to_le_bytes());
            }
            let len = usize::from(all[0] >> 1).min(INLINE_MAX);
            f(&all[1..=len])
        }
    }
}

// SAFETY: `rehash` hashes the bytes `[u8]::probe` hashed; `store` allocates
// a block only for heap keys, which `retire`/`free` release exactly once.
unsafe impl StoredKey for ByteKey {
    const WORDS: usize = 3;
    const OWNS_HEAP: bool = true;
    type Probe<'a> = BytesProbe<'a>;

    // Always inlined: left to the compiler, the probe loops (`find`,
    // `verify`) called it out of line for every slot they compared (+76
    // instructions an insert, callgrind of `ops ratomic-insert-str16`).
    #[inline(always)]
    fn matches(words: &[AtomicU64], probe: &BytesProbe<'_>) -> bool {
        // For a long key, the one word that says whether there is a block,
        // and where.
        let head = words[0].load(Ordering::Relaxed);
        match probe.long {
            None => {
                head == probe.words[0]
                    && words[1].load(Ordering::Relaxed) == probe.words[1]
                    && words[2].load(Ordering::Relaxed) == probe.words[2]
            }
            Some(long) => {
                Self::is_heap(head)
                    && words[1].load(Ordering::Relaxed) == probe.words[1]
                    && words[2].load(Ordering::Relaxed) == probe.words[2]
                    && {
                        // Acquire, for `head`: the block's bytes were written
                        // before its address was stored (with release).
                        fence(Ordering::Acquire);
                        // SAFETY: `head` was read once and has HEAP set, so
                        // it is the address of a block stored in this slot
                        // (possibly of a newer key, if the slot is being
                        // rewritten: still a live block while the caller's
                        // guard lives, read within its own length; the
                        // caller validates the match).
                        unsafe { block::bytes(block::from_word(head)) == long }
                    }
            }
        }
    }

    fn store(words: &[AtomicU64], probe: &BytesProbe<'_>) {
        words[1].store(probe.words[1], Ordering::Relaxed);
        words[2].store(probe.words[2], Ordering::Relaxed);
        match probe.long {
            None => words[0].store(probe.words[0], Ordering::Relaxed),
            // Release: whoever reads the address reads the block's bytes.
            Some(long) => words[0].store(block::to_word(block::alloc(long)), Ordering::Release),
        }
    }

    #[inline]
    fn rehash<H: BuildHasher>(words: &[AtomicU64], hasher: &H) -> u64 {
        Self::with_bytes(words, |b| hasher.hash_one(b))
    }

    #[inline]
    fn heap_bytes(words: &[AtomicU64]) -> usize {
        let head = words[0].load(Ordering::Acquire);
        if Self::is_heap(head) {
            // SAFETY: the word names a live block (see the type's docs).
            unsafe { block::bytes(block::from_word(head)) }.len()
        } else {
            0
        }
    }

    #[inline]
    fn probe_heap_bytes(probe: &BytesProbe<'_>) -> usize {
        probe.long.map_or(0, <[u8]>::len)
    }

    fn retire(words: &[AtomicU64], guard: &epoch::Guard) {
        let head = words[0].load(Ordering::Relaxed);
        if Self::is_heap(head) {
            // Unlinked first, then deferred: the epoch frees a block only
            // after every thread pinned when its free was deferred, so no
            // thread may find the address in the slot after that.
            words[0].store(0, Ordering::Relaxed);
            // SAFETY: the block is unreachable from the slot now; the epoch
            // runs this after every thread pinned now has unpinned.
            unsafe { guard.defer(free_block, head as usize) };
        }
    }

    fn clear(words: &[AtomicU64]) {
        // An inline empty key: owns nothing.
        words[0].store(0, Ordering::Relaxed);
    }

    unsafe fn free(words: &[AtomicU64]) {
        let head = words[0].load(Ordering::Relaxed);
        if Self::is_heap(head) {
            // SAFETY: the caller's contract: nobody reads the key any more.
            unsafe { block::free(block::from_word(head)) };
        }
    }
}

#[cfg(all(test, not(ratomic_loom)))]
mod tests {
    use super::*;
    use foldhash::fast::FixedState;

    fn stored(key: &[u8]) -> (u64, [AtomicU64; 3]) {
        let h = FixedState::with_seed(7);
        let (hash, probe) = key.probe(&h, 1 << 20).unwrap();
        let words = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
        ByteKey::store(&words, &probe);
        (hash, words)
    }

    /// The 24 bytes as three little-endian numbers.
    fn words(b: &[u8; 24]) -> [u64; 3] {
        let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        [w(0), w(1), w(2)]
    }

    #[test]
    fn short_keys_make_the_words_of_a_plain_copy() {
        // Every length, and bytes that differ in every position (a swapped
        // or misplaced byte shows).
        let source: Vec<u8> = (1..=23).map(|i| i * 11).collect();
        for n in 0..=INLINE_MAX {
            let key = &source[..n];
            let mut plain = [0u8; 24];
            plain[0] = 2 * n as u8;
            plain[1..=n].copy_from_slice(key);
            assert_eq!(short_words(key), words(&plain), "length {n}");
        }
    }

    #[test]
    fn byte_keys_round_trip_and_match_exactly() {
        let h = FixedState::with_seed(7);
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            b"a".to_vec(),
            b"a\0".to_vec(),
            vec![0; 23],
            vec![0; 24],
            vec![7; 23],
            vec![7; 24],
            b"user:0123456789abcdef".to_vec(),
            (0..=255u8).collect(),
            [b"same-prefix".as_slice(), &[1; 40]].concat(),
            [b"same-prefix".as_slice(), &[2; 40]].concat(),
        ];
        for a in &keys {
            let (hash, words) = stored(a);
            ByteKey::with_bytes(&words, |b| assert_eq!(b, a.as_slice()));
            assert_eq!(ByteKey::rehash(&words, &h), hash);
            assert_eq!(ByteKey::heap_bytes(&words), if a.len() > INLINE_MAX { a.len() } else { 0 });
            for b in &keys {
                let (_, probe) = b.as_slice().probe(&h, 1 << 20).unwrap();
                assert_eq!(ByteKey::matches(&words, &probe), a == b, "{a:?} vs {b:?}");
            }
            // SAFETY: these words are this test's alone.
            unsafe { ByteKey::free(&words) };
        }
    }

    #[test]
    fn overlong_key_is_an_error() {
        let h = FixedState::with_seed(7);
        assert_eq!([0u8; 11].as_slice().probe(&h, 10).map(|_| ()), Err(Error::KeyTooLong { len: 11, max: 10 }));
        assert!([0u8; 10].as_slice().probe(&h, 10).is_ok());
    }
}
