"""``_whoami.F.svc.Z`` (docs/reference.md section 1): the TXT record saying how serve
identified the asking cluster (section 3: by option 65245, by ECS, by the source address
in a cluster's ``cidrs``, or not at all), asked as a table of named cases in-process and of
the real ``feddns serve`` over UDP and TCP on loopback (source address 127.0.0.1)."""

from collections.abc import Iterator
from dataclasses import dataclass, field

import dns.edns
import dns.message
import dns.query
import pytest

from feddns.dns.responder import Responder
from harness.serve import ServeProcess, edns_options, write_records
from tests.dns import tables
from tests.dns.tables import Case, negative
from tests.dns.udp import respond

# foo is found by ECS inside 10.1.0.0/16; the real server's asker, 127.0.0.1, is in bar's
# cidrs; federation lone has one cluster record and no service, and no cidrs at all.
RECORDS = """
/myfederation/_clusters/foo: {zone: z1, region: r1, cidrs: ["10.1.0.0/16"]}
/myfederation/_clusters/bar: {zone: z2, region: r1, cidrs: ["127.0.0.0/8"]}
/myfederation/prod/web/foo: {clusterIP: 10.0.0.1, externalIP: 1.1.1.1}
/myfederation/prod/web/nocluster: {clusterIP: 10.0.0.9}
/lone/_clusters/baz: {zone: z9, region: r9}
"""
Z = "federation."
ME = f"_whoami.myfederation.svc.{Z}"
LONE = f"_whoami.lone.svc.{Z}"
CLIENT = "127.0.0.1"
"""The asker's address: the real server's over loopback, and the in-process one's."""


def txt(name: str, *strings: str) -> tables.Section:
    """One TXT record of TTL 0 with these character-strings, as a section."""
    return ((f"{name} 0 IN TXT " + " ".join(f'"{s}"' for s in strings),),)


@dataclass(frozen=True, slots=True)
class WhoamiCase:
    """A :class:`Case` (``case``) and the ECS subnet its query carries (``ecs``, ``None``: none)."""

    case: Case
    ecs: str | None = None
    id: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", self.case.id)


CASES = [
    WhoamiCase(Case(ME, "TXT", "foo", "NOERROR", txt(ME, "cluster=foo", "by=option", "zone=z1", "region=r1"),
                    id="by option")),
    WhoamiCase(Case(ME, "TXT", "FOO", "NOERROR", txt(ME, "cluster=foo", "by=option", "zone=z1", "region=r1"),
                    id="by option in upper case")),
    WhoamiCase(Case(ME, "TXT", "nocluster", "NOERROR", txt(ME, "cluster=nocluster", "by=option", "zone=",
                                                           "region="),
                    id="by option, a cluster with a shard and no cluster record")),
    WhoamiCase(Case(ME, "TXT", None, "NOERROR", txt(ME, "cluster=foo", "by=ecs", "zone=z1", "region=r1"),
                    id="by ECS"), ecs="10.1.2.0/24"),
    WhoamiCase(Case(ME, "TXT", None, "NOERROR", txt(ME, "cluster=bar", "by=source", "zone=z2", "region=r1"),
                    id="by source address")),
    WhoamiCase(Case(ME, "TXT", "nosuch", "NOERROR", txt(ME, "cluster=bar", "by=source", "zone=z2", "region=r1"),
                    id="an unknown cluster in the option: by source address")),
    WhoamiCase(Case(ME, "TXT", None, "NOERROR", txt(ME, "cluster=bar", "by=source", "zone=z2", "region=r1"),
                    id="an ECS subnet in no cluster: by source address"), ecs="192.0.2.0/24"),
    WhoamiCase(Case(LONE, "TXT", None, "NOERROR", txt(LONE, "cluster=", "by=none", "zone=", "region="),
                    id="none: a federation without cidrs")),
    WhoamiCase(Case(LONE, "TXT", "baz", "NOERROR", txt(LONE, "cluster=baz", "by=option", "zone=z9", "region=r9"),
                    id="a federation of cluster records only")),
    WhoamiCase(Case("_WhoAmI.MyFederation.SVC.Federation.", "TXT", "foo", "NOERROR",
                    txt("_WhoAmI.MyFederation.SVC.Federation.", "cluster=foo", "by=option", "zone=z1",
                        "region=r1"), id="mixed case, echoed as asked")),
    WhoamiCase(Case(ME, "ANY", "foo", "NOERROR", txt(ME, "cluster=foo", "by=option", "zone=z1", "region=r1"),
                    id="ANY: the TXT record")),
    WhoamiCase(Case(ME, "AAAA", "foo", "NOERROR", authority=negative(Z), id="AAAA: NODATA")),
    WhoamiCase(Case(ME, "A", None, "NOERROR", authority=negative(Z), id="A: NODATA")),
    WhoamiCase(Case(f"_whoami.nosuch.svc.{Z}", "TXT", "foo", "NXDOMAIN", authority=negative(Z),
                    id="unknown federation: NXDOMAIN")),
    WhoamiCase(Case(f"x._whoami.myfederation.svc.{Z}", "TXT", "foo", "NXDOMAIN", authority=negative(Z),
                    id="below _whoami: NXDOMAIN")),
    WhoamiCase(Case(f"lone.svc.{Z}", "TXT", None, "NOERROR", authority=negative(Z),
                    id="F.svc above _whoami: an empty non-terminal")),
]


def query(row: WhoamiCase, payload: int | None = 1232) -> dns.message.Message:
    """The query of ``row``: EDNS0, option 65245 when it names a cluster, ECS when it has one."""
    case = row.case
    if payload is None:
        return dns.message.make_query(case.qname, case.qtype)
    options = edns_options(case.cluster, row.ecs)
    return dns.message.make_query(case.qname, case.qtype, use_edns=0, options=options, payload=payload)


@pytest.fixture(scope="module")
def whoami_server() -> Iterator[ServeProcess]:
    """feddns serve on RECORDS."""
    with ServeProcess(records=write_records(RECORDS)) as server:
        yield server


@pytest.fixture(scope="module")
def whoami_responder() -> Responder:
    """The responder in-process on RECORDS."""
    return tables.make_responder(RECORDS)


def ask_in_process(responder: Responder, message: dns.message.Message, tcp: bool,
                   client: str = CLIENT) -> dns.message.Message:
    reply = respond(responder, message.to_wire(), client, tcp)
    assert reply is not None
    return dns.message.from_wire(reply)


@pytest.mark.parametrize("row", CASES, ids=[row.id for row in CASES])
def test_in_process(whoami_responder: Responder, row: WhoamiCase) -> None:
    for tcp in (False, False, False, True):  # built, then asked again: nothing kept may answer
        tables.check(ask_in_process(whoami_responder, query(row), tcp), row.case)
    if row.case.cluster is None and row.ecs is None:
        tables.check(ask_in_process(whoami_responder, query(row, payload=None), False), row.case)


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
@pytest.mark.parametrize("row", CASES, ids=[row.id for row in CASES])
def test_the_real_server(whoami_server: ServeProcess, row: WhoamiCase, tcp: bool) -> None:
    send = dns.query.tcp if tcp else dns.query.udp
    for _ in range(3):  # UDP: built, then the packet seen twice (the reply cache would keep it)
        reply = send(query(row), "127.0.0.1", port=whoami_server.port, timeout=2)
        tables.check(reply, row.case, any_serial=True)


def test_the_answer_follows_the_asker_not_the_cache(whoami_responder: Responder) -> None:
    """The same question, asked so that the reply cache and the answer cache would keep it,
    then asked by ECS and from another address: each gets its own asker's answer."""
    by_option = query(CASES[0])
    for _ in range(3):
        ask_in_process(whoami_responder, by_option, False)
    from_foo = query(WhoamiCase(Case(ME, "TXT", None, "NOERROR", id="ecs"), ecs="10.1.0.0/16"))
    assert '"by=ecs"' in tables.lines(ask_in_process(whoami_responder, from_foo, False).answer)[0]
    plain = query(WhoamiCase(Case(ME, "TXT", None, "NOERROR", id="plain")))
    for _ in range(3):
        assert '"cluster=bar"' in tables.lines(ask_in_process(whoami_responder, plain, False).answer)[0]
    elsewhere = ask_in_process(whoami_responder, plain, False, client="192.0.2.7")
    assert tables.lines(elsewhere.answer) == [f'{ME} 0 IN TXT "cluster=" "by=none" "zone=" "region="']


def test_ecs_is_echoed_with_the_matched_prefix(whoami_server: ServeProcess) -> None:
    row = CASES[3]
    reply = dns.query.udp(query(row), "127.0.0.1", port=whoami_server.port, timeout=2)
    (ecs,) = [option for option in reply.options if isinstance(option, dns.edns.ECSOption)]
    assert (ecs.address, ecs.srclen, ecs.scopelen) == ("10.1.2.0", 24, 16)
