"""One read of etcd for every worker of ``feddns serve --workers N``, before they are forked.

The workers answer from one index shared copy-on-write: a process that forks none of
its gRPC state (``feddns.server.forking``'s template) reads the records with
:func:`preload`, reads every value (:meth:`~feddns.dns.index.Index.parse_all`), collects
and freezes its heap (``gc.freeze``: no later collection writes to those pages), and
forks the workers from it. Each worker then watches etcd from the revision read, as a
one-process server does after its own load (``feddns.store.etcdfeed``).

A process holding a gRPC channel cannot be forked safely (its core runs threads and a
poller, and grpc's fork support does not cover asyncio), so the template opens none: a
child forked for the purpose reads the pages with aetcd
(:func:`feddns.store.etcdfeed.read_pages`, the same paged read at one revision) and
writes them to a pipe, and the template stores each as it comes
(:meth:`~feddns.dns.index.Index.put_page`) while the child reads the next.

Each page's services are parsed as soon as it is stored, but its last (whose records may
go on in the next page), while the child waits for etcd's next page.

A frame on the pipe is a header (``<QIQ``: revision, record count, payload bytes), the
record count's key lengths and then its value lengths (``array("I")``), and the payload:
the keys' bytes, then the values'. A count of :data:`FAILED` is the child's failure, its
payload the reason (UTF-8). The pipe's end after a zero exit is the end of the read.
"""

import asyncio
import gc
import logging
import os
import struct
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import BinaryIO

from feddns.dns.index import Index
from feddns.errors import FeddnsError
from feddns.etcd.endpoints import EtcdEndpoints
from feddns.keys import Layout
from feddns.libc import release_free_memory
from feddns.lifecycle import describe_exit, die_with_parent
from feddns.store import collections_paused

log = logging.getLogger(__name__)

HEADER = struct.Struct("<QIQ")
"""A frame's header: the revision read at, the records in the frame, the payload's bytes."""
FAILED = 0xFFFF_FFFF
"""The record count of the frame that says the read failed (its payload: why)."""


class PreloadFailed(FeddnsError):
    """The read before the fork did not complete (etcd unreachable, refused, compacted
    between pages, or the reading child died); each worker then reads etcd itself.
    ``said``: the reason is the reading child's own (it failed and said why)."""

    def __init__(self, reason: str, *, said: bool = False) -> None:
        super().__init__(reason)
        self.said = said


@dataclass(frozen=True, slots=True)
class Preloaded:
    """Every record under the layout's root, read at ``revision``, every value parsed;
    ``seconds`` the read took (wall time, from the fork of the reading child)."""

    index: Index
    revision: int
    seconds: float


def preload(endpoints: EtcdEndpoints, layout: Layout, forked: Callable[[int], None] = lambda pid: None) -> Preloaded:
    """Read every record under ``layout.root`` through a forked child (its pid given to
    ``forked`` at once), parse them all, and settle the heap (collected once, frozen, free
    pages given back). The endpoints are tried in turn until one answers the first page;
    every page comes from that one, at one revision. Raises :class:`PreloadFailed` saying
    why the read did not complete.

    Call it only in a process with no other thread and no gRPC channel (it forks)."""
    started = time.monotonic()
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the reading child: never returns
        os.close(read_fd)
        die_with_parent(parent)  # stopped while etcd is slow, it must not go on reading
        _read_and_exit(endpoints, layout.root.encode(), write_fd)
    forked(pid)
    os.close(write_fd)
    index = Index(layout)
    failure: PreloadFailed | None = None
    try:
        with os.fdopen(read_fd, "rb") as pipe, collections_paused():
            revision = _store_frames(pipe, index)
            index.parse_all()
    except PreloadFailed as exc:
        failure = exc
    _, status = os.waitpid(pid, 0)
    if status != 0 and (failure is None or not failure.said):
        failure = PreloadFailed(f"the child reading etcd {describe_exit(os.waitstatus_to_exitcode(status))}"
                                + (f" ({failure})" if failure is not None else ""))
    if failure is not None:
        raise failure
    index.revision = revision
    gc.collect()
    gc.freeze()  # nothing of the records is visited, so written, by a later collection
    release_free_memory()
    return Preloaded(index, revision, time.monotonic() - started)


def _store_frames(pipe: BinaryIO, index: Index) -> int:
    """Store every frame's records in ``index``; the revision read at. Raises :class:`PreloadFailed`."""
    revision = 0
    while True:
        header = pipe.read(HEADER.size)
        if not header:
            return revision
        if len(header) < HEADER.size:
            raise PreloadFailed("the child reading etcd stopped in the middle of a page")
        read_at, count, size = HEADER.unpack(header)
        if count == FAILED:
            raise PreloadFailed(_exactly(pipe, size).decode("utf-8", "replace"), said=True)
        if revision and read_at != revision:  # the child must never mix two reads
            raise PreloadFailed(f"the child reading etcd sent pages of revisions {revision} and {read_at}")
        revision = read_at
        lengths = array("I")
        lengths.frombytes(_exactly(pipe, 2 * count * lengths.itemsize))
        payload = _exactly(pipe, size)
        ends = list(accumulate(lengths, initial=0))
        keys = [payload[ends[i]:ends[i + 1]].decode("utf-8", "replace") for i in range(count)]
        index.put_page(zip(keys, [payload[ends[i]:ends[i + 1]] for i in range(count, 2 * count)], strict=True))
        # While the child waits for etcd's next page: every service of this one but the last,
        # whose records may go on in the next page.
        index.parse_some(index.unparsed - 1)


def _exactly(pipe: BinaryIO, size: int) -> bytes:
    data = pipe.read(size)
    if len(data) != size:
        raise PreloadFailed("the child reading etcd stopped in the middle of a page")
    return data


# --- the reading child ---------------------------------------------------------------------------------

def _read_and_exit(endpoints: EtcdEndpoints, root: bytes, write_fd: int) -> None:
    """The child: write every page to ``write_fd``, or why it could not; exits, never returns."""
    status = 1
    try:
        with os.fdopen(write_fd, "wb") as pipe:
            try:
                asyncio.run(_read_any(endpoints, root, pipe))
                status = 0
            except BaseException as exc:  # noqa: BLE001 - whatever stops the read is told to the template
                reason = f"etcd {endpoints.current}: {_describe(exc)}".encode()
                pipe.write(HEADER.pack(0, FAILED, len(reason)) + reason)
    finally:
        os._exit(status)


async def _read_any(endpoints: EtcdEndpoints, root: bytes, pipe: BinaryIO) -> None:
    """Each endpoint in turn until one gives the first page, then every page from that one;
    raises the last failure (a failure after the first page: the read is not resumed from
    another member, whose pages could be of another revision)."""
    from feddns.etcd.client import close_quietly  # noqa: PLC0415 - gRPC only in this child
    from feddns.store.etcdfeed import read_pages  # noqa: PLC0415

    for tried in range(len(endpoints.urls)):
        if tried:
            endpoints.failover()
        client = endpoints.client()
        written = False
        try:
            async for kvs, revision in read_pages(client, root):
                _write_page(pipe, kvs, revision)
                written = True
            return
        except Exception:
            if written or tried == len(endpoints.urls) - 1:
                raise
        finally:
            await close_quietly(client)


def _write_page(pipe: BinaryIO, kvs: list, revision: int) -> None:  # type: ignore[type-arg]
    keys = [kv.key for kv in kvs]
    values = [kv.value for kv in kvs]
    lengths = array("I", map(len, keys))
    lengths.extend(map(len, values))
    payload = b"".join(keys) + b"".join(values)
    pipe.write(HEADER.pack(revision, len(kvs), len(payload)))
    pipe.write(lengths.tobytes())
    pipe.write(payload)


def _describe(exc: BaseException) -> str:
    from feddns.store.etcdfeed import describe_failure  # noqa: PLC0415 - gRPC only in this child

    return describe_failure(exc)
