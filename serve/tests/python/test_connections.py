"""What a flood of connections can take from `ratomic serve`: each listener's
bound on open connections (--max-connections), the HTTP/1 header timeout
(--header-timeout-ms) and the gRPC streams per connection (--max-streams),
over raw sockets so that nothing in a client library hides what the server
did. Waits are bounded polls of the server's own gauges, never sleeps."""

import re
import socket
import struct
import time

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from conftest import DEADLINE, OK, descriptor, request

CONFIG = """\
domain: app
descriptors:
  - key: user
    rate_limit: {unit: year, requests_per_unit: 100}
"""


def hostport(url):
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def connect(addr):
    s = socket.create_connection(addr, timeout=DEADLINE)
    return s


def http_get(sock, path):
    """One request on a kept-alive connection; the body of its answer."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: ratomic\r\n\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before the answer to {path}: {data!r}"
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200"), head
    length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed mid-body"
        body += chunk
    return body.decode()


def metric(text, name, listener):
    m = re.search(rf'^{name}{{listener="{listener}"}} (\d+)$', text, re.M)
    assert m, f"no {name} for {listener} in:\n{text}"
    return int(m.group(1))


def closed_by_server(sock):
    """True once the server has closed `sock` (EOF or reset), waiting at most DEADLINE."""
    sock.settimeout(DEADLINE)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def poll(read, want):
    """`read()` until it returns `want` (bounded by DEADLINE); the last value."""
    end = time.monotonic() + DEADLINE
    while True:
        got = read()
        if got == want or time.monotonic() > end:
            return got
        time.sleep(0.01)


def test_http_connections_past_the_bound_are_closed_at_once_and_counted(serve):
    s = serve(CONFIG, "--max-connections", "2")
    addr = hostport(s.http)
    first, second = connect(addr), connect(addr)
    assert http_get(first, "/healthz") == "ok\n"
    assert http_get(second, "/healthz") == "ok\n"
    third = connect(addr)  # the kernel completes the handshake; the server closes it
    assert closed_by_server(third), "a connection past --max-connections must be closed, not held"
    text = http_get(first, "/metrics")
    assert metric(text, "ratomic_serve_connections", "http") == 2
    assert metric(text, "ratomic_serve_max_connections", "http") == 2
    assert metric(text, "ratomic_serve_connections_refused_total", "http") == 1
    # A closed connection gives its place back.
    second.close()
    assert poll(lambda: metric(http_get(first, "/metrics"), "ratomic_serve_connections", "http"), 1) == 1
    fourth = connect(addr)
    assert http_get(fourth, "/healthz") == "ok\n"
    for sock in (first, third, fourth):
        sock.close()


def test_grpc_connections_past_the_bound_are_refused_and_the_held_one_keeps_deciding(serve):
    s = serve(CONFIG, "--max-connections", "1")
    assert s.call(request("app", descriptor(("user", "a")))).overall_code == OK  # s.channel holds the one place
    # A subchannel of its own: grpcio would otherwise share s.channel's connection.
    other = grpc.insecure_channel(s.addr, options=[("grpc.use_local_subchannel_pool", 1)])
    try:
        with pytest.raises(grpc.RpcError) as e:
            rls_pb2_grpc.RateLimitServiceStub(other).ShouldRateLimit(request("app", descriptor(("user", "b"))), timeout=DEADLINE)
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        other.close()
    assert s.call(request("app", descriptor(("user", "a")))).overall_code == OK
    with connect(hostport(s.http)) as h:
        text = http_get(h, "/metrics")
    assert metric(text, "ratomic_serve_connections", "grpc") == 1
    assert metric(text, "ratomic_serve_connections_refused_total", "grpc") >= 1


def test_an_http_head_sent_slowly_is_cut_off_after_the_header_timeout(serve):
    # 3 s: the requests that should be answered (a connection's first head,
    # the polls on a kept-alive one) must not meet the timeout during a
    # stall of the loaded machine; the two cut-offs cost the test that long.
    s = serve(CONFIG, "--header-timeout-ms", "3000")
    addr = hostport(s.http)
    slow = connect(addr)
    slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: rat")  # and never the rest
    idle = connect(addr)
    assert http_get(idle, "/healthz") == "ok\n"  # then kept alive, with no next request
    assert closed_by_server(slow), "a head that never ends must not hold its connection"
    assert closed_by_server(idle), "a kept-alive connection with no request for the timeout is closed"
    with connect(addr) as h:
        assert poll(lambda: metric(http_get(h, "/metrics"), "ratomic_serve_connections", "http"), 1) == 1
    slow.close()
    idle.close()


def h2_settings(addr):
    """The server's first SETTINGS frame, as {identifier: value}, after the client's preface."""
    with connect(addr) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + struct.pack(">I", 0)[1:] + bytes([4, 0]) + struct.pack(">I", 0))
        buf = b""
        while True:
            while len(buf) < 9:
                chunk = sock.recv(65536)
                assert chunk, "the server closed the connection before its SETTINGS"
                buf += chunk
            length = int.from_bytes(buf[:3], "big")
            kind, flags = buf[3], buf[4]
            while len(buf) < 9 + length:
                chunk = sock.recv(65536)
                assert chunk, "the server closed the connection mid-frame"
                buf += chunk
            payload, buf = buf[9 : 9 + length], buf[9 + length :]
            if kind == 4 and not flags & 1:  # SETTINGS, not an ACK
                return {ident: value for ident, value in struct.iter_unpack(">HI", payload)}


def test_grpc_advertises_max_streams_per_connection(serve):
    s = serve(CONFIG, "--max-streams", "7")
    host, port = s.addr.rsplit(":", 1)
    settings = h2_settings((host, int(port)))
    assert settings.get(3) == 7, f"SETTINGS_MAX_CONCURRENT_STREAMS: {settings}"
