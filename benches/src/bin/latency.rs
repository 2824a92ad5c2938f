//! What one load costs when it misses the caches: the floor under a keyed
//! lookup in a store larger than the core's L2 cache.
//!
//! A keyed call on a key the caches do not hold (100k keys called at
//! random) waits for at least one line of the store's table, whichever
//! store it is: ratomic's slot (key and state in one line), governor's
//! bucket (its control bytes are a sixteenth of the size and stay near the
//! core). Neither can answer in less than that one load. This bin measures
//! it on the machine at hand: a chain of dependent loads (each address read
//! from the line before, so no two overlap) through a region of each size,
//! one 64-byte line per step in a random cycle — the latency of a load that
//! hits wherever a region that size lives. Regions from 2 MiB up are
//! measured twice: on the kernel's 4 KiB pages, and asked to be on 2 MiB
//! ones (`madvise(MADV_HUGEPAGE)`, Linux), which takes the TLB's page walks
//! out; what the kernel granted is printed (`AnonHugePages`).
//!
//! It also prints the table memory of a ratomic store of 100k `u64` keys
//! (`memory_bytes`), the region size that row of `rounds` walks.
//!
//! `cargo run --release -p ratomic-benches --bin latency`

use std::hint::black_box;
use std::time::Instant;

use ratomic::{ManualClock, Quota, TokenBucket};

const LINE: usize = 64;
const STEPS: usize = 4_000_000;
const HUGE: usize = 2 << 20;

/// A private anonymous mapping of `bytes`, aligned to 2 MiB, unmapped on drop.
struct Region {
    base: *mut libc::c_void,
    reserved: usize,
    start: *mut u8,
}

impl Region {
    fn new(bytes: usize, huge: bool) -> Region {
        let reserved = bytes + HUGE;
        // SAFETY: a fresh anonymous mapping; nothing of ours is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(base != libc::MAP_FAILED, "mmap of {reserved} bytes failed");
        let head = (HUGE - base as usize % HUGE) % HUGE;
        // SAFETY: `head < HUGE`, inside the mapping.
        let start = unsafe { base.cast::<u8>().add(head) };
        if huge {
            // SAFETY: advice on our own mapping; refused, the region stays on small pages.
            unsafe { libc::madvise(start.cast(), bytes, libc::MADV_HUGEPAGE) };
        }
        Region { base, reserved, start }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`, this long.
        unsafe { libc::munmap(self.base, self.reserved) };
    }
}

/// Nanoseconds a dependent load through `bytes` (the best of three walks:
/// the machine is shared), and the region's huge-page kilobytes.
fn chase(bytes: usize, huge: bool) -> (f64, u64) {
    let region = Region::new(bytes, huge);
    let lines = bytes / LINE;
    // The cycle's order: the lines sorted by a hash of their index (the
    // same every run).
    let mut order: Vec<usize> = (0..lines).collect();
    order.sort_unstable_by_key(|&i| ratomic_benches::mix(i as u64));
    for k in 0..lines {
        let from = order[k] * LINE;
        let to = order[(k + 1) % lines] * LINE;
        // SAFETY: both offsets are inside the region, 8-byte aligned.
        unsafe { region.start.add(from).cast::<usize>().write(region.start as usize + to) };
    }
    let huge_kb = anon_huge_kb();
    let best = (0..3)
        .map(|_| {
            let mut p = region.start as usize;
            let start = Instant::now();
            for _ in 0..STEPS {
                // SAFETY: every address in the cycle is a line of the region.
                p = unsafe { (p as *const usize).read_volatile() };
            }
            black_box(p);
            start.elapsed().as_secs_f64() * 1e9 / STEPS as f64
        })
        .fold(f64::INFINITY, f64::min);
    (best, huge_kb)
}

/// This process's anonymous memory on huge pages, in KiB.
fn anon_huge_kb() -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn main() {
    let keys = ratomic_benches::u64_keys(100_000, 1);
    let store = TokenBucket::builder(Quota::new(1_000_000, 1.0).expect("quota"))
        .keys::<u64>()
        .clock(ManualClock::new())
        .build()
        .expect("limiter");
    for k in &keys {
        assert!(store.allow(k).allowed);
    }
    println!(
        "ratomic, 100k u64 keys: {} keys, {:.2} MiB of tables and summaries (memory_bytes)",
        store.len(),
        store.memory_bytes() as f64 / (1 << 20) as f64
    );
    drop(store);

    println!("| region | ns a dependent load, 4 KiB pages | on 2 MiB pages (madvise) | huge pages granted |");
    println!("|---:|---:|---:|---:|");
    for kib in [32, 256, 1024, 2048, 4096, 8192, 16384, 65536] {
        let bytes = kib << 10;
        let (small, _) = chase(bytes, false);
        if bytes >= HUGE {
            let (big, granted) = chase(bytes, true);
            println!("| {kib} KiB | {small:.1} | {big:.1} | {granted} KiB |");
        } else {
            println!("| {kib} KiB | {small:.1} | | |");
        }
    }
}
