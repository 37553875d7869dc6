"""The bounded store under the cache: entries by key, at most ``limit`` bytes, CLOCK eviction.

Only ``feddns.dns.cache`` uses it (an import-linter contract says so): the cache
decides what is kept and when it goes; this module only holds what it is given
within a byte budget (``--cache-size``), and drops entries by owner or all at once
when told.

Eviction is by recency in bytes: CLOCK, the second-chance approximation of LRU.
Entries sit in insertion order; when the bytes used pass the limit the oldest
entry is looked at, and if it was hit since it was last looked at it moves to
the back instead of going. A hit costs the query path one integer increment
(the hit count the metrics read anyway) and no reordering. Nothing is ever
cleared at once for room. Every entry is registered under an owner (the
service its records come from) so that one owner's entries can be dropped alone.
"""

import sys
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator

ENTRY_OVERHEAD = 240
"""Bytes counted for each entry besides its key and value: its slots in the
ordered dict and in its owner's set, and the objects' headers (measured with
``sys.getsizeof`` on CPython 3.11, rounded up)."""

BYTES_OVERHEAD = sys.getsizeof(b"")
"""Bytes of a ``bytes`` object besides its contents (CPython 3.11)."""

Labels = tuple[str, str, str]
"""Metric labels of an entry: ``(qtype, rcode, source)``, source being
``"cluster"`` when the asking cluster was found, else ``"none"``."""

FirstTier = tuple[str, str, bool]
"""The locality matrix's key of an entry: ``(source cluster, tier, fail open)``, the asking
cluster's name (``""``: none found), the tier its first records come from (``own``, ``zone``,
``region``, ``other``; ``none``: no record), for ``feddns_dns_answers_first_tier_total``, and
whether its records are a fail-open answer (no shard ready), for
``feddns_dns_answers_none_ready_total``."""


class Entry:
    """What the store holds: counts hits, knows its size in bytes and its owner.

    ``hits`` counts the queries answered from it (the metrics sum them, by
    ``labels``, and by ``first`` when the entry answers a service's name); ``seen``
    is ``hits`` when the evictor last looked at it; ``size`` is the bytes it holds
    with its key and :data:`ENTRY_OVERHEAD`; ``owner`` is the key of the records it
    was built from (see :meth:`ReplyStore.drop`).
    """

    __slots__ = ("first", "hits", "labels", "owner", "seen", "size")

    def __init__(self, size: int, owner: Hashable, labels: Labels, first: FirstTier | None = None) -> None:
        self.hits = 0
        self.seen = 0
        self.size = size
        self.owner = owner
        self.labels = labels
        self.first = first


class ReplyStore:
    """Entries bounded by ``limit`` bytes (as counted by their ``size``).

    ``get`` is the dict's own ``get`` (the query path calls it directly);
    ``used`` is the bytes held, counting ``reserved`` bytes taken once for good
    (the cache's doorkeeper table); ``evictions`` counts entries evicted for room;
    ``removed`` is called with every entry that leaves (evicted, dropped or
    cleared), so that its hits can still be counted.
    """

    def __init__(self, limit: int, removed: Callable[[Entry], None] = lambda entry: None, reserved: int = 0) -> None:
        self.limit = limit
        self.reserved = reserved
        self.used = reserved
        self.evictions = 0
        self.removed = removed
        self._items: OrderedDict[Hashable, Entry] = OrderedDict()
        self._owners: dict[Hashable, set[Hashable]] = {}
        self.get = self._items.get

    def __len__(self) -> int:
        return len(self._items)

    def held(self) -> list[Hashable]:
        """The keys now held, oldest first."""
        return list(self._items)

    def owned_by(self, owner: Hashable) -> set[Hashable]:
        """The keys held for ``owner`` (empty when none)."""
        return set(self._owners.get(owner, ()))

    def put(self, key: Hashable, entry: Entry) -> bool:
        """Keep ``entry`` under ``key``, evicting the least recently hit entries
        until the bytes fit. An entry larger than an eighth of the limit is not
        kept (returns False), so that one answer never empties the store."""
        if entry.size * 8 > self.limit - self.reserved:
            return False
        old = self._items.pop(key, None)
        if old is not None:
            self._forget(key, old)
        self._items[key] = entry
        self.used += entry.size
        self._owners.setdefault(entry.owner, set()).add(key)
        while self.used > self.limit:
            self._evict_one()
        return True

    def _evict_one(self) -> None:
        key, entry = self._items.popitem(last=False)
        if entry.hits != entry.seen:  # hit since last looked at: a second chance
            entry.seen = entry.hits
            self._items[key] = entry
            return
        self._forget(key, entry)
        self.evictions += 1

    def _forget(self, key: Hashable, entry: Entry) -> None:
        self.used -= entry.size
        keys = self._owners.get(entry.owner)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._owners[entry.owner]
        self.removed(entry)

    def drop(self, owner: Hashable) -> int:
        """Remove every entry of ``owner``; returns how many went."""
        keys = self._owners.pop(owner, ())
        for key in keys:
            entry = self._items.pop(key, None)
            if entry is not None:
                self.used -= entry.size
                self.removed(entry)
        return len(keys)

    def clear(self) -> None:
        """Remove every entry."""
        entries = list(self._items.values())
        self._items.clear()
        self._owners.clear()
        self.used = self.reserved
        for entry in entries:
            self.removed(entry)

    def entries(self) -> Iterator[Entry]:
        """Every entry now held (for the metrics; safe to call from another thread:
        the snapshot is taken in one C call, under the GIL)."""
        return iter(list(self._items.values()))
