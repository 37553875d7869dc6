"""Where records come from: etcd (``feddns.store.etcd``) or a YAML records file
(``feddns.store.file``). Both feed one :class:`Feed`."""

from collections.abc import Iterable

from feddns.dns.index import Index, Reload
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
        self._skipped_earlier = 0

    def replace(self, items: Iterable[tuple[str, bytes]], revision: int = 0) -> None:
        """Replace every record (a full read); the server is ready from now on."""
        fresh = Index(self.index.layout)
        fresh.replace(items, revision)
        self.install(fresh)

    @property
    def skipped(self) -> int:
        """Invalid records skipped since start, over every index loaded."""
        return self._skipped_earlier + self.index.skipped

    def install(self, fresh: Index) -> None:
        """Answer from ``fresh`` (a full load) from now on; the server is ready."""
        self._skipped_earlier += self.index.skipped
        self.index = fresh
        self.responder.index = fresh
        self.responder.changed(Reload())
        self.responder.ready = True
        self.loads += 1

    def put(self, key: str, value: bytes, revision: int = 0) -> None:
        """Store one record (a bad one is skipped and counted)."""
        self.responder.changed(self.index.put(key, value))
        self.index.revision = max(self.index.revision, revision)

    def delete(self, key: str, revision: int = 0) -> None:
        """Remove one record."""
        self.responder.changed(self.index.delete(key))
        self.index.revision = max(self.index.revision, revision)
