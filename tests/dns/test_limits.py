"""Floods against a real `feddns serve` child process: memory in RSS, TCP limits over real sockets."""

import random
import socket
import time

import dns.edns
import dns.message
import dns.rcode
import pytest

from harness.ports import wait_until
from harness.serve import ServeProcess, write_records
from tests.dns.conftest import RECORDS, big_records

WEB = "web.prod.fed.svc.federation."
BIG = "big.prod.fed.svc.federation."
MB = 1024 * 1024


@pytest.fixture(scope="module")
def limited():
    """feddns serve with short TCP timeouts and a small connection limit."""
    path = write_records(RECORDS + big_records(40))
    args = ["--tcp-idle-timeout", "3", "--max-tcp-connections", "4", "--metrics", "127.0.0.1:0"]
    with ServeProcess(records=path, extra_args=args) as server:
        yield server


def framed(message: dns.message.Message) -> bytes:
    wire = message.to_wire()
    return len(wire).to_bytes(2, "big") + wire


def udp_answered(server: ServeProcess) -> bool:
    return server.addresses(WEB, cluster="a")[0] == "10.0.0.1"


def tcp_answered(server: ServeProcess) -> bool:
    return server.addresses(WEB, cluster="b", tcp=True)[0] == "10.0.0.2"


def test_cookie_and_case_variants_of_a_40_shard_answer_add_little_memory():
    path = write_records(RECORDS + big_records(40))
    with ServeProcess(records=path) as server:
        rng = random.Random(5)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(2)

            def ask(qname: str, cookie: bytes) -> None:
                query = dns.message.make_query(qname, "A", use_edns=0, payload=4096,
                                               options=[dns.edns.GenericOption(10, cookie)])
                sock.sendto(query.to_wire(), ("127.0.0.1", server.port))
                reply = dns.message.from_wire(sock.recv(65535))
                assert len(reply.answer[0]) == 40

            for _ in range(50):  # warm up: the answer, the reply cache, the allocator
                ask(BIG, b"\0" * 8)
            before = server.rss()
            for n in range(4000):
                name = "".join(c.upper() if rng.random() < 0.5 else c for c in BIG)
                ask(name if n % 2 else BIG, rng.randbytes(8))
            grown = server.rss() - before
        print(f"4,000 cookie/case variants of a 40-shard answer: RSS +{grown / MB:.1f} MB")
        assert grown < 20 * MB, f"RSS grew by {grown / MB:.1f} MB"


def test_client_that_pipelines_and_never_reads_is_bounded_and_closed(limited):
    wait_until(lambda: limited.metrics()["feddns_dns_tcp_connections"] == 0, what="no connection open")
    before = limited.rss()
    query = framed(dns.message.make_query(BIG, "A", use_edns=0, payload=4096))
    chunk = query * (MB // len(query))
    other = socket.create_connection(("127.0.0.1", limited.port))  # a well-behaved TCP client
    other.settimeout(2)
    sock = socket.create_connection(("127.0.0.1", limited.port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and never reads
    sock.settimeout(0.2)
    sent, peak, closed_after = 0, before, None
    last_progress = time.monotonic()
    deadline = last_progress + 30
    try:
        while sent < 40 * MB and time.monotonic() < deadline:
            try:
                sent += sock.send(chunk)
                last_progress = time.monotonic()
            except TimeoutError:
                pass  # the server stopped reading us: the kernel buffers are full
            except (BrokenPipeError, ConnectionResetError):
                pass
            peak = max(peak, limited.rss())
            assert udp_answered(limited)  # everyone else is answered throughout
            other.sendall(framed(dns.message.make_query(WEB, "A")))
            assert len(other.recv(65535)) > 2
            if limited.metrics()["feddns_dns_tcp_connections"] == 1:  # only the well-behaved one is left
                closed_after = time.monotonic() - last_progress
                break
    finally:
        sock.close()
        other.close()
    print(f"client that never reads: sent {sent / MB:.1f} MB, RSS +{(peak - before) / MB:.1f} MB at most, "
          f"closed {closed_after}s after its last progress")
    assert closed_after is not None, f"still open after sending {sent / MB:.0f} MB"
    assert closed_after < 3 + 3, f"closed {closed_after:.1f}s after the last byte it took (idle timeout 3s)"
    assert peak - before < 64 * MB, f"RSS grew by {(peak - before) / MB:.0f} MB"
    assert sent < 40 * MB  # the server stopped reading long before taking it all


def test_a_client_sending_a_byte_every_half_second_is_closed(limited):
    message = framed(dns.message.make_query(WEB, "A"))
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", limited.port)) as sock:
        sock.settimeout(0.5)
        for byte in message:
            try:
                sock.send(bytes((byte,)))
                if sock.recv(1) == b"":
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        else:
            pytest.fail("the whole message was taken a byte at a time")
    assert time.monotonic() - started < 3 + 2


def test_connections_above_the_limit_are_closed_and_the_others_served(limited):
    wait_until(lambda: limited.metrics()["feddns_dns_tcp_connections"] == 0, what="no connection open")
    refused_before = limited.metrics()["feddns_dns_tcp_refused_total"]
    query = framed(dns.message.make_query(WEB, "A"))
    held = [socket.create_connection(("127.0.0.1", limited.port)) for _ in range(4)]
    try:
        for sock in held:
            sock.settimeout(2)
            sock.sendall(query)
            assert len(sock.recv(65535)) > 2
        extra = socket.create_connection(("127.0.0.1", limited.port))
        extra.settimeout(2)
        try:
            extra.sendall(query)
            assert extra.recv(65535) == b""
        except (ConnectionResetError, BrokenPipeError):
            pass
        finally:
            extra.close()
        assert limited.metrics()["feddns_dns_tcp_refused_total"] == refused_before + 1
        for sock in held:  # the four still work
            sock.sendall(query)
            assert len(sock.recv(65535)) > 2
        held.pop().close()
        wait_until(lambda: limited.metrics()["feddns_dns_tcp_connections"] == 3, what="one closed")
        assert tcp_answered(limited)
    finally:
        for sock in held:
            sock.close()


def test_metric_labels_stay_bounded_under_a_flood_of_qtypes(limited):
    rng = random.Random(11)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        for qtype in rng.sample(range(1, 65535), 3000):
            for qname in (WEB, "federation.", f"x{qtype}.federation."):
                sock.sendto(dns.message.make_query(qname, qtype).to_wire(), ("127.0.0.1", limited.port))
                # FORMERR, NOTIMP, NOTAUTH: meta-TYPEs, mailbox QTYPEs and transfers (docs/serve.md)
                assert dns.message.from_wire(sock.recv(65535)).rcode() in (
                    dns.rcode.NOERROR, dns.rcode.NXDOMAIN, dns.rcode.REFUSED, dns.rcode.FORMERR, dns.rcode.NOTIMP, 9)
    import urllib.request

    assert limited.metrics_url is not None
    text = urllib.request.urlopen(limited.metrics_url + "/metrics", timeout=5).read()
    assert len(text) < 1024 * 1024
    qtypes = {line.split('qtype="')[1].split('"')[0] for line in text.decode().splitlines()
              if line.startswith("feddns_dns_queries_total{")}
    assert "other" in qtypes and qtypes <= {"A", "NS", "SOA", "AAAA", "SRV", "OPT", "IXFR", "AXFR", "ANY", "other"}
