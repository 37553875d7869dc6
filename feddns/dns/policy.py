"""The policy: which records answer a name, in which tiers, for which asker.

Source cluster (docs/reference.md section 3): the 0xFEDD EDNS0 option naming a
known cluster, else an EDNS Client Subnet (RFC 7871) inside a cluster's
``cidrs``, else the query's source address inside them. Tiers (section 2, the
design document's "Service Discovery/Lookup"): the asker's own shard
(clusterIPs), then shards in its zone, its region, then all others
(externalIPs). This module builds the records of each tier, packed
(``feddns.dns.answer``); the answer's ordering decides the order within a tier
per query.
"""

import struct
from enum import IntEnum

from feddns.dns import answer
from feddns.dns.answer import Tiers
from feddns.dns.index import Federation, Node, NodeKind, Shard, pack_client
from feddns.dns.wire import FormError, Query

Source = tuple[bytes | None, bytes | None, bool]
"""``(cluster, ecs, by_address)``: the asking cluster's name as bytes (``None``:
unknown, every shard is tier 3), the ECS option data to echo (RFC 7871 7.2.1; ``None`` when
the query had none), and whether the query's source address decided (then
another address may get another answer to the same bytes)."""

NO_SOURCE: Source = (None, None, False)


class Tier(IntEnum):
    """Where a shard stands for an asker (docs/reference.md section 2)."""

    OWN = 0
    SAME_ZONE = 1
    SAME_REGION = 2
    OTHER = 3


def find_source(fed: Federation | None, query: Query, client: str) -> Source:
    """Decide the source cluster of ``query`` for a name of federation ``fed``
    (``None`` above federations), asked from address ``client``.

    Raises :class:`FormError` for a malformed ECS option (RFC 7871 7.1.2).
    """
    ecs = query.ecs
    if fed is None:
        return NO_SOURCE if ecs is None else (None, _ecs_reply(parse_ecs(ecs), 0), False)
    named = query.cluster
    if named is not None:
        cluster = fed.known.get(named.strip().lower())
        if cluster is not None:
            return cluster, None if ecs is None else _ecs_reply(parse_ecs(ecs), 0), False
    if ecs is not None:
        subnet = parse_ecs(ecs)
        match = fed.cluster_for_address(subnet[0])
        if match is not None:
            return match[0], _ecs_reply(subnet, match[1]), False
        return _by_address(fed, client), _ecs_reply(subnet, subnet[1]), bool(fed.cidr_table)
    if not fed.cidr_table:
        return NO_SOURCE
    return _by_address(fed, client), None, True


def _by_address(fed: Federation, client: str) -> bytes | None:
    if not fed.cidr_table:
        return None
    packed = pack_client(client)
    match = fed.cluster_for_address(packed) if packed is not None else None
    return match[0] if match else None


def parse_ecs(data: bytes) -> tuple[bytes, int, bytes]:
    """``(address packed to full width, source prefix length, raw data)`` of an
    ECS option (RFC 7871 6).

    Raises :class:`FormError` for an unknown family, a prefix longer than
    the family allows, an address of the wrong length, or bits set beyond the
    prefix.
    """
    if len(data) < 4:
        raise FormError("ECS option is shorter than 4 bytes")
    family, source_prefix, _scope = struct.unpack_from("!HBB", data)
    width = {1: 4, 2: 16}.get(family)
    if width is None:
        raise FormError(f"ECS family {family} is not 1 (IPv4) or 2 (IPv6)")
    if source_prefix > width * 8:
        raise FormError(f"ECS source prefix /{source_prefix} is too long for the family")
    address = data[4:]
    if len(address) != (source_prefix + 7) // 8:
        raise FormError("ECS address length does not match its source prefix")
    padded = address.ljust(width, b"\0")
    if int.from_bytes(padded, "big") & ((1 << (width * 8 - source_prefix)) - 1):
        raise FormError("ECS address has bits set beyond its source prefix")
    return padded, source_prefix, data


def _ecs_reply(subnet: tuple[bytes, int, bytes], scope: int) -> bytes:
    raw = subnet[2]
    return raw[:3] + bytes((scope,)) + raw[4:]


def tier(fed: Federation, source: str | None, cluster: str) -> Tier:
    """The tier of ``cluster``'s shard for an asker in ``source``."""
    if source is None:
        return Tier.OTHER
    if cluster == source:
        return Tier.OWN
    mine, theirs = fed.clusters.get(source), fed.clusters.get(cluster)
    if mine is None or theirs is None:
        return Tier.OTHER
    if mine.zone and mine.zone == theirs.zone:
        return Tier.SAME_ZONE
    if mine.region and mine.region == theirs.region:
        return Tier.SAME_REGION
    return Tier.OTHER


def address_tiers(node: Node, source: str | None, versions: tuple[int, ...], ttl: int) -> Tiers:
    """A and AAAA records (owned by the qname) answering ``node`` for ``source``.

    A service name gives the healthy shards' addresses grouped by tier, lowest
    tier first, each tier in cluster-name order, IPv4 tiers before IPv6 ones. A
    shard name gives that shard's addresses, whatever its ready count.
    """
    assert node.shards is not None and node.federation is not None
    if node.kind == NodeKind.SHARD:
        assert node.cluster is not None
        shard = node.shards[node.cluster]
        own = node.cluster == source
        records = tuple(r for version in versions for r in _address_records(shard, own, version, ttl))
        return (records,) if records else ()
    out: list[tuple[bytes, ...]] = []
    for version in versions:
        groups: list[list[bytes]] = [[], [], [], []]
        for cluster in sorted(node.shards):
            shard = node.shards[cluster]
            if shard.healthy:
                rank = tier(node.federation, source, cluster)
                groups[rank].extend(_address_records(shard, rank == Tier.OWN, version, ttl))
        out.extend(tuple(group) for group in groups if group)
    return tuple(out)


def _address_records(shard: Shard, own: bool, version: int, ttl: int,
                     owner: bytes = answer.POINTER_TO_QNAME) -> list[bytes]:
    packed = shard.addresses(own, version)
    width = 4 if version == 4 else 16
    return [answer.address_rr(packed[i : i + width], ttl, owner) for i in range(0, len(packed), width)]


def srv_records(node: Node, source: str | None, zone: str, ttl: int) -> tuple[Tiers, list[bytes]]:
    """SRV records (RFC 2782) of the healthy, reachable shards with ``node``'s named
    port, by tier, and the additional A/AAAA records of their targets (each
    target ``<cluster>.<svc>.<ns>.<F>.svc.<zone>``, answered as for the asker).

    Priority is 10 x tier; weight the shard's ready count (1 when absent).
    """
    assert node.shards is not None and node.federation is not None and node.service is not None
    federation, namespace, service = node.service
    groups: list[list[bytes]] = [[], [], [], []]
    extra: list[list[bytes]] = [[], [], [], []]
    for cluster in sorted(node.shards):
        shard = node.shards[cluster]
        port = next((p for p in shard.ports if p.name == node.port_name and p.protocol == node.protocol), None)
        if port is None or not shard.healthy:
            continue
        rank = tier(node.federation, source, cluster)
        own = rank == Tier.OWN
        if not (shard.addresses(own, 4) or shard.addresses(own, 6)):
            continue
        weight = min(shard.ready if shard.ready is not None else 1, 65535)
        target = answer.subdomain(zone, f"{cluster}.{service}.{namespace}.{federation}.svc")
        groups[rank].append(answer.srv_rr(10 * rank, weight, port.port, target, ttl))
        owner = answer.name_wire(target)
        for version in (4, 6):
            extra[rank].extend(_address_records(shard, own, version, ttl, owner))
    tiers = tuple(tuple(group) for group in groups if group)
    return tiers, [record for group in extra for record in group]
