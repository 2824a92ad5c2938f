//! Key types: how a key is hashed, compared and stored in a slot.
//!
//! Byte keys are stored inline when they are at most 23 bytes long (the
//! common case: user ids, IPs, API keys), so a slot is 24 bytes of key plus
//! 8 bytes of state, and looking an existing key up never allocates or
//! follows a pointer. Longer keys live on the heap; the slot keeps their
//! length and first eight bytes, so a probe rarely dereferences them.

use std::fmt;
use std::hash::BuildHasher;
use std::ptr::NonNull;

use crate::error::{Error, Result};

/// The key types a keyed limiter can be indexed by: `[u8]` (any bytes, the
/// default; `&str`, `String`, `Vec<u8>` and byte arrays pass as keys) or
/// `u64` (numeric ids, with the smallest slots).
///
/// Sealed: implemented here for `[u8]` and `u64`.
pub trait Key: private::Sealed {
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

impl AsKey<u64> for u64 {
    #[inline]
    fn as_key(&self) -> &u64 {
        self
    }
}

mod private {
    pub trait Sealed {}
    impl Sealed for [u8] {}
    impl Sealed for u64 {}
    /// Seals [`StoredKey`](super::StoredKey): its safety contract is the
    /// store's business, so no other crate implements it.
    pub trait SealedStored {}
    impl SealedStored for u64 {}
}

/// What a slot holds. `Probe` is a key prepared once per call for cheap
/// comparison against many slots.
///
/// # Safety
/// `size_of::<Self>()` must be a multiple of 8 and `align_of` at most 8
/// (slots are laid out in `u64` words), and `hash` must agree with the
/// `Key::probe` hash of the key it was made from.
pub unsafe trait StoredKey: private::SealedStored + Sized + Send + Sync + 'static {
    #[doc(hidden)]
    type Probe<'a>;
    #[doc(hidden)]
    fn matches(&self, probe: &Self::Probe<'_>) -> bool;
    #[doc(hidden)]
    fn from_probe(probe: &Self::Probe<'_>) -> Self;
    #[doc(hidden)]
    fn rehash<H: BuildHasher>(&self, hasher: &H) -> u64;
    /// Bytes this key holds outside its slot (0 for keys stored inline).
    #[doc(hidden)]
    fn heap_bytes(&self) -> usize;
    /// Bytes a key made from this probe would hold outside its slot.
    #[doc(hidden)]
    fn probe_heap_bytes(probe: &Self::Probe<'_>) -> usize;
}

// ---- u64 -------------------------------------------------------------------

impl Key for u64 {
    type Stored = u64;
    #[inline]
    fn probe<H: BuildHasher>(&self, hasher: &H, _max_len: usize) -> Result<(u64, u64)> {
        Ok((hasher.hash_one(*self), *self))
    }
}

// SAFETY: 8 bytes, align 8; `rehash` hashes the same u64 `probe` hashed.
unsafe impl StoredKey for u64 {
    type Probe<'a> = u64;
    #[inline]
    fn matches(&self, probe: &u64) -> bool {
        *self == *probe
    }
    #[inline]
    fn from_probe(probe: &u64) -> Self {
        *probe
    }
    #[inline]
    fn rehash<H: BuildHasher>(&self, hasher: &H) -> u64 {
        hasher.hash_one(*self)
    }
    #[inline]
    fn heap_bytes(&self) -> usize {
        0
    }
    #[inline]
    fn probe_heap_bytes(_: &u64) -> usize {
        0
    }
}

// ---- bytes -----------------------------------------------------------------

/// Longest key kept inline in a slot.
const INLINE_MAX: usize = 23;
/// First byte of a heap key's header word (an inline key's first byte is its
/// length, at most 23).
const HEAP_TAG: u8 = 0xFF;

/// A byte key prepared for lookup: the three words a slot would hold, plus
/// the bytes themselves when they are too long to inline.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct BytesProbe<'a> {
    words: [u64; 3],
    long: Option<&'a [u8]>,
}

impl Key for [u8] {
    type Stored = ByteKey;
    #[inline]
    fn probe<H: BuildHasher>(&self, hasher: &H, max_len: usize) -> Result<(u64, BytesProbe<'_>)> {
        if self.len() > max_len {
            return Err(Error::KeyTooLong { len: self.len(), max: max_len });
        }
        Ok((hasher.hash_one(self), BytesProbe::new(self)))
    }
}

impl<'a> BytesProbe<'a> {
    #[inline]
    fn new(key: &'a [u8]) -> Self {
        let mut bytes = [0u8; 24];
        if key.len() <= INLINE_MAX {
            bytes[0] = key.len() as u8;
            copy_short(key, &mut bytes);
            BytesProbe { words: words(&bytes), long: None }
        } else {
            // Header word: tag + length; second word: the first 8 bytes. The
            // third word (the heap pointer) is never compared.
            bytes[0] = HEAP_TAG;
            bytes[4..8].copy_from_slice(&(key.len() as u32).to_ne_bytes());
            bytes[8..16].copy_from_slice(&key[..8]);
            BytesProbe { words: words(&bytes), long: Some(key) }
        }
    }
}

/// `bytes[1..=key.len()] = key` for a key of at most 23 bytes, with
/// fixed-size (possibly overlapping) copies instead of a call to `memcpy`:
/// this runs on every call with a string key.
#[inline]
fn copy_short(key: &[u8], bytes: &mut [u8; 24]) {
    let n = key.len();
    debug_assert!(n <= INLINE_MAX);
    if n >= 8 {
        bytes[1..9].copy_from_slice(&key[..8]);
        if n > 16 {
            bytes[9..17].copy_from_slice(&key[8..16]);
        }
        bytes[n - 7..n + 1].copy_from_slice(&key[n - 8..]);
    } else if n >= 4 {
        bytes[1..5].copy_from_slice(&key[..4]);
        bytes[n - 3..n + 1].copy_from_slice(&key[n - 4..]);
    } else {
        for (i, &b) in key.iter().enumerate() {
            bytes[1 + i] = b;
        }
    }
}

#[inline]
fn words(b: &[u8; 24]) -> [u64; 3] {
    let w = |i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
    [w(0), w(1), w(2)]
}

/// A byte key as a slot stores it: 24 bytes, inline up to 23 bytes long,
/// otherwise a header, an 8-byte prefix and an owning pointer.
#[doc(hidden)]
#[repr(C)]
pub union ByteKey {
    /// An inline key: its length byte and up to 23 bytes. Also the view
    /// every key is compared through (a heap key's header word, whose first
    /// byte is [`HEAP_TAG`], never equals an inline key's).
    words: [u64; 3],
    heap: HeapKey,
}

/// A key longer than 23 bytes: header (tag + length), first 8 bytes, and
/// the owned bytes (a `Box<[u8]>` as a raw pointer, keeping its provenance).
#[derive(Clone, Copy)]
#[repr(C)]
struct HeapKey {
    header: u64,
    prefix: u64,
    ptr: NonNull<u8>,
}

impl fmt::Debug for ByteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ByteKey").field(&self.bytes()).finish()
    }
}

impl ByteKey {
    /// The first word, the same in both forms.
    #[inline]
    fn header(&self) -> u64 {
        // SAFETY: both forms begin with an initialised u64 (all bytes are
        // initialised in either form).
        unsafe { self.words[0] }
    }

    #[inline]
    fn is_heap(&self) -> bool {
        self.header().to_ne_bytes()[0] == HEAP_TAG
    }

    fn heap_len(&self) -> usize {
        let b = self.header().to_ne_bytes();
        u32::from_ne_bytes(b[4..8].try_into().unwrap()) as usize
    }

    /// The key's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        if self.is_heap() {
            // SAFETY: a heap ByteKey owns a live allocation of `heap_len`
            // bytes at `heap.ptr` (made by `from_probe`, freed only by Drop).
            unsafe { std::slice::from_raw_parts(self.heap.ptr.as_ptr(), self.heap_len()) }
        } else {
            // SAFETY: an inline key is 24 initialised bytes; its length byte is ≤ 23.
            let all: &[u8; 24] = unsafe { &*(self.words.as_ptr() as *const [u8; 24]) };
            &all[1..=all[0] as usize]
        }
    }
}

impl private::SealedStored for ByteKey {}

// SAFETY: 24 bytes, align 8, `#[repr(C)]`; `rehash` hashes the same bytes
// `[u8]::probe` hashed. The heap pointer is uniquely owned, so sending and
// sharing a ByteKey is sending and sharing a `Box<[u8]>`.
unsafe impl StoredKey for ByteKey {
    type Probe<'a> = BytesProbe<'a>;

    #[inline]
    fn matches(&self, probe: &BytesProbe<'_>) -> bool {
        match probe.long {
            // SAFETY: every bit of either form is initialised; comparing a
            // heap key's words to an inline probe's is false at the header.
            None => unsafe { self.words == probe.words },
            Some(long) => {
                // SAFETY: as above; the heap view is read only for heap keys.
                self.is_heap() && unsafe { self.heap.prefix == probe.words[1] } && self.bytes() == long
            }
        }
    }

    fn from_probe(probe: &BytesProbe<'_>) -> Self {
        match probe.long {
            None => ByteKey { words: probe.words },
            Some(long) => {
                let raw = Box::into_raw(Box::<[u8]>::from(long)).cast::<u8>();
                // SAFETY: `Box::into_raw` never returns null.
                let ptr = unsafe { NonNull::new_unchecked(raw) };
                ByteKey { heap: HeapKey { header: probe.words[0], prefix: probe.words[1], ptr } }
            }
        }
    }

    #[inline]
    fn rehash<H: BuildHasher>(&self, hasher: &H) -> u64 {
        hasher.hash_one(self.bytes())
    }
    #[inline]
    fn heap_bytes(&self) -> usize {
        if self.is_heap() {
            self.heap_len()
        } else {
            0
        }
    }
    #[inline]
    fn probe_heap_bytes(probe: &BytesProbe<'_>) -> usize {
        probe.long.map_or(0, <[u8]>::len)
    }
}

impl Drop for ByteKey {
    fn drop(&mut self) {
        if self.is_heap() {
            let len = self.heap_len();
            // SAFETY: a heap key (checked above) holds its `HeapKey` form.
            let ptr = unsafe { self.heap.ptr.as_ptr() };
            // SAFETY: made by `Box::into_raw` of a `[u8]` of `len` bytes in
            // `from_probe`; dropped exactly once, here.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
        }
    }
}

// SAFETY: see `StoredKey for ByteKey`.
unsafe impl Send for ByteKey {}
// SAFETY: shared access only reads the owned bytes.
unsafe impl Sync for ByteKey {}

#[cfg(test)]
mod tests {
    use super::*;
    use foldhash::fast::FixedState;

    fn stored(key: &[u8]) -> (u64, ByteKey) {
        let h = FixedState::with_seed(7);
        let (hash, probe) = key.probe(&h, 1 << 20).unwrap();
        (hash, ByteKey::from_probe(&probe))
    }

    #[test]
    fn short_keys_copy_like_a_plain_copy() {
        let source: Vec<u8> = (1..=23).collect();
        for n in 0..=INLINE_MAX {
            let key = &source[..n];
            let mut fast = [0u8; 24];
            copy_short(key, &mut fast);
            let mut plain = [0u8; 24];
            plain[1..=n].copy_from_slice(key);
            assert_eq!(fast, plain, "length {n}");
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
            let (hash, s) = stored(a);
            assert_eq!(s.bytes(), a.as_slice());
            assert_eq!(s.rehash(&h), hash);
            for b in &keys {
                let (_, probe) = b.as_slice().probe(&h, 1 << 20).unwrap();
                assert_eq!(s.matches(&probe), a == b, "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn overlong_key_is_an_error() {
        let h = FixedState::with_seed(7);
        assert_eq!([0u8; 11].as_slice().probe(&h, 10).map(|_| ()), Err(Error::KeyTooLong { len: 11, max: 10 }));
        assert!([0u8; 10].as_slice().probe(&h, 10).is_ok());
    }

    #[test]
    fn slots_are_compact() {
        assert_eq!(std::mem::size_of::<ByteKey>(), 24);
    }
}
