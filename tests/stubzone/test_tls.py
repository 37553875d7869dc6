"""Who may talk to the endpoint (docs/reference.md section 5): TLS 1.2+ with a client certificate of
`--client-ca` (refused in the handshake, and logged), then the `--allow` list (403 right after the
handshake, before any request)."""

import socket
import ssl
import time

import pytest

from harness.stubzone import StubzoneProcess, client_context, request, skydns_args

ATTEMPT = (b'POST /federations/fed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
           b'Content-Length: 30\r\nConnection: close\r\n\r\n{"nameservers": ["192.0.2.1"]}')


def attempt(port: int, context: ssl.SSLContext | None) -> tuple[int, bytes | Exception]:
    """Connect (TLS unless ``context`` is None), send a POST, read: ``(local port, bytes or error)``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    local_port = sock.getsockname()[1]
    try:
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
        sock.sendall(ATTEMPT)
        return local_port, sock.recv(4096)
    except (ssl.SSLError, ConnectionError) as exc:
        return local_port, exc
    finally:
        sock.close()


# (id, client certificate or None, reason logged by the server)
REFUSED = [
    ("no client certificate", None, "peer did not return a certificate"),
    ("certificate from another CA", "foreign", "certificate verify failed: unable to get local issuer certificate"),
    ("expired certificate", "expired", "certificate verify failed: certificate has expired"),
    ("server certificate used as a client's", "server", "certificate verify failed: unsuitable certificate purpose"),
]


@pytest.mark.parametrize(("cert", "reason"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_untrusted_clients_are_refused_in_the_handshake_and_logged(
    stubzone: StubzoneProcess, pki, etcd, skydns_prefix, cert, reason,
):
    before, revision, log_start = etcd.get_prefix(skydns_prefix), etcd.revision(), len(stubzone.lines)
    local_port, outcome = attempt(stubzone.port, client_context(pki, cert))
    assert not (isinstance(outcome, bytes) and outcome.startswith(b"HTTP/")), outcome
    stubzone.wait_for_refusal(local_port, reason, start=log_start)
    assert etcd.get_prefix(skydns_prefix) == before
    assert etcd.revision() == revision


def test_plain_http_is_refused_and_logged(stubzone: StubzoneProcess):
    log_start = len(stubzone.lines)
    local_port, outcome = attempt(stubzone.port, None)
    assert not (isinstance(outcome, bytes) and outcome.startswith(b"HTTP/")), outcome
    stubzone.wait_for_refusal(local_port, "plain HTTP sent to the HTTPS port", start=log_start)


def test_tls_1_1_is_refused(stubzone: StubzoneProcess, pki):
    context = client_context(pki, maximum=ssl.TLSVersion.TLSv1_1)
    context.minimum_version = ssl.TLSVersion.TLSv1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer TLS 1.1 at all
    log_start = len(stubzone.lines)
    local_port, outcome = attempt(stubzone.port, context)
    assert isinstance(outcome, ssl.SSLError), outcome
    stubzone.wait_for_refusal(local_port, "client offers no TLS version from 1.2 on", start=log_start)


def test_tls_1_2_is_accepted(stubzone: StubzoneProcess, pki):
    answer = request(stubzone.port, client_context(pki, maximum=ssl.TLSVersion.TLSv1_2), "GET", "/federations")
    assert answer.status == 200


NOT_ALLOWED = "client CN=someone-else is not allowed (its CN and SANs are not in --allow)"


def test_trusted_client_outside_the_allow_list_gets_403_everywhere(stubzone: StubzoneProcess, etcd, skydns_prefix):
    before, revision = etcd.get_prefix(skydns_prefix), etcd.revision()
    for method, path in (("POST", "/federations/fed"), ("GET", "/federations"), ("DELETE", "/federations/fed"),
                         ("GET", "/healthz"), ("GET", "/no/such/route"), ("PUT", "/federations/fed")):
        answer = stubzone.request(method, path, {"nameservers": ["192.0.2.1"]}, cert="stranger")
        assert answer.status == 403, (method, path, answer)
        assert answer.body == {"error": NOT_ALLOWED}
        assert answer.headers["Connection"] == "close"
    assert etcd.get_prefix(skydns_prefix) == before
    assert etcd.revision() == revision


def test_a_client_outside_the_allow_list_gets_403_right_after_the_handshake(stubzone: StubzoneProcess, pki):
    """The allow-list is judged on the certificate, not on a request: the stranger's connection is answered
    and closed without sending a byte, so it never waits for a request nor holds an allowed client's slot."""
    log_start = len(stubzone.lines)
    with socket.create_connection(("127.0.0.1", stubzone.port), timeout=10) as plain, \
            client_context(pki, "stranger").wrap_socket(plain, server_hostname="127.0.0.1") as sock:
        local_port = sock.getsockname()[1]
        started = time.monotonic()
        received = b""
        while chunk := sock.recv(4096):  # nothing sent: the answer comes unasked, then the close
            received += chunk
        closed_after = time.monotonic() - started
    assert received.startswith(b"HTTP/1.1 403 Forbidden\r\n"), received
    assert received.endswith(f'{{"error": "{NOT_ALLOWED}"}}'.encode()), received
    assert closed_after < 5, closed_after
    stubzone.wait_for_refusal(local_port, NOT_ALLOWED, start=log_start, what=("client", "clients"))


def test_a_dns_san_in_the_allow_list_lets_the_client_in(stubzone: StubzoneProcess):
    answer = stubzone.request("GET", "/federations", cert="san_only")
    assert answer.status == 200


def test_a_stalled_handshake_times_out_without_holding_up_others(pki, etcd, etcd_prefix):
    server = StubzoneProcess(pki, *skydns_args(etcd.url, etcd_prefix), "--tls-handshake-timeout", "0.5")
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as stalled:
            local_port = stalled.getsockname()[1]
            assert server.request("GET", "/healthz").status == 200  # served while the other one stalls
            assert stalled.recv(100) == b""  # closed by the server after the timeout
        server.wait_for_log(
            rf'TLS handshake refused: peer=127\.0\.0\.1:{local_port} reason="no TLS handshake within the timeout"'
        )
    finally:
        assert server.stop() == 0


def test_a_port_probe_is_not_a_refusal(pki, etcd, etcd_prefix):
    server = StubzoneProcess(pki, *skydns_args(etcd.url, etcd_prefix), "--log-level", "debug")
    server.start()
    try:
        probe = socket.create_connection(("127.0.0.1", server.port), timeout=10)  # kubelet tcpSocket
        local_port = probe.getsockname()[1]
        probe.close()
        server.wait_for_log(rf"TLS handshake not finished: peer=127\.0\.0\.1:{local_port} closed the connection")
        assert not any(f":{local_port} reason=" in line for line in server.lines)
    finally:
        assert server.stop() == 0


# TLS 1.2 suites a client may offer; the server's certificate is ECDSA (feddns certs' default key).
CBC_SUITES = ["ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384", "ECDHE-ECDSA-AES128-SHA",
              "ECDHE-ECDSA-AES256-SHA"]
AEAD_SUITES = ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES256-GCM-SHA384", "ECDHE-ECDSA-CHACHA20-POLY1305"]


@pytest.mark.parametrize("suite", CBC_SUITES)
def test_tls_1_2_refuses_cbc_suites(stubzone: StubzoneProcess, pki, suite):
    context = client_context(pki, maximum=ssl.TLSVersion.TLSv1_2)
    context.set_ciphers(suite)
    log_start = len(stubzone.lines)
    local_port, outcome = attempt(stubzone.port, context)
    assert isinstance(outcome, ssl.SSLError), outcome
    stubzone.wait_for_refusal(local_port, "no shared cipher", start=log_start)


@pytest.mark.parametrize("suite", AEAD_SUITES)
def test_tls_1_2_offers_aead_suites(stubzone: StubzoneProcess, pki, suite):
    context = client_context(pki, maximum=ssl.TLSVersion.TLSv1_2)
    context.set_ciphers(suite)
    with socket.create_connection(("127.0.0.1", stubzone.port), timeout=10) as plain, \
            context.wrap_socket(plain, server_hostname="127.0.0.1") as sock:
        assert sock.version() == "TLSv1.2"
        assert sock.cipher()[0] == suite
