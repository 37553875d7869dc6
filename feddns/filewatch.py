"""The one file watcher: tells when files given by path were replaced or rewritten, by polling their identity.

Every component reloads files while it runs: certificates and keys (a rotated
Secret), the etcd password file, the links policy file, a records file. Each
asks this module whether a file changed, and what it then reads is its own.

A file's identity (:func:`identity`) is the end of its symlink chain
(``os.path.realpath``), with the device, inode, size and modification time in
nanoseconds of what it points to. A Kubernetes ConfigMap or Secret volume
replaces every key at once by pointing its ``..data`` symlink at a new
directory (kubelet's AtomicWriter): the path stays the same, its real path
changes. An editor's or ``cp``'s rewrite changes the size or modification time;
``mv`` of a new file over the old changes the inode. A file that cannot be
``stat``-ed (missing, a dangling symlink) has the identity ``None``.

Polling, not inotify: inotify watches the directory entries a path names at the
time, so a ``..data`` swap must be followed by watching the new target again,
and a file system without inotify (NFS, some overlay set-ups) would report
nothing; the poll is needed anyway, and one ``stat`` per file every second
costs nothing (docs/choices.md). The one thing polling may miss is an in-place
rewrite to the same size within one tick of the file system's clock after the
previous look (a few milliseconds); no writer we know of does that twice.
"""

import asyncio
import os
import time
from collections.abc import Iterable
from pathlib import Path

Identity = tuple[str, int, int, int, int] | None
"""``(real path, device, inode, size in bytes, mtime in ns)`` of one file; ``None`` when it cannot be ``stat``-ed."""
Identities = tuple[Identity, ...]
"""The :data:`Identity` of each watched path, in the order given."""


def identity(path: Path) -> Identity:
    """The :data:`Identity` of ``path`` now (one ``realpath`` and one ``stat``); never raises."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):  # missing, a dangling or looping symlink, a NUL in the path
        return None
    return real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class FileWatch:
    """Watches ``paths`` (each a file, possibly through symlinks), looking every ``interval`` seconds.

    ``seen`` holds the identities of the last change reported (at first: as the files
    are at construction). :meth:`changed` looks now; :meth:`wait` polls until a change;
    :meth:`latest` and :meth:`differs` serve an owner that keeps its own snapshot (one
    per etcd client). Raises ``ValueError`` when ``interval`` is not positive.
    """

    def __init__(self, paths: Iterable[Path], interval: float) -> None:
        if interval <= 0:
            raise ValueError(f"a file watch needs a positive interval (seconds), got {interval}")
        self.paths = tuple(paths)
        self.interval = interval
        self._looked_at = 0.0
        self._latest: Identities = ()
        self.seen = self.look()

    def look(self) -> Identities:
        """The identities of the files now (a ``stat`` each)."""
        self._latest = tuple(identity(path) for path in self.paths)
        self._looked_at = time.monotonic()
        return self._latest

    def latest(self) -> Identities:
        """The identities of the last look, looked at again when it is ``interval`` seconds old: cheap to
        ask before every call (the etcd client's owner asks before each)."""
        if time.monotonic() - self._looked_at >= self.interval:
            return self.look()
        return self._latest

    def changed(self) -> bool:
        """Look now; True when a file's identity differs from :attr:`seen`, which then becomes the new one.

        Call it before reading the files: a change made while they are read is then reported next time."""
        now = self.look()
        if now == self.seen:
            return False
        self.seen = now
        return True

    async def differs(self, seen: Identities) -> Identities:
        """Return the files' identities once they differ from ``seen``, looking every ``interval`` seconds."""
        # A replaced file (kubelet swaps a volume's symlink) sets off no event to wait on: poll.
        while (now := self.latest()) == seen:  # noqa: ASYNC110 - polling stat() is the design
            await asyncio.sleep(self.interval)
        return now

    async def wait(self) -> None:
        """Return once a file changed since :attr:`seen` (polling every ``interval`` seconds); ``seen`` is then
        the new identities."""
        self.seen = await self.differs(self.seen)
