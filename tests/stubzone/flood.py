"""A peer without a certificate trying to lock out an HTTPS endpoint: ``python -m tests.stubzone.flood --port P
--sources 127.0.0.2 [127.0.0.3 ...] --idle 512 --trickling 256``.

It holds ``--idle`` TCP connections that never send a byte and ``--trickling`` TLS connections that send a
real ClientHello one byte every ``--trickle-interval`` seconds (never done within a handshake timeout),
spread evenly over ``--sources`` (loopback addresses to connect from). Every connection the server closes
is opened again ``--reopen-after`` seconds later, as an attacker who wants to keep them would. Prints
``flooding`` once every connection has been opened once, then every second
``open idle=N trickling=N opened=N closed=N``, until SIGTERM or SIGINT.
"""

import argparse
import asyncio
import contextlib
import signal
import ssl
import sys
from dataclasses import dataclass


def client_hello() -> bytes:
    """The bytes of a real TLS ClientHello (the one Python's default client context sends)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_side=False)
    with contextlib.suppress(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


@dataclass
class Counts:
    """Connections open now by kind, opened and closed in all."""

    idle: int = 0
    trickling: int = 0
    opened: int = 0
    closed: int = 0


async def hold(port: int, source: str, trickle: bytes | None, options: argparse.Namespace, counts: Counts,
               first: asyncio.Event) -> None:
    """Keep one connection open from ``source``: idle (``trickle`` None) or sending ``trickle`` byte by byte."""
    kind = "idle" if trickle is None else "trickling"
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        except OSError:
            first.set()
            await asyncio.sleep(options.reopen_after)
            continue
        counts.opened += 1
        setattr(counts, kind, getattr(counts, kind) + 1)
        first.set()
        try:
            if trickle is None:
                await reader.read()  # until the server closes it
            else:
                for byte in trickle:
                    writer.write(bytes([byte]))
                    await writer.drain()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(options.trickle_interval):
                            if not await reader.read(1):
                                break
        except OSError:
            pass
        finally:
            setattr(counts, kind, getattr(counts, kind) - 1)
            counts.closed += 1
            writer.transport.abort()
        await asyncio.sleep(options.reopen_after)


async def flood(options: argparse.Namespace) -> None:
    counts = Counts()
    hello = client_hello()
    firsts: list[asyncio.Event] = []
    tasks = []
    kinds = [None] * options.idle + [hello] * options.trickling
    for index, trickle in enumerate(kinds):
        first = asyncio.Event()
        firsts.append(first)
        source = options.sources[index % len(options.sources)]
        tasks.append(asyncio.create_task(hold(options.port, source, trickle, options, counts, first)))
    for first in firsts:
        await first.wait()
    print("flooding", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    while not stop.is_set():
        print(f"open idle={counts.idle} trickling={counts.trickling} opened={counts.opened} closed={counts.closed}",
              flush=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.stubzone.flood", description=__doc__)
    parser.add_argument("--port", type=int, required=True, help="the endpoint's port on 127.0.0.1")
    parser.add_argument("--sources", nargs="+", default=["127.0.0.2"], help="loopback addresses to connect from")
    parser.add_argument("--idle", type=int, default=512, help="idle TCP connections held")
    parser.add_argument("--trickling", type=int, default=256, help="trickling TLS connections held")
    parser.add_argument("--trickle-interval", type=float, default=0.5, help="seconds between two ClientHello bytes")
    parser.add_argument("--reopen-after", type=float, default=0.5, help="seconds before a closed one is reopened")
    asyncio.run(flood(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
