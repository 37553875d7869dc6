"""The controller's config file (docs/reference.md section 7), validated in full before anything connects.

The file is YAML. Every key is checked here, unknown keys and duplicate keys
are errors, and each error is one line naming the key path, the line and the column
(``clusters[1].zone: must be a string, not an int (3) (line 9, column 5)``), which
``feddns controller`` prints before exiting with status 2 (docs/reference.md section 6).
The file's shape is the pydantic models at the end of this module, read through
:mod:`feddns.configfile`; the values are checked by the functions here, in the words
docs/reference.md gives. Kubeconfig files are read and their
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic.alias_generators import to_camel

from controller.external.config import ExternalConfig, parse_external_config
from feddns import configfile, names
from feddns.errors import ConfigError
from feddns.etcd.credentials import Access, TLSFiles
from feddns.etcd.endpoints import EtcdEndpoints
from feddns.hostport import host_port, not_forwardable, parse_ip_port
from feddns.keys import Layout
from feddns.records import POD_NETWORKS, ClusterRecord, IPNetwork, StaleAction

DEFAULT_LABEL = "federation.feddns.io/name"
DEFAULT_RESYNC_SECONDS = 300.0
DEFAULT_LEASE_SECONDS = 15
MIN_LEASE_SECONDS = 2
"""etcd refuses shorter lease TTLs with its default election timeout."""

MAX_NAMESERVERS = 16
"""The most nameservers the stub-zone API takes in one list (docs/reference.md section 5)."""
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


def _string(value: object, where: str = "") -> str:
    """``value`` when it is a non-empty string; else :class:`ConfigError` (``where`` first when given)."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where + ': ' if where else ''}must be a string, not {configfile.kind(value)}")
    return value


_String = Annotated[str, BeforeValidator(_string)]


def _label(value: object) -> str:
    """A federation, cluster, namespace or Service name: a lowercase DNS label (RFC 1123), its
    length bounded first (63 characters, RFC 1035 section 2.3.4) so that a long one is not quoted."""
    try:
        return names.check_label(_string(value), "name")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


_Label = Annotated[str, BeforeValidator(_label)]


class _Shape(BaseModel):
    """A section of the file: camelCase keys (``staleAfterSeconds``), no others."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel)


class ServiceRef(_Shape):
    """``nameservers.fromService``: the Federated-DNS Service, ``namespace/name`` in ``cluster``."""

    cluster: _Label
    namespace: _Label
    name: _Label


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
    stale_action: StaleAction = StaleAction.DEMOTE
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


CONFIG_SIZE_FLAG = "--max-config-size"
DEFAULT_SIZE_LIMIT = configfile.SizeLimit(configfile.DEFAULT_MAX_CONFIG_BYTES, CONFIG_SIZE_FLAG)
"""The config file's size cap when ``--max-config-size`` is not given: 1 MiB."""


def load_config(path: str, limit: configfile.SizeLimit = DEFAULT_SIZE_LIMIT, *,
                loopback: bool = False) -> ControllerConfig:
    """Read and validate the file at ``path``.

    Raises :class:`ConfigError` (``"<path>: <key path>: <what is wrong> (line L, column C)"``)
    for an unreadable file, bad YAML, a duplicate or unknown key, or a bad value; and
    ``"<path>: N bytes, over the limit of M bytes (--max-config-size); not read"`` for a file
    larger than ``limit``, before reading it. ``loopback``: ``nameservers`` may list loopback
    addresses (``--allow-loopback-nameservers``, as the stub-zone endpoint's flag).
    """
    return configfile.load_file(path, path, lambda raw: parse_config(raw, loopback=loopback), limit)


def parse_config(raw: object, *, loopback: bool = False) -> ControllerConfig:
    """Validate an already decoded document; raises :class:`ConfigError` naming the key.
    ``loopback``: as :func:`load_config`'s."""
    top = configfile.validate(_ConfigFile, raw)
    endpoints, prefix, access = _etcd(top.etcd)
    clusters = _clusters(top.clusters)
    nameservers = _nameservers(top.nameservers, clusters, loopback) if top.nameservers is not None else None
    for i, cluster in enumerate(clusters):
        if cluster.stubzone is not None and nameservers is None:
            raise ConfigError(f"clusters[{i}].stubzone: needs nameservers (the addresses to program there)")
    return ControllerConfig(
        federation=top.federation,
        etcd_endpoints=endpoints,
        etcd_prefix=prefix,
        clusters=clusters,
        etcd_access=access,
        selector=SelectorConfig(label=top.selector.label, service_exports=top.selector.service_exports),
        resync_seconds=top.resync_seconds,
        lease_seconds=top.lease_seconds,
        external=_external(top.external, clusters) if "external" in top.model_fields_set else None,
        nameservers=nameservers,
    )


def _topology(value: object) -> str | None:
    """A cluster's ``zone`` or ``region``: the value of its nodes' ``topology.kubernetes.io/zone``
    or ``/region`` label, a Kubernetes label value, so at most 63 characters (RFC 1035's label
    length, which Kubernetes takes); ``None`` when not given. The characters are not checked:
    only compared, never put in a DNS name or a key."""
    if value is None:
        return None
    text = _string(value)
    if len(text) > names.MAX_LABEL_LENGTH:
        raise ConfigError(f"is {len(text):,} characters long; a zone or region is a Kubernetes label value, "
                          f"at most {names.MAX_LABEL_LENGTH} characters (a DNS label's length, RFC 1035 section 2.3.4)")
    return text


def _positive(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(f"must be a positive number of seconds, not {configfile.kind(value)}")
    return float(value)


def _lease(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_LEASE_SECONDS:
        raise ConfigError(f"must be a whole number of seconds >= {MIN_LEASE_SECONDS}, not {configfile.kind(value)}")
    return value


def _prefix(value: object) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"must be a string, not {configfile.kind(value)}")
    return Layout(value).prefix


def _cidr(value: object) -> IPNetwork:
    try:
        return ipaddress.ip_network(_string(value), strict=True)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def _list_of(what: str) -> BeforeValidator:
    """Refuses a value that is not a list (``non_empty``: or an empty one) with ``must be <what>``."""
    def check(value: object) -> object:
        if not isinstance(value, list):
            raise ConfigError(f"must be {what}, not {configfile.kind(value)}")
        return value
    return BeforeValidator(check)


def _one_of(choices: tuple[str, ...], default: str) -> BeforeValidator:
    def check(value: object) -> object:
        if value is not None and value not in choices:
            raise ConfigError(f"must be one of {', '.join(choices)}, not {configfile.kind(value)}")
        return default if value is None else value
    return BeforeValidator(check)


def _label_key(value: object) -> str:
    if not isinstance(value, str) or not _is_label_key(value):
        raise ConfigError(f"must be a Kubernetes label key, not {configfile.kind(value)}")
    return value


def _true_or_false(value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"must be true or false, not {configfile.kind(value)}")
    return value


def _non_empty(value: object) -> object:
    if isinstance(value, list) and not value:
        raise ConfigError("must be a non-empty list, not a list ([])")
    return value


def _etcd(etcd: "_EtcdFile") -> tuple[tuple[str, ...], str, Access]:
    urls = etcd.endpoints
    if not isinstance(urls, list) or not urls:
        raise ConfigError(f"etcd.endpoints: must be a non-empty list of URLs, not {configfile.kind(urls)}")
    for i, url in enumerate(urls):
        try:
            EtcdEndpoints([_string(url, f"etcd.endpoints[{i}]")])
        except ConfigError as exc:
            raise ConfigError(f"etcd.endpoints[{i}]: {exc}") from exc
    tls = None if etcd.tls is None else TLSFiles(*(None if name is None else Path(name)
                                                   for name in (etcd.tls.cacert, etcd.tls.cert, etcd.tls.key)))
    access = Access(tls=tls, user=etcd.user,
                    password_file=Path(etcd.password_file) if etcd.password_file else None)
    try:
        EtcdEndpoints(list(urls), access=access)
    except ConfigError as exc:
        raise ConfigError(f"etcd: {exc}") from exc
    return tuple(urls), etcd.prefix, access


def _clusters(raw: "list[_ClusterFile]") -> tuple[ClusterConfig, ...]:
    clusters = tuple(_cluster(item, f"clusters[{i}]") for i, item in enumerate(raw))
    seen: set[str] = set()
    for i, cluster in enumerate(clusters):
        if cluster.name in seen:
            raise ConfigError(f"clusters[{i}].name: {cluster.name!r} is listed twice")
        seen.add(cluster.name)
    return clusters


def _cluster(item: "_ClusterFile", where: str) -> ClusterConfig:
    if item.kubeconfig is not None:
        _check_kubeconfig(item.kubeconfig, item.context, where)
    elif item.context is not None:
        raise ConfigError(f"{where}.context: needs {where}.kubeconfig (in-cluster has no contexts)")
    elif not os.environ.get("KUBERNETES_SERVICE_HOST"):
        raise ConfigError(
            f"{where}: no kubeconfig given and not running in a pod (KUBERNETES_SERVICE_HOST is not set)"
        )
    return ClusterConfig(
        name=item.name,
        kubeconfig=item.kubeconfig,
        context=item.context,
        zone=item.zone,
        region=item.region,
        cidrs=tuple(item.cidrs),
        pod_network=item.pod_network,
        stale_after=item.stale_after_seconds,
        stale_action=item.stale_action,
        stubzone=None if item.stubzone is None else _stubzone(item.stubzone, f"{where}.stubzone"),
    )


def _stubzone(section: "_StubzoneFile", where: str) -> StubzoneEndpoint:
    url = section.url
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0]
    if scheme != "https" or not host or rest.rstrip("/") != host:
        raise ConfigError(f"{where}.url: must be https://HOST[:PORT] (the endpoint's address), "
                          f"not {configfile.shown(url)}")
    try:
        names.check_length(host.rsplit(":", 1)[0] if not host.endswith("]") else host, "its host", name=True)
    except ValueError as exc:
        raise ConfigError(f"{where}.url: {exc}") from exc
    files = {}
    for key in ("cert", "key", "ca"):
        path = Path(getattr(section, key))
        if not path.is_file():
            raise ConfigError(f"{where}.{key}: {path} is not a readable file")
        files[key] = path
    return StubzoneEndpoint(url=url.rstrip("/"), cert=files["cert"], key=files["key"], ca=files["ca"])


def _nameservers(raw: object, clusters: tuple[ClusterConfig, ...], loopback: bool) -> NameserversConfig:
    """``nameservers``: a list of ``ip[:port]``, or ``{fromService: {cluster, namespace, name}}``."""
    if isinstance(raw, list):
        if not 0 < len(raw) <= MAX_NAMESERVERS:
            raise ConfigError(f"nameservers: must list 1 to {MAX_NAMESERVERS} addresses, not {len(raw)}")
        addresses = tuple(_nameserver(text, f"nameservers[{i}]", loopback) for i, text in enumerate(raw))
        if len(set(addresses)) != len(addresses):
            raise ConfigError("nameservers: lists an address twice")
        return NameserversConfig(addresses=addresses)
    service = configfile.validate(_NameserversFile, raw, at=("nameservers",)).from_service
    names = [c.name for c in clusters]
    if service.cluster not in names:
        raise ConfigError(f"nameservers.fromService.cluster: {service.cluster!r} is not one of clusters[].name "
                          f"({', '.join(names)})")
    return NameserversConfig(from_service=service)


def _nameserver(text: object, where: str, loopback: bool) -> str:
    """``ip:port`` (``[v6]:port``) of one nameserver; a unicast address a DNS server can forward to,
    loopback only with ``loopback`` (the stub-zone endpoint refuses it otherwise: docs/reference.md section 5)."""
    try:
        address, port = parse_ip_port(_string(text, where), 53)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    reason = not_forwardable(address)
    if reason is not None:
        raise ConfigError(f"{where}: {text!r} is {reason}")
    if address.is_loopback and not loopback:
        raise ConfigError(f"{where}: {text!r} is loopback: each member's cluster DNS would send the queries to "
                          "itself (--allow-loopback-nameservers, for a test on one host)")
    return host_port(str(address), port)


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


def _is_label_key(text: str) -> bool:
    prefix, _, name = text.rpartition("/")
    if prefix and (len(prefix) > MAX_SUBDOMAIN_LENGTH or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(_LABEL_NAME.match(name))


def _external(raw: object, clusters: Any) -> ExternalConfig:
    """Parse ``external`` with the publisher's own parser (controller.external.config); the
    dnsendpoint provider's ``cluster`` must be one of ``clusters``."""
    if not isinstance(raw, dict):
        raise ConfigError(f"external: must be a mapping, not {configfile.kind(raw)}")
    parsed = parse_external_config(raw)
    names = [cluster.name for cluster in clusters]
    if parsed.cluster is not None and parsed.cluster not in names:
        raise ConfigError(f"external.cluster: {parsed.cluster!r} is not one of clusters[].name ({', '.join(names)})")
    return parsed


# The file's shape: one model per section, read by feddns.configfile. Values are checked
# by the validators above, in the words of docs/reference.md section 7; what needs more
# than one key (kubeconfig and context, the etcd URLs and their TLS files) by the
# functions that build the ControllerConfig.

def _optional_string(value: object) -> str | None:
    return None if value is None else _string(value)


_OptionalString = Annotated[str | None, BeforeValidator(_optional_string)]


class _TLSFile(_Shape):
    cacert: _OptionalString = None
    cert: _OptionalString = None
    key: _OptionalString = None


class _EtcdFile(_Shape):
    endpoints: Any
    prefix: Annotated[str, BeforeValidator(_prefix)] = ""
    tls: _TLSFile | None = None
    user: _OptionalString = None
    password_file: _OptionalString = None


class _StubzoneFile(_Shape):
    url: _String
    cert: _String
    key: _String
    ca: _String


class _ClusterFile(_Shape):
    name: _Label
    kubeconfig: _OptionalString = None
    context: _OptionalString = None
    zone: Annotated[str | None, BeforeValidator(_topology)] = None
    region: Annotated[str | None, BeforeValidator(_topology)] = None
    cidrs: Annotated[list[Annotated[IPNetwork, BeforeValidator(_cidr)]], _list_of("a list of CIDRs")] = []
    pod_network: Annotated[str, _one_of(POD_NETWORKS, "isolated")] = "isolated"
    stale_after_seconds: Annotated[float | None, BeforeValidator(lambda v: None if v is None else _positive(v))] = None
    stale_action: Annotated[StaleAction, _one_of(tuple(StaleAction), StaleAction.DEMOTE)] = StaleAction.DEMOTE
    stubzone: _StubzoneFile | None = None


class _SelectorFile(_Shape):
    label: Annotated[str, BeforeValidator(_label_key)] = DEFAULT_LABEL
    service_exports: Annotated[bool, BeforeValidator(_true_or_false)] = False


class _NameserversFile(_Shape):
    from_service: ServiceRef


class _ConfigFile(_Shape):
    federation: _Label
    etcd: _EtcdFile
    # Before validators run last first: a list, then not an empty one.
    clusters: Annotated[list[_ClusterFile], BeforeValidator(_non_empty), _list_of("a non-empty list")]
    selector: _SelectorFile = _SelectorFile()
    resync_seconds: Annotated[float, BeforeValidator(_positive)] = DEFAULT_RESYNC_SECONDS
    lease_seconds: Annotated[int, BeforeValidator(_lease)] = DEFAULT_LEASE_SECONDS
    external: Any = None
    nameservers: Any = None


