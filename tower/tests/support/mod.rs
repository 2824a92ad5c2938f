//! What the tower tests share: an axum server on 127.0.0.1 port 0 and a
//! small HTTP/1.1 client (one request per connection).

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::{routing, Router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct Reply {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: String,
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
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
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
