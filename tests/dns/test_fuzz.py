"""Mutated packets (hypothesis): FORMERR or silence, never a crash, and the server goes on.

Two layers: every mutation goes through the responder in-process (the function the
transports call) and its reply is checked; the same packets then go to the real
server over UDP, which must still answer correctly afterwards.
"""

import random
import socket
import struct
import tempfile
from pathlib import Path

import dns.edns
import dns.message
import dns.name
import dns.query
import dns.rcode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from feddns.dns import wire
from feddns.dns.index import Index
from feddns.dns.responder import AnswerSettings, Responder
from feddns.keys import Layout
from feddns.store import Feed
from feddns.store.file import read_records
from tests.dns.conftest import RECORDS
from tests.dns.udp import respond

WEB = "web.prod.fed.svc.federation."

SEEDS = [
    dns.message.make_query(WEB, "A").to_wire(),
    dns.message.make_query(WEB, "SRV", use_edns=0, payload=4096, options=[
        dns.edns.GenericOption(65245, b"a"), dns.edns.ECSOption("10.240.0.0", 16)]).to_wire(),
    dns.message.make_query("_http._tcp." + WEB, "SRV", use_edns=0).to_wire(),
    dns.message.make_query("federation.", "SOA", use_edns=0).to_wire(),
    dns.message.make_query(WEB.upper(), "AAAA", use_edns=0,
                           options=[dns.edns.GenericOption(10, b"\x01" * 8), dns.edns.GenericOption(65245, b"b"),
                                    dns.edns.GenericOption(12, b"\0" * 5)]).to_wire(),
]


MUTATIONS = ("flip", "set", "cut", "insert", "delete")
MAGIC_BYTES = (0x00, 0x3F, 0x40, 0xC0, 0xFF, 0x29, 0x0C)
"""Bytes that mean something in a DNS packet: empty label, longest label, the two
reserved label types, a compression pointer, all ones, OPT's type, and a pointer to the qname."""


def mutate(rng: random.Random) -> bytes:
    """One of SEEDS with 1-6 random bit flips, magic bytes, cuts, insertions and deletions."""
    packet = bytearray(rng.choice(SEEDS))
    for _ in range(rng.randint(1, 6)):
        action = rng.choice(MUTATIONS)
        pos = rng.randint(0, max(len(packet) - 1, 0))
        if action == "flip" and packet:
            packet[pos] ^= 1 << rng.randint(0, 7)
        elif action == "set" and packet:
            packet[pos] = rng.choice(MAGIC_BYTES)
        elif action == "cut":
            del packet[pos:]
        elif action == "insert":
            packet[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif packet:
            del packet[pos : pos + rng.randint(1, 4)]
    return bytes(packet)


mutated = st.randoms(use_true_random=False).map(mutate)
"""Mutated packets that hypothesis draws and shrinks."""
CORPUS = [mutate(random.Random(seed)) for seed in range(10_000)]
"""The same mutations drawn from fixed seeds, for tests that need the whole set at once
(so no test depends on another having run first)."""


def make_responder(settings: AnswerSettings | None = None) -> Responder:
    layout = Layout()
    index = Index(layout)
    responder = Responder(settings or AnswerSettings())
    Feed(index, responder).replace(read_records_text(RECORDS, layout))
    return responder


def read_records_text(text: str, layout: Layout) -> list[tuple[str, bytes]]:
    """The etcd keys and values of a YAML records file (docs/reference.md section 6)."""
    with tempfile.TemporaryDirectory(prefix="feddns-fuzz-") as directory:
        path = Path(directory) / "records.yaml"
        path.write_text(text)
        return read_records(path, layout)


RESPONDER = make_responder()


@settings(max_examples=10_000, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(mutated)
def test_mutated_packets_get_a_wellformed_reply_or_none(packet):
    for tcp in (False, True):
        reply = respond(RESPONDER, packet, "127.0.0.1", tcp)
        if len(packet) < 12 or packet[2] & 0x80:
            assert reply is None
            continue
        assert reply is not None and reply[:2] == packet[:2]
        parsed = dns.message.from_wire(reply)  # the reply itself is well-formed
        assert parsed.flags & 0x8000
        rcode = struct.unpack_from("!H", reply, 2)[0] & 0xF
        if rcode == wire.Rcode.FORMERR:
            assert not parsed.answer


@settings(max_examples=5000, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(mutated)
def test_common_reader_agrees_with_the_strict_parser(packet):
    """What the few-slices reader accepts, the strict parser reads the same way
    (when the name it cut is made of whole labels; else the responder re-reads)."""
    common = wire.read_common(packet, b"\xfe\xdd")
    if common is None or not wire.is_labels(common.name[:-1]):
        return
    assert wire.parse_query(packet, b"\xfe\xdd") == common


def _primed() -> Responder:
    """A responder that has answered NXDOMAIN in the envelope of every seed."""
    responder = make_responder(AnswerSettings(stable=True))
    for seed in SEEDS:
        query = dns.message.from_wire(seed)
        query.question[0].name = dns.name.from_text("nosuch.prod.fed.svc.federation.")
        respond(responder, query.to_wire(), "127.0.0.1", False)
    assert len(responder.cache.envelopes) == len(SEEDS) - 1  # not the one with ECS
    return responder


PRIMED, LONG_WAY = _primed(), make_responder(AnswerSettings(stable=True))


@settings(max_examples=3000, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(mutated)
def test_the_nxdomain_shortcut_answers_mutations_as_the_long_way(packet):
    """A mutated packet whose envelope was answered NXDOMAIN before (its qname
    mutated: bad labels, pointers, letter case) gets what the full read gives."""
    for tcp in (False, True):
        LONG_WAY.cache.envelopes.clear()
        assert respond(PRIMED, packet, "127.0.0.1", tcp) == respond(LONG_WAY, packet, "127.0.0.1", tcp)


def test_common_reader_agrees_on_many_mutations_that_still_read():
    """The agreement test above means little if almost no mutation still reads: over the
    fixed corpus, hundreds do, and each reads the same both ways."""
    read = [packet for packet in CORPUS if (common := wire.read_common(packet, b"\xfe\xdd")) is not None
            and wire.is_labels(common.name[:-1])]
    assert len(read) >= 200
    for packet in read:
        assert wire.parse_query(packet, b"\xfe\xdd") == wire.read_common(packet, b"\xfe\xdd")


def test_real_server_survives_the_mutations_and_answers_correctly(served):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for packet in CORPUS:
            sock.sendto(packet, ("127.0.0.1", served.port))
    assert served.addresses(WEB, cluster="a")[0] == "10.0.0.1"
    assert served.addresses(WEB, cluster="b", tcp=True)[0] == "10.0.0.2"
    assert served.proc.poll() is None


RESPONSES = 5000
"""Mutated packets with QR set that each transport is sent (a bounded count, from fixed seeds)."""


def mutated_responses(seed: int) -> list[bytes]:
    """:data:`RESPONSES` packets with QR=1: the seeds as they are (so a reply kept for the same
    bytes with QR=0 exists), then mutations of them, with QR set after mutating and the
    other header bits drawn (opcode, TC, rcode: a response may carry any)."""
    rng = random.Random(seed)
    packets = []
    for n in range(RESPONSES):
        packet = bytearray(SEEDS[n] if n < len(SEEDS) else mutate(rng))
        if len(packet) < 4:
            packet += bytes(4 - len(packet))
        if n >= len(SEEDS) and rng.random() < 0.5:
            packet[2:4] = rng.randbytes(2)
        packet[2] |= 0x80
        packets.append(bytes(packet))
    return packets


def _sentinel() -> dns.message.Message:
    """A well-formed query whose reply marks the end of what the server was sent."""
    query = dns.message.make_query(WEB, "A")
    query.id = 0xFEDD
    return query


def test_a_response_is_never_answered_over_udp_however_malformed(served):
    """RFC 1035 4.1.1: QR=1 is a response; a server that answers one, even with FORMERR, can
    loop with another server. The seeds are first asked three times each (so replies are kept
    for their bytes) and NXDOMAIN envelopes primed; then 5,000 QR=1 packets, and one query:
    its reply is the only datagram that comes back."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2.0)
        for seed in SEEDS * 3:
            sock.sendto(seed, ("127.0.0.1", served.port))
            sock.recv(65535)
        for packet in mutated_responses(29):
            sock.sendto(packet, ("127.0.0.1", served.port))
        sock.sendto(_sentinel().to_wire(), ("127.0.0.1", served.port))
        replies = []
        while not replies or replies[-1][:2] != b"\xfe\xdd":
            replies.append(sock.recv(65535))
    assert len(replies) == 1, [reply[:12].hex() for reply in replies[:5]]


def test_a_response_is_never_answered_over_tcp_however_malformed(served):
    """The same over one TCP connection (RFC 7766: each message framed by its length): the
    5,000 QR=1 messages are dropped, the connection goes on, and the query after them is the
    first message answered."""
    stream = b"".join(len(packet).to_bytes(2, "big") + packet for packet in mutated_responses(1035))
    query = _sentinel().to_wire()
    with socket.create_connection(("127.0.0.1", served.port), timeout=5.0) as sock:
        sock.sendall(stream + len(query).to_bytes(2, "big") + query)
        reply = dns.query.receive_tcp(sock, expiration=None)[0]
    assert reply.id == 0xFEDD and reply.rcode() == dns.rcode.NOERROR
