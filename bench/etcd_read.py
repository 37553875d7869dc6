"""A bare paged range read of every key under a prefix through aetcd: the floor of serve's load.

bench/serve_load.py runs this as a child process beside `feddns serve` and `etcdctl get
--prefix`, so that its time counts what serve's counts before any record is parsed: a
fresh interpreter, importing aetcd and gRPC, connecting, and reading the keys in pages of
`feddns.store.etcdfeed.PAGE_KEYS` at one revision, as `EtcdSource._load` reads them. It
keeps nothing of the values (each page is dropped once the next is asked for) and prints
the keys read.

Usage: python bench/etcd_read.py URL PREFIX [--page-keys N]
"""

import argparse
import asyncio
import sys
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aetcd
from aetcd import rpc

from feddns.etcd.client import MAX_MESSAGE_BYTES, prefix_range_end
from feddns.store.etcdfeed import PAGE_KEYS


async def read(url: str, prefix: bytes, page_keys: int) -> int:
    """The number of keys under ``prefix`` at etcd ``url`` (``http://host:port``), read in pages of ``page_keys``."""
    parts = urllib.parse.urlsplit(url)
    options = {"grpc.max_receive_message_length": MAX_MESSAGE_BYTES}
    client = aetcd.Client(host=parts.hostname or "127.0.0.1", port=parts.port or 2379, options=options)
    await client.connect()
    start, end, revision, keys = prefix, prefix_range_end(prefix), 0, 0
    try:
        while True:
            request = rpc.RangeRequest(key=start, range_end=end, limit=page_keys, revision=revision)
            response = await client.kvstub.Range(request, timeout=60, metadata=client.metadata)
            revision = revision or response.header.revision
            kvs = response.kvs
            keys += len(kvs)
            if not response.more or not kvs:
                return keys
            start = kvs[-1].key + b"\0"
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("prefix")
    parser.add_argument("--page-keys", type=int, default=PAGE_KEYS)
    args = parser.parse_args()
    print(asyncio.run(read(args.url, args.prefix.encode(), args.page_keys)))


if __name__ == "__main__":
    main()
