"""The UDP server's own socket loop (feddns.dns.transport.UdpServer), in-process on uvloop and
on asyncio's own loop (used where uvloop is not installed), with real loopback sockets:
datagrams queued past one wakeup's batch are all answered, a reply the kernel will not take
is dropped and counted without stopping the loop, a datagram of the largest UDP size is read
whole, and close stops reading."""

import asyncio
import socket

import dns.edns
import dns.message
import dns.rcode
import pytest
import uvloop

from feddns.dns import transport
from tests.dns.conftest import RECORDS
from tests.dns.tables import make_responder, query

WEB = "web.prod.fed.svc.federation."


class RefusingEveryOther(socket.socket):
    """A real UDP socket whose every other ``sendto`` raises as a full send buffer does."""

    calls = 0

    def sendto(self, *args):  # type: ignore[no-untyped-def,override]
        RefusingEveryOther.calls += 1
        if RefusingEveryOther.calls % 2:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return super().sendto(*args)


@pytest.fixture(params=["uvloop", "asyncio"])
def run(request):  # type: ignore[no-untyped-def]
    """Run a coroutine function on the loop named by the parameter."""
    factory = uvloop.new_event_loop if request.param == "uvloop" else asyncio.new_event_loop

    def on_loop(program):  # type: ignore[no-untyped-def]
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(program())

    return on_loop


def served(sock: socket.socket) -> transport.UdpServer:
    sock.bind(("127.0.0.1", 0))
    server = transport.UdpServer(make_responder(RECORDS))
    server.serve(sock)
    return server


async def replies(client: socket.socket, count: int, wait: float = 5.0) -> list[bytes]:
    loop = asyncio.get_running_loop()
    out: list[bytes] = []
    while len(out) < count:
        try:
            out.append(await asyncio.wait_for(loop.sock_recv(client, 65535), wait))
        except TimeoutError:
            break
    return out


def test_datagrams_queued_past_one_batch_are_all_answered(run) -> None:
    async def program() -> list[int]:
        server = served(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.setblocking(False)
        count = transport.UDP_BATCH * 3 + 5
        for n in range(count):  # all queued before the loop runs the reader once
            message = query(WEB, "A", "a")
            message.id = n
            client.sendto(message.to_wire(), server._sock.getsockname())  # type: ignore[union-attr]
        got = await replies(client, count)
        server.close()
        client.close()
        return sorted(dns.message.from_wire(reply).id for reply in got)

    assert run(program) == list(range(transport.UDP_BATCH * 3 + 5))


def test_a_reply_the_kernel_refuses_is_dropped_counted_and_the_next_answered(run) -> None:
    async def program() -> tuple[list[int], int]:
        RefusingEveryOther.calls = 0
        server = served(RefusingEveryOther(socket.AF_INET, socket.SOCK_DGRAM))
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.setblocking(False)
        for n in range(6):
            message = query(WEB, "A", "a")
            message.id = n
            client.sendto(message.to_wire(), server._sock.getsockname())  # type: ignore[union-attr]
            await asyncio.sleep(0.05)
        got = await replies(client, 3, wait=1.0)
        unsent = server.responder.stats.unsent
        server.close()
        client.close()
        return sorted(dns.message.from_wire(reply).id for reply in got), unsent

    answered, unsent = run(program)
    assert answered == [1, 3, 5] and unsent == 3


def test_a_datagram_of_the_largest_size_is_read_whole_and_close_stops_reading(run) -> None:
    """A query padded to 65,507 bytes (the most IPv4 carries) by an EDNS0 padding option
    (RFC 7830) is answered: read with a smaller buffer, its OPT record would be cut."""

    async def program() -> tuple[bytes, bool]:
        server = served(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        address = server._sock.getsockname()  # type: ignore[union-attr]
        client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
        client.setblocking(False)
        message = query(WEB, "A", "a")
        message.id = 4242
        wire = message.to_wire()
        padded = query(WEB, "A", "a")
        padded.id = 4242
        padded.use_edns(0, options=[*message.options, dns.edns.GenericOption(12, b"\0" * (65507 - len(wire) - 4))])
        big = padded.to_wire(max_size=65535)  # else dnspython stops at the query's own payload size
        assert len(big) == 65507
        client.sendto(big, address)
        got = await replies(client, 1)
        server.close()
        server.close()  # idempotent
        client.sendto(wire, address)
        after = await replies(client, 1, wait=0.5)
        client.close()
        return got[0], not after

    reply, silent = run(program)
    parsed = dns.message.from_wire(reply)
    assert parsed.id == 4242 and parsed.rcode() == dns.rcode.NOERROR and parsed.answer
    assert silent
