"""How a component proves itself to etcd: TLS files and a user's password (docs/reference.md section 6).

With etcdctl's names:

* ``https://`` endpoints, the CA that signed etcd's server certificate
  (``--etcd-cacert``; default: the system's roots) and a client certificate and
  key (``--etcd-cert``, ``--etcd-key``) for an etcd run with
  ``--client-cert-auth``;
* a user (``--etcd-user``) whose password comes from a file
  (``--etcd-password-file``) or the environment (:data:`PASSWORD_ENV`), never
  from argv or a URL (:mod:`feddns.etcd.urls` refuses a URL with credentials).

Files are read when a client is made, so a client made after a Kubernetes
Secret update (a symlink swap) uses the new certificate and password;
:meth:`Access.files` names the files whose change calls for a new client
(:class:`feddns.etcd.endpoints.EtcdEndpoints` watches them). The etcd v2 HTTP
client of the SkyDNS backend takes :meth:`TLSFiles.ssl_context` and
:meth:`Access.password` from here.
"""

import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from feddns.errors import ConfigError

if TYPE_CHECKING:
    import grpc

PASSWORD_ENV = "FEDDNS_ETCD_PASSWORD"
"""The environment variable holding the etcd user's password when no password file is given."""


def grpc_quiet() -> None:
    """gRPC core writes its own lines to stderr for every failed TLS handshake; the callers
    log each state change once (:func:`feddns.etcd.failures.describe`), so quiet it unless
    asked for. Called before gRPC is imported: it reads the variable then."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read: {exc.strerror}") from exc


@dataclass(frozen=True, slots=True)
class TLSFiles:
    """PEM files for TLS to etcd: ``cacert`` verifies etcd's server certificate
    (``None``: the system's roots); ``cert`` and ``key`` are the client certificate,
    both or neither (etcd's ``--client-cert-auth``)."""

    cacert: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    def check(self) -> None:
        """Read and parse every file; raises :class:`ConfigError` naming the flag and the file."""
        if (self.cert is None) != (self.key is None):
            raise ConfigError("--etcd-cert and --etcd-key go together (a client certificate needs its key)")
        self.ssl_context()

    def files(self) -> list[Path]:
        """The files given, in the order ``cacert``, ``cert``, ``key``."""
        return [path for path in (self.cacert, self.cert, self.key) if path is not None]

    def grpc_credentials(self) -> "grpc.ChannelCredentials":
        """gRPC's credentials from the files as they are now; raises :class:`ConfigError`."""
        grpc_quiet()
        import grpc  # noqa: PLC0415 - gRPC only once a client is made (see feddns.etcd)

        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.cacert, "--etcd-cacert") if self.cacert else None,
            private_key=_read(self.key, "--etcd-key") if self.key else None,
            certificate_chain=_read(self.cert, "--etcd-cert") if self.cert else None,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """An ``ssl`` client context from the files as they are now (for etcd's v2 HTTP API).

        TLS 1.2 or later, the server's name or IP checked. Raises :class:`ConfigError`
        when a file is unreadable, not PEM, or the key is not the certificate's.
        """
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            if self.cacert is not None:
                _read(self.cacert, "--etcd-cacert")
                context.load_verify_locations(cafile=str(self.cacert))
            if self.cert is not None and self.key is not None:
                _read(self.cert, "--etcd-cert")
                _read(self.key, "--etcd-key")
                context.load_cert_chain(str(self.cert), str(self.key))
        except ssl.SSLError as exc:
            raise ConfigError(f"etcd TLS files ({', '.join(map(str, self.files()))}) do not load: "
                              f"{exc.reason or exc}") from exc
        return context


@dataclass(frozen=True, slots=True)
class Access:
    """How this process proves itself to etcd (docs/reference.md section 6).

    ``tls``: the TLS files, set for ``https://`` endpoints. ``user``: an etcd user
    name; its password is read from ``password_file`` or, without one, from the
    environment variable ``password_env``, each time a client is made.
    """

    tls: TLSFiles | None = None
    user: str | None = None
    password_file: Path | None = None
    password_env: str = PASSWORD_ENV

    def check(self) -> None:
        """Everything that can be checked without etcd; raises :class:`ConfigError`."""
        if self.tls is not None:
            self.tls.check()
        if self.user is None:
            if self.password_file is not None:
                raise ConfigError("an etcd password file was given without an etcd user (--etcd-user)")
            return
        if not self.user or ":" in self.user:
            raise ConfigError("--etcd-user takes the user name alone; the password comes from "
                              f"--etcd-password-file or ${self.password_env}, never from argv")
        self.password()

    def password(self) -> str | None:
        """The user's password as it is now (``None`` without a user); raises :class:`ConfigError`.

        A password file's trailing newline (``echo pw > file``) is not part of the password.
        """
        if self.user is None:
            return None
        if self.password_file is not None:
            raw = _read(self.password_file, "etcd password file")
            try:
                text = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"etcd password file {self.password_file}: not UTF-8 text") from exc
            source = f"etcd password file {self.password_file}"
        else:
            text = os.environ.get(self.password_env, "")
            source = f"${self.password_env}"
        if not text:
            raise ConfigError(f"etcd user {self.user!r} needs a password: {source} is empty or unset "
                              "(give --etcd-password-file or set the environment variable)")
        return text

    def files(self) -> list[Path]:
        """The certificate, key and password files: a client made before one of them changed is out of date."""
        tls = self.tls.files() if self.tls is not None else []
        return tls + ([self.password_file] if self.password_file is not None else [])
