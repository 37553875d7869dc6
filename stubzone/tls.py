"""Server TLS of the stub-zone endpoint (docs/reference.md section 5): the context, its reload, and the
accepting side, with connections and memory bounded before any client is authenticated.

The context is TLS 1.2 or later with ``CERT_REQUIRED`` against ``--client-ca``:
a client without a certificate the CA signed (and still valid, and made for
``clientAuth``) never reaches HTTP. TLS 1.2 offers only AEAD suites with
ECDHE (AES-GCM, ChaCha20-Poly1305); TLS 1.3 suites are all AEAD.

:class:`ServerCredentials` holds the context made from ``--cert``, ``--key``
and ``--client-ca`` and makes a new one when their contents change on disk (a
Kubernetes Secret volume swaps its ``..data`` symlink; cert-manager renews).
New connections get the new context; connections already open keep theirs.
A set that does not load (a key of another certificate, a file missing while
it is being replaced) is refused, logged once, and the old context stays.

:class:`TLSListener` is the protocol factory of the listening socket. Each
accepted connection is counted against ``--max-connections`` (above it, it is
closed at once) and holds nothing but its socket until the client's first
bytes arrive: only then are the TLS objects made (``asyncio``'s SSL protocol
with a 16 KiB receive buffer instead of its 256 KiB, and OpenSSL's SSL
object, whose buffers OpenSSL allocates at the first handshake step). So
1,000 idle connections cost a few MB, not 300. ``--tls-handshake-timeout``
counts from the accept, so a connection that never completes a handshake is
closed then. asyncio reports a failed server handshake only in debug mode,
so the listener awaits each handshake itself and logs refusals, at most one
line a second with a count (:class:`RateLimitedLog`); a connection closed
before the handshake ended (a ``tcpSocket`` probe) is logged at debug level.
"""

import asyncio
import ctypes
import ctypes.util
import gc
import logging
import ssl
import time
from asyncio import sslproto
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509

from feddns import tlsfiles
from feddns.errors import ConfigError
from stubzone.metrics import StubzoneMetrics

log = logging.getLogger("stubzone")

RECEIVE_BUFFER_BYTES = 16 * 1024
"""Bytes read from a TLS socket at once: one TLS record's plaintext (asyncio's default is 256 KiB)."""
RELEASE_AFTER_CLOSES = 128
"""Connections closed after which freed memory is handed back to the system (one second later, at most once a
second): after a flood, RSS falls back instead of staying at its peak."""
@dataclass(frozen=True)
class ListenerSettings:
    """How the HTTPS socket bounds its clients and follows its certificate files (docs/stubzone.md)."""

    handshake_timeout: float = 10.0
    """Seconds from the accept a client has to finish the TLS handshake (``--tls-handshake-timeout``)."""
    max_connections: int = 256
    """Connections open at once, before and after the handshake; more are closed at once (``--max-connections``)."""
    reload_interval: float = 10.0
    """Seconds between two looks at ``--cert``, ``--key`` and ``--client-ca`` (``--tls-reload-interval``)."""


Refused = Callable[[str, str], None]
"""Called with ``(peer "host:port", reason)`` for each refused handshake."""


def server_context(cert: Path, key: Path, client_ca: Path) -> ssl.SSLContext:
    """The server ``SSLContext``: TLS >= 1.2, AEAD suites, client certificates required and verified.

    Raises :class:`ConfigError` naming the flag when a file is missing,
    unreadable, not PEM, or the key does not match the certificate.
    """
    return tlsfiles.server_context(cert, key, client_ca, ciphers=tlsfiles.TLS12_CIPHERS)


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
        """Call :meth:`reload` every ``interval`` seconds, until cancelled."""
        while True:
            await asyncio.sleep(interval)
            try:
                self.reload()
            except Exception:  # a bug in one look must not end the watching: the next look may succeed
                log.exception("TLS certificates: looking at the files failed")

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


class RateLimitedLog:
    """Warnings of one kind, at most one line every ``interval`` seconds.

    The first event after a quiet interval is logged at once with its peer and
    reason (``"{singular}: peer=P reason="R""``); the events of the next
    ``interval`` seconds are counted by reason and logged as one line when it
    ends (``"{plural}: N more in the last 1.0 s (R: n, ...); last peer=P"``).
    At most :data:`MAX_REASONS` reasons are told apart, the rest are "other".
    """

    MAX_REASONS = 16

    def __init__(self, singular: str, plural: str, interval: float = 1.0) -> None:
        self.singular, self.plural, self.interval = singular, plural, interval
        self._counts: Counter[str] = Counter()
        self._last_peer = ""
        self._timer: asyncio.TimerHandle | None = None

    def note(self, peer: str, reason: str) -> None:
        """One event from ``peer``; needs the running loop."""
        if self._timer is None:
            log.warning('%s: peer=%s reason="%s"', self.singular, peer, reason)
            self._timer = asyncio.get_running_loop().call_later(self.interval, self._flush)
            return
        if reason not in self._counts and len(self._counts) >= self.MAX_REASONS:
            reason = "other"
        self._counts[reason] += 1
        self._last_peer = peer

    def close(self) -> None:
        """Log what is counted now and stop the timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._log_counts()

    def _flush(self) -> None:
        self._timer = None
        if self._log_counts():
            self._timer = asyncio.get_running_loop().call_later(self.interval, self._flush)

    def _log_counts(self) -> bool:
        if not self._counts:
            return False
        reasons = ", ".join(f"{reason}: {count}" for reason, count in self._counts.most_common())
        log.warning("%s: %d more in the last %.1f s (%s); last peer=%s",
                    self.plural, sum(self._counts.values()), self.interval, reasons, self._last_peer)
        self._counts.clear()
        return True


class TLSListener:
    """The protocol factory of the listening socket: ``loop.create_server(listener, host, port)``.

    Admits at most ``settings.max_connections`` connections at once; runs each
    one's TLS handshake with ``credentials.context`` as it is when the client's
    first bytes arrive, within ``settings.handshake_timeout`` seconds of the accept;
    then hands the TLS transport to a protocol from ``app_factory``
    (aiohttp's request handler), which sees only authenticated clients.
    """

    def __init__(self, app_factory: Callable[[], asyncio.Protocol], credentials: ServerCredentials,
                 metrics: StubzoneMetrics, settings: ListenerSettings) -> None:
        self.app_factory = app_factory
        self.credentials = credentials
        self.metrics = metrics
        self.handshake_timeout = settings.handshake_timeout
        self.max_connections = settings.max_connections
        self.refusals = RateLimitedLog("TLS handshake refused", "TLS handshakes refused")
        self.overflows = RateLimitedLog("connection refused", "connections refused")
        self._open: set[asyncio.BaseTransport] = set()  # the raw TCP transports
        self._closed = 0
        self._release: asyncio.TimerHandle | None = None

    def __call__(self) -> asyncio.Protocol:
        return TLSAcceptor(self)

    @property
    def open(self) -> int:
        """Connections open now, before and after their handshake."""
        return len(self._open)

    def close(self) -> None:
        """Abort every connection still open (after the server stopped accepting) and flush the logs."""
        for transport in list(self._open):
            if isinstance(transport, asyncio.Transport):
                transport.abort()
            else:
                transport.close()
        self.refusals.close()
        self.overflows.close()
        if self._release is not None:
            self._release.cancel()

    # -- called by the protocols ---------------------------------------------------------------

    def admit(self, transport: asyncio.BaseTransport) -> bool:
        """Count a new connection; ``False`` (and counted, and logged) when ``max_connections`` are open."""
        if len(self._open) >= self.max_connections:
            self.metrics.connections_refused.inc()
            self.overflows.note(peer_text(transport), f"{len(self._open)} connections open (--max-connections)")
            return False
        self._open.add(transport)
        self.metrics.connections.set(len(self._open))
        return True

    def release(self, transport: asyncio.BaseTransport) -> None:
        """A counted connection closed."""
        self._open.discard(transport)
        self.metrics.connections.set(len(self._open))
        self._closed += 1
        if self._closed >= RELEASE_AFTER_CLOSES and self._release is None:
            self._release = asyncio.get_running_loop().call_later(1.0, self._give_back_memory)

    def _give_back_memory(self) -> None:
        self._release, closed, self._closed = None, self._closed, 0
        started = time.monotonic()
        collected = give_back_memory()
        log.debug("%d connections closed: %d objects collected, free memory handed back in %.1f ms",
                  closed, collected, (time.monotonic() - started) * 1000)

    def refused(self, peer: str, reason: str) -> None:
        """A handshake failed or timed out."""
        self.metrics.tls_refused.inc()
        self.refusals.note(peer, reason)

    def start_tls(self, transport: asyncio.Transport, first: bytes, timeout: float) -> None:
        """Make the TLS objects now that ``first`` (the start of a ClientHello) arrived, and run the handshake.

        The SSL protocol replaces the acceptor on ``transport``, gets ``first``
        as if it had read it, and calls the application protocol's
        ``connection_made`` when the handshake succeeds.
        """
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        peer = peer_text(transport)
        tls = ServerTLSProtocol(self, loop, self.app_factory(), self.credentials.context, waiter, timeout)
        transport.set_protocol(tls)
        tls.connection_made(transport)
        view = memoryview(first)
        while view:
            buffer = tls.get_buffer(len(view))
            size = min(len(buffer), len(view))
            buffer[:size] = view[:size]
            tls.buffer_updated(size)
            view = view[size:]
        waiter.add_done_callback(lambda done: self._handshake_done(done, peer))

    def _handshake_done(self, waiter: "asyncio.Future[None]", peer: str) -> None:
        if waiter.cancelled():
            return
        exc = waiter.exception()
        if exc is None:
            return
        if isinstance(exc, ConnectionResetError | BrokenPipeError):
            log.debug("TLS handshake not finished: peer=%s closed the connection", peer)
        else:
            self.refused(peer, _reason(exc))


def _malloc_trim() -> "Callable[[int], int] | None":
    """glibc's ``malloc_trim``, or ``None`` under another C library."""
    try:
        trim: Callable[[int], int] = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_MALLOC_TRIM = _malloc_trim()


def give_back_memory() -> int:
    """Free what closed connections left and hand the free pages back to the system; returns objects collected.

    Two things keep a closed connection's memory: asyncio's socket transports
    sit in a reference cycle (a bound method of their own, kept as an
    attribute) that only Python's full collection frees, and glibc's
    ``malloc`` keeps freed blocks inside its heap, where OpenSSL's per-connection
    buffers (16-40 KB each) lie between long-lived objects, so they never reach
    the top of the heap that ``free`` trims. ``malloc_trim(0)`` releases every
    free page inside the heap (``MADV_DONTNEED``).
    """
    collected = gc.collect()
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
    return collected


class TLSAcceptor(asyncio.Protocol):
    """One accepted TCP connection until the client's first bytes arrive; then :meth:`TLSListener.start_tls`."""

    __slots__ = ("_deadline", "_listener", "_timer", "_transport")

    def __init__(self, listener: TLSListener) -> None:
        self._listener = listener
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        if not self._listener.admit(transport):
            transport.abort()
            return
        self._transport = transport
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + self._listener.handshake_timeout
        self._timer = loop.call_at(self._deadline, self._timed_out)

    def data_received(self, data: bytes) -> None:
        transport = self._transport
        if transport is None:
            return
        self._stop_timer()
        remaining = max(self._deadline - asyncio.get_running_loop().time(), 0.001)
        try:
            self._listener.start_tls(transport, data, remaining)
        except BaseException:  # asyncio closes the connection; its slot is freed whoever holds it now
            self._listener.release(transport)
            raise
        self._transport = None

    def eof_received(self) -> None:
        if self._transport is not None:
            log.debug("TLS handshake not finished: peer=%s closed the connection", peer_text(self._transport))
        # None: the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        if self._transport is not None:
            self._listener.release(self._transport)
            self._transport = None

    def _timed_out(self) -> None:
        self._timer = None
        if self._transport is not None:
            self._listener.refused(peer_text(self._transport), "no TLS handshake within the timeout")
            self._transport.abort()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class ServerTLSProtocol(sslproto.SSLProtocol):
    """asyncio's SSL protocol with a :data:`RECEIVE_BUFFER_BYTES` buffer; tells the listener when it closes.

    asyncio makes this buffer (256 KiB by default) with every SSL protocol and
    keeps it for the life of the connection; ``max_size`` is its size.
    """

    max_size = RECEIVE_BUFFER_BYTES

    def __init__(self, listener: TLSListener, loop: asyncio.AbstractEventLoop, app: asyncio.BaseProtocol,
                 context: ssl.SSLContext, waiter: "asyncio.Future[None]", handshake_timeout: float) -> None:
        super().__init__(loop, app, context, waiter, server_side=True,
                         ssl_handshake_timeout=handshake_timeout)  # type: ignore[arg-type]  # typeshed says int
        self._listener = listener

    def connection_lost(self, exc: BaseException | None) -> None:
        transport = self._transport
        super().connection_lost(exc)
        if transport is not None:
            self._listener.release(transport)
