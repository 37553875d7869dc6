"""One etcd client URL (``--etcd``, ``etcd.endpoints``): parsed, checked, and written back.

``http://host:port``, ``https://host:port`` or ``host:port`` (plain), port 2379
when left out, as etcdctl's ``--endpoints`` takes them. A URL with a user or a
password in it is refused: credentials come from the files and the environment
of :mod:`feddns.etcd.credentials` only.
"""

from dataclasses import dataclass
from urllib.parse import urlsplit

from feddns.errors import ConfigError
from feddns.etcd.credentials import PASSWORD_ENV
from feddns.hostport import parse_hostport

DEFAULT_PORT = 2379
"""etcd's client port (IANA), when a URL gives none."""


@dataclass(frozen=True, slots=True)
class EtcdURL:
    """One etcd client URL, as ``--etcd`` gives it (etcd's ``--listen-client-urls`` form)."""

    scheme: str
    """``http`` or ``https`` (TLS, with the ``--etcd-cacert`` trust)."""
    host: str
    """A name or an IP address (an IPv6 address without its brackets)."""
    port: int
    """The TCP port; :data:`DEFAULT_PORT` when the URL gives none."""

    @property
    def target(self) -> str:
        """``host:port`` as gRPC and HTTP want it (IPv6 in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.scheme}://{self.target}"


def parse_etcd_url(text: str) -> EtcdURL:
    """``http://host:port``, ``https://host:port`` or ``host:port`` (plain) to an :class:`EtcdURL`;
    port 2379 when left out.

    Raises :class:`ConfigError` for another scheme, a path, a bad port, or a user or
    password in the URL (credentials are never taken from a URL; the message does
    not repeat the password).
    """
    if "://" not in text:
        if "@" in text:
            raise ConfigError(_credentials_refused(text))
        host, port = parse_hostport(text, DEFAULT_PORT)
        return EtcdURL("http", host, port)
    parts = urlsplit(text)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ConfigError(_credentials_refused(text))
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"etcd URL {text!r}: the scheme must be http:// or https://")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(f"etcd URL {text!r} must not have a path")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError as exc:
        raise ConfigError(f"etcd URL {text!r}: {exc}") from exc
    if not parts.hostname:
        raise ConfigError(f"etcd URL {text!r} has no host")
    return EtcdURL(parts.scheme, parts.hostname, port)


def _credentials_refused(text: str) -> str:
    scheme, sep, rest = text.rpartition("://")
    shown = f"{scheme}{sep}***@{rest.rpartition('@')[2]}"
    return (f"etcd URL {shown!r} has credentials in it: refused (they would show in process lists and logs); "
            f"use --etcd-user with --etcd-password-file or ${PASSWORD_ENV}")
