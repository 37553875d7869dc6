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
from pathlib import Path
from typing import Any

import feddns.etcd.flags
from feddns.dns.index import Index
from feddns.errors import ConfigError, FeddnsError
from feddns.etcd.endpoints import EtcdEndpoints
from feddns.keys import Layout
from feddns.server.settings import RecordsSource, SourceKind, check_source
from feddns.store.file import EXAMPLE, read_records

DEFAULT_TIMEOUT = 5.0
"""``--timeout`` default, in seconds: the whole read of etcd."""

OUTPUTS = ("text", "json")


class EtcdUnreachable(FeddnsError):
    """etcd did not give the records within ``--timeout``: the endpoint and why, in one line."""


def add_arguments(parser: argparse.ArgumentParser, files: bool) -> None:
    """Add ``--etcd`` (repeatable), ``--etcd-prefix``, the ``--etcd-*`` access flags,
    ``--timeout`` and ``--output``; with ``files``, also ``--records`` and ``--example``."""
    add = parser.add_argument
    add("--etcd", action="append", metavar="URL", help="etcd client URL (repeatable), e.g. http://127.0.0.1:2379")
    add("--etcd-prefix", default="", help="key prefix P of docs/reference.md section 4 (default empty)")
    feddns.etcd.flags.add_arguments(parser)
    if files:
        add("--records", metavar="FILE", help="read a YAML records file (as feddns serve --records) instead of etcd")
        add("--example", action="store_true", help="read the built-in example federation (as feddns serve --example)")
    add("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
        help=f"give up on etcd after this long (default {DEFAULT_TIMEOUT:g})")
    add("--output", choices=OUTPUTS, default="text", help="text for people (default), json for scripts")


def source_from(args: argparse.Namespace, files: bool) -> RecordsSource:
    """Where the flags say the records are; raises :class:`ConfigError` (exit 2) for a bad flag."""
    if args.timeout <= 0:
        raise ConfigError(f"--timeout {args.timeout:g} is not a positive number of seconds")
    layout = Layout(args.etcd_prefix)
    kind: SourceKind = "etcd"
    if files:
        kind = check_source(args)
    elif not args.etcd:
        raise ConfigError("--etcd URL is needed: the etcd of Federated-DNS")
    source = RecordsSource(kind, layout, None if kind == "etcd" else EXAMPLE if kind == "example"
                           else Path(args.records), tuple(args.etcd or ()), feddns.etcd.flags.access_from(args))
    source.endpoints()  # a bad URL or unreadable credentials file: ConfigError
    return source


def read_etcd(source: RecordsSource, timeout: float) -> tuple[list[Any], int]:
    """Every etcd ``KeyValue`` under the source's prefix, in pages, and the revision read at.

    Raises :class:`EtcdUnreachable` when it cannot be done within ``timeout`` seconds (every
    endpoint tried in turn within it).
    """
    endpoints = EtcdEndpoints(list(source.etcd), timeout=timeout, access=source.access)  # a call may take it all
    return asyncio.run(_read_within(endpoints, source.layout.root.encode(), timeout))


async def _read_within(endpoints: EtcdEndpoints, root: bytes, seconds: float) -> tuple[list[Any], int]:
    from feddns.etcd.client import close_quietly  # noqa: PLC0415 - gRPC only when etcd is read
    from feddns.store.etcdfeed import describe_failure, read_pages  # noqa: PLC0415

    failures = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    for _ in endpoints.urls:
        client = endpoints.client()
        try:
            async with asyncio.timeout_at(deadline):
                pages, revision = [], 0
                async for kvs, read_at in read_pages(client, root):
                    pages.append(kvs)
                    revision = read_at
                return pages, revision
        except TimeoutError:
            failures.append(f"{endpoints.current}: no answer within --timeout {seconds:g}s")
            break
        except Exception as exc:  # noqa: BLE001 - whatever etcd fails with is said in one line
            failures.append(f"{endpoints.current}: {describe_failure(exc)}")
        finally:
            await close_quietly(client)
        endpoints.failover()
    raise EtcdUnreachable("etcd unreachable: " + "; ".join(failures))


def load_index(source: RecordsSource, timeout: float) -> Index:
    """The index serve would answer from, loaded from ``source`` once.

    Raises :class:`ConfigError` for a bad records file, :class:`EtcdUnreachable` for etcd.
    """
    index = Index(source.layout)
    if source.path is not None:
        index.replace(read_records(source.path, source.layout))
        return index
    pages, revision = read_etcd(source, timeout)
    for kvs in pages:
        for kv in kvs:
            index.put(kv.key.decode("utf-8", "replace"), kv.value)
    index.revision = revision
    return index
