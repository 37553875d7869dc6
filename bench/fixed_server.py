"""A bare uvloop UDP server that answers every query with the same bytes (its ID patched).

The ceiling for a Python DNS server on this machine: bench/serve_qps.py runs it beside
`feddns serve` and NSD and reports the ratios. Two ways to receive, each the least a
Python server can do per datagram:

* (default) asyncio's datagram transport (as `feddns serve` read UDP until 2026-11-28):
  uvloop (libuv) reads the socket and calls `datagram_received` per datagram;
* `--reader`: the socket's reader callback (`loop.add_reader`) takes up to 64 datagrams a
  wakeup with `socket.recvfrom` and answers each with `socket.sendto` (a reply the kernel
  cannot take at once is dropped), with no transport between, as `feddns serve` reads now
  (`feddns.dns.transport.UdpServer`).

Neither batches system calls (`recvmmsg`/`sendmmsg`, which NSD uses and Python's socket
module does not offer): each datagram costs a receive and a send.

Usage: python bench/fixed_server.py PORT REPLY_HEX [--reader]
"""

import asyncio
import socket
import sys

import uvloop

BATCH = 64
"""Datagrams taken per wakeup by --reader (then the loop runs its other callbacks)."""


class Fixed(asyncio.DatagramProtocol):
    def __init__(self, reply: bytes) -> None:
        self.reply = reply[2:]

    def connection_made(self, transport) -> None:
        self.sendto = transport.sendto

    def datagram_received(self, data: bytes, addr) -> None:
        self.sendto(data[:2] + self.reply, addr)


def read_loop(sock: socket.socket, reply: bytes) -> None:
    """Answer on ``sock`` from the loop's reader callback."""
    receive, send, tail = sock.recvfrom, sock.sendto, reply[2:]

    def readable() -> None:
        for _ in range(BATCH):
            try:
                data, addr = receive(65535)
            except BlockingIOError:
                return
            try:  # noqa: SIM105 - a try costs nothing when nothing is raised; suppress() is a call a datagram
                send(data[:2] + tail, addr)
            except BlockingIOError:
                pass

    sock.setblocking(False)
    asyncio.get_running_loop().add_reader(sock.fileno(), readable)


async def main(port: int, reply: bytes, reader: bool) -> None:
    loop = asyncio.get_running_loop()
    if reader:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", port))
        read_loop(sock, reply)
    else:
        await loop.create_datagram_endpoint(lambda: Fixed(reply), local_addr=("127.0.0.1", port))
    print(f"fixed server on 127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.install()
    asyncio.run(main(int(sys.argv[1]), bytes.fromhex(sys.argv[2]), "--reader" in sys.argv[3:]))
