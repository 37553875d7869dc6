"""The SkyDNS stub-domain keys and values (docs/stubzone.md, docs/reference.md section 5).

SkyDNS started with ``-stubzones`` reads every key under
``/<path-prefix>/<reversed domain>/dns/stub/`` as a nameserver
``{"host": IP, "port": N}`` (port 0 or missing means 53, non-IP hosts are
skipped) of the stub domain named by the key's directory, and watches that
prefix. For cluster domain ``cluster.local.`` and federation zone
``federation.``, federation F's nameservers are the keys
``/skydns/local/cluster/dns/stub/federation/svc/F/ns<i>``. The same keys and
values are written over etcd's v2 API (:mod:`stubzone.backends.skydns_etcd2`)
and its v3 API (:mod:`stubzone.backends.skydns_etcd3`); this module knows
only the layout and imports neither client.
"""

import ipaddress
import json
import logging
import re
from collections import defaultdict
from collections.abc import Sequence

from feddns import names
from stubzone.model import DEFAULT_PORT, MAX_PORT, Nameserver, StubDomains, StubZone

# The logger keeps the name of the module this one was split from: it is in every log line.
log = logging.getLogger("stubzone.backends.skydns")

MAX_NAMESERVERS = 16
"""The most nameservers one stub domain is given (``ns1`` to ``ns16``)."""
_NS_KEY = re.compile(r"^ns(\d*)$")


def _reversed_labels(zone: str) -> str:
    return "/".join(reversed(zone.rstrip(".").split(".")))


class SkyDNSLayout:
    """Key paths of the stub domains of ``domains`` for a SkyDNS whose ``-domain`` is the cluster domain.

    ``prefix`` is ``/`` plus SkyDNS's ``-path-prefix`` (default ``/skydns``).
    """

    def __init__(self, domains: StubDomains, prefix: str = "/skydns") -> None:
        self.domains = domains
        self.stub_root = f"{prefix.rstrip('/')}/{_reversed_labels(domains.cluster_domain)}/dns/stub/"
        self.federations_dir = f"{self.stub_root}{_reversed_labels(domains.federation_zone)}/svc/"

    def directory(self, federation: str) -> str:
        """``.../dns/stub/federation/svc/F/``: the directory of F's ``ns*`` keys."""
        return f"{self.federations_dir}{federation}/"

    def keys(self, federation: str, nameservers: Sequence[Nameserver]) -> dict[str, bytes]:
        """``{".../F/ns1": value, ...}``: the keys that program F with ``nameservers``, in order."""
        directory = self.directory(federation)
        return {f"{directory}ns{i}": skydns_value(ns) for i, ns in enumerate(nameservers, 1)}

    def split(self, key: str) -> tuple[str, str] | None:
        """``(federation, leaf)`` for a nameserver key ``<federations_dir>F/ns<i>``, else ``None``.

        Keys deeper down are other stub domains (``x.F.svc...``), and leaves not
        named ``ns`` plus digits are not ours; both are ``None``.
        """
        if not key.startswith(self.federations_dir):
            return None
        federation, slash, leaf = key[len(self.federations_dir):].partition("/")
        if not slash or "/" in leaf or not names.is_label(federation):
            return None
        return (federation, leaf) if _NS_KEY.match(leaf) else None

    def zone(self, federation: str, found: dict[str, bytes]) -> StubZone:
        """F's zone from its ``ns*`` keys, in ``ns`` number order; values SkyDNS would skip are skipped."""
        nameservers = []
        for key in sorted(found, key=leaf_order):
            try:
                nameservers.append(from_skydns(found[key]))
            except ValueError as exc:
                log.warning("%s: value %r skipped (SkyDNS skips it too): %s", key, found[key][:200], exc)
        return self.domains.zone(federation, tuple(nameservers))

    def zones(self, found: dict[str, bytes]) -> list[StubZone]:
        """Every federation among ``found``'s keys, sorted by name."""
        by_federation: defaultdict[str, dict[str, bytes]] = defaultdict(dict)
        for key, value in found.items():
            if (split := self.split(key)) is not None:
                by_federation[split[0]][key] = value
        return [self.zone(federation, by_federation[federation]) for federation in sorted(by_federation)]


def leaf_order(key: str) -> tuple[int, str]:
    """``ns2`` before ``ns10``: by the number after ``ns``, then by name."""
    digits = _NS_KEY.match(key.rsplit("/", 1)[-1])
    number = digits.group(1) if digits else ""
    return (int(number) if number else 0, key)


def skydns_value(nameserver: Nameserver) -> bytes:
    """The etcd value SkyDNS reads (its ``msg.Service``): ``{"host":"1.2.3.4","port":53}``."""
    return json.dumps({"host": str(nameserver.address), "port": nameserver.port}, separators=(",", ":")).encode()


def from_skydns(value: bytes) -> Nameserver:
    """Parse a stub key's value as SkyDNS does; raises ``ValueError`` when SkyDNS would skip it."""
    service = json.loads(value)
    if not isinstance(service, dict) or not isinstance(service.get("host"), str):
        raise ValueError("not a JSON object with a string 'host'")  # not TypeError: SkyDNS skips it, a value error
    port = service.get("port") or DEFAULT_PORT
    if not isinstance(port, int) or not 0 < port <= MAX_PORT:
        raise ValueError(f"port {port!r} is not 1-65535")
    return Nameserver(ipaddress.ip_address(service["host"]), port)
