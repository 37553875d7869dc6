"""Before any client is authenticated (docs/stubzone.md, "Connections and memory"): connections are bounded
in number (``--max-pending``, ``--max-pending-per-address``) and in memory, measured as the RSS of the real
process; a handshake not done within ``--tls-handshake-timeout`` of the accept is closed; after it,
``--max-connections`` bounds the clients let in; refusals are logged at most once a second, with a count."""

import contextlib
import http.client
import re
import socket
import ssl
import time
from collections.abc import Iterator

import pytest

from harness.ports import wait_until
from harness.stubzone import Endpoint, StubzoneProcess, client_context, close_all, connect

MB = 1024 * 1024


@pytest.fixture
def connections() -> Iterator[list[socket.socket]]:
    """Client sockets, closed after the test."""
    opened: list[socket.socket] = []
    yield opened
    for sock in opened:
        sock.close()


def test_a_thousand_idle_connections_add_little_memory_and_it_is_given_back(pki, etcd, etcd_prefix, connections):
    with Endpoint(pki, etcd.url, etcd_prefix, "--max-pending", "1000", "--max-pending-per-address", "1000") as server:
        for _ in range(3):  # TLS, the backend and the handler paths warmed up before the baseline
            assert server.request("GET", "/healthz").status == 200
        base = server.rss()
        connect(server.port, 1000, connections)
        wait_until(lambda: server.open_connections() == 1000, timeout=30, what="1000 connections open")
        held = server.rss() - base
        close_all(connections)
        wait_until(lambda: server.open_connections() == 0, timeout=30, what="no connection open")
        wait_until(lambda: server.rss() - base < 8 * MB, timeout=15, what="RSS back within 8 MB of the baseline")
        print(f"1,000 idle connections: RSS +{held / MB:.1f} MB, +{(server.rss() - base) / MB:.1f} MB after close")
        assert held < 64 * MB, f"1,000 idle connections added {held / MB:.0f} MB"
        assert server.request("GET", "/healthz").status == 200


def test_a_thousand_started_handshakes_stay_bounded_by_the_pending_pool(pki, etcd, etcd_prefix, connections):
    """Each connection sends the first byte of a ClientHello, so each one held holds its TLS objects."""
    with Endpoint(pki, etcd.url, etcd_prefix, "--max-pending-per-address", "256") as server:  # --max-pending 256
        for _ in range(3):
            assert server.request("GET", "/healthz").status == 200
        base = server.rss()
        connect(server.port, 1000, connections, first=b"\x16")
        wait_until(lambda: server.metric("feddns_stubzone_connections_refused_total") == 1000 - 256, timeout=30,
                   what="744 connections refused")
        assert server.open_connections() == server.metric("feddns_stubzone_connections_pending") == 256
        held = server.rss() - base
        close_all(connections)
        wait_until(lambda: server.open_connections() == 0, timeout=30, what="no connection open")
        wait_until(lambda: server.rss() - base < 8 * MB, timeout=15, what="RSS back within 8 MB of the baseline")
        print(f"1,000 connections with a started handshake, 256 admitted: RSS +{held / MB:.1f} MB, "
              f"+{(server.rss() - base) / MB:.1f} MB after close")
        assert held < 64 * MB, f"{held / MB:.0f} MB"


def test_over_its_share_an_address_loses_its_oldest_connection_and_it_is_logged_once_a_second(
        pki, etcd, etcd_prefix, connections):
    with Endpoint(pki, etcd.url, etcd_prefix, "--max-pending-per-address", "4") as server:
        connect(server.port, 4, connections)
        wait_until(lambda: server.open_connections() == 4, timeout=10, what="4 connections open")
        log_start = len(server.lines)
        newer: list[socket.socket] = []
        connect(server.port, 20, newer)
        wait_until(lambda: server.metric("feddns_stubzone_connections_refused_total") == 20, timeout=10,
                   what="20 connections closed")
        for sock in [*connections, *newer[:16]]:  # the oldest were closed (an end of stream or a reset)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(100) == b""
        summary = server.wait_for_log(r"connections refused: \d+ more in the last 1\.0 s", start=log_start)
        lines = [line for line in server.lines[log_start:] if "connection refused" in line or
                 "connections refused" in line]
        assert re.search(r'connection refused: peer=127\.0\.0\.1:\d+ reason="4 pending connections from '
                         r'127\.0\.0\.1 \(--max-pending-per-address\)"', lines[0])
        assert sum(int(n) for n in re.findall(r"(\d+) more", summary)) + 1 == 20
        assert len(lines) == 2, lines
        assert server.open_connections() == 4
        connections.extend(newer)
        assert server.request("GET", "/healthz").status == 200  # the newest connection of an address is served


def keep_alive(server: StubzoneProcess, source: str = "127.0.0.1", cert: str = "client") -> http.client.HTTPSConnection:
    """A connection let in from ``source`` with ``cert``, kept open after one request."""
    connection = http.client.HTTPSConnection("127.0.0.1", server.port, context=client_context(server.pki, cert),
                                             timeout=10, source_address=(source, 0))
    connection.request("GET", "/healthz")
    assert connection.getresponse().read()
    return connection


def test_clients_let_in_are_bounded_by_max_connections(pki, etcd, etcd_prefix):
    with Endpoint(pki, etcd.url, etcd_prefix, "--max-connections", "2") as server:
        kept = [keep_alive(server), keep_alive(server)]
        log_start = len(server.lines)
        with pytest.raises((ConnectionError, ssl.SSLError, http.client.RemoteDisconnected)):
            server.request("GET", "/healthz")
        server.wait_for_log(r'connection refused: peer=127\.0\.0\.1:\d+ reason="2 connections open '
                            r'\(--max-connections\)"', start=log_start)
        assert server.metric("feddns_stubzone_connections_refused_total") == 1
        kept.pop().close()
        wait_until(lambda: server.open_connections() == 1, timeout=10, what="a connection slot free")
        assert server.request("GET", "/healthz").status == 200
        kept.pop().close()


def test_past_the_handshake_an_address_holds_its_share_and_the_heaviest_yields_to_a_newcomer(pki, etcd, etcd_prefix):
    """``client`` holds its share (3) from 127.0.0.2; ``san_only``, another allowed client, fills the pool (4)
    from 127.0.0.3 and gets one more connection from 127.0.0.1: the heaviest's oldest is closed for it."""
    with Endpoint(pki, etcd.url, etcd_prefix, "--max-connections", "4", "--max-connections-per-client", "3") as server:
        heavy = [keep_alive(server, "127.0.0.2") for _ in range(3)]
        log_start = len(server.lines)
        with pytest.raises((ConnectionError, ssl.SSLError, http.client.RemoteDisconnected)):
            keep_alive(server, "127.0.0.4")  # over the share of its certificate: closed after its handshake
        server.wait_for_log(r'connection refused: peer=127\.0\.0\.4:\d+ reason="3 connections from certificate '
                            r'[0-9a-f]{16} \(--max-connections-per-client\)"', start=log_start)
        light = keep_alive(server, "127.0.0.3", "san_only")  # another client: the pool (4) is full now
        assert server.request("GET", "/healthz", cert="san_only").status == 200  # 127.0.0.2's oldest closed
        heavy[0].request("GET", "/healthz")
        with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
            heavy[0].getresponse()
        heavy[0].close()
        for connection in [light, *heavy[1:]]:  # the others are still served
            connection.request("GET", "/healthz")
            assert connection.getresponse().read()
            connection.close()


def test_refused_handshakes_are_logged_at_most_once_a_second_with_a_count(pki, etcd, etcd_prefix):
    with Endpoint(pki, etcd.url, etcd_prefix) as server:
        log_start = len(server.lines)
        started = time.monotonic()
        for _ in range(200):  # plain HTTP on the TLS port: refused in the handshake
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(b"GET /federations HTTP/1.1\r\nHost: x\r\n\r\n")
                with contextlib.suppress(ConnectionResetError):
                    sock.recv(100)
        wait_until(lambda: server.metric("feddns_stubzone_tls_refused_total") == 200, timeout=30,
                   what="200 refusals counted")
        flood = time.monotonic() - started

        def logged() -> int:
            lines = [line for line in server.lines[log_start:] if "TLS handshake" in line and "refused" in line]
            return sum(int(m.group(1)) if (m := re.search(r"refused: (\d+) more", line)) else 1 for line in lines)

        wait_until(lambda: logged() == 200, timeout=10, what="every refusal in a log line or a count")
        lines = [line for line in server.lines[log_start:] if "TLS handshake" in line and "refused" in line]
        print(f"200 refused handshakes in {flood:.1f} s: {len(lines)} log lines")
        assert len(lines) <= flood + 2, lines
        assert all("plain HTTP sent to the HTTPS port" in line for line in lines)


def test_a_handshake_that_starts_and_stalls_is_closed_at_the_timeout(pki, etcd, etcd_prefix):
    with Endpoint(pki, etcd.url, etcd_prefix, "--tls-handshake-timeout", "0.5") as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as stalled:
            local_port = stalled.getsockname()[1]
            stalled.sendall(b"\x16\x03\x01")  # the start of a ClientHello record, then nothing
            started = time.monotonic()
            assert server.request("GET", "/healthz").status == 200  # served meanwhile
            with contextlib.suppress(ConnectionResetError):  # closed: an end of stream or a reset
                assert stalled.recv(100) == b""
            assert time.monotonic() - started < 5
        server.wait_for_refusal(local_port, "no TLS handshake within the timeout")
        wait_until(lambda: server.open_connections() == 0, timeout=10, what="no connection open")


def tls_connection(server: StubzoneProcess) -> ssl.SSLSocket:
    """A raw TLS connection of an allowed client."""
    plain = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    return client_context(server.pki).wrap_socket(plain, server_hostname="127.0.0.1")


def read_to_end(sock: ssl.SSLSocket) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and the seconds that took."""
    started, received = time.monotonic(), b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(4096):
            received += chunk
    return received, time.monotonic() - started


HEAD = b"POST /federations/fed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


def test_a_head_trickled_past_the_request_timeout_gets_408_and_the_close(pki, etcd, etcd_prefix):
    with Endpoint(pki, etcd.url, etcd_prefix, "--request-timeout", "1") as server, tls_connection(server) as sock:
        log_start = len(server.lines)
        sock.sendall(HEAD)
        sock.settimeout(0.1)
        started = time.monotonic()
        received = b""
        while time.monotonic() - started < 5:  # a header line every 0.1 s: never a whole head
            try:
                sock.sendall(b"X-Slow: 1\r\n")
                if not (chunk := sock.recv(4096)):
                    break
                received += chunk
            except TimeoutError:
                continue
            except (ConnectionError, ssl.SSLError):
                break
        closed_after = time.monotonic() - started
        assert received.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), received
        assert received.endswith(b'{"error": "the request did not arrive within 1 s"}'), received
        assert closed_after < 3, closed_after
        server.wait_for_log(r'request timed out: peer=127\.0\.0\.1:\d+ reason="no whole request within 1 s '
                            r'\(--request-timeout; still in a request head\)"', start=log_start)
        assert server.metric("feddns_stubzone_requests_timed_out_total") == 1


def test_a_body_trickled_past_the_request_timeout_is_closed(pki, etcd, etcd_prefix):
    with Endpoint(pki, etcd.url, etcd_prefix, "--request-timeout", "1") as server, tls_connection(server) as sock:
        sock.sendall(HEAD + b"Content-Length: 40\r\n\r\n{")
        started = time.monotonic()
        sock.settimeout(0.2)
        while time.monotonic() - started < 5:
            try:
                sock.sendall(b" ")
                if not sock.recv(4096):
                    break
            except TimeoutError:
                continue
            except (ConnectionError, ssl.SSLError):
                break
        assert time.monotonic() - started < 3
        assert server.metric("feddns_stubzone_requests_timed_out_total") == 1


def test_a_kept_alive_connection_outlives_the_request_timeout_and_closes_when_idle(pki, etcd, etcd_prefix):
    """The request timeout counts per request, not per connection; the idle timeout ends the connection."""
    with Endpoint(pki, etcd.url, etcd_prefix, "--request-timeout", "1", "--idle-timeout", "2") as server:
        connection = keep_alive(server)
        for _ in range(3):  # 1.8 s of requests in all, over one connection
            time.sleep(0.6)
            connection.request("GET", "/healthz")
            assert connection.getresponse().read()
        assert connection.sock is not None
        _, closed_after = read_to_end(connection.sock)
        assert 1.5 < closed_after < 4, closed_after
        connection.close()
        assert server.metric("feddns_stubzone_requests_timed_out_total") == 0
