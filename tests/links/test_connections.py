"""The webhook's HTTPS socket, shared with the stub-zone endpoint (feddns/https.py): one TLS policy (TLS 1.2
with AEAD suites only, and 1.3), pending connections bounded per address, a deadline for every request and
an end to idle kept-alive connections."""

import contextlib
import http.client
import json
import socket
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.ports import free_port, wait_until
from harness.process import ChildProcess
from harness.scrape import unlabelled_sample
from tests.links.support import LinksProcess, Pki, admission_review, pod

# TLS 1.2 suites a client may offer; the server's certificate is ECDSA (feddns certs' default key).
CBC_SUITES = ["ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384", "ECDHE-ECDSA-AES128-SHA",
              "ECDHE-ECDSA-AES256-SHA"]
AEAD_SUITES = ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305"]


def handshake(port: int, context: ssl.SSLContext) -> tuple[str | None, str | None]:
    """``(TLS version, suite)`` a client with ``context`` ends up with."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as plain, \
            context.wrap_socket(plain, server_hostname="127.0.0.1") as sock:
        cipher = sock.cipher()
        return sock.version(), cipher[0] if cipher else None


def tls12(webhook: LinksProcess, suite: str) -> ssl.SSLContext:
    context = webhook.context()
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(suite)
    return context


@pytest.mark.parametrize("suite", CBC_SUITES)
def test_tls_1_2_refuses_cbc_suites(webhook: LinksProcess, suite):
    with pytest.raises(ssl.SSLError):
        handshake(webhook.port, tls12(webhook, suite))


@pytest.mark.parametrize("suite", AEAD_SUITES)
def test_tls_1_2_offers_aead_suites(webhook: LinksProcess, suite):
    assert handshake(webhook.port, tls12(webhook, suite)) == ("TLSv1.2", suite)


def test_tls_1_3_is_offered(webhook: LinksProcess):
    assert handshake(webhook.port, webhook.context())[0] == "TLSv1.3"


class Webhook(LinksProcess):
    """``feddns links`` with ``--metrics``; ``metric(name)`` reads one unlabelled sample."""

    def __init__(self, pki: Pki, kubeconfig: str, *flags: str) -> None:
        self.metrics_port = free_port()
        super().__init__(pki, "--metrics", f"127.0.0.1:{self.metrics_port}", *flags, kubeconfig=kubeconfig,
                         resolver="127.0.0.1:53")

    def metric(self, name: str) -> float:
        return unlabelled_sample(self.metrics_port, name)


@pytest.fixture
def bounded(pki: Pki, kubeconfig: str) -> Iterator[Webhook]:
    """A webhook with a 1 s request timeout and a 2 s idle timeout."""
    process = Webhook(pki, kubeconfig, "--request-timeout", "1", "--idle-timeout", "2").start()
    yield process
    assert process.stop() == 0, process.lines[-20:]


def read_to_end(sock: ssl.SSLSocket) -> tuple[bytes, float]:
    """Everything the server sends until it closes, and the seconds that took."""
    started, received = time.monotonic(), b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(4096):
            received += chunk
    return received, time.monotonic() - started


def test_a_head_trickled_past_the_request_timeout_gets_408_and_the_close(bounded: Webhook):
    with socket.create_connection(("127.0.0.1", bounded.port), timeout=10) as plain, \
            bounded.context().wrap_socket(plain, server_hostname="127.0.0.1") as sock:
        sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        sock.settimeout(0.1)
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
        assert time.monotonic() - started < 3
    assert received.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), received
    bounded.wait_for_log(r'request timed out: peer=127\.0\.0\.1:\d+ reason="no whole request within 1 s')
    assert bounded.metric("feddns_links_requests_timed_out_total") == 1


def test_an_idle_kept_alive_connection_is_closed(bounded: Webhook):
    body = json.dumps(admission_review(pod())).encode()
    with socket.create_connection(("127.0.0.1", bounded.port), timeout=10) as plain, \
            bounded.context().wrap_socket(plain, server_hostname="127.0.0.1") as sock:
        sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        received, closed_after = read_to_end(sock)
    assert received.startswith(b"HTTP/1.1 200 OK\r\n"), received
    assert 1.5 < closed_after < 4, closed_after
    assert bounded.metric("feddns_links_requests_timed_out_total") == 0


def test_idle_sockets_from_one_address_take_only_its_share(pki: Pki, kubeconfig: str):
    webhook = Webhook(pki, kubeconfig, "--max-pending-per-address", "8").start()
    opened: list[socket.socket] = []
    try:
        opened.extend(socket.create_connection(("127.0.0.1", webhook.port), timeout=10,
                                               source_address=("127.0.0.2", 0)) for _ in range(100))
        wait_until(lambda: webhook.metric("feddns_links_connections_refused_total") == 92, timeout=10,
                   what="92 connections closed")
        assert webhook.metric("feddns_links_connections_pending") == 8
        assert webhook.review(pod()).allowed  # from 127.0.0.1, its own share
    finally:
        for sock in opened:
            sock.close()
        assert webhook.stop() == 0, webhook.lines[-20:]


def admitted(webhook: Webhook) -> bool:
    """Whether one review of a pod, on a new connection, is answered (as the API server sends them)."""
    try:
        return webhook.review(pod()).allowed
    except (OSError, ssl.SSLError, http.client.HTTPException):
        return False


def test_a_peer_holding_300_request_heads_leaves_room_for_the_api_server(pki: Pki, kubeconfig: str):
    """A peer without a certificate (127.0.0.3) holds 300 connections past their handshake, each trickling
    a request head (tests/stubzone/flood.py, each reopened a second after it is closed); the API server
    (127.0.0.1) still gets its reviews answered: the peer holds its --max-connections-per-client share only.
    Before the share, it held every one of the 256 --max-connections and most reviews failed."""
    webhook = Webhook(pki, kubeconfig).start()  # every limit at its default
    flood = ChildProcess([sys.executable, "-m", "tests.stubzone.flood", "--port", str(webhook.port), "--idle", "0",
                          "--trickling", "0", "--heads", "300", "--reopen-after", "1", "--path", "/mutate",
                          "--ca", str(pki.ca), "--sources", "127.0.0.3"],
                         ready="^flooding$", name="flood", cwd=Path(__file__).resolve().parents[2])
    try:
        flood.start(timeout=60)
        wait_until(lambda: webhook.metric("feddns_links_connections_refused_total") >= 300 - 256, timeout=30,
                   what="the peer's connections over its share closed")
        answered = [admitted(webhook) for _ in range(40)]
        print(f"\n{answered.count(True)} of 40 reviews answered while 300 heads trickled from one address")
        assert answered.count(True) >= 38, answered
    finally:
        flood.stop()
        assert webhook.stop() == 0, webhook.lines[-20:]
