"""Answer tables: named cases (:class:`Case`), asked in-process or over the network, and
answers compared with zone-file lines grouped by where order is not fixed."""

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import dns.edns
import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset

from feddns.dns.index import Index
from feddns.dns.responder import AnswerSettings, Responder
from feddns.keys import Layout
from feddns.store import Feed
from feddns.store.file import read_records
from harness.serve import CLUSTER_OPTION, ServeProcess, write_records
from tests.dns.udp import respond

Ask = Callable[..., dns.message.Message]
"""``ask(qname, qtype="A", cluster=None, payload=1232)``: the reply (``payload=None``: a
query without EDNS)."""


Group = tuple[str, ...]
"""Zone-file lines (``"name TTL IN TYPE rdata"``) that may come in any order among themselves."""

Section = tuple[Group, ...]
"""A section of a reply: its groups in this order, each group's lines in any order."""


@dataclass(frozen=True, slots=True)
class Case:
    """One question and the reply the contract (docs/reference.md sections 1 and 2) gives it.

    ``qname`` as asked (letter case is kept and must be echoed), ``qtype`` a mnemonic,
    ``cluster`` the asking cluster's name carried in EDNS0 option 65245 (``None``: no
    option, an external client), ``rcode`` a mnemonic (``"NOERROR"``). ``answer``,
    ``authority`` and ``additional`` are the reply's sections as zone-file lines
    (``"web.prod.fed.svc.federation. 30 IN A 10.0.0.1"``: owner, TTL, class, type,
    rdata as dnspython writes it) in :data:`Section` form: groups in the order given,
    the lines of one group in any order (a tier rotates; a weighted tier is drawn).
    A section fixed line by line is one line a group (:func:`ordered`). Every section
    is compared whole: an empty one must be empty. ``id`` names the case in pytest.

    AA is set on every reply but REFUSED; RA and AD never are (:func:`check`).
    """

    qname: str
    qtype: str
    cluster: str | None
    rcode: str
    answer: Section = ()
    authority: Section = ()
    additional: Section = ()
    id: str = field(kw_only=True)


def a(name: str, *addresses: str, ttl: int = 30) -> Group:
    """A records of ``name`` as zone-file lines (TTL ``ttl``, serve's ``--ttl``), in any order among themselves."""
    return tuple(f"{name} {ttl} IN A {address}" for address in addresses)


def aaaa(name: str, *addresses: str) -> Group:
    """AAAA records of ``name`` as zone-file lines (TTL 30), in any order among themselves."""
    return tuple(f"{name} 30 IN AAAA {address}" for address in addresses)


def srv(name: str, *rdatas: str) -> Group:
    """SRV records of ``name`` as zone-file lines (TTL 30), in any order among themselves."""
    return tuple(f"{name} 30 IN SRV {rdata}" for rdata in rdatas)


def ordered(*groups: Group) -> Section:
    """The records of ``groups`` in exactly this order (one line a group)."""
    return tuple((line,) for group in groups for line in group)


def soa(zone: str, owner: str | None = None) -> Group:
    """The SOA of ``zone`` as the in-process responder has it (serial 1, TTL and minimum 30):
    the authority of a negative answer (RFC 2308), or the answer at the apex (``owner``: the
    name as asked)."""
    return (f"{owner or zone} 30 IN SOA ns.dns.{zone} hostmaster.{zone} 1 7200 1800 86400 30",)


def negative(zone: str) -> Section:
    """The authority section of NXDOMAIN and NODATA in ``zone``: its SOA."""
    return (soa(zone),)


def ids(cases: Sequence[Case]) -> list[str]:
    """The pytest ids of ``cases`` (each must be unique)."""
    names = [case.id for case in cases]
    assert len(set(names)) == len(names), [n for n in names if names.count(n) > 1]
    return names


_SOA_SERIAL = re.compile(r"^(\S+ \d+ IN SOA \S+ \S+ )\d+ ")


def check(reply: dns.message.Message, case: Case, any_serial: bool = False) -> None:
    """``reply`` is what ``case`` says: rcode, the question echoed as asked, AA (unless
    REFUSED), no RA or AD, and each section whole. ``any_serial``: read every SOA serial
    as 1 (``feddns serve`` numbers its SOA by its start time)."""
    assert dns.rcode.to_text(reply.rcode()) == case.rcode, case.id
    assert [str(q.name) for q in reply.question] == [case.qname]
    assert bool(reply.flags & dns.flags.AA) == (case.rcode != "REFUSED")
    assert not reply.flags & (dns.flags.RA | dns.flags.AD)
    for got, want in ((reply.answer, case.answer), (reply.authority, case.authority),
                      (reply.additional, case.additional)):
        text = lines(got)
        if any_serial:
            text = [_SOA_SERIAL.sub(r"\g<1>1 ", line) for line in text]
        check_groups(text, want)


def lines(rrsets: list[dns.rrset.RRset]) -> list[str]:
    """The records of a section as zone-file lines, in wire order."""
    return [f"{rrset.name} {rrset.ttl} IN {dns.rdatatype.to_text(rrset.rdtype)} {rd.to_text()}"
            for rrset in rrsets for rd in rrset]


def check_groups(got: list[str], groups: Sequence[Sequence[str]]) -> None:
    """``got`` is the groups in order, each group's lines in any order."""
    assert len(got) == sum(len(g) for g in groups), got
    at = 0
    for group in groups:
        assert sorted(got[at : at + len(group)]) == sorted(group), got
        at += len(group)


def make_responder(records: str, **settings: object) -> Responder:
    """A responder (``AnswerSettings(**settings)``) loaded with the records file text ``records``."""
    layout = Layout()
    index = Index(layout)
    responder = Responder(AnswerSettings(**settings))  # type: ignore[arg-type]
    path = Path(write_records(records))
    try:
        Feed(index, responder).replace(read_records(path, layout))
    finally:
        path.unlink()
    return responder


def query(qname: str, qtype: str, cluster: str | None, payload: int | None = 1232) -> dns.message.Message:
    """A query with EDNS0 (``payload`` bytes; ``None``: no EDNS) and, when ``cluster`` is
    given, option 65245 naming it."""
    if payload is None:
        assert cluster is None
        return dns.message.make_query(qname, qtype)
    options = [dns.edns.GenericOption(CLUSTER_OPTION, cluster.encode())] if cluster else []
    return dns.message.make_query(qname, qtype, use_edns=0, options=options, payload=payload)


def in_process(responder: Responder, tcp: bool) -> Ask:
    """Ask ``responder`` in-process, as the UDP (``tcp`` False) or TCP transport does
    (``tests.dns.udp``: over UDP, the cache's handler first)."""
    def ask(qname: str, qtype: str = "A", cluster: str | None = None,
            payload: int | None = 1232) -> dns.message.Message:
        reply = respond(responder, query(qname, qtype, cluster, payload).to_wire(), "192.0.2.1", tcp)
        assert reply is not None
        return dns.message.from_wire(reply)
    return ask


def over_network(server: ServeProcess, tcp: bool) -> Ask:
    """Ask the real server over UDP or TCP on loopback."""
    def ask(qname: str, qtype: str = "A", cluster: str | None = None,
            payload: int | None = 1232) -> dns.message.Message:
        message = query(qname, qtype, cluster, payload)
        send = dns.query.tcp if tcp else dns.query.udp
        return send(message, "127.0.0.1", port=server.port, timeout=2)
    return ask




def check_in_process(responder: Responder, case: Case) -> None:
    """Ask ``case`` of ``responder`` as the transports do: three times over UDP (the
    answer is built, then taken from the answer cache, then from the reply cache, which
    keeps a fixed reply the second time its packet comes), once over TCP and, for an
    external client, once without EDNS."""
    udp, tcp = in_process(responder, False), in_process(responder, True)
    asks = [udp, udp, udp, tcp]
    for ask in asks:
        check(ask(case.qname, case.qtype, case.cluster), case)
    if case.cluster is None:
        check(udp(case.qname, case.qtype, None, payload=None), case)


def check_over_network(server: ServeProcess, case: Case, tcp: bool) -> None:
    """Ask ``case`` of the real server three times over UDP or TCP (built, then cached)
    and, for an external client, once without EDNS."""
    ask = over_network(server, tcp)
    for _ in range(3):
        check(ask(case.qname, case.qtype, case.cluster), case, any_serial=True)
    if case.cluster is None:
        check(ask(case.qname, case.qtype, None, payload=None), case, any_serial=True)
