//! What the server tests share: the server run-tests.sh started, fresh
//! prefixes, and PostgreSQL clusters a test owns (to stop and restart).

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The server run-tests.sh started.
pub fn url() -> String {
    std::env::var("RATOMIC_POSTGRES_URL").expect("RATOMIC_POSTGRES_URL: run these tests with postgres/run-tests.sh")
}

/// A prefix no other test (or test case) uses.
pub fn prefix(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("t:{}:{name}:{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A plain connection to `url` for the tests' own SQL.
pub async fn plain(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// A PostgreSQL cluster this test owns, in a temp dir, as the user
/// run-tests.sh names (initdb refuses root); removed on drop.
#[derive(Debug)]
pub struct Server {
    pub port: u16,
    dir: PathBuf,
    extra: String,
}

fn as_owner(program: &str) -> Command {
    let bin = std::env::var("RATOMIC_PG_BIN").expect("RATOMIC_PG_BIN: run these tests with postgres/run-tests.sh");
    let path = format!("{bin}/{program}");
    match std::env::var("RATOMIC_PG_USER").ok().filter(|u| !u.is_empty()) {
        Some(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", &user, "--", &path]);
            c
        }
        None => Command::new(path),
    }
}

fn run(mut c: Command, what: &str) {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Server {
    pub fn start() -> Server {
        Server::start_with("")
    }

    /// A cluster started with these extra server options as well (`-c
    /// name=value …`).
    pub fn start_with(extra: &str) -> Server {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ratomic-pg-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(user) = std::env::var("RATOMIC_PG_USER").ok().filter(|u| !u.is_empty()) {
            let mut chown = Command::new("chown");
            chown.args([&user, dir.to_str().unwrap()]);
            run(chown, "chown");
        }
        let mut init = as_owner("initdb");
        init.args(["-D", dir.join("data").to_str().unwrap(), "-U", "postgres", "-A", "trust", "--no-sync"]);
        run(init, "initdb");
        let s = Server { port: free_port(), dir, extra: extra.to_owned() };
        s.restart();
        s
    }

    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`).
    pub fn stop(&self) {
        let mut c = as_owner("pg_ctl");
        c.args(["-D", self.dir.join("data").to_str().unwrap(), "-m", "immediate", "stop"]);
        run(c, "pg_ctl stop");
    }

    /// Starts it (again) on its port and waits until it accepts connections.
    pub fn restart(&self) {
        let mut c = as_owner("pg_ctl");
        let opts = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off {}",
            self.port,
            self.dir.display(),
            self.extra
        );
        c.args(["-D", self.dir.join("data").to_str().unwrap(), "-l", self.dir.join("log").to_str().unwrap()]);
        c.args(["-w", "-t", "60", "-o", &opts, "start"]);
        run(c, "pg_ctl start");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let mut c = as_owner("pg_ctl");
        c.args(["-D", self.dir.join("data").to_str().unwrap(), "-m", "immediate", "stop"]);
        let _ = c.output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
