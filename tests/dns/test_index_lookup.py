"""A unit table for ``Index.lookup`` (docs/reference.md section 1): which names exist, and as
what, in a small index built from records; the names are given as the responder gives them
(wire form, lowercased, relative to the zone).

Federation f: service web in namespace ns with shards in a (ports http/TCP and dns/UDP) and
b (not ready), headless service hl with endpoints in a (by hostname, and one by address)
and c (an IPv6 endpoint); federation g has one service.
"""

import json

import pytest

from feddns.dns.index import NAMED_DEPTH, Index, Node, NodeKind, NotAName
from feddns.keys import Layout

RECORDS = {
    "/f/_clusters/a": {"zone": "z1", "region": "r1"},
    "/f/ns/web/a": {"clusterIP": "10.0.0.1", "ports": [{"name": "http", "protocol": "TCP", "port": 80},
                                                       {"name": "dns", "protocol": "UDP", "port": 53}]},
    "/f/ns/web/b": {"clusterIP": "10.0.0.2", "ready": 0, "ports": [{"name": "http", "protocol": "TCP", "port": 80}]},
    "/f/ns/hl/a": {"endpoints": [{"ip": "10.1.0.1", "hostname": "web-0"}, {"ip": "10.1.0.2"}],
                   "ports": [{"name": "http", "port": 8080}]},
    "/f/ns/hl/c": {"endpoints": [{"ip": "fd00::1"}], "ports": [{"name": "http", "port": 8080}]},
    "/g/other/api/c": {"externalIP": "1.2.3.4"},
}


@pytest.fixture(scope="module")
def index() -> Index:
    built = Index(Layout())
    for key, value in RECORDS.items():
        assert built.put(key, json.dumps(value).encode()) is not None, key
    assert not built.invalid
    return built


def rel(name: str) -> bytes:
    """``name`` (relative to the zone, dots between labels) in wire form without the root label."""
    return b"".join(bytes((len(label),)) + label.encode() for label in name.split(".") if label)


WEB, HL = ("f", "ns", "web"), ("f", "ns", "hl")
V6 = "fd00-0000-0000-0000-0000-0000-0000-0001"

FOUND = [
    # (name relative to the zone, kind, service, cluster, hostname, port name, protocol); None: does not exist
    ("", (NodeKind.APEX, None, None, None, None, None)),
    ("dns", (NodeKind.ENT, None, None, None, None, None)),
    ("ns.dns", (NodeKind.NS_HOST, None, None, None, None, None)),
    ("web.ns.f.svc", (NodeKind.SERVICE, WEB, None, None, None, None)),
    ("hl.ns.f.svc", (NodeKind.SERVICE, HL, None, None, None, None)),
    ("api.other.g.svc", (NodeKind.SERVICE, ("g", "other", "api"), None, None, None, None)),
    ("ns.f.svc", (NodeKind.ENT, None, None, None, None, None)),
    ("f.svc", (NodeKind.ENT, None, None, None, None, None)),
    ("svc", (NodeKind.ENT, None, None, None, None, None)),
    ("other.g.svc", (NodeKind.ENT, None, None, None, None, None)),
    ("a.web.ns.f.svc", (NodeKind.SHARD, WEB, "a", None, None, None)),
    ("b.web.ns.f.svc", (NodeKind.SHARD, WEB, "b", None, None, None)),  # not ready: the name still exists
    ("c.hl.ns.f.svc", (NodeKind.SHARD, HL, "c", None, None, None)),
    ("_tcp.web.ns.f.svc", (NodeKind.ENT, None, None, None, None, None)),
    ("_udp.web.ns.f.svc", (NodeKind.ENT, None, None, None, None, None)),
    ("_http._tcp.web.ns.f.svc", (NodeKind.SRV_NAME, WEB, None, None, "http", "TCP")),
    ("_dns._udp.web.ns.f.svc", (NodeKind.SRV_NAME, WEB, None, None, "dns", "UDP")),
    ("_http._tcp.hl.ns.f.svc", (NodeKind.SRV_NAME, HL, None, None, "http", "TCP")),  # protocol TCP by default
    ("web-0.a.hl.ns.f.svc", (NodeKind.ENDPOINT, HL, "a", "web-0", None, None)),
    ("10-1-0-2.a.hl.ns.f.svc", (NodeKind.ENDPOINT, HL, "a", "10-1-0-2", None, None)),
    (f"{V6}.c.hl.ns.f.svc", (NodeKind.ENDPOINT, HL, "c", V6, None, None)),
    # names that do not exist
    ("www", None),
    ("x.dns", None),
    ("x.ns.dns", None),
    ("nosuch.svc", None),
    ("nosuch.ns.f.svc", None),
    ("web.nosuch.f.svc", None),
    ("web.ns.g.svc", None),
    ("web.ns.f", None),
    ("x.y.ns.f.svc", None),
    ("c.web.ns.f.svc", None),  # c has a shard in g only
    ("x.a.web.ns.f.svc", None),
    ("web-0.a.web.ns.f.svc", None),  # not headless: no endpoint names
    ("x.web-0.a.hl.ns.f.svc", None),
    ("web-0.c.hl.ns.f.svc", None),
    ("web-9.a.hl.ns.f.svc", None),
    ("10-1-0-1.a.hl.ns.f.svc", None),  # an endpoint with a hostname is not named by its address
    ("_sctp.web.ns.f.svc", None),
    ("_http._udp.web.ns.f.svc", None),
    ("_dns._tcp.web.ns.f.svc", None),
    ("_grpc._tcp.web.ns.f.svc", None),
    ("http._tcp.web.ns.f.svc", None),
    ("_http.tcp.web.ns.f.svc", None),
    ("x._http._tcp.web.ns.f.svc", None),
    # wildcards are names like any other: none exists
    ("*", None),
    ("*.svc", None),
    ("*.ns.f.svc", None),
    ("*.web.ns.f.svc", None),
    ("*.a.hl.ns.f.svc", None),
    ("*._tcp.web.ns.f.svc", None),
    ("_http.*.web.ns.f.svc", None),
    # the responder lowercases names before the lookup; the index holds lowercase names only
    ("WEB.ns.f.svc", None),
    ("A.web.ns.f.svc", None),
]


def view(node: Node | None) -> tuple[object, ...] | None:
    if node is None:
        return None
    return (node.kind, node.service, node.cluster, node.hostname, node.port_name, node.protocol)


@pytest.mark.parametrize(("name", "expected"), FOUND, ids=[name or "(apex)" for name, _ in FOUND])
def test_lookup(index: Index, name: str, expected: tuple[object, ...] | None) -> None:
    assert view(index.lookup(rel(name))) == expected


def test_every_name_of_at_most_named_depth_labels_is_held_by_name(index: Index) -> None:
    """The rule the cache's parent envelopes rest on (``Index.children_are_named``): a name
    of at most NAMED_DEPTH labels exists exactly when it is a key of ``Index.names``; the
    names below a service (shards, ``_<proto>``, SRV and endpoint names) are deeper."""
    found = [rel(name) for name, expected in FOUND if expected is not None] + [
        rel("_http._tcp.web.ns.f.svc"), rel("web-0.a.hl.ns.f.svc"), rel("_tcp.web.ns.f.svc"), rel("_whoami.f.svc")]
    for name in found:
        assert index.lookup(name) is not None
        assert (name in index.names) == (_depth(name) <= NAMED_DEPTH), name
    assert all(_depth(name) <= NAMED_DEPTH for name in index.names)
    assert index.children_are_named(rel("ns.f.svc")) and index.children_are_named(rel(""))
    assert not index.children_are_named(rel("web.ns.f.svc")) and not index.children_are_named(rel("a.web.ns.f.svc"))


def _depth(name: bytes) -> int:
    depth = pos = 0
    while pos < len(name):
        depth, pos = depth + 1, pos + name[pos] + 1
    return depth


MALFORMED = [
    ("label runs past the end", b"\x05ab"),
    ("label over 63 bytes", b"\x40" + b"a" * 64),
    ("label length past the end", b"\x02a"),
    ("compression pointer", b"\x01a\xc0\x0c"),
    ("empty label inside", b"\x01a\x00\x03svc"),
    ("a second label past the end", b"\x01x\x05_htt"),
]


@pytest.mark.parametrize("name", [row[1] for row in MALFORMED], ids=[row[0] for row in MALFORMED])
def test_lookup_of_bytes_that_are_not_a_name(index: Index, name: bytes) -> None:
    with pytest.raises(NotAName):
        index.lookup(name)


def test_shard_nodes_see_the_service_as_it_changes(index: Index) -> None:
    """A shard's node carries the service's shards; a name goes when its record goes."""
    fresh = Index(Layout())
    for key, value in RECORDS.items():
        fresh.put(key, json.dumps(value).encode())
    shard = fresh.lookup(rel("b.web.ns.f.svc"))
    assert shard is not None and shard.shards is not None and set(shard.shards) == {"a", "b"}
    fresh.delete("/f/ns/web/b")
    assert fresh.lookup(rel("b.web.ns.f.svc")) is None
    assert view(fresh.lookup(rel("a.web.ns.f.svc"))) == (NodeKind.SHARD, WEB, "a", None, None, None)
    fresh.delete("/f/ns/web/a")
    assert fresh.lookup(rel("web.ns.f.svc")) is None and fresh.lookup(rel("_tcp.web.ns.f.svc")) is None
    assert view(fresh.lookup(rel("ns.f.svc"))) == (NodeKind.ENT, None, None, None, None, None)  # hl is still there
