"""Parsing of ``HOST:PORT`` flags and nameserver addresses (etcd URLs: :mod:`feddns.etcd.urls`)."""

import ipaddress
import socket

from feddns.errors import ConfigError
from feddns.records import MAX_PORT, IPAddress


def parse_hostport(text: str, default_port: int | None = None, *, flag: str | None = None) -> tuple[str, int]:
    """Split ``host:port``, ``[v6]:port``, or (with ``default_port``) a bare host.

    A bare IPv6 address without brackets is a host with no port. Returns
    ``(host, port)`` with the brackets removed; raises :class:`ConfigError`
    naming ``text``, and ``flag`` (``--listen``) when given, when the port is
    missing or not 0-65535.
    """
    try:
        return _split(text, default_port)
    except ConfigError as exc:
        raise ConfigError(f"{flag} {exc}" if flag else str(exc)) from None


def _split(text: str, default_port: int | None) -> tuple[str, int]:
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

    ``1.2.3.4``, ``1.2.3.4:5353``, ``2001:db8::1``, ``[2001:db8::1]:5353``.
    Raises :class:`ConfigError`, naming ``flag`` when given, for a hostname,
    a missing port (``default_port`` ``None``) or a port outside 1-65535.
    """
    host, port = parse_hostport(text, default_port, flag=flag)
    named = f"{flag} " if flag else ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise ConfigError(f"{named}{text!r} is not an IP address (hostnames are not accepted)") from exc
    if port == 0:
        raise ConfigError(f"{named}{text!r}: port must be from 1 to {MAX_PORT}")
    return address, port
