"""The accepting side of the HTTPS components (``feddns stubzone``, ``feddns links``): TLS under bounds that no
peer can use up for the others, before an HTTP application (aiohttp's request handler) sees a byte.

A connection goes through two pools:

* **pending**, from the accept until the TLS handshake is done and the client let in: at most
  ``max_pending`` connections, and ``max_pending_per_address`` from one address (an IPv6 address counts
  by its /64, which one host usually holds whole). A connection over its address's share closes the
  oldest pending connection of that address; one over the whole pool closes the oldest of the address
  holding the most, when that is more than its own address holds, and is closed itself otherwise. So
  however many sockets a peer opens, from however many addresses, a newcomer from an address with
  fewer gets a slot, and a client's handshake, a few milliseconds old, is the last to go.
* **authenticated**, after the handshake: at most ``max_connections``, and ``max_connections_per_client``
  from one address (or IPv6 /64) and, apart from that, with one client certificate (told by its SHA-256),
  so that a client on many addresses is bounded too. Only here is the application made. A connection over a
  share of its own is closed right after its handshake; one over the whole pool closes the oldest
  connection of the share holding the most, when that is more than the newcomer's own shares hold, and is
  closed itself otherwise: a client holding its share (a trickled request head in every connection, say)
  leaves the rest of the pool to the others, and a newcomer from a lighter address always gets in. A
  client's connections past its share are refused, never its older ones closed: those may carry a request.

A pending connection holds nothing but its socket until the client's first bytes arrive; only then are
the TLS objects made (asyncio's SSL protocol with a 16 KiB receive buffer instead of its 256 KiB, and
OpenSSL's SSL object, whose buffers OpenSSL allocates at the first handshake step). The handshake must be
done within ``handshake_timeout`` of the accept. Right after it, ``authorize`` judges the peer's
certificate: a client it refuses gets a 403 with ``{"error": reason}`` at once and the connection
closes; it never reaches the application and never holds an authenticated slot.

Every request then has ``request_timeout`` seconds from its first byte to arrive whole, head and body
(:mod:`feddns.httpframing` tells where each request ends, whatever the application). Late, the
connection is closed, after a 408 when the head itself is late (the application has no request to
answer yet). An idle kept-alive connection is closed by the application (aiohttp's
``keepalive_timeout``, given ``idle_timeout``).

asyncio reports a failed server handshake only in debug mode, so the listener awaits each handshake
itself and logs refusals, at most one line a second with a count (:class:`RateLimitedLog`); a
connection closed before its handshake ended (a ``tcpSocket`` probe) is logged at debug level.
"""

import asyncio
import gc
import hashlib
import ipaddress
import json
import logging
import ssl
import time
from asyncio import sslproto
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Protocol, cast

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client import Counter as CounterMetric

from feddns.errors import ConfigError
from feddns.hostport import host_port
from feddns.httpframing import RequestFraming
from feddns.libc import release_free_memory
from feddns.lifecycle import cannot_listen

RECEIVE_BUFFER_BYTES = 16 * 1024
"""Bytes read from a TLS socket at once: one TLS record's plaintext (asyncio's default is 256 KiB)."""
RELEASE_AFTER_CLOSES = 128
"""Connections closed after which freed memory is handed back to the system (one second later, at most once a
second): after a flood, RSS falls back instead of staying at its peak."""
LINGER_SECONDS = 2.0
"""Seconds a refused client's bytes are read and dropped after its 403, so it reads the answer before the close."""
CLOSE_GRACE_SECONDS = 1.0
"""Seconds a closing connection has to send its last answer and TLS close_notify before it is cut."""


@dataclass(frozen=True)
class ListenerSettings:
    """How the HTTPS socket bounds its clients (docs/stubzone.md, "Connections and memory")."""

    handshake_timeout: float = 10.0
    """Seconds from the accept a client has to finish the TLS handshake (``--tls-handshake-timeout``)."""
    max_connections: int = 256
    """Connections past the handshake (and the allow-list) open at once; more are closed (``--max-connections``)."""
    max_pending: int = 256
    """Connections not past the handshake open at once, all addresses together (``--max-pending``)."""
    max_pending_per_address: int = 32
    """Connections not past the handshake open at once from one address or IPv6 /64
    (``--max-pending-per-address``)."""
    max_connections_per_client: int = 64
    """Connections past the handshake open at once from one address or IPv6 /64, and with one client
    certificate (``--max-connections-per-client``); over ``max_connections``, it is ``max_connections``."""
    request_timeout: float = 10.0
    """Seconds from a request's first byte until it has arrived whole, head and body (``--request-timeout``)."""
    idle_timeout: float = 60.0
    """Seconds a kept-alive connection may wait for its next request (``--idle-timeout``)."""

    def check(self) -> "ListenerSettings":
        """``self``, or :class:`ConfigError` naming the flag of the first bad count (the flags of seconds are
        checked as they are parsed: :mod:`feddns.numbers`)."""
        for flag, count in (("--max-connections", self.max_connections), ("--max-pending", self.max_pending),
                            ("--max-pending-per-address", self.max_pending_per_address),
                            ("--max-connections-per-client", self.max_connections_per_client)):
            if count < 1:
                raise ConfigError(f"{flag} must be at least 1")
        if self.max_pending_per_address > self.max_pending:
            raise ConfigError(f"--max-pending-per-address {self.max_pending_per_address} is more than "
                              f"--max-pending {self.max_pending}")
        return self


class ListenerMetrics:
    """The listener's Prometheus metrics, named ``<namespace>_connections`` and so on."""

    def __init__(self, registry: CollectorRegistry, namespace: str) -> None:
        self.connections = Gauge("connections", "TCP connections open now, pending and authenticated",
                                 namespace=namespace, registry=registry)
        self.pending = Gauge("connections_pending", "TCP connections open now whose TLS handshake is not done "
                             "or whose client was refused", namespace=namespace, registry=registry)
        self.connections_refused = CounterMetric(
            "connections_refused", "TCP connections closed because a pool was full: --max-pending, "
            "--max-pending-per-address (the oldest of an address is closed), --max-connections or "
            "--max-connections-per-client",
            namespace=namespace, registry=registry)
        self.tls_refused = CounterMetric(
            "tls_refused", "TLS handshakes refused or timed out, and clients refused after it (403: not in --allow)",
            namespace=namespace, registry=registry)
        self.requests_timed_out = CounterMetric(
            "requests_timed_out", "connections closed because a request did not arrive whole within "
            "--request-timeout", namespace=namespace, registry=registry)


Authorize = Callable[[ssl.SSLObject], str | None]
"""Judges a client right after its handshake: ``None`` lets it in, else the reason it is refused (403)."""


class Stoppable(Protocol):
    """What :meth:`TLSListener.shut_down` stops besides the listener (feddns.observe's server)."""

    def stop(self) -> None: ...


def address_key(transport: asyncio.BaseTransport) -> str:
    """Whose share a connection counts against: the peer's IPv4 address, or the /64 of its IPv6 address."""
    peer = transport.get_extra_info("peername")
    if not peer:
        return "?"
    try:
        address = ipaddress.ip_address(peer[0].partition("%")[0])
    except ValueError:
        return str(peer[0])
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def share_keys(transport: asyncio.BaseTransport, certificate: bytes | None) -> tuple[str, ...]:
    """The shares of the authenticated pool a connection counts against: its :func:`address_key`, and
    ``"certificate <hex>"`` (the first 16 hex digits of the SHA-256 of the DER certificate) when it showed one."""
    address = address_key(transport)
    if certificate is None:
        return (address,)
    return address, f"certificate {hashlib.sha256(certificate).hexdigest()[:16]}"


def peer_text(transport: asyncio.BaseTransport) -> str:
    """``host:port`` of the other end (``[v6]:port`` for IPv6), ``?`` if unknown."""
    peer = transport.get_extra_info("peername")
    if not peer:
        return "?"
    host, port = peer[0], peer[1]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def error_response(status: int, reason: str) -> bytes:
    """An HTTP/1.1 answer ``{"error": reason}`` with ``Connection: close``, for a connection about to close."""
    body = json.dumps({"error": reason}).encode()
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    return head.encode() + body


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


class RateLimitedLog:
    """Warnings of one kind, at most one line every ``interval`` seconds.

    The first event after a quiet interval is logged at once with its peer and
    reason (``"{singular}: peer=P reason="R""``); the events of the next
    ``interval`` seconds are counted by reason and logged as one line when it
    ends (``"{plural}: N more in the last 1.0 s (R: n, ...); last peer=P"``).
    At most :data:`MAX_REASONS` reasons are told apart, the rest are "other".
    """

    MAX_REASONS = 16

    def __init__(self, log: logging.Logger, singular: str, plural: str, interval: float = 1.0) -> None:
        self.log, self.singular, self.plural, self.interval = log, singular, plural, interval
        self._counts: Counter[str] = Counter()
        self._last_peer = ""
        self._timer: asyncio.TimerHandle | None = None

    def note(self, peer: str, reason: str) -> None:
        """One event from ``peer``; needs the running loop."""
        if self._timer is None:
            self.log.warning('%s: peer=%s reason="%s"', self.singular, peer, reason)
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
        self.log.warning("%s: %d more in the last %.1f s (%s); last peer=%s",
                         self.plural, sum(self._counts.values()), self.interval, reasons, self._last_peer)
        self._counts.clear()
        return True


class TLSListener:
    """The protocol factory of the listening socket: ``loop.create_server(listener, host, port)``.

    ``context()`` is the server context a new connection gets (read when its first bytes arrive);
    ``authorize`` judges each client after its handshake (``None``: every client that finishes one is
    let in); ``app_factory`` makes the application's protocol of a connection let in. Logs go to ``log``.
    """

    def __init__(self, app_factory: Callable[[], asyncio.Protocol], context: Callable[[], ssl.SSLContext],
                 metrics: ListenerMetrics, settings: ListenerSettings, log: logging.Logger,
                 authorize: Authorize | None = None) -> None:
        self.app_factory = app_factory
        self.context = context
        self.metrics = metrics
        self.settings = settings
        self.log = log
        self.authorize = authorize
        self.refusals = RateLimitedLog(log, "TLS handshake refused", "TLS handshakes refused")
        self.overflows = RateLimitedLog(log, "connection refused", "connections refused")
        self.forbidden = RateLimitedLog(log, "client refused", "clients refused")
        self.timeouts = RateLimitedLog(log, "request timed out", "requests timed out")
        self._pending: dict[str, dict[asyncio.Transport, None]] = {}  # by address_key, oldest first
        self._pending_count = 0
        self._authenticated: dict[asyncio.Transport, tuple[str, ...]] = {}  # each with its share keys
        self._shares: dict[str, dict[asyncio.Transport, None]] = {}  # authenticated, by share key, oldest first
        self._closed = 0
        self._release: asyncio.TimerHandle | None = None

    def __call__(self) -> asyncio.Protocol:
        return TLSAcceptor(self)

    @property
    def open(self) -> int:
        """Connections open now, pending and authenticated."""
        return self._pending_count + len(self._authenticated)

    async def bind(self, host: str, port: int) -> asyncio.Server:
        """The listening socket on ``host:port`` (``--listen``; port 0: one the OS picks) with this
        listener as its protocol factory. Raises :class:`ConfigError` naming ``--listen`` and the
        address when it cannot be bound (exit 2)."""
        try:
            return await asyncio.get_running_loop().create_server(self, host, port, reuse_address=True)
        except OSError as exc:
            raise cannot_listen("--listen", host_port(host, port), exc) from exc

    async def shut_down(self, server: asyncio.Server | None, metrics_endpoint: "Stoppable | None",
                        finish_requests: Callable[[], Awaitable[None]]) -> None:
        """Stop an HTTPS command in the order that loses no request: stop accepting (``server``, when
        it was bound), stop its metrics endpoint, let the requests in progress finish
        (``finish_requests``: aiohttp's ``AppRunner.cleanup``), then :meth:`close` what is left."""
        if server is not None:
            server.close()
        if metrics_endpoint is not None:
            metrics_endpoint.stop()
        await finish_requests()
        self.close()

    def close(self) -> None:
        """Abort every connection still open (after the server stopped accepting) and flush the logs."""
        for transport in [*self._authenticated, *(t for share in self._pending.values() for t in share)]:
            transport.abort()
        for log in (self.refusals, self.overflows, self.forbidden, self.timeouts):
            log.close()
        if self._release is not None:
            self._release.cancel()

    # -- the pools, called by the protocols -----------------------------------------------------

    def admit(self, transport: asyncio.Transport) -> bool:
        """Count a new connection as pending, making room as the module says; ``False`` when it is closed."""
        key = address_key(transport)
        share = self._pending.get(key, {})
        if len(share) >= self.settings.max_pending_per_address:
            self._evict(share, f"{len(share)} pending connections from {key} (--max-pending-per-address)")
        elif self._pending_count >= self.settings.max_pending:
            heaviest = max(self._pending.values(), key=len)
            reason = f"{self._pending_count} pending connections (--max-pending)"
            if len(heaviest) <= len(share):
                self._overflow(transport, reason)
                return False
            self._evict(heaviest, reason)
        self._pending.setdefault(key, {})[transport] = None
        self._pending_count += 1
        self._count()
        return True

    def promote(self, transport: asyncio.Transport, certificate: bytes | None) -> bool:
        """Move a connection let in from pending to authenticated, making room as the module says; ``False``
        (and logged) when it is closed. ``certificate``: the client's, DER (``None``: it showed none)."""
        keys = share_keys(transport, certificate)
        if len(self._authenticated) >= self.settings.max_connections:
            reason = f"{len(self._authenticated)} connections open (--max-connections)"
            heaviest = max(self._shares.values(), key=len)
            if len(heaviest) <= max(len(self._shares.get(key, ())) for key in keys):
                self._overflow(transport, reason)
                return False
            self._evict(heaviest, reason)
        share = min(self.settings.max_connections_per_client, self.settings.max_connections)
        for key in keys:
            if len(self._shares.get(key, ())) >= share:
                self._overflow(transport, f"{share} connections from {key} (--max-connections-per-client)")
                return False
        if not self._forget_pending(transport):  # closed meanwhile: never serve a connection not counted
            return False
        self._authenticated[transport] = keys
        for key in keys:
            self._shares.setdefault(key, {})[transport] = None
        self._count()
        return True

    def release(self, transport: asyncio.Transport) -> None:
        """A connection closed (or was closed); its slot is free. Calling it twice is harmless."""
        if self._forget_pending(transport) or self._forget_authenticated(transport):
            self._count()
            self._closed += 1
            if self._closed >= RELEASE_AFTER_CLOSES and self._release is None:
                self._release = asyncio.get_running_loop().call_later(1.0, self._give_back_memory)

    def _forget_pending(self, transport: asyncio.Transport) -> bool:
        key = address_key(transport)
        share = self._pending.get(key)
        if share is None or transport not in share:
            return False
        del share[transport]
        if not share:
            del self._pending[key]
        self._pending_count -= 1
        return True

    def _forget_authenticated(self, transport: asyncio.Transport) -> bool:
        keys = self._authenticated.pop(transport, None)
        if keys is None:
            return False
        for key in keys:
            share = self._shares[key]
            del share[transport]
            if not share:
                del self._shares[key]
        return True

    def _evict(self, share: dict[asyncio.Transport, None], reason: str) -> None:
        oldest = next(iter(share))
        self._overflow(oldest, reason)
        self.release(oldest)
        oldest.abort()

    def _overflow(self, transport: asyncio.Transport, reason: str) -> None:
        self.metrics.connections_refused.inc()
        self.overflows.note(peer_text(transport), reason)

    def _count(self) -> None:
        self.metrics.connections.set(self.open)
        self.metrics.pending.set(self._pending_count)

    def _give_back_memory(self) -> None:
        self._release, closed, self._closed = None, self._closed, 0
        started = time.monotonic()
        collected = give_back_memory()
        self.log.debug("%d connections closed: %d objects collected, free memory handed back in %.1f ms",
                       closed, collected, (time.monotonic() - started) * 1000)

    # -- events, called by the protocols ----------------------------------------------------------

    def refused(self, peer: str, reason: str) -> None:
        """A handshake failed or timed out."""
        self.metrics.tls_refused.inc()
        self.refusals.note(peer, reason)

    def refused_client(self, peer: str, reason: str) -> None:
        """A client finished its handshake and ``authorize`` refused it."""
        self.metrics.tls_refused.inc()
        self.forbidden.note(peer, reason)

    def timed_out(self, peer: str, stage: str) -> None:
        """A request did not arrive whole in time."""
        self.metrics.requests_timed_out.inc()
        self.timeouts.note(peer, f"no whole request within {self.settings.request_timeout:g} s "
                                 f"(--request-timeout; still {stage})")

    def start_tls(self, transport: asyncio.Transport, first: bytes, timeout: float) -> None:
        """Make the TLS objects now that ``first`` (the start of a ClientHello) arrived, and run the handshake.

        The SSL protocol replaces the acceptor on ``transport``, gets ``first``
        as if it had read it, and calls :class:`HTTPConnection`'s ``connection_made``
        when the handshake succeeds.
        """
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        peer = peer_text(transport)
        tls = ServerTLSProtocol(self, loop, HTTPConnection(self, transport), self.context(), waiter, timeout)
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
            self.log.debug("TLS handshake not finished: peer=%s closed the connection", peer)
        else:
            self.refused(peer, _reason(exc))


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
    release_free_memory()
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
        transport = cast(asyncio.Transport, transport)  # uvloop's is one without deriving from it
        if not self._listener.admit(transport):
            transport.abort()
            return
        self._transport = transport
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + self._listener.settings.handshake_timeout
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
            self._listener.log.debug("TLS handshake not finished: peer=%s closed the connection",
                                     peer_text(self._transport))
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
            self._listener.release(cast(asyncio.Transport, transport))


class HTTPConnection(asyncio.Protocol):
    """What the SSL protocol hands the plaintext of one connection to, from the end of its handshake.

    It asks ``authorize``, moves the connection to the authenticated pool and makes the application's
    protocol, then passes every byte on to it, timing each request on the way (module doc).
    """

    def __init__(self, listener: TLSListener, raw: asyncio.Transport) -> None:
        self._listener = listener
        self._raw = raw  # the TCP transport: what the pools count, and what is cut at the end
        self._app: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._framing = RequestFraming()
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)
        self._transport = transport
        listener = self._listener
        ssl_object = transport.get_extra_info("ssl_object")
        reason = listener.authorize(ssl_object) if listener.authorize is not None else None
        if reason is not None:
            listener.refused_client(peer_text(self._raw), reason)
            transport.write(error_response(403, reason))
            self._timer = asyncio.get_running_loop().call_later(LINGER_SECONDS, self._close)
            return
        if not listener.promote(self._raw, ssl_object.getpeercert(binary_form=True) if ssl_object else None):
            transport.abort()
            return
        self._app = listener.app_factory()
        self._app.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._app is None:
            return  # a refused client's request: read and dropped until the close
        framing = self._framing
        before = framing.in_request
        ended = framing.feed(data)
        if not framing.in_request:
            self._stop_timer()
        elif not before or ended:
            self._stop_timer()
            self._timer = asyncio.get_running_loop().call_later(self._listener.settings.request_timeout,
                                                                self._request_late)
        self._app.data_received(data)

    def eof_received(self) -> bool | None:
        if self._app is None:
            self._close()
            return None
        return self._app.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        if self._app is not None:
            self._app.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._app is not None:
            self._app.pause_writing()

    def resume_writing(self) -> None:
        if self._app is not None:
            self._app.resume_writing()

    def _request_late(self) -> None:
        self._timer = None
        self._listener.timed_out(peer_text(self._raw), self._framing.stage.value)
        if self._framing.in_head and self._transport is not None:  # no request reached the application
            self._transport.write(error_response(408, f"the request did not arrive within "
                                                      f"{self._listener.settings.request_timeout:g} s"))
        self._close()

    def _close(self) -> None:
        """Close with TLS close_notify; cut the connection if that has not happened after a grace period."""
        self._stop_timer()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        self._timer = asyncio.get_running_loop().call_later(CLOSE_GRACE_SECONDS, self._raw.abort)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
