//! What a shared file (`Options::shared_file`) costs as keys land in it: its
//! size, its bytes on disk (`st_blocks`), the bytes of its mapping resident
//! in this process (`Rss` in `/proc/self/smaps`) and what `memory_bytes`
//! reports, at 0, 1,000 and 100,000 keys and at `max_keys`, for the default
//! `max_keys` of a file (131,072) and for 1,000,000. One limit (a token
//! bucket), 16-byte keys.
//!
//! ```sh
//! cargo run --release -p ratomic-benches --bin shared_size [--dir DIR]
//! ```
//!
//! The file goes in `DIR` (default: `$XDG_RUNTIME_DIR`, else `/dev/shm`,
//! else the temporary directory).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use ratomic::{Quota, TokenBucket};

/// The resident bytes of this process's mapping of `path`.
fn resident(path: &Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let name = path.to_str().unwrap();
    let mut inside = false;
    let mut kib = 0;
    for line in smaps.lines() {
        if line.contains(" /") || line.ends_with(']') || line.split_whitespace().count() == 5 {
            // A mapping's header line: address range, perms, offset, dev, inode[, path].
            if line.split_whitespace().next().is_some_and(|r| r.contains('-') && !r.ends_with(':')) {
                inside = line.ends_with(name);
                continue;
            }
        }
        if inside {
            if let Some(v) = line.strip_prefix("Rss:") {
                kib += v.trim().trim_end_matches(" kB").trim().parse::<u64>().unwrap();
            }
        }
    }
    kib * 1024
}

fn dir() -> PathBuf {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--dir") {
        return PathBuf::from(&args[at + 1]);
    }
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_dir())
        .or_else(|| Some(PathBuf::from("/dev/shm")).filter(|d| d.is_dir()))
        .unwrap_or_else(std::env::temp_dir)
}

fn main() {
    let dir = dir();
    println!("file in {}", dir.display());
    println!("| max_keys | keys | file size | on disk | resident | memory_bytes |");
    println!("|---|---|---|---|---|---|");
    for max_keys in [None, Some(1_000_000)] {
        let path = dir.join(format!("ratomic-shared-size-{}.shm", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let b = TokenBucket::builder(Quota::per_hour(5).unwrap()).shared_file(&path);
        let l = match max_keys {
            Some(n) => b.max_keys(n).build().unwrap(),
            None => b.build().unwrap(),
        };
        let max = max_keys.unwrap_or(131_072);
        let label = match max_keys {
            Some(n) => n.to_string(),
            None => format!("{max} (default)"),
        };
        let mut held = 0;
        for at in [0, 1_000, 100_000, max] {
            while held < at {
                assert!(l.allow(&format!("key{held:013}")).unwrap().allowed);
                held += 1;
            }
            let meta = std::fs::metadata(&path).unwrap();
            println!(
                "| {label} | {at} | {} | {} | {} | {} |",
                meta.len(),
                meta.blocks() * 512,
                resident(&path),
                l.memory_bytes()
            );
        }
        assert_eq!(l.len(), max);
        drop(l);
        std::fs::remove_file(&path).unwrap();
    }
}
