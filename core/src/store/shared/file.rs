//! The shared store's file, mapping, header and owner ids (see `mod.rs`).

use std::ffi::CString;
use std::hash::BuildHasher;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::AtomicU32;

use super::table::{self, Ctx, Region, Table, CREDIT_STRIDE};
use crate::error::{Error, Result};
use crate::key::StoredKey;
use crate::store::{Cells, Credit, Eviction, Frozen, Options, Retention, MAX_WIDTH};
use crate::sync::{AtomicU64, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"RATOMSHM");
/// Bumped whenever the layout or the protocol changes (2: credit counters).
const VERSION: u64 = 2;
const HEADER_WORDS: usize = H_CREDITS + 16 * CREDIT_STRIDE;
// The slots start on a cache line.
const _: () = assert!(HEADER_WORDS % 8 == 0);
const H_MAGIC: usize = 0;
const H_VERSION: usize = 1;
const H_READY: usize = 2;
const H_RULE: usize = 3;
const H_BOOT: usize = 4; // and 5
const H_CAP: usize = 6;
const H_WIDTH: usize = 7;
const H_SEED: usize = 8; // and 9
const H_BYTES: usize = 10;
const H_CELLS: usize = 11;
const H_MAX_KEYS: usize = 12;
// The two words every process writes, each on its own cache line.
const H_LIVE: usize = 16;
const H_SWEEPER: usize = 24;
/// The keys' credit counters (see `store::cells::Mark`): 16 stripes, each on a
/// cache line of its own, so a refund in one process does not make every
/// other process's multi-limit calls miss.
const H_CREDITS: usize = 32;

/// This process's owner id: pid (22 bits, Linux's `pid_max` bound) and 10
/// bits of its start time, so a dead owner's reused pid is told apart from
/// it (1023 times in 1024). Cleared in a forked child.
static OWNER: AtomicU32 = AtomicU32::new(0);

extern "C" fn forget_owner() {
    OWNER.store(0, std::sync::atomic::Ordering::Relaxed);
}

fn start_tag(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22 (starttime), counted after the command name's ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let start: u64 = rest.split(' ').nth(19)?.parse().ok()?;
    Some((start.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as u32)
}

fn me() -> u32 {
    let o = OWNER.load(std::sync::atomic::Ordering::Relaxed);
    if o != 0 {
        return o;
    }
    static ATFORK: std::sync::Once = std::sync::Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(forget_owner)) };
    });
    let pid = std::process::id();
    // pid ≥ 1, so the id is never 0.
    let o = (pid << 10) | start_tag(pid).unwrap_or(0);
    OWNER.store(o, std::sync::atomic::Ordering::Relaxed);
    o
}

/// Whether the process `o` names may still run: false only when it is gone.
fn alive(o: u32) -> bool {
    let pid = o >> 10;
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    // It exists (or we may not signal it): is it the same process, or a
    // later one that reused the pid? A zombie is dead too.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) if stat.rfind(')').and_then(|at| stat.get(at + 2..at + 3)) == Some("Z") => false,
        _ => start_tag(pid).is_none_or(|tag| tag == o & 0x3ff),
    }
}

/// The mapped file.
struct Map {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is only read and written through atomics.
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: mapped in `open` with this length; no reference outlives the store.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

impl Map {
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page-aligned, `len` bytes long (a multiple
        // of 8), shared memory that every process only accesses atomically.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<AtomicU64>(), self.len / 8) }
    }
}

/// A store in a file shared between processes.
pub(crate) struct SharedStore {
    map: Map,
    width: usize,
    cap: usize,
    cells: usize,
    max_keys: usize,
    strict: bool,
    keys: SipKeys,
}

/// SipHash-1-3 under a 128-bit key, as a [`BuildHasher`].
#[derive(Clone, Copy)]
pub(crate) struct SipKeys(u64, u64);

impl BuildHasher for SipKeys {
    type Hasher = siphasher::sip::SipHasher13;
    #[inline]
    fn build_hasher(&self) -> Self::Hasher {
        siphasher::sip::SipHasher13::new_with_keys(self.0, self.1)
    }
}

fn err(path: &Path, reason: impl Into<String>) -> Error {
    Error::invalid("shared_file", path.display(), reason.into())
}

fn boot_id() -> [u64; 2] {
    let s = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hex: String = s.chars().filter(char::is_ascii_hexdigit).collect();
    let a = u64::from_str_radix(hex.get(..16).unwrap_or("0"), 16).unwrap_or(0);
    let b = u64::from_str_radix(hex.get(16..32).unwrap_or("0"), 16).unwrap_or(0);
    [a, b]
}

/// FNV-1a: stable across builds and processes (the header's fingerprint
/// of the rule must be).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// 128 random bits for the fingerprints' key.
fn random_key() -> Result<(u64, u64)> {
    let mut buf = [0u8; 16];
    // SAFETY: `buf` is writable for its length.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        return Err(Error::invalid("shared_file", "getrandom", "the kernel gave no random bytes"));
    }
    Ok((u64::from_le_bytes(buf[..8].try_into().unwrap()), u64::from_le_bytes(buf[8..].try_into().unwrap())))
}

/// An open descriptor, unlocked and closed when dropped. Unlocked first:
/// a flock belongs to the open file description, which a mapping of the
/// file keeps alive after the descriptor is closed.
struct Fd(libc::c_int);
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: a descriptor this module opened and owns.
        unsafe {
            libc::flock(self.0, libc::LOCK_UN);
            libc::close(self.0);
        }
    }
}

impl SharedStore {
    /// Opens (creating if needed) the store at `path` for `width` state
    /// words per key of type `S`, enforcing what `describe` names.
    pub(crate) fn open<S: StoredKey>(
        path: &Path,
        options: &Options,
        width: usize,
        describe: &str,
        retention: &impl Retention,
    ) -> Result<Self> {
        options.validate()?;
        let max_keys = options.max_keys;
        let cap = max_keys
            .checked_mul(2)
            .filter(|&c| c <= 1 << 36)
            .ok_or_else(|| Error::invalid("max_keys", max_keys, "must be at most 2^35 for a shared_file store"))?;
        let cap = cap.max(table::WINDOW);
        let cells = Table::cells_for(max_keys);
        let bytes = (HEADER_WORDS + Table::slot_words(cap, width) + cells * width) * 8;
        let strict = options.eviction == Eviction::Strict;
        let rule =
            fnv(format!("{describe}|{width}|{}|{max_keys}|{:?}", std::any::type_name::<S>(), options.eviction)
                .as_bytes());
        let cpath = CString::new(path.as_os_str().as_bytes()).map_err(|_| err(path, "contains a NUL byte"))?;
        // SAFETY: a valid C string; flags and mode are plain integers.
        let fd = unsafe {
            libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC, 0o600)
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ELOOP) {
                return Err(err(path, "is a symbolic link; give the file's real path"));
            }
            return Err(err(path, format!("cannot be opened: {e}")));
        }
        let fd = Fd(fd);
        // SAFETY: `fd` is open; the kernel drops a flock when its holder dies.
        if unsafe { libc::flock(fd.0, libc::LOCK_EX) } != 0 {
            return Err(err(path, format!("cannot be locked: {}", std::io::Error::last_os_error())));
        }
        // SAFETY: a zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` writable.
        if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
            return Err(err(path, format!("cannot be read: {}", std::io::Error::last_os_error())));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(err(path, "is not a regular file"));
        }
        // SAFETY: no preconditions.
        if st.st_uid != unsafe { libc::geteuid() } {
            return Err(err(path, "is owned by another user; every process sharing it must run as its owner"));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(err(path, "can be read or written by other users (mode must be 0600)"));
        }
        let fresh = st.st_size == 0;
        if fresh {
            // SAFETY: `fd` is open for writing; the new bytes read as zeros
            // (sparse: pages are allocated when first written).
            if unsafe { libc::ftruncate(fd.0, bytes as libc::off_t) } != 0 {
                return Err(err(path, format!("cannot be sized: {}", std::io::Error::last_os_error())));
            }
        } else if (st.st_size as u64) < (HEADER_WORDS * 8) as u64 || st.st_size % 8 != 0 {
            return Err(err(path, "is truncated or not a ratomic shared store"));
        }
        let len = if fresh { bytes } else { st.st_size as usize };
        // SAFETY: maps `len` bytes of an open regular file, shared, read-write.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.0, 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(err(path, format!("cannot be mapped: {}", std::io::Error::last_os_error())));
        }
        let map = Map { ptr: ptr.cast(), len };
        let h = map.words();
        let boot = boot_id();
        let ready = h[H_READY].load(Ordering::Acquire) == 1;
        let magic = h[H_MAGIC].load(Ordering::Relaxed);
        if fresh || (!ready && (magic == MAGIC || magic == 0) && len == bytes) {
            // New, or its creator died before it was ready: nobody used it.
            for w in h {
                w.store(0, Ordering::Relaxed);
            }
            let keys = random_key()?;
            let mut pristine = [0u64; MAX_WIDTH];
            retention.pristine(&mut pristine[..width]);
            let floor_at = HEADER_WORDS + Table::slot_words(cap, width);
            for (k, w) in h[floor_at..].iter().enumerate() {
                w.store(pristine[k % width], Ordering::Relaxed);
            }
            h[H_MAGIC].store(MAGIC, Ordering::Relaxed);
            h[H_VERSION].store(VERSION, Ordering::Relaxed);
            h[H_RULE].store(rule, Ordering::Relaxed);
            h[H_BOOT].store(boot[0], Ordering::Relaxed);
            h[H_BOOT + 1].store(boot[1], Ordering::Relaxed);
            h[H_CAP].store(cap as u64, Ordering::Relaxed);
            h[H_WIDTH].store(width as u64, Ordering::Relaxed);
            h[H_SEED].store(keys.0, Ordering::Relaxed);
            h[H_SEED + 1].store(keys.1, Ordering::Relaxed);
            h[H_BYTES].store(bytes as u64, Ordering::Relaxed);
            h[H_CELLS].store(cells as u64, Ordering::Relaxed);
            h[H_MAX_KEYS].store(max_keys as u64, Ordering::Relaxed);
            h[H_READY].store(1, Ordering::Release);
        } else {
            if magic != MAGIC {
                return Err(err(path, "is not a ratomic shared store (bad magic number)"));
            }
            if h[H_VERSION].load(Ordering::Relaxed) != VERSION {
                return Err(err(path, "was made by another version of ratomic (its layout differs); remove it"));
            }
            if h[H_BYTES].load(Ordering::Relaxed) != len as u64 {
                return Err(err(path, "is truncated or corrupt (its size differs from its header's)"));
            }
            if [h[H_BOOT].load(Ordering::Relaxed), h[H_BOOT + 1].load(Ordering::Relaxed)] != boot {
                return Err(err(path, "was made before the host last booted (its times mean nothing now); remove it"));
            }
            if h[H_RULE].load(Ordering::Relaxed) != rule
                || h[H_CAP].load(Ordering::Relaxed) != cap as u64
                || h[H_WIDTH].load(Ordering::Relaxed) != width as u64
                || h[H_CELLS].load(Ordering::Relaxed) != cells as u64
                || len != bytes
            {
                return Err(err(
                    path,
                    "is in use with a different rule, key type, max_keys or eviction policy; every process sharing \
                     it must build the same limiter",
                ));
            }
        }
        let keys = SipKeys(h[H_SEED].load(Ordering::Relaxed), h[H_SEED + 1].load(Ordering::Relaxed));
        // Unlocks and closes the file; the mapping stays.
        drop(fd);
        Ok(SharedStore { map, width, cap, cells, max_keys, strict, keys })
    }

    #[inline]
    fn table(&self) -> Table<'_> {
        let w = self.map.words();
        let floor_at = HEADER_WORDS + Table::slot_words(self.cap, self.width);
        Table::with_sizes(
            Region {
                slots: &w[HEADER_WORDS..floor_at],
                floor: &w[floor_at..floor_at + self.cells * self.width],
                live: &w[H_LIVE],
                sweeper: &w[H_SWEEPER],
                credits: &w[H_CREDITS..HEADER_WORDS],
            },
            self.cap,
            self.cells,
            self.width,
            self.max_keys,
            self.strict,
        )
    }

    /// The hasher of keys: SipHash-1-3 under the file's secret 128-bit key,
    /// the same in every process that opens the file, so a key's hash is its
    /// fingerprint there (with bit 0 set: never 0), and no caller can choose
    /// keys that collide with another's.
    #[inline]
    pub(crate) fn hasher(&self) -> &SipKeys {
        &self.keys
    }

    fn run<R>(&self, f: impl FnOnce(&Ctx<'_>) -> Result<R, table::Killed>) -> R {
        let ctx = Ctx { me: me(), alive: &alive };
        match f(&ctx) {
            Ok(r) => r,
            Err(table::Killed) => unreachable!("only models stop a thread"),
        }
    }

    /// See [`Store::update`](super::super::Store::update).
    #[inline]
    pub(crate) fn update<const MARK: bool, R>(
        &self,
        hash: u64,
        now: u64,
        retention: &impl Retention,
        mut op: impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
    ) -> R {
        let mut op = |cells: &mut Cells<'_>| sane(cells, &mut op);
        self.run(|ctx| self.table().update::<MARK, R>(ctx, hash | 1, now, retention, &mut op))
    }

    /// See [`Store::update_locked`](super::super::Store::update_locked).
    pub(crate) fn update_locked<R>(
        &self,
        hash: u64,
        now: u64,
        retention: &impl Retention,
        credit: Credit,
        mut op: impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
    ) -> Option<R> {
        let mut op = |cells: &mut Cells<'_>| sane(cells, &mut op);
        self.run(|ctx| self.table().credit(ctx, hash | 1, now, retention, credit, &mut op))
    }

    /// Makes the key a full bucket.
    pub(crate) fn reset(&self, hash: u64, now: u64, retention: &impl Retention) {
        self.run(|ctx| self.table().reset(ctx, hash | 1, now, retention));
    }

    /// Forgets every key idle at `now`; recounts.
    pub(crate) fn gc(&self, now: u64, retention: &impl Retention) -> usize {
        self.run(|ctx| self.table().gc(ctx, now, retention))
    }

    /// Keys held (a scan of the table).
    pub(crate) fn len(&self) -> usize {
        self.table().count()
    }

    /// The file's size (its pages are allocated as keys land on them).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.map.len
    }

    /// Fingerprints of the keys held (tests: none twice).
    pub(crate) fn fingerprints(&self) -> Vec<u64> {
        self.table().fingerprints()
    }
}

/// Runs `op`; a state word holding a marker value (which the shared store
/// never writes: only a corrupted file has one) is set back to a full
/// bucket's and the operation runs again, so a corrupt word cannot stop a
/// call forever.
#[inline]
fn sane<R>(cells: &mut Cells<'_>, op: &mut impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>) -> Result<R, Frozen> {
    loop {
        match op(cells) {
            Ok(r) => return Ok(r),
            Err(Frozen) => {
                cells.undo();
                cells.clear_markers();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::algorithm::charge_in;
    use crate::{Gcra, Quota, Rate};

    impl SharedStore {
        /// The sum of the header's credit counters.
        fn credits(&self) -> u64 {
            let w = self.map.words();
            (H_CREDITS..HEADER_WORDS).step_by(CREDIT_STRIDE).map(|i| w[i].load(Ordering::Relaxed)).sum()
        }
    }

    /// As in the in-memory store: an eviction of a key that is not idle
    /// moves its credit counter (it may come back fuller than it left, see
    /// `store::cells::Mark`); forgetting idle keys does not.
    #[test]
    fn evicting_a_key_that_is_not_idle_moves_the_credit_counter_and_forgetting_idle_keys_does_not() {
        let gcra = Gcra::new(Quota::from_rate(Rate::new(3, Duration::from_nanos(30)).unwrap()).unwrap());
        let path = std::env::temp_dir().join(format!("ratomic-credits-{}.shm", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let store =
            SharedStore::open::<u64>(&path, &Options::default().max_keys(16), 1, "credits test", &gcra).unwrap();
        let call =
            |hash: u64| store.update::<false, _>(hash, 0, &gcra, |cells| Ok(charge_in(&gcra, cells, 0, 0, 1)?.0));
        let hashes: Vec<u64> = (1..=17u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
        // 16 keys, each one token down at time 0: none is idle.
        for &h in &hashes[..16] {
            assert!(call(h).allowed);
        }
        assert_eq!((store.len(), store.credits()), (16, 0));
        assert!(call(hashes[16]).allowed, "a new key gets in by evicting");
        let evicted = 17 - store.len() as u64;
        assert!(evicted >= 1);
        assert_eq!(store.credits(), evicted, "one bump per key evicted");
        // Much later every key is idle: forgetting them all bumps nothing.
        assert!(store.gc(1_000_000, &gcra) > 0);
        assert_eq!(store.credits(), evicted);
        drop(store);
        let _ = std::fs::remove_file(&path);
    }
}
