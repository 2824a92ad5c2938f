//! Connections, bounded: what a flood of them can take from the service.
//!
//! - Each listener holds at most `max_connections` open at once. One past
//!   the bound is accepted and closed at once (and counted in `/metrics`):
//!   the file descriptors and memory the open ones need stay theirs, and
//!   the refused client learns at once instead of waiting in the kernel's
//!   backlog (Envoy then applies its `failure_mode_deny`).
//! - HTTP/1: a request's head must arrive within the header timeout, and a
//!   kept-alive connection with no request for that long is closed (a
//!   client that sends its head a byte at a time holds nothing for long).
//! - gRPC: at most `max_streams` calls at once on one HTTP/2 connection
//!   (the server's `SETTINGS_MAX_CONCURRENT_STREAMS`).
//! - Every accepted socket gets `TCP_NODELAY`: a decision is a small
//!   reply, not to be held back for the next one.
//! - HTTP/2 connections survive h2's graceful shutdown whatever the client
//!   sends after the GOAWAY ([`crate::goaway`]).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::goaway::Guarded;
use crate::metrics::{Listener, Metrics};

/// The bound on one listener's open connections.
#[derive(Debug)]
pub struct Gate {
    open: Arc<Semaphore>,
    listener: Listener,
    metrics: Arc<Metrics>,
}

impl Gate {
    /// At most `max` connections open at once on `listener`.
    pub fn new(listener: Listener, max: usize, metrics: Arc<Metrics>) -> Gate {
        let max = max.clamp(1, Semaphore::MAX_PERMITS);
        metrics.connection_bound(listener, max);
        Gate { open: Arc::new(Semaphore::new(max)), listener, metrics }
    }

    /// The next connection within the bound; those past it are closed as
    /// they come. Errors of `accept` itself (out of file descriptors, say)
    /// are logged and retried after a pause, never returned: the listener
    /// keeps serving the connections it has.
    pub async fn accept(&self, listener: &TcpListener) -> Counted {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) if is_per_connection(&e) => continue,
                Err(e) => {
                    tracing::error!(listener = self.listener.label(), error = %e, "accept failed; retrying in 100 ms");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            match self.open.clone().try_acquire_owned() {
                Ok(permit) => {
                    let _ = stream.set_nodelay(true);
                    self.metrics.connection_opened(self.listener);
                    return Counted {
                        io: Guarded::new(stream),
                        _open: Open { _permit: permit, listener: self.listener, metrics: self.metrics.clone() },
                    };
                }
                Err(_) => {
                    self.metrics.connection_refused(self.listener);
                    drop(stream);
                }
            }
        }
    }
}

/// An error of `accept` about the one connection it was taking (reset
/// before it was accepted): the next one is fine.
fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionRefused
    )
}

/// A connection's place within its listener's bound, given back on drop.
#[derive(Debug)]
struct Open {
    _permit: OwnedSemaphorePermit,
    listener: Listener,
    metrics: Arc<Metrics>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.metrics.connection_closed(self.listener);
    }
}

/// An accepted connection, counted while it is open.
#[derive(Debug)]
pub struct Counted {
    io: Guarded<TcpStream>,
    _open: Open,
}

impl AsyncRead for Counted {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Counted {
    type ConnectInfo = <TcpStream as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.get_ref().connect_info()
    }
}

/// The connections of `listener` within `gate`'s bound, as tonic takes them.
pub fn incoming(
    listener: TcpListener,
    gate: Gate,
) -> impl futures_util::Stream<Item = io::Result<Counted>> + Send + 'static {
    futures_util::stream::unfold((listener, gate), |(listener, gate)| async move {
        let io = gate.accept(&listener).await;
        Some((Ok(io), (listener, gate)))
    })
}

/// Serves `app` over HTTP/1.1 (and HTTP/2 with prior knowledge) on
/// `listener`, within `gate`, with `header_timeout` for each request's head,
/// until `stop`; then stops accepting and waits for the requests in flight
/// (idle connections are closed).
pub async fn serve_http(
    listener: TcpListener,
    gate: Gate,
    app: Router,
    header_timeout: Duration,
    stop: impl Future<Output = ()>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(header_timeout);
    let graceful = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let io = tokio::select! {
            io = gate.accept(&listener) => io,
            () = &mut stop => break,
        };
        let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(app.clone())).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
