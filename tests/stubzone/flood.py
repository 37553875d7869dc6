"""A peer trying to lock out an HTTPS endpoint: ``python -m tests.stubzone.flood --port P
--sources 127.0.0.2 [127.0.0.3 ...] --idle 512 --trickling 256 [--heads 300 --ca CA [--cert C --key K]]``.

It holds ``--idle`` TCP connections that never send a byte, ``--trickling`` TLS connections that send a
real ClientHello one byte every ``--trickle-interval`` seconds (never done within a handshake timeout),
and ``--heads`` TLS connections that finish their handshake (trusting ``--ca``, showing ``--cert`` when
given; ``--handshakes`` at once from a source, so that none is closed by the pending pool) and then
trickle a request head, a header line every ``--trickle-interval`` seconds, never ending it; spread
evenly over ``--sources`` (loopback addresses to connect from). Every connection the server closes is
opened again ``--reopen-after`` seconds later, as an attacker who wants to keep them would.
Prints ``flooding`` once every connection has been opened once, then every second
``open idle=N trickling=N heads=N opened=N closed=N``, until SIGTERM or SIGINT.
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
    heads: int = 0
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


async def hold_head(port: int, source: str, context: ssl.SSLContext, options: argparse.Namespace, counts: Counts,
                    first: asyncio.Event, handshakes: asyncio.Semaphore) -> None:
    """Keep one connection past its TLS handshake open from ``source``, trickling a request head;
    ``handshakes``: the source's handshakes under way, kept below its pending share."""
    while True:
        try:
            async with handshakes:
                reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0),
                                                               ssl=context, server_hostname="127.0.0.1")
        except (OSError, ssl.SSLError):
            first.set()
            await asyncio.sleep(options.reopen_after)
            continue
        counts.opened += 1
        counts.heads += 1
        first.set()
        try:
            writer.write(f"POST {options.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())
            while not await _closed_within(reader, options.trickle_interval):
                writer.write(b"X-Trickle: 1\r\n")
                await writer.drain()
        except (OSError, ssl.SSLError):
            pass
        finally:
            counts.heads -= 1
            counts.closed += 1
            writer.transport.abort()
        await asyncio.sleep(options.reopen_after)


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Whether the server ends the stream (or answers, which it does only as it closes) within ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            await reader.read(4096)
            return True
    except TimeoutError:
        return False


def head_context(options: argparse.Namespace) -> ssl.SSLContext | None:
    """The client context of ``--heads`` connections: trusting ``--ca``, showing ``--cert`` when given."""
    if not options.heads:
        return None
    context = ssl.create_default_context(cafile=options.ca)
    if options.cert:
        context.load_cert_chain(options.cert, options.key)
    return context


async def flood(options: argparse.Namespace) -> None:
    counts = Counts()
    hello = client_hello()
    firsts: list[asyncio.Event] = []
    tasks = []
    context = head_context(options)
    handshakes = {source: asyncio.Semaphore(options.handshakes) for source in options.sources}
    kinds: list[bytes | ssl.SSLContext | None] = [None] * options.idle + [hello] * options.trickling
    kinds += [context] * options.heads
    for index, kind in enumerate(kinds):
        first = asyncio.Event()
        firsts.append(first)
        source = options.sources[index % len(options.sources)]
        held = (hold_head(options.port, source, kind, options, counts, first, handshakes[source])
                if isinstance(kind, ssl.SSLContext)
                else hold(options.port, source, kind, options, counts, first))
        tasks.append(asyncio.create_task(held))
    for first in firsts:
        await first.wait()
    print("flooding", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    while not stop.is_set():
        print(f"open idle={counts.idle} trickling={counts.trickling} heads={counts.heads} opened={counts.opened} "
              f"closed={counts.closed}", flush=True)
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
    parser.add_argument("--heads", type=int, default=0, help="TLS connections past the handshake trickling a head")
    parser.add_argument("--handshakes", type=int, default=8,
                        help="--heads handshakes under way at once from one source (under its pending share)")
    parser.add_argument("--path", default="/federations/fed", help="the path of the trickled request")
    parser.add_argument("--ca", help="CA file the --heads connections trust")
    parser.add_argument("--cert", help="client certificate the --heads connections show (PEM)")
    parser.add_argument("--key", help="its key")
    parser.add_argument("--trickle-interval", type=float, default=0.5, help="seconds between two ClientHello bytes")
    parser.add_argument("--reopen-after", type=float, default=0.5, help="seconds before a closed one is reopened")
    asyncio.run(flood(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
