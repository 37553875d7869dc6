"""A TLS server's certificate files: read, checked and made into an ``ssl.SSLContext``.

The HTTPS components (``feddns stubzone``, ``feddns links``) take ``--cert``
and ``--key`` (PEM), and ``--client-ca`` when clients must present a
certificate. :func:`server_context` makes the server context from them, with
one policy for every component: TLS 1.2 with AEAD suites only, and TLS 1.3.
:func:`read_files` reads their bytes, which the components compare to notice a
rotation (a Kubernetes Secret volume swaps its ``..data`` symlink; cert-manager
renews) and load again. Every failure is a
:class:`ConfigError` naming the flag and the file, in one line.
"""

import ssl
from collections.abc import Sequence
from pathlib import Path

from feddns.errors import ConfigError

TLS12_CIPHERS = (
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
)
"""TLS 1.2 suites offered: AEAD with forward secrecy only (no CBC: LUCKY13), for ECDSA and RSA keys."""

FlagFile = tuple[str, Path]
"""A file and the flag that named it: ``("--cert", Path("tls.crt"))``."""


def read_files(files: Sequence[FlagFile]) -> tuple[bytes, ...]:
    """The bytes of each file, in order; raises :class:`ConfigError` naming the flag of the first unreadable one."""
    contents = []
    for flag, path in files:
        try:
            contents.append(path.read_bytes())
        except OSError as exc:
            raise ConfigError(f"{flag} {path}: {exc.strerror or exc}") from exc
    return tuple(contents)


def server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """The server context: TLS >= 1.2 offering only :data:`TLS12_CIPHERS` in TLS 1.2 (TLS 1.3 suites are
    all AEAD), ``cert`` and ``key`` loaded; with ``client_ca``, client certificates are required and
    verified against it.

    Raises :class:`ConfigError` naming the flag when a file is missing, unreadable,
    not PEM, the key does not match the certificate, or ``client_ca`` holds no CA.
    """
    files: list[FlagFile] = [("--cert", cert), ("--key", key)]
    if client_ca is not None:
        files.append(("--client-ca", client_ca))
    for flag, path in files:
        try:
            path.open("rb").close()
        except OSError as exc:
            raise ConfigError(f"{flag} {path}: {exc.strerror or exc}") from exc
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"--cert {cert} / --key {key}: {load_failure(exc)}") from exc
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        try:
            context.load_verify_locations(cafile=client_ca)
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(f"--client-ca {client_ca}: {load_failure(exc)}") from exc
        if not context.cert_store_stats()["x509_ca"]:
            raise ConfigError(f"--client-ca {client_ca}: no CA certificate in it")
    return context


def load_failure(exc: ssl.SSLError | ValueError) -> str:
    """Why OpenSSL refused a file, in words: its reason code lowercased (``key values mismatch``)."""
    reason = exc.reason if isinstance(exc, ssl.SSLError) and exc.reason else str(exc)
    return reason.lower().replace("_", " ")
