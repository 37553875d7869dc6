"""The policy: which records answer a name, in which tiers, for which asker.

Source cluster (docs/reference.md section 3): the 0xFEDD EDNS0 option naming a
known cluster, else an EDNS Client Subnet (RFC 7871) inside a cluster's
``cidrs``, else the query's source address inside them.

Order (section 2): the service's policy, carried in its shard records, groups
the healthy shards (:func:`ranked`). ``locality`` (the design document's
"Service Discovery/Lookup"): the asker's own shard, then shards in its zone,
its region, then all others, rotated within each tier per query;
``failover``: the listed clusters in list order, the same for every asker;
``weighted``: one group drawn at random by weight per query
(``feddns.dns.weights``); ``locality-weighted``: the tiers, drawn by weight
within each. Each shard is reached by its clusterIPs from its own cluster,
else by its externalIPs; a headless shard by its endpoints, from its own
cluster or from anywhere when its cluster's pods are routable. This module
packs the records of each group once (``feddns.dns.answer``); the answer's
ordering decides the order per query.
"""

import struct
from enum import IntEnum, StrEnum

from feddns import names
from feddns.dns import answer
from feddns.dns.answer import Tiers
from feddns.dns.index import IPV4, Federation, Node, NodeKind, Shard, pack_client
from feddns.dns.weights import Draw
from feddns.dns.wire import IPV4_BYTES, IPV6_BYTES, MAX_NAME_BYTES, FormError, Query
from feddns.records import DEFAULT_POLICY, NoneReady, Policy, PolicyName, StaleAction

Source = tuple[bytes | None, bytes | None, bool]
"""``(cluster, ecs, by_address)``: the asking cluster's name as bytes (``None``:
unknown, every shard is tier 3), the ECS option data to echo (RFC 7871 7.2.1; ``None`` when
the query had none), and whether the query's source address decided (then
another address may get another answer to the same bytes)."""

NO_SOURCE: Source = (None, None, False)

_ECS_FIXED_BYTES = 4  # FAMILY, SOURCE PREFIX-LENGTH, SCOPE PREFIX-LENGTH (RFC 7871 6)


_WEIGHTED_POLICIES = (PolicyName.WEIGHTED, PolicyName.LOCALITY_WEIGHTED)


class Tier(IntEnum):
    """Where a shard stands for an asker (docs/reference.md section 2)."""

    OWN = 0
    SAME_ZONE = 1
    SAME_REGION = 2
    OTHER = 3


TIER_LABELS = ("own", "zone", "region", "other")
"""The name of each :class:`Tier` in ``feddns explain`` and in the metrics' ``tier`` label
(``none`` there: an answer with no record; docs/reference.md section 6)."""


def find_source(fed: Federation | None, query: Query, client: str) -> Source:
    """Decide the source cluster of ``query`` for a name of federation ``fed``
    (``None`` above federations), asked from address ``client``.

    Raises :class:`FormError` for a malformed ECS option (RFC 7871 7.1.2).
    """
    ecs = query.ecs
    if fed is None:
        return NO_SOURCE if ecs is None else (None, _ecs_reply(parse_ecs(ecs), 0), False)
    named = query.cluster_option
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

    Raises :class:`FormError` for an unknown family, a SCOPE PREFIX-LENGTH
    other than 0 (a query's must be 0, RFC 7871 6; BIND answers FORMERR too), a
    prefix longer than the family allows, an address of the wrong length, or
    bits set beyond the prefix (RFC 7871 6).
    """
    if len(data) < _ECS_FIXED_BYTES:
        raise FormError("ECS option is shorter than 4 bytes")
    family, source_prefix, scope = struct.unpack_from("!HBB", data)
    width = {1: IPV4_BYTES, 2: IPV6_BYTES}.get(family)
    if width is None:
        raise FormError(f"ECS family {family} is not 1 (IPv4) or 2 (IPv6)")
    if scope:
        raise FormError(f"ECS scope prefix /{scope} in a query: it must be 0")
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


class IdentifiedBy(StrEnum):
    """Which rule of docs/reference.md section 3 decided the source cluster (``none``: no rule did)."""

    OPTION = "option"
    ECS = "ecs"
    SOURCE = "source"
    NONE = "none"


def identified_by(fed: Federation, query: Query, cluster: bytes | None) -> IdentifiedBy:
    """Which rule made ``cluster`` the source cluster that :func:`find_source` found for
    ``query`` (a name of ``fed``). Read again after the fact, so that the query path of
    every other name pays nothing for it. Raises :class:`FormError` as
    :func:`find_source` does (it has checked the ECS option already)."""
    if cluster is None:
        return IdentifiedBy.NONE
    named = query.cluster_option
    if named is not None and fed.known.get(named.strip().lower()) is not None:
        return IdentifiedBy.OPTION
    if query.ecs is not None and fed.cluster_for_address(parse_ecs(query.ecs)[0]) is not None:
        return IdentifiedBy.ECS
    return IdentifiedBy.SOURCE


def whoami_strings(fed: Federation, query: Query, cluster: bytes | None) -> list[str]:
    """The strings of the TXT record at ``_whoami.<F>.svc.<zone>`` (docs/reference.md
    section 1): ``cluster=C`` (empty when none), ``by=`` the rule that found it
    (:func:`identified_by`), and C's ``zone=`` and ``region=`` from its cluster record
    (empty when it has none)."""
    name = "" if cluster is None else cluster.decode()
    record = fed.clusters.get(name)
    zone = "" if record is None or record.zone is None else record.zone
    region = "" if record is None or record.region is None else record.region
    return [f"cluster={name}", f"by={identified_by(fed, query, cluster)}", f"zone={zone}", f"region={region}"]


def tier(fed: Federation, asker: str | None, cluster: str) -> Tier | None:
    """The tier of ``cluster``'s shard for cluster ``asker``; ``None`` when it is left out.

    A shard of a stale cluster (its record says ``"stale": true``: the controller has
    not reached it for its ``staleAfterSeconds``) is in the last tier, or left out
    with ``"staleAction": "drop"``, for every asker but the cluster itself, whose own
    query shows that it is up (docs/reference.md section 2).
    """
    if cluster == asker:
        return Tier.OWN
    stale = _stale(fed, asker, cluster)
    if stale is not None:
        return None if stale is StaleAction.DROP else Tier.OTHER
    mine = None if asker is None else fed.clusters.get(asker)
    theirs = fed.clusters.get(cluster)
    if mine is None or theirs is None:  # an unknown asker, or either cluster without a record
        return Tier.OTHER
    if mine.zone and mine.zone == theirs.zone:
        return Tier.SAME_ZONE
    if mine.region and mine.region == theirs.region:
        return Tier.SAME_REGION
    return Tier.OTHER


def _stale(fed: Federation, asker: str | None, cluster: str) -> StaleAction | None:
    """What to do with ``cluster``'s shard when its record says it is stale and the
    asker is elsewhere (docs/reference.md section 2), else ``None``."""
    record = fed.clusters.get(cluster)
    if cluster == asker or record is None or not record.stale:
        return None
    return StaleAction(record.stale_action)


MAX_ANSWER_BYTES = 65000
"""Records an answer holds at most (bytes): a DNS message over TCP is at most 65,535
bytes (RFC 1035 4.2.2), less the header, the question and the OPT record. Past
this, the additional section goes first, then the records of the last tiers."""

WeighedRecords = tuple[list[bytes], int]
"""One shard's records (or one SRV record) and its weight, before a weighted draw
joins them (``feddns.dns.weights.Unit``)."""

Group = tuple[int, list[str]]
"""``(SRV priority, cluster names)``: clusters that share a place in the order."""

Arranged = tuple[Tiers, "answer.Ordering | None", list[bytes], "Tier | None"]
"""What an answer is built from: the answer records by tier, the ordering the
policy imposes (``None``: the server's, rotation or ``--order stable``), the
additional records, and the tier of the first group of records (``None``: no
record, or a name that is not a service's; the locality matrix of the metrics,
:func:`nearest`)."""


def service_policy(shards: dict[str, Shard]) -> Policy:
    """The policy of a service: the one every shard's record names (same policy,
    same failover order), else the default (docs/reference.md section 2)."""
    shards_iter = iter(shards.values())
    first = next(shards_iter).policy
    for shard in shards_iter:
        other = shard.policy
        if other is not first and (other.name != first.name or other.failover_order != first.failover_order):
            return DEFAULT_POLICY
    return first


def service_none_ready(shards: dict[str, Shard], default: NoneReady) -> NoneReady:
    """What a service answers when none of its shards is ready: the ``noneReady`` every
    shard's record names (the annotation ``federation.feddns.io/none-ready``), else
    ``default`` (``feddns serve --none-ready``; docs/reference.md section 2)."""
    values = {shard.policy.none_ready for shard in shards.values()}
    chosen = values.pop() if len(values) == 1 else None
    return default if chosen is None else chosen


def service_ttl(shards: dict[str, Shard] | None, default: int) -> int:
    """The TTL of a service's answers, in seconds: the least ``ttl`` its shards' records name (the
    annotation ``federation.feddns.io/ttl``; the least, so that a shorter one rolled out to some
    clusters first already holds), else ``default`` (``feddns serve --ttl``; docs/reference.md
    section 2)."""
    if not shards:
        return default
    given = [shard.policy.ttl for shard in shards.values() if shard.policy.ttl is not None]
    return min(given) if given else default


def fails_open(shards: dict[str, Shard], default: NoneReady) -> bool:
    """True when no shard of the service is ready and it answers every shard as if it were
    (fail open, as health-checked DNS does): its :func:`service_none_ready` is ``answer``.
    Counted in ``feddns_dns_answers_none_ready_total`` (docs/reference.md section 2)."""
    if not shards or any(shard.healthy for shard in shards.values()):
        return False
    return service_none_ready(shards, default) is NoneReady.ANSWER


def ranked(node: Node, asker: str | None, why: dict[str, str] | None = None,
           none_ready: NoneReady = NoneReady.ANSWER) -> tuple[Policy, list[Group]]:
    """The service's policy and its healthy shards for cluster ``asker``, in the groups the policy
    orders them by, best first, each group's clusters in name order.

    ``locality`` and ``locality-weighted``: the four tiers (priority 10 x tier);
    ``failover``: each listed cluster alone, in list order, then the unlisted
    ones together (priority 10 x place); ``weighted``: one group (priority 0).
    Weighted policies leave out shards of weight 0. The shards of stale clusters
    come last (in tier 3, or a group of their own after the others), or are left
    out with ``staleAction: drop``, unless the asker is in that cluster.

    ``why``, when given, is filled with one line per shard (cluster name to text)
    saying why it is in its group or left out: ``feddns explain`` shows them, so
    that the rules stay here alone (docs/reference.md section 2).

    When no shard is ready, every shard is ranked as if it were, unless the service's
    :func:`service_none_ready` (``none_ready`` when its records name none) is ``nodata``.
    """
    assert node.shards is not None
    open_ = fails_open(node.shards, none_ready)
    chosen, groups = _ranked(node, asker, why, open_)
    if why is not None and open_:
        for cluster in why:
            if not node.shards[cluster].healthy and not why[cluster].startswith("left out"):
                why[cluster] += "; ready: 0, answered as if ready: no shard of the service is ready (fail open)"
    return chosen, groups


def _ranked(node: Node, asker: str | None, why: dict[str, str] | None, open_: bool) -> tuple[Policy, list[Group]]:
    """:func:`ranked`'s groups; ``open_``: every shard counts as ready (none is)."""
    assert node.shards is not None and node.federation is not None
    fed = node.federation
    shards = node.shards
    chosen = service_policy(shards)
    name = PolicyName(chosen.name)
    weighted = name in _WEIGHTED_POLICIES
    healthy = [c for c in sorted(shards) if (open_ or shards[c].healthy) and not (weighted and shards[c].weight == 0)
               and _stale(fed, asker, c) is not StaleAction.DROP]
    last = [c for c in healthy if _stale(fed, asker, c) is StaleAction.DEMOTE]
    if why is not None:
        _left_out(node, asker, weighted, why, open_)
    if name is PolicyName.FAILOVER:
        listed = [c for c in chosen.failover_order if c in healthy and c not in last]
        rest = [c for c in healthy if c not in chosen.failover_order and c not in last]
        clusters = [[c] for c in listed] + [group for group in (rest, last) if group]
        if why is not None:
            why.update({c: f"failover rank {place + 1} of failoverOrder {list(chosen.failover_order)}"
                        for place, c in enumerate(listed)})
            why.update({c: "not in failoverOrder: after the listed clusters" for c in rest})
            why.update({c: "stale cluster: after every fresh one" for c in last})
        return chosen, [(10 * place, group) for place, group in enumerate(clusters)]
    if name is PolicyName.WEIGHTED:
        fresh = [c for c in healthy if c not in last]
        if why is not None:
            why.update({c: f"weight {shards[c].weight}: drawn by weight per answer" for c in fresh})
            why.update({c: "stale cluster: after every fresh one" for c in last})
        return chosen, [(10 * place, group) for place, group in enumerate(g for g in (fresh, last) if g)]
    tiers: list[list[str]] = [[], [], [], []]
    for cluster in healthy:
        rank = tier(fed, asker, cluster)
        if rank is not None:
            tiers[rank].append(cluster)
            if why is not None:
                why[cluster] = _tier_reason(fed, asker, cluster, rank, shards[cluster].weight if weighted else None)
    return chosen, [(10 * rank, group) for rank, group in enumerate(tiers) if group]


def _left_out(node: Node, asker: str | None, weighted: bool, why: dict[str, str], open_: bool) -> None:
    """Why each shard that :func:`ranked` leaves out is left out."""
    assert node.shards is not None and node.federation is not None
    for cluster, shard in node.shards.items():
        if not shard.healthy and not open_:
            why[cluster] = "left out: ready: 0"
        elif weighted and shard.weight == 0:
            why[cluster] = "left out: weight 0"
        elif _stale(node.federation, asker, cluster) is StaleAction.DROP:
            why[cluster] = "left out: stale cluster (staleAction: drop)"


def _tier_reason(fed: Federation, asker: str | None, cluster: str, rank: Tier, weight: int | None) -> str:
    """Why ``cluster``'s shard is in tier ``rank`` for ``asker`` (and its weight inside the tier)."""
    if _stale(fed, asker, cluster) is StaleAction.DEMOTE:
        text = "stale cluster: moved to the last tier"
    elif rank is Tier.OWN:
        text = "the asking cluster's own shard"
    elif asker is None:
        text = "no source cluster: every shard is in the last tier"
    elif fed.clusters.get(asker) is None:
        text = "the asking cluster has no cluster record: every other shard is in the last tier"
    elif fed.clusters.get(cluster) is None:
        text = "its cluster has no cluster record (no zone or region): the last tier"
    elif rank is Tier.SAME_ZONE:
        text = "in the asking cluster's zone"
    elif rank is Tier.SAME_REGION:
        text = "in the asking cluster's region"
    else:
        text = "outside the asking cluster's region"
    return text if weight is None else f"{text}; weight {weight} within the tier"


def shard_addresses(fed: Federation, cluster: str, shard: Shard, own: bool, version: int) -> bytes:
    """The packed addresses an asker reaches ``cluster``'s shard by (IP ``version``
    4 or 6): clusterIPs from its own cluster, else externalIPs; for a headless
    shard its endpoints, from its own cluster or when its cluster record says
    ``"podNetwork": "routable"``, else none."""
    endpoints = shard.endpoints
    if endpoints is None:
        return shard.addresses(own, version)
    if not own and not routable(fed, cluster):
        return b""
    return endpoints.v4 if version == IPV4 else endpoints.v6


def routable(fed: Federation, cluster: str) -> bool:
    """True when ``cluster``'s record says other clusters can reach its pod IPs."""
    record = fed.clusters.get(cluster)
    return record is not None and record.routable


def address_answer(node: Node, asker: str | None, versions: tuple[int, ...], ttl: int,
                   none_ready: NoneReady = NoneReady.ANSWER) -> Arranged:
    """A and AAAA records (owned by the qname) answering ``node`` for cluster ``asker``.

    A service name gives the healthy shards' addresses (every shard's when none is ready and it
    fails open) in the groups of
    :func:`ranked`, IPv4 groups before IPv6 ones; a shard name that shard's
    addresses whatever its ready count or weight; an endpoint name that
    endpoint's, when the asker may reach it.
    """
    assert node.shards is not None and node.federation is not None
    fed = node.federation
    if node.kind in (NodeKind.SHARD, NodeKind.ENDPOINT):
        assert node.cluster is not None
        shard = node.shards[node.cluster]
        own = node.cluster == asker
        if node.kind == NodeKind.ENDPOINT:
            assert shard.endpoints is not None and node.hostname is not None
            reachable = own or routable(fed, node.cluster)
            v4, v6 = shard.endpoints.names[node.hostname] if reachable else (b"", b"")
            packed = [v4 if version == IPV4 else v6 for version in versions]
        else:
            packed = [shard_addresses(fed, node.cluster, shard, own, version) for version in versions]
        found = tuple(r for block, version in zip(packed, versions, strict=True)
                      for r in _address_records(block, version, answer.POINTER_TO_QNAME, ttl))
        return ((found,) if found else ()), answer.FIXED, [], None
    chosen, groups = address_groups(node, asker, versions, none_ready=none_ready)
    units: list[list[WeighedRecords]] = []
    first: Tier | None = None
    for version, group in groups:
        units.append([(_address_records(block, version, answer.POINTER_TO_QNAME, ttl), node.shards[cluster].weight)
                      for cluster, block in group])
        if first is None and group:
            first = nearest(fed, asker, [cluster for cluster, _ in group])
    return _arranged(PolicyName(chosen.name), _capped(units, MAX_ANSWER_BYTES), [], first)


AddressGroup = tuple[int, list[tuple[str, bytes]]]
"""``(IP version, [(cluster, packed addresses)])``: one group of :func:`ranked` in one IP
version, each shard with the addresses the asker reaches it by, in the answer's order."""


def address_groups(node: Node, asker: str | None, versions: tuple[int, ...], why: dict[str, str] | None = None,
                   none_ready: NoneReady = NoneReady.ANSWER) -> tuple[Policy, list[AddressGroup]]:
    """The service's policy and the address records of ``node`` (a service's name) for cluster
    ``asker``: per IP version of ``versions`` (4, 6), per group of :func:`ranked`, the shards
    that have an address for the asker (a shard with no externalIP only for its own cluster).
    ``why`` is filled as :func:`ranked` fills it, and says why a shard with no address for
    the asker is left out. The answer of serve (:func:`address_answer`) and ``feddns explain``
    are both made from this (docs/reference.md section 2).
    """
    assert node.shards is not None and node.federation is not None
    fed = node.federation
    chosen, groups = ranked(node, asker, why, none_ready)
    out: list[AddressGroup] = []
    reached: set[str] = set()
    for version in versions:
        for _, group in groups:
            blocks = []
            for cluster in group:
                block = shard_addresses(fed, cluster, node.shards[cluster], cluster == asker, version)
                if block:
                    blocks.append((cluster, block))
                    reached.add(cluster)
            out.append((version, blocks))
    if why is not None:
        for _, group in groups:
            for cluster in group:
                if cluster not in reached:
                    why[cluster] = f"left out: no address for this asker ({why[cluster]}), " + _unreachable(
                        node.shards[cluster], cluster == asker)
    return chosen, out


def _unreachable(shard: Shard, own: bool) -> str:
    """Why a kept shard gives the asker no address."""
    if shard.endpoints is not None:
        return "a headless shard whose pods the asker cannot reach (podNetwork: isolated)"
    if own:
        return "no clusterIP of the type asked"
    return "no externalIP of the type asked: reachable only from its own cluster"


def nearest(fed: Federation, asker: str | None, clusters: list[str]) -> Tier:
    """The nearest tier, for cluster ``asker``, of the shards of ``clusters`` (which an
    answer holds): the tier that a group of records sends the asker's traffic to. A
    group of one tier (``locality``, ``locality-weighted``, a listed ``failover``
    cluster) has its tier; a group that mixes tiers (``weighted``, unlisted
    ``failover`` clusters) its nearest one."""
    ranks = [tier(fed, asker, cluster) for cluster in clusters]
    return min((rank for rank in ranks if rank is not None), default=Tier.OTHER)


def _arranged(chosen: PolicyName, units: list[list[WeighedRecords]], additional: list[bytes],
              first: Tier | None) -> Arranged:
    """The tiers of ``units`` (each a shard's records) and the ordering policy ``chosen`` imposes."""
    tiers = tuple(tuple(r for records, _ in tier for r in records) for tier in units if tier)
    ordering: answer.Ordering | None = None
    if chosen is PolicyName.FAILOVER:
        ordering = answer.FIXED
    elif chosen in _WEIGHTED_POLICIES:
        joined = [[(b"".join(records), max(weight, 1)) for records, weight in tier] for tier in units if tier]
        ordering = answer.FIXED if all(len(tier) == 1 for tier in joined) else Draw(joined)
    return tiers, ordering, additional, first if tiers else None


def _capped(units: list[list[WeighedRecords]], budget: int) -> list[list[WeighedRecords]]:
    """``units`` less the last ones past ``budget`` bytes of records."""
    total = sum(len(r) for tier in units for records, _ in tier for r in records)
    if total <= budget:
        return units
    out: list[list[WeighedRecords]] = []
    for tier in units:
        kept: list[WeighedRecords] = []
        for records, weight in tier:
            size = sum(len(r) for r in records)
            if size > budget:
                break
            budget -= size
            kept.append((records, weight))
        out.append(kept)
    return out


def _address_records(packed: bytes, version: int, owner: bytes, ttl: int) -> list[bytes]:
    """One A (``version`` 4) or AAAA (6) record per address of ``packed``, owned by ``owner``."""
    width = IPV4_BYTES if version == IPV4 else IPV6_BYTES
    return [answer.address_rr(packed[i : i + width], ttl, owner) for i in range(0, len(packed), width)]


def srv_answer(node: Node, asker: str | None, base: bytes, ttl: int,
               none_ready: NoneReady = NoneReady.ANSWER) -> Arranged:
    """SRV records (RFC 2782) of the healthy, reachable shards with ``node``'s named
    port, and the additional A/AAAA records of their targets (answered as for
    cluster ``asker``). A target is ``<cluster>.`` + ``base`` (the service's name in wire
    form, in the zone asked), or for a headless shard one
    ``<endpoint name>.<cluster>.`` + ``base`` per endpoint.

    Priority follows :func:`ranked`; weight is the shard's ready count (1 when
    absent; 1 per endpoint of a headless shard) under ``locality`` and
    ``failover``, the shard's weight under the weighted policies.
    """
    assert node.shards is not None and node.federation is not None
    fed = node.federation
    chosen, groups = ranked(node, asker, none_ready=none_ready)
    name = PolicyName(chosen.name)
    weighted = name in _WEIGHTED_POLICIES
    units: list[list[WeighedRecords]] = []
    extra: list[bytes] = []
    first: Tier | None = None
    for priority, group in groups:
        tier_units: list[WeighedRecords] = []
        reached = []
        for cluster in group:
            shard = node.shards[cluster]
            port = next((p for p in shard.ports if p.name == node.port_name and p.protocol == node.protocol), None)
            if port is None:
                continue
            own = cluster == asker
            v4, v6 = shard_addresses(fed, cluster, shard, own, 4), shard_addresses(fed, cluster, shard, own, 6)
            if not (v4 or v6):
                continue
            cluster_target = names.below(cluster, base)
            if shard.endpoints is None:
                weight = shard.weight if weighted else min(shard.ready if shard.ready is not None else 1, 65535)
                targets = [(cluster_target, v4, v6, weight)]
            else:
                weight = shard.weight if weighted else 1
                targets = [(names.below(hostname, cluster_target), a4, a6, weight)
                           for hostname, (a4, a6) in shard.endpoints.names.items()]
            for target, a4, a6, srv_weight in targets:
                if len(target) > MAX_NAME_BYTES:  # a name DNS cannot carry (RFC 1035 3.1)
                    continue
                record = answer.srv_rr(priority, srv_weight, port.port, target, ttl)
                tier_units.append(([record], srv_weight or 1))
                extra += _address_records(a4, 4, target, ttl) + _address_records(a6, 6, target, ttl)
                reached.append(cluster)
        units.append(tier_units)
        if first is None and reached:
            first = nearest(fed, asker, reached)
    size = sum(len(r) for tier in units for records, _ in tier for r in records)
    if size + sum(len(r) for r in extra) > MAX_ANSWER_BYTES:
        extra = []
    return _arranged(name, _capped(units, MAX_ANSWER_BYTES), extra, first)
