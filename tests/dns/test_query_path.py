"""The query path's shortcuts give exactly what the long way gives, in-process.

The reply cache is keyed by the packet lowercased; names are found with one dict
lookup or a walk up to the nearest existing name; NXDOMAIN comes from per-qtype
templates. Each shortcut is checked here against what it must not change.
"""

import random
import string

import dns.edns
import dns.flags
import dns.message
import dns.rcode
import pytest

from feddns.dns import wire
from feddns.dns.cache import Doorkeeper, Envelopes
from feddns.dns.index import Index, NodeKind, NotAName
from feddns.dns.metrics import ServeCollector
from feddns.keys import Layout
from tests.dns.test_cache import WEB, ask, kinds, responder
from tests.dns.udp import respond


def ecs(address: str, prefix: int) -> dns.edns.ECSOption:
    return dns.edns.ECSOption(address, prefix)


def test_a_packet_with_letters_outside_the_qname_is_never_answered_from_another_case():
    # 10.97.0.0/16 carries the byte 0x61 ("a") in its ECS option; 10.65.0.0/16 carries 0x41 ("A"):
    # the two packets lowercase to the same bytes but must get their own ECS echo.
    server = responder()
    for _ in range(3):
        reply = ask(server, WEB, cluster=None, options=[ecs("10.97.0.0", 16)])
        assert reply.options[0].address == "10.97.0.0"
    reply = ask(server, WEB, cluster=None, options=[ecs("10.65.0.0", 16)])
    assert reply.options[0].address == "10.65.0.0"
    assert kinds(server.cache)[1] == 0  # neither packet was kept as a reply


def test_cluster_option_in_another_letter_case_shares_the_reply():
    server = responder()
    ask(server, WEB, cluster=b"a")
    ask(server, WEB, cluster=b"a")
    assert kinds(server.cache) == (1, 1)
    reply = ask(server, WEB.upper(), cluster=b"A", ident=77)
    assert reply.id == 77 and str(reply.question[0].name) == WEB.upper()
    assert [rd.address for rd in reply.answer[0]] == ["10.0.0.1", "1.1.1.2", "1.1.1.3"]
    assert kinds(server.cache) == (1, 1)


@pytest.mark.parametrize("payload", [1089, 1121])  # 0x0441 and 0x0461: "A" and "a" in the payload size
def test_a_payload_size_that_lowercases_to_another_is_not_kept(payload):
    server = responder()
    for _ in range(3):
        ask(server, WEB, payload=payload)
    assert kinds(server.cache) == (1, 0)


def test_letters_only_in_name():
    option = b"\xfe\xdd"
    plain = dns.message.make_query(WEB, "A", use_edns=0, payload=4096,
                                   options=[dns.edns.GenericOption(65245, b"Foo")]).to_wire()
    assert wire.letters_only_in_name(plain, option)
    assert wire.letters_only_in_name(dns.message.make_query(WEB, "A").to_wire(), option)
    cookie = dns.message.make_query(WEB, "A", use_edns=0, options=[dns.edns.GenericOption(10, b"abcdefgh")])
    assert not wire.letters_only_in_name(cookie.to_wire(), option)
    z_bit = bytearray(plain)
    z_bit[3] |= 0x41  # Z and CD set: the flags byte reads "Q"
    assert not wire.letters_only_in_name(bytes(z_bit), option)


def test_nxdomain_for_any_qtype_and_letter_case_adds_nothing_and_is_counted():
    server = responder()
    ask(server, WEB)
    before = (len(server.cache), server.cache.store.used)
    rng = random.Random(9)
    for qtype in ("A", "AAAA", "SRV", "TXT", "MX", "ANY"):
        for _ in range(50):
            label = "".join(rng.choices(string.ascii_letters, k=8))
            reply = ask(server, f"{label}.prod.fed.svc.federation.", qtype)
            assert reply.rcode() == dns.rcode.NXDOMAIN and reply.flags & dns.flags.AA
            assert reply.authority[0].rdtype == dns.rdatatype.SOA
            assert str(reply.question[0].name) == f"{label}.prod.fed.svc.federation."
    assert (len(server.cache), server.cache.store.used) == before
    counts = {sample.labels["qtype"]: sample.value for family in ServeCollector(server, lambda: 0, lambda: 0).collect()
              if family.name == "feddns_dns_queries" for sample in family.samples
              if sample.labels.get("rcode") == "NXDOMAIN"}
    assert counts == {"A": 50, "AAAA": 50, "SRV": 50, "ANY": 50, "other": 100}


def test_nxdomain_keeps_the_query_flags_and_edns():
    server = responder()
    query = dns.message.make_query("nosuch.prod.fed.svc.federation.", "A", use_edns=0, want_dnssec=True)
    query.flags |= dns.flags.CD
    reply = dns.message.from_wire(respond(server, query.to_wire(), "192.0.2.1", False))
    assert reply.rcode() == dns.rcode.NXDOMAIN
    assert reply.flags & dns.flags.RD and reply.flags & dns.flags.CD and reply.ednsflags & dns.flags.DO
    plain = dns.message.make_query("nosuch.prod.fed.svc.federation.", "A")
    plain.flags &= ~dns.flags.RD
    reply = dns.message.from_wire(respond(server, plain.to_wire(), "192.0.2.1", True))
    assert reply.rcode() == dns.rcode.NXDOMAIN and not reply.flags & dns.flags.RD and reply.edns == -1


def _in_envelopes() -> list[tuple[str, str, list[dns.edns.Option] | None, int, int]]:
    """Queries in several envelopes: (qtype, EDNS, options, added flags, payload)."""
    cookie = dns.edns.GenericOption(10, b"\x01" * 8)
    cluster = dns.edns.GenericOption(65245, b"a")
    return [("A", -1, None, 0, 512), ("AAAA", 0, [cluster], 0, 1232), ("SRV", 0, [cookie, cluster], dns.flags.CD, 4096),
            ("ANY", 0, [cluster], 0, 4096), ("MX", 0, [cookie], 0, 1232), ("A", 0, [], dns.flags.CD, 1232),
            ("AXFR", 0, [], 0, 1232), ("TSIG", -1, None, 0, 512), ("MAILA", 0, [cookie], 0, 1232)]


def _packet(qname: str, qtype: str, edns: int, options: list[dns.edns.Option] | None, flags: int, payload: int,
            ident: int) -> bytes:
    query = dns.message.make_query(qname, qtype, use_edns=edns, options=options, payload=payload)
    query.flags |= flags
    query.id = ident
    return query.to_wire()


@pytest.mark.parametrize("tcp", [False, True])
def test_a_known_envelope_answers_what_the_long_way_answers(tcp):
    """The NXDOMAIN shortcut for a query whose envelope was answered NXDOMAIN before
    gives the bytes the full read gives, for names that exist, do not, are outside
    the zone, are in any letter case or are not names at all (a pointer in the qname)."""
    primed, long_way = responder(), responder()
    envelopes = _in_envelopes()
    for n, envelope in enumerate(envelopes):
        respond(primed, _packet("nosuch.prod.fed.svc.federation.", *envelope, n), "192.0.2.1", tcp)
    assert len(primed.cache.envelopes) == len(envelopes)
    rng = random.Random(11)
    names = [WEB, "a." + WEB, "_http._tcp." + WEB, "_tcp." + WEB, "prod.fed.svc.federation.", "federation.",
             "ns.dns.federation.", "x.y.prod.fed.svc.federation.", "a.b.web.prod.fed.svc.federation.",
             "web.prod.fed.svc.other.", "nosuch.federation.", WEB.upper(), "NoSuch.Prod.fed.svc.federation."]
    names += ["".join(rng.choices(string.ascii_letters + "-_", k=rng.randint(1, 63))) + ".prod.fed.svc.federation."
              for _ in range(50)]
    for n, envelope in enumerate(envelopes):
        for qname in names:
            packet = _packet(qname, *envelope, n)
            long_way.cache.envelopes.clear()  # none known: every query is read in full
            expected = respond(long_way, packet, "192.0.2.1", tcp)
            assert respond(primed, packet, "192.0.2.1", tcp) == expected, (qname, envelope)
        pointer = bytearray(_packet("xx.prod.fed.svc.federation.", *envelope, n))
        pointer[13:15] = b"\xc0\x0c"  # "\x02xx" becomes a pointer to the qname: not a name
        long_way.cache.envelopes.clear()
        assert respond(primed, bytes(pointer), "192.0.2.1", tcp) == respond(long_way, bytes(pointer), "192.0.2.1", tcp)
    assert len(primed.cache.envelopes) == len(envelopes)


def test_random_envelopes_are_kept_at_most_to_the_limit():
    server = responder()
    rng = random.Random(13)
    for n in range(1000):
        cookie = dns.edns.GenericOption(10, rng.randbytes(8))
        assert ask(server, f"nosuch{n}.prod.fed.svc.federation.", options=[cookie]).rcode() == dns.rcode.NXDOMAIN
    assert len(server.cache.envelopes) == server.cache.envelopes.limit
    long_option = dns.edns.GenericOption(12, b"\0" * 600)  # padding: an envelope longer than any kept
    assert ask(server, "nosuch.prod.fed.svc.federation.", options=[long_option]).rcode() == dns.rcode.NXDOMAIN
    envelopes = Envelopes[int](limit=2, longest=10)
    for key in (b"a", b"b", b"a", b"c", b"x" * 11):
        envelopes.put(key, len(key))
    assert [envelopes.get(key) for key in (b"a", b"b", b"c", b"x" * 11)] == [None, 1, 1, None]


def test_index_finds_names_with_one_lookup_and_walks_up_otherwise():
    index = Index(Layout())
    index.put("/fed/prod/web/a",
              b'{"clusterIP": "10.0.0.1", "ports": [{"name": "http", "protocol": "TCP", "port": 80}]}')
    web = b"\x03web\x04prod\x03fed\x03svc"
    assert index.lookup(web).kind == NodeKind.SERVICE
    for ent in (b"\x04prod\x03fed\x03svc", b"\x03fed\x03svc", b"\x03svc", b"\x03dns"):
        assert index.lookup(ent).kind == NodeKind.ENT
    assert index.lookup(b"").kind == NodeKind.APEX
    assert index.lookup(b"\x01a" + web).kind == NodeKind.SHARD
    assert index.lookup(b"\x04_tcp" + web).kind == NodeKind.ENT
    assert index.lookup(b"\x05_http\x04_tcp" + web).kind == NodeKind.SRV_NAME
    for missing in (b"\x01b" + web, b"\x04_udp" + web, b"\x01x\x01a" + web, b"\x05other\x04prod\x03fed\x03svc",
                    b"\x01x\x01y\x04prod\x03fed\x03svc", b"\x03www", b"\x01x\x05_http\x04_tcp" + web):
        assert index.lookup(missing) is None, missing
    for malformed in (b"\x05ab", b"\x40" + b"a" * 64, b"\x02a", b"\x01a\xc0\x0c"):
        with pytest.raises(NotAName):
            index.lookup(malformed)
    index.delete("/fed/prod/web/a")
    assert index.lookup(web) is None and index.lookup(b"\x04prod\x03fed\x03svc") is None
    assert set(index.names) == {b"", b"\x03dns", b"\x02ns\x03dns"}


def test_doorkeeper_table_is_counted_against_the_cache_size():
    for size in (64 * 1024, 256 * 1024, 64 * 1024 * 1024):
        server = responder(cache_size=size)
        assert server.cache.store.used == server.cache.doorkeeper.size <= size // 16
        assert server.cache.doorkeeper.size == Doorkeeper.within(size).size
    assert Doorkeeper.within(64 * 1024 * 1024).size == 8 * 65536


def _variants() -> list[bytes]:
    name = "web.prod.fed.svc.federation."
    cookie = dns.edns.GenericOption(10, b"\x01" * 8)
    cluster = dns.edns.GenericOption(65245, b"a")
    out = [dns.message.make_query(name, "A").to_wire(),
           dns.message.make_query(name, "AAAA", use_edns=0).to_wire(),
           dns.message.make_query(name, "SRV", use_edns=0, want_dnssec=True).to_wire()]
    option_sets = ([cluster], [cookie], [ecs("10.240.0.0", 16)], [cookie, cluster], [cluster, ecs("10.0.0.0", 8)],
                   [cluster, cluster], [dns.edns.GenericOption(65245, b"")])
    out.extend(dns.message.make_query(name, "A", use_edns=0, payload=1232, options=options).to_wire()
               for options in option_sets)
    return out


@pytest.mark.parametrize("packet", _variants())
def test_common_reader_reads_what_the_strict_parser_reads(packet):
    option = b"\xfe\xdd"
    assert wire.read_common(packet, option) == wire.parse_query(packet, option)
    for cut in range(12, len(packet)):  # every truncation: the common reader declines or agrees
        common = wire.read_common(packet[:cut], option)
        if common is not None:
            assert common == wire.parse_query(packet[:cut], option)
    for extra in (b"\x00", b"\x00\x00\x00", b"\x00\x0a\x00\x00"):  # bytes after the OPT
        assert wire.read_common(packet + extra, option) is None


def test_a_weighted_reply_is_kept_once_and_drawn_for_every_letter_case():
    extra = "".join(f"/fed/prod/w/{c}: {{clusterIP: 10.7.0.{n}, externalIP: 7.7.7.{n}, "
                    f"policy: weighted, weight: {n}}}\n" for n, c in enumerate("abc", start=1))
    server = responder(extra=extra)
    name = "w.prod.fed.svc.federation."
    ask(server, name, cluster=b"d")  # a known cluster with no shard here: the order is drawn by weight alone
    ask(server, name, cluster=b"d")
    assert kinds(server.cache) == (1, 1)
    rng = random.Random(5)
    firsts = set()
    for n in range(300):
        asked = "".join(c.upper() if rng.random() < 0.5 else c for c in name)
        reply = ask(server, asked, cluster=b"D", ident=n)
        assert reply.id == n and str(reply.question[0].name) == asked
        addresses = [rd.address for rd in reply.answer[0]]
        assert sorted(addresses) == ["7.7.7.1", "7.7.7.2", "7.7.7.3"]
        firsts.add(addresses[0])
    assert firsts == {"7.7.7.1", "7.7.7.2", "7.7.7.3"}  # drawn per query, not one order kept
    assert kinds(server.cache) == (1, 1)
