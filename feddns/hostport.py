"""Parsing of ``HOST:PORT`` flags and nameserver addresses (etcd URLs: :mod:`feddns.etcd`)."""

import ipaddress

from feddns.errors import ConfigError
from feddns.records import MAX_PORT, IPAddress


def parse_hostport(text: str, default_port: int | None = None) -> tuple[str, int]:
    """Split ``host:port``, ``[v6]:port``, or (with ``default_port``) a bare host.

    A bare IPv6 address without brackets is a host with no port. Returns
    ``(host, port)`` with the brackets removed; raises :class:`ConfigError`
    naming ``text`` when the port is missing or not 0-65535.
    """
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
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > MAX_PORT:
        raise ConfigError(f"{text!r}: port {port_text!r} is not a number from 0 to {MAX_PORT}")
    return host, int(port_text)


def parse_ip_port(text: str, default_port: int) -> tuple[IPAddress, int]:
    """Parse a nameserver: an IPv4 or IPv6 address with an optional port.

    ``1.2.3.4``, ``1.2.3.4:5353``, ``2001:db8::1``, ``[2001:db8::1]:5353``.
    Raises :class:`ConfigError` for a hostname or a port outside 1-65535.
    """
    host, port = parse_hostport(text, default_port)
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise ConfigError(f"{text!r} is not an IP address (hostnames are not accepted)") from exc
    if port == 0:
        raise ConfigError(f"{text!r}: port must be from 1 to {MAX_PORT}")
    return address, port

