//! HTTP/2 connections kept whole through a graceful shutdown.
//!
//! At SIGTERM h2 (the HTTP/2 of tonic and hyper) sends GOAWAY with the
//! highest stream id, then a PING; when the client acks the PING, a second
//! GOAWAY with the last stream it took. It answers those streams, then
//! closes. A client that opens a stream after acking the PING (gRPC's C core
//! does) sends that stream's HEADERS and a WINDOW_UPDATE for it. RFC 9113
//! §6.8: the sender of a GOAWAY ignores frames on streams above its last
//! stream id. h2 (0.4.20, the latest) does so for HEADERS, DATA and
//! RST_STREAM, but takes the WINDOW_UPDATE for one on a stream never opened:
//! a connection error (PROTOCOL_ERROR) that drops every response not yet
//! written. Calls the server decided, and whose tokens it took, reach the
//! client as UNAVAILABLE.
//!
//! [`Guarded`] wraps a connection's socket and does, before h2 reads them,
//! what the RFC asks of the server: it drops the client's WINDOW_UPDATE
//! frames for client-initiated streams above the last stream h2 took. That
//! bound is known without h2's help: the lowest last stream id of the
//! GOAWAYs h2 wrote, or — read in the same byte stream as h2 reads it — the
//! highest stream whose HEADERS came before the ack of the PING written after
//! a GOAWAY (h2 takes exactly the streams whose HEADERS it read before that
//! ack). A WINDOW_UPDATE above the bound only grows the window of a stream h2
//! never serves; no other frame is touched (the HPACK state is in HEADERS
//! only). Frames pass through in place; only a frame header cut by a read is
//! held back (9 bytes at most). A connection that does not open with
//! HTTP/2's client preface (HTTP/1) is passed through untouched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What an HTTP/2 client sends first (RFC 9113 §3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const ACK: u8 = 0x1;

/// A frame's 9-byte header: payload length, type, flags and stream id.
fn parse_header(h: &[u8]) -> (usize, u8, u8, u32) {
    let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
    let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
    (len, h[3], h[4], id)
}

/// Moves `buf[from..from + len]` to `to` (`to <= from`): nothing to do
/// until a frame has been dropped.
fn shift(buf: &mut [u8], from: usize, len: usize, to: usize) {
    if to != from {
        buf.copy_within(from..from + len, to);
    }
}

/// Where the reader is in the client's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inbound {
    /// Matching the preface: this many bytes of it seen.
    Preface(usize),
    /// Not HTTP/2: everything passes.
    Passthrough,
    /// At a frame's first byte.
    Header,
    /// Inside a frame, its header included: this many bytes left, handed on
    /// or dropped; a PING ack's payload is followed.
    Frame { left: usize, keep: bool, ping_ack: bool },
}

/// Where the writer is in the server's frames (only GOAWAY's last stream id
/// and the PING after it matter).
#[derive(Debug, Clone, Copy)]
enum Outbound {
    /// Collecting a frame header: this many bytes of it.
    Header(usize),
    /// In a frame's payload: `seen` bytes of it read, `left` to come; a
    /// GOAWAY's last stream id and a PING's payload are kept.
    Payload { kind: u8, seen: usize, left: usize },
}

/// A server's socket whose reads lose the WINDOW_UPDATE frames h2 would
/// wrongly call a protocol error after its GOAWAY (see the module's
/// documentation).
#[derive(Debug)]
pub struct Guarded<IO> {
    io: IO,
    inbound: Inbound,
    /// A frame header cut by a read: `carry[start..end]` not yet handed on.
    carry: [u8; HEADER],
    start: usize,
    end: usize,
    /// The highest client stream whose HEADERS were read.
    highest_headers: u32,
    ping_ack: [u8; 8],
    outbound: Outbound,
    out_header: [u8; HEADER],
    out_payload: [u8; 8],
    /// The payload of the PING written after a GOAWAY.
    shutdown_ping: Option<[u8; 8]>,
    /// Streams above this are not served: WINDOW_UPDATEs for them go. Set
    /// by the first GOAWAY written (so `Some` once the server goes away).
    bound: Option<u32>,
}

impl<IO> Guarded<IO> {
    /// Wraps a server's accepted socket.
    pub fn new(io: IO) -> Guarded<IO> {
        Guarded {
            io,
            inbound: Inbound::Preface(0),
            carry: [0; HEADER],
            start: 0,
            end: 0,
            highest_headers: 0,
            ping_ack: [0; 8],
            outbound: Outbound::Header(0),
            out_header: [0; HEADER],
            out_payload: [0; 8],
            shutdown_ping: None,
            bound: None,
        }
    }

    /// The socket.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    fn lower_bound(&mut self, last: u32) {
        self.bound = Some(self.bound.map_or(last, |b| b.min(last)));
    }

    /// Follows the frames the server wrote (the bytes the socket took).
    fn wrote(&mut self, mut bytes: &[u8]) {
        if self.inbound == Inbound::Passthrough {
            return;
        }
        while !bytes.is_empty() {
            match self.outbound {
                Outbound::Header(have) => {
                    let k = (HEADER - have).min(bytes.len());
                    self.out_header[have..have + k].copy_from_slice(&bytes[..k]);
                    bytes = &bytes[k..];
                    self.outbound = if have + k < HEADER {
                        Outbound::Header(have + k)
                    } else {
                        let (len, kind, _, _) = parse_header(&self.out_header);
                        Outbound::Payload { kind, seen: 0, left: len }
                    };
                }
                Outbound::Payload { kind, seen, left } => {
                    let k = left.min(bytes.len());
                    let want: usize = match kind {
                        GOAWAY => 4,
                        PING if self.out_header[4] & ACK == 0 => 8,
                        _ => 0,
                    };
                    let take = want.saturating_sub(seen).min(k);
                    self.out_payload[seen..seen + take].copy_from_slice(&bytes[..take]);
                    bytes = &bytes[k..];
                    if want > 0 && seen < want && seen + take == want {
                        if kind == GOAWAY {
                            let id = &self.out_payload[..4];
                            self.lower_bound(u32::from_be_bytes([id[0], id[1], id[2], id[3]]) & 0x7fff_ffff);
                        } else if self.bound.is_some() {
                            // A PING after a GOAWAY (which set the bound).
                            self.shutdown_ping = Some(self.out_payload);
                        }
                    }
                    self.outbound = Outbound::Payload { kind, seen: seen + take, left: left - k };
                }
            }
            if matches!(self.outbound, Outbound::Payload { left: 0, .. }) {
                self.outbound = Outbound::Header(0);
            }
        }
    }

    /// The frame whose header is `h` begins: whether it reaches h2.
    fn begin(&mut self, h: &[u8]) -> Inbound {
        let (len, kind, flags, id) = parse_header(h);
        // Client-initiated streams are odd; stream 0 is the connection.
        let client_stream = id % 2 == 1;
        if kind == HEADERS && client_stream {
            self.highest_headers = self.highest_headers.max(id);
        }
        let keep = !(kind == WINDOW_UPDATE && client_stream && self.bound.is_some_and(|b| id > b));
        let ping_ack = kind == PING && flags & ACK != 0 && len == 8 && self.shutdown_ping.is_some();
        Inbound::Frame { left: HEADER + len, keep, ping_ack }
    }

    /// Follows `bytes` of the current frame (the next ones of it).
    fn follow(&mut self, left: usize, bytes: &[u8]) {
        // A PING ack is 17 bytes: payload byte i is at offset 9 + i.
        let offset = HEADER + 8 - left;
        for (i, b) in bytes.iter().enumerate() {
            if let Some(at) = (offset + i).checked_sub(HEADER) {
                self.ping_ack[at] = *b;
            }
        }
        if left == bytes.len() && Some(self.ping_ack) == self.shutdown_ping {
            // h2 took the streams whose HEADERS came before this ack.
            self.lower_bound(self.highest_headers);
        }
    }

    /// `k` more bytes of the current frame are handed on or dropped.
    fn consumed(&mut self, k: usize) {
        if let Inbound::Frame { left, keep, ping_ack } = self.inbound {
            self.inbound = if k >= left { Inbound::Header } else { Inbound::Frame { left: left - k, keep, ping_ack } };
        }
    }

    /// Filters `buf[from..]`, the bytes just read, in place; returns how
    /// many remain to hand on. A frame header cut at the end goes to
    /// `carry`.
    fn filter(&mut self, buf: &mut [u8], from: usize) -> usize {
        let (mut r, mut w) = (from, from);
        while r < buf.len() {
            let avail = buf.len() - r;
            match self.inbound {
                Inbound::Preface(seen) => {
                    let k = (PREFACE.len() - seen).min(avail);
                    let matches = buf[r..r + k] == PREFACE[seen..seen + k];
                    shift(buf, r, k, w);
                    r += k;
                    w += k;
                    self.inbound = if !matches {
                        Inbound::Passthrough
                    } else if seen + k == PREFACE.len() {
                        Inbound::Header
                    } else {
                        Inbound::Preface(seen + k)
                    };
                }
                Inbound::Passthrough => {
                    shift(buf, r, avail, w);
                    w += avail;
                    r += avail;
                }
                Inbound::Header if avail < HEADER => {
                    self.carry[..avail].copy_from_slice(&buf[r..]);
                    self.start = 0;
                    self.end = avail;
                    r += avail;
                }
                Inbound::Header => {
                    let mut h = [0; HEADER];
                    h.copy_from_slice(&buf[r..r + HEADER]);
                    self.inbound = self.begin(&h);
                }
                Inbound::Frame { left, keep, ping_ack } => {
                    let k = left.min(avail);
                    if ping_ack {
                        let mut bytes = [0; HEADER + 8];
                        bytes[..k].copy_from_slice(&buf[r..r + k]);
                        self.follow(left, &bytes[..k]);
                    }
                    if keep {
                        shift(buf, r, k, w);
                        w += k;
                    }
                    r += k;
                    self.consumed(k);
                }
            }
        }
        w - from
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Guarded<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, out: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if out.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            // A frame header a read cut: complete it, decide, hand it on.
            if this.start < this.end {
                if this.inbound == Inbound::Header {
                    if this.end < HEADER {
                        let mut rest = ReadBuf::new(&mut this.carry[this.end..]);
                        std::task::ready!(Pin::new(&mut this.io).poll_read(cx, &mut rest))?;
                        let n = rest.filled().len();
                        if n == 0 {
                            // The peer's truncation: handed on for h2 to judge.
                            let k = (this.end - this.start).min(out.remaining());
                            out.put_slice(&this.carry[this.start..this.start + k]);
                            this.start += k;
                            return Poll::Ready(Ok(()));
                        }
                        this.end += n;
                        continue;
                    }
                    let h = this.carry;
                    this.inbound = this.begin(&h);
                }
                // Only a frame header is ever carried: it has begun a frame.
                let keep = !matches!(this.inbound, Inbound::Frame { keep: false, .. });
                let k = (this.end - this.start).min(if keep { out.remaining() } else { HEADER });
                if keep {
                    out.put_slice(&this.carry[this.start..this.start + k]);
                }
                this.start += k;
                this.consumed(k);
                if keep {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            if this.inbound == Inbound::Passthrough {
                return Pin::new(&mut this.io).poll_read(cx, out);
            }
            let from = out.filled().len();
            std::task::ready!(Pin::new(&mut this.io).poll_read(cx, out))?;
            let to = out.filled().len();
            if to == from {
                return Poll::Ready(Ok(()));
            }
            let kept = this.filter(&mut out.filled_mut()[..to], from);
            out.set_filled(from + kept);
            if kept > 0 {
                return Poll::Ready(Ok(()));
            }
            // Everything read was dropped or held back: read on.
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Guarded<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, buf))?;
        self.wrote(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let n = std::task::ready!(Pin::new(&mut self.io).poll_write_vectored(cx, bufs))?;
        let mut left = n;
        for b in bufs {
            if left == 0 {
                break;
            }
            let k = left.min(b.len());
            self.wrote(&b[..k]);
            left -= k;
        }
        Poll::Ready(Ok(n))
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn window_update(id: u32) -> Vec<u8> {
        frame(WINDOW_UPDATE, 0, id, &5u32.to_be_bytes())
    }

    fn goaway(last: u32) -> Vec<u8> {
        let mut p = last.to_be_bytes().to_vec();
        p.extend_from_slice(&0u32.to_be_bytes());
        frame(GOAWAY, 0, 0, &p)
    }

    /// Writes `server` through the guard in pieces of `chunk` bytes, then
    /// sends `client` to it in pieces of `chunk` and reads what the guard
    /// hands on.
    async fn through(server: &[u8], client: &[u8], chunk: usize) -> Vec<u8> {
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let mut g = Guarded::new(near);
        for piece in server.chunks(chunk) {
            g.write_all(piece).await.unwrap();
        }
        let mut written = vec![0; server.len()];
        far.read_exact(&mut written).await.unwrap();
        assert_eq!(written, server, "writes pass unchanged");
        let client = client.to_vec();
        let feeder = tokio::spawn(async move {
            for piece in client.chunks(chunk) {
                far.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            far.shutdown().await.unwrap();
            far
        });
        let mut read = Vec::new();
        g.read_to_end(&mut read).await.unwrap();
        drop(feeder.await.unwrap());
        read
    }

    fn client_frames() -> (Vec<u8>, Vec<u8>) {
        // Stream 5 is above the GOAWAY's last stream (3): its WINDOW_UPDATE
        // goes; everything else stays, the connection's window update on
        // stream 0 and a stream at the last id included.
        let mut all = PREFACE.to_vec();
        let mut kept = PREFACE.to_vec();
        for f in [
            frame(0x4, 0, 0, &[0; 6]),
            frame(HEADERS, 0x4, 3, b"headers-of-3"),
            window_update(3),
            frame(HEADERS, 0x4, 5, b"headers-of-5"),
            window_update(0),
            frame(0x0, 0x1, 3, &[7; 40]),
        ] {
            all.extend_from_slice(&f);
            kept.extend_from_slice(&f);
        }
        let dropped = window_update(5);
        all.extend_from_slice(&dropped);
        let tail = frame(0x3, 0, 5, &8u32.to_be_bytes());
        all.extend_from_slice(&tail);
        kept.extend_from_slice(&tail);
        (all, kept)
    }

    #[tokio::test]
    async fn after_a_goaway_window_updates_above_its_last_stream_are_dropped_however_the_bytes_are_cut() {
        let mut server = frame(0x4, 0, 0, &[]);
        server.extend_from_slice(&goaway(0x7fff_ffff));
        server.extend_from_slice(&frame(PING, 0, 0, &[1; 8]));
        server.extend_from_slice(&goaway(3));
        server.extend_from_slice(&frame(0x1, 0x5, 3, b"response"));
        let (all, kept) = client_frames();
        for chunk in 1..=all.len() {
            assert_eq!(through(&server, &all, chunk).await, kept, "pieces of {chunk} bytes");
        }
    }

    #[tokio::test]
    async fn streams_opened_after_the_shutdown_ping_is_acked_lose_their_window_updates() {
        // h2's graceful shutdown: GOAWAY(2^31-1), PING; the second GOAWAY is
        // not written yet when the ack and the late stream arrive together.
        let mut server = goaway(0x7fff_ffff);
        server.extend_from_slice(&frame(PING, 0, 0, &[9, 8, 7, 6, 5, 4, 3, 2]));
        let mut all = PREFACE.to_vec();
        let mut kept = PREFACE.to_vec();
        let before = [
            frame(HEADERS, 0x4, 1, b"one"),
            frame(HEADERS, 0x4, 3, b"three"),
            // Another PING's ack does not count.
            frame(PING, ACK, 0, &[1; 8]),
            frame(HEADERS, 0x4, 7, b"seven"),
            window_update(7),
            frame(PING, ACK, 0, &[9, 8, 7, 6, 5, 4, 3, 2]),
            frame(HEADERS, 0x4, 9, b"nine"),
        ];
        for f in before {
            all.extend_from_slice(&f);
            kept.extend_from_slice(&f);
        }
        all.extend_from_slice(&window_update(9));
        for f in [window_update(7), window_update(0), window_update(1)] {
            all.extend_from_slice(&f);
            kept.extend_from_slice(&f);
        }
        for chunk in 1..=all.len() {
            assert_eq!(through(&server, &all, chunk).await, kept, "pieces of {chunk} bytes");
        }
    }

    #[tokio::test]
    async fn a_reader_with_little_room_gets_every_kept_byte() {
        let mut server = frame(0x4, 0, 0, &[]);
        server.extend_from_slice(&goaway(3));
        let (all, kept) = client_frames();
        for room in 1..12 {
            let (near, mut far) = tokio::io::duplex(1 << 16);
            let mut g = Guarded::new(near);
            g.write_all(&server).await.unwrap();
            far.write_all(&all).await.unwrap();
            far.shutdown().await.unwrap();
            let mut read = Vec::new();
            let mut buf = vec![0; room];
            loop {
                let n = g.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                read.extend_from_slice(&buf[..n]);
            }
            assert_eq!(read, kept, "{room} bytes of room");
        }
    }

    #[tokio::test]
    async fn without_a_goaway_nothing_is_dropped() {
        let (all, _) = client_frames();
        for chunk in [1, 7, 9, 10, all.len()] {
            assert_eq!(through(&frame(0x4, 0, 0, &[]), &all, chunk).await, all);
        }
    }

    #[tokio::test]
    async fn http1_passes_untouched() {
        // Bytes that would be a WINDOW_UPDATE frame, in a connection that did
        // not open with the preface.
        let mut req = b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 13\r\n\r\n".to_vec();
        req.extend_from_slice(&window_update(9));
        for chunk in [1, 3, req.len()] {
            assert_eq!(through(&goaway(1), &req, chunk).await, req);
        }
        // A preface cut short and then wrong is HTTP/1 too.
        let odd = b"PRI * HTTP/1.1\r\n\r\n".to_vec();
        assert_eq!(through(&[], &odd, 2).await, odd);
    }

    #[tokio::test]
    async fn a_truncated_header_reaches_the_reader() {
        let mut all = PREFACE.to_vec();
        all.extend_from_slice(&[0, 0, 4, WINDOW_UPDATE]);
        assert_eq!(through(&goaway(1), &all, 5).await, all);
    }
}
