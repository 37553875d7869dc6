"""The cache of Federated-DNS: the one place that decides what is kept, for how long, and when it goes.

Kept apart from the responder, as CoreDNS's ``plugin/cache`` is apart from its
backends: the responder decides what an answer is; this module decides what of
it stays in memory, looks it up first and drops it when records change. The
entries live in one bounded store (``feddns.dns.replystore``, ``--cache-size``
bytes, CLOCK eviction) of two kinds:

* **replies** (:class:`Reply`), keyed by a UDP query's bytes after its ID,
  lowercased: the finished reply (its question lowercased too). The transport's
  datagram handler (:meth:`Cache.udp_handler`) answers a packet whose qname is
  lowercase with one dict lookup and one concatenation; another letter case finds
  it after lowercasing and gets its question spliced in as asked. Only replies in
  one fixed order (or a weighted answer's few orders, :class:`DrawnReply`), for
  names that exist and not decided by the source address, are kept so, and only
  for packets seen at least twice (:class:`Doorkeeper`): a flood of cookie
  variants or random names that never repeat adds no reply (:meth:`Cache.reply`).
* **answers** (:class:`AnswerEntry`, holding a ``feddns.dns.answer.Answer``),
  keyed by what decides them: ``(qname lowercased, QTYPE, source cluster)``.
  Every variant of a question (ID, letter case, cookies, padding, other options,
  RD/CD, DO, ECS, payload size) shares one answer; those bytes are spliced in per
  query. Answers for names that do not exist are never kept.

Beside them, :class:`Envelopes` keeps what the responder needs to answer a name
that does not exist without reading the query in full: keyed by the query's
bytes but its ID and qname, so a flood of names that never repeat adds nothing
(:meth:`Cache.keep_envelope`). Parent envelopes are keyed by the query's bytes
but its ID and first label (:meth:`Cache.keep_parent_envelope`): a random first
label below a name whose children the index holds by name is answered NXDOMAIN
by the UDP handler itself, with one lookup of the label in the index's names
(:meth:`Cache.udp_handler`).

Entries live until evicted for room or until a change to their records
(:meth:`Cache.changed`): each is registered under its service, so a shard's
change drops only that service's entries, a cluster record's change those of its
federation, a full load all of them.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from feddns.dns import weights, wire
from feddns.dns.answer import Answer, Template
from feddns.dns.index import Change, FederationChanged, Node, Reload, ServiceChanged
from feddns.dns.replystore import BYTES_OVERHEAD, ENTRY_OVERHEAD, Entry, FirstTier, Labels, ReplyStore
from feddns.dns.weights import SLOTS_BITS
from feddns.dns.wire import Query
from feddns.names import ServiceId

__all__ = ["AnswerEntry", "AnswerKey", "Cache", "Doorkeeper", "DrawnReply", "Entry", "Envelopes", "FirstTier",
           "Labels", "NxdomainParts", "ParentEnvelope", "Reply",
           "Respond"]  # Entry, FirstTier, Labels: the store's, for the metrics

_Parts = TypeVar("_Parts")
_FEWEST_BITS = 4  # the Doorkeeper's smallest table: 16 slots
_LONGEST_LABEL = wire.MAX_LABEL_BYTES
_DOT = ord(".")
_getrandbits = weights.rng.getrandbits

AnswerKey = tuple[bytes, int, bytes | None]
"""The key of an answer: ``(qname lowercased in wire form, QTYPE, source cluster)``."""

Respond = Callable[[bytes, str, bool], bytes | None]
"""The responder's query path: ``(packet, client address, tcp)`` to a reply, or ``None`` to drop."""


class Reply(Entry):
    """A finished UDP reply less its 2-byte ID (``reply``), for the query bytes it
    is keyed by, lowercased; the qname in the reply is lowercased too, and ends
    (its root label) at offset ``name_end`` of the query."""

    __slots__ = ("name_end", "reply")

    def __init__(self, key: bytes, reply: bytes, name_end: int, owner: Hashable, labels: Labels,
                 first: FirstTier | None = None) -> None:
        super().__init__(len(key) + len(reply) + 2 * BYTES_OVERHEAD + ENTRY_OVERHEAD, owner, labels, first)
        self.reply = reply
        self.name_end = name_end

    def spliced(self, data: bytes) -> bytes:
        """The reply to ``data``, a query that lowercases to this entry's key: its
        ID, and its qname in its own letter case (0x20, as resolvers send it)."""
        reply, end = self.reply, self.name_end
        return b"".join((data[:2], reply[:10], data[12:end], reply[end - 2 :]))


class DrawnReply(Reply):
    """A finished UDP reply per order of a weighted answer, less the 2-byte ID, for
    the query bytes it is keyed by (as :class:`Reply`, with the qname ending at
    ``name_end``): ``reply`` is one of ``replies``, picked at random through
    ``table`` (``feddns.dns.weights``: :data:`~feddns.dns.weights.SLOTS` indexes)
    on every read, so every letter case spliced from it gets a draw too. It is owned
    and counted as the answer entry ``made_from``."""

    __slots__ = ("replies", "table")

    def __init__(self, key: bytes, replies: tuple[bytes, ...], table: array[int], name_end: int,
                 made_from: Entry) -> None:
        size = len(key) + sum(len(r) + BYTES_OVERHEAD for r in replies) + len(table) * table.itemsize
        Entry.__init__(self, size + BYTES_OVERHEAD + ENTRY_OVERHEAD, made_from.owner, made_from.labels,
                       made_from.first)
        self.replies = replies
        self.table = table
        self.name_end = name_end

    @property
    def reply(self) -> bytes:  # type: ignore[override]  # drawn on every read where Reply keeps one
        """One of the replies, drawn for this query."""
        return self.replies[self.table[_getrandbits(SLOTS_BITS)]]


class AnswerEntry(Entry):
    """An :class:`~feddns.dns.answer.Answer` kept for its key (:data:`AnswerKey`),
    counted in bytes as its records, their objects and its ordering's tables."""

    __slots__ = ("answer",)

    def __init__(self, answer: Answer, owner: Hashable, labels: Labels, first: FirstTier | None = None) -> None:
        count = sum(len(tier) for tier in answer.tiers)
        size = answer.length + BYTES_OVERHEAD * (count + 2) + 8 * count + 64 * (len(answer.tiers) + 1) + 200
        if isinstance(answer.ordering, weights.Draw):
            size += answer.ordering.size  # the orders it keeps
        super().__init__(size + ENTRY_OVERHEAD, owner, labels, first)
        self.answer = answer


class Doorkeeper:
    """Remembers which packets were seen once, in a fixed table of 64-bit hashes.

    :meth:`admit` answers True for a key whose hash it saw last time that slot
    was used: a reply is cached only for a packet that came twice, so a flood of
    packets that never repeat (random letter case, cookies) adds no entry. The
    table has ``2**bits`` slots of 8 bytes (``size`` bytes, allocated once and
    counted against the cache's bound), so it needs no eviction; a colliding key
    just waits for its next repeat. Names that do not exist never reach it
    (their answers are never cached).
    """

    def __init__(self, bits: int = 16) -> None:
        self._mask = (1 << bits) - 1
        self._slots = array("q", bytes(8 << bits))
        self.size = self._slots.itemsize * len(self._slots)

    @classmethod
    def within(cls, limit: int) -> Doorkeeper:
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

    def clear(self) -> None:
        """Forget every envelope."""
        self._items.clear()


NxdomainParts = tuple[bytes, bytes, Template, bool]
"""What an envelope keeps: the NXDOMAIN reply's header (after the ID) and what
follows the question, the template that counts the queries answered so, and
whether the envelope's packets may key a parent envelope (no ASCII letter outside
the qname and the cluster-name option's data, :func:`wire.letters_only_in_name`:
decided once per envelope, which holds every byte that decides it)."""

class ParentEnvelope:
    """What a parent envelope keeps (:meth:`Cache.keep_parent_envelope`): the NXDOMAIN
    reply's ``head`` (its header after the ID) and ``tail`` (what follows the
    question), the ``template`` that counts the queries answered so; ``parent``, the
    qname without its first label (wire form, lowercased, relative to the zone);
    ``end``, where the question ends less the first label's length (a query whose
    first label is ``n`` bytes long has its question at ``data[12 : end + n]``); and
    ``names``, the index's ``feddns.dns.index.Index.names``, of which every child of
    ``parent`` that exists is a key (``feddns.dns.index.Index.children_are_named``)."""

    __slots__ = ("end", "head", "names", "parent", "tail", "template")

    def __init__(self, parts: NxdomainParts, parent: bytes, end: int, names: dict[bytes, Node]) -> None:
        self.head, self.tail, self.template, _ = parts
        self.parent = parent
        self.end = end
        self.names = names


class Cache:
    """What the query path keeps, under ``limit`` bytes (``--cache-size``).

    ``store`` holds replies and answers (``feddns.dns.replystore``);
    ``doorkeeper`` admits a reply the second time its packet comes (its table is
    counted in the store's bound); ``envelopes`` maps the envelopes of queries
    answered NXDOMAIN to that reply's parts, ``parents`` their parent envelopes
    (:meth:`keep_parent_envelope`); each holds at most 64 keys of at most 512
    bytes (:class:`Envelopes`), outside the store's bound. ``option`` is the cluster-name EDNS0
    option code (2 bytes), whose data alone may differ in letter case between the
    packets one reply serves. ``removed`` is called with every entry that leaves
    (for the metrics).
    """

    def __init__(self, limit: int, option: bytes, removed: Callable[[Entry], None] = lambda entry: None) -> None:
        self.doorkeeper = Doorkeeper.within(limit)
        self.store = ReplyStore(limit, removed, reserved=self.doorkeeper.size)
        self.envelopes: Envelopes[NxdomainParts] = Envelopes()
        self.parents: Envelopes[ParentEnvelope] = Envelopes()
        """The parent envelopes (:meth:`keep_parent_envelope`), dropped at every full load."""
        self.option = option
        self.answer: Callable[[AnswerKey], AnswerEntry | None] = self.store.get  # type: ignore[assignment]
        """The answer kept for a key, or ``None`` (the store's dict ``get``)."""

    def __len__(self) -> int:
        return len(self.store)

    # -- the query path ---------------------------------------------------------------

    def udp_handler(self, respond: Respond, sendto: Callable[[bytes, Any], object]) -> Callable[[bytes, Any], None]:
        """The function the UDP transport calls per datagram ``(data, addr)``.

        A packet is looked up as it is (one dict lookup, one concatenation with
        its ID, one ``sendto``), then, when it has an upper-case letter,
        lowercased: a reply kept for any letter case of the same packet is sent
        with the qname spliced in as asked (:meth:`Reply.spliced`, inlined). Any
        other packet goes to ``respond``; its reply is sent unless it is ``None``.
        One frame on a hit: this is the cost of most queries (docs/performance.md).

        Before ``respond``, a packet whose parent envelope (its bytes after the ID
        lowercased, but the first label) is kept is answered NXDOMAIN here when its
        first label is one of 1 to 63 bytes, holds no zero byte and no ``.`` (those
        take the long way) and, lowercased before the parent, is no name the index
        holds (:meth:`keep_parent_envelope`): the question is echoed as asked.
        """
        replies: Callable[[bytes], Reply | None] = self.store.get  # type: ignore[assignment]
        parents = self.parents.get

        def datagram_received(data: bytes, addr: Any) -> None:
            key = data[2:]
            entry = replies(key)
            if entry is not None:
                entry.hits += 1
                sendto(data[:2] + entry.reply, addr)
                return
            lowered = key.lower()  # also the parent envelope's; lower() and a compare cost less than islower()
            if lowered != key:  # an upper-case letter: the reply kept for the lowercased packet
                entry = replies(lowered)
                if entry is not None:
                    entry.hits += 1
                    kept, end = entry.reply, entry.name_end  # Reply.spliced, inlined
                    sendto(b"".join((data[:2], kept[:10], data[12:end], kept[end - 2 :])), addr)
                    return
            try:
                first = lowered[10]  # the qname's first length byte
            except IndexError:  # a header cut short: respond drops it
                first = 0
            if 0 < first <= _LONGEST_LABEL:  # a first label, not the root, a pointer or a reserved type
                parent = parents(lowered[:10] + lowered[11 + first :])
                if parent is not None:
                    label = lowered[10 : 11 + first]  # with its length byte (never 0; 46, a ".", goes the long way)
                    if 0 not in label and _DOT not in label and parent.names.get(label + parent.parent) is None:
                        parent.template.hits += 1
                        sendto(b"".join((data[:2], parent.head, data[12 : parent.end + first], parent.tail)), addr)
                        return
            reply = respond(data, addr[0], False)
            if reply is not None:
                sendto(reply, addr)

        return datagram_received

    def keep_answer(self, key: AnswerKey, answer: Answer, owner: ServiceId | None, labels: Labels,
                    first: FirstTier | None = None) -> AnswerEntry:
        """Keep ``answer`` under ``key``, registered under its service ``owner``, counted by
        ``labels`` and ``first`` (the entry is returned even when too large to keep)."""
        entry = AnswerEntry(answer, owner, labels, first)
        self.store.put(key, entry)
        return entry

    def reply(self, found: AnswerEntry, data: bytes, query: Query, ecs: bytes | None, tcp: bool,
              by_address: bool) -> bytes:
        """The reply to ``query`` (read from ``data``) from a kept answer, kept itself when it may be.

        A UDP reply that the packet's bytes alone decide (not the source address,
        ``by_address``), in one fixed order or drawn from a weighted answer's
        orders, is kept, the second time the packet comes (the
        :class:`Doorkeeper`), under the packet's bytes after the ID lowercased,
        with the qname lowercased in the reply too. A packet that lowercases to
        that key differs from the one the reply was made for only in the letter
        case of its qname and of its cluster-name option's data, because only a
        packet with no ASCII letter anywhere else is kept
        (:func:`wire.letters_only_in_name`); the cluster name is matched without
        regard to case and not echoed, so the reply is the same with the qname
        spliced in as asked (:meth:`Reply.spliced`).
        """
        found.hits += 1
        answer = found.answer
        reply = answer.reply(data[:2], query, ecs, tcp)
        if tcp or query.strict or by_address:
            return reply
        drawn = answer.ordering if answer.fixed is None and isinstance(answer.ordering, weights.Draw) else None
        if answer.fixed is None and drawn is None:
            return reply
        key = data[2:].lower()
        if not self.doorkeeper.admit(key) or not wire.letters_only_in_name(data, self.option):
            return reply
        name = query.name
        stored = reply[2:12] + name + reply[12 + len(name) :]
        name_end = 11 + len(name)
        variants = drawn.variants() if drawn is not None else None
        if drawn is not None and variants is None:
            return reply
        if variants is None or stored[0] & 0x02:  # one order, or truncated (TC=1: no records to order)
            self.store.put(key, Reply(key, stored, name_end, found.owner, found.labels, found.first))
            return reply
        at = 10 + len(query.question)  # the answer section starts here, as long in every order
        bodies, table = variants
        replies = tuple(stored[:at] + body + stored[at + len(body) :] for body in bodies)
        self.store.put(key, DrawnReply(key, replies, table, name_end, found))
        return reply

    def keep_envelope(self, data: bytes, query: Query, template: Template) -> NxdomainParts | None:
        """Keep the NXDOMAIN parts of ``template`` for the envelope of ``data``
        (``query`` as the common reader read it, in the main zone, class IN, no ECS
        option), when they are the same whatever the qname; returns them (else ``None``)."""
        around = template.answer.around_question(query)
        if around is None:
            return None
        parts = (*around, template, wire.letters_only_in_name(data, self.option))
        root = 11 + len(query.name)
        self.envelopes.put(data[2:12] + data[root:], parts)
        return parts

    def keep_parent_envelope(self, data: bytes, root: int, parts: NxdomainParts, names: dict[bytes, Node],
                             parent: bytes) -> None:
        """Keep ``parts`` (the envelope's, :meth:`keep_envelope`) for the parent envelope
        of ``data``, a query answered NXDOMAIN whose qname's root label is at offset
        ``root``: its bytes after the ID lowercased, but the first label. The caller
        keeps one only for a packet with no ASCII letter outside its qname and
        cluster-name option data (the last of ``parts``, :func:`wire.letters_only_in_name`),
        so that a packet with the same parent envelope differs from it only in its first
        label and in the letter case of the rest of its qname and of that option's data,
        none of which changes the reply's parts.

        The caller proves that every child of ``parent`` (the qname without its first
        label: wire form, lowercased, relative to the zone) that exists is a key of
        ``names`` (``feddns.dns.index.Index.children_are_named``; ``names`` is the index's
        own dict, so a name added later is seen at once). Then any query with this
        parent envelope is answered as ``data`` was but for its question, echoed as
        asked (RFC 1035 4.1.2, RFC 4343): the key holds the flags and counts, the rest
        of the qname, QTYPE, QCLASS and the OPT record, which decide the reply's parts
        (RFC 1035 4.1.1, RFC 6891 6.1). At most 64 keys of at most 512 bytes are kept,
        the oldest forgotten first (:class:`Envelopes`); a full load drops them all
        (:meth:`changed`)."""
        if not parts[3]:  # letters outside the qname: the caller should not have asked
            return
        first = data[12]
        lowered = data[2:].lower()
        self.parents.put(lowered[:10] + lowered[11 + first :], ParentEnvelope(parts, parent, root + 5 - first, names))

    # -- changes ----------------------------------------------------------------------

    def changed(self, change: Change, services_of: Callable[[str], Iterable[ServiceId]]) -> None:
        """Drop the entries that ``change`` (from the index) can affect: a service's
        (a shard put or deleted), every service's of a federation (a cluster record,
        ``services_of`` listing them, as the index holds them after the change) and the
        service the change removed, or all (a full load)."""
        if change is None:
            return
        if isinstance(change, ServiceChanged):
            self.store.drop(change.service)
        elif isinstance(change, FederationChanged):
            if change.removed is not None:
                self.store.drop(change.removed)
            for sid in services_of(change.federation):
                self.store.drop(sid)
        elif isinstance(change, Reload):
            self.clear()

    def clear(self) -> None:
        """Drop every reply and answer kept, and the parent envelopes, which name the
        index's names (a full load of the records, into another index)."""
        self.store.clear()
        self.parents.clear()
