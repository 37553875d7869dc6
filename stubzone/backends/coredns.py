"""``--backend coredns``: one CoreDNS server block per federation in a ConfigMap (docs/stubzone.md).

Federation F is the key ``F.server`` of ConfigMap ``kube-system/coredns-feddns``
(``--configmap``), holding the block rendered by
:func:`stubzone.backends.corefile.render`: forward ``F.svc.<zone>`` to the
nameservers, tagging each query with EDNS0 option 0xFEDD = ``--cluster``.
The CoreDNS pods mount that ConfigMap at ``/etc/coredns/feddns`` and their
Corefile has one more line, ``import /etc/coredns/feddns/*.server``; the
``reload`` plugin re-reads the Corefile with its imports and applies a
change without a restart (deploy/cluster-dns/coredns/).

Keys not named ``<label>.server`` are never touched, and no block is written for a stub
domain that another key already serves (CoreDNS would refuse the Corefile: 409). In this
backend's own ConfigMap a hand-edited ``F.server`` is still F's (shown, and replaced by the
next POST); in a ConfigMap of the platform's (:mod:`stubzone.backends.corednscustom`) a key is
the endpoint's only when its text begins with the marker line every block of ours begins with
(:data:`~stubzone.backends.corefile.MARKER`). Every write is a
``resourceVersion``-guarded replace of the whole ConfigMap
(:mod:`stubzone.backends.configmap`), so a concurrent writer's keys survive.
GET reads the ConfigMap and parses the blocks back: what CoreDNS would load.
"""

import argparse
import logging
from collections.abc import Sequence

from feddns import names
from feddns.errors import ConfigError
from stubzone.backends import Backend, NotWrittenHere
from stubzone.backends.configmap import ConfigMapBackend, ConfigMapStore, Data, client_configuration, parse_reference
from stubzone.backends.corefile import (
    COREDNS_CACHE,
    COREDNS_MIN_TTL,
    MARKER,
    CacheSettings,
    CorefileError,
    forward_targets,
    parse,
    render,
)
from stubzone.model import Nameserver, StubDomains, StubZone

log = logging.getLogger(__name__)

DEFAULT_CONFIGMAP = "kube-system/coredns-feddns"
MAX_NAMESERVERS = 15
"""CoreDNS's forward plugin takes at most 15 upstreams."""
SUFFIX = ".server"


def _zones(text: str) -> set[str]:
    """The zones (lower case, no trailing dot, no scheme or port) of the server blocks of ``text``; none
    when it does not parse."""
    try:
        blocks = parse(text).blocks
    except CorefileError:
        return set()
    return {key.split("://")[-1].rsplit(":", 1)[0].rstrip(".").lower() for block in blocks for key in block.keys}


def make(args: argparse.Namespace, domains: StubDomains) -> Backend:
    """The backend of ``--backend coredns``; loads the kubeconfig (or the service account) now."""
    return CoreDNSBackend.from_flags(args, domains, DEFAULT_CONFIGMAP)


class CoreDNSBackend(ConfigMapBackend):
    """Server blocks ``<prefix>F.server`` in one ConfigMap, tagged with ``cluster``."""

    name = "coredns"
    max_nameservers = MAX_NAMESERVERS
    ipv6_ports = True
    prefix = ""
    """What a key starts with before the federation's name; keys without it are never read or written."""
    missing: str | None = None
    """``None``: the first POST creates the ConfigMap; else it is never created (:class:`ObjectStore`)."""
    by_content = False
    """Whether a key is the endpoint's only when its text begins with :data:`MARKER` (a ConfigMap that
    others write to too), not by its name alone (the endpoint's own ConfigMap)."""

    def __init__(self, store: ConfigMapStore, domains: StubDomains, cluster: str, port: int = 53,
                 cache: CacheSettings = COREDNS_CACHE) -> None:
        super().__init__(store, domains)
        self.cluster, self.port, self.cache = cluster, port, cache

    @classmethod
    def from_flags(cls, args: argparse.Namespace, domains: StubDomains, default_configmap: str) -> "CoreDNSBackend":
        """The backend of the flags (``--cluster``, ``--configmap``, ``--kubeconfig``, ``--coredns-port``,
        ``--cache-min-ttl``, ``--cache-serve-stale``);
        raises :class:`ConfigError` for a cluster name CoreDNS would read as hex."""
        cluster = str(args.cluster)
        if cluster.startswith("0x"):
            raise ConfigError(f"--cluster {cluster!r}: CoreDNS reads a value starting with 0x as hex; "
                              "rename the cluster")
        namespace, name = parse_reference(args.configmap or default_configmap)
        configuration = client_configuration(args.kubeconfig, args.kube_context)
        store = ConfigMapStore(namespace, name, configuration, args.backend_timeout, cls.missing)
        cache = CacheSettings(COREDNS_MIN_TTL if args.cache_min_ttl is None else args.cache_min_ttl,
                              args.cache_serve_stale or 0)
        return cls(store, domains, cluster, args.coredns_port or 53, cache)

    def key(self, federation: str) -> str:
        """The ConfigMap key of F's block."""
        return f"{self.prefix}{federation}{SUFFIX}"

    def federation_of(self, key: str) -> str | None:
        """The federation whose block ``key`` is, ``None`` for a key this backend does not write."""
        federation = key.removeprefix(self.prefix).removesuffix(SUFFIX)
        return federation if key == self.key(federation) and names.is_label(federation) else None

    def owns(self, key: str, text: str) -> bool:
        """Whether ConfigMap key ``key`` holding ``text`` is one of this backend's blocks (what ``list`` reads,
        ``--mirror-dir`` copies and ``--remove-all`` deletes)."""
        return self.federation_of(key) is not None and self._ours(text)

    async def list(self) -> list[StubZone]:
        data, _ = await self.store.read()
        found = ((self.federation_of(key), text) for key, text in sorted(data.items()) if self.owns(key, text))
        return sorted((self._zone(federation, text) for federation, text in found if federation is not None),
                      key=lambda zone: zone.federation)

    async def get(self, federation: str) -> StubZone | None:
        data, _ = await self.store.read()
        text = data.get(self.key(federation))
        return self._zone(federation, text) if text is not None and self._ours(text) else None

    async def put(self, federation: str, nameservers: Sequence[Nameserver]) -> tuple[StubZone, bool]:
        key = self.key(federation)
        text = render(federation, self.domains.stub_domain(federation), self.cluster, tuple(nameservers), self.port,
                      self.cache)

        def change(data: Data) -> Data:
            self._check_ours(data, key)
            self._check_zone_free(data, key, self.domains.stub_domain(federation))
            return {**data, key: text}

        before, _ = await self.store.update(change)
        return self.domains.zone(federation, tuple(nameservers)), before.get(key) != text

    async def delete(self, federation: str) -> StubZone | None:
        key = self.key(federation)

        def change(data: Data) -> Data:
            self._check_ours(data, key)
            return {k: v for k, v in data.items() if k != key}

        before, _ = await self.store.update(change)
        return self._zone(federation, before[key]) if key in before else None

    def _ours(self, text: str) -> bool:
        return not self.by_content or text.startswith(MARKER)

    def _check_ours(self, data: Data, key: str) -> None:
        """Raise :class:`NotWrittenHere` when ``key`` holds a block that is not the endpoint's."""
        if key in data and not self._ours(data[key]):
            raise NotWrittenHere(f"{self.where} key {key} was not written by feddns stubzone (it does not begin "
                                 f"with {MARKER!r}); it is left alone")

    def _check_zone_free(self, data: Data, key: str, stub_domain: str) -> None:
        """Raise :class:`NotWrittenHere` when another ``*.server`` key already has a server block for
        ``stub_domain`` (CoreDNS refuses a Corefile that serves one zone and port twice)."""
        wanted = stub_domain.rstrip(".").lower()
        for other, text in data.items():
            if other != key and other.endswith(SUFFIX) and wanted in _zones(text):
                raise NotWrittenHere(f"{self.where} key {other} already has a server block for {stub_domain}; "
                                     f"the endpoint writes only key {key}")

    def _zone(self, federation: str, text: str) -> StubZone:
        """F's zone from its block; a block that does not parse as ours shows no nameservers (and is logged)."""
        try:
            (block,) = parse(text).blocks
            if block.keys != (f"{self.domains.stub_domain(federation)}:{self.port}",):
                raise ValueError(f"server block keys {' '.join(block.keys)} are not {federation}'s stub domain")
            nameservers = forward_targets(block)
        except (CorefileError, ValueError) as exc:
            log.warning("%s key %s is not a block feddns stubzone writes: %s", self.where, self.key(federation), exc)
            nameservers = ()
        return self.domains.zone(federation, nameservers)

