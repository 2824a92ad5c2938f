//! The shared store's file: opening it (never waiting without a bound),
//! its layout and header, the backing store reserved before the table
//! writes, and owner ids (see `mod.rs`).

use std::ffi::CString;
use std::hash::BuildHasher;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use super::table::{self, Backed, Ctx, Halt, Region, Table, CREDIT_STRIDE};
use crate::error::{Error, Result};
use crate::store::key::StoredKey;
use crate::store::{Cells, Credit, Eviction, Frozen, Options, Retention, MAX_WIDTH};
use crate::sync::{AtomicU64, Ordering};

const MAGIC: u64 = u64::from_le_bytes(*b"RATOMSHM");
/// Bumped whenever the layout or the protocol changes (2: credit counters;
/// 3: a 4 KiB header with the limiter's description, the backing bitmap,
/// the maintenance hand instead of the sweeper word).
const VERSION: u64 = 3;
/// The header: one 4 KiB block, read whole (`pread`) to inspect a file.
const HEADER_BYTES: usize = 4096;
const HEADER_WORDS: usize = HEADER_BYTES / 8;
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
/// Bytes per chunk of backing store (the page size).
const H_CHUNK: usize = 13;
// The two words every process writes, each on its own cache line.
const H_LIVE: usize = 16;
const H_HAND: usize = 24;
/// The keys' credit counters (see `store::cells::Mark`): 16 stripes, each on
/// a cache line of its own, so a refund in one process does not make every
/// other process's multi-limit calls miss.
const H_CREDITS: usize = 32;
const H_CREDITS_END: usize = H_CREDITS + 16 * CREDIT_STRIDE;
/// The length in bytes of the limiter's description, which follows: what a
/// process that builds another limiter on the file is told it is in use
/// with.
const H_LABEL: usize = H_CREDITS_END;
const LABEL_AT: usize = (H_LABEL + 1) * 8;
const _: () = assert!(LABEL_AT + 1024 < HEADER_BYTES);

/// The most a process waits for another to release the file's opening
/// lock, which is held only while a process checks or initialises the
/// header (microseconds): a holder that keeps it this long is stopped or
/// hung, and the opener fails with an error naming it.
pub(crate) const OPEN_WAIT: Duration = Duration::from_secs(5);

/// How long an opener that would make the file anew waits for its last
/// users to let go (see `SharedStore::unused`).
const UNUSED_WAIT: Duration = Duration::from_millis(100);

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

/// Process `pid` for a message: "process 1234 (python3)", and ", which is
/// stopped" when it is (SIGSTOP, or a debugger's).
pub(crate) fn who(pid: u32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let comm = comm.trim();
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').and_then(|at| s.get(at + 2..at + 3)).map(str::to_owned));
    let mut out = format!("process {pid}");
    if !comm.is_empty() {
        out += &format!(" ({comm})");
    }
    if matches!(state.as_deref(), Some("T" | "t")) {
        out += ", which is stopped";
    }
    out
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

/// An open descriptor, closed when dropped — never unlocked explicitly: its
/// users' lock (see `open`) belongs to the open file description, which a
/// forked child's descriptor and every mapping of the file share, and must
/// last as long as any of them.
struct Fd(libc::c_int);
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: a descriptor this module opened and owns.
        unsafe { libc::close(self.0) };
    }
}

/// Where the file's parts lie, from `max_keys`, the state words per key and
/// the chunk size (see `mod.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    max_keys: usize,
    cap: usize,
    cells: usize,
    width: usize,
    /// Bytes per chunk of backing store (the page size).
    chunk: usize,
    /// Bytes before the slots: the header, the bitmap, padding to a chunk.
    slots_at: usize,
    slot_bytes: usize,
    floor_at: usize,
    bytes: usize,
}

impl Layout {
    fn new(max_keys: usize, width: usize, chunk: usize) -> Result<Self> {
        let cap = max_keys
            .checked_mul(2)
            .filter(|&c| c <= 1 << 36)
            .ok_or_else(|| Error::invalid("max_keys", max_keys, "must be at most 2^35 for a shared_file store"))?;
        let cap = cap.max(table::WINDOW);
        let cells = Table::cells_for(max_keys);
        let slot_bytes = Table::slot_words(cap, width) * 8;
        let bitmap_bytes = slot_bytes.div_ceil(chunk).div_ceil(64) * 8;
        let slots_at = (HEADER_BYTES + bitmap_bytes).next_multiple_of(chunk);
        let floor_at = slots_at + slot_bytes;
        let bytes = floor_at + cells * width * 8;
        Ok(Layout { max_keys, cap, cells, width, chunk, slots_at, slot_bytes, floor_at, bytes })
    }

    /// Words of the backing bitmap (which follows the header).
    fn bitmap_words(&self) -> usize {
        self.slot_bytes.div_ceil(self.chunk).div_ceil(64)
    }
}

/// A store in a file shared between processes.
pub(crate) struct SharedStore {
    map: Map,
    fd: Fd,
    path: PathBuf,
    lay: Layout,
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

fn os_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn boot_id() -> [u64; 2] {
    let s = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hex: String = s.chars().filter(char::is_ascii_hexdigit).collect();
    let a = u64::from_str_radix(hex.get(..16).unwrap_or("0"), 16).unwrap_or(0);
    let b = u64::from_str_radix(hex.get(16..32).unwrap_or("0"), 16).unwrap_or(0);
    [a, b]
}

fn page_size() -> usize {
    // SAFETY: no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(p).ok().filter(|p| p.is_power_of_two() && *p >= 4096).unwrap_or(4096)
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

fn fstat(fd: &Fd, path: &Path) -> Result<libc::stat> {
    // SAFETY: a zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` writable.
    if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
        return Err(err(path, format!("cannot be read: {}", os_err())));
    }
    Ok(st)
}

/// The checks that need no lock: a regular file, ours, private.
fn check_owner(path: &Path, st: &libc::stat) -> Result<()> {
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
    Ok(())
}

/// The users' lock: an open-file-description lock (`F_OFD_SETLK`, never
/// waiting) on byte 0 of the file, shared by every process using the file
/// (`F_RDLCK`), taken exclusively (`F_WRLCK`) only to make the file anew.
/// The kernel drops it when the last descriptor or mapping of the open
/// file description goes (a process's exit, or a forked child's too, which
/// shares it). Converting between the two is atomic. It does not interact
/// with `flock` (the opening lock).
fn users_lock(fd: &Fd, kind: libc::c_int) -> std::io::Result<()> {
    // SAFETY: a zeroed `flock` is valid; the fields set below are all the
    // call reads (`l_pid` must be 0 for OFD locks).
    let mut lk: libc::flock = unsafe { std::mem::zeroed() };
    lk.l_type = kind as libc::c_short;
    lk.l_whence = libc::SEEK_SET as libc::c_short;
    lk.l_start = 0;
    lk.l_len = 1;
    // SAFETY: `fd` is open and `lk` a valid lock description.
    if unsafe { libc::fcntl(fd.0, libc::F_OFD_SETLK, &lk) } == 0 {
        Ok(())
    } else {
        Err(os_err())
    }
}

/// The opening lock (`flock(LOCK_EX)`, the one every ratomic version takes
/// to open the file), held while this process checks or initialises the
/// header; released when dropped (and by the kernel if the process dies).
struct Opening<'a>(&'a Fd);

impl<'a> Opening<'a> {
    /// Takes the opening lock, waiting at most [`OPEN_WAIT`] for whoever
    /// holds it (an error naming the holder, if known, and what to do).
    fn take(fd: &'a Fd, path: &Path, st: &libc::stat) -> Result<Self> {
        let start = Instant::now();
        let mut pause = Duration::from_micros(200);
        loop {
            // SAFETY: `fd` is open.
            if unsafe { libc::flock(fd.0, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Opening(fd));
            }
            let e = os_err();
            if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(err(path, format!("cannot be locked: {e}")));
            }
            if start.elapsed() >= OPEN_WAIT {
                let whom = match flock_holder(st) {
                    Some(pid) => format!(
                        "{} has held its opening lock for over {} s (opening takes microseconds); resume it \
                         (`kill -CONT {pid}`) or end it, then try again",
                        who(pid),
                        OPEN_WAIT.as_secs()
                    ),
                    None => format!(
                        "another process has held its opening lock for over {} s (opening takes microseconds); \
                         `fuser -v {}` lists the processes that have it open: resume or end the stuck one, then try \
                         again",
                        OPEN_WAIT.as_secs(),
                        path.display()
                    ),
                };
                return Err(err(path, format!("cannot be opened: {whom}")));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        // SAFETY: `fd` is open; the lock is ours (a mapping keeps the open
        // file description, and with it the lock, alive: unlock it).
        unsafe { libc::flock(self.0 .0, libc::LOCK_UN) };
    }
}

/// The process holding a `flock` on the file `st` describes exclusively,
/// from `/proc/locks` (the opening lock's holder).
fn flock_holder(st: &libc::stat) -> Option<u32> {
    let dev = format!("{:02x}:{:02x}:{}", libc::major(st.st_dev), libc::minor(st.st_dev), st.st_ino);
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().filter(|l| !l.contains("->")).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&"FLOCK") && f.get(3) == Some(&"WRITE") && f.get(5) == Some(&dev.as_str()))
            .then(|| f.get(4)?.parse().ok())?
    })
}

/// The header as it stands, if the file holds one whole (by `pread`, so a
/// short file is never touched through a mapping).
fn read_header(fd: &Fd) -> Option<Box<[u64; HEADER_WORDS]>> {
    let mut h = Box::new([0u64; HEADER_WORDS]);
    // SAFETY: `h` is writable for HEADER_BYTES bytes.
    let n = unsafe { libc::pread(fd.0, h.as_mut_ptr().cast(), HEADER_BYTES, 0) };
    (n == HEADER_BYTES as isize).then(|| {
        for w in h.iter_mut() {
            *w = u64::from_le(*w);
        }
        h
    })
}

/// The limiter a header describes.
fn label_of(h: &[u64; HEADER_WORDS]) -> String {
    let len = (h[H_LABEL] as usize).min(HEADER_BYTES - LABEL_AT);
    let bytes: Vec<u8> = h[H_LABEL + 1..].iter().flat_map(|w| w.to_le_bytes()).take(len).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// What an opener finds in the file.
enum Found {
    /// Ready, for this very limiter.
    Ours,
    /// Nothing (new), or a ratomic file nobody can be using as it stands
    /// (its creator died before it was ready, it was made before the host
    /// last booted, it was truncated): why.
    Unusable(&'static str),
    /// Ready, for another limiter: that limiter's description.
    Other(String),
}

impl SharedStore {
    /// Opens (creating if needed) the store at `path` for `width` state
    /// words per key of type `S`, enforcing what `describe` names (`label`:
    /// the same, for people).
    ///
    /// The steps, none of which waits without a bound: open the file
    /// (`O_NOFOLLOW`, `O_NONBLOCK`, created 0600); check it is a regular
    /// file of ours that nobody else can read — before any lock, so another
    /// user's file cannot make us wait; take the opening lock (`flock`,
    /// waited for at most [`OPEN_WAIT`]); inspect the header (`pread`);
    /// join the file's users (a shared OFD lock, held as long as the file
    /// is mapped or open in any process: see [`users_lock`]) if it is ready
    /// for this limiter, or else — if no process holds the users' lock,
    /// which the kernel drops when the last of them exits — make it anew
    /// for this limiter.
    pub(crate) fn open<S: StoredKey>(
        path: &Path,
        options: &Options,
        width: usize,
        describe: &str,
        label: &str,
        retention: &impl Retention,
    ) -> Result<Self> {
        options.validate()?;
        let lay = Layout::new(options.max_keys_for_file(), width, page_size())?;
        let mut pristine = [0u64; MAX_WIDTH];
        retention.pristine(&mut pristine[..width]);
        // A file is zeros where nothing was written: its floor reads as
        // pristine only if pristine is 0 (it is for every algorithm).
        assert!(pristine.iter().all(|&p| p == 0), "a shared file needs pristine states of 0");
        let strict = options.eviction == Eviction::Strict;
        let rule =
            fnv(format!("{describe}|{width}|{}|{}|{:?}", std::any::type_name::<S>(), lay.max_keys, options.eviction)
                .as_bytes());
        let label = format!("{label}, max_keys {}, eviction {:?}", lay.max_keys, options.eviction);
        let cpath = CString::new(path.as_os_str().as_bytes()).map_err(|_| err(path, "contains a NUL byte"))?;
        let flags = libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK;
        // SAFETY: a valid C string; flags and mode are plain integers.
        let fd = unsafe { libc::open(cpath.as_ptr(), flags, 0o600) };
        if fd < 0 {
            let e = os_err();
            if e.raw_os_error() == Some(libc::ELOOP) {
                return Err(err(path, "is a symbolic link; give the file's real path"));
            }
            // Another user's file in a sticky directory (fs.protected_regular).
            if let Ok(m) = std::fs::symlink_metadata(path) {
                use std::os::unix::fs::MetadataExt;
                // SAFETY: no preconditions.
                if m.uid() != unsafe { libc::geteuid() } {
                    return Err(err(path, "is owned by another user; every process sharing it must run as its owner"));
                }
            }
            return Err(err(path, format!("cannot be opened: {e}")));
        }
        let fd = Fd(fd);
        let st = fstat(&fd, path)?;
        check_owner(path, &st)?;
        let opening = Opening::take(&fd, path, &st)?;
        let st = fstat(&fd, path)?;
        let found = Self::inspect(&fd, path, &st, &lay, rule)?;
        let fresh = match found {
            Found::Ours => false,
            // Nobody else holds the users' lock: nobody uses the file.
            _ if Self::unused(&fd) => true,
            Found::Unusable(why) => {
                return Err(err(
                    path,
                    format!(
                        "{why}, and yet is in use by other processes (`fuser -v '{0}'` lists them); remove it \
                         (`rm -- '{0}'`)",
                        path.display()
                    ),
                ));
            }
            Found::Other(old) => {
                return Err(err(
                    path,
                    format!(
                        "is in use with a different rule, key type, max_keys or eviction policy (the file's: \
                         {old}; this one: {label}). Once the processes using it (`fuser -v '{0}'`) have exited, the \
                         next to open it makes it anew; to switch now, `rm -- '{0}'` (running processes keep the \
                         old file until they restart)",
                        path.display()
                    ),
                ));
            }
        };
        if fresh {
            Self::make_room_on_disk(&fd, path, &lay)?;
        }
        // Join the users (under the opening lock, so no opener can find the
        // file unused between making it anew and this; atomic from an
        // exclusive lock).
        if let Err(e) = users_lock(&fd, libc::F_RDLCK) {
            return Err(err(path, format!("cannot be locked: {e}")));
        }
        // SAFETY: maps `lay.bytes` bytes of an open regular file of that
        // size (checked by `inspect`, or just made), shared, read-write.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), lay.bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.0, 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(err(path, format!("cannot be mapped: {}", os_err())));
        }
        let map = Map { ptr: ptr.cast(), len: lay.bytes };
        // Keys land at random: no readahead (on a disk file system it would
        // fill the page cache with the holes around each page touched).
        // SAFETY: advice on the mapping just made; it changes no contents.
        unsafe { libc::madvise(ptr, lay.bytes, libc::MADV_RANDOM) };
        let h = map.words();
        if fresh {
            // The file is all zeros (sparse): empty slots and a pristine
            // floor. Write the header, `ready` last.
            let keys = random_key()?;
            let boot = boot_id();
            for (at, v) in [
                (H_MAGIC, MAGIC),
                (H_VERSION, VERSION),
                (H_RULE, rule),
                (H_BOOT, boot[0]),
                (H_BOOT + 1, boot[1]),
                (H_CAP, lay.cap as u64),
                (H_WIDTH, lay.width as u64),
                (H_SEED, keys.0),
                (H_SEED + 1, keys.1),
                (H_BYTES, lay.bytes as u64),
                (H_CELLS, lay.cells as u64),
                (H_MAX_KEYS, lay.max_keys as u64),
                (H_CHUNK, lay.chunk as u64),
            ] {
                h[at].store(v, Ordering::Relaxed);
            }
            let text = label.as_bytes();
            let text = &text[..text.len().min(HEADER_BYTES - LABEL_AT)];
            h[H_LABEL].store(text.len() as u64, Ordering::Relaxed);
            for (w, chunk) in h[H_LABEL + 1..].iter().zip(text.chunks(8)) {
                let mut b = [0u8; 8];
                b[..chunk.len()].copy_from_slice(chunk);
                w.store(u64::from_le_bytes(b), Ordering::Relaxed);
            }
            h[H_READY].store(1, Ordering::Release);
        }
        let keys = SipKeys(h[H_SEED].load(Ordering::Relaxed), h[H_SEED + 1].load(Ordering::Relaxed));
        drop(opening);
        Ok(SharedStore { map, fd, path: path.to_owned(), lay, strict, keys })
    }

    /// Whether no other process uses the file: the users' lock, taken
    /// exclusively. A process that forks and execs holds a last user's
    /// descriptor until it execs, so a refusal is tried again for up to
    /// [`UNUSED_WAIT`] before it counts.
    fn unused(fd: &Fd) -> bool {
        let start = Instant::now();
        loop {
            if users_lock(fd, libc::F_WRLCK).is_ok() {
                return true;
            }
            if start.elapsed() >= UNUSED_WAIT {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// What the file holds (under the opening lock).
    fn inspect(fd: &Fd, path: &Path, st: &libc::stat, lay: &Layout, rule: u64) -> Result<Found> {
        if st.st_size == 0 {
            return Ok(Found::Unusable("is new"));
        }
        let Some(h) = read_header(fd) else {
            // Shorter than a header: ours only if it starts as ours.
            let mut first = [0u8; 8];
            // SAFETY: `first` is writable for 8 bytes.
            let n = unsafe { libc::pread(fd.0, first.as_mut_ptr().cast(), 8, 0) };
            if n == 8 && matches!(u64::from_le_bytes(first), 0 | MAGIC) {
                return Ok(Found::Unusable("is truncated"));
            }
            return Err(err(path, "is not a ratomic shared store (it is too short and not one of ours)"));
        };
        match h[H_MAGIC] {
            // Sized by a creator that died before it wrote the header.
            0 => return Ok(Found::Unusable("was never initialised")),
            MAGIC => {}
            _ => return Err(err(path, "is not a ratomic shared store (bad magic number)")),
        }
        if h[H_VERSION] != VERSION {
            return Err(err(
                path,
                format!(
                    "was made by another version of ratomic (layout {}, this one reads {VERSION}); once no process \
                     of that version uses it, remove it (`rm -- '{}'`)",
                    h[H_VERSION],
                    path.display()
                ),
            ));
        }
        if h[H_READY] != 1 {
            return Ok(Found::Unusable("was never made ready (its creator died)"));
        }
        if h[H_BYTES] != st.st_size as u64 {
            return Ok(Found::Unusable("is truncated or corrupt (its size differs from its header's)"));
        }
        if [h[H_BOOT], h[H_BOOT + 1]] != boot_id() {
            return Ok(Found::Unusable("was made before the host last booted (its times mean nothing now)"));
        }
        let same = h[H_RULE] == rule
            && h[H_CAP] == lay.cap as u64
            && h[H_WIDTH] == lay.width as u64
            && h[H_CELLS] == lay.cells as u64
            && h[H_CHUNK] == lay.chunk as u64
            && h[H_BYTES] == lay.bytes as u64;
        Ok(if same { Found::Ours } else { Found::Other(label_of(&h)) })
    }

    /// Sizes a file nobody uses for `lay`, sparse, and reserves backing
    /// store for the parts written outside the slots (the header, the
    /// bitmap and the floor): the slots get theirs as keys land (see
    /// [`reserve`](Self::reserve)).
    fn make_room_on_disk(fd: &Fd, path: &Path, lay: &Layout) -> Result<()> {
        // Truncating first drops whatever an earlier limiter left.
        // SAFETY: `fd` is open for writing.
        if unsafe { libc::ftruncate(fd.0, 0) } != 0 || unsafe { libc::ftruncate(fd.0, lay.bytes as libc::off_t) } != 0 {
            return Err(err(path, format!("cannot be sized to {} bytes: {}", lay.bytes, os_err())));
        }
        for (at, len) in [(0, lay.slots_at), (lay.floor_at, lay.bytes - lay.floor_at)] {
            // SAFETY: `fd` is open for writing; the range lies in the file.
            let r = unsafe { libc::fallocate(fd.0, 0, at as libc::off_t, len as libc::off_t) };
            if r != 0 {
                let e = os_err();
                // Leave nothing allocated behind.
                // SAFETY: as above.
                unsafe { libc::ftruncate(fd.0, 0) };
                return Err(full(path, len, &e, "to create the file"));
            }
        }
        Ok(())
    }

    #[inline]
    fn table(&self) -> Table<'_> {
        let w = self.map.words();
        let (slots, floor) = (self.lay.slots_at / 8, self.lay.floor_at / 8);
        Table::with_sizes(
            Region {
                slots: &w[slots..floor],
                floor: &w[floor..],
                live: &w[H_LIVE],
                hand: &w[H_HAND],
                credits: &w[H_CREDITS..H_CREDITS_END],
                backed: Some(Backed {
                    bits: &w[HEADER_WORDS..HEADER_WORDS + self.lay.bitmap_words()],
                    shift: (self.lay.chunk / 8).trailing_zeros(),
                }),
            },
            self.lay.cap,
            self.lay.cells,
            self.lay.width,
            self.lay.max_keys,
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

    /// Reserves backing store for every slot the key of `hash` may be
    /// stored in or probed through (its window), before any call on it: the
    /// table writes only there, in the header and in the floor (reserved
    /// when the file was made), so no write ever lands on a hole of a full
    /// file system (a bus error). Fails, changing nothing, if the file
    /// system is full. A few loads when the window is backed already.
    #[inline]
    pub(crate) fn reserve(&self, hash: u64) -> Result<()> {
        let home = crate::store::table::home_slot(hash | 1, self.lay.cap);
        let end = home + self.lay.cap.min(table::WINDOW);
        if end <= self.lay.cap {
            self.reserve_slots(home, end)
        } else {
            self.reserve_slots(home, self.lay.cap)?;
            self.reserve_slots(0, end - self.lay.cap)
        }
    }

    /// Reserves the chunks holding slots `a..b`.
    #[inline]
    fn reserve_slots(&self, a: usize, b: usize) -> Result<()> {
        let stride = (2 + self.lay.width) * 8;
        let shift = self.lay.chunk.trailing_zeros();
        let bits = &self.map.words()[HEADER_WORDS..];
        for c in (a * stride) >> shift..=(b * stride - 1) >> shift {
            if bits[c / 64].load(Ordering::Acquire) & (1 << (c % 64)) == 0 {
                self.back(c)?;
            }
        }
        Ok(())
    }

    /// Reserves chunk `c` of the slots and marks it backed.
    #[cold]
    #[inline(never)]
    fn back(&self, c: usize) -> Result<()> {
        let at = c * self.lay.chunk;
        let len = self.lay.chunk.min(self.lay.slot_bytes - at);
        // SAFETY: the descriptor is open for writing; the range lies in the file.
        let r = unsafe { libc::fallocate(self.fd.0, 0, (self.lay.slots_at + at) as libc::off_t, len as libc::off_t) };
        if r != 0 {
            return Err(full(&self.path, len, &os_err(), "for a new key (keys already held still work)"));
        }
        self.map.words()[HEADER_WORDS + c / 64].fetch_or(1 << (c % 64), Ordering::AcqRel);
        Ok(())
    }

    fn run<R>(&self, f: impl FnOnce(&Ctx<'_>) -> Result<R, Halt>) -> Result<R, u32> {
        let ctx = Ctx { me: me(), alive: &alive };
        match f(&ctx) {
            Ok(r) => Ok(r),
            Err(Halt::Stalled(owner)) => Err(owner),
            Err(Halt::Killed) => unreachable!("only models stop a thread"),
        }
    }

    /// The error of a credit that met its key held by a process that does
    /// not let go (see `table::GIVE_UP`).
    #[cold]
    fn stalled(&self, owner: u32) -> Error {
        Error::SharedFile {
            path: self.path.display().to_string(),
            reason: format!(
                "the key is held by {}, which has not finished crediting it within {} ms; nothing was changed \
                 (resume or end that process, then retry)",
                who(owner >> 10),
                table::GIVE_UP.as_millis()
            ),
        }
    }

    /// See [`Store::update`](super::super::Store::update). The key's window
    /// must have been [reserved](Self::reserve).
    #[inline]
    pub(crate) fn update<const MARK: bool, R>(
        &self,
        hash: u64,
        now: u64,
        retention: &impl Retention,
        mut op: impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
    ) -> R {
        let mut op = |cells: &mut Cells<'_>| sane(cells, &mut op);
        match self.run(|ctx| self.table().update::<MARK, R>(ctx, hash | 1, now, retention, &mut op)) {
            Ok(r) => r,
            Err(_) => unreachable!("a charge never gives up (a give-back it makes is dropped instead)"),
        }
    }

    /// See [`Store::update_locked`](super::super::Store::update_locked).
    pub(crate) fn update_locked<R>(
        &self,
        hash: u64,
        now: u64,
        retention: &impl Retention,
        credit: Credit,
        mut op: impl FnMut(&mut Cells<'_>) -> Result<R, Frozen>,
    ) -> Result<Option<R>> {
        let mut op = |cells: &mut Cells<'_>| sane(cells, &mut op);
        self.run(|ctx| self.table().credit(ctx, hash | 1, now, retention, credit, &mut op)).map_err(|o| self.stalled(o))
    }

    /// Makes the key a full bucket.
    pub(crate) fn reset(&self, hash: u64, now: u64, retention: &impl Retention) -> Result<()> {
        self.run(|ctx| self.table().reset(ctx, hash | 1, now, retention)).map_err(|o| self.stalled(o))
    }

    /// Forgets every key idle at `now`; recounts.
    pub(crate) fn gc(&self, now: u64, retention: &impl Retention) -> usize {
        match self.run(|ctx| self.table().gc(ctx, now, retention)) {
            Ok(n) => n,
            Err(_) => unreachable!("gc waits on nobody"),
        }
    }

    /// Keys held (a scan of the table).
    pub(crate) fn len(&self) -> usize {
        self.table().count()
    }

    /// Bytes of the file with backing store: the header, the bitmap and
    /// the floor, and the chunks of slots reserved so far (see
    /// [`reserve`](Self::reserve)). The file's size is larger: the rest
    /// are holes.
    pub(crate) fn memory_bytes(&self) -> usize {
        let bits = &self.map.words()[HEADER_WORDS..HEADER_WORDS + self.lay.bitmap_words()];
        let chunks: usize = bits.iter().map(|w| w.load(Ordering::Relaxed).count_ones() as usize).sum();
        self.lay.slots_at + (chunks * self.lay.chunk).min(self.lay.slot_bytes) + (self.lay.bytes - self.lay.floor_at)
    }

    /// Fingerprints of the keys held (tests: none twice).
    pub(crate) fn fingerprints(&self) -> Vec<u64> {
        self.table().fingerprints()
    }
}

/// The error of a reservation the file system refused.
#[cold]
fn full(path: &Path, len: usize, e: &std::io::Error, what: &str) -> Error {
    let reason = if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) {
        format!(
            "the file system holding it is full: could not reserve {len} bytes {what} ({e}); nothing was changed. \
             Free space there, or give the limiter a smaller max_keys (with a new file)"
        )
    } else if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP)) {
        format!(
            "its file system cannot reserve space (fallocate: {e}), which a shared file needs so that a full file \
             system is an error rather than a bus error; put the file on tmpfs (/run, $XDG_RUNTIME_DIR, /dev/shm), \
             ext4 or xfs"
        )
    } else {
        format!("could not reserve {len} bytes {what} ({e}); nothing was changed")
    };
    Error::SharedFile { path: path.display().to_string(), reason }
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
            (H_CREDITS..H_CREDITS_END).step_by(CREDIT_STRIDE).map(|i| w[i].load(Ordering::Relaxed)).sum()
        }
    }

    fn temp(tag: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!("ratomic-{tag}-{}.shm", std::process::id()));
        let _ = std::fs::remove_file(&path);
        path
    }

    /// As in the in-memory store: an eviction of a key that is not idle
    /// moves its credit counter (it may come back fuller than it left, see
    /// `store::cells::Mark`); forgetting idle keys does not.
    #[test]
    fn evicting_a_key_that_is_not_idle_moves_the_credit_counter_and_forgetting_idle_keys_does_not() {
        let gcra = Gcra::new(Quota::from_rate(Rate::new(3, Duration::from_nanos(30)).unwrap()).unwrap());
        let path = temp("credits");
        let store = SharedStore::open::<u64>(&path, &Options::default().max_keys(16), 1, "credits test", "test", &gcra)
            .unwrap();
        let call = |hash: u64| {
            store.reserve(hash).unwrap();
            store.update::<false, _>(hash, 0, &gcra, |cells| Ok(charge_in(&gcra, cells, 0, 0, 1)?.0))
        };
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

    /// The file is sparse: what has backing store at first is the header,
    /// the bitmap and the floor, whatever `max_keys` is; a key adds the
    /// chunks of its window.
    #[test]
    fn a_new_file_backs_only_its_header_bitmap_and_floor() {
        use std::os::unix::fs::MetadataExt;
        let gcra = Gcra::new(Quota::per_second(5).unwrap());
        let path = temp("sparse");
        let options = Options::default().max_keys(1 << 20);
        let store = SharedStore::open::<u64>(&path, &options, 1, "sparse test", "test", &gcra).unwrap();
        let lay = store.lay;
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), lay.bytes as u64);
        let fixed = lay.slots_at + (lay.bytes - lay.floor_at);
        assert_eq!(store.memory_bytes(), fixed);
        assert!(meta.blocks() * 512 <= (fixed + 64 * 1024) as u64, "{} bytes allocated", meta.blocks() * 512);
        assert!(fixed < lay.bytes / 8, "{fixed} of {} bytes", lay.bytes);
        store.reserve(12345).unwrap();
        let one = store.memory_bytes() - fixed;
        assert!(one > 0 && one <= 2 * lay.chunk, "one key's window: {one} bytes");
        drop(store);
        let _ = std::fs::remove_file(&path);
    }
}
