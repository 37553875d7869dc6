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
import contextlib
import ctypes
import ctypes.util
import gc
import logging
import os
import signal
import struct
import time
from array import array
from dataclasses import dataclass
from itertools import accumulate
from typing import BinaryIO

from feddns.dns.index import Index
from feddns.errors import FeddnsError
from feddns.etcd.endpoints import EtcdEndpoints
from feddns.keys import Layout
from feddns.store import collections_paused, release_free_memory

log = logging.getLogger(__name__)

HEADER = struct.Struct("<QIQ")
"""A frame's header: the revision read at, the records in the frame, the payload's bytes."""
FAILED = 0xFFFF_FFFF
"""The record count of the frame that says the read failed (its payload: why)."""


class PreloadFailed(FeddnsError):
    """The read before the fork did not complete (etcd unreachable, refused, compacted
    between pages, or the reading child died); each worker then reads etcd itself."""


@dataclass(frozen=True, slots=True)
class Preloaded:
    """Every record under the layout's root, read at ``revision``, every value parsed;
    ``seconds`` the read took (wall time, from the fork of the reading child)."""

    index: Index
    revision: int
    seconds: float


def preload(endpoints: EtcdEndpoints, layout: Layout) -> Preloaded:
    """Read every record under ``layout.root`` through a forked child, parse them all, and
    settle the heap (collected once, frozen, free pages given back). Each endpoint is tried
    once, in turn. Raises :class:`PreloadFailed` saying why the read did not complete.

    Call it only in a process with no other thread and no gRPC channel (it forks)."""
    started = time.monotonic()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the reading child: never returns
        os.close(read_fd)
        _die_with_parent()
        _read_and_exit(endpoints, layout.root.encode(), write_fd)
    os.close(write_fd)
    index = Index(layout)
    try:
        with os.fdopen(read_fd, "rb") as pipe, collections_paused():
            revision = _store_frames(pipe, index)
            index.parse_all()
    finally:
        _, status = os.waitpid(pid, 0)
    if status != 0:
        raise PreloadFailed(f"the child reading etcd {_exit(status)}")
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
        revision, count, size = HEADER.unpack(header)
        if count == FAILED:
            raise PreloadFailed(_exactly(pipe, size).decode("utf-8", "replace"))
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


def _exit(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    return f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"


# --- the reading child ---------------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
"""``prctl``'s option that sends a signal to this process when its parent exits (``linux/prctl.h``)."""


def _die_with_parent() -> None:
    """SIGKILL this child when the process reading its pipe exits (stopped while etcd is slow,
    it must not go on reading); nothing where ``prctl`` is missing, as it then exits at the
    next page it cannot write."""
    with contextlib.suppress(OSError, TypeError, AttributeError):
        ctypes.CDLL(ctypes.util.find_library("c")).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)



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
    """Each endpoint in turn until one gives every page; raises the last one's failure."""
    from feddns.etcd.client import close_quietly  # noqa: PLC0415 - gRPC only in this child
    from feddns.store.etcdfeed import read_pages  # noqa: PLC0415

    for tried in range(len(endpoints.urls)):
        if tried:
            endpoints.failover()
        client = endpoints.client()
        try:
            async for kvs, revision in read_pages(client, root):
                _write_page(pipe, kvs, revision)
            return
        except Exception:
            if tried == len(endpoints.urls) - 1:
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
