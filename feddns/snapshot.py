"""The records as they are now, read once: what ``feddns explain`` and ``feddns status`` look at.

``feddns serve`` reads its records once and then follows them (``feddns.store``); these
commands only read: a records file (``--records``), the built-in example (``--example``), or
every key under the prefix in etcd (``--etcd``), paged at one revision as serve's first load
reads it (:func:`feddns.store.etcdfeed.read_pages`). The whole read is bounded by
``--timeout`` seconds: an etcd that does not answer is said in one line
(:class:`EtcdUnreachable`), never waited on (docs/reference.md section 6).
"""

import argparse
import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import feddns.etcd.flags
from feddns import numbers
from feddns.dns.index import Index
from feddns.errors import ConfigError, FeddnsError
from feddns.etcd.endpoints import EtcdEndpoints
from feddns.keys import Layout
from feddns.server.settings import (
    DEFAULT_RECORDS_LIMIT,
    RecordsSource,
    SourceKind,
    add_records_size_argument,
    check_source,
    records_limit,
)
from feddns.store.file import EXAMPLE, read_records

DEFAULT_TIMEOUT = 5.0
"""``--timeout`` default, in seconds: the whole read of etcd."""

OUTPUTS = ("text", "json")


class EtcdUnreachable(FeddnsError):
    """etcd did not give the records within ``--timeout``: the endpoint and why, in one line."""


def add_arguments(parser: argparse.ArgumentParser, files: bool) -> None:
    """Add ``--etcd`` (repeatable), ``--etcd-prefix``, the ``--etcd-*`` access flags,
    ``--timeout`` and ``--output``; with ``files``, also ``--records`` (with serve's
    ``--max-records-size``) and ``--example``."""
    add = parser.add_argument
    add("--etcd", action="append", metavar="URL", help="etcd client URL (repeatable), e.g. http://127.0.0.1:2379")
    add("--etcd-prefix", default="", help="key prefix P of docs/reference.md section 4 (default empty)")
    feddns.etcd.flags.add_arguments(parser)
    if files:
        add("--records", metavar="FILE", help="read a YAML records file (as feddns serve --records) instead of etcd")
        add("--example", action="store_true", help="read the built-in example federation (as feddns serve --example)")
        add_records_size_argument(parser)
    add("--timeout", **numbers.seconds(), default=DEFAULT_TIMEOUT, metavar="SECONDS",
        help=f"give up on etcd after this long (default {DEFAULT_TIMEOUT:g})")
    add("--output", choices=OUTPUTS, default="text", help="text for people (default), json for scripts")


def source_from(args: argparse.Namespace, files: bool) -> RecordsSource:
    """Where the flags say the records are; raises :class:`ConfigError` (exit 2) for a bad flag."""
    layout = Layout(args.etcd_prefix)
    kind: SourceKind = "etcd"
    if files:
        kind = check_source(args)
    elif not args.etcd:
        raise ConfigError("--etcd URL is needed: the etcd of Federated-DNS")
    source = RecordsSource(kind, layout, None if kind == "etcd" else EXAMPLE if kind == "example"
                           else Path(args.records), tuple(args.etcd or ()), feddns.etcd.flags.access_from(args),
                           records_limit(args) if files else DEFAULT_RECORDS_LIMIT)
    source.endpoints()  # a bad URL or unreadable credentials file: ConfigError
    return source


PageReader = Callable[[Any], None]
"""What takes each page of etcd ``KeyValue`` messages (key, value, ``mod_revision``), in key order."""


def read_etcd(source: RecordsSource, timeout: float, each_page: PageReader) -> int:
    """Hand every etcd ``KeyValue`` under the source's prefix to ``each_page``, a page at a
    time, in a worker thread while the next page is read; returns the revision read at.

    Raises :class:`EtcdUnreachable` when it cannot be done within ``timeout`` seconds: every
    endpoint is tried in turn within it, until one has given a page (a failure after that is
    final: the pages read cannot be taken back).
    """
    endpoints = EtcdEndpoints(list(source.etcd), timeout=timeout, access=source.access)  # a call may take it all
    return asyncio.run(_read_within(endpoints, source.layout.root.encode(), timeout, each_page))


async def _read_within(endpoints: EtcdEndpoints, root: bytes, seconds: float, each_page: PageReader) -> int:
    from feddns.etcd.client import close_quietly  # noqa: PLC0415 - gRPC only when etcd is read
    from feddns.store.etcdfeed import describe_failure, read_pages  # noqa: PLC0415

    failures = []
    deadline = asyncio.get_running_loop().time() + seconds
    given = [0]
    for _ in endpoints.urls:
        client = endpoints.client()
        try:
            async with asyncio.timeout_at(deadline):
                return await _pipelined(read_pages(client, root), each_page, given)
        except TimeoutError:
            failures.append(f"{endpoints.current}: no answer within --timeout {seconds:g}s")
            break
        except Exception as exc:  # noqa: BLE001 - whatever etcd fails with is said in one line
            failures.append(f"{endpoints.current}: {describe_failure(exc)}")
        finally:
            await close_quietly(client)
        if given[0]:
            break
        endpoints.failover()
    raise EtcdUnreachable("etcd unreachable: " + "; ".join(failures))


async def _pipelined(pages: AsyncIterator[tuple[Any, int]], each_page: PageReader, given: list[int]) -> int:
    """Give each page to ``each_page`` in a thread while the next one is read (etcd and the
    network work meanwhile); ``given[0]`` counts the pages given. Returns the revision."""
    revision, pending = 0, None
    try:
        async for kvs, read_at in pages:
            if pending is not None:
                await pending
            pending = asyncio.ensure_future(asyncio.to_thread(each_page, kvs))
            given[0] += 1
            revision = read_at
        if pending is not None:
            await pending
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
    return revision


def load_index(source: RecordsSource, timeout: float) -> Index:
    """The index serve would answer from, loaded from ``source`` once.

    Raises :class:`ConfigError` for a bad records file, :class:`EtcdUnreachable` for etcd.
    """
    index = Index(source.layout)
    if source.path is not None:
        index.replace(read_records(source.path, source.layout, source.limit))
        return index
    def put_page(kvs: Any) -> None:
        for kv in kvs:
            index.put(kv.key.decode("utf-8", "replace"), kv.value)

    index.revision = read_etcd(source, timeout, put_page)
    return index
