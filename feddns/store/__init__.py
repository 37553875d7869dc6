"""Where records come from: etcd (``feddns.store.etcdfeed``) or a YAML records file
(``feddns.store.file``). Both feed one :class:`Feed`."""

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Iterable, Iterator

from feddns.dns.index import Change, Index, Reload
from feddns.dns.responder import Responder
from feddns.libc import release_free_memory

log = logging.getLogger(__name__)

PARSE_SERVICES = 64
"""Services whose pending records are parsed in one turn of the event loop after a load
(:meth:`feddns.dns.index.Index.parse_some`): about 2 ms at 10 shards a service, the most a
query waits behind it."""
TRIM_TURNS = 128
"""Every this many turns of that read, the C heap's free pages are given back
(:func:`release_free_memory`): the joined values it frees are reused by nothing it makes,
and kept they held the peak 120 MB above the end for a million records."""


class Feed:
    """The one holder of the records: applies changes to the index and tells the
    responder's cache what they affect.

    Runs on the event loop, between queries. ``index`` is the index answered from
    (the responder reads it here, :meth:`Responder.read_from`); ``ready`` turns True
    at the first full load (until then queries get SERVFAIL). ``loads`` counts full
    loads, ``restarts`` counts broken watches and reloads after an error.

    With ``freeze`` (``feddns serve``), each full load ends with :func:`settle_heap`: the
    objects alive then (the records) are left out of Python's later full collections.

    A full load stores each shard's value unread (``Index.put_page``) but for those that
    decide which names exist and which clusters are known (``Index.read_deciding``, before
    the index is installed); once it is installed, a task parses what is still pending
    between queries, :data:`PARSE_SERVICES` services a turn, with the collector paused and
    what it made frozen after each turn, and logs how many records were invalid when it is done.
    """

    def __init__(self, index: Index, responder: Responder, *, freeze: bool = False) -> None:
        self.index = index
        self.ready = False
        self.responder = responder
        self.cache = responder.cache
        self.freeze = freeze
        self.loads = 0
        self.restarts = 0
        self._skipped_earlier = 0
        self._parsing: asyncio.Task[None] | None = None
        responder.read_from(self)

    def replace(self, items: Iterable[tuple[str, bytes]], revision: int = 0) -> None:
        """Replace every record (a full read); the server is ready from now on."""
        fresh = Index(self.index.layout)
        with collections_paused():
            fresh.replace(items, revision)
        self.install(fresh)

    @property
    def skipped(self) -> int:
        """Invalid records skipped since start, over every index loaded."""
        return self._skipped_earlier + self.index.skipped

    def install(self, fresh: Index, *, settled: bool = False) -> None:
        """Answer from ``fresh`` (a full load) from now on; the server is ready. ``settled``: its
        heap was collected and frozen already (a worker forked from one read,
        ``feddns.store.preload``), and a collection here would write to every page the workers share."""
        with collections_paused():  # as for the load: what it reads lives on
            fresh.read_deciding()  # no answer may depend on a value not read (docs/serve.md, "Loading")
        self._skipped_earlier += self.index.skipped
        self.index.on_change = None
        self.index = fresh
        fresh.on_change = self._changed
        self._changed(Reload())
        self.ready = True
        self.loads += 1
        if self.freeze and not settled:
            settle_heap()
        if self._parsing is not None:
            self._parsing.cancel()
            self._parsing = None
        if fresh.unparsed:
            with contextlib.suppress(RuntimeError):  # no loop (a one-off load): lookups parse what they need
                self._parsing = asyncio.get_running_loop().create_task(self._parse_pending(fresh))

    async def _parse_pending(self, index: Index) -> None:
        """Parse ``index``'s pending records between queries (see the class)."""
        started = time.monotonic()
        more, turns = True, 0
        while more:
            await asyncio.sleep(0)
            with collections_paused():
                more = bool(index.parse_some(PARSE_SERVICES))
            turns += 1
            if self.freeze:
                gc.freeze()  # as settle_heap: the records made are never visited by a full collection
                if not more or turns % TRIM_TURNS == 0:
                    release_free_memory()
        log.info("every record value read %.1fs after the load: %d invalid (feddns_records_invalid)",
                 time.monotonic() - started, len(index.invalid))

    def put(self, key: str, value: bytes, revision: int = 0) -> None:
        """Store one record (a bad one is skipped and counted)."""
        self._changed(self.index.put(key, value))
        self.index.revision = max(self.index.revision, revision)

    def delete(self, key: str, revision: int = 0) -> None:
        """Remove one record."""
        self._changed(self.index.delete(key))
        self.index.revision = max(self.index.revision, revision)

    def _changed(self, change: Change) -> None:
        self.cache.changed(change, self.index.services_of)


def settle_heap() -> None:
    """Collect once, then freeze what is alive (``gc.freeze``), after a full load.

    CPython's full (oldest-generation) collection visits every tracked object: 336,000
    of them with 100,000 shard records, about 100 ms with the event loop stopped, so one
    query waited that long (docs/performance.md, "Change latency"). Frozen objects are
    never visited again; they are still freed when no longer referenced. Unfreezing
    first lets this collection reach what the previous load froze and has become
    garbage in reference cycles since, so such garbage lives until the next full load
    at most.
    """
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    release_free_memory()


@contextlib.contextmanager
def collections_paused() -> Iterator[None]:
    """Python's garbage collector off for the block (a full load), on again after it if it was.

    Every record of a load adds objects that live on, and the collector runs each time
    700 more are made, visiting the young ones and, ever more often, the growing older
    generations: a quarter of the load's CPU time (1.2 - 1.4 us of 4.5 - 5.9 a record, 500,000
    records, ``Index.put_page``). A load makes no reference cycles that must go before
    it ends, and ``feddns serve`` collects once after it (:meth:`Feed.install`, :func:`settle_heap`).
    Cyclic garbage the event loop makes meanwhile waits for that collection.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
