"""Files the webhook reloads when they change: the policy file, the server certificate and key.

Each is polled (:class:`feddns.filewatch.FileWatch`: the real path through its
symlinks, inode, size and modification time, so a Kubernetes ConfigMap or Secret
volume's atomic ``..data`` swap counts) and loaded again when it changed. A
load that fails keeps what was loaded before and is logged once per change of
the files, not once per poll.

The server certificate is swapped without a restart: the listener
(:mod:`feddns.https`) asks for :attr:`ServerCertificate.context` when a new
connection's first bytes arrive, so each new handshake gets the context last
loaded. Connections already open keep theirs.
"""

import logging
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path

from feddns.configfile import SizeLimit
from feddns.errors import ConfigError
from feddns.filewatch import FileWatch
from feddns.tlsfiles import server_context
from links.policy import LinkPolicies, load_policies

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0
"""How often (seconds) the files are looked at (``links.cli`` calls :meth:`Watched.check`)."""


class Watched:
    """Calls ``load`` again when one of ``paths`` changes; ``what`` names them in logs.

    ``load`` raises :class:`ConfigError` for bad content. The files are looked at
    before ``load`` runs, so a write that lands during a load is seen at the
    next :meth:`check`. ``reloads`` and ``failures`` count the outcomes.
    """

    def __init__(self, what: str, paths: Sequence[Path], load: Callable[[], None]) -> None:
        self.what = what
        self._files = FileWatch(paths, POLL_SECONDS)
        self._load = load
        self.reloads = 0
        self.failures = 0

    def check(self) -> bool | None:
        """Reload if the files changed: ``True`` when reloaded, ``False`` when the new content is bad, else ``None``."""
        if not self._files.changed():
            return None
        try:
            self._load()
        except ConfigError as exc:
            self.failures += 1
            log.warning("%s; keeping the %s loaded before", exc, self.what)
            return False
        self.reloads += 1
        log.info("%s reloaded", self.what)
        return True


class PolicyFile:
    """The policies of ``path`` (``None``: no file, no policies), reloaded by :attr:`watched`; a file
    over ``limit`` (``--max-policies-size``) is refused unread.

    Raises :class:`ConfigError` when the file is bad at start.
    """

    def __init__(self, path: Path | None, limit: SizeLimit | None = None) -> None:
        self.policies = load_policies(path, limit) if path is not None else LinkPolicies()
        self.watched = Watched(f"policy file {path}", [path] if path else [], self._reload)
        self._path = path
        self._limit = limit

    def _reload(self) -> None:
        assert self._path is not None
        self.policies = load_policies(self._path, self._limit)

    def current(self) -> LinkPolicies:
        """The policies loaded last."""
        return self.policies


class ServerCertificate:
    """The server's TLS context (:func:`feddns.tlsfiles.server_context`), whose certificate follows ``cert``
    and ``key``: :attr:`context` is the one loaded last.

    Raises :class:`ConfigError` naming the flag when a file is missing or not
    PEM, or the key does not match the certificate.
    """

    def __init__(self, cert: Path, key: Path) -> None:
        self._cert, self._key = cert, key
        self.context = self._load()
        self.watched = Watched(f"certificate {cert} / key {key}", [cert, key], self._reload)

    def _load(self) -> ssl.SSLContext:
        return server_context(self._cert, self._key)

    def _reload(self) -> None:
        self.context = self._load()
