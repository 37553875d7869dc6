"""Connecting to etcd with ``aetcd``, the maintained asyncio fork of ``etcd3``: endpoints, TLS, users.

``etcd3`` (named in the design card) no longer imports with current protobuf and
has had no release since 2020; ``aetcd`` keeps its API (docs/choices.md).
The client itself, aetcd's with TLS and feddns's errors, is in :mod:`feddns.etcdclient`.

Security, the same in every component (docs/reference.md section 6, "Reaching
etcd"), with etcdctl's names:

* ``https://`` endpoints, the CA that signed etcd's server certificate
  (``--etcd-cacert``; default: the system's roots) and a client certificate and
  key (``--etcd-cert``, ``--etcd-key``) for an etcd run with
  ``--client-cert-auth``;
* a user (``--etcd-user``) whose password comes from a file
  (``--etcd-password-file``) or the environment (:data:`PASSWORD_ENV`), never
  from argv or a URL: a URL with credentials in it is refused.

Files are read when a client is made, so a client made after a Kubernetes
Secret update (a symlink swap) uses the new certificate and password;
:meth:`Endpoints.stale` tells a long-lived client's owner that the files
changed, so that it reconnects at a safe point (:func:`until_stale`).
:func:`describe` tells an authentication or TLS failure apart from an etcd that
cannot be reached.

This module imports neither ``aiohttp`` nor ``kubernetes`` (``feddns`` never
does); the etcd v2 HTTP client of the SkyDNS backend takes
:meth:`TLSFiles.ssl_context` and :meth:`Access.password` from here.
"""

import argparse
import asyncio
import logging
import os
import ssl
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from feddns.errors import ConfigError
from feddns.errors import EtcdError as EtcdError  # noqa: PLC0414 - what etcd calls raise, named here for their callers
from feddns.hostport import parse_hostport

if TYPE_CHECKING:
    import aetcd
    import grpc

    from feddns import etcdclient

# aetcd and gRPC (about 70 ms to import) are imported when the first client is
# made (feddns.etcdclient), not here: `feddns stubzone --backend skydns` speaks
# etcd's v2 HTTP API with the flags and files of this module and never needs them.

log = logging.getLogger(__name__)

PASSWORD_ENV = "FEDDNS_ETCD_PASSWORD"
"""The environment variable holding the etcd user's password when no password file is given."""

DEFAULT_PORT = 2379

FILES_CHECK_SECONDS = 1.0
"""How often (at most) the certificate and password files are looked at again (a ``stat`` each)."""


def _grpc_quiet() -> None:
    """gRPC core writes its own lines to stderr for every failed TLS handshake; the callers
    log each state change once (:func:`describe`), so quiet it unless asked for. Called
    before gRPC is imported: it reads the variable then."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")


# -- what a failure means ----------------------------------------------------------------------

_AUTH_FAILED = ("authentication failed", "invalid user id or password")
_NO_USER = ("user name is empty", "user name not found")
_PERMISSION = ("permission denied",)
_TOKEN = ("invalid auth token", "auth: revision in header is old")
_TLS = ("tls handshake", "ssl handshake", "handshake read failed", "ssl_error", "tsi_", "certificate")
_NO_LEADER = ("no leader",)


def failure_kind(exc: BaseException) -> str:
    """What an etcd error says: ``"auth"`` (user or password refused), ``"no-user"`` (etcd
    requires a user and none was given), ``"permission"`` (the user may not do this),
    ``"token"`` (the auth token expired: reconnect), ``"tls"`` (the TLS handshake failed),
    ``"no-leader"`` (the member has no leader: try another), or ``"unreachable"``
    (anything else: refused, timed out, reset).

    The etcd server's messages are those of ``etcdserver/api/v3rpc/rpctypes``
    (``ErrGRPCAuthFailed``, ``ErrGRPCUserEmpty``, ``ErrGRPCPermissionDenied``,
    ``ErrGRPCInvalidAuthToken``, ``ErrGRPCNoLeader``); TLS failures are gRPC core's.
    A call refused for ``no leader`` was refused before etcd handled it
    (:data:`feddns.etcdclient.REQUIRE_LEADER`): nothing of it was applied.
    """
    text = " ".join(str(e) for e in _chain(exc)).lower()
    for kind, needles in (("auth", _AUTH_FAILED), ("no-user", _NO_USER), ("permission", _PERMISSION),
                          ("token", _TOKEN), ("tls", _TLS), ("no-leader", _NO_LEADER)):
        if any(needle in text for needle in needles):
            return kind
    return "unreachable"


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


_KIND_TEXT = {
    "auth": "authentication failed (wrong user or password)",
    "no-user": "etcd requires authentication and no user was given (--etcd-user)",
    "permission": "permission denied (the user's roles do not cover this key)",
    "token": "the authentication token expired; reconnecting",
    "tls": "TLS handshake failed (wrong CA, or etcd refused the client certificate)",
    "no-leader": "the member has no leader (cut off from the other members, or the cluster lost its quorum)",
    "unreachable": "cannot be reached",
}


def describe(exc: BaseException) -> str:
    """One line for a log or an error answer: what kind of failure, then etcd's own words.

    ``authentication failed (wrong user or password): etcdserver: authentication failed, ...``.
    """
    detail = str(exc) or type(exc).__name__
    return f"{_KIND_TEXT[failure_kind(exc)]}: {detail}"


# -- the files -----------------------------------------------------------------------------------

def _signature(path: Path | None) -> tuple[int, int, int, int] | None:
    """What changes when a file is replaced (also through a symlink swap, as kubelet does)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return (-1, -1, -1, -1)
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


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

    def signature(self) -> tuple[object, ...]:
        return tuple(_signature(p) for p in (self.cacert, self.cert, self.key))

    def grpc_credentials(self) -> "grpc.ChannelCredentials":
        """gRPC's credentials from the files as they are now; raises :class:`ConfigError`."""
        _grpc_quiet()
        import grpc  # noqa: PLC0415 - gRPC only once a client is made (see the imports)

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
            files = ", ".join(str(p) for p in (self.cacert, self.cert, self.key) if p is not None)
            raise ConfigError(f"etcd TLS files ({files}) do not load: {exc.reason or exc}") from exc
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

    def signature(self) -> tuple[object, ...]:
        """Changes when a certificate, key or password file is replaced."""
        return (self.tls.signature() if self.tls else None, _signature(self.password_file))


# -- URLs and endpoints ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EtcdURL:
    """One etcd client URL: ``scheme`` (``http`` or ``https``), ``host``, ``port``."""

    scheme: str
    host: str
    port: int

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


class Endpoints:
    """The etcd client URLs of one cluster (``--etcd``, repeatable), tried in turn, and how to log in.

    ``urls`` are ``http://`` or ``https://`` URLs (all the same scheme); ``timeout``
    bounds each call (seconds) and sets the gRPC keep-alive (:func:`feddns.etcdclient.grpc_options`);
    ``access`` carries TLS files and the user.
    Raises :class:`ConfigError` when the list is empty, a URL is bad, the schemes
    are mixed, TLS files are given for ``http://``, or a file cannot be read.
    ``client()`` returns a new client for the current endpoint; ``failover()``
    moves on to the next one after a failure.
    """

    def __init__(self, urls: list[str], timeout: float = 5.0, access: Access = Access()) -> None:
        if not urls:
            raise ConfigError("at least one etcd endpoint is needed")
        self.urls = [parse_etcd_url(url) for url in urls]
        schemes = {url.scheme for url in self.urls}
        if len(schemes) > 1:
            raise ConfigError("etcd endpoints mix http:// and https://; use one scheme for all")
        self.secure = schemes == {"https"}
        if access.tls is not None and not self.secure:
            raise ConfigError("etcd TLS files (--etcd-cacert, --etcd-cert, --etcd-key) need https:// endpoints")
        if self.secure and access.tls is None:
            access = Access(TLSFiles(), access.user, access.password_file, access.password_env)
        access.check()
        self.access = access
        self.timeout = timeout
        self._current = 0
        self._signature = access.signature()
        self._checked = time.monotonic()

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [(url.host, url.port) for url in self.urls]

    @property
    def current(self) -> str:
        return str(self.urls[self._current])

    def client(self) -> "etcdclient.Client":
        """A client for the current endpoint, with the certificate and password as the files
        hold them now (it connects lazily, on the first call). Raises :class:`ConfigError`
        when a file has become unreadable."""
        url = self.urls[self._current]
        signature = self.signature()
        credentials = self.access.tls.grpc_credentials() if self.access.tls is not None else None
        _grpc_quiet()
        from feddns import etcdclient  # noqa: PLC0415 - aetcd and gRPC only once a client is made (see the imports)

        return etcdclient.Client(url, credentials=credentials, user=self.access.user, password=self.access.password(),
                                 timeout=self.timeout, signature=signature)

    def failover(self) -> None:
        """Move to the next endpoint (wrapping round). Logged at debug level only: a caller
        retrying through an outage says once that etcd is lost and once that it is back."""
        self._current = (self._current + 1) % len(self.urls)
        if len(self.urls) > 1:
            log.debug("etcd: trying endpoint %s", self.current)

    def signature(self) -> tuple[object, ...]:
        """The files' signature, looked at again at most every :data:`FILES_CHECK_SECONDS`."""
        now = time.monotonic()
        if now - self._checked >= FILES_CHECK_SECONDS:
            self._checked = now
            self._signature = self.access.signature()
        return self._signature

    def stale(self, client: "aetcd.Client") -> bool:
        """True when a certificate, key or password file changed since ``client`` was made."""
        made_from: tuple[object, ...] = getattr(client, "signature", ())
        return made_from != self.signature()


async def until_stale(endpoints: Endpoints, client: "aetcd.Client") -> None:
    """Return once ``client``'s certificate or password files have changed (polls ``stat``)."""
    # A replaced file (kubelet swaps a Secret's symlink) sets no event to wait on: poll.
    while not endpoints.stale(client):  # noqa: ASYNC110 - polling stat() is the only way to know
        await asyncio.sleep(FILES_CHECK_SECONDS)
    log.info("etcd: the client certificate or password files changed; reconnecting with the new ones")


async def unless_stale(endpoints: Endpoints, client: "aetcd.Client", work: Coroutine[Any, Any, None]) -> bool:
    """Run ``work`` (a long watch on ``client``) until it ends, or cancel it when the
    certificate or password files change first; True in that case: reconnect then, so
    that a rotated client certificate is in use before the old one expires.

    Whatever ``work`` raises is raised; cancelling this cancels ``work``.
    """
    follow = asyncio.ensure_future(work)
    rotated = asyncio.ensure_future(until_stale(endpoints, client))
    try:
        await asyncio.wait([follow, rotated], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (follow, rotated):
            task.cancel()
        await asyncio.gather(follow, rotated, return_exceptions=True)
    if follow.done() and not follow.cancelled():
        follow.result()
        return False
    return True


async def close_quietly(client: "aetcd.Client") -> None:
    """Close ``client``, within 2 s, whatever state its channel is in."""
    try:
        await asyncio.wait_for(client.close(), 2)
    except (Exception, asyncio.CancelledError) as exc:  # a broken channel may fail any way
        if isinstance(exc, asyncio.CancelledError) and _cancelling():
            raise
        log.debug("etcd: closing a client: %s", exc or type(exc).__name__)


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def cancelled_by_client(exc: asyncio.CancelledError) -> bool:
    """True when ``exc`` came from a closed gRPC channel, not from cancelling this task.

    grpc.aio raises ``CancelledError`` into calls whose channel is closed under them;
    that is an etcd failure to retry. A real cancellation (``task.cancel()``, shutdown)
    must still end the task: then the current task's ``cancelling()`` is non-zero.
    """
    return not _cancelling()


MAX_BYTE = 0xFF


def prefix_range_end(prefix: bytes) -> bytes:
    """The ``range_end`` that makes ``[prefix, range_end)`` every key under ``prefix``."""
    end = bytearray(prefix)
    for i in reversed(range(len(end))):
        if end[i] < MAX_BYTE:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\0"


# -- the flags of feddns serve and feddns stubzone ---------------------------------------------------

def add_arguments(group: Any, *, default_url: str | None = None) -> None:
    """Add ``--etcd-cacert``, ``--etcd-cert``, ``--etcd-key``, ``--etcd-user`` and
    ``--etcd-password-file`` (etcdctl's names) to an argparse parser or group."""
    group.add_argument("--etcd-cacert", type=Path, metavar="FILE",
                       help="CA that signed etcd's server certificate, PEM (https:// endpoints; "
                            "default: the system's roots)")
    group.add_argument("--etcd-cert", type=Path, metavar="FILE",
                       help="client certificate for etcd's --client-cert-auth, PEM (with --etcd-key)")
    group.add_argument("--etcd-key", type=Path, metavar="FILE", help="the client certificate's key, PEM")
    group.add_argument("--etcd-user", metavar="NAME",
                       help=f"etcd user name; the password comes from --etcd-password-file or ${PASSWORD_ENV}")
    group.add_argument("--etcd-password-file", type=Path, metavar="FILE",
                       help="file holding the etcd user's password (re-read on reconnect)")


def access_from(args: argparse.Namespace) -> Access:
    """The :class:`Access` the flags of :func:`add_arguments` ask for (checked by :class:`Endpoints`)."""
    tls_given = any(getattr(args, name) is not None for name in ("etcd_cacert", "etcd_cert", "etcd_key"))
    tls = TLSFiles(args.etcd_cacert, args.etcd_cert, args.etcd_key) if tls_given else None
    return Access(tls=tls, user=args.etcd_user, password_file=args.etcd_password_file)

