"""The record model of CONTRACTS 4: shard records and cluster records.

Values are JSON objects. A shard record carries the design document's
``clusterIP`` and ``externalIP`` and the optional extensions ``clusterIPs``,
``externalIPs``, ``ports`` and ``ready``; the list fields take precedence over
the singular ones. Unknown fields are ignored, so newer writers can add fields
without breaking older servers. Records are normalised once, here, where they
enter; everything downstream works on these frozen objects.
"""

import ipaddress
import json
import socket
from dataclasses import dataclass, field
from typing import Any

from feddns import names
from feddns.errors import RecordError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

PROTOCOLS = ("TCP", "UDP", "SCTP")
"""Service port protocols (Kubernetes ``spec.ports[].protocol``)."""

STALE_ACTIONS = ("demote", "drop")
"""What ``feddns serve`` does with the shards of a stale cluster (docs/reference.md section 2):
move them to the last tier, or leave them out."""


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
    when the record does not say (then the shard counts as ready, CONTRACTS 2).
    """

    cluster_ips: tuple[IPAddress, ...] = ()
    external_ips: tuple[IPAddress, ...] = ()
    ports: tuple[Port, ...] = ()
    ready: int | None = None

    @property
    def healthy(self) -> bool:
        """False only when the record says ``"ready": 0``."""
        return self.ready is None or self.ready > 0

    @classmethod
    def from_json(cls, value: Any) -> "ShardRecord":
        """Build from a decoded JSON object; raises :class:`RecordError` naming the field."""
        if not isinstance(value, dict):
            raise RecordError("shard record must be a JSON object")
        ready = value.get("ready")
        if ready is not None and (type(ready) is not int or ready < 0):
            raise RecordError(f"ready must be a non-negative integer, not {ready!r}")
        return cls(
            cluster_ips=_addresses(value, "clusterIPs", "clusterIP"),
            external_ips=_addresses(value, "externalIPs", "externalIP"),
            ports=_ports(value.get("ports", [])),
            ready=ready,
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
        return obj


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    """Where a member cluster is: ``zone`` and ``region`` (``None`` when unknown) and
    the ``cidrs`` its queries come from (source cluster, docs/reference.md section 3).

    ``stale``: the controller has not reached the cluster for its
    ``staleAfterSeconds``; ``stale_action`` (``"demote"`` or ``"drop"``) says what
    answers do with its shards meanwhile (docs/reference.md sections 2 and 4).
    """

    zone: str | None = None
    region: str | None = None
    cidrs: tuple[IPNetwork, ...] = field(default=())
    stale: bool = False
    stale_action: str = "demote"

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
        stale, action = value.get("stale", False), value.get("staleAction", "demote")
        if not isinstance(stale, bool):
            raise RecordError(f"stale must be true or false, not {stale!r}")
        if action not in STALE_ACTIONS:
            raise RecordError(f"staleAction must be one of {', '.join(STALE_ACTIONS)}, not {action!r}")
        return cls(zone=zone, region=region, cidrs=networks, stale=stale, stale_action=action)

    def to_json(self) -> dict[str, Any]:
        """The JSON object to store; fields without values, ``"stale": false`` and the
        default ``"staleAction": "demote"`` are left out."""
        obj: dict[str, Any] = {}
        if self.zone:
            obj["zone"] = self.zone
        if self.region:
            obj["region"] = self.region
        if self.cidrs:
            obj["cidrs"] = [str(c) for c in self.cidrs]
        if self.stale:
            obj["stale"] = True
        if self.stale_action != "demote":
            obj["staleAction"] = self.stale_action
        return obj


def encode(record: ShardRecord | ClusterRecord) -> bytes:
    """Canonical JSON bytes of a record (sorted keys, no spaces), so that equal
    records encode to equal bytes and writers can compare before they put."""
    return json.dumps(record.to_json(), sort_keys=True, separators=(",", ":")).encode()


def decode_json(raw: bytes | str) -> Any:
    """Decode a stored value; raises :class:`RecordError` when it is not JSON."""
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"value is not JSON: {exc}") from exc


def _addresses(value: dict[str, Any], plural: str, singular: str) -> tuple[IPAddress, ...]:
    if plural in value:
        items = value[plural]
        if not isinstance(items, list):
            raise RecordError(f"{plural} must be a list of IP addresses, not {items!r}")
    elif value.get(singular) not in (None, ""):
        items = [value[singular]]
    else:
        return ()
    out = []
    for item in items:
        address = parse_ip(item)
        if address is None:
            raise RecordError(f"{plural}: {item!r} is not an IP address")
        out.append(address)
    return tuple(dict.fromkeys(out))


def parse_ip(text: object) -> IPAddress | None:
    """An IPv4 or IPv6 address from its text form, or ``None`` when ``text`` is not one.

    Parses with ``inet_pton`` (C, strict dotted-quad and RFC 4291 forms): ten
    times faster than ``ipaddress.ip_address`` on strings, which counts when a
    first load reads 100,000 records.
    """
    if not isinstance(text, str):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_pton(socket.AF_INET, text))
    except OSError:
        pass
    try:
        return ipaddress.IPv6Address(socket.inet_pton(socket.AF_INET6, text))
    except OSError:
        return None


def _ports(items: Any) -> tuple[Port, ...]:
    if not isinstance(items, list):
        raise RecordError(f"ports must be a list, not {items!r}")
    ports = []
    for item in items:
        if not isinstance(item, dict):
            raise RecordError(f"ports: {item!r} is not an object")
        name, number = item.get("name"), item.get("port")
        protocol = item.get("protocol", "TCP")
        if not isinstance(name, str) or not names.is_label(name):
            raise RecordError(f"ports: name {name!r} is not a lowercase DNS label")
        if protocol not in PROTOCOLS:
            raise RecordError(f"ports: protocol {protocol!r} is not one of {', '.join(PROTOCOLS)}")
        if type(number) is not int or not 1 <= number <= 65535:
            raise RecordError(f"ports: port {number!r} is not an integer from 1 to 65535")
        ports.append(Port(name, protocol, number))
    return tuple(ports)
