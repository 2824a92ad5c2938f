//! The README's axum server on a shared file, run as the README says: four
//! processes of one binary on one host, each on its own port behind what
//! would be the proxy (here, this test handing the requests round). One
//! client sends 30 requests to the 5-per-minute limit: exactly 5 pass, and
//! the four processes have one file mapped. A path that differed from
//! process to process (the process id in its name) would let 20 through.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The four servers, killed however the test ends.
struct Servers(Vec<Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A runtime directory of the test's own (mode 0700, as
/// `$XDG_RUNTIME_DIR` is), removed at the end.
struct RuntimeDir(PathBuf);

impl Drop for RuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn status_of_get(addr: SocketAddr) -> u16 {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split(' ').nth(1).unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    status.parse().unwrap()
}

/// The processes that have `file` mapped, by pid.
fn mapping(pids: &[u32], file: &Path) -> Vec<u32> {
    let needle = file.to_str().unwrap();
    pids.iter()
        .copied()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/maps"))
                .is_ok_and(|maps| maps.lines().any(|l| l.ends_with(needle)))
        })
        .collect()
}

#[test]
fn four_processes_of_the_readme_server_share_one_limit() {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let runtime =
        RuntimeDir(std::env::temp_dir().join(format!("ratomic-readme-workers-{}-{nanos}", std::process::id())));
    std::fs::DirBuilder::new().mode(0o700).create(&runtime.0).unwrap();

    let mut servers = Servers(Vec::new());
    let mut addrs = Vec::new();
    for _ in 0..4 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shared_server"))
            .env("XDG_RUNTIME_DIR", &runtime.0)
            .env("PORT", "0")
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the README's server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        servers.0.push(child);
        let addr = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("the server printed {line:?}"));
        addrs.push(addr.parse::<SocketAddr>().unwrap());
    }

    // Every process listens, so every one has built its limiter: one file,
    // mapped by all four.
    let files: Vec<_> = std::fs::read_dir(&runtime.0).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "the four processes made {files:?}");
    let pids: Vec<u32> = servers.0.iter().map(Child::id).collect();
    assert_eq!(mapping(&pids, &files[0]), pids, "every process maps {}", files[0].display());

    let statuses: Vec<u16> = (0..30).map(|i| status_of_get(addrs[i % 4])).collect();
    let passed = statuses.iter().filter(|&&s| s == 200).count();
    assert_eq!(passed, 5, "30 requests from one client to 5/min over four processes: {statuses:?}");
    assert!(statuses.iter().all(|&s| s == 200 || s == 429), "{statuses:?}");
}
