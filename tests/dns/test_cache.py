"""What the cache holds, through its own accounting (entries and bytes), in-process.

The responder is the function the transports call; the records are the answer
tables' (tests/dns/conftest.py) plus a 40-shard service.
"""

import random
import string

import dns.edns
import dns.message
import dns.rcode
import pytest

from feddns.dns.answer import Answer, Sections
from feddns.dns.cache import Cache, Reply
from feddns.dns.index import Index
from feddns.dns.replystore import Entry, ReplyStore
from feddns.dns.responder import AnswerSettings, Responder
from feddns.keys import Layout
from feddns.store import Feed
from feddns.store.file import read_records
from harness.serve import write_records
from tests.dns.conftest import RECORDS, big_records
from tests.dns.udp import respond

BIG = "big.prod.fed.svc.federation."
WEB = "web.prod.fed.svc.federation."


def responder(cache_size: int = 64 * 1024 * 1024, extra: str = "") -> Responder:
    layout = Layout()
    index = Index(layout)
    server = Responder(AnswerSettings(cache_size=cache_size, stable=True))
    from pathlib import Path

    Feed(index, server).replace(read_records(Path(write_records(RECORDS + big_records(40) + extra)), layout))
    return server


def ask(server: Responder, qname: str, qtype: str = "A", cluster: bytes | None = b"a", ident: int = 1,
        options: list[dns.edns.Option] | None = None, payload: int = 4096) -> dns.message.Message:
    opts = list(options or [])
    if cluster is not None:
        opts.append(dns.edns.GenericOption(65245, cluster))
    query = dns.message.make_query(qname, qtype, use_edns=0, options=opts, payload=payload)
    query.id = ident
    reply = respond(server, query.to_wire(), "192.0.2.1", False)
    assert reply is not None
    return dns.message.from_wire(reply)


def kinds(cache: Cache) -> tuple[int, int]:
    """(answers, replies) held."""
    entries = list(cache.store.entries())
    replies = sum(isinstance(e, Reply) for e in entries)
    return len(entries) - replies, replies


def mixed_case(name: str, rng: random.Random) -> str:
    return "".join(c.upper() if rng.random() < 0.5 else c for c in name)


def test_case_cookie_and_id_variants_share_one_answer():
    server = responder()
    rng = random.Random(7)
    first = ask(server, BIG)
    assert len(first.answer[0]) == 40
    assert kinds(server.cache) == (1, 0)
    for n in range(2000):
        cookie = dns.edns.GenericOption(10, rng.randbytes(8))  # a client cookie (RFC 7873)
        reply = ask(server, mixed_case(BIG, rng), ident=n, options=[cookie])
        assert reply.id == n and len(reply.answer[0]) == 40
        assert str(reply.question[0].name).lower() == BIG
    assert kinds(server.cache) == (1, 0)  # one answer; no reply entry: no packet came twice
    for n in range(2000):
        ask(server, mixed_case(BIG, rng), ident=n)  # no cookie: every case variant folds to one packet
    assert kinds(server.cache) == (1, 1)


def test_reply_cache_answers_every_letter_case_with_the_question_as_asked():
    server = responder()
    for name in (WEB, WEB, "WEB.prod.FED.svc.federation.", "wEb.PROD.fed.svc.federation."):
        reply = ask(server, name)
        assert str(reply.question[0].name) == name
        assert [rd.address for rd in reply.answer[0]] == ["10.0.0.1", "1.1.1.2", "1.1.1.3"]
    assert kinds(server.cache) == (1, 1)


def test_random_name_flood_adds_no_entry():
    server = responder()
    ask(server, WEB)
    before = (len(server.cache), server.cache.store.used)
    rng = random.Random(3)
    for _ in range(5000):
        label = "".join(rng.choices(string.ascii_letters, k=12))
        for qname in (f"{label}.prod.fed.svc.federation.", f"{label}.{WEB}", f"_{label}._tcp.{WEB}",
                      f"{label}.federation."):
            assert ask(server, qname).rcode() == dns.rcode.NXDOMAIN
    # repeated names too: negative answers are never cached
    for _ in range(3):
        assert ask(server, f"nosuch.{WEB}").rcode() == dns.rcode.NXDOMAIN
    assert (len(server.cache), server.cache.store.used) == before


def many_services(count: int) -> str:
    return "".join(f"/fed/flood/s{i}/a: {{clusterIP: 10.8.{i // 250}.{i % 250 + 1}, "
                   f"externalIP: 9.8.{i // 250}.{i % 250 + 1}}}\n" for i in range(count))


def test_byte_bound_holds_under_a_flood_of_distinct_answers():
    limit = 256 * 1024
    server = responder(cache_size=limit, extra=many_services(2000))
    hot = WEB
    for i in range(2000):
        for cluster in (b"a", None):
            ask(server, f"s{i}.flood.fed.svc.federation.", cluster=cluster)
            ask(server, f"s{i}.flood.fed.svc.federation.", cluster=cluster)  # twice: a reply entry too
        assert server.cache.store.used <= limit
        if i % 10 == 0:
            ask(server, hot)  # kept hot while the flood goes on
    assert server.cache.store.evictions > 1000
    assert len(server.cache) > 100  # evicted a little at a time, never emptied
    assert server.cache.store.owned_by(("fed", "prod", "web"))  # the hot name's entry stayed


def test_change_drops_only_that_services_entries():
    server = responder()
    ask(server, WEB)
    ask(server, WEB)
    ask(server, BIG)
    assert kinds(server.cache) == (2, 1)
    feed = server.records
    assert isinstance(feed, Feed)
    feed.put("/fed/prod/web/b", b'{"clusterIP": "10.0.0.2", "externalIP": "1.1.1.9"}')
    assert kinds(server.cache) == (1, 0)
    assert [rd.address for rd in ask(server, WEB).answer[0]] == ["10.0.0.1", "1.1.1.9", "1.1.1.3"]


def test_clock_gives_a_second_chance_to_entries_hit_since_last_looked_at():
    removed: list[Entry] = []
    cache = ReplyStore(1000, removed.append)
    entries = {n: Entry(100, owner=n % 2, labels=("A", "NOERROR", "none")) for n in range(20)}
    for n in range(10):
        cache.put(n, entries[n])
    assert cache.used == 1000
    entries[0].hits += 1  # the oldest was hit: it survives the next eviction
    cache.put(10, entries[10])
    assert cache.get(0) is entries[0] and cache.get(1) is None
    assert removed == [entries[1]] and cache.evictions == 1
    assert cache.drop(0) == 6  # owner 0: entries 0, 2, 4, 6, 8 and 10
    assert cache.used == sum(e.size for e in cache.entries())


def test_an_entry_larger_than_an_eighth_of_the_cache_is_not_kept():
    cache = ReplyStore(8000)
    assert not cache.put("big", Entry(1001, owner=None, labels=("A", "NOERROR", "none")))
    assert cache.put("small", Entry(1000, owner=None, labels=("A", "NOERROR", "none")))
    assert len(cache) == 1


def test_answer_rotates_from_the_stored_records_without_copies():
    from feddns.dns.answer import Rotation

    tiers = ((b"A1", b"A2"), (b"B1", b"B2", b"B3"))
    rotation = Rotation()
    orders = [rotation.arrange(tiers) for _ in range(6)]
    assert orders[:3] == [b"A1A2B1B2B3", b"A2A1B2B3B1", b"A1A2B3B1B2"]
    assert len(set(orders)) == 6
    answer = Answer(0, Sections(tiers), ordering=Rotation())
    assert answer.fixed is None and answer.tiers is tiers


@pytest.mark.parametrize("cluster", [b"a", b"A", b" a ", b"nosuch", None])
def test_cluster_option_spellings_resolve_before_the_answer_cache(cluster):
    server = responder()
    reply = ask(server, WEB, cluster=cluster)
    expected = "10.0.0.1" if cluster is not None and cluster.strip().lower() == b"a" else "1.1.1.1"
    assert reply.answer[0][0].address == expected
    keys = [k for k in server.cache.store.held() if isinstance(k, tuple)]
    assert [k[2] for k in keys] == [b"a" if expected == "10.0.0.1" else None]
