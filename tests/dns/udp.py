"""Ask a responder in-process the way the transports do.

Over UDP a packet goes through what ``feddns.dns.transport.UdpServer`` runs for each
datagram: the cache's handler (a kept reply, else :meth:`Responder.respond`); over TCP
straight to :meth:`Responder.respond`, as ``TcpConnection`` does. No socket: the UDP
server's handler is given a ``sendto`` that keeps the reply.
"""

from collections.abc import Callable
from typing import Any
from weakref import WeakKeyDictionary

from feddns.dns.responder import Responder
from feddns.dns.transport import UdpServer


class _Sink:
    """A ``sendto`` that keeps what is sent."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def sendto(self, data: bytes, addr: Any) -> None:
        self.sent.append(data)


_servers: "WeakKeyDictionary[Responder, tuple[Callable[[bytes, Any], None], _Sink]]" = WeakKeyDictionary()


def respond(responder: Responder, data: bytes, client: str, tcp: bool) -> bytes | None:
    """The reply ``responder`` sends to packet ``data`` from address ``client`` over
    UDP (``tcp`` False) or TCP, or ``None`` when it sends none."""
    if tcp:
        return responder.respond(data, client, True)
    if responder not in _servers:
        sink = _Sink()
        _servers[responder] = UdpServer(responder).handler(sink.sendto), sink
    handle, sink = _servers[responder]
    sink.sent.clear()
    handle(data, (client, 53000))
    assert len(sink.sent) <= 1
    return sink.sent[0] if sink.sent else None
