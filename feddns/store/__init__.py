"""Where records come from: etcd (``feddns.store.etcd``) or a YAML records file
(``feddns.store.file``). Both feed one :class:`Feed`."""

import asyncio
from collections.abc import Iterable

from feddns.dns.index import EVERYTHING, Index
from feddns.dns.responder import Responder


class Feed:
    """Applies record changes to the index and drops the answers they affect.

    Runs on the event loop, between queries. ``loads`` counts full loads,
    ``restarts`` counts broken watches and reloads after an error.
    """

    def __init__(self, index: Index, responder: Responder) -> None:
        self.index = index
        self.responder = responder
        self.loads = 0
        self.restarts = 0
        self.skipped = 0

    def replace(self, items: Iterable[tuple[str, bytes]], revision: int = 0) -> None:
        """Replace every record (a full read); the server is ready from now on."""
        fresh = Index(self.index.layout)
        fresh.replace(items, revision)
        self._swap(fresh)

    async def replace_in_thread(self, items: Iterable[tuple[str, bytes]], revision: int = 0) -> None:
        """Like :meth:`replace`, parsing in a worker thread: a load of 100,000 records
        takes seconds, during which the loop goes on answering from the old index."""
        fresh = Index(self.index.layout)
        await asyncio.to_thread(fresh.replace, items, revision)
        self._swap(fresh)

    def _swap(self, fresh: Index) -> None:
        self.index = fresh
        self.responder.index = fresh
        self.skipped += len(fresh.invalid)
        self.responder.changed(EVERYTHING)
        self.responder.ready = True
        self.loads += 1

    def put(self, key: str, value: bytes, revision: int = 0) -> None:
        """Store one record (a bad one is skipped and counted)."""
        before = len(self.index.invalid)
        was_invalid = key in self.index.invalid
        self.responder.changed(self.index.put(key, value))
        if key in self.index.invalid and (not was_invalid or len(self.index.invalid) != before):
            self.skipped += 1
        self.index.revision = max(self.index.revision, revision)

    def delete(self, key: str, revision: int = 0) -> None:
        """Remove one record."""
        self.responder.changed(self.index.delete(key))
        self.index.revision = max(self.index.revision, revision)
