"""The controller's config file (docs/reference.md section 7), validated in full before anything connects.

The file is YAML. Every key is checked here, unknown keys and duplicate keys
are errors, and each error is one line naming the key path
(``clusters[1].zone: must be a string``), which ``feddns controller`` prints
before exiting with status 2 (docs/reference.md section 6). Kubeconfig files are read and their
contexts checked, but nothing is contacted: exec credential plugins and
in-cluster tokens are only used when the controller starts watching.

Extensions to docs/reference.md section 7 (documented in docs/controller.md):
``leaseSeconds`` (the leader election lease TTL); ``nameservers`` and
``clusters[].stubzone`` (the design's "Initial Setup": the controller's leader keeps each
member's stub zone forwarding to Federated-DNS, :mod:`controller.stubzones`).
"""

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from controller.external.config import ExternalConfig, parse_external_config
from feddns import names
from feddns.configmapping import check_mapping
from feddns.errors import ConfigError
from feddns.etcd import Access, Endpoints, TLSFiles
from feddns.hostport import parse_ip_port
from feddns.keys import Layout
from feddns.records import POD_NETWORKS, STALE_ACTIONS, ClusterRecord, IPNetwork

DEFAULT_LABEL = "federation.feddns.io/name"
DEFAULT_RESYNC_SECONDS = 300.0
DEFAULT_LEASE_SECONDS = 15
MIN_LEASE_SECONDS = 2
"""etcd refuses shorter lease TTLs with its default election timeout."""

_TOP_KEYS = ("federation", "etcd", "clusters", "selector", "resyncSeconds", "leaseSeconds", "external",
             "nameservers")
_CLUSTER_KEYS = ("name", "kubeconfig", "context", "zone", "region", "cidrs", "podNetwork", "staleAfterSeconds",
                 "staleAction", "stubzone")
_STUBZONE_KEYS = ("url", "cert", "key", "ca")
_SERVICE_KEYS = ("cluster", "namespace", "name")
MAX_NAMESERVERS = 16
"""The most nameservers the stub-zone API takes in one list (docs/reference.md section 5)."""
_ETCD_KEYS = ("endpoints", "prefix", "tls", "user", "passwordFile")
_TLS_KEYS = ("cacert", "cert", "key")
# A Kubernetes label key: an optional DNS subdomain prefix and "/", then a name
# of up to 63 characters (k8s.io/apimachinery validation.IsQualifiedName).
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
MAX_SUBDOMAIN_LENGTH = 253
"""The longest DNS subdomain a Kubernetes label key prefix may be (RFC 1123)."""
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class StubzoneEndpoint:
    """A member cluster's ``feddns stubzone`` endpoint (``clusters[].stubzone``): its ``url``
    (``https://host[:port]``), and the PEM files the controller presents and trusts there: its
    client certificate ``cert`` and ``key`` (a CN on the endpoint's ``--allow`` list), and the
    ``ca`` that signed the endpoint's server certificate. The files are read at each request
    cycle, so a rotated Secret applies without a restart (docs/operations.md)."""

    url: str
    cert: Path
    key: Path
    ca: Path


@dataclass(frozen=True, slots=True)
class ServiceRef:
    """``nameservers.fromService``: the Federated-DNS Service, ``namespace/name`` in ``cluster``."""

    cluster: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class NameserversConfig:
    """Federated-DNS's addresses (``nameservers``), POSTed to every member's stub-zone endpoint:
    a fixed list ``addresses`` (``ip:port`` text, port 53 when not given; IPv6 in brackets), or
    ``from_service``, whose ``status.loadBalancer.ingress[].ip`` are followed as they change."""

    addresses: tuple[str, ...] = ()
    from_service: ServiceRef | None = None


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """One member cluster (``clusters[]``).

    ``kubeconfig`` is a path, or ``None`` to run in-cluster (the pod's service
    account); ``context`` a context of that kubeconfig (``None``: its
    current-context). ``zone``/``region``/``cidrs``/``pod_network`` go to the
    cluster record; ``pod_network`` is ``"routable"`` when other clusters can
    reach this cluster's pod IPs (then they are answered its headless Services'
    endpoints), else ``"isolated"``. ``stubzone`` is the member's stub-zone endpoint, ``None``
    when the controller does not program its stub zone. ``stale_after`` (seconds, ``None``: never) is
    how long the cluster may be unreachable before its record says ``"stale":
    true``, and ``stale_action`` what ``feddns serve`` then does with its shards
    (``demote``: last tier; ``drop``: left out; docs/reference.md section 2).
    """

    name: str
    kubeconfig: str | None = None
    context: str | None = None
    zone: str | None = None
    region: str | None = None
    cidrs: tuple[IPNetwork, ...] = ()
    pod_network: str = "isolated"
    stale_after: float | None = None
    stale_action: str = "demote"
    stubzone: StubzoneEndpoint | None = None

    def record(self, stale: bool = False) -> ClusterRecord:
        """The cluster record written at ``P/F/_clusters/C`` (docs/reference.md section 4)."""
        return ClusterRecord(zone=self.zone, region=self.region, cidrs=self.cidrs, pod_network=self.pod_network,
                             stale=stale, stale_action=self.stale_action)


@dataclass(frozen=True, slots=True)
class SelectorConfig:
    """Which Services are shards (``selector``)."""

    label: str = DEFAULT_LABEL
    """A Service is a shard when this label's value is the federation name."""
    service_exports: bool = False
    """Also take Services that have an MCS ``ServiceExport`` of the same name."""


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The whole validated file.

    ``resync_seconds`` is the period of the full etcd comparison (seconds);
    ``lease_seconds`` the election lease TTL (seconds); ``external`` a
    ``controller.external.config.ExternalConfig`` or ``None``; ``etcd_access`` the TLS
    files and user of ``etcd.tls``, ``etcd.user`` and ``etcd.passwordFile``.
    """

    federation: str
    etcd_endpoints: tuple[str, ...]
    etcd_prefix: str
    clusters: tuple[ClusterConfig, ...]
    etcd_access: Access = field(default_factory=Access)
    selector: SelectorConfig = SelectorConfig()
    resync_seconds: float = DEFAULT_RESYNC_SECONDS
    lease_seconds: int = DEFAULT_LEASE_SECONDS
    external: ExternalConfig | None = None
    nameservers: NameserversConfig | None = None

    @property
    def layout(self) -> Layout:
        """The etcd key layout under ``etcd.prefix``."""
        return Layout(self.etcd_prefix)

    @property
    def etcd_timeout(self) -> float:
        """Seconds an etcd call may take: a third of the lease, from 1 to 5 s. Every timing
        that matters while etcd stalls (call timeouts, gRPC keep-alive, lease keep-alive)
        is then a fraction of the lease, so a stall of 80% of a 5 s lease plays out as one
        of 80% of a 15 s lease, three times faster (tests/controller/test_faults.py)."""
        return min(5.0, max(1.0, self.lease_seconds / 3))


def load_config(path: str) -> ControllerConfig:
    """Read and validate the file at ``path``.

    Raises :class:`ConfigError` (``"<path>: <key path>: <what is wrong>"``) for
    an unreadable file, bad YAML, a duplicate or unknown key, or a bad value.
    """
    try:
        with open(path, encoding="utf-8") as stream:
            text = stream.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
    try:
        return parse_config(_load_yaml(text))
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{path}: nested too deeply") from exc


def parse_config(raw: object) -> ControllerConfig:
    """Validate an already decoded document; raises :class:`ConfigError` naming the key."""
    top = _mapping(raw, "", _TOP_KEYS)
    federation = _label(_required(top, "federation", ""), "federation")
    endpoints, prefix, access = _etcd(_required(top, "etcd", ""))
    clusters = _clusters(_required(top, "clusters", ""))
    nameservers = _nameservers(top["nameservers"], clusters) if top.get("nameservers") is not None else None
    for i, cluster in enumerate(clusters):
        if cluster.stubzone is not None and nameservers is None:
            raise ConfigError(f"clusters[{i}].stubzone: needs nameservers (the addresses to program there)")
    return ControllerConfig(
        federation=federation,
        etcd_endpoints=endpoints,
        etcd_prefix=prefix,
        clusters=clusters,
        etcd_access=access,
        selector=_selector(top.get("selector", {})),
        resync_seconds=_positive(top.get("resyncSeconds", DEFAULT_RESYNC_SECONDS), "resyncSeconds"),
        lease_seconds=_lease(top.get("leaseSeconds", DEFAULT_LEASE_SECONDS)),
        external=_external(top["external"], clusters) if "external" in top else None,
        nameservers=nameservers,
    )


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses duplicate mapping keys (PyYAML keeps the last)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise ConfigError(f"line {key_node.start_mark.line + 1}: duplicate key {key!r}")
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _load_yaml(text: str) -> object:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # safe: a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"not valid YAML: {' '.join(str(exc).split())}") from exc


def _where(parent: str, key: str) -> str:
    return f"{parent}.{key}" if parent else key


def _mapping(raw: object, where: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    return check_mapping(
        raw, allowed,
        not_a_mapping=lambda value: f"{where or 'the file'}: must be a mapping, not {_kind(value)}",
        unknown_key=lambda key: f"{_where(where, key)}: unknown key (known: {', '.join(allowed)})",
    )


def _required(raw: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in raw:
        raise ConfigError(f"{_where(where, key)}: is required")
    return raw[key]


def _kind(value: object) -> str:
    return "nothing" if value is None else f"a {type(value).__name__} ({value!r})"


def _string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: must be a string, not {_kind(value)}")
    return value


def _optional_string(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    return None if raw.get(key) is None else _string(raw[key], _where(where, key))


def _label(value: object, where: str) -> str:
    try:
        return names.check_label(_string(value, where), "name")
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _positive(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"{where}: must be a positive number of seconds, not {_kind(value)}")
    return float(value)


def _lease(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_LEASE_SECONDS:
        raise ConfigError(
            f"leaseSeconds: must be a whole number of seconds >= {MIN_LEASE_SECONDS}, not {_kind(value)}"
        )
    return value


def _etcd(raw: object) -> tuple[tuple[str, ...], str, Access]:
    etcd = _mapping(raw, "etcd", _ETCD_KEYS)
    urls = _required(etcd, "endpoints", "etcd")
    if not isinstance(urls, list) or not urls:
        raise ConfigError(f"etcd.endpoints: must be a non-empty list of URLs, not {_kind(urls)}")
    for i, url in enumerate(urls):
        try:
            Endpoints([_string(url, f"etcd.endpoints[{i}]")])
        except ConfigError as exc:
            raise ConfigError(f"etcd.endpoints[{i}]: {exc}") from exc
    access = _etcd_access(etcd)
    try:
        Endpoints(list(urls), access=access)
    except ConfigError as exc:
        raise ConfigError(f"etcd: {exc}") from exc
    prefix = etcd.get("prefix", "")
    if not isinstance(prefix, str):
        raise ConfigError(f"etcd.prefix: must be a string, not {_kind(prefix)}")
    try:
        prefix = Layout(prefix).prefix
    except ConfigError as exc:
        raise ConfigError(f"etcd.prefix: {exc}") from exc
    return tuple(urls), prefix, access


def _etcd_access(etcd: Mapping[str, Any]) -> Access:
    """``etcd.tls``, ``etcd.user`` and ``etcd.passwordFile`` (else ``$FEDDNS_ETCD_PASSWORD``)."""
    tls = None
    if etcd.get("tls") is not None:
        section = _mapping(etcd["tls"], "etcd.tls", _TLS_KEYS)
        files = {key: _optional_string(section, key, "etcd.tls") for key in _TLS_KEYS}
        tls = TLSFiles(*(None if files[key] is None else Path(str(files[key])) for key in _TLS_KEYS))
    password_file = _optional_string(etcd, "passwordFile", "etcd")
    return Access(tls=tls, user=_optional_string(etcd, "user", "etcd"),
                  password_file=Path(password_file) if password_file else None)


def _clusters(raw: object) -> tuple[ClusterConfig, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"clusters: must be a non-empty list, not {_kind(raw)}")
    clusters = tuple(_cluster(item, f"clusters[{i}]") for i, item in enumerate(raw))
    seen: set[str] = set()
    for i, cluster in enumerate(clusters):
        if cluster.name in seen:
            raise ConfigError(f"clusters[{i}].name: {cluster.name!r} is listed twice")
        seen.add(cluster.name)
    return clusters


def _cluster(raw: object, where: str) -> ClusterConfig:
    item = _mapping(raw, where, _CLUSTER_KEYS)
    name = _label(_required(item, "name", where), f"{where}.name")
    kubeconfig = _optional_string(item, "kubeconfig", where)
    context = _optional_string(item, "context", where)
    if kubeconfig is not None:
        _check_kubeconfig(kubeconfig, context, where)
    elif context is not None:
        raise ConfigError(f"{where}.context: needs {where}.kubeconfig (in-cluster has no contexts)")
    elif not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise ConfigError(
            f"{where}: no kubeconfig given and not running in a pod (KUBERNETES_SERVICE_HOST is not set)"
        )
    return ClusterConfig(
        name=name,
        kubeconfig=kubeconfig,
        context=context,
        zone=_optional_string(item, "zone", where),
        region=_optional_string(item, "region", where),
        cidrs=_cidrs(item.get("cidrs", []), f"{where}.cidrs"),
        pod_network=_choice(item, "podNetwork", POD_NETWORKS, where) or "isolated",
        stale_after=None if item.get("staleAfterSeconds") is None else _positive(
            item["staleAfterSeconds"], f"{where}.staleAfterSeconds"),
        stale_action=_choice(item, "staleAction", STALE_ACTIONS, where) or "demote",
        stubzone=_stubzone(item["stubzone"], f"{where}.stubzone") if item.get("stubzone") is not None else None,
    )


def _stubzone(raw: object, where: str) -> StubzoneEndpoint:
    section = _mapping(raw, where, _STUBZONE_KEYS)
    url = _string(_required(section, "url", where), f"{where}.url")
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0]
    if scheme != "https" or not host or rest.rstrip("/") != host:
        raise ConfigError(f"{where}.url: must be https://HOST[:PORT] (the endpoint's address), not {url!r}")
    files = {}
    for key in ("cert", "key", "ca"):
        path = Path(_string(_required(section, key, where), _where(where, key)))
        if not path.is_file():
            raise ConfigError(f"{where}.{key}: {path} is not a readable file")
        files[key] = path
    return StubzoneEndpoint(url=url.rstrip("/"), cert=files["cert"], key=files["key"], ca=files["ca"])


def _nameservers(raw: object, clusters: tuple[ClusterConfig, ...]) -> NameserversConfig:
    """``nameservers``: a list of ``ip[:port]``, or ``{fromService: {cluster, namespace, name}}``."""
    if isinstance(raw, list):
        if not 0 < len(raw) <= MAX_NAMESERVERS:
            raise ConfigError(f"nameservers: must list 1 to {MAX_NAMESERVERS} addresses, not {len(raw)}")
        addresses = tuple(_nameserver(text, f"nameservers[{i}]") for i, text in enumerate(raw))
        if len(set(addresses)) != len(addresses):
            raise ConfigError("nameservers: lists an address twice")
        return NameserversConfig(addresses=addresses)
    section = _mapping(raw, "nameservers", ("fromService",))
    where = "nameservers.fromService"
    service = _mapping(_required(section, "fromService", "nameservers"), where, _SERVICE_KEYS)
    cluster, namespace, name = (_string(_required(service, key, where), _where(where, key)) for key in _SERVICE_KEYS)
    names = [c.name for c in clusters]
    if cluster not in names:
        raise ConfigError(f"{where}.cluster: {cluster!r} is not one of clusters[].name ({', '.join(names)})")
    return NameserversConfig(from_service=ServiceRef(cluster, namespace, name))


def _nameserver(text: object, where: str) -> str:
    """``ip:port`` (``[v6]:port``) of one nameserver; a unicast address a DNS server can forward to."""
    try:
        address, port = parse_ip_port(_string(text, where), 53)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    mapped = getattr(address, "ipv4_mapped", None)
    if address.is_unspecified or address.is_multicast or address.is_link_local or mapped is not None:
        raise ConfigError(f"{where}: {text!r} is not a unicast address a DNS server can forward to")
    return f"[{address}]:{port}" if isinstance(address, ipaddress.IPv6Address) else f"{address}:{port}"


def _choice(raw: Mapping[str, Any], key: str, choices: tuple[str, ...], where: str) -> str | None:
    value = raw.get(key)
    if value is not None and value not in choices:
        raise ConfigError(f"{where}.{key}: must be one of {', '.join(choices)}, not {_kind(value)}")
    return value


def _cidrs(raw: object, where: str) -> tuple[IPNetwork, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: must be a list of CIDRs, not {_kind(raw)}")
    networks = []
    for i, text in enumerate(raw):
        try:
            networks.append(ipaddress.ip_network(_string(text, f"{where}[{i}]"), strict=True))
        except ValueError as exc:
            raise ConfigError(f"{where}[{i}]: {exc}") from exc
    return tuple(networks)


def _check_kubeconfig(path: str, context: str | None, where: str) -> None:
    """Read the kubeconfig as YAML and check that the context exists (no network)."""
    try:
        with open(path, encoding="utf-8") as stream:
            doc = yaml.safe_load(stream)
    except OSError as exc:
        raise ConfigError(f"{where}.kubeconfig: cannot read {path}: {exc.strerror}") from exc
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as exc:
        raise ConfigError(f"{where}.kubeconfig: {path} is not valid YAML") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("contexts") or [], list):
        raise ConfigError(f"{where}.kubeconfig: {path} is not a kubeconfig (not a mapping)")
    contexts = {c.get("name") for c in doc.get("contexts") or [] if isinstance(c, dict)}
    wanted = context or doc.get("current-context")
    if not wanted:
        raise ConfigError(f"{where}.context: {path} has no current-context; name one")
    if wanted not in contexts:
        key = "context" if context else "kubeconfig"
        raise ConfigError(f"{where}.{key}: context {wanted!r} is not in {path}")


def _selector(raw: object) -> SelectorConfig:
    selector = _mapping(raw, "selector", ("label", "serviceExports"))
    label = selector.get("label", DEFAULT_LABEL)
    if not isinstance(label, str) or not _is_label_key(label):
        raise ConfigError(f"selector.label: must be a Kubernetes label key, not {_kind(label)}")
    exports = selector.get("serviceExports", False)
    if not isinstance(exports, bool):
        raise ConfigError(f"selector.serviceExports: must be true or false, not {_kind(exports)}")
    return SelectorConfig(label=label, service_exports=exports)


def _is_label_key(text: str) -> bool:
    prefix, _, name = text.rpartition("/")
    if prefix and (len(prefix) > MAX_SUBDOMAIN_LENGTH or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(_LABEL_NAME.match(name))


def _external(raw: object, clusters: Any) -> ExternalConfig:
    """Parse ``external`` with the publisher's own parser (controller.external.config); the
    dnsendpoint provider's ``cluster`` must be one of ``clusters``."""
    if not isinstance(raw, dict):
        raise ConfigError(f"external: must be a mapping, not {_kind(raw)}")
    parsed = parse_external_config(raw)
    names = [cluster.name for cluster in clusters]
    if parsed.cluster is not None and parsed.cluster not in names:
        raise ConfigError(f"external.cluster: {parsed.cluster!r} is not one of clusters[].name ({', '.join(names)})")
    return parsed
