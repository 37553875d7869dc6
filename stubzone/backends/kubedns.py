"""``--backend kube-dns``: ``stubDomains`` in the ``kube-system/kube-dns`` ConfigMap (docs/stubzone.md).

kube-dns reads its ConfigMap's ``stubDomains`` key, a JSON object from a
domain (no trailing dot) to a list of ``ip`` or ``ip:port``, and has dnsmasq
forward each domain to those servers (``--server=/domain/ip#port``). This
backend merges the entry ``F.svc.<zone>`` into that object and writes it back
with a ``resourceVersion`` guard (:mod:`stubzone.backends.configmap`); every
other key of the ConfigMap (``upstreamNameservers``, ``federations``) and
every other stub domain is kept as read.

dnsmasq cannot add an EDNS0 option, so these queries reach Federated-DNS
untagged: it tells the cluster apart by the query's source address in the
cluster record's ``cidrs`` (docs/reference.md section 3).

An IPv6 nameserver on a port other than 53 is refused (400): kube-dns's
config validation takes only ``[2001:db8::1]:5353`` for it (``net.SplitHostPort``;
``2001:db8::1#5353`` is "invalid nameserver"), and its dnsmasq-nanny turns that
into ``--server=/domain/[2001:db8::1]#5353``, which dnsmasq (2.90, the version
kube-dns's image builds) refuses as "bad command line options": dnsmasq does
not start, and the nanny exits with it. So no written form forwards there;
``ip:port`` becomes ``ip#port`` and works for IPv4, and a bare IPv6 address
(port 53) passes through unchanged.

kube-dns refuses its whole configuration when one entry is invalid, so a
``stubDomains`` value that does not parse is never merged into: the request
answers 503 naming it, and nothing is written.
"""

import argparse
import json
import logging
from collections.abc import Sequence
from typing import Any

from stubzone.backends import Backend, BackendUnavailable
from stubzone.backends.configmap import ConfigMapBackend, ConfigMapStore, Data, client_configuration, parse_reference
from stubzone.model import Nameserver, StubDomains, StubZone

log = logging.getLogger(__name__)

DEFAULT_CONFIGMAP = "kube-system/kube-dns"
KEY = "stubDomains"
MAX_NAMESERVERS = 16


def make(args: argparse.Namespace, domains: StubDomains) -> Backend:
    """The backend of ``--backend kube-dns``; loads the kubeconfig (or the service account) now."""
    namespace, name = parse_reference(args.configmap or DEFAULT_CONFIGMAP)
    configuration = client_configuration(args.kubeconfig, args.kube_context)
    return KubeDNSBackend(ConfigMapStore(namespace, name, configuration, args.backend_timeout), domains)


class KubeDNSBackend(ConfigMapBackend):
    """The federations' entries of ``stubDomains`` in kube-dns's ConfigMap."""

    name = "kube-dns"
    max_nameservers = MAX_NAMESERVERS
    ipv6_ports = False

    async def list(self) -> list[StubZone]:
        data, _ = await self.store.read()
        return sorted(self._zones(data).values(), key=lambda zone: zone.federation)

    async def get(self, federation: str) -> StubZone | None:
        data, _ = await self.store.read()
        return self._zones(data).get(federation)

    async def put(self, federation: str, nameservers: Sequence[Nameserver]) -> tuple[StubZone, bool]:
        entry = [str(ns) for ns in nameservers]

        def change(data: Data) -> Data:
            stubs = {k: v for k, v in self._stub_domains(data).items() if self.domains.federation(k) != federation}
            stubs[self.domains.stub_domain(federation).rstrip(".")] = entry
            return {**data, KEY: json.dumps(stubs)}

        before, _ = await self.store.update(change)
        was = self._zones(before).get(federation)
        changed = was is None or [str(ns) for ns in was.nameservers] != entry
        return self.domains.zone(federation, tuple(nameservers)), changed

    async def delete(self, federation: str) -> StubZone | None:
        def change(data: Data) -> Data:
            stubs = self._stub_domains(data)
            kept = {k: v for k, v in stubs.items() if self.domains.federation(k) != federation}
            if kept == stubs:
                return data
            rest = {k: v for k, v in data.items() if k != KEY}
            return {**rest, KEY: json.dumps(kept)} if kept else rest

        before, _ = await self.store.update(change)
        return self._zones(before).get(federation)

    def _stub_domains(self, data: Data) -> dict[str, Any]:
        """The parsed ``stubDomains`` (``{}`` when absent or blank); 503 when it is not a JSON object of lists."""
        text = data.get(KEY, "").strip()
        if not text:
            return {}
        try:
            stubs = json.loads(text)
        except ValueError as exc:
            raise BackendUnavailable(f"{self.where}: {KEY} is not JSON ({exc}); fix it by hand") from exc
        if not isinstance(stubs, dict) or not all(isinstance(v, list) for v in stubs.values()):
            raise BackendUnavailable(f"{self.where}: {KEY} is not a JSON object of lists; fix it by hand")
        return stubs

    def _zones(self, data: Data) -> dict[str, StubZone]:
        """The federations' stub domains among ``stubDomains``, by federation."""
        zones = {}
        for domain, servers in self._stub_domains(data).items():
            federation = self.domains.federation(domain)
            if federation is not None:
                zones[federation] = self.domains.zone(federation, self._nameservers(domain, servers))
        return zones
