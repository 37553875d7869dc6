"""UDP and TCP transports (RFC 1035 4.2, RFC 7766) for one listen address.

UDP (:class:`UdpServer`): the socket is read by the loop's reader callback, up to 64
datagrams a wakeup, and each goes to the cache's handler (``Cache.udp_handler``): a
reply kept for the packet is sent at once; anything else goes to
:meth:`Responder.respond`. TCP messages go
to :meth:`Responder.respond` (no reply is kept for TCP).

TCP (RFC 7766): 2-byte length framing, pipelined queries answered in order.
A framed message that is not a query (a response, or shorter than a header) is
dropped as over UDP, and the next message is read: the framing is intact, so
the queries queued behind it are still whole (NSD and BIND close the
connection instead). Then the limits that keep a client from holding memory
or sockets:

* backpressure: while a connection's unsent replies exceed
  :attr:`TcpLimits.high_water` bytes, it is not read (the kernel's buffers then
  push back on the client); reading resumes below a quarter of that;
* a deadline: a connection must complete a message within ``idle_timeout``
  seconds of connecting or of its last complete message, else it is aborted,
  unsent replies and all. This closes idle connections (RFC 7766 6.2.3),
  clients that never read (their connection stops being read, so no message
  completes), and clients that send a message a byte every few seconds;
* at most ``max_connections`` connections at once; one above that is closed as
  soon as it is accepted.

Several processes (``feddns serve --workers N``) answer on one address through
SO_REUSEPORT: the kernel spreads datagrams and connections over the sockets by
a hash of the client's address and port. :func:`reserve` checks the address as
:func:`listen` binds it (a program already there is refused), then each worker
gets sockets of its own from :func:`bind_shared` and answers on them with
:func:`answer_on`.
"""

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from feddns.dns.responder import Responder

if TYPE_CHECKING:
    from feddns.querylog import QueryLog

log = logging.getLogger(__name__)

LENGTH_BYTES = 2
"""The length that frames each DNS message over TCP (RFC 1035 4.2.2, RFC 7766 8)."""

BIND_ATTEMPTS = 20
"""Ports the OS picks for UDP before one is free for TCP too (``listen`` with port 0)."""


@dataclass(frozen=True, slots=True)
class TcpLimits:
    """Limits of DNS over TCP (RFC 7766 section 6): the TCP group of ``feddns serve``'s
    settings (:class:`feddns.server.settings.ServeSettings`, docs/serve.md)."""

    idle_timeout: float = 10.0
    """Seconds a connection may go without completing a message (``--tcp-idle-timeout``)."""
    max_connections: int = 1000
    """Open connections at most; more are closed at once (``--max-tcp-connections``)."""
    high_water: int = 256 * 1024
    """Bytes of unsent replies above which a connection is no longer read (a client that does not read)."""


UDP_BATCH = 64
"""Datagrams a UDP socket's reader takes per wakeup before the loop runs its other callbacks."""
UDP_LARGEST = 65535
"""Bytes read per datagram: more than any UDP payload holds (65,507 over IPv4, 65,527 over
IPv6), so none is cut."""


class UdpServer:
    """Answers DNS over UDP on one socket, read by the event loop's reader callback
    (``loop.add_reader``): each time the socket is readable, up to :data:`UDP_BATCH` datagrams
    are taken with ``recvfrom`` and each goes to the cache's handler
    (``feddns.dns.cache.Cache.udp_handler``: one frame for a kept reply), which calls
    :meth:`Responder.respond` for the rest and sends the reply with ``sendto``.

    No transport stands between: asyncio's datagram transport costs a call and a buffer
    check a datagram (docs/performance.md, "The floor of a Python server"). A reply the
    kernel cannot take at once (its send buffer full: ``BlockingIOError``) or refuses is
    dropped and counted (``Stats.unsent``, the metric ``feddns_dns_replies_unsent_total``),
    as a full network drops it; asyncio's transport would have queued it without bound. The
    query still counts as answered in the query metrics, and ``--query-log`` does not write
    it.
    ``query_log`` (``--query-log``): every reply is written to it.
    """

    def __init__(self, responder: Responder, query_log: "QueryLog | None" = None) -> None:
        self.responder = responder
        self.query_log = query_log
        self._sock: socket.socket | None = None
        self._fd = -1
        self._loop: asyncio.AbstractEventLoop | None = None

    def handler(self, sendto: Callable[[bytes, Any], object]) -> Callable[[bytes, Any], None]:
        """The function that answers one datagram ``(data, addr)``, sending with ``sendto``
        (which may raise ``OSError``)."""
        responder = self.responder
        if self.query_log is None:
            return responder.cache.udp_handler(responder.respond, sendto)
        return _logged(self.query_log, responder, sendto)

    def serve(self, sock: socket.socket) -> None:
        """Answer the datagrams that come to the bound UDP socket ``sock`` (made non-blocking)
        on the running loop, until :meth:`close`."""
        sock.setblocking(False)
        self._sock, self._fd = sock, sock.fileno()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._fd, self._reader(sock))

    def _reader(self, sock: socket.socket) -> Callable[[], None]:
        receive = sock.recvfrom
        handle = self.handler(sock.sendto)
        stats = self.responder.stats

        def readable() -> None:
            for _ in range(UDP_BATCH):
                try:
                    data, addr = receive(UDP_LARGEST)
                except (BlockingIOError, InterruptedError):  # read them all
                    return
                except OSError as exc:  # an ICMP error queued for the socket: nothing to answer
                    log.debug("UDP error: %s", exc)
                    return
                try:
                    handle(data, addr)
                except OSError as exc:  # the reply was not sent: dropped
                    stats.unsent += 1
                    log.debug("UDP reply to %s not sent: %s", addr[0], exc)

        return readable

    def close(self) -> None:
        """Stop reading and close the socket (idempotent)."""
        if self._sock is None:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)  # the fd it was added with, even if the socket was closed since
        self._sock.close()
        self._sock = None


def _logged(query_log: "QueryLog", responder: Responder,
            sendto: Callable[[bytes, Any], object]) -> Callable[[bytes, Any], None]:
    """The cache's UDP handler with each reply it sends written to ``query_log``
    (``feddns serve --query-log``): a frame more per query, only when asked for."""
    sent: list[bytes] = []

    def send(reply: bytes, addr: Any) -> None:
        sendto(reply, addr)
        sent.append(reply)

    handler = responder.cache.udp_handler(responder.respond, send)
    clock = query_log.clock

    def datagram_received(data: bytes, addr: Any) -> None:
        started = clock()
        sent.clear()  # a reply of a query whose handling raised is not this query's
        handler(data, addr)
        if sent:
            query_log.record(data, sent[-1], addr[0], False, started)

    return datagram_received


class TcpConnections:
    """The TCP connections of one server: counts them against the limit; ``query_log``
    (``--query-log``) is told every reply."""

    def __init__(self, responder: Responder, limits: TcpLimits, query_log: "QueryLog | None" = None) -> None:
        self.responder = responder
        self.limits = limits
        self.query_log = query_log
        self.open = 0
        self.refused = 0

    def protocol(self) -> "TcpConnection":
        return TcpConnection(self)


class TcpConnection(asyncio.Protocol):
    """One DNS-over-TCP connection (RFC 7766 8: length-prefixed messages)."""

    def __init__(self, server: TcpConnections) -> None:
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.client = ""
        self.paused = False
        self.counted = False
        self.timer: asyncio.TimerHandle | None = None
        self.progress = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        server = self.server
        if server.open >= server.limits.max_connections:
            server.refused += 1
            log.debug("TCP connection refused: %d open", server.open)
            transport.abort()  # type: ignore[attr-defined]
            return
        server.open += 1
        self.counted = True
        peer = transport.get_extra_info("peername")
        self.client = peer[0] if peer else ""
        high = server.limits.high_water
        transport.set_write_buffer_limits(high=high, low=high // 4)  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        self.progress = loop.time()
        self.timer = loop.call_later(server.limits.idle_timeout, self._check_deadline)

    def _check_deadline(self) -> None:
        """Abort when no message completed within the timeout; else look again when
        the deadline of the last complete message comes."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        late = loop.time() - self.progress
        timeout = self.server.limits.idle_timeout
        if late >= timeout:
            self.timer = None
            self.transport.abort()  # unsent replies too: a client that does not read gets no more
            return
        self.timer = loop.call_later(timeout - late, self._check_deadline)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._answer_buffered()

    def _answer_buffered(self) -> None:
        transport = self.transport
        assert transport is not None
        buffer = self.buffer
        answered = False
        while not self.paused and len(buffer) >= LENGTH_BYTES:
            size = buffer[0] << 8 | buffer[1]
            if len(buffer) < LENGTH_BYTES + size:
                break
            message = bytes(buffer[LENGTH_BYTES : LENGTH_BYTES + size])
            del buffer[: LENGTH_BYTES + size]
            answered = True
            query_log = self.server.query_log
            started = query_log.clock() if query_log is not None else 0.0
            reply = self.server.responder.respond(message, self.client, True)
            if reply is not None:  # None: not a query, dropped; the next message starts after it all the same
                transport.write(len(reply).to_bytes(2, "big") + reply)
                if query_log is not None:
                    query_log.record(message, reply, self.client, True, started)
        if answered:
            self.progress = asyncio.get_running_loop().time()

    def pause_writing(self) -> None:
        """Unsent replies passed the high-water mark: stop reading this client."""
        self.paused = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        """The client read its replies down to the low-water mark: go on."""
        self.paused = False
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()
            self._answer_buffered()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.counted:
            self.server.open -= 1
            self.counted = False
        self.buffer.clear()


async def listen(responder: Responder, host: str, port: int, limits: TcpLimits = TcpLimits(),
                 query_log: "QueryLog | None" = None) -> tuple[list[Any], int, TcpConnections]:
    """Open UDP and TCP on ``host:port`` (port 0: one port the OS picks, the same
    for both); every reply is written to ``query_log`` when there is one. Returns the
    transports/servers to close, the bound port and the TCP connection counter.

    Raises ``OSError`` when the address cannot be bound.
    """
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    connections = TcpConnections(responder, limits, query_log)
    for attempt in range(BIND_ATTEMPTS if port == 0 else 1):
        udp_sock = socket.socket(family, socket.SOCK_DGRAM)
        udp_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        udp_sock.bind((host, port))
        bound = udp_sock.getsockname()[1]
        try:
            server = await loop.create_server(connections.protocol, host, bound, family=family, reuse_address=True)
        except OSError:
            udp_sock.close()
            if attempt == BIND_ATTEMPTS - 1 or port != 0:
                raise
            continue
        udp = UdpServer(responder, query_log)
        udp.serve(udp_sock)
        return [udp, server], bound, connections
    raise OSError(f"could not bind UDP and TCP on one port of {host}")


UDP_RECEIVE_BUFFER = 4 * 1024 * 1024
"""SO_RCVBUF of a UDP socket: bursts queue in the kernel, not on the floor."""


def reserve(host: str, port: int) -> int:
    """The port ``host:port`` gives UDP and TCP alike (port 0: one the OS picks), checked
    free as :func:`listen` binds it, without SO_REUSEPORT; the sockets are closed again.

    Raises ``OSError`` when the address cannot be bound. Checked without SO_REUSEPORT, an
    address that another program holds stays refused even when that program set the option
    (CoreDNS does): the kernel would otherwise share its queries with ours. Another program
    could take the port between this check and :func:`bind_shared`; then that bind fails.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for attempt in range(BIND_ATTEMPTS if port == 0 else 1):
        with socket.socket(family, socket.SOCK_DGRAM) as udp_sock, socket.socket(family, socket.SOCK_STREAM) as tcp:
            udp_sock.bind((host, port))
            bound = int(udp_sock.getsockname()[1])
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's create_server binds
            try:
                tcp.bind((host, bound))
            except OSError:
                if attempt == BIND_ATTEMPTS - 1 or port != 0:
                    raise
                continue
            return bound
    raise OSError(f"could not bind UDP and TCP on one port of {host}")


def bind_shared(host: str, port: int) -> tuple[socket.socket, socket.socket]:
    """A UDP and a TCP socket bound to ``host:port`` with SO_REUSEPORT, for one worker
    (the TCP one listens once :func:`answer_on` serves it). Raises ``OSError``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    udp_sock = socket.socket(family, socket.SOCK_DGRAM)
    tcp = socket.socket(family, socket.SOCK_STREAM)
    try:
        udp_sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        udp_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, UDP_RECEIVE_BUFFER)
        udp_sock.bind((host, port))
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6:  # as asyncio's create_server binds an IPv6 host
            tcp.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        tcp.bind((host, port))
    except BaseException:
        udp_sock.close()
        tcp.close()
        raise
    return udp_sock, tcp


async def answer_on(responder: Responder, udp_sock: socket.socket, tcp_sock: socket.socket,
                    limits: TcpLimits = TcpLimits(),
                    query_log: "QueryLog | None" = None) -> tuple[list[Any], TcpConnections]:
    """Answer on sockets already bound (:func:`bind_shared`). Returns the transports/servers
    to close and the TCP connection counter, as :func:`listen` does."""
    loop = asyncio.get_running_loop()
    connections = TcpConnections(responder, limits, query_log)
    server = await loop.create_server(connections.protocol, sock=tcp_sock)
    udp = UdpServer(responder, query_log)
    udp.serve(udp_sock)
    return [udp, server], connections
