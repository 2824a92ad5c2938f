//! What the server tests share: the server run-tests.sh started, fresh
//! prefixes, and redis-server processes a test owns (to kill and restart).

#![allow(dead_code)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The server run-tests.sh started.
pub fn url() -> String {
    std::env::var("RATOMIC_REDIS_URL").expect("RATOMIC_REDIS_URL: run these tests with redis/run-tests.sh")
}

/// A prefix no other test (or test case) uses.
pub fn prefix(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("t:{}:{name}:{}:", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A redis-server this test owns: loopback only, no persistence unless
/// started with [`Server::start_persistent`].
#[derive(Debug)]
pub struct Server {
    pub port: u16,
    child: Option<Child>,
    extra: Vec<String>,
    /// A directory of its own (its append-only file), removed on drop.
    dir: Option<std::path::PathBuf>,
}

impl Server {
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    /// A server started with extra arguments (e.g. cluster mode).
    pub fn start_with(extra: &[&str]) -> Server {
        let mut s =
            Server { port: free_port(), child: None, extra: extra.iter().map(|a| a.to_string()).collect(), dir: None };
        s.restart();
        s
    }

    /// A server whose every write is on disk before its reply goes out
    /// (`--appendonly yes --appendfsync always`), in a directory of its own:
    /// killed and [restarted](Self::restart), it has every key it answered
    /// for.
    pub fn start_persistent() -> Server {
        static N: AtomicU64 = AtomicU64::new(0);
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "ratomic-redis-aof-{}-{port}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let extra = ["--appendonly", "yes", "--appendfsync", "always", "--dir"].map(str::to_owned);
        let mut extra = extra.to_vec();
        extra.push(dir.to_string_lossy().into_owned());
        let mut s = Server { port, child: None, extra, dir: Some(dir) };
        s.restart();
        s
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts the server again on the same port (after [`kill`](Self::kill)).
    pub fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", &std::env::temp_dir().to_string_lossy(), "--loglevel", "warning"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (run-tests.sh installs it)");
        self.child = Some(child);
        self.wait_ready();
    }

    /// Polls PING until the server answers.
    pub fn wait_ready(&self) {
        let client = redis::Client::open(self.url()).unwrap();
        for _ in 0..1000 {
            if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(100)) {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("redis-server on port {} did not start", self.port);
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        assert!(Command::new("kill").args([sig, &pid]).status().unwrap().success());
    }

    /// A plain connection, for checks behind the limiter's back.
    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url()).unwrap().get_connection().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = self.signal_cont();
        }
        self.kill();
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Server {
    fn signal_cont(&self) -> std::io::Result<()> {
        let pid = self.child.as_ref().unwrap().id().to_string();
        Command::new("kill").args(["-CONT", &pid]).status().map(drop)
    }
}

/// A plain connection to the shared server.
pub fn conn() -> redis::Connection {
    redis::Client::open(url()).unwrap().get_connection().unwrap()
}

/// The 3-node cluster run-tests.sh started: its nodes' URLs.
pub fn cluster_urls() -> Vec<String> {
    std::env::var("RATOMIC_REDIS_CLUSTER")
        .expect("RATOMIC_REDIS_CLUSTER: run these tests with redis/run-tests.sh")
        .split(',')
        .map(str::to_owned)
        .collect()
}

/// A 3-node cluster this test owns (no replicas; nodes keep serving their
/// own slots when another is gone).
pub fn own_cluster() -> Vec<Server> {
    let dir = std::env::temp_dir();
    let nodes: Vec<Server> = (0..3)
        .map(|i| {
            let conf = dir.join(format!("ratomic-test-{}-{}-{i}.conf", std::process::id(), free_port()));
            Server::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &conf.to_string_lossy(),
                "--cluster-node-timeout",
                "1000",
                "--cluster-require-full-coverage",
                "no",
            ])
        })
        .collect();
    let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
    let status = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    for n in &nodes {
        let mut ok = false;
        for _ in 0..1000 {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut n.conn()).unwrap();
            if info.contains("cluster_state:ok") {
                ok = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(ok, "cluster node {} never became ok", n.port);
    }
    nodes
}
