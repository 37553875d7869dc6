"""Unit tables for ``feddns.dns.policy`` (docs/reference.md sections 2 and 3), called directly
on small hand-built federations: which tier a shard is in for an asker, the groups a
service's policy ranks its healthy shards in, the addresses and SRV records answered by
tier, and the source cluster a query names.

The federation of every table: clusters a and b share zone z1 (region r1), c is in r1 only,
d is far (z3, r2); e has no cluster record; x is in z1 but stale (its shards demoted), y
in r1 but stale with ``staleAction: drop``. Cluster N's shard (a=1 ... y=7) has clusterIP
10.0.0.N and externalIP 1.1.1.N (with ``v6``: fd00::N and 2001:db8::N too).
"""

import ipaddress
import struct
from dataclasses import dataclass

import dns.name
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import pytest

from feddns import names
from feddns.dns import answer, policy, wire
from feddns.dns.index import Endpoints, Federation, Node, NodeKind, Shard
from feddns.dns.policy import Tier
from feddns.dns.weights import Draw
from feddns.records import DEFAULT_POLICY, ClusterRecord, NoneReady, Policy, Port

NUMBER = {name: n for n, name in enumerate("abcdexy", start=1)}
RECORDS = {
    "a": ClusterRecord(zone="z1", region="r1", cidrs=(ipaddress.ip_network("10.240.0.0/16"),), pod_network="routable"),
    "b": ClusterRecord(zone="z1", region="r1"),
    "c": ClusterRecord(zone="z2", region="r1", pod_network="routable"),
    "d": ClusterRecord(zone="z3", region="r2", cidrs=(ipaddress.ip_network("10.0.0.0/8"),)),
    "x": ClusterRecord(zone="z1", region="r1", stale=True),
    "y": ClusterRecord(zone="z2", region="r1", stale=True, stale_action="drop"),
}
SERVICE = ("f", "ns", "web")


def federation() -> Federation:
    fed = Federation("f")
    fed.clusters.update(RECORDS)
    for name in [*RECORDS, "e"]:
        fed.shard_refs[name] = 1
        fed._refresh(name)
    fed._rebuild_cidrs()
    return fed


FED = federation()


@dataclass(frozen=True)
class S:
    """A shard in a table: its cluster, ready count, policy, and which addresses it has."""

    cluster: str
    ready: int | None = None
    policy: Policy = DEFAULT_POLICY
    external: bool = True
    v6: bool = False
    port: int = 80
    port_name: str = "http"
    endpoints: tuple[tuple[str, str | None], ...] | None = None

    def build(self) -> Shard:
        n = NUMBER[self.cluster]
        inside = [f"10.0.0.{n}"] + ([f"fd00::{n}"] if self.v6 else [])
        outside = [f"1.1.1.{n}"] + ([f"2001:db8::{n}"] if self.v6 else [])
        ports = (Port(self.port_name, "TCP", self.port),)
        if self.endpoints is not None:
            endpoints = Endpoints(tuple((packed(ip), host) for ip, host in self.endpoints))
            return Shard((), (), ports, self.ready, self.policy, endpoints)
        return Shard(tuple(map(packed, inside)), tuple(map(packed, outside)) if self.external else (), ports,
                     self.ready, self.policy)


def packed(text: str) -> bytes:
    return ipaddress.ip_address(text).packed


def service(*shards: S) -> Node:
    """A service node of federation ``FED`` with these shards."""
    return Node(NodeKind.SERVICE, FED, SERVICE, {s.cluster: s.build() for s in shards})


def every(*clusters: str, **fields: object) -> tuple[S, ...]:
    return tuple(S(c, **fields) for c in clusters)  # type: ignore[arg-type]


FAILOVER = Policy("failover", ("c", "a"))
FAILOVER_X = Policy("failover", ("x", "a"))
NODATA = Policy(none_ready=NoneReady.NODATA)
ANSWER = Policy(none_ready=NoneReady.ANSWER)


def weighted(weight: int | None) -> Policy:
    return Policy("weighted", (), weight)


def locality_weighted(weight: int | None) -> Policy:
    return Policy("locality-weighted", (), weight)


# -- tier ------------------------------------------------------------------------------

TIERS = [
    # (id, asker, shard's cluster, tier or None: left out)
    ("own cluster", "a", "a", Tier.OWN),
    ("same zone", "a", "b", Tier.SAME_ZONE),
    ("same region", "a", "c", Tier.SAME_REGION),
    ("any other", "a", "d", Tier.OTHER),
    ("same zone, seen from b", "b", "a", Tier.SAME_ZONE),
    ("same region, seen from c", "c", "b", Tier.SAME_REGION),
    ("far, seen from d", "d", "c", Tier.OTHER),
    ("no asker (external client)", None, "a", Tier.OTHER),
    ("an asker without a record", "e", "a", Tier.OTHER),
    ("a shard's cluster without a record", "a", "e", Tier.OTHER),
    ("own cluster without a record", "e", "e", Tier.OWN),
    ("an unknown asker", "zz", "b", Tier.OTHER),
    ("stale, same zone: demoted", "a", "x", Tier.OTHER),
    ("stale, seen from itself", "x", "x", Tier.OWN),
    ("stale asker sees others as usual", "x", "a", Tier.SAME_ZONE),
    ("stale with drop: left out", "a", "y", None),
    ("stale with drop, external client: left out", None, "y", None),
    ("stale with drop, seen from itself", "y", "y", Tier.OWN),
]


@pytest.mark.parametrize(("asker", "cluster", "expected"), [row[1:] for row in TIERS], ids=[row[0] for row in TIERS])
def test_tier(asker: str | None, cluster: str, expected: Tier | None) -> None:
    assert policy.tier(FED, asker, cluster) == expected


# -- ranked ----------------------------------------------------------------------------

ALL = ("a", "b", "c", "d", "e")
RANKED = [
    # (id, shards, asker, policy name, [(priority, clusters)])
    ("locality: own, zone, region, any", every(*ALL), "a", "locality",
     [(0, ["a"]), (10, ["b"]), (20, ["c"]), (30, ["d", "e"])]),
    ("locality from b", every(*ALL), "b", "locality", [(0, ["b"]), (10, ["a"]), (20, ["c"]), (30, ["d", "e"])]),
    ("locality from d", every(*ALL), "d", "locality", [(0, ["d"]), (30, ["a", "b", "c", "e"])]),
    ("locality, external client", every(*ALL), None, "locality", [(30, ["a", "b", "c", "d", "e"])]),
    ("locality, unknown asker", every(*ALL), "zz", "locality", [(30, ["a", "b", "c", "d", "e"])]),
    ("health: ready 0 is left out", (S("a"), S("b", ready=0), S("c", ready=3), S("d")), "a", "locality",
     [(0, ["a"]), (20, ["c"]), (30, ["d"])]),
    ("health: own shard unready", (S("a", ready=0), S("b"), S("d")), "a", "locality", [(10, ["b"]), (30, ["d"])]),
    ("health: none ready: every shard, as if ready (fail open)", every("a", "b", ready=0), "a", "locality",
     [(0, ["a"]), (10, ["b"])]),
    ("health: none ready, every record says noneReady nodata", every("a", "b", ready=0, policy=NODATA), "a",
     "locality", []),
    ("health: none ready, one record says nodata: the default (fail open)",
     (S("a", ready=0, policy=NODATA), S("b", ready=0)), "a", "locality", [(0, ["a"]), (10, ["b"])]),
    ("health: none ready, fail open keeps weight 0 out", (S("a", ready=0, policy=weighted(0)),
                                                         S("b", ready=0, policy=weighted(2))), "a", "weighted",
     [(0, ["b"])]),
    ("health: no ready count counts as ready", (S("a", ready=None), S("b", ready=1)), "b", "locality",
     [(0, ["b"]), (10, ["a"])]),
    ("failover: the list's order for everyone, unlisted last", every(*ALL, policy=FAILOVER), "b", "failover",
     [(0, ["c"]), (10, ["a"]), (20, ["b", "d", "e"])]),
    ("failover: the same from a listed cluster", every(*ALL, policy=FAILOVER), "a", "failover",
     [(0, ["c"]), (10, ["a"]), (20, ["b", "d", "e"])]),
    ("failover: external client", every(*ALL, policy=FAILOVER), None, "failover",
     [(0, ["c"]), (10, ["a"]), (20, ["b", "d", "e"])]),
    ("failover: first choice down", (S("a", policy=FAILOVER), S("b", policy=FAILOVER),
                                     S("c", ready=0, policy=FAILOVER)), "b", "failover", [(0, ["a"]), (10, ["b"])]),
    ("failover: a listed cluster without a shard", every("a", "b", policy=FAILOVER), "b", "failover",
     [(0, ["a"]), (10, ["b"])]),
    ("failover: stale listed cluster goes after the unlisted", every("a", "b", "x", policy=FAILOVER_X), "b",
     "failover", [(0, ["a"]), (10, ["b"]), (20, ["x"])]),
    ("failover: stale listed cluster, seen from itself", every("a", "b", "x", policy=FAILOVER_X), "x",
     "failover", [(0, ["x"]), (10, ["a"]), (20, ["b"])]),
    ("weighted: one group", (S("a", policy=weighted(3)), S("b", policy=weighted(1)), S("d", policy=weighted(None))),
     "a", "weighted", [(0, ["a", "b", "d"])]),
    ("weighted: weight 0 left out, even for itself", (S("a", policy=weighted(3)), S("c", policy=weighted(0))), "c",
     "weighted", [(0, ["a"])]),
    ("weighted: every weight 0", every("a", "b", policy=weighted(0)), None, "weighted", []),
    ("weighted: unready left out", (S("a", ready=0, policy=weighted(3)), S("b", policy=weighted(1))), "a",
     "weighted", [(0, ["b"])]),
    ("weighted: stale in a group of its own, dropped left out",
     every("a", "d", "x", "y", policy=weighted(5)), None, "weighted", [(0, ["a", "d"]), (10, ["x"])]),
    ("locality-weighted: the tiers", every(*ALL, policy=locality_weighted(2)), "a", "locality-weighted",
     [(0, ["a"]), (10, ["b"]), (20, ["c"]), (30, ["d", "e"])]),
    ("locality-weighted: weight 0 left out", (S("a", policy=locality_weighted(1)), S("b", policy=locality_weighted(0)),
                                              S("c", policy=locality_weighted(1))), "a", "locality-weighted",
     [(0, ["a"]), (20, ["c"])]),
    ("locality: stale demoted to tier 3, dropped left out", every("a", "b", "x", "y"), "a", "locality",
     [(0, ["a"]), (10, ["b"]), (30, ["x"])]),
    ("policies disagree: locality", (S("a", policy=FAILOVER), S("b", policy=weighted(2))), "b", "locality",
     [(0, ["b"]), (10, ["a"])]),
    ("failover orders disagree: locality", (S("a", policy=FAILOVER), S("b", policy=FAILOVER_X)), "b", "locality",
     [(0, ["b"]), (10, ["a"])]),
    ("weights may differ: still weighted", (S("a", policy=weighted(1)), S("b", policy=weighted(2))), "b",
     "weighted", [(0, ["a", "b"])]),
]


@pytest.mark.parametrize(("shards", "asker", "name", "groups"), [row[1:] for row in RANKED],
                         ids=[row[0] for row in RANKED])
def test_ranked(shards: tuple[S, ...], asker: str | None, name: str, groups: list[tuple[int, list[str]]]) -> None:
    chosen, got = policy.ranked(service(*shards), asker)
    assert (chosen.name, got) == (name, groups)


@pytest.mark.parametrize(("shards", "default", "groups", "fails_open"), [
    (every("a", "b", ready=0), NoneReady.NODATA, [], False),
    (every("a", "b", ready=0, policy=ANSWER), NoneReady.NODATA, [(0, ["a"]), (10, ["b"])], True),
    (every("a", "b", ready=0, policy=NODATA), NoneReady.ANSWER, [], False),
    ((S("a", ready=0), S("b", ready=1)), NoneReady.ANSWER, [(10, ["b"])], False),
], ids=["serve's --none-ready nodata", "every record says answer: over serve's nodata",
        "every record says nodata: over serve's answer", "one shard ready: no fail open"])
def test_none_ready_default_and_records(shards: tuple[S, ...], default: NoneReady,
                                        groups: list[tuple[int, list[str]]], fails_open: bool) -> None:
    """Serve's --none-ready decides unless every shard's record names the same noneReady."""
    node = service(*shards)
    assert policy.ranked(node, "a", none_ready=default)[1] == groups
    assert node.shards is not None
    assert policy.fails_open(node.shards, default) is fails_open


# -- address_answer ----------------------------------------------------------------------

A, AAAA, ANY = (4,), (6,), (4, 6)


def addresses(tiers: tuple[tuple[bytes, ...], ...], ttl: int = 30) -> list[list[str]]:
    """The address records of each tier, as addresses (each owned by the qname, with ``ttl``)."""
    out = []
    for tier in tiers:
        group = []
        for rr in tier:
            rtype, rclass, got_ttl, size = struct.unpack_from("!HHIH", rr, 2)
            assert rr[:2] == answer.POINTER_TO_QNAME and rclass == 1 and got_ttl == ttl
            assert (rtype, size) in ((1, 4), (28, 16)) and len(rr) == 12 + size
            group.append(str(ipaddress.ip_address(rr[12:])))
        out.append(group)
    return out


HEADLESS = {
    "a": (("10.60.0.1", "web-0"), ("10.60.0.2", "web-1")),
    "b": (("10.61.0.1", "web-0"),),
    "c": (("10.62.0.1", None), ("fd00::62:1", None)),
}
HL = tuple(S(c, endpoints=e) for c, e in HEADLESS.items())

ADDRESSES = [
    # (id, shards, asker, versions, tiers of addresses, ordering: None (the server's), "fixed" or "draw")
    ("A: clusterIP for own, externalIPs for the rest", every("a", "b", "c", "d"), "a", A,
     [["10.0.0.1"], ["1.1.1.2"], ["1.1.1.3"], ["1.1.1.4"]], None),
    ("A: external client", every("a", "b", "d"), None, A, [["1.1.1.1", "1.1.1.2", "1.1.1.4"]], None),
    ("A: no externalIP: only from its own cluster", (S("a"), S("e", external=False)), "a", A, [["10.0.0.1"]], None),
    ("A: no externalIP, from itself", (S("a"), S("e", external=False)), "e", A, [["10.0.0.5"], ["1.1.1.1"]], None),
    ("A: unready left out", (S("a", ready=0), S("b"), S("c")), "a", A, [["1.1.1.2"], ["1.1.1.3"]], None),
    ("A: none ready: fail open", (S("a", ready=0), S("d", ready=0)), "a", A, [["10.0.0.1"], ["1.1.1.4"]], None),
    ("A: none ready, noneReady nodata", (S("a", ready=0, policy=NODATA),), "a", A, [], None),
    ("AAAA: the same tiers", every("a", "b", "d", v6=True), "a", AAAA, [["fd00::1"], ["2001:db8::2"],
                                                                       ["2001:db8::4"]], None),
    ("AAAA of IPv4-only shards", every("a", "b"), "a", AAAA, [], None),
    ("ANY: IPv4 tiers, then IPv6 tiers", every("a", "b", v6=True), "a", ANY,
     [["10.0.0.1"], ["1.1.1.2"], ["fd00::1"], ["2001:db8::2"]], None),
    ("failover: fixed order", every("a", "b", "c", policy=FAILOVER), "b", A,
     [["1.1.1.3"], ["1.1.1.1"], ["10.0.0.2"]], "fixed"),
    ("weighted: drawn", (S("a", policy=weighted(3)), S("b", policy=weighted(1))), "a", A,
     [["10.0.0.1", "1.1.1.2"]], "draw"),
    ("weighted: one shard left, fixed", (S("a", policy=weighted(3)), S("b", policy=weighted(0))), None, A,
     [["1.1.1.1"]], "fixed"),
    ("locality-weighted: drawn within tiers", every("a", "b", "d", "e", policy=locality_weighted(1)), "a", A,
     [["10.0.0.1"], ["1.1.1.2"], ["1.1.1.4", "1.1.1.5"]], "draw"),
    ("locality-weighted: one shard a tier, fixed", every("a", "b", policy=locality_weighted(1)), "a", A,
     [["10.0.0.1"], ["1.1.1.2"]], "fixed"),
    ("headless: own endpoints, then routable clusters'", HL, "b", A,
     [["10.61.0.1"], ["10.60.0.1", "10.60.0.2"], ["10.62.0.1"]], None),
    ("headless: an isolated cluster's endpoints only from itself", HL, "a", A,
     [["10.60.0.1", "10.60.0.2"], ["10.62.0.1"]], None),
    ("headless: AAAA", HL, "d", AAAA, [["fd00::62:1"]], None),
]


@pytest.mark.parametrize(("shards", "asker", "versions", "tiers", "ordering"), [row[1:] for row in ADDRESSES],
                         ids=[row[0] for row in ADDRESSES])
def test_address_answer(shards: tuple[S, ...], asker: str | None, versions: tuple[int, ...],
                        tiers: list[list[str]], ordering: str | None) -> None:
    got, arranged, additional, _ = policy.address_answer(service(*shards), asker, versions, 30)
    assert addresses(got) == tiers
    assert additional == []
    kinds = {None: None, "fixed": answer.FIXED}
    if ordering == "draw":
        assert isinstance(arranged, Draw)
    else:
        assert arranged is kinds[ordering]


SHARD_NAMES = [
    # (id, shards, the shard named, asker, versions, addresses): C.<svc>... whatever its ready count or weight
    ("own shard: clusterIP", every("a", "b"), "a", "a", A, ["10.0.0.1"]),
    ("another's shard: externalIP", every("a", "b"), "a", "b", A, ["1.1.1.1"]),
    ("unready shard still answered", (S("a", ready=0), S("b")), "a", None, A, ["1.1.1.1"]),
    ("weight 0 still answered", (S("a", policy=weighted(0)), S("b", policy=weighted(1))), "a", None, A, ["1.1.1.1"]),
    ("stale with drop still answered", every("a", "y"), "y", "a", A, ["1.1.1.7"]),
    ("no externalIP, from another", (S("a"), S("e", external=False)), "e", "a", A, []),
    ("AAAA", every("a", "b", v6=True), "b", "a", AAAA, ["2001:db8::2"]),
    ("headless, routable", HL, "a", "d", A, ["10.60.0.1", "10.60.0.2"]),
    ("headless, isolated", HL, "b", "a", A, []),
    ("headless, isolated, from itself", HL, "b", "b", A, ["10.61.0.1"]),
]


@pytest.mark.parametrize(("shards", "cluster", "asker", "versions", "expected"), [row[1:] for row in SHARD_NAMES],
                         ids=[row[0] for row in SHARD_NAMES])
def test_shard_name_answer(shards: tuple[S, ...], cluster: str, asker: str | None, versions: tuple[int, ...],
                           expected: list[str]) -> None:
    parent = service(*shards)
    node = Node(NodeKind.SHARD, FED, SERVICE, parent.shards, cluster=cluster)
    got, ordering, _, _ = policy.address_answer(node, asker, versions, 30)
    assert addresses(got) == ([expected] if expected else [])
    assert ordering is answer.FIXED


def test_records_carry_the_ttl_given() -> None:
    got, _, _, _ = policy.address_answer(service(*every("a", "b")), "a", A, 7)
    assert addresses(got, ttl=7) == [["10.0.0.1"], ["1.1.1.2"]]


# -- srv_answer ----------------------------------------------------------------------------

ZONE = "federation."
T = ".web.ns.f.svc.federation."  # a target is <cluster> + T


def srv_texts(tiers: tuple[tuple[bytes, ...], ...]) -> list[list[str]]:
    """The SRV records of each tier as ``priority weight port target``."""
    out = []
    for tier in tiers:
        group = []
        for rr in tier:
            rtype, _, _, size = struct.unpack_from("!HHIH", rr, 2)
            assert rtype == dns.rdatatype.SRV
            group.append(dns.rdata.from_wire(dns.rdataclass.IN, rtype, rr, 12, size).to_text())
        out.append(group)
    return out


def owned(records: list[bytes]) -> list[str]:
    """Additional records as ``owner address``."""
    out = []
    for rr in records:
        owner, at = dns.name.from_wire(rr, 0)
        size = struct.unpack_from("!H", rr, at + 8)[0]
        out.append(f"{owner} {ipaddress.ip_address(rr[at + 10 : at + 10 + size])}")
    return out


SRVS = [
    # (id, shards, asker, SRV tiers, additional)
    ("locality: priority 10 x tier, weight the ready count", (S("a", ready=2), S("b", port=8080), S("c", ready=0),
                                                              S("d", ready=5)), "a",
     [[f"0 2 80 a{T}"], [f"10 1 8080 b{T}"], [f"30 5 80 d{T}"]],
     [f"a{T} 10.0.0.1", f"b{T} 1.1.1.2", f"d{T} 1.1.1.4"]),
    ("a shard without that port is left out", (S("a"), S("b"), S("c", port_name="grpc")), "b",
     [[f"0 1 80 b{T}"], [f"10 1 80 a{T}"]], [f"b{T} 10.0.0.2", f"a{T} 1.1.1.1"]),
    ("a shard the asker cannot reach is left out", (S("a"), S("e", external=False)), "a", [[f"0 1 80 a{T}"]],
     [f"a{T} 10.0.0.1"]),
    ("failover: priority by place", every("a", "b", "c", "d", policy=FAILOVER), "a",
     [[f"0 1 80 c{T}"], [f"10 1 80 a{T}"], [f"20 1 80 b{T}", f"20 1 80 d{T}"]],
     [f"c{T} 1.1.1.3", f"a{T} 10.0.0.1", f"b{T} 1.1.1.2", f"d{T} 1.1.1.4"]),
    ("weighted: priority 0, weight the weight", (S("a", policy=weighted(3)), S("b", policy=weighted(None)),
                                                 S("c", policy=weighted(0))), None,
     [[f"0 3 80 a{T}", f"0 1 80 b{T}"]], [f"a{T} 1.1.1.1", f"b{T} 1.1.1.2"]),
    ("locality-weighted: tiers, weight the weight", (S("a", policy=locality_weighted(4)),
                                                     S("d", policy=locality_weighted(2))), "a",
     [[f"0 4 80 a{T}"], [f"30 2 80 d{T}"]], [f"a{T} 10.0.0.1", f"d{T} 1.1.1.4"]),
    ("headless: one target per endpoint, weight 1", HL, "a",
     [[f"0 1 80 web-0.a{T}", f"0 1 80 web-1.a{T}"], [f"20 1 80 10-62-0-1.c{T}",
                                                     f"20 1 80 fd00-0000-0000-0000-0000-0000-0062-0001.c{T}"]],
     [f"web-0.a{T} 10.60.0.1", f"web-1.a{T} 10.60.0.2", f"10-62-0-1.c{T} 10.62.0.1",
      f"fd00-0000-0000-0000-0000-0000-0062-0001.c{T} fd00::62:1"]),
]


@pytest.mark.parametrize(("shards", "asker", "tiers", "additional"), [row[1:] for row in SRVS],
                         ids=[row[0] for row in SRVS])
def test_srv_answer(shards: tuple[S, ...], asker: str | None, tiers: list[list[str]], additional: list[str]) -> None:
    parent = service(*shards)
    node = Node(NodeKind.SRV_NAME, FED, SERVICE, parent.shards, port_name="http", protocol="TCP")
    base = names.service_name(SERVICE) + answer.name_wire(ZONE)
    got, _, extra, _ = policy.srv_answer(node, asker, base, 30)
    assert srv_texts(got) == tiers
    assert owned(extra) == additional


# -- find_source ---------------------------------------------------------------------------


def ecs(address: str, prefix: int) -> bytes:
    packed = ipaddress.ip_address(address).packed
    return struct.pack("!HBB", 1 if len(packed) == 4 else 2, prefix, 0) + packed[: (prefix + 7) // 8]


SOURCES = [
    # (id, cluster option, ECS option, client address, (cluster, ECS scope echoed, by address))
    ("option names a cluster", b"b", None, "192.0.2.1", (b"b", None, False)),
    ("option in upper case", b"B", None, "192.0.2.1", (b"b", None, False)),
    ("option with spaces around", b" c ", None, "192.0.2.1", (b"c", None, False)),
    ("option names a cluster with no record but a shard", b"e", None, "192.0.2.1", (b"e", None, False)),
    ("option names an unknown cluster: the source address", b"zz", None, "10.240.1.1", (b"a", None, True)),
    ("no option: the source address in a cluster's cidrs", None, None, "10.240.1.1", (b"a", None, True)),
    ("longest prefix wins", None, None, "10.1.2.3", (b"d", None, True)),
    ("source address in no cidrs", None, None, "192.0.2.1", (None, None, True)),
    ("ECS inside cidrs: that cluster, scope its prefix", None, ecs("10.240.7.0", 24), "192.0.2.1",
     (b"a", 16, False)),
    ("ECS outside every cidrs: the source address", None, ecs("192.0.2.0", 24), "10.240.1.1", (b"a", 24, True)),
    ("option wins over ECS", b"b", ecs("10.240.7.0", 24), "192.0.2.1", (b"b", 0, False)),
]


@pytest.mark.parametrize(("cluster", "ecs_data", "client", "expected"), [row[1:] for row in SOURCES],
                         ids=[row[0] for row in SOURCES])
def test_find_source(cluster: bytes | None, ecs_data: bytes | None, client: str,
                     expected: tuple[bytes | None, int | None, bool]) -> None:
    query = wire.Query(0, b"", b"", 1, 1, edns=True, cluster_option=cluster, ecs=ecs_data)
    found, echoed, by_address = policy.find_source(FED, query, client)
    assert (found, None if echoed is None else echoed[3], by_address) == expected


def test_no_source_above_federations_and_without_cidrs() -> None:
    query = wire.Query(0, b"", b"", 1, 1, edns=True, cluster_option=b"a")
    assert policy.find_source(None, query, "10.240.1.1") == policy.NO_SOURCE
    plain = Federation("g")
    plain.clusters["a"] = ClusterRecord(zone="z1")
    plain._refresh("a")
    assert policy.find_source(plain, wire.Query(0, b"", b"", 1, 1), "10.240.1.1") == policy.NO_SOURCE
