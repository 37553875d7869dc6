"""Parsing of ``HOST:PORT`` flags and nameserver addresses (etcd URLs: :mod:`feddns.etcd.urls`)."""

import ipaddress
import socket

from feddns.errors import ConfigError
from feddns.records import MAX_PORT, IPAddress


def parse_hostport(text: str, default_port: int | None = None, *, flag: str | None = None,
                   lowest: int = 0) -> tuple[str, int]:
    """Split ``host:port``, ``[v6]:port``, or (with ``default_port``) a bare host.

    A bare IPv6 address without brackets is a host with no port (``2001:db8::1:5353`` is the address
    2001:db8::1:5353): an IPv6 address with a port is written in brackets, ``[2001:db8::1]:5353``
    (RFC 3986 section 3.2.2). Returns ``(host, port)`` with the brackets removed; raises
    :class:`ConfigError` naming ``text``, and ``flag`` (``--listen``) when given, when the port is
    missing, not ``lowest`` (0: the system picks one) to 65535 (:func:`port_number`) or written with a
    leading zero.
    """
    try:
        return _split(text, default_port, lowest)
    except ConfigError as exc:
        raise ConfigError(f"{flag} {exc}" if flag else str(exc)) from None


def _split(text: str, default_port: int | None, lowest: int) -> tuple[str, int]:
    host, sep, port_text = text.rpartition(":")
    if text.startswith("[") and "]" in text:
        inside, _, rest = text[1:].partition("]")
        host, sep, port_text = inside, rest[:1], rest[1:]
        if rest and not rest.startswith(":"):
            raise ConfigError(f"{text!r} is not HOST:PORT")
    elif not sep or ":" in host:
        host, sep, port_text = text, "", ""
    if not host:
        raise ConfigError(f"{text!r} has no host")
    if not sep:
        if default_port is None:
            raise ConfigError(f"{text!r} has no port (expected HOST:PORT)")
        return host, default_port
    return host, port_number(text, port_text, lowest)


def port_number(text: str, port_text: str, lowest: int) -> int:
    """The port ``port_text`` of ``text`` (an address as written): digits from ``lowest`` to 65535, with no
    leading zero (``0053`` is refused: whether it means 53, or octal 43 as ``inet_aton`` would read a
    part of an address, is not for us to guess). Raises :class:`ConfigError` ``"'<text>': port must be
    <lowest> to 65535"`` or ``"... has a leading zero"``."""
    if not (port_text.isascii() and port_text.isdigit()) or not lowest <= int(port_text) <= MAX_PORT:
        raise ConfigError(f"{text!r}: port must be {lowest} to {MAX_PORT}")
    if port_text != str(int(port_text)):
        raise ConfigError(f"{text!r}: port {port_text!r} has a leading zero (write {int(port_text)})")
    return int(port_text)


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as written on a command line or in a URL: an IPv6 host in brackets (RFC 3986 section 3.2.2)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_resolves(flag: str, host: str, port: int) -> None:
    """Raise :class:`ConfigError` naming ``flag`` when ``host`` (of an address to listen on) is neither
    an IP address nor a name that resolves (``getaddrinfo``, as the bind will ask it); nothing else."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise unresolvable(flag, host_port(host, port), host, exc) from exc


def unresolvable(flag: str, address: str, host: str, exc: socket.gaierror) -> ConfigError:
    """The error for an address to listen on whose host does not resolve: ``--listen nosuch.invalid:53:
    cannot listen: host nosuch.invalid does not resolve (Name or service not known)``. ``getaddrinfo``'s
    errno is an ``EAI_*`` code that ``os.strerror`` does not know ("Unknown error -2"): its own words."""
    return ConfigError(f"{flag} {address}: cannot listen: host {host} does not resolve ({exc.strerror})")


def parse_ip_port(text: str, default_port: int | None, *, flag: str | None = None) -> tuple[IPAddress, int]:
    """Parse a nameserver: an IPv4 or IPv6 address with a port, optional when ``default_port`` is given.

    ``1.2.3.4``, ``1.2.3.4:5353``, ``2001:db8::1``, ``[2001:db8::1]:5353``: an IPv6 address with a port
    is written in brackets; without them it is all address (``2001:db8::1:5353`` is the address
    2001:db8::1:5353, with ``default_port``). Raises :class:`ConfigError`, naming ``flag`` when given,
    for a hostname, a missing port (``default_port`` ``None``), a port outside 1 to 65535 (``"port must
    be 1 to 65535"``) or one with a leading zero.
    """
    host, port = parse_hostport(text, default_port, flag=flag, lowest=1)
    named = f"{flag} " if flag else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise ConfigError(f"{named}{text!r} is not an IP address (hostnames are not accepted)") from exc
    return address, port


BROADCAST = ipaddress.IPv4Address("255.255.255.255")


def not_forwardable(address: IPAddress) -> str | None:
    """Why a cluster DNS cannot forward to ``address``, or ``None`` when it is a unicast address it can
    (docs/reference.md section 5; the controller's ``nameservers`` and the stub-zone endpoint's POST
    share the rule). The reasons: unspecified (``0.0.0.0``, ``::``), the IPv4 broadcast address,
    multicast, link-local (``169.254/16``, ``fe80::/10``: valid only on one link of one node), an IPv6
    address with a zone (``%eth0``), and IPv4-mapped IPv6 (``::ffff:1.2.3.4``: the IPv4 address in
    disguise, so a list could hold one nameserver twice, or a link-local one unseen; the reason names
    the IPv4 address to write instead). Loopback is the caller's to refuse: a test on one host needs it."""
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    if mapped is not None:
        return f"an IPv4-mapped IPv6 address; write the IPv4 address {mapped} instead"
    for refused, what in (
        (address.is_unspecified, "unspecified"),
        (address == BROADCAST, "the broadcast address"),
        (address.is_multicast, "multicast"),
        (address.is_link_local, "link-local"),
        (bool(getattr(address, "scope_id", None)), "an IPv6 address with a zone"),
    ):
        if refused:
            return f"{what}, not a unicast address a DNS server can forward to"
    return None
