"""The record model of docs/reference.md section 4: shard records and cluster records.

Values are JSON objects. A shard record carries the design document's
``clusterIP`` and ``externalIP`` and the optional extensions ``clusterIPs``,
``externalIPs``, ``ports``, ``ready``, the answer policy (``policy``,
``failoverOrder``, ``weight``) and, for a headless Service, its ready
``endpoints``; the list fields take precedence over the singular ones. Unknown
fields are ignored, so newer writers can add fields without breaking older
servers. Records are normalised once, here, where they enter; everything
downstream works on these frozen objects.

The policy fields only order answers, so a bad one never costs a shard its
addresses: a shard whose ``policy``, ``failoverOrder`` or ``weight`` is not
valid is read with the default policy (``locality``), and the reader is told
why (:attr:`ShardFields.problem`).
"""

import ipaddress
import json
import socket
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

import orjson

from feddns import names
from feddns.errors import RecordError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

PROTOCOLS = ("TCP", "UDP", "SCTP")
"""Service port protocols (Kubernetes ``spec.ports[].protocol``)."""


class StaleAction(StrEnum):
    """What answers do with the shards of a stale cluster (a cluster record's
    ``staleAction``, docs/reference.md section 2): move them to the last tier
    (``demote``, the default), or leave them out (``drop``)."""

    DEMOTE = "demote"
    DROP = "drop"


_STALE_ACTIONS: dict[str, StaleAction] = {action.value: action for action in StaleAction}
"""Each stale action by its text (see :data:`_POLICY_NAMES`)."""


class PolicyName(StrEnum):
    """A service's answer policy (a shard record's ``policy``, docs/reference.md
    section 2), spelled as the record spells it; ``locality`` is the default."""

    LOCALITY = "locality"
    FAILOVER = "failover"
    WEIGHTED = "weighted"
    LOCALITY_WEIGHTED = "locality-weighted"


class NoneReady(StrEnum):
    """What a service answers when none of its shards is ready (a shard record's
    ``noneReady``, ``feddns serve --none-ready``; docs/reference.md section 2):
    ``answer`` every shard as if it were ready, in the usual order (fail open, as
    health-checked DNS does), or ``nodata``."""

    ANSWER = "answer"
    NODATA = "nodata"


_NONE_READY: dict[str, NoneReady] = {value.value: value for value in NoneReady}

_POLICY_NAMES: dict[str, PolicyName] = {name.value: name for name in PolicyName}
"""Each policy by its text: a dict lookup, where ``PolicyName(text)`` costs twenty
times more (0.4 microseconds) on the path every etcd event takes."""

MAX_WEIGHT = 65535
"""The largest ``weight``: what an SRV record's weight field holds (RFC 2782)."""

MAX_PORT = 65535
"""The largest TCP or UDP port number."""

MAX_ENDPOINTS = 1000
"""The most ``endpoints`` a shard record may hold (the controller trims to this)."""

ROUTABLE = "routable"
POD_NETWORKS = ("isolated", ROUTABLE)
"""``podNetwork`` of a cluster record: whether other clusters can reach its pod IPs."""


@dataclass(frozen=True, slots=True)
class Policy:
    """How answers for a service are ordered (docs/reference.md section 2).

    ``name`` is a :class:`PolicyName`; ``failover_order`` the cluster names of
    a ``failover`` policy, first choice first; ``weight`` this shard's weight
    (0 to :data:`MAX_WEIGHT`; ``None``: not given, counted as 1) under
    ``weighted`` and ``locality-weighted``; ``none_ready`` what the service answers when no
    shard is ready (``None``: not given, serve's ``--none-ready`` decides); ``ttl`` the TTL of
    the service's answers in seconds, 0 to :data:`MAX_TTL` (``None``: not given, serve's ``--ttl``;
    the least of its shards' when they differ).
    """

    name: PolicyName = PolicyName.LOCALITY
    failover_order: tuple[str, ...] = ()
    weight: int | None = None
    none_ready: NoneReady | None = None
    ttl: int | None = None


DEFAULT_POLICY = Policy()

MAX_TTL = 2**31 - 1
"""The largest TTL, in seconds (RFC 2181 section 8)."""


def _policy_fields(policy: Policy) -> dict[str, Any]:
    """A shard record's fields of ``policy``: those it gives (the default policy gives none)."""
    fields: dict[str, Any] = {}
    if policy.name != PolicyName.LOCALITY:
        fields["policy"] = str(policy.name)
    if policy.failover_order:
        fields["failoverOrder"] = list(policy.failover_order)
    if policy.weight is not None:
        fields["weight"] = policy.weight
    if policy.none_ready is not None:
        fields["noneReady"] = str(policy.none_ready)
    if policy.ttl is not None:
        fields["ttl"] = policy.ttl
    return fields


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One ready endpoint of a headless Service (EndpointSlice ``endpoints[]``):
    its first address and its ``hostname`` (``None`` when it has none)."""

    ip: IPAddress
    hostname: str | None = None


@dataclass(frozen=True, slots=True)
class Port:
    """One named port of a shard (Kubernetes ``spec.ports[]``): ``port`` is 1-65535."""

    name: str
    protocol: str
    port: int


@dataclass(frozen=True, slots=True)
class ShardRecord:
    """One shard of a federated service in one cluster.

    ``cluster_ips`` and ``external_ips`` are tuples of addresses (IPv4 and IPv6
    mixed, in record order); ``ready`` is the ready endpoint count or ``None``
    when the record does not say (then the shard counts as ready, docs/reference.md section 2).
    """

    cluster_ips: tuple[IPAddress, ...] = ()
    external_ips: tuple[IPAddress, ...] = ()
    ports: tuple[Port, ...] = ()
    ready: int | None = None
    policy: Policy = DEFAULT_POLICY
    endpoints: tuple[Endpoint, ...] | None = None
    """Ready endpoints of a headless Service; ``None`` for any other Service."""

    @property
    def healthy(self) -> bool:
        """False only when the record says ``"ready": 0``."""
        return self.ready is None or self.ready > 0

    @classmethod
    def from_json(cls, value: Any) -> "ShardRecord":
        """Build from a decoded JSON object; raises :class:`RecordError` naming the field
        (a bad policy field is not an error: the record gets the default policy)."""
        fields = read_shard(value)
        endpoints = fields.endpoints
        return cls(
            cluster_ips=tuple(unpack_ip(packed) for packed in fields.cluster_ips),
            external_ips=tuple(unpack_ip(packed) for packed in fields.external_ips),
            ports=fields.ports,
            ready=fields.ready,
            policy=fields.policy,
            endpoints=None if endpoints is None else tuple(Endpoint(unpack_ip(ip), name) for ip, name in endpoints),
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON object to store: the singular fields first, for readers of the
        design document's layout, then the lists; fields without values are left out."""
        obj: dict[str, Any] = {}
        if self.cluster_ips:
            obj["clusterIP"] = str(self.cluster_ips[0])
            obj["clusterIPs"] = [str(ip) for ip in self.cluster_ips]
        if self.external_ips:
            obj["externalIP"] = str(self.external_ips[0])
            obj["externalIPs"] = [str(ip) for ip in self.external_ips]
        if self.ports:
            obj["ports"] = [
                {"name": p.name, "protocol": p.protocol, "port": p.port} for p in self.ports
            ]
        if self.ready is not None:
            obj["ready"] = self.ready
        obj.update(_policy_fields(self.policy))
        if self.endpoints is not None:
            obj["endpoints"] = [
                {"ip": str(e.ip), "hostname": e.hostname} if e.hostname else {"ip": str(e.ip)} for e in self.endpoints
            ]
        return obj


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    """Where a member cluster is: ``zone`` and ``region`` (``None`` when unknown),
    the ``cidrs`` its queries come from (source cluster, docs/reference.md
    section 3), and ``pod_network``: ``"routable"`` when other clusters can
    reach its pod IPs (a flat network: Submariner, Cilium ClusterMesh), else
    ``"isolated"`` (the default; any other stored value reads as isolated).

    ``stale``: the controller has not reached the cluster for its
    ``staleAfterSeconds``; ``stale_action`` (a :class:`StaleAction`) says what
    answers do with its shards meanwhile (docs/reference.md sections 2 and 4).
    """

    zone: str | None = None
    region: str | None = None
    cidrs: tuple[IPNetwork, ...] = field(default=())
    pod_network: str = "isolated"
    stale: bool = False
    stale_action: StaleAction = StaleAction.DEMOTE

    @property
    def routable(self) -> bool:
        """True when other clusters can reach this cluster's pod IPs."""
        return self.pod_network == ROUTABLE

    @classmethod
    def from_json(cls, value: Any) -> "ClusterRecord":
        """Build from a decoded JSON object; raises :class:`RecordError` naming the field."""
        if not isinstance(value, dict):
            raise RecordError("cluster record must be a JSON object")
        zone, region = value.get("zone"), value.get("region")
        for name, text in (("zone", zone), ("region", region)):
            if text is not None and (not isinstance(text, str) or not text):
                raise RecordError(f"{name} must be a non-empty string, not {text!r}")
        cidrs = value.get("cidrs", [])
        if not isinstance(cidrs, list):
            raise RecordError(f"cidrs must be a list, not {cidrs!r}")
        try:
            networks = tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)
        except (TypeError, ValueError) as exc:
            raise RecordError(f"cidrs: {exc}") from exc
        pod_network = ROUTABLE if value.get("podNetwork") == ROUTABLE else "isolated"
        stale, text = value.get("stale", False), value.get("staleAction", StaleAction.DEMOTE)
        if not isinstance(stale, bool):
            raise RecordError(f"stale must be true or false, not {stale!r}")
        action = _STALE_ACTIONS.get(text) if isinstance(text, str) else None
        if action is None:
            raise RecordError(f"staleAction must be one of {', '.join(StaleAction)}, not {text!r}")
        return cls(zone=zone, region=region, cidrs=networks, pod_network=pod_network, stale=stale,
                   stale_action=action)

    def to_json(self) -> dict[str, Any]:
        """The JSON object to store: ``podNetwork`` always; zone, region and cidrs when they
        have values; ``"stale": true`` only while stale and ``staleAction`` only when not
        the default ``demote``."""
        obj: dict[str, Any] = {}
        if self.zone:
            obj["zone"] = self.zone
        if self.region:
            obj["region"] = self.region
        if self.cidrs:
            obj["cidrs"] = [str(c) for c in self.cidrs]
        obj["podNetwork"] = self.pod_network
        if self.stale:
            obj["stale"] = True
        if self.stale_action != StaleAction.DEMOTE:
            obj["staleAction"] = str(self.stale_action)
        return obj


def encode(record: ShardRecord | ClusterRecord) -> bytes:
    """Canonical JSON bytes of a record (sorted keys, no spaces), so that equal
    records encode to equal bytes and writers can compare before they put."""
    return json.dumps(record.to_json(), sort_keys=True, separators=(",", ":")).encode()


def decode_json(raw: bytes | str) -> Any:
    """Decode a stored value; raises :class:`RecordError` when it is not JSON.

    orjson parses the small objects of records several times faster than the
    standard library, which counts when a first load reads a million records.
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"value is not JSON: {exc}") from exc


load_json = orjson.loads
"""The decoder :func:`decode_json` wraps, for a loop over many values that catches
:data:`NotJSON` itself (a frame less a value: ``Index.put_page``)."""
NotJSON = orjson.JSONDecodeError
"""What :data:`load_json` raises for bytes that are not JSON (a ``ValueError``)."""


PackedEndpoints = tuple[tuple[bytes, str | None], ...]
"""Endpoints with their address packed (4 or 16 bytes) and their hostname."""


class ShardFields(NamedTuple):
    """A shard record's fields as :func:`read_shard` checks them: addresses packed
    (4 bytes IPv4, 16 bytes IPv6, in record order, duplicates dropped), the
    :class:`Policy` (the default when a policy field is bad: ``problem`` says
    why), and the endpoints (``None`` when the record has none)."""

    cluster_ips: tuple[bytes, ...]
    external_ips: tuple[bytes, ...]
    ports: tuple[Port, ...]
    ready: int | None
    policy: Policy = DEFAULT_POLICY
    endpoints: PackedEndpoints | None = None
    problem: str | None = None


def read_shard(value: Any) -> ShardFields:
    """The fields of a shard record from its decoded JSON object, checked.

    Raises :class:`RecordError` naming the field for a bad address, port,
    ``ready`` or endpoint; a bad policy field gives the default policy and a
    ``problem`` instead. :meth:`ShardRecord.from_json` and the server's index
    both read records through this, so they accept the same.
    """
    if not isinstance(value, dict):
        raise RecordError("shard record must be a JSON object")
    ready = value.get("ready")
    if ready is not None and (type(ready) is not int or ready < 0):
        raise RecordError(f"ready must be a non-negative integer, not {ready!r}")
    ports = value.get("ports")
    endpoints = value.get("endpoints")
    policy, problem = DEFAULT_POLICY, None
    if "policy" in value or "weight" in value or "failoverOrder" in value or "noneReady" in value or "ttl" in value:
        policy, problem = read_policy(value.get("policy"), value.get("failoverOrder"), value.get("weight"),
                                      value.get("noneReady"), value.get("ttl"))
    return _new_fields(ShardFields, (  # tuple.__new__: NamedTuple's own __new__ is a Python frame more a record
        _addresses(value, "clusterIPs", "clusterIP"),
        _addresses(value, "externalIPs", "externalIP"),
        _ports(ports) if ports is not None else (),
        ready,
        policy,
        _endpoints(endpoints) if endpoints is not None else None,
        problem,
    ))


_new_fields = tuple.__new__


_POLICIES: dict[Policy, Policy] = {}
"""Policies already read, shared (every shard of a service carries the same one)."""
_POLICIES_MAX = 4096


def read_policy(name: object, order: object, weight: object, none_ready: object = None,
                ttl: object = None) -> tuple[Policy, str | None]:
    """The :class:`Policy` of a record's ``policy``, ``failoverOrder``, ``weight``,
    ``noneReady`` and ``ttl`` (each ``None`` when absent), or the default policy and why, when
    one of them is bad: a name that is not a :class:`PolicyName`, an order that is not a list of
    cluster names, a weight that is not a whole number from 0 to :data:`MAX_WEIGHT`, a
    ``noneReady`` that is not a :class:`NoneReady`, a ``ttl`` that is not a whole number of
    seconds from 0 to :data:`MAX_TTL`."""
    chosen = PolicyName.LOCALITY if name is None else _POLICY_NAMES.get(name) if isinstance(name, str) else None
    if chosen is None:
        return DEFAULT_POLICY, f"policy {name!r} is not one of {', '.join(PolicyName)}"
    if order is None:
        order = []
    if not isinstance(order, list) or not all(isinstance(c, str) and names.is_label(c) for c in order):
        return DEFAULT_POLICY, f"failoverOrder {order!r} is not a list of cluster names"
    if weight is not None and (type(weight) is not int or not 0 <= weight <= MAX_WEIGHT):
        return DEFAULT_POLICY, f"weight {weight!r} is not a whole number from 0 to {MAX_WEIGHT}"
    chosen_none_ready, chosen_ttl, bad = _read_extras(none_ready, ttl)
    if bad is not None:
        return DEFAULT_POLICY, bad
    policy = Policy(chosen, tuple(dict.fromkeys(order)), weight, chosen_none_ready, chosen_ttl)
    known = _POLICIES.get(policy)
    if known is not None:
        return known, None
    if len(_POLICIES) < _POLICIES_MAX:
        _POLICIES[policy] = policy
    return policy, None


def _read_extras(none_ready: object, ttl: object) -> tuple[NoneReady | None, int | None, str | None]:
    """:func:`read_policy`'s ``noneReady`` and ``ttl`` (``None`` each when absent), and what is wrong
    with one of them (``None``: nothing)."""
    chosen_none_ready = None
    if none_ready is not None:
        chosen_none_ready = _NONE_READY.get(none_ready) if isinstance(none_ready, str) else None
        if chosen_none_ready is None:
            return None, None, f"noneReady {none_ready!r} is not one of {', '.join(NoneReady)}"
    if ttl is None:
        return chosen_none_ready, None, None
    if type(ttl) is not int or not 0 <= ttl <= MAX_TTL:
        return None, None, f"ttl {ttl!r} is not a whole number of seconds from 0 to {MAX_TTL}"
    return chosen_none_ready, ttl, None


def _endpoints(items: Any) -> PackedEndpoints:
    if not isinstance(items, list):
        raise RecordError(f"endpoints must be a list, not {items!r}")
    if len(items) > MAX_ENDPOINTS:
        raise RecordError(f"endpoints: {len(items)} entries, more than {MAX_ENDPOINTS}")
    out: dict[tuple[bytes, str | None], None] = {}
    for item in items:
        if not isinstance(item, dict):
            raise RecordError(f"endpoints: {item!r} is not an object")
        packed = pack_ip(item.get("ip"))
        if packed is None:
            raise RecordError(f"endpoints: ip {item.get('ip')!r} is not an IP address")
        hostname = item.get("hostname")
        if hostname is not None and (not isinstance(hostname, str) or not names.is_label(hostname)):
            raise RecordError(f"endpoints: hostname {hostname!r} is not a lowercase DNS label")
        out[(packed, hostname)] = None
    return tuple(out)


def _addresses(value: dict[str, Any], plural: str, singular: str) -> tuple[bytes, ...]:
    items = value.get(plural)
    if items is None and plural not in value:
        single = value.get(singular)
        if single is None or single == "":
            return ()
        try:
            return (socket.inet_pton(socket.AF_INET, single),)
        except (OSError, TypeError, ValueError):
            packed = pack_ip(single)
        if packed is None:
            raise RecordError(f"{plural}: {single!r} is not an IP address")
        return (packed,)
    if not isinstance(items, list):
        raise RecordError(f"{plural} must be a list of IP addresses, not {items!r}")
    out = []
    for item in items:
        packed = pack_ip(item)
        if packed is None:
            raise RecordError(f"{plural}: {item!r} is not an IP address")
        out.append(packed)
    return tuple(dict.fromkeys(out)) if len(out) > 1 else tuple(out)


IPV4_PACKED_BYTES = 4
"""Length of a packed IPv4 address (an IPv6 one has 16 bytes)."""


def unpack_ip(packed: bytes) -> IPAddress:
    """The address object of a packed address (4 bytes: IPv4, 16: IPv6), as :func:`pack_ip` gives it."""
    return ipaddress.IPv4Address(packed) if len(packed) == IPV4_PACKED_BYTES else ipaddress.IPv6Address(packed)


def pack_ip(text: object) -> bytes | None:
    """The packed form (4 or 16 bytes) of an IPv4 or IPv6 address in text, or
    ``None`` when ``text`` is not one.

    Parses with ``inet_pton`` (C, strict dotted-quad and RFC 4291 forms): ten
    times faster than ``ipaddress.ip_address`` on strings, which counts when a
    first load reads a million records.
    """
    try:
        return socket.inet_pton(socket.AF_INET, text)  # type: ignore[arg-type]
    except (OSError, TypeError, ValueError):  # not IPv4 text (TypeError: not a str; ValueError: a NUL in it)
        pass
    try:
        return socket.inet_pton(socket.AF_INET6, text)  # type: ignore[arg-type]
    except (OSError, TypeError, ValueError):
        return None


def parse_ip(text: object) -> IPAddress | None:
    """An IPv4 or IPv6 address from its text form, or ``None`` when ``text`` is not one."""
    packed = pack_ip(text)
    return None if packed is None else unpack_ip(packed)


_ONE_PORT: dict[tuple[str, str, int], tuple[Port]] = {}
"""Single-port lists already checked, shared (records of one service repeat them)."""
_ONE_PORT_MAX = 4096


def _ports(items: Any) -> tuple[Port, ...]:
    if not isinstance(items, list):
        raise RecordError(f"ports must be a list, not {items!r}")
    if len(items) == 1 and type(items[0]) is dict:
        item = items[0]
        key = (item.get("name"), item.get("protocol", "TCP"), item.get("port"))
        if type(key[0]) is str and type(key[1]) is str and type(key[2]) is int:
            known = _ONE_PORT.get(key)  # type: ignore[arg-type]
            if known is not None:
                return known
            checked = (_port(item),)
            if len(_ONE_PORT) < _ONE_PORT_MAX:
                _ONE_PORT[key] = checked  # type: ignore[index]
            return checked
    return tuple(_port(item) for item in items)


def _port(item: Any) -> Port:
    if not isinstance(item, dict):
        raise RecordError(f"ports: {item!r} is not an object")
    name, number = item.get("name"), item.get("port")
    protocol = item.get("protocol", "TCP")
    if not isinstance(name, str) or not names.is_label(name):
        raise RecordError(f"ports: name {name!r} is not a lowercase DNS label")
    if protocol not in PROTOCOLS:
        raise RecordError(f"ports: protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
    if type(number) is not int or not 1 <= number <= MAX_PORT:
        raise RecordError(f"ports: port {number!r} is not an integer from 1 to {MAX_PORT}")
    return Port(name, protocol, number)
