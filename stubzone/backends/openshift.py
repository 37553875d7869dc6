"""``--backend openshift``: forwarding entries of OpenShift's DNS operator, ``DNS/default`` ``spec.servers``.

On OpenShift the DNS operator owns CoreDNS, its DaemonSet and its ConfigMap,
and undoes any edit to them. The one supported place for a forwarded zone is
the cluster-scoped ``dns.operator.openshift.io/v1`` object ``DNS`` named
``default``: each entry of ``spec.servers`` becomes one server block of the
Corefile the operator renders (openshift/cluster-dns-operator,
pkg/operator/controller/controller_dns_configmap.go; the field's rules are
the CRD's, operator/v1/zz_generated.crd-manifests/0000_70_dns_00_dnses.crd.yaml
of https://github.com/openshift/api).

Federation F is the entry this backend names ``feddns-F``::

    {"name": "feddns-F", "zones": ["F.svc.federation"],
     "forwardPlugin": {"upstreams": ["IP:PORT", ...], "policy": "Random"}}

(``zones`` without the trailing dot: the CRD asks for RFC 1123 subdomains).
Entries with other names are the customer's: kept as read, in place and in
order. A customer's entry for F's own zone makes a POST answer 409: the
operator would render two blocks for one zone, which CoreDNS refuses. The
write is the ``resourceVersion``-guarded replace of
:mod:`stubzone.backends.configmap` (GET, change, PUT, again on 409); the
operator creates ``DNS/default`` and the endpoint never does.

The operator's ``forward`` adds no EDNS0 option, so these queries reach
Federated-DNS untagged (like kube-dns's): it finds the cluster by the query's
source address in the cluster record's ``cidrs`` (docs/reference.md section 3).
"""

import argparse
from collections.abc import Sequence
from typing import Any

import kubernetes.client

from feddns import names
from stubzone.backends import Backend, NotWrittenHere
from stubzone.backends.configmap import ObjectBackend, ObjectStore, client_configuration
from stubzone.model import Nameserver, StubDomains, StubZone

GROUP, VERSION, PLURAL = "operator.openshift.io", "v1", "dnses"
DNS_NAME = "default"
"""The one ``DNS`` object the operator reads."""
MAX_NAMESERVERS = 15
"""``spec.servers[].forwardPlugin.upstreams`` takes at most 15 items (the CRD's ``maxItems``)."""
NAME_PREFIX = "feddns-"
POLICY = "Random"
"""The CRD's default ``forwardPlugin.policy``, written out so that a read-back compares equal."""
MISSING = ("the OpenShift DNS operator creates it (is this an OpenShift cluster?); feddns stubzone never creates it")

Server = dict[str, Any]
Servers = list[Server]


def make(args: argparse.Namespace, domains: StubDomains) -> Backend:
    """The backend of ``--backend openshift``; loads the kubeconfig (or the service account) now."""
    configuration = client_configuration(args.kubeconfig, args.kube_context)
    return OpenShiftBackend(DNSStore(configuration, args.backend_timeout), domains)


class DNSStore(ObjectStore[Servers]):
    """``DNS/default`` of ``operator.openshift.io/v1`` (cluster-scoped); a change sees its ``spec.servers``."""

    def __init__(self, configuration: kubernetes.client.Configuration, timeout: float, name: str = DNS_NAME) -> None:
        super().__init__(configuration, timeout, MISSING)
        self.name = name
        self._api = kubernetes.client.CustomObjectsApi(self._api_client)

    @property
    def where(self) -> str:
        return f"DNS {self.name} ({PLURAL}.{GROUP})"

    def view(self, obj: dict[str, Any] | None) -> Servers:
        servers = ((obj or {}).get("spec") or {}).get("servers") or []
        return [server for server in servers if isinstance(server, dict)]

    def with_view(self, obj: dict[str, Any], view: Servers) -> dict[str, Any]:
        body = dict(obj)
        spec = dict(body.get("spec") or {})
        if view or "servers" in spec:
            spec["servers"] = view
        body["spec"] = spec
        return body

    def _read(self, **request: Any) -> Any:
        return self._api.get_cluster_custom_object(GROUP, VERSION, PLURAL, self.name, **request)

    def _put(self, body: dict[str, Any], **request: Any) -> Any:
        return self._api.replace_cluster_custom_object(GROUP, VERSION, PLURAL, self.name, body, **request)


class OpenShiftBackend(ObjectBackend[Servers]):
    """The entries ``feddns-F`` of ``DNS/default``'s ``spec.servers``; untagged."""

    name = "openshift"
    max_nameservers = MAX_NAMESERVERS
    ipv6_ports = True

    def entry(self, federation: str, nameservers: Sequence[Nameserver]) -> Server:
        """F's entry of ``spec.servers`` as this backend writes it."""
        return {"name": NAME_PREFIX + federation, "zones": [self._zone_name(federation)],
                "forwardPlugin": {"upstreams": [ns.host_port() for ns in nameservers], "policy": POLICY}}

    async def list(self) -> list[StubZone]:
        servers, _ = await self.store.read()
        zones = (self._zone(server) for server in servers)
        return sorted((zone for zone in zones if zone is not None), key=lambda zone: zone.federation)

    async def get(self, federation: str) -> StubZone | None:
        servers, _ = await self.store.read()
        found = _find(servers, NAME_PREFIX + federation)
        return self._zone(servers[found]) if found is not None else None

    async def put(self, federation: str, nameservers: Sequence[Nameserver]) -> tuple[StubZone, bool]:
        entry = self.entry(federation, nameservers)

        def change(servers: Servers) -> Servers:
            self._check_zone_free(servers, federation)
            self._check_ours(servers, federation)
            found = _find(servers, entry["name"])
            if found is None:
                return [*servers, entry]
            if not _same(servers[found], entry):
                servers[found] = entry
            return servers

        before, after = await self.store.update(change)
        return self.domains.zone(federation, tuple(nameservers)), before != after

    async def delete(self, federation: str) -> StubZone | None:
        name = NAME_PREFIX + federation

        def change(servers: Servers) -> Servers:
            self._check_ours(servers, federation)
            return [server for server in servers if server.get("name") != name]

        before, _ = await self.store.update(change)
        found = _find(before, name)
        return self._zone(before[found]) if found is not None else None

    def _zone_name(self, federation: str) -> str:
        return self.domains.stub_domain(federation).rstrip(".")

    def _check_zone_free(self, servers: Servers, federation: str) -> None:
        """Raise :class:`NotWrittenHere` when an entry not named ``feddns-F`` serves F's zone."""
        zone = self._zone_name(federation).lower()
        for server in servers:
            zones = [str(z).rstrip(".").lower() for z in server.get("zones") or []]
            if server.get("name") != NAME_PREFIX + federation and zone in zones:
                raise NotWrittenHere(f"{self.where}: spec.servers entry {server.get('name')!r} already forwards "
                                     f"{zone}; the endpoint writes only entry {NAME_PREFIX + federation!r}")

    def _check_ours(self, servers: Servers, federation: str) -> None:
        """Raise :class:`NotWrittenHere` when the entry named ``feddns-F`` forwards other zones than F's
        stub domain: someone else's entry that happens to have the name."""
        found = _find(servers, NAME_PREFIX + federation)
        if found is not None and not self._owned(servers[found], federation):
            raise NotWrittenHere(f"{self.where}: spec.servers entry {NAME_PREFIX + federation!r} forwards "
                                 f"{servers[found].get('zones')}, not {self._zone_name(federation)}: it was not "
                                 "written by feddns stubzone and is left alone")

    def _owned(self, server: Server, federation: str) -> bool:
        return [str(z).rstrip(".").lower() for z in server.get("zones") or []] == [self._zone_name(federation).lower()]

    def _zone(self, server: Server) -> StubZone | None:
        """The federation's zone of an entry named ``feddns-F`` that forwards F's stub domain only, ``None`` for
        any other entry."""
        name = str(server.get("name") or "")
        federation = name.removeprefix(NAME_PREFIX)
        if not name.startswith(NAME_PREFIX) or not names.is_label(federation) or not self._owned(server, federation):
            return None
        upstreams = (server.get("forwardPlugin") or {}).get("upstreams") or []
        return self.domains.zone(federation, self._nameservers(f"entry {name}", upstreams))


def _find(servers: Servers, name: str) -> int | None:
    return next((i for i, server in enumerate(servers) if server.get("name") == name), None)


def _same(stored: Server, entry: Server) -> bool:
    """Whether ``stored`` says what ``entry`` says (fields the API server defaulted in it do not count)."""
    forward = stored.get("forwardPlugin") or {}
    return bool(stored.get("zones") == entry["zones"]
            and forward.get("upstreams") == entry["forwardPlugin"]["upstreams"]
            and forward.get("policy", POLICY) == POLICY)
