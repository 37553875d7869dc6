"""Server TLS of the stub-zone endpoint (docs/reference.md section 5): the context and its reload.

The context is TLS 1.2 or later with ``CERT_REQUIRED`` against ``--client-ca``:
a client without a certificate the CA signed (and still valid, and made for
``clientAuth``) never finishes its handshake. TLS 1.2 offers only AEAD suites with
ECDHE (AES-GCM, ChaCha20-Poly1305); TLS 1.3 suites are all AEAD. The accepting
side, shared with ``feddns links``, is :mod:`feddns.https`; it asks
:func:`stubzone.auth.authorizer` about each client that finished its handshake.

:class:`ServerCredentials` holds the context made from ``--cert``, ``--key``
and ``--client-ca`` and makes a new one when their contents change on disk (a
Kubernetes Secret volume swaps its ``..data`` symlink; cert-manager renews):
:class:`feddns.filewatch.FileWatch` tells when the files changed, and their
bytes are then read and compared.
New connections get the new context; connections already open keep theirs.
A set that does not load (a key of another certificate, a file missing while
it is being replaced) is refused, logged once, and the old context stays.
"""

import logging
import ssl
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509

from feddns import tlsfiles
from feddns.errors import ConfigError
from feddns.filewatch import FileWatch
from stubzone.metrics import StubzoneMetrics

log = logging.getLogger("stubzone")

RELOAD_INTERVAL = 10.0
"""Seconds between two looks at ``--cert``, ``--key`` and ``--client-ca`` (``--tls-reload-interval``)."""


def server_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    """The server ``SSLContext``: TLS >= 1.2, AEAD suites, client certificates required and verified.

    Raises :class:`ConfigError` naming the flag when a file is missing,
    unreadable, not PEM, or the key does not match the certificate.
    """
    return tlsfiles.server_context(cert, key, client_ca)


class ServerCredentials:
    """``--cert``, ``--key`` and ``--client-ca``, and the server context made from them.

    The constructor loads them (:class:`ConfigError` as :func:`server_context`).
    :meth:`reload` reads the three files again and, when their bytes changed,
    swaps in a new context; ``context`` is the one new connections get.
    """

    def __init__(self, cert: Path, key: Path, client_ca: Path) -> None:
        self.paths = (cert, key, client_ca)
        self.metrics: StubzoneMetrics | None = None
        self._contents = self._read()
        self.context = server_context(*self.paths)
        self.summary, self.expiry = _describe(self._contents)
        self._refused: object = None

    def observe(self, metrics: StubzoneMetrics) -> None:
        """Count reloads in ``metrics`` and keep its certificate expiry up to date."""
        self.metrics = metrics
        metrics.certificate_expiry.set(self.expiry)

    def reload(self) -> bool:
        """Load the files again if their contents changed; returns whether ``context`` is new.

        A set that does not load keeps the old context and is logged once (again
        only when the files change again).
        """
        try:
            contents = self._read()
        except ConfigError as exc:
            self._refuse(str(exc), str(exc))
            return False
        if contents == self._contents:
            self._refused = None
            return False
        try:
            context = server_context(*self.paths)
            summary, expiry = _describe(contents)
        except ConfigError as exc:
            self._refuse(contents, str(exc))
            return False
        if self._read() != contents:  # replaced again while it was loaded: take it at the next look
            return False
        self.context, self._contents, self.summary, self.expiry = context, contents, summary, expiry
        self._refused = None
        log.info("TLS certificates reloaded: %s", summary)
        if self.metrics is not None:
            self.metrics.tls_reloads.labels("ok").inc()
            self.metrics.certificate_expiry.set(expiry)
        return True

    async def watch(self, interval: float) -> None:
        """Look at the files every ``interval`` seconds and call :meth:`reload` when they changed, until
        cancelled (once at the start too: for a change since the constructor read them)."""
        files = FileWatch(self.paths, interval)
        while True:
            try:
                self.reload()
            except Exception:  # a bug in one look must not end the watching: the next look may succeed
                log.exception("TLS certificates: looking at the files failed")
            await files.wait()

    def _refuse(self, key: object, reason: str) -> None:
        if key == self._refused:
            return
        self._refused = key
        log.error("TLS certificates not reloaded, still using %s: %s", self.summary, reason)
        if self.metrics is not None:
            self.metrics.tls_reloads.labels("error").inc()

    def _read(self) -> tuple[bytes, ...]:
        return tlsfiles.read_files(list(zip(("--cert", "--key", "--client-ca"), self.paths, strict=True)))


def _describe(contents: tuple[bytes, ...]) -> tuple[str, float]:
    """``("server certificate serial 0x.., expires ..; client CA CN=..", expiry as Unix time)`` for logs."""
    cert_pem, _, ca_pem = contents
    try:
        leaf = x509.load_pem_x509_certificate(cert_pem)
        authorities = x509.load_pem_x509_certificates(ca_pem)
    except ValueError as exc:
        raise ConfigError(f"the certificates do not parse: {exc}") from exc
    expiry = leaf.not_valid_after_utc
    names = ", ".join(authority.subject.rfc4514_string() for authority in authorities)
    summary = (f"server certificate serial {leaf.serial_number:#x} expiring {expiry:%Y-%m-%dT%H:%M:%SZ}; "
               f"client CA {names}")
    if expiry < datetime.now(UTC):
        log.warning("the server certificate expired at %s", f"{expiry:%Y-%m-%dT%H:%M:%SZ}")
    return summary, expiry.timestamp()

