"""Who a verified client is, and whether ``--allow`` lets it in (docs/reference.md section 5).

TLS has already checked the chain against ``--client-ca`` (and OpenSSL the
``clientAuth`` purpose); this module only authorizes. A client is identified by
its certificate's subject common name and its subject alternative names
(RFC 5280 section 4.2.1.6): DNS names, IP addresses, URIs and e-mail
addresses. It is allowed when any of them equals an ``--allow`` entry.
Comparison follows each name's own rules: DNS names ignore case and a
trailing dot, IP addresses compare as addresses (``2001:db8::1`` equals
``2001:0db8:0:0::1``), the rest are exact strings.

The listener (:mod:`feddns.https`) asks :func:`authorizer` about each client
right after its handshake, so a client outside ``--allow`` gets its 403 at
once and never sends a request, nor holds a connection slot of the allowed.
"""

import ipaddress
import ssl
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.x509.oid import NameOID

from feddns.errors import ConfigError
from feddns.https import Authorize
from feddns.records import IPAddress, parse_ip


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """The names in one client certificate; every tuple may be empty."""

    common_names: tuple[str, ...]
    dns_names: tuple[str, ...]
    ip_addresses: tuple[IPAddress, ...]
    others: tuple[str, ...]
    """URIs and e-mail addresses, compared exactly."""

    @classmethod
    def from_der(cls, der: bytes) -> "ClientIdentity":
        """The identity in a DER certificate (``SSLObject.getpeercert(binary_form=True)``)."""
        certificate = x509.load_der_x509_certificate(der)
        common_names = tuple(
            str(attribute.value) for attribute in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
        )
        try:
            sans = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return cls(common_names, (), (), ())
        return cls(
            common_names,
            tuple(sans.get_values_for_type(x509.DNSName)),
            tuple(
                ip for ip in sans.get_values_for_type(x509.IPAddress)
                if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address)
            ),
            tuple(sans.get_values_for_type(x509.UniformResourceIdentifier) + sans.get_values_for_type(x509.RFC822Name)),
        )

    def __str__(self) -> str:
        """How logs name the client: ``CN=...`` or, without a CN, its first SAN."""
        if self.common_names:
            return f"CN={self.common_names[0]}"
        names = [*self.dns_names, *map(str, self.ip_addresses), *self.others]
        return f"SAN={names[0]}" if names else "(no name)"


def _dns_key(name: str) -> str:
    return name.rstrip(".").lower()


class AllowList:
    """The client identities of ``--allow`` (at least one).

    An entry matches a CN or URI or e-mail SAN exactly, or a DNS SAN ignoring
    case; an entry that parses as an IP address also matches IP SANs.
    Raises :class:`ConfigError` for an empty list, or an empty entry or one
    with whitespace or control characters (a typo would lock everybody out).
    """

    def __init__(self, entries: Sequence[str]) -> None:
        if not entries:
            raise ConfigError("at least one --allow is needed (a client certificate's CN or SAN)")
        self.entries = tuple(entries)
        self._ips: set[IPAddress] = set()
        self._exact: set[str] = set()
        for entry in entries:
            if not entry or not entry.isprintable() or any(c.isspace() for c in entry):
                raise ConfigError(f"--allow {entry!r} must be a non-empty name without spaces")
            self._exact.add(entry)
            address = parse_ip(entry)
            if address is not None:  # else not an address: matches names only
                self._ips.add(address)
        self._dns = {_dns_key(entry) for entry in self._exact}

    def match(self, identity: ClientIdentity) -> str | None:
        """The first name of ``identity`` that is allowed, or ``None``."""
        for name in (*identity.common_names, *identity.others):
            if name in self._exact:
                return name
        for dns_name in identity.dns_names:
            if _dns_key(dns_name) in self._dns:
                return dns_name
        for ip in identity.ip_addresses:
            if ip in self._ips:
                return str(ip)
        return None


def authorizer(allow: AllowList) -> Authorize:
    """What the listener asks after each handshake: ``None`` for a client ``allow`` lets in, else why not."""
    def authorize(ssl_object: ssl.SSLObject) -> str | None:
        der = ssl_object.getpeercert(binary_form=True)
        identity = ClientIdentity.from_der(der) if der else None
        return None if identity is not None and allow.match(identity) is not None else not_allowed(identity)
    return authorize


def not_allowed(identity: ClientIdentity | None) -> str:
    """The reason a client outside ``--allow`` is refused with (403)."""
    return f"client {identity} is not allowed (its CN and SANs are not in --allow)"
