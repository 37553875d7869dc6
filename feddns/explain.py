"""``feddns explain NAME --from CLUSTER``: the answer serve gives a cluster, and why (docs/reference.md section 6).

The records are read once (``feddns.snapshot``: etcd, a records file or the example), the
name looked up in the index serve answers from, and the answer made by the function serve's
answer is made from (:func:`feddns.dns.policy.address_groups`), which also says why each
shard is where it is or is left out: the rules of docs/reference.md section 2 live there
alone. Each record is shown with its cluster, its address and which one it is (``clusterIP``
from the asker's own cluster, else ``externalIP``; ``endpoint`` for a headless shard), its
tier and why. The order is serve's with ``--order stable``; serve rotates within each group
per query (``--order rotate``), and the weighted policies draw by weight per answer.

Exit status: 0 answered (NOERROR, with or without records), 1 NXDOMAIN, 2 bad input (a
name outside the zone, not a service's or shard's name, an unknown cluster, a bad flag), 3
etcd unreachable. Each failure is one line on stderr.
"""

import argparse
import ipaddress
import json
import sys
from typing import Any, NamedTuple

from feddns import logs, snapshot
from feddns.dns import answer, policy
from feddns.dns.index import Index, Node, NodeKind, NotAName, Shard
from feddns.errors import ConfigError
from feddns.records import NoneReady, PolicyName

EXIT_NXDOMAIN = 1
EXIT_ETCD = 3
_WIDTHS = {4: 4, 6: 16}
_VERSIONS = {"A": (4,), "AAAA": (6,), "ANY": (4, 6)}


class Record(NamedTuple):
    """One shard of the answer, kept or left out: ``group``, its place in the order (from 1:
    serve rotates or draws the records of one group among themselves; ``None`` when left
    out), ``address`` (``None`` when left out), ``kind`` (``clusterIP``, ``externalIP``,
    ``endpoint``), ``tier`` (:data:`policy.TIER_LABELS`; ``-`` for a stale shard dropped),
    ``why`` it is there or left out."""

    group: int | None
    cluster: str
    address: str | None
    kind: str | None
    tier: str
    why: str


class Explanation(NamedTuple):
    """What ``feddns explain`` prints: the name, the asker, the policy (and ``policy_why`` when
    it is not what the shards name: they disagree), how the order is decided per query, the
    records in answer order and the shards left out; ``ttl`` the answer's TTL in seconds when the
    shards' records set one (the annotation ``federation.feddns.io/ttl``), ``None`` for serve's ``--ttl``."""

    name: str
    asker: str | None
    policy: str
    policy_why: str
    order: str
    records: list[Record]
    left_out: list[Record]
    ttl: int | None = None


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``feddns explain`` flags."""
    add = parser.add_argument
    add("name", metavar="NAME", help="a service's name, <svc>.<ns>.<federation>.svc.<zone>, or a shard's, C.<svc>...")
    add("--from", dest="asker", metavar="CLUSTER",
        help="the asking cluster (docs/reference.md section 3); omitted: an external client, every shard tier 3")
    add("--qtype", choices=tuple(_VERSIONS), default="A", help="A (default), AAAA or ANY")
    add("--zone", default="federation.", help="the zone serve answers (default federation.)")
    add("--none-ready", choices=tuple(NoneReady), default=NoneReady.ANSWER.value,
        help="serve's --none-ready: what a service none of whose shards is ready answers (default answer)")
    snapshot.add_arguments(parser, files=True)


def run(args: argparse.Namespace) -> int:
    """Explain the answer; returns the exit status (module docstring)."""
    source = snapshot.source_from(args, files=True)
    zone = _zone(args.zone)
    try:
        index = snapshot.load_index(source, args.timeout)
    except snapshot.EtcdUnreachable as exc:
        print(logs.error_line("feddns explain", str(exc), args.log_format), file=sys.stderr)
        return EXIT_ETCD
    node = _node(index, args.name, zone)
    if node is None:
        print(f"{args.name}: NXDOMAIN: no such name in the zone (no service or shard of that name)", file=sys.stderr)
        return EXIT_NXDOMAIN
    found = explain(node, args.name, _asker(node, args.asker), _VERSIONS[args.qtype], NoneReady(args.none_ready))
    print(json.dumps(found._asdict() | {"records": [r._asdict() for r in found.records],
                                         "left_out": [r._asdict() for r in found.left_out]}, indent=2)
          if args.output == "json" else render(found))
    return 0


def _zone(text: str) -> bytes:
    try:
        return answer.name_wire(text.lower().rstrip(".") + ".")
    except Exception as exc:  # dnslib's errors for a bad name, of several kinds
        raise ConfigError(f"--zone {text!r} is not a domain name: {exc}") from exc


def _node(index: Index, name: str, zone: bytes) -> Node | None:
    """The node of ``name`` (``None``: NXDOMAIN); raises :class:`ConfigError` for a name outside
    ``zone`` or one that is not a service's or a shard's."""
    try:
        wire = answer.name_wire(name.lower().rstrip(".") + ".")
    except Exception as exc:  # dnslib's errors for a bad name, of several kinds
        raise ConfigError(f"{name!r} is not a domain name: {exc}") from exc
    if not wire.endswith(zone) or wire == zone:
        raise ConfigError(f"{name} is outside the zone {name_text(zone)} (--zone)")
    try:
        node = index.lookup(wire[: -len(zone)])
    except NotAName as exc:
        raise ConfigError(f"{name!r} is not a domain name") from exc
    if node is not None and node.kind not in (NodeKind.SERVICE, NodeKind.SHARD):
        raise ConfigError(f"{name} is not a service's name (<svc>.<ns>.<federation>.svc.<zone>) or a shard's")
    return node


def name_text(wire: bytes) -> str:
    """A name in wire form as text, ending with a dot."""
    labels, at = [], 0
    while wire[at]:
        labels.append(wire[at + 1 : at + 1 + wire[at]].decode())
        at += 1 + wire[at]
    return ".".join(labels) + "."


def _asker(node: Node, asker: str | None) -> str | None:
    """``--from``, checked: a cluster the federation knows (a record or a shard)."""
    if asker is None:
        return None
    assert node.federation is not None
    fed = node.federation
    if not fed.is_known(asker.lower()):
        known = ", ".join(sorted(name.decode() for name in fed.known)) or "none"
        raise ConfigError(f"--from {asker}: no such cluster in federation {fed.name} (known: {known})")
    return asker.lower()


def explain(node: Node, name: str, asker: str | None, versions: tuple[int, ...],
            none_ready: NoneReady = NoneReady.ANSWER) -> Explanation:
    """The answer to ``name`` (its ``node``, a service's or a shard's) for cluster ``asker``,
    record by record, with why each shard is there or left out (docs/reference.md section 2);
    ``none_ready`` is serve's ``--none-ready``. When no shard is ready and the service fails
    open, ``policy_why`` says so."""
    assert node.shards is not None and node.federation is not None
    fed = node.federation
    if node.kind == NodeKind.SHARD:
        assert node.cluster is not None
        shard = node.shards[node.cluster]
        why = "a shard's name: its addresses whatever its ready count, weight or policy"
        own = node.cluster == asker
        blocks = [(version, policy.shard_addresses(fed, node.cluster, shard, own, version)) for version in versions]
        records = [record for version, block in blocks
                   for record in _record(1, fed, asker, node.cluster, shard, version, block, why)]
        return Explanation(name, asker, "-", "", "fixed", records, [], _ttl(node.shards))
    reasons: dict[str, str] = {}
    chosen, groups = policy.address_groups(node, asker, versions, reasons, none_ready)
    places = [group for group in groups if group[1]]
    records = [record for place, (version, group) in enumerate(places, 1) for cluster, block in group
               for record in _record(place, fed, asker, cluster, node.shards[cluster], version, block,
                                     reasons[cluster])]
    kept = {record.cluster for record in records}
    left = [Record(None, c, None, None, _tier(fed, asker, c), reasons[c]) for c in sorted(node.shards)
            if c not in kept]
    named = {(shard.policy.name, shard.policy.failover_order) for shard in node.shards.values()}
    why = "" if len(named) == 1 else "the shards disagree on policy, so the default applies (reference section 2)"
    if policy.fails_open(node.shards, none_ready):
        why = "; ".join(filter(None, (why, "no shard is ready: every shard is answered as if it were (fail open, "
                                            "reference section 2)")))
    elif not any(shard.healthy for shard in node.shards.values()):
        why = "; ".join(filter(None, (why, "no shard is ready: NODATA (none-ready: nodata)")))
    return Explanation(name, asker, chosen.name, why, _order(PolicyName(chosen.name)), records, left,
                       _ttl(node.shards))


def _ttl(shards: dict[str, Shard]) -> int | None:
    """The TTL the shards' records set (:func:`policy.service_ttl`), ``None`` when none does."""
    ttl = policy.service_ttl(shards, -1)
    return None if ttl < 0 else ttl


def _record(place: int, fed: Any, asker: str | None, cluster: str, shard: Shard, version: int,  # noqa: PLR0913, PLR0917
            block: bytes, why: str) -> list[Record]:
    """The records of ``cluster``'s shard, in group ``place``: one per address of ``block``
    (packed, IP ``version``)."""
    own = cluster == asker
    kind = "endpoint" if shard.endpoints is not None else "clusterIP" if own else "externalIP"
    width, tier = _WIDTHS[version], _tier(fed, asker, cluster)
    return [Record(place, cluster, str(ipaddress.ip_address(block[at : at + width])), kind, tier, why)
            for at in range(0, len(block), width)]


def _tier(fed: Any, asker: str | None, cluster: str) -> str:
    rank = policy.tier(fed, asker, cluster)
    return "-" if rank is None else policy.TIER_LABELS[rank]


def _order(chosen: PolicyName) -> str:
    if chosen is PolicyName.FAILOVER:
        return "fixed: the same for every asker"
    if chosen is PolicyName.WEIGHTED:
        return "drawn by weight per answer"
    if chosen is PolicyName.LOCALITY_WEIGHTED:
        return "by tier; drawn by weight within each tier per answer"
    return "by tier; rotated within each tier per query (fixed with --order stable)"


def render(found: Explanation) -> str:
    """The text of ``found``: two head lines, then one line per record and per shard left out,
    each column as wide as its longest value."""
    asker = found.asker or "no cluster (an external client)"
    policy = f"{found.policy} ({found.policy_why})" if found.policy_why else found.policy
    lines = [f"{found.name} asked from {asker}", f"policy {policy}; order {found.order}"]
    if found.ttl is not None:
        lines.append(f"TTL {found.ttl} s: the least federation.feddns.io/ttl of the shards' records (serve's "
                     "--ttl otherwise)")
    if not found.records:
        lines.append("NOERROR with no records (NODATA)")
    rows = [("#", "group", "cluster", "address", "kind", "tier", "why")]
    rows += [(str(number), str(r.group), r.cluster, r.address or "-", r.kind or "-", r.tier, r.why)
             for number, r in enumerate(found.records, 1)]
    rows += [("-", "-", r.cluster, "-", "-", r.tier, r.why) for r in found.left_out]
    widths = [max(len(row[column]) for row in rows) for column in range(6)]
    lines += ["  ".join([cell.ljust(width) for cell, width in zip(row, widths, strict=False)] + [row[6]])
              for row in rows]
    return "\n".join(lines)
