"""A bare uvloop UDP server that answers every query with the same bytes (its ID patched).

The ceiling for a Python DNS server on this machine: bench/serve_qps.py runs it beside
`feddns serve` and reports the ratio. Usage: python bench/fixed_server.py PORT REPLY_HEX
"""

import asyncio
import sys

import uvloop


class Fixed(asyncio.DatagramProtocol):
    def __init__(self, reply: bytes) -> None:
        self.reply = reply[2:]

    def connection_made(self, transport) -> None:
        self.sendto = transport.sendto

    def datagram_received(self, data: bytes, addr) -> None:
        self.sendto(data[:2] + self.reply, addr)


async def main(port: int, reply: bytes) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_datagram_endpoint(lambda: Fixed(reply), local_addr=("127.0.0.1", port))
    print(f"fixed server on 127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.install()
    asyncio.run(main(int(sys.argv[1]), bytes.fromhex(sys.argv[2])))
