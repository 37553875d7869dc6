"""Answer tables: asking in-process or over the network, and comparing answers with
zone-file lines grouped by where order is not fixed."""

from collections.abc import Callable
from pathlib import Path

import dns.edns
import dns.message
import dns.query
import dns.rdatatype
import dns.rrset

from feddns.dns.index import Index
from feddns.dns.responder import Responder, Settings
from feddns.keys import Layout
from feddns.store import Feed
from feddns.store.file import read_records
from tests.support.serve import CLUSTER_OPTION, ServeProcess, write_records

Ask = Callable[..., dns.message.Message]
"""``ask(qname, qtype="A", cluster=None, payload=1232)``: the reply."""


def a(name: str, *addresses: str) -> list[str]:
    """A records of ``name`` as zone-file lines (TTL 30)."""
    return [f"{name} 30 IN A {address}" for address in addresses]


def srv(name: str, *rdatas: str) -> list[str]:
    """SRV records of ``name`` as zone-file lines (TTL 30)."""
    return [f"{name} 30 IN SRV {rdata}" for rdata in rdatas]


def lines(rrsets: list[dns.rrset.RRset]) -> list[str]:
    """The records of a section as zone-file lines, in wire order."""
    return [f"{rrset.name} {rrset.ttl} IN {dns.rdatatype.to_text(rrset.rdtype)} {rd.to_text()}"
            for rrset in rrsets for rd in rrset]


def check_groups(got: list[str], groups: list[list[str]]) -> None:
    """``got`` is the groups in order, each group's lines in any order."""
    assert len(got) == sum(len(g) for g in groups), got
    at = 0
    for group in groups:
        assert sorted(got[at : at + len(group)]) == sorted(group), got
        at += len(group)


def make_responder(records: str, **settings: object) -> Responder:
    """A responder (``Settings(**settings)``) loaded with the records file text ``records``."""
    layout = Layout()
    index = Index(layout)
    responder = Responder(index, Settings(**settings))  # type: ignore[arg-type]
    Feed(index, responder).replace(read_records(Path(write_records(records)), layout))
    return responder


def query(qname: str, qtype: str, cluster: str | None, payload: int = 1232) -> dns.message.Message:
    """A query with EDNS0 (``payload`` bytes) and, when ``cluster`` is given, option 65245 naming it."""
    options = [dns.edns.GenericOption(CLUSTER_OPTION, cluster.encode())] if cluster else []
    return dns.message.make_query(qname, qtype, use_edns=0, options=options, payload=payload)


def in_process(responder: Responder, tcp: bool) -> Ask:
    """Ask ``responder`` directly, as the UDP (``tcp`` False) or TCP transport does."""
    def ask(qname: str, qtype: str = "A", cluster: str | None = None, payload: int = 1232) -> dns.message.Message:
        reply = responder.respond(query(qname, qtype, cluster, payload).to_wire(), "192.0.2.1", tcp)
        assert reply is not None
        return dns.message.from_wire(reply)
    return ask


def over_network(server: ServeProcess, tcp: bool) -> Ask:
    """Ask the real server over UDP or TCP on loopback."""
    def ask(qname: str, qtype: str = "A", cluster: str | None = None, payload: int = 1232) -> dns.message.Message:
        message = query(qname, qtype, cluster, payload)
        send = dns.query.tcp if tcp else dns.query.udp
        return send(message, "127.0.0.1", port=server.port, timeout=2)
    return ask


