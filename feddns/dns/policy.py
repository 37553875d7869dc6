"""The policy: which records answer a name, in which order, for which asker.

Source cluster (CONTRACTS 3): the 0xFEDD EDNS0 option, else an EDNS Client
Subnet (RFC 7871) inside a cluster's ``cidrs``, else the query's source
address. Tiers (CONTRACTS 2, the design document's "Service
Discovery/Lookup"): the asker's own shard (clusterIPs), then shards in its
zone, its region, then all others (externalIPs). Within a tier the order
rotates from query to query: this module returns every rotation, the
answer cache cycles through them.
"""

import ipaddress
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from feddns.dns import wire
from feddns.dns.index import Federation, ServiceId
from feddns.records import IPAddress, ShardRecord

T = TypeVar("T")

OWN, SAME_ZONE, SAME_REGION, OTHER = 0, 1, 2, 3
MAX_ROTATIONS = 64
"""At most this many distinct orders are kept per answer (bytes cached per answer)."""


@dataclass(frozen=True, slots=True)
class Source:
    """The asking cluster (``None``: unknown, every shard is tier 3).

    ``by_address`` is True when the query's source address was consulted, so
    the answer may differ for another address; ``ecs`` is the ECS option data
    to echo (RFC 7871 7.2.1), ``None`` when the query had none.
    """

    cluster: str | None
    by_address: bool = False
    ecs: bytes | None = None


NO_SOURCE = Source(None)


def find_source(
    fed: Federation, edns: wire.Edns | None, client: IPAddress | None, option_code: int
) -> Source:
    """Decide the source cluster of a query in federation ``fed`` (CONTRACTS 3).

    Raises :class:`wire.FormError` for a malformed ECS option (RFC 7871 7.1.2).
    """
    ecs = edns.option(wire.OPTION_ECS) if edns else None
    subnet = parse_ecs(ecs) if ecs is not None else None
    named = edns.option(option_code) if edns else None
    if named is not None:
        name = named.decode("ascii", "replace").strip().lower()
        if fed.is_known(name):
            return Source(name, ecs=_ecs_reply(subnet, 0))
    if subnet is not None:
        match = fed.cluster_for_address(subnet[0])
        if match is not None:
            return Source(match[0], ecs=_ecs_reply(subnet, match[1]))
    match = fed.cluster_for_address(client) if client is not None else None
    by_address = bool(fed.cidr_table) and client is not None
    scope = subnet[1] if subnet is not None else 0
    return Source(match[0] if match else None, by_address, _ecs_reply(subnet, scope))


def parse_ecs(data: bytes) -> tuple[IPAddress, int, bytes]:
    """``(address, source prefix length, raw data)`` of an ECS option (RFC 7871 6).

    Raises :class:`wire.FormError` for an unknown family, a prefix longer than
    the family allows, an address of the wrong length, or bits set beyond the
    prefix.
    """
    if len(data) < 4:
        raise wire.FormError("ECS option is shorter than 4 bytes")
    family, source_prefix, _scope = struct.unpack_from("!HBB", data)
    width = {1: 4, 2: 16}.get(family)
    if width is None:
        raise wire.FormError(f"ECS family {family} is not 1 (IPv4) or 2 (IPv6)")
    if source_prefix > width * 8:
        raise wire.FormError(f"ECS source prefix /{source_prefix} is too long for the family")
    address = data[4:]
    if len(address) != (source_prefix + 7) // 8:
        raise wire.FormError("ECS address length does not match its source prefix")
    padded = int.from_bytes(address.ljust(width, b"\0"), "big")
    if padded & ((1 << (width * 8 - source_prefix)) - 1):
        raise wire.FormError("ECS address has bits set beyond its source prefix")
    ip = ipaddress.ip_address(address.ljust(width, b"\0"))
    return ip, source_prefix, data


def _ecs_reply(subnet: tuple[IPAddress, int, bytes] | None, scope: int) -> bytes | None:
    if subnet is None:
        return None
    raw = subnet[2]
    return raw[:3] + bytes((scope,)) + raw[4:]


def tier(fed: Federation, source: str | None, cluster: str) -> int:
    """The tier of ``cluster``'s shard for an asker in ``source`` (CONTRACTS 2)."""
    if source is None:
        return OTHER
    if cluster == source:
        return OWN
    mine, theirs = fed.clusters.get(source), fed.clusters.get(cluster)
    if mine is None or theirs is None:
        return OTHER
    if mine.zone and mine.zone == theirs.zone:
        return SAME_ZONE
    if mine.region and mine.region == theirs.region:
        return SAME_REGION
    return OTHER


def shard_addresses(record: ShardRecord, own: bool, version: int) -> list[IPAddress]:
    """The addresses an asker reaches a shard by: its clusterIPs from its own
    cluster, else its externalIPs; only those of IP ``version`` (4 or 6)."""
    pool = record.cluster_ips if own else record.external_ips
    return [ip for ip in pool if ip.version == version]


def address_tiers(
    fed: Federation, shards: dict[str, ShardRecord], source: str | None, version: int
) -> list[list[IPAddress]]:
    """The addresses of the healthy shards, grouped by tier, lowest tier first.

    Within a tier, shards come in cluster-name order (the rotation starts there).
    """
    groups: list[list[IPAddress]] = [[], [], [], []]
    for cluster in sorted(shards):
        record = shards[cluster]
        if record.healthy:
            rank = tier(fed, source, cluster)
            groups[rank].extend(shard_addresses(record, rank == OWN, version))
    return [group for group in groups if group]


@dataclass(frozen=True, slots=True)
class SrvTarget:
    """One SRV record (RFC 2782): the shard in ``cluster`` at ``port``."""

    priority: int
    weight: int
    port: int
    cluster: str


def srv_tiers(
    fed: Federation, shards: dict[str, ShardRecord], source: str | None, name: str, protocol: str
) -> list[list[SrvTarget]]:
    """SRV targets of the healthy, reachable shards with the named port, by tier.

    Priority is 10 x tier; weight the shard's ready count (1 when absent).
    """
    groups: list[list[SrvTarget]] = [[], [], [], []]
    for cluster in sorted(shards):
        record = shards[cluster]
        port = next((p for p in record.ports if p.name == name and p.protocol == protocol), None)
        if port is None or not record.healthy:
            continue
        rank = tier(fed, source, cluster)
        if not (record.cluster_ips if rank == OWN else record.external_ips):
            continue
        weight = record.ready if record.ready is not None else 1
        groups[rank].append(SrvTarget(10 * rank, min(weight, 65535), port.port, cluster))
    return [group for group in groups if group]


def rotations(groups: Sequence[Sequence[T]], stable: bool = False) -> list[list[T]]:
    """Every order the answer takes, each group rotated one step per query.

    With groups of sizes n1..nk there are lcm(n1..nk) orders (capped at
    :data:`MAX_ROTATIONS`; past that, the largest group rotates fully and
    the others as far as the count allows). ``stable`` gives one order.
    """
    sizes = [len(g) for g in groups if g]
    count = math.lcm(*sizes) if sizes else 1
    if count > MAX_ROTATIONS:
        count = min(max(sizes), MAX_ROTATIONS)
    if stable:
        count = 1
    out = []
    for step in range(count):
        order: list[T] = []
        for group in groups:
            shift = step % len(group) if group else 0
            order.extend(group[shift:])
            order.extend(group[:shift])
        out.append(order)
    return out


def service_name(sid: ServiceId, zone: str) -> str:
    """``<svc>.<ns>.F.svc.Z`` for service ``sid`` in ``zone`` (ends with a dot)."""
    federation, namespace, service = sid
    return f"{service}.{namespace}.{federation}.svc.{zone}"
