"""Bad input over real TLS: each gets the status of docs/reference.md section 5 and a reason, is
logged, and leaves etcd exactly as it was (same keys, same values, same index)."""

import json
import re
import socket

import pytest

from harness.stubzone import StubzoneProcess, client_context

GOOD = ["192.0.2.1", "192.0.2.2"]


def body(nameservers: object) -> bytes:
    return json.dumps({"nameservers": nameservers}).encode()


# (id, method, path, raw body or None, content type, status, words the reason must contain)
CASES = [
    ("malformed JSON", "POST", "/federations/fed", b'{"nameservers": ["192.0.2.1"',
     "application/json", 400, "not JSON"),
    ("not UTF-8", "POST", "/federations/fed", b'{"nameservers": ["\xff"]}', "application/json", 400, "not JSON"),
    ("JSON but not an object", "POST", "/federations/fed", b'["192.0.2.1"]', "application/json", 400, "JSON object"),
    ("unknown field", "POST", "/federations/fed", b'{"nameservers": ["192.0.2.1"], "ttl": 30}',
     "application/json", 400, "unknown field(s): 'ttl'"),
    ("no nameservers field", "POST", "/federations/fed", b"{}",
     "application/json", 400, "'nameservers' must be a list"),
    ("nameservers not a list", "POST", "/federations/fed", b'{"nameservers": "192.0.2.1"}',
     "application/json", 400, "'nameservers' must be a list"),
    ("empty list", "POST", "/federations/fed", body([]), "application/json", 400, "has 0 entries; 1 to 16"),
    ("17 nameservers", "POST", "/federations/fed", body([f"192.0.2.{i}" for i in range(1, 18)]),
     "application/json", 400, "has 17 entries; 1 to 16"),
    ("hostname", "POST", "/federations/fed", body(["ns1.example.com"]), "application/json", 400,
     "nameservers[0]: 'ns1.example.com' is not an IP address"),
    ("not a string", "POST", "/federations/fed", body(["192.0.2.1", 53]), "application/json", 400,
     "nameservers[1] must be a string"),
    ("port 0", "POST", "/federations/fed", body(["192.0.2.1:0"]), "application/json", 400,
     "nameservers[0]: '192.0.2.1:0': port must be 1 to 65535"),
    ("port too big", "POST", "/federations/fed", body(["[2001:db8::1]:65536"]), "application/json", 400,
     "nameservers[0]: '[2001:db8::1]:65536': port must be 1 to 65535"),
    ("port with a leading zero", "POST", "/federations/fed", body(["192.0.2.1:0053"]), "application/json", 400,
     "nameservers[0]: '192.0.2.1:0053': port '0053' has a leading zero (write 53)"),
    ("loopback", "POST", "/federations/fed", body(["192.0.2.1", "127.0.0.1:5353"]), "application/json", 400,
     "nameservers[1]: '127.0.0.1:5353' is loopback: the cluster DNS would send the queries to itself "
     "(--allow-loopback-nameservers)"),
    ("loopback v6", "POST", "/federations/fed", body(["::1"]), "application/json", 400, "'::1' is loopback"),
    ("NaN", "POST", "/federations/fed", b'{"nameservers": NaN}', "application/json", 400,
     "body is not JSON (RFC 8259, UTF-8): NaN is not a JSON value"),
    ("Infinity in the list", "POST", "/federations/fed", b'{"nameservers": ["192.0.2.1", -Infinity]}',
     "application/json", 400, "body is not JSON (RFC 8259, UTF-8): -Infinity is not a JSON value"),
    ("IPv6 zone", "POST", "/federations/fed", body(["fe80::1%eth0"]), "application/json", 400, "not a unicast"),
    ("IPv6 zone, global", "POST", "/federations/fed", body(["2001:db8::1%eth0"]), "application/json", 400,
     "with a zone"),
    ("unspecified", "POST", "/federations/fed", body(["0.0.0.0"]), "application/json", 400, "is unspecified"),
    ("unspecified v6", "POST", "/federations/fed", body(["[::]:53"]), "application/json", 400, "is unspecified"),
    ("broadcast", "POST", "/federations/fed", body(["255.255.255.255"]), "application/json", 400,
     "is the broadcast address"),
    ("multicast", "POST", "/federations/fed", body(["224.0.0.251"]), "application/json", 400, "is multicast"),
    ("multicast v6", "POST", "/federations/fed", body(["ff02::fb"]), "application/json", 400, "is multicast"),
    ("link-local", "POST", "/federations/fed", body(["169.254.169.254"]), "application/json", 400, "is link-local"),
    ("link-local v6", "POST", "/federations/fed", body(["[fe80::1]:5353"]), "application/json", 400, "is link-local"),
    ("IPv4-mapped", "POST", "/federations/fed", body(["::ffff:1.2.3.4"]), "application/json", 400,
     "nameservers[0]: '::ffff:1.2.3.4' is an IPv4-mapped IPv6 address; write the IPv4 address 1.2.3.4 instead"),
    ("IPv4-mapped with a port", "POST", "/federations/fed", body(["192.0.2.1", "[::ffff:192.0.2.9]:5353"]),
     "application/json", 400, "nameservers[1]: '[::ffff:192.0.2.9]:5353' is an IPv4-mapped IPv6 address"),
    ("IPv4-mapped, written long", "POST", "/federations/fed", body(["0:0:0:0:0:ffff:c000:209"]), "application/json",
     400, "write the IPv4 address 192.0.2.9 instead"),
    ("link-local, IPv4-mapped", "POST", "/federations/fed", body(["::ffff:169.254.169.254"]), "application/json", 400,
     "is an IPv4-mapped IPv6 address; write the IPv4 address 169.254.169.254 instead"),
    ("duplicate key", "POST", "/federations/fed",
     b'{"nameservers": ["192.0.2.1"], "nameservers": ["192.0.2.2"]}', "application/json", 400,
     "body: the key 'nameservers' is given twice in one object"),
    ("duplicate key, nested", "POST", "/federations/fed",
     b'{"nameservers": [{"a": 1, "a": 2}]}', "application/json", 400, "the key 'a' is given twice in one object"),
    ("non-ASCII port digits", "POST", "/federations/fed", body(["192.0.2.1:\u0665\u0663"]), "application/json", 400,
     "with an optional port (ASCII)"),
    ("colon without port", "POST", "/federations/fed", body(["192.0.2.1:"]), "application/json", 400,
     "with an optional port"),
    ("duplicate", "POST", "/federations/fed", body(["192.0.2.1", "192.0.2.1:53"]), "application/json", 400, "twice"),
    ("deeply nested", "POST", "/federations/fed", b"[" * 60000, "application/json", 400, "not JSON"),
    ("huge integer", "POST", "/federations/fed", b'{"nameservers": [' + b"9" * 5000 + b"]}", "application/json",
     400, "not JSON"),
    ("bad name My_Fed", "POST", "/federations/My_Fed", body(GOOD), "application/json", 400,
     "federation name 'My_Fed' is not a lowercase DNS label"),
    ("64-character name", "POST", "/federations/" + "a" * 64, body(GOOD), "application/json", 400,
     "64 characters long; a DNS label has at most 63"),
    ("empty name", "POST", "/federations/", body(GOOD), "application/json", 400, "federation name is empty"),
    ("encoded slash in name", "POST", "/federations/a%2Fb", body(GOOD), "application/json", 400, "'a/b'"),
    ("slash in name", "DELETE", "/federations/fed/ns1", None, "application/json", 400, "'fed/ns1'"),
    ("bad name on GET", "GET", "/federations/-x", None, "application/json", 400, "not a lowercase DNS label"),
    ("bad name on DELETE", "DELETE", "/federations/x_y", None, "application/json", 400, "not a lowercase DNS label"),
    ("body over 64 KiB", "POST", "/federations/fed", body(GOOD) + b" " * 65536, "application/json", 413,
     "body is over 65536 bytes"),
    ("wrong content type", "POST", "/federations/fed", body(GOOD), "text/plain", 415,
     "content type 'text/plain' is not application/json"),
    ("form content type", "POST", "/federations/fed", b"nameservers=192.0.2.1", "application/x-www-form-urlencoded",
     415, "is not application/json"),
    ("unknown route", "GET", "/zones", None, "application/json", 404, "no such resource: /zones"),
    ("unknown method", "PUT", "/federations/fed", body(GOOD), "application/json", 405,
     "method PUT is not allowed here (allowed: DELETE, GET, HEAD, POST)"),
]


@pytest.fixture(scope="module")
def seeded(stubzone: StubzoneProcess, etcd, skydns_prefix) -> str:
    """A federation already programmed, so "unchanged" means something."""
    assert stubzone.request("POST", "/federations/fed", {"nameservers": GOOD}).status == 200
    return skydns_prefix


@pytest.mark.parametrize(
    ("method", "path", "raw", "content_type", "status", "words"),
    [case[1:] for case in CASES], ids=[case[0] for case in CASES],
)
def test_bad_input_is_refused_logged_and_changes_nothing(
    stubzone: StubzoneProcess, etcd, seeded, method, path, raw, content_type, status, words,
):
    before, index, log_start = etcd.v2_leaves(seeded), etcd.v2_index(), len(stubzone.lines)
    answer = stubzone.request(method, path, raw=raw, content_type=content_type)
    assert answer.status == status, answer
    assert list(answer.body) == ["error"], answer
    assert words in answer.body["error"]
    assert etcd.v2_leaves(seeded) == before
    assert etcd.v2_index() == index
    stubzone.wait_for_log(
        rf'{method} \S+ client="CN=feddns-controller" peer=127\.0\.0\.1:\d+ status={status} '
        rf'reason=".*{re.escape(words)}',
        start=log_start,
    )


def test_405_keeps_the_allow_header(stubzone: StubzoneProcess):
    answer = stubzone.request("PATCH", "/federations/fed", raw=body(GOOD))
    assert answer.status == 405
    assert answer.headers["Allow"] == "DELETE,GET,HEAD,POST"


def test_exactly_64_kib_is_accepted(stubzone: StubzoneProcess, seeded):
    raw = body(["192.0.2.64"])
    raw += b" " * (64 * 1024 - len(raw))
    answer = stubzone.request("POST", "/federations/big", raw=raw)
    assert answer.status == 200, answer
    assert answer.body["nameservers"] == ["192.0.2.64"]


def test_unknown_federation_is_404(stubzone: StubzoneProcess):
    for method in ("GET", "DELETE"):
        answer = stubzone.request(method, "/federations/neverprogrammed")
        assert answer.status == 404
        assert answer.body == {"error": "federation 'neverprogrammed' is not programmed"}


def raw_exchange(stubzone: StubzoneProcess, request: bytes) -> tuple[int, str, object]:
    """Send ``request`` as is over TLS; (status, Content-Type, JSON body or the raw text)."""
    with socket.create_connection(("127.0.0.1", stubzone.port), timeout=10) as plain, \
            client_context(stubzone.pki).wrap_socket(plain, server_hostname="127.0.0.1") as sock:
        sock.sendall(request)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    try:
        parsed: object = json.loads(body)
    except ValueError:
        parsed = body.decode("latin-1")
    return int(lines[0].split()[1]), headers.get("Content-Type", ""), parsed


HEAD = b"Host: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n"
# (id, raw request, status)
UNPARSED = [
    ("bad request line", b"GARBAGE\r\n\r\n", 400),
    ("bad method token", b"GE(T /federations HTTP/1.1\r\n" + HEAD + b"\r\n", 400),
    ("bad HTTP version", b"GET /federations HTTP/9\r\n" + HEAD + b"\r\n", 400),
    ("header line over 8190 bytes", b"GET /federations HTTP/1.1\r\n" + HEAD + b"X-Big: " + b"a" * 9000 + b"\r\n\r\n",
     400),
    ("200 headers", b"GET /federations HTTP/1.1\r\n" + HEAD + b"".join(b"X-%d: 1\r\n" % i for i in range(200))
     + b"\r\n", 400),
    ("Content-Length and chunked", b"POST /federations/fed HTTP/1.1\r\n" + HEAD +
     b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    ("bad chunk size", b"POST /federations/fed HTTP/1.1\r\n" + HEAD +
     b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400),
    ("chunk longer than its size", b"POST /federations/fed HTTP/1.1\r\n" + HEAD +
     b"Transfer-Encoding: chunked\r\n\r\n2\r\n{\"nameservers\": []}\r\n0\r\n\r\n", 400),
    ("method no route has", b"OPTIONS /federations HTTP/1.1\r\n" + HEAD + b"\r\n", 405),
    ("no such path", b"GET /nowhere HTTP/1.1\r\n" + HEAD + b"\r\n", 404),
]


@pytest.mark.parametrize(("raw", "status"), [case[1:] for case in UNPARSED], ids=[case[0] for case in UNPARSED])
def test_requests_aiohttp_refuses_itself_are_answered_as_json_too(stubzone: StubzoneProcess, etcd, seeded, raw,
                                                                  status):
    before, index, log_start = etcd.v2_leaves(seeded), etcd.v2_index(), len(stubzone.lines)
    got, content_type, answer = raw_exchange(stubzone, raw)
    assert got == status, answer
    assert content_type.startswith("application/json"), (content_type, answer)
    assert isinstance(answer, dict) and list(answer) == ["error"] and answer["error"], answer
    assert etcd.v2_leaves(seeded) == before
    assert etcd.v2_index() == index
    stubzone.wait_for_log(rf'client="CN=feddns-controller" peer=127\.0\.0\.1:\d+ status={status} ',
                          start=log_start)
    assert not any("Traceback" in line or " ERROR " in line for line in stubzone.lines[log_start:])


def test_a_chunked_body_that_goes_wrong_after_the_headers_is_answered_not_left_hanging(stubzone: StubzoneProcess):
    """aiohttp's C parser does not fail the read in progress then; the body timeout answers it (JSON, 408)."""
    with socket.create_connection(("127.0.0.1", stubzone.port), timeout=15) as plain, \
            client_context(stubzone.pki).wrap_socket(plain, server_hostname="127.0.0.1") as sock:
        sock.sendall(b"POST /federations/fed HTTP/1.1\r\n" + HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        sock.sendall(b"zz\r\n{}\r\n0\r\n\r\n")
        head = b""
        while chunk := sock.recv(65536):
            head += chunk
    status_line, _, rest = head.partition(b"\r\n")
    assert re.fullmatch(rb"HTTP/1\.[01] (400 Bad Request|408 Request Timeout)", status_line), head
    assert b"application/json" in rest and b'{"error": ' in rest, head
