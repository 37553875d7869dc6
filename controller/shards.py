"""From Kubernetes objects to shard records: pure functions, no I/O.

Objects arrive as the decoded JSON of the API (``v1`` Service,
``discovery.k8s.io/v1`` EndpointSlice, ``multicluster.x-k8s.io/v1alpha1``
ServiceExport). Each is shrunk, as it arrives, to the few fields the controller
needs (:class:`ServiceInfo`, :class:`SliceInfo`), as CoreDNS's kubernetes plugin
does; nothing downstream sees the raw object. The shard record of
docs/reference.md section 4 is then the Service's addresses, named ports and
answer policy (its ``federation.feddns.io/*`` annotations) plus the ready
endpoint count of its EndpointSlices; for a headless Service, the ready
endpoints themselves and the slices' named ports (:func:`shard_record`).

A Service that cannot be a shard is not an error: :class:`ServiceInfo` carries
a ``skip`` reason (ExternalName, hostname-only load balancer, an unexpected
shape) that the controller logs once and counts. Bad policy annotations are not
one either: the Service is a shard with the default policy, and ``policy_problem``
says what was wrong.
"""

import sys
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from typing import Any

from feddns import names
from feddns.errors import FeddnsError
from feddns.records import (
    DEFAULT_POLICY,
    MAX_ENDPOINTS,
    MAX_PORT,
    MAX_TTL,
    MAX_WEIGHT,
    PROTOCOLS,
    Endpoint,
    IPAddress,
    NoneReady,
    Policy,
    PolicyName,
    Port,
    ShardRecord,
    pack_ip,
    parse_ip,
    unpack_ip,
)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
"""The label an EndpointSlice carries naming its Service (discovery.k8s.io/v1)."""

POLICY_ANNOTATION = "federation.feddns.io/policy"
FAILOVER_ORDER_ANNOTATION = "federation.feddns.io/failover-order"
WEIGHT_ANNOTATION = "federation.feddns.io/weight"
NONE_READY_ANNOTATION = "federation.feddns.io/none-ready"
TTL_ANNOTATION = "federation.feddns.io/ttl"
"""Annotations on a Service that set its answer policy (docs/reference.md section 2)."""

PACKED_BYTES = {"IPv4": 4, "IPv6": 16}
"""Bytes of a packed address of an EndpointSlice's ``addressType`` (FQDN slices carry none)."""


class ShapeError(FeddnsError, ValueError):
    """An API object without the fields its kind must have (no name, a list
    where an object belongs, an address that does not parse)."""


@dataclass(frozen=True, slots=True)
class Skip:
    """Why a Service is not a shard."""

    code: str
    """The ``reason`` label of ``feddns_controller_skipped_services_total``: ``externalname``,
    ``no-clusterip``, ``hostname-only`` or ``malformed``."""
    message: str
    """What the log line says, in a few words."""


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """A Service shrunk to what the controller needs.

    ``labelled``: the selector label equals the federation name. ``record``: its
    clusterIPs, externalIPs and named ports (``ready`` not yet known), or
    ``None`` with ``skip`` saying why. ``load_balancer``: ``spec.type`` is
    ``LoadBalancer`` (the external publisher only takes those), and
    ``ingress_ips`` its ``status.loadBalancer.ingress[].ip`` (what the external
    publisher publishes; never ``spec.externalIPs``). ``headless``:
    ``clusterIP: None`` (the record's endpoints come from the EndpointSlices).
    The record's policy is the annotations' (the default when none is set or
    one is bad, ``policy_problem`` then saying which and why).
    """

    namespace: str
    name: str
    labelled: bool
    record: ShardRecord | None
    skip: Skip | None = None
    load_balancer: bool = False
    headless: bool = False
    policy_problem: str | None = None
    ingress_ips: tuple[IPAddress, ...] = ()


@dataclass(frozen=True, slots=True)
class SliceInfo:
    """An EndpointSlice shrunk: its Service (``None`` when it has no
    ``kubernetes.io/service-name`` label), address type and ready endpoint count;
    ``addresses`` the first address of each ready endpoint, packed and
    concatenated (4 bytes each for ``IPv4``, 16 for ``IPv6``, none for
    ``FQDN``), ``hostnames`` their ``hostname`` in the same order (``None``
    when no endpoint has one), and ``ports`` the slice's named ports."""

    namespace: str
    name: str
    service: str | None
    address_type: str
    ready: int
    addresses: bytes = b""
    hostnames: tuple[str | None, ...] | None = None
    ports: tuple[Port, ...] = ()


def object_key(obj: object) -> tuple[str, str]:
    """``(namespace, name)`` of an API object; raises :class:`ShapeError`."""
    meta = _field(obj, "metadata", dict)
    name, namespace = meta.get("name"), meta.get("namespace", "default")
    try:
        # interned: a name is kept by its Service, its slices and the view's sets, once
        return sys.intern(names.check_label(namespace, "namespace")), sys.intern(names.check_label(name, "name"))
    except ValueError as exc:
        raise ShapeError(f"metadata: {exc}") from exc


def service_info(obj: object, federation: str, label: str, clusters: AbstractSet[str] = frozenset()) -> ServiceInfo:
    """Shrink a ``v1`` Service (Kubernetes API fields ``metadata.labels``,
    ``metadata.annotations``, ``spec.type``, ``spec.clusterIPs``,
    ``spec.externalIPs``, ``spec.ports``, ``status.loadBalancer.ingress``);
    ``clusters`` are the configured cluster names a failover order may name.

    Raises :class:`ShapeError` only when the object has no usable
    namespace/name; any other oddity becomes a ``skip``.
    """
    namespace, name = object_key(obj)
    meta = _field(obj, "metadata", dict)
    labels = meta.get("labels") or {}
    labelled = isinstance(labels, dict) and labels.get(label) == federation
    try:
        spec = _field(obj, "spec", dict)
        ingress = _ingress(obj)
        record, skip = _service_record(spec, ingress)
    except ShapeError as exc:
        return ServiceInfo(namespace, name, labelled, None, Skip("malformed", f"unexpected shape: {exc}"))
    load_balancer = record is not None and spec.get("type") == "LoadBalancer"
    headless = record is not None and record.endpoints is not None
    policy, problem = read_annotations(meta.get("annotations"), clusters)
    if record is not None and policy is not DEFAULT_POLICY:
        record = replace(record, policy=policy)
    # the record's externalIPs are the ingress IPs when there are any (else spec.externalIPs)
    from_ingress = record is not None and load_balancer and any(i.get("ip") for i in ingress)
    return ServiceInfo(namespace, name, labelled, record, skip, load_balancer, headless, problem,
                       record.external_ips if from_ingress and record is not None else ())


def read_annotations(annotations: object, clusters: AbstractSet[str]) -> tuple[Policy, str | None]:
    """The answer policy set by a Service's annotations (:data:`POLICY_ANNOTATION`,
    :data:`FAILOVER_ORDER_ANNOTATION`, :data:`WEIGHT_ANNOTATION`), or the default
    policy and what is wrong: an unknown policy, a failover policy without an
    order or with one naming a cluster not in ``clusters``, a weight that is not
    a whole number from 0 to 65535. Annotations a policy does not use are ignored
    (a weight under ``failover``). :data:`NONE_READY_ANNOTATION` (``answer`` or ``nodata``)
    and :data:`TTL_ANNOTATION` (whole seconds, 0 to :data:`~feddns.records.MAX_TTL`) are read
    whatever the policy; a bad value is left out, and said."""
    if not isinstance(annotations, dict):
        return DEFAULT_POLICY, None
    policy, problem = _read_policy_annotations(annotations, clusters)
    problems = [problem] if problem is not None else []
    text = annotations.get(NONE_READY_ANNOTATION)
    if text is not None:
        none_ready = next((value for value in NoneReady if value.value == str(text).strip()), None)
        if none_ready is None:
            problems.append(f"{NONE_READY_ANNOTATION} {text!r} is not one of {', '.join(NoneReady)}")
        else:
            policy = replace(policy, none_ready=none_ready)
    text = annotations.get(TTL_ANNOTATION)
    if text is not None:
        digits = str(text).strip()
        if not digits.isdigit() or int(digits) > MAX_TTL:
            problems.append(f"{TTL_ANNOTATION} {text!r} is not a whole number of seconds from 0 to {MAX_TTL}")
        else:
            policy = replace(policy, ttl=int(digits))
    return policy, "; ".join(problems) or None


def _read_policy_annotations(annotations: dict[str, Any], clusters: AbstractSet[str]) -> tuple[Policy, str | None]:
    """:func:`read_annotations` for the policy's name, failover order and weight."""
    name = annotations.get(POLICY_ANNOTATION)
    order_text, weight_text = annotations.get(FAILOVER_ORDER_ANNOTATION), annotations.get(WEIGHT_ANNOTATION)
    if name is None:
        return DEFAULT_POLICY, None
    text = str(name).strip()
    if text not in tuple(PolicyName):
        return DEFAULT_POLICY, f"{POLICY_ANNOTATION} {text!r} is not one of {', '.join(PolicyName)}"
    chosen = PolicyName(text)
    order: tuple[str, ...] = ()
    if chosen is PolicyName.FAILOVER:
        order, problem = _failover_order(order_text, clusters)
        if problem is not None:
            return DEFAULT_POLICY, problem
    weight = None
    if chosen in (PolicyName.WEIGHTED, PolicyName.LOCALITY_WEIGHTED) and weight_text is not None:
        digits = str(weight_text).strip()
        if not digits.isdigit() or int(digits) > MAX_WEIGHT:
            return DEFAULT_POLICY, f"{WEIGHT_ANNOTATION} {weight_text!r} is not a whole number from 0 to {MAX_WEIGHT}"
        weight = int(digits)
    return Policy(chosen, order, weight), None


def _failover_order(order_text: object, clusters: AbstractSet[str]) -> tuple[tuple[str, ...], str | None]:
    """The clusters named by :data:`FAILOVER_ORDER_ANNOTATION`, in order, or what is wrong with it."""
    order = tuple(dict.fromkeys(c.strip() for c in str(order_text or "").split(",") if c.strip()))
    unknown = [c for c in order if c not in clusters]
    if not order:
        return (), f"policy failover needs {FAILOVER_ORDER_ANNOTATION} (cluster names, comma-separated)"
    if unknown:
        return (), f"{FAILOVER_ORDER_ANNOTATION} names unknown clusters: {', '.join(unknown)}"
    return order, None


def _service_record(spec: Mapping[str, Any], ingress: list[Any]) -> tuple[ShardRecord | None, Skip | None]:
    if spec.get("type") == "ExternalName":
        return None, Skip("externalname", "type ExternalName has no clusterIP")
    cluster_ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    if not isinstance(cluster_ips, list):
        raise ShapeError(f"spec.clusterIPs: not a list: {cluster_ips!r}")
    if "None" in cluster_ips:  # headless: endpoints and ports come from the EndpointSlices
        return ShardRecord(endpoints=()), None
    if not cluster_ips:
        return None, Skip("no-clusterip", "no clusterIP allocated")
    ingress_ips = [i["ip"] for i in ingress if i.get("ip")]
    hostnames = [str(i["hostname"]) for i in ingress if i.get("hostname")]
    if not ingress_ips and hostnames:
        return None, Skip(
            "hostname-only",
            f"load balancer ingress has hostnames only ({', '.join(hostnames)}); hostnames are not supported",
        )
    external = ingress_ips or spec.get("externalIPs") or []
    record = ShardRecord(
        cluster_ips=_addresses(cluster_ips, "spec.clusterIPs"),
        external_ips=_addresses(external, "externalIPs"),
        ports=_ports(spec.get("ports") or []),
    )
    return record, None


def _ingress(obj: object) -> list[Any]:
    status = _field(obj, "status", dict, required=False)
    balancer = status.get("loadBalancer") or {}
    if not isinstance(balancer, dict):
        raise ShapeError("status.loadBalancer: not an object")
    ingress = balancer.get("ingress") or []
    if not isinstance(ingress, list) or not all(isinstance(i, dict) for i in ingress):
        raise ShapeError("status.loadBalancer.ingress: not a list of objects")
    return ingress


def slice_info(obj: object) -> SliceInfo:
    """Shrink a ``discovery.k8s.io/v1`` EndpointSlice; raises :class:`ShapeError`.

    ``ready`` counts the endpoints whose ``conditions.ready`` is true or absent
    (the API says a nil ``ready`` is to be read as true). Of each ready endpoint
    the first of its ``addresses`` is kept (the API says they are fungible) with
    its ``hostname`` (dropped when it is not a DNS label).
    """
    namespace, name = object_key(obj)
    labels = _field(obj, "metadata", dict).get("labels") or {}
    service = labels.get(SERVICE_NAME_LABEL) if isinstance(labels, dict) else None
    assert isinstance(obj, dict)  # object_key() checked it
    address_type = obj.get("addressType")
    if not isinstance(address_type, str):
        raise ShapeError(f"addressType: not a string: {address_type!r}")
    endpoints = obj.get("endpoints") or []
    if not isinstance(endpoints, list):
        raise ShapeError("endpoints: not a list")
    ready = [endpoint for endpoint in endpoints if _endpoint_ready(endpoint)]
    addresses, hostnames = _ready_addresses(ready, address_type)
    ports = _ports(obj.get("ports") or [], "ports")
    owner = sys.intern(service) if isinstance(service, str) else None
    return SliceInfo(namespace, name, owner, sys.intern(address_type), len(ready), addresses, hostnames, ports)


def _ready_addresses(ready: list[dict[str, Any]], address_type: str) -> tuple[bytes, tuple[str | None, ...] | None]:
    size = PACKED_BYTES.get(address_type)
    if size is None:
        return b"", None
    packed, hostnames = [], []
    for endpoint in ready:
        found = endpoint.get("addresses") or []
        if not isinstance(found, list) or not found:
            raise ShapeError("endpoints[].addresses: not a non-empty list")
        address = pack_ip(found[0])
        if address is None or len(address) != size:
            raise ShapeError(f"endpoints[].addresses: {found[0]!r} is not an {address_type} address")
        packed.append(address)
        hostname = endpoint.get("hostname")
        hostnames.append(hostname if isinstance(hostname, str) and names.is_label(hostname) else None)
    return b"".join(packed), tuple(hostnames) if any(hostnames) else None


def _endpoint_ready(endpoint: object) -> bool:
    if not isinstance(endpoint, dict):
        raise ShapeError("endpoints[]: not an object")
    conditions = endpoint.get("conditions") or {}
    if not isinstance(conditions, dict):
        raise ShapeError("endpoints[].conditions: not an object")
    return conditions.get("ready") is not False


def ready_count(slices: Iterable[SliceInfo]) -> int:
    """Ready endpoints of one Service across its EndpointSlices.

    A dual-stack Service has one set of slices per address family listing the
    same endpoints, so the count is the largest per-family sum, not the total.
    """
    per_family: dict[str, int] = {}
    for info in slices:
        per_family[info.address_type] = per_family.get(info.address_type, 0) + info.ready
    return max(per_family.values(), default=0)


def shard_record(service: ServiceInfo, slices: Iterable[SliceInfo]) -> tuple[ShardRecord | None, int]:
    """The shard record to store for ``service`` with its EndpointSlices ``slices``
    (``None`` when the Service is skipped), and how many ready endpoints a headless
    Service has beyond the :data:`feddns.records.MAX_ENDPOINTS` the record keeps."""
    if service.record is None:
        return None, 0
    slices = list(slices)
    record = replace(service.record, ready=ready_count(slices))
    if not service.headless:
        return record, 0
    endpoints = headless_endpoints(slices)
    ports: dict[str, Port] = {}
    for info in sorted(slices, key=lambda info: info.name):
        for port in info.ports:
            ports.setdefault(port.name, port)
    kept = endpoints[:MAX_ENDPOINTS]
    return replace(record, endpoints=kept, ports=tuple(ports.values())), len(endpoints) - len(kept)


def headless_endpoints(slices: Iterable[SliceInfo]) -> tuple[Endpoint, ...]:
    """The ready endpoints of a headless Service's slices, without duplicates, sorted
    by address (IPv4 first) so that the record does not change with the slices' order."""
    found: dict[tuple[bytes, str | None], None] = {}
    for info in slices:
        if not info.addresses:
            continue  # no ready endpoint, or an FQDN slice
        width = PACKED_BYTES[info.address_type]
        for i in range(0, len(info.addresses), width):
            hostname = info.hostnames[i // width] if info.hostnames is not None else None
            found[(info.addresses[i : i + width], hostname)] = None
    ordered = sorted(found, key=lambda item: (len(item[0]), item[0], item[1] or ""))
    return tuple(Endpoint(unpack_ip(ip), hostname) for ip, hostname in ordered)


def _field(obj: object, key: str, kind: type, required: bool = True) -> Any:
    value = obj.get(key) if isinstance(obj, dict) else None
    if value is None and not required:
        return kind()
    if not isinstance(value, kind):
        raise ShapeError(f"{key}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _addresses(items: object, where: str) -> tuple[IPAddress, ...]:
    if not isinstance(items, list):
        raise ShapeError(f"{where}: not a list")
    return tuple(dict.fromkeys(_address(item, where) for item in items))


def _address(text: object, where: str) -> IPAddress:
    """``text`` as an address (:func:`feddns.records.parse_ip`: strict, ``inet_pton``);
    raises :class:`ShapeError` naming ``where`` when it is not one."""
    address = parse_ip(text)
    if address is None:
        raise ShapeError(f"{where}: {text!r} is not an IP address")
    return address


def _ports(items: object, where: str = "spec.ports") -> tuple[Port, ...]:
    """Named ports only (docs/reference.md section 2: SRV names a port); unnamed ports are left out.
    ``where`` names the field in errors (a Service's ``spec.ports``, an EndpointSlice's ``ports``)."""
    if not isinstance(items, list):
        raise ShapeError(f"{where}: not a list")
    ports = []
    for item in items:
        if not isinstance(item, dict):
            raise ShapeError(f"{where}[]: not an object")
        name, protocol, number = item.get("name"), item.get("protocol", "TCP"), item.get("port")
        if not name:
            continue
        if not isinstance(name, str) or not names.is_label(name) or protocol not in PROTOCOLS:
            raise ShapeError(f"{where}[]: bad name or protocol {name!r}/{protocol!r}")
        if type(number) is not int or not 1 <= number <= MAX_PORT:
            raise ShapeError(f"{where}[{name}].port: {number!r} is not 1-65535")
        ports.append(Port(name, protocol, number))
    return _shared(tuple(ports))


_PORT_LISTS: dict[tuple[Port, ...], tuple[Port, ...]] = {}
_PORT_LISTS_MAX = 4096
"""Port lists already seen, shared: most Services of a federation have one of a few
(``http/TCP/80``), and each copy costs about 200 bytes of memory. Bounded in entries."""


def _shared(ports: tuple[Port, ...]) -> tuple[Port, ...]:
    known = _PORT_LISTS.get(ports)
    if known is not None:
        return known
    if len(_PORT_LISTS) < _PORT_LISTS_MAX:
        _PORT_LISTS[ports] = ports
    return ports


def describe(record: ShardRecord) -> str:
    """``clusterIP 10.0.3.64, externalIP 104.32.64.128, ports http/TCP/80, ready 3``."""
    return ", ".join(f"{name} {text}" for name, text in _fields(record, record))


def describe_change(old: ShardRecord, new: ShardRecord) -> str:
    """What changed, field by field: ``externalIP 104.32.64.128 -> 104.32.64.130, ready 3 -> 0``."""
    before, after = dict(_fields(old, new)), dict(_fields(new, old))
    changes = [f"{name} {before[name]} -> {after[name]}" for name in before if before[name] != after[name]]
    return ", ".join(changes) or "no change"


def _fields(record: ShardRecord, other: ShardRecord) -> list[tuple[str, str]]:
    """Named, printable fields; lists are printed singular while both sides hold one address."""
    out = []
    for name, mine, theirs in (
        ("clusterIP", record.cluster_ips, other.cluster_ips),
        ("externalIP", record.external_ips, other.external_ips),
    ):
        if max(len(mine), len(theirs)) <= 1:
            out.append((name, str(mine[0]) if mine else "none"))
        else:
            out.append((name + "s", "[" + ", ".join(map(str, mine)) + "]"))
    ports = " ".join(f"{p.name}/{p.protocol}/{p.port}" for p in record.ports)
    out.append(("ports", ports or "none"))
    out.append(("ready", "unknown" if record.ready is None else str(record.ready)))
    if record.policy != DEFAULT_POLICY or other.policy != DEFAULT_POLICY:
        out.append(("policy", describe_policy(record.policy)))
    if record.endpoints is not None or other.endpoints is not None:
        out.append(("endpoints", str(len(record.endpoints or ()))))
    return out


def describe_policy(policy: Policy) -> str:
    """``failover [foo, bar]``, ``weighted (weight 3)``, ``locality``."""
    text = str(policy.name)
    if policy.failover_order:
        text += " [" + ", ".join(policy.failover_order) + "]"
    if policy.weight is not None:
        text += f" (weight {policy.weight})"
    return text
