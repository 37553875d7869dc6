"""The parent envelopes: a name below a kept parent is answered NXDOMAIN by the UDP
handler with one lookup of its first label, and that answer is byte for byte what
the long way gives, for every first label, letter case and envelope, and stays right
across changes (feddns.dns.cache, ``Cache.keep_parent_envelope``).

In-process through the cache's UDP handler (as ``feddns.dns.transport.UdpServer``
runs it), with a ``respond`` that counts the packets it is given: a packet answered
by the parent envelope never reaches it.
"""

import random
import string
from pathlib import Path
from typing import Any

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import pytest

from feddns.dns.index import Index
from feddns.dns.responder import AnswerSettings, Responder
from feddns.keys import Layout
from feddns.store import Feed
from feddns.store.file import read_records
from harness.serve import write_records
from tests.dns.conftest import RECORDS, big_records
from tests.dns.test_cache import responder
from tests.dns.udp import respond

PARENTS = ("prod.fed.svc.federation.", "fed.svc.federation.", "svc.federation.", "federation.",
           "dns.federation.", "nosuch.fed.svc.federation.", "x.nosuch.svc.federation.")
"""Parents whose children the index holds by name: kept (fewer than 4 labels in the zone, ``NAMED_DEPTH``)."""
DEEP = ("web.prod.fed.svc.federation.", "a.web.prod.fed.svc.federation.", "_tcp.web.prod.fed.svc.federation.",
        "x.y.prod.fed.svc.federation.")
"""Parents of 4 labels or more: below them a shard, SRV or endpoint name may exist; never kept."""


class Handler:
    """The cache's UDP handler of a responder, counting the packets it passes to ``respond``."""

    def __init__(self, server: Responder) -> None:
        self.server = server
        self.passed = 0
        self.sent: list[bytes] = []
        self.handle = server.cache.udp_handler(self._respond, lambda data, addr: self.sent.append(data))

    def _respond(self, data: bytes, client: str, tcp: bool) -> bytes | None:
        self.passed += 1
        return self.server.respond(data, client, tcp)

    def __call__(self, data: bytes) -> bytes | None:
        self.sent.clear()
        self.handle(data, ("192.0.2.1", 53000))
        assert len(self.sent) <= 1
        return self.sent[0] if self.sent else None


def envelopes() -> list[dict[str, Any]]:
    """Query shapes: no EDNS, EDNS with the cluster option, a cookie, DO, CD, RD clear,
    several payload sizes and QTYPEs (those with an error at every name too)."""
    cookie = dns.edns.GenericOption(10, b"\x01" * 8)
    cluster = dns.edns.GenericOption(65245, b"a")
    return [dict(qtype="A", edns=-1, options=None, flags=0, payload=512, do=False),
            dict(qtype="AAAA", edns=0, options=[cluster], flags=dns.flags.RD, payload=1232, do=False),
            dict(qtype="A", edns=0, options=[cluster], flags=dns.flags.RD, payload=4096, do=True),
            dict(qtype="SRV", edns=0, options=[cookie, cluster], flags=dns.flags.CD, payload=4096, do=False),
            dict(qtype="ANY", edns=0, options=[], flags=0, payload=1232, do=True),
            dict(qtype="MX", edns=0, options=[cookie], flags=dns.flags.RD | dns.flags.CD, payload=1232, do=False),
            dict(qtype="TXT", edns=-1, options=None, flags=dns.flags.RD, payload=512, do=False),
            dict(qtype="AXFR", edns=0, options=[], flags=0, payload=1232, do=False),
            dict(qtype="MAILA", edns=-1, options=None, flags=0, payload=512, do=False)]


def packet(qname: str | bytes, shape: dict[str, Any], ident: int) -> bytes:
    """A query for ``qname`` (text, or a wire-form name) in ``shape``."""
    name = dns.name.from_wire(qname, 0)[0] if isinstance(qname, bytes) else qname
    query = dns.message.make_query(name, shape["qtype"], use_edns=shape["edns"], options=shape["options"],
                                   payload=shape["payload"], want_dnssec=shape["do"])
    query.flags = shape["flags"]
    query.id = ident
    return query.to_wire()


def first_labels(rng: random.Random) -> list[bytes]:
    """First labels in wire form: random ones of every length in any letter case, the
    names the index holds, and the bytes that must take the long way."""
    letters = string.ascii_letters + string.digits + "-_"
    out = [bytes((n,)) + "".join(rng.choices(letters, k=n)).encode() for n in range(1, 64)]
    out += [bytes((len(t),)) + t.encode() for t in ("web", "WEB", "Web", "prod", "fed", "FED", "svc", "dns", "ns",
                                                     "_whoami", "_WhoAmI", "a", "b", "_tcp", "_http", "nosuch")]
    out += [b"\x03a.b", b"\x01.", b"\x03a\x00b", b"\x01\x00", b"\x02\xc0\x0c", b"\x03\xff\xfe\x80",
            b"\x2e" + b"x" * 46, b"\x3f" + b"Z" * 63]
    return out


def primed_pair() -> tuple[Handler, Responder]:
    """A responder that has answered NXDOMAIN below every parent in every shape (its
    handler), and one whose envelopes are cleared before each query (the long way)."""
    handler = Handler(responder())
    for n, shape in enumerate(envelopes()):
        for parent in PARENTS + DEEP:
            assert dns.message.from_wire(handler(packet("zz9." + parent, shape, n))).rcode() in (
                dns.rcode.NXDOMAIN, dns.rcode.NOTAUTH, dns.rcode.NOTIMP)
    return handler, responder()


def long_way(server: Responder, data: bytes) -> bytes | None:
    server.cache.envelopes.clear()
    server.cache.parents.clear()
    return respond(server, data, "192.0.2.1", False)


def test_a_kept_parent_answers_every_first_label_as_the_long_way():
    handler, slow = primed_pair()
    kept = len(handler.server.cache.parents)
    assert kept == len(envelopes()) * len(PARENTS)  # the deep parents are never kept
    rng = random.Random(20)
    for shape in envelopes():
        for parent in PARENTS + DEEP:
            wire_parent = dns.name.from_text(parent).to_wire()
            for label in first_labels(rng):
                data = packet(label + wire_parent, shape, rng.randrange(65536))
                assert handler(data) == long_way(slow, data), (label, parent, shape)
    assert len(handler.server.cache.parents) == kept


def test_the_long_way_is_taken_only_where_it_must():
    """Random labels below a kept parent, in any letter case, never reach the responder;
    names that exist, first labels with a zero byte or a "." (or of 46 bytes: "." is its
    length byte) and deep parents do."""
    handler, _ = primed_pair()
    shape = envelopes()[2]
    rng = random.Random(21)
    before = handler.passed
    for parent in PARENTS:
        for _ in range(50):
            size = rng.choice([n for n in range(1, 64) if n != ord(".")])  # a 46-byte label's length is a "."
            label = "".join(rng.choices(string.ascii_letters + string.digits, k=size))
            qname = "".join(c.upper() if rng.random() < 0.5 else c for c in f"{label}.{parent}")  # 0x20
            reply = dns.message.from_wire(handler(packet(qname, shape, 7)))
            assert reply.rcode() == dns.rcode.NXDOMAIN and str(reply.question[0].name) == qname
    assert handler.passed == before
    for qname in ("web.prod.fed.svc.federation.", "WEB.prod.fed.svc.federation.", "_whoami.fed.svc.federation.",
                  "prod.fed.svc.federation.", "ns.dns.federation.", "svc.federation.",
                  "a\\.b.prod.fed.svc.federation.", "a\\000b.prod.fed.svc.federation.",
                  "q.web.prod.fed.svc.federation.", "Q.Web.PROD.fed.svc.federation.",
                  "x" * 46 + ".prod.fed.svc.federation."):
        before = handler.passed
        handler(packet(qname, shape, 8))
        assert handler.passed == before + 1, qname


def change_feed() -> tuple[Handler, Feed]:
    layout = Layout()
    server = Responder(AnswerSettings(stable=True))
    feed = Feed(Index(layout), server)
    feed.replace(read_records(Path(write_records(RECORDS + big_records(4))), layout))
    return Handler(server), feed


@pytest.mark.parametrize("qname, key, value, rcode", [
    ("new.prod.fed.svc.federation.", "/fed/prod/new/a", b'{"clusterIP": "10.9.0.1"}', dns.rcode.NOERROR),
    ("NEW.prod.fed.svc.federation.", "/fed/prod/new/a", b'{"clusterIP": "10.9.0.1"}', dns.rcode.NOERROR),
    ("newns.fed.svc.federation.", "/fed/newns/web/a", b'{"clusterIP": "10.9.0.1"}', dns.rcode.NOERROR),
    ("newfed.svc.federation.", "/newfed/ns/web/a", b'{"clusterIP": "10.9.0.1"}', dns.rcode.NOERROR),
    ("_whoami.newfed.svc.federation.", "/newfed/_clusters/a", b'{"zone": "z", "region": "r"}', dns.rcode.NOERROR),
    ("ns.newfed.svc.federation.", "/newfed/ns/web/a", b'{"clusterIP": "10.9.0.1"}', dns.rcode.NOERROR),
])
def test_a_name_put_below_a_kept_parent_is_answered_at_once(qname, key, value, rcode):
    """Every kind of name that can appear below a parent kept (a service, a namespace's or
    a federation's empty non-terminal, a federation's _whoami) is found by the next query."""
    handler, feed = change_feed()
    shape = envelopes()[2]
    parent = qname.split(".", 1)[1]
    for label in ("zz1", "zz2", "zz3"):
        assert dns.message.from_wire(handler(packet(f"{label}.{parent}", shape, 1))).rcode() == dns.rcode.NXDOMAIN
    assert len(handler.server.cache.parents) == 1
    assert dns.message.from_wire(handler(packet(qname, shape, 2))).rcode() == dns.rcode.NXDOMAIN
    feed.put(key, value)
    reply = dns.message.from_wire(handler(packet(qname, shape, 3)))
    assert reply.rcode() == rcode and str(reply.question[0].name) == qname
    feed.delete(key)
    assert dns.message.from_wire(handler(packet(qname, shape, 4))).rcode() == dns.rcode.NXDOMAIN


def test_a_full_load_drops_the_parent_envelopes():
    handler, feed = change_feed()
    shape = envelopes()[0]
    handler(packet("zz1.prod.fed.svc.federation.", shape, 1))
    assert len(handler.server.cache.parents) == 1
    feed.replace(read_records(Path(write_records(RECORDS + "/fed/prod/new/a: {clusterIP: 10.9.0.1}\n")),
                              feed.index.layout))
    assert len(handler.server.cache.parents) == 0
    reply = dns.message.from_wire(handler(packet("new.prod.fed.svc.federation.", shape, 2)))
    assert reply.rcode() == dns.rcode.NOERROR  # NODATA: no externalIP for this asker


def test_a_packet_with_letters_outside_its_qname_keeps_no_parent_envelope():
    """A cookie of letters would lowercase to another's: such a packet is answered the long way."""
    handler = Handler(responder())
    shape = dict(envelopes()[1], options=[dns.edns.GenericOption(10, b"AbCdEfGh")])
    for n in range(3):
        reply = dns.message.from_wire(handler(packet(f"zz{n}.prod.fed.svc.federation.", shape, n)))
        assert reply.rcode() == dns.rcode.NXDOMAIN
    assert len(handler.server.cache.parents) == 0 and handler.passed == 3
    assert [parts[3] for parts in handler.server.cache.envelopes._items.values()] == [False]  # decided once


def test_nxdomain_over_tcp_keeps_no_parent_envelope():
    """Parent envelopes serve the UDP handler alone: a TCP query does not fill them, then UDP does."""
    server = responder()
    shape = envelopes()[1]
    for n in range(3):
        asked = packet(f"zz{n}.prod.fed.svc.federation.", shape, n)
        reply = dns.message.from_wire(server.respond(asked, "192.0.2.1", True))
        assert reply.rcode() == dns.rcode.NXDOMAIN
    assert len(server.cache.parents) == 0
    Handler(server)(packet("zz9.prod.fed.svc.federation.", shape, 9))
    assert len(server.cache.parents) == 1


def test_a_flood_of_parents_keeps_at_most_the_limit():
    handler, _ = primed_pair()
    parents = handler.server.cache.parents
    shape = envelopes()[1]
    rng = random.Random(22)
    for n in range(500):
        parent = "".join(rng.choices(string.ascii_lowercase, k=30))
        handler(packet(f"a{n}.{parent}.{'b' * 60}.svc.federation.", shape, n))  # 3 labels: kept
    assert len(parents) == parents.limit
    assert all(len(key) <= parents.longest for key in parents._items)
