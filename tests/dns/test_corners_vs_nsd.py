"""Protocol corners, each asked of feddns serve and of NSD (and BIND) in the same test.

The same names are served by all three: feddns from a records file, NSD and BIND from a zone file
with the same names (``web``: one address, ``medium``: 60, ``big``: 100). Where feddns answers
otherwise than NSD, the test asserts what NSD answers too, and docs/serve.md says why feddns
follows the RFC (or BIND) instead; should NSD change, the test says which sentence to revisit.
"""

import argparse
import socket
from collections.abc import Iterator
from dataclasses import dataclass

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import pytest

from feddns.errors import ConfigError
from feddns.server import command, settings
from harness.serve import ServeProcess, write_records
from tests.dns.nsd import NsdServer
from tests.support.bind import BindServer

WEB = "web.prod.fed.svc.federation."
MEDIUM = "medium.prod.fed.svc.federation."  # 60 A records: 1,019 bytes from feddns, with our OPT
BIG = "big.prod.fed.svc.federation."  # 100 A records: over 1,600 bytes
NAMES = {"apex": "federation.", "existing": WEB, "absent": "nosuch.prod.fed.svc.federation.", "outside": "x.example."}
ORDINARY = {"apex": dns.rcode.NOERROR, "existing": dns.rcode.NOERROR, "absent": dns.rcode.NXDOMAIN,
            "outside": dns.rcode.REFUSED}
"""What a QTYPE with no records anywhere gets at each name: NODATA, NXDOMAIN, or REFUSED outside the zone."""
NOTAUTH = 9  # RFC 2136 2.2; RFC 5936 2.2.1 for transfers of a zone the server does not have
FLAG_DAY_BYTES = 1232


def addresses(count: int, second: int) -> list[str]:
    return [f"9.{second}.{i // 250}.{i % 250 + 1}" for i in range(count)]


def records_file() -> str:
    lines = ["/fed/prod/web/a: {clusterIP: 10.0.0.1, externalIP: 1.1.1.1}"]
    for label, count, second in (("medium", 60, 1), ("big", 100, 2)):
        lines += [f"/fed/prod/{label}/c{i}: {{clusterIP: 10.9.{i // 250}.{i % 250 + 1}, externalIP: {ip}}}"
                  for i, ip in enumerate(addresses(count, second))]
    return "\n".join(lines) + "\n"


def zone_records() -> str:
    """The names of :func:`records_file` as an external client sees them, relative to ``federation.``."""
    lines = ["web.prod.fed.svc A 1.1.1.1"]
    for label, count, second in (("medium", 60, 1), ("big", 100, 2)):
        lines += [f"{label}.prod.fed.svc A {ip}" for ip in addresses(count, second)]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Servers:
    """The port of each server asked: feddns serve, NSD, BIND."""

    feddns: int
    nsd: int
    bind: int


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    bind = BindServer(zone="federation.", records=zone_records(), allow_transfer=False)
    with ServeProcess(records=write_records(records_file()), extra_args=["--order", "stable"]) as feddns, \
            NsdServer(zone_records()) as nsd:
        bind.start()
        try:
            yield Servers(feddns.port, nsd.port, bind.port)
        finally:
            bind.destroy()


# --- raw exchanges ----------------------------------------------------------------------------------------------


def udp(port: int, packet: bytes, timeout: float = 2.0) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(packet, ("127.0.0.1", port))
        return sock.recv(65535)


def framed(packet: bytes) -> bytes:
    return len(packet).to_bytes(2, "big") + packet


def read_framed(sock: socket.socket) -> bytes | None:
    """The next framed message, or ``None`` when the server closed the connection first."""
    try:
        length = _read_exactly(sock, 2)
        return None if length is None else _read_exactly(sock, int.from_bytes(length, "big"))
    except ConnectionResetError:
        return None


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def tcp(port: int, packet: bytes) -> bytes | None:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(framed(packet))
        return read_framed(sock)


def ask(port: int, packet: bytes, over_tcp: bool = False) -> dns.message.Message:
    reply = tcp(port, packet) if over_tcp else udp(port, packet)
    assert reply is not None, "the server closed the connection"
    return dns.message.from_wire(reply)


def query(qname: str, qtype: int | str, **kwargs: object) -> bytes:
    return dns.message.make_query(qname, qtype, **kwargs).to_wire()  # type: ignore[arg-type]


# --- ECS ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["apex", "existing", "absent"])
def test_ecs_with_a_scope_prefix_in_a_query_gets_formerr_with_an_opt_record(servers, where):
    """RFC 7871 6: a query's SCOPE PREFIX-LENGTH MUST be 0. BIND answers FORMERR (without an OPT,
    which RFC 6891 6.1.1 asks for); NSD does not implement ECS and answers as if it were absent."""
    scoped = query(NAMES[where], "A", use_edns=0, options=[dns.edns.ECSOption("10.0.0.0", 24, 16)])
    ours = ask(servers.feddns, scoped)
    assert ours.rcode() == dns.rcode.FORMERR
    assert ours.edns == 0 and ours.payload == FLAG_DAY_BYTES and not ours.options
    assert str(ours.question[0].name) == NAMES[where] and not ours.flags & dns.flags.AA
    assert ask(servers.bind, scoped).rcode() == dns.rcode.FORMERR
    assert ask(servers.nsd, scoped).rcode() == ORDINARY[where]
    unscoped = query(NAMES[where], "A", use_edns=0, options=[dns.edns.ECSOption("10.0.0.0", 24, 0)])
    assert ask(servers.feddns, unscoped).rcode() == ask(servers.bind, unscoped).rcode() == ORDINARY[where]


# --- zone transfers -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("over_tcp", [False, True], ids=["udp", "tcp"])
@pytest.mark.parametrize("qtype", ["AXFR", "IXFR"])
@pytest.mark.parametrize(("where", "rcode"), [("apex", dns.rcode.REFUSED), ("existing", NOTAUTH),
                                              ("absent", NOTAUTH), ("outside", NOTAUTH)])
def test_zone_transfers_get_one_answer_at_every_name_of_a_kind(servers, qtype, where, rcode, over_tcp):
    """The zone's own transfer is REFUSED (no one may transfer it); anywhere else there is no zone
    to transfer: NOTAUTH (RFC 5936 2.2.1), whether the name exists or not. BIND answers the same over
    both transports, NSD over TCP; over UDP NSD answers AXFR NOTIMP (RFC 5936 4.2: not defined)."""
    packet = query(NAMES[where], qtype)
    ours = ask(servers.feddns, packet, over_tcp)
    assert ours.rcode() == rcode and not ours.answer and not ours.authority
    assert not ours.flags & dns.flags.AA
    assert ask(servers.bind, packet, over_tcp).rcode() == rcode
    nsd = ask(servers.nsd, packet, over_tcp).rcode()
    assert nsd == (dns.rcode.NOTIMP if qtype == "AXFR" and not over_tcp else rcode)


# --- TCP framing --------------------------------------------------------------------------------------------------


def response_packet() -> bytes:
    packet = bytearray(query(WEB, "A"))
    packet[2] |= 0x80  # QR: a response
    return bytes(packet)


NOT_QUERIES = {"response": response_packet(), "9 bytes": b"\x01\x02\x03" * 3, "empty": b""}


@pytest.mark.parametrize("message", NOT_QUERIES.values(), ids=NOT_QUERIES.keys())
def test_a_framed_message_that_is_not_a_query_is_dropped_and_the_connection_goes_on(servers, message):
    """The framing is intact, so the queries behind the message are whole: feddns drops it, as it
    drops it over UDP, and answers them. NSD and BIND close the connection, unanswered."""
    first, second = (dns.message.make_query(WEB, "A") for _ in range(2))
    burst = framed(message) + framed(first.to_wire()) + framed(second.to_wire())
    with socket.create_connection(("127.0.0.1", servers.feddns), timeout=2) as sock:
        sock.sendall(burst)
        replies = [read_framed(sock), read_framed(sock)]
        assert [dns.message.from_wire(r).id for r in replies if r] == [first.id, second.id]
        third = dns.message.make_query(WEB, "A")
        sock.sendall(framed(third.to_wire()))
        reply = read_framed(sock)
        assert reply is not None and dns.message.from_wire(reply).answer
    for port in (servers.nsd, servers.bind):
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(burst)
            assert read_framed(sock) is None


# --- meta QTYPEs --------------------------------------------------------------------------------------------------

META = {"0": (0, None), "OPT": (41, dns.rcode.FORMERR), "TKEY": (249, dns.rcode.FORMERR),
        "TSIG": (250, dns.rcode.FORMERR), "MAILB": (253, dns.rcode.NOTIMP), "MAILA": (254, dns.rcode.NOTIMP)}


@pytest.mark.parametrize("where", NAMES)
@pytest.mark.parametrize(("qtype", "error"), META.values(), ids=META.keys())
def test_meta_qtypes_are_answered_as_bind_answers_them(servers, qtype, error, where):
    """OPT, TKEY and TSIG name data of one message, never of a name (RFC 6895 3.1): FORMERR; the
    mailbox QTYPEs are not implemented (RFC 1035 4.1.1): NOTIMP; type 0 is a type like any other.
    BIND answers so at every name; NSD answers every one of them as an ordinary type."""
    expected = ORDINARY[where] if error is None else error
    for edns in (False, 0):
        packet = query(NAMES[where], qtype, use_edns=edns)
        ours, bind = ask(servers.feddns, packet), ask(servers.bind, packet)
        assert ours.rcode() == bind.rcode() == expected
        assert bool(ours.flags & dns.flags.AA) == bool(bind.flags & dns.flags.AA)
        assert ours.edns == bind.edns and len(ours.question) == len(bind.question) == 1
        assert ask(servers.nsd, packet).rcode() == ORDINARY[where]


# --- UDP reply size -----------------------------------------------------------------------------------------------

SIZES = [(WEB, None, False), (WEB, 512, False), (MEDIUM, None, True), (MEDIUM, 512, True), (MEDIUM, 1000, True),
         (MEDIUM, 1232, False), (MEDIUM, 4096, False), (BIG, 1232, True), (BIG, 1400, True), (BIG, 4096, True),
         (BIG, 65535, True)]


@pytest.mark.parametrize(("qname", "payload", "truncated"), SIZES)
def test_udp_replies_are_at_most_the_askers_buffer_and_1232_bytes(servers, qname, payload, truncated):
    """DNS Flag Day 2020: no UDP reply over 1,232 bytes, whatever buffer the asker advertises;
    a longer one is truncated (TC=1). NSD (``ipv4-edns-size``) and BIND (``max-udp-size``) do the same."""
    packet = query(qname, "A", use_edns=0 if payload else False, payload=payload or 512)
    limit = min(payload or 512, FLAG_DAY_BYTES)
    for port in (servers.feddns, servers.nsd):
        reply = udp(port, packet)
        assert len(reply) <= limit
        assert bool(dns.message.from_wire(reply).flags & dns.flags.TC) == truncated, port
    with socket.create_connection(("127.0.0.1", servers.feddns), timeout=2) as sock:  # TCP carries it whole
        sock.sendall(framed(packet))
        whole = dns.message.from_wire(read_framed(sock))
        assert not whole.flags & dns.flags.TC and len(whole.answer[0]) == {WEB: 1, MEDIUM: 60, BIG: 100}[qname]


@pytest.fixture(scope="module")
def limited() -> Iterator[dict[int, int]]:
    """feddns serve with ``--max-udp-size`` 4096 and 600: the port of each, by the limit."""
    path = write_records(records_file())
    with ServeProcess(records=path, extra_args=["--order", "stable", "--max-udp-size", "4096"]) as large, \
            ServeProcess(records=path, extra_args=["--order", "stable", "--max-udp-size", "600"]) as small:
        yield {4096: large.port, 600: small.port}


@pytest.mark.parametrize(("max_udp", "qname", "payload", "answers"), [
    (4096, BIG, 4096, 100), (4096, BIG, 1400, 0), (4096, MEDIUM, 1232, 60), (600, MEDIUM, 1232, 0),
    (600, MEDIUM, 512, 0), (600, WEB, 4096, 1)])
def test_max_udp_size_changes_the_limit(limited, max_udp, qname, payload, answers):
    reply = udp(limited[max_udp], query(qname, "A", use_edns=0, payload=payload))
    assert len(reply) <= min(payload, max_udp)
    message = dns.message.from_wire(reply)
    assert message.rcode() == dns.rcode.NOERROR and bool(message.flags & dns.flags.TC) == (answers == 0)
    assert sum(len(rrset) for rrset in message.answer) == answers


@pytest.mark.parametrize("size", ["511", "65536", "0", "-1"])
def test_max_udp_size_out_of_range_is_refused_at_start(size):
    parser = argparse.ArgumentParser()
    command.configure(parser)
    args = parser.parse_args(["--example", "--max-udp-size", size])
    with pytest.raises(ConfigError, match=f"--max-udp-size {size} is not from 512 to 65535 bytes"):
        settings.settings_from(args)
    args = parser.parse_args(["--example"])
    assert settings.settings_from(args).answers.max_udp_size == FLAG_DAY_BYTES
