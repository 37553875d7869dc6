"""Right after a load, every answer is the one a server that has read every value gives
(docs/serve.md, "Loading").

A load reads keys only and leaves most values unread until their service is asked for or
the read between queries reaches them. Nothing may be answered from a key whose value was
not read: whether a namespace exists, whether the asking cluster is known (``_whoami``, the
tiers), which federations the MCS zone shows. Each case asks a feed just loaded, with no
event loop (so nothing is read between queries: the moment right after ``/ready``), and the
same records with every value read, in-process as the transports ask (the cache's UDP
handler first) and over TCP.
"""

import json
from collections.abc import Iterable

import dns.edns
import dns.message
import dns.rcode
import pytest

from feddns.dns.index import Index
from feddns.dns.responder import AnswerSettings, Responder
from feddns.keys import Layout
from feddns.store import Feed
from harness.serve import edns_options
from tests.dns.udp import respond

BAD = b"{not json"
RECORDS: dict[str, bytes] = {
    "/myfed/_clusters/foo": json.dumps({"zone": "z1", "region": "r1", "cidrs": ["10.240.0.0/16"]}).encode(),
    "/myfed/prod/other/ghost": BAD,  # cluster ghost: known by this key alone
    "/myfed/prod/web/foo": json.dumps({"clusterIP": "10.96.0.1", "externalIP": "1.1.1.1"}).encode(),
    "/myfed/zzz/only/bar": BAD,  # namespace zzz: its only record does not parse
    "/solo/ns/gone/c": BAD,  # federation solo: its only record does not parse
}
WEB = "web.prod.myfed.svc.federation."
MCS_WEB = "web.prod.svc.clusterset.local."
WHOAMI = "_whoami.myfed.svc.federation."


def loaded(items: Iterable[tuple[str, bytes]], read_all: bool, **settings: object) -> Responder:
    responder = Responder(AnswerSettings(stable=True, **settings))  # type: ignore[arg-type]
    feed = Feed(Index(Layout()), responder)
    feed.replace(items)
    if read_all:
        feed.index.parse_all()
    return responder


def ask(responder: Responder, qname: str, qtype: str, cluster: str | None = None, ecs: str | None = None,
        tcp: bool = False) -> tuple[str, list[str], int | None]:
    """``(rcode, answer records as text, ECS scope)``."""
    message = dns.message.make_query(qname, qtype, use_edns=0, options=edns_options(cluster, ecs))
    reply = respond(responder, message.to_wire(), "192.0.2.1", tcp)
    assert reply is not None
    parsed = dns.message.from_wire(reply)
    scopes = [o.scopelen for o in parsed.options if isinstance(o, dns.edns.ECSOption)]
    records = [line for rrset in parsed.answer for line in rrset.to_text().splitlines()]
    return dns.rcode.to_text(parsed.rcode()), records, scopes[0] if scopes else None


CASES = [
    pytest.param(("zzz.myfed.svc.federation.", "A"), {}, ("NXDOMAIN", [], None), {},
                 id="a namespace whose only record does not parse"),
    pytest.param((WHOAMI, "TXT"), {"cluster": "ghost"},
                 ("NOERROR", [f'{WHOAMI} 0 IN TXT "cluster=" "by=none" "zone=" "region="'], None), {},
                 id="_whoami: a cluster known only by a bad value"),
    pytest.param((WEB, "A"), {"cluster": "ghost", "ecs": "10.240.1.0/24"},
                 ("NOERROR", [f"{WEB} 30 IN A 10.96.0.1"], 16), {},
                 id="option naming a cluster known only by a bad value, ECS in foo's CIDR"),
    pytest.param(("_whoami.solo.svc.federation.", "TXT"), {}, ("NXDOMAIN", [], None), {},
                 id="a federation whose only record does not parse"),
    pytest.param((MCS_WEB, "A"), {}, ("NOERROR", [f"{MCS_WEB} 30 IN A 1.1.1.1"], None),
                 {"mcs_zone": "clusterset.local."}, id="MCS: the only federation whose records parse"),
]


@pytest.mark.parametrize("question, how, expected, settings", CASES)
@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_an_answer_right_after_the_load_is_the_one_after_every_value_is_read(
        question: tuple[str, str], how: dict[str, str], expected: tuple[str, list[str], int | None],
        settings: dict[str, object], tcp: bool) -> None:
    warm = loaded(RECORDS.items(), read_all=True, **settings)
    assert ask(warm, *question, **how, tcp=tcp) == expected  # the case is what a server that read everything says
    cold = loaded(RECORDS.items(), read_all=False, **settings)
    for _ in range(3):  # built, then from the answer cache, then from the reply cache
        assert ask(cold, *question, **how, tcp=tcp) == expected


def test_a_change_that_takes_a_proof_away_reads_what_proves_it_again() -> None:
    """The load read one valid service of namespace prod and one valid shard of cluster solo
    (they come first), and left the rest unread; deleting those must not leave prod, or solo
    as an asker, proven by values that do not parse."""
    shard = json.dumps({"clusterIP": "10.96.0.9", "externalIP": "9.9.9.9"}).encode()
    records = {"/myfed/prod/a/solo": shard, "/myfed/prod/b/solo": BAD, "/myfed/prod/c/solo": BAD}
    responder = Responder(AnswerSettings(stable=True))
    feed = Feed(Index(Layout()), responder)
    feed.replace(records.items())
    assert ask(responder, WHOAMI, "TXT", cluster="solo")[1] == [
        f'{WHOAMI} 0 IN TXT "cluster=solo" "by=option" "zone=" "region="']
    assert feed.index.unparsed and ask(responder, "prod.myfed.svc.federation.", "A")[0] == "NOERROR"
    feed.delete("/myfed/prod/a/solo")
    assert ask(responder, "prod.myfed.svc.federation.", "A")[0] == "NXDOMAIN"
    assert ask(responder, WHOAMI, "TXT", cluster="solo")[0] == "NXDOMAIN"  # the federation went with them
