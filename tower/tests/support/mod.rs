//! What the tower tests share: an axum server on 127.0.0.1 port 0 and a
//! small HTTP/1.1 client (one request per connection).

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::{routing, Router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct Reply {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: String,
}

/// What `tracing` records on this thread while the guard of
/// [`Logs::capture`] lives (a `#[tokio::test]` runs the server's tasks on
/// the test's own thread).
///
/// One global subscriber for the test binary writes each event to the
/// buffer of the thread that emits it. A scoped subscriber per test
/// (`set_default`) lost events when tests on other threads set and dropped
/// theirs meanwhile (tracing caches a callsite's interest and the global
/// level hint across threads): a report seen 0 times instead of once, 1 run
/// in 5 or so on a loaded machine.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

thread_local! {
    static CAPTURING: std::cell::RefCell<Option<Logs>> = const { std::cell::RefCell::new(None) };
}

/// Stops this thread's capture when dropped.
pub struct Capture(());

impl Drop for Capture {
    fn drop(&mut self) {
        CAPTURING.with(|c| c.borrow_mut().take());
    }
}

/// The global subscriber's writer: this thread's [`Logs`], if capturing.
struct ThisThread;

impl Write for ThisThread {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURING.with(|c| {
            if let Some(logs) = &*c.borrow() {
                logs.0.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    pub fn capture() -> (Logs, Capture) {
        static INIT: std::sync::Once = std::sync::Once::new();
        INIT.call_once(|| {
            let subscriber = tracing_subscriber::fmt().with_writer(|| ThisThread).with_ansi(false).finish();
            tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber of the tests");
        });
        let logs = Logs::default();
        CAPTURING.with(|c| *c.borrow_mut() = Some(logs.clone()));
        (logs, Capture(()))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The records (lines) that contain `needle`.
    pub fn lines_with(&self, needle: &str) -> Vec<String> {
        self.text().lines().filter(|l| l.contains(needle)).map(str::to_owned).collect()
    }
}

/// A generic problem document of `status`, with nothing of `secrets` in its
/// body or fields.
pub fn check_generic(r: &Reply, status: u16, secrets: &[&str]) {
    let (title, detail) = match status {
        503 => ("Service Unavailable", "Rate limiting is unavailable; try again later."),
        500 => ("Internal Server Error", "Rate limiting is misconfigured on this server."),
        _ => ("Bad Request", "This request cannot be rate limited."),
    };
    assert_eq!(r.status, status, "{}", r.body);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert_eq!(r.body, format!(r#"{{"type":"about:blank","title":"{title}","status":{status},"detail":"{detail}"}}"#));
    assert_eq!(r.headers.get("retry-after").map(String::as_str), (status == 503).then_some("1"));
    let fields: String = r.headers.iter().map(|(n, v)| format!("{n}: {v}\n")).collect();
    for secret in secrets.iter().chain(&["refused", "Redis", "bytes", "os error"]) {
        assert!(!fields.contains(secret), "{secret} reached the client: {fields}");
    }
}

/// Serves `app` as `axum::serve(listener, app)` does in axum's own docs:
/// without `ConnectInfo`.
pub async fn serve_without_connect_info(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

pub async fn serve(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
    });
    addr
}

pub async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    request(addr, "GET", path, headers).await
}

/// One `method` request for `path` with `headers`, on its own connection.
pub async fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let length = if method == "GET" { "" } else { "Content-Length: 0\r\n" };
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n{length}");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers =
        lines.filter_map(|l| l.split_once(": ")).map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned())).collect();
    Reply { status, headers, body: body.to_owned() }
}

pub async fn get(addr: SocketAddr) -> Reply {
    get_with(addr, "/", &[]).await
}

pub fn hello() -> Router {
    Router::new().route("/", routing::get(|| async { "hello" }))
}

pub fn check_denial(r: &Reply, names: &str) {
    assert_eq!(r.status, 429);
    assert!(r.headers["retry-after"].parse::<u64>().unwrap() >= 1);
    assert_eq!(r.headers["content-type"], "application/problem+json");
    assert!(r.body.contains(&format!(r#""violated-policies":[{names}]"#)), "{}", r.body);
}
