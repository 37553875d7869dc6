"""Records from a YAML file: a map from the etcd keys of docs/reference.md section 4 to their values.

Used when ``feddns serve`` has no ``--etcd`` (trying it out, tests, small
static federations). Values are YAML maps or JSON strings, read and checked by
:mod:`feddns.store.recordsfile`. At start-up every record must be valid (a bad
file stops start-up, exit 2); afterwards the file is polled
(:class:`feddns.filewatch.FileWatch`) and reloaded when it changes, and a reload
that fails keeps the records already served.
"""

import logging
from pathlib import Path

from feddns.configfile import SizeLimit
from feddns.errors import ConfigError, RecordError
from feddns.filewatch import FileWatch
from feddns.keys import Layout
from feddns.store import Feed
from feddns.store.recordsfile import read_records

__all__ = ["EXAMPLE", "FileSource", "read_records"]

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
"""How often (seconds) the file is looked at for a change (its identity: :mod:`feddns.filewatch`)."""

EXAMPLE = Path(__file__).resolve().parent.parent / "data" / "federation.yaml"
"""The example federation shipped with feddns (``examples/federation.yaml``)."""


class FileSource:
    """Feeds the records of ``path`` and reloads them when the file changes; a file over ``limit``
    (``--max-records-size``) is refused unread."""

    def __init__(self, path: Path, layout: Layout, feed: Feed, limit: SizeLimit | None = None) -> None:
        self.path = path
        self.layout = layout
        self.feed = feed
        self.limit = limit
        self._file = FileWatch([path], POLL_SECONDS)

    def load(self) -> None:
        """Load the file now; raises :class:`ConfigError` when it is bad."""
        self._file.changed()  # looked at before the read: a write during the read is seen at the next look
        self.feed.replace(read_records(self.path, self.layout, self.limit))
        log.info("records file %s: loaded %d records", self.path, len(self.feed.index))

    async def run(self) -> None:
        """Poll the file every :data:`POLL_SECONDS` and reload it on change."""
        while True:
            await self._file.wait()
            try:
                self.load()
            except (ConfigError, RecordError) as exc:
                self.feed.restarts += 1
                log.warning("%s; keeping the records already loaded", exc)
