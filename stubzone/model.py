"""What the stub-zone API talks about, whatever the backend (docs/reference.md section 5).

* :class:`Nameserver`: one forwarder, an IP address a cluster DNS can send
  queries to, and a port;
* :class:`StubZone`: what is programmed for one federation;
* :class:`StubDomains`: the naming rule ``F.svc.<federation zone>`` and the
  start-up checks of the zone against the cluster domain.

Everything is normalised here, where it enters; the backends only render and
parse their own formats.
"""

from dataclasses import dataclass
from typing import Any

from feddns import names
from feddns.errors import ConfigError
from feddns.hostport import host_port, not_forwardable, parse_ip_port
from feddns.records import IPAddress

DEFAULT_PORT = 53
MAX_PORT = 65535
"""The highest TCP or UDP port number."""


@dataclass(frozen=True, slots=True)
class Nameserver:
    """One forwarder of a stub domain: an IP address and a UDP/TCP port (1-65535)."""

    address: IPAddress
    port: int = DEFAULT_PORT

    @classmethod
    def parse(cls, text: str) -> "Nameserver":
        """``1.2.3.4``, ``1.2.3.4:5353``, ``2001:db8::1`` or ``[2001:db8::1]:5353``.

        Raises ``ValueError`` (a :class:`feddns.errors.ConfigError` from the
        shared parser) for a hostname, a bad port, non-ASCII text, or an address
        no cluster DNS can forward to (see :meth:`check`).
        """
        if not text.isascii() or text.endswith(":"):
            raise ValueError(f"{text!r} is not an IP address with an optional port (ASCII)")
        address, port = parse_ip_port(text, DEFAULT_PORT)
        return cls(address, port).check(text)

    def check(self, text: str | None = None) -> "Nameserver":
        """``self`` when it is a unicast address a DNS server can forward to; else ``ValueError`` naming
        why (:func:`feddns.hostport.not_forwardable`, the rule the controller's ``nameservers`` share;
        docs/reference.md section 5). ``text`` is how the client wrote it, for the message.
        """
        reason = not_forwardable(self.address)
        if reason is not None:
            raise ValueError(f"{text if text is not None else str(self)!r} is {reason}")
        return self

    def __str__(self) -> str:
        """The canonical text: the port only when it is not 53, IPv6 in brackets then."""
        if self.port == DEFAULT_PORT:
            return str(self.address)
        return self.host_port()

    def host_port(self) -> str:
        """``1.2.3.4:53`` or ``[2001:db8::1]:53``: always with the port."""
        return host_port(str(self.address), self.port)


@dataclass(frozen=True, slots=True)
class StubZone:
    """What is programmed for one federation: its stub domain and nameservers in order."""

    federation: str
    stub_domain: str
    nameservers: tuple[Nameserver, ...]

    def to_json(self) -> dict[str, Any]:
        """The API's ``StubZone`` object (docs/stubzone-openapi.yaml)."""
        return {
            "federation": self.federation,
            "stubDomain": self.stub_domain,
            "nameservers": [str(ns) for ns in self.nameservers],
        }


def _within(name: str, zone: str) -> bool:
    return name == zone or name.endswith("." + zone)


class StubDomains:
    """The stub domains ``F.svc.<federation_zone>`` of one cluster.

    Both zones are normalised (lowercase, trailing dot). Raises
    :class:`ConfigError` naming the flag when a zone is not made of DNS labels,
    or when the federation zone is equal to or under the cluster domain, or
    contains it: the cluster DNS answers its own domain itself, so such a stub
    domain would never be forwarded (and kube-dns refuses the whole config).
    """

    def __init__(self, federation_zone: str = "federation.", cluster_domain: str = "cluster.local.") -> None:
        self.federation_zone = _zone("--federation-zone", federation_zone)
        self.cluster_domain = _zone("--cluster-domain", cluster_domain)
        if _within(self.federation_zone, self.cluster_domain):
            raise ConfigError(f"--federation-zone {self.federation_zone} is equal to or under the cluster domain "
                              f"{self.cluster_domain}, which the cluster DNS answers itself; choose a zone outside it")
        if _within(self.cluster_domain, self.federation_zone):
            raise ConfigError(f"--federation-zone {self.federation_zone} contains the cluster domain "
                              f"{self.cluster_domain}; choose a zone outside it")

    def stub_domain(self, federation: str) -> str:
        """``F.svc.federation.``"""
        return f"{federation}.svc.{self.federation_zone}"

    def federation(self, domain: str) -> str | None:
        """F when ``domain`` (with or without the trailing dot, any case) is ``F.svc.<zone>``, else ``None``."""
        suffix = ".svc." + self.federation_zone
        name = domain.lower().rstrip(".") + "."
        if not name.endswith(suffix):
            return None
        federation = name[: -len(suffix)]
        return federation if names.is_label(federation) else None

    def zone(self, federation: str, nameservers: tuple[Nameserver, ...]) -> StubZone:
        """F's :class:`StubZone` with these nameservers."""
        return StubZone(federation, self.stub_domain(federation), nameservers)


def _zone(flag: str, text: str) -> str:
    try:
        return names.normalize_zone(text)
    except ValueError as exc:
        raise ConfigError(f"{flag} {text!r}: {exc}") from exc


def check_cluster(name: str) -> str:
    """``--cluster``: the name this cluster's queries are tagged with, a DNS label; else :class:`ConfigError`."""
    try:
        return names.check_label(name, "--cluster")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
