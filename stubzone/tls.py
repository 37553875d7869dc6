"""Server TLS for the stub-zone endpoint: the context of docs/reference.md section 5, and refused handshakes logged.

The context is TLS 1.2 or later with ``CERT_REQUIRED`` against ``--client-ca``:
a client without a certificate the CA signed (and still valid, and made for
``clientAuth``) never reaches HTTP.

asyncio reports a failed server handshake only in debug mode, so aiohttp never
sees one. :class:`TLSAcceptor` therefore accepts plain TCP, runs the handshake
itself with ``loop.start_tls()`` (which raises on failure, with the peer's
address at hand to log), and only then hands the TLS transport to aiohttp's
protocol. Bytes that arrive between the end of the handshake and the hand-over
are kept and replayed.
"""

import asyncio
import logging
import ssl
from collections.abc import Callable
from pathlib import Path

from feddns.errors import ConfigError

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 10.0
"""Seconds a client has to finish the TLS handshake (default of ``--tls-handshake-timeout``)."""

Refused = Callable[[str, str], None]
"""Called with ``(peer "host:port", reason)`` for each refused handshake."""


def server_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    """The server ``SSLContext``: TLS >= 1.2, client certificates required and verified.

    Raises :class:`ConfigError` naming the flag when a file is missing,
    unreadable, not PEM, or the key does not match the certificate.
    """
    for flag, path in (("--cert", cert), ("--key", key), ("--client-ca", client_ca)):
        try:
            path.open("rb").close()
        except OSError as exc:
            raise ConfigError(f"{flag} {path}: {exc.strerror or exc}") from exc
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"--cert {cert} / --key {key}: {_reason(exc)}") from exc
    try:
        context.load_verify_locations(cafile=client_ca)
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"--client-ca {client_ca}: {_reason(exc)}") from exc
    if not context.cert_store_stats()["x509_ca"]:
        raise ConfigError(f"--client-ca {client_ca}: no CA certificate in it")
    return context


_REASONS = {
    "HTTP_REQUEST": "plain HTTP sent to the HTTPS port",
    "UNSUPPORTED_PROTOCOL": "client offers no TLS version from 1.2 on",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "peer did not return a certificate",
}
"""OpenSSL reason codes worth saying in other words; the rest are shown lowercased."""


def _reason(exc: BaseException) -> str:
    """A short reason: OpenSSL's verify message or reason code, in words."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return _REASONS.get(exc.reason, exc.reason.lower().replace("_", " "))
    if isinstance(exc, ConnectionAbortedError | TimeoutError):  # asyncio aborts a handshake only on its timeout
        return "no TLS handshake within the timeout"
    return str(exc) or type(exc).__name__


def peer_text(transport: asyncio.BaseTransport) -> str:
    """``host:port`` of the other end (``[v6]:port`` for IPv6), ``?`` if unknown."""
    peer = transport.get_extra_info("peername")
    if not peer:
        return "?"
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class TLSAcceptor(asyncio.Protocol):
    """The protocol of one accepted TCP connection until its TLS handshake is done.

    ``app_factory`` makes the HTTP protocol (aiohttp's ``runner.server``);
    ``refused`` is called once for a handshake that fails or takes more than
    ``timeout`` seconds. ``tasks`` holds the running handshakes, so the server
    can cancel them.
    """

    def __init__(self, app_factory: Callable[[], asyncio.Protocol], context: ssl.SSLContext,
                 refused: Refused, tasks: set[asyncio.Task[None]], timeout: float = HANDSHAKE_TIMEOUT) -> None:
        self._app_factory = app_factory
        self._timeout = timeout
        self._context = context
        self._refused = refused
        self._tasks = tasks
        self._early: list[bytes] = []
        self._eof = False
        self._lost: list[Exception | None] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # the ClientHello waits in the socket for start_tls()
        task = asyncio.get_running_loop().create_task(self._handshake(transport))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handshake(self, transport: asyncio.Transport) -> None:
        peer = peer_text(transport)
        loop = asyncio.get_running_loop()
        try:
            tls = await loop.start_tls(
                transport, self, self._context, server_side=True, ssl_handshake_timeout=self._timeout
            )
        except (ConnectionResetError, BrokenPipeError):
            # Closed before the handshake ended: a port probe (kubelet tcpSocket), not a refusal.
            log.debug("TLS handshake not finished: peer=%s closed the connection", peer)
            return
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            transport.close()
            self._refused(peer, _reason(exc))
            return
        assert tls is not None
        self._hand_over(tls)

    def _hand_over(self, tls: asyncio.Transport) -> None:
        app = self._app_factory()
        tls.set_protocol(app)
        app.connection_made(tls)
        for data in self._early:
            app.data_received(data)
        if self._eof:
            app.eof_received()
        if self._lost:
            app.connection_lost(self._lost[0])

    # Between the handshake and the hand-over, asyncio's SSL protocol already
    # delivers to this protocol: keep everything for the HTTP protocol.
    def data_received(self, data: bytes) -> None:
        self._early.append(data)

    def eof_received(self) -> None:
        self._eof = True

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost.append(exc)
