"""The cache of Federated-DNS: replies and answers, bounded in bytes.

Kept apart from the responder, as CoreDNS's ``plugin/cache`` is apart from its
backends: the responder decides what an answer is, this module only decides
what stays in memory. One :class:`Cache` holds two kinds of entries under one
byte budget (``--cache-size``):

* **replies** (:class:`Reply`), keyed by a UDP query's bytes after its ID with
  the qname lowercased: the finished reply (its question lowercased too). A
  packet whose qname is lowercase finds it with one dict lookup and is answered
  with one concatenation (``feddns.dns.transport``); another letter case finds
  it after lowercasing the qname and gets its question spliced in as asked.
  Only answers sent in one fixed order, for names that exist, are kept so, and
  only for packets seen at least twice (:class:`Doorkeeper`): a flood of cookie
  variants or random names that never repeat adds no reply.
* **answers** (``feddns.dns.answer.Answer``), keyed by what decides them:
  ``(qname lowercased, QTYPE+QCLASS, source cluster)``. Every variant of a
  question (ID, letter case, cookies, padding, other options, RD/CD, DO, ECS,
  payload size) shares one answer; those bytes are spliced in per query.

Beside the cache, :class:`Envelopes` keeps what the responder needs to answer a
name that does not exist without reading the query in full: keyed by the query's
bytes but its ID and qname, so a flood of names that never repeat adds nothing.

Eviction is by recency in bytes: CLOCK, the second-chance approximation of LRU.
Entries sit in insertion order; when the bytes used pass the limit the oldest
entry is looked at, and if it was hit since it was last looked at it moves to
the back instead of going. A hit costs the query path one integer increment
(the hit count the metrics read anyway) and no reordering. Nothing is ever
cleared at once for room. Every entry is registered under an owner (the
service its records come from) so that a change drops only that owner's entries.
"""

from array import array
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

ENTRY_OVERHEAD = 240
"""Bytes counted for each entry besides its key and value: its slots in the
ordered dict and in its owner's set, and the objects' headers (measured with
``sys.getsizeof`` on CPython 3.11, rounded up)."""

BYTES_OVERHEAD = 33
"""Bytes of a ``bytes`` object besides its contents (CPython 3.11)."""

_Parts = TypeVar("_Parts")
_FEWEST_BITS = 4  # the Doorkeeper's smallest table: 16 slots

Labels = tuple[str, str, str]
"""Metric labels of an answer: ``(qtype, rcode, source)``, source being
``"cluster"`` when the asking cluster was found, else ``"none"``."""


class Cached:
    """What the cache holds: counts hits, knows its size in bytes and its owner.

    ``hits`` counts the queries answered from it (the metrics sum them);
    ``seen`` is ``hits`` when the evictor last looked at it; ``size`` is the
    bytes it holds with its key and :data:`ENTRY_OVERHEAD`; ``owner`` is the
    key of the records it was built from (see :meth:`Cache.drop`).
    """

    __slots__ = ("hits", "labels", "owner", "seen", "size")

    def __init__(self, size: int, owner: Hashable, labels: Labels) -> None:
        self.hits = 0
        self.seen = 0
        self.size = size
        self.owner = owner
        self.labels = labels


class Reply(Cached):
    """A finished UDP reply less its 2-byte ID (``reply``), for the query bytes it
    is keyed by, lowercased; the qname in the reply is lowercased too, and ends
    (its root label) at offset ``name_end`` of the query."""

    __slots__ = ("name_end", "reply")

    def __init__(self, key: bytes, reply: bytes, name_end: int, owner: Hashable, labels: Labels) -> None:
        super().__init__(len(key) + len(reply) + 2 * BYTES_OVERHEAD + ENTRY_OVERHEAD, owner, labels)
        self.reply = reply
        self.name_end = name_end

    def spliced(self, data: bytes) -> bytes:
        """The reply to ``data``, a query that lowercases to this entry's key: its
        ID, and its qname in its own letter case (0x20, as resolvers send it)."""
        reply, end = self.reply, self.name_end
        return b"".join((data[:2], reply[:10], data[12:end], reply[end - 2 :]))


class Cache:
    """Entries bounded by ``limit`` bytes (as counted by their ``size``).

    ``get`` is the dict's own ``get`` (the query path calls it directly);
    ``used`` is the bytes held, counting ``reserved`` bytes taken once for good
    (the :class:`Doorkeeper`'s table); ``evictions`` counts entries evicted for room;
    ``removed`` is called with every entry that leaves (evicted, dropped or
    cleared), so that its hits can still be counted.
    """

    def __init__(self, limit: int, removed: Callable[[Cached], None] = lambda entry: None, reserved: int = 0) -> None:
        self.limit = limit
        self.reserved = reserved
        self.used = reserved
        self.evictions = 0
        self.removed = removed
        self._items: OrderedDict[Hashable, Cached] = OrderedDict()
        self._owners: dict[Hashable, set[Hashable]] = {}
        self.get = self._items.get

    def __len__(self) -> int:
        return len(self._items)

    def put(self, key: Hashable, entry: Cached) -> bool:
        """Keep ``entry`` under ``key``, evicting the least recently hit entries
        until the bytes fit. An entry larger than an eighth of the limit is not
        kept (returns False), so that one answer never empties the cache."""
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

    def _forget(self, key: Hashable, entry: Cached) -> None:
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
        """Remove every entry (a full reload of the records)."""
        entries = list(self._items.values())
        self._items.clear()
        self._owners.clear()
        self.used = self.reserved
        for entry in entries:
            self.removed(entry)

    def entries(self) -> Iterator[Cached]:
        """Every entry now held (for the metrics; safe to call from another thread:
        the snapshot is taken in one C call, under the GIL)."""
        return iter(list(self._items.values()))


class Doorkeeper:
    """Remembers which packets were seen once, in a fixed table of 64-bit hashes.

    :meth:`admit` answers True for a key whose hash it saw last time that slot
    was used: a reply is cached only for a packet that came twice, so a flood of
    packets that never repeat (random letter case, cookies) adds no entry. The
    table has ``2**bits`` slots of 8 bytes (``size`` bytes, allocated once and
    counted against the cache's bound, see :class:`Cache`), so it needs no
    eviction; a colliding key just waits for its next repeat. Names that do not
    exist never reach it (their answers are never cached).
    """

    def __init__(self, bits: int = 16) -> None:
        self._mask = (1 << bits) - 1
        self._slots = array("q", bytes(8 << bits))
        self.size = self._slots.itemsize * len(self._slots)

    @classmethod
    def within(cls, limit: int) -> "Doorkeeper":
        """A table of at most 65,536 slots taking at most a sixteenth of ``limit`` bytes."""
        bits = 16
        while bits > _FEWEST_BITS and (8 << bits) * 16 > limit:
            bits -= 1
        return cls(bits)

    def admit(self, key: bytes) -> bool:
        """True when ``key`` was seen before (and then forgets it)."""
        digest = hash(key)
        slot = digest & self._mask
        if self._slots[slot] == digest:
            self._slots[slot] = 0
            return True
        self._slots[slot] = digest
        return False


class Envelopes(Generic[_Parts]):
    """The envelopes of recent queries, each with what answers it: a few, bounded.

    A query's envelope is its bytes but its ID and qname: the header's flags and
    counts, then everything from the qname's root label on (QTYPE, QCLASS, the
    OPT record). Clients send one envelope for every name they ask, so a few
    entries serve a flood of random names. ``get`` is the dict's own ``get``; at
    most ``limit`` envelopes of at most ``longest`` bytes are kept, the oldest
    forgotten first, so a flood of envelopes that never repeat (random cookies)
    holds at most ``limit * longest`` bytes and clears nothing else.
    """

    def __init__(self, limit: int = 64, longest: int = 512) -> None:
        self.limit = limit
        self.longest = longest
        self._items: dict[bytes, _Parts] = {}
        self.get = self._items.get

    def __len__(self) -> int:
        return len(self._items)

    def put(self, envelope: bytes, parts: _Parts) -> None:
        """Keep ``parts`` for ``envelope`` (unless it is longer than ``longest``)."""
        if len(envelope) > self.longest:
            return
        items = self._items
        if len(items) >= self.limit and envelope not in items:
            del items[next(iter(items))]
        items[envelope] = parts
