"""UDP and TCP transports (RFC 1035 4.2, RFC 7766) for one listen address.

UDP: the reply-cache hit is inlined in ``datagram_received`` (one dict
lookup, one concatenation, one ``sendto``); anything else goes to
:meth:`Responder.slow`. TCP: 2-byte length framing, pipelined queries answered
in order, idle connections closed after ``idle_timeout`` seconds.
"""

import asyncio
import logging
import socket
import struct
from typing import Any

from feddns.dns.responder import Responder

log = logging.getLogger(__name__)

TCP_IDLE_TIMEOUT = 10.0
"""Seconds an idle TCP connection is kept open (RFC 7766 6.2.3)."""


class UdpServer(asyncio.DatagramProtocol):
    """Answers DNS over UDP on one socket."""

    def __init__(self, responder: Responder) -> None:
        self.replies = responder.udp_replies
        self.slow = responder.slow
        self.sendto: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.sendto = transport.sendto  # type: ignore[attr-defined]

    def datagram_received(self, data: bytes, addr: tuple[Any, ...]) -> None:
        entry = self.replies.get(data[2:])
        if entry is not None:
            entry.hits += 1
            self.sendto(data[:2] + entry.next(), addr)
            return
        reply = self.slow(data, addr[0], False)
        if reply is not None:
            self.sendto(reply, addr)

    def error_received(self, exc: Exception) -> None:
        log.debug("UDP error: %s", exc)


class TcpConnection(asyncio.Protocol):
    """One DNS-over-TCP connection (RFC 7766 8: length-prefixed messages)."""

    def __init__(self, responder: Responder, idle_timeout: float = TCP_IDLE_TIMEOUT) -> None:
        self.responder = responder
        self.idle_timeout = idle_timeout
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.client = ""
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.client = peer[0] if peer else ""
        self._arm()

    def _arm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(self.idle_timeout, self._idle)

    def _idle(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._arm()
        while len(self.buffer) >= 2:
            (size,) = struct.unpack_from("!H", self.buffer)
            if len(self.buffer) < 2 + size:
                return
            message = bytes(self.buffer[2 : 2 + size])
            del self.buffer[: 2 + size]
            reply = self.responder.respond(message, self.client, True)
            if reply is None:  # unreadable: the stream cannot be trusted any more
                assert self.transport is not None
                self.transport.close()
                return
            assert self.transport is not None
            self.transport.write(struct.pack("!H", len(reply)) + reply)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()


async def listen(responder: Responder, host: str, port: int) -> tuple[list[asyncio.BaseTransport], int]:
    """Open UDP and TCP on ``host:port`` (port 0: one port the OS picks, the same
    for both). Returns the transports/servers to close and the bound port.

    Raises ``OSError`` when the address cannot be bound.
    """
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for attempt in range(20 if port == 0 else 1):
        udp_sock = socket.socket(family, socket.SOCK_DGRAM)
        udp_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        udp_sock.bind((host, port))
        bound = udp_sock.getsockname()[1]
        try:
            server = await loop.create_server(
                lambda: TcpConnection(responder), host, bound, family=family, reuse_address=True
            )
        except OSError:
            udp_sock.close()
            if attempt == 19 or port != 0:
                raise
            continue
        udp, _ = await loop.create_datagram_endpoint(lambda: UdpServer(responder), sock=udp_sock)
        return [udp, server], bound  # type: ignore[list-item]
    raise OSError(f"could not bind UDP and TCP on one port of {host}")
