"""Weighted orders: a random order per answer, in proportion to weights, without packing per query.

The ``weighted`` and ``locality-weighted`` policies (docs/reference.md section 2)
order a tier's shards at random, each answer afresh, so that a shard of weight
``w`` comes first in ``w / W`` of the answers (``W`` the tier's total weight),
and, among the rest, the next one likewise. The records are packed once, when
the answer is built (``feddns.dns.policy``); what a query costs is one random
number and one table lookup per tier.

How: for each tier a table of :data:`SLOTS` orders is built once, by recursive
apportionment (largest remainders, as seats are apportioned to votes): the
shards share the slots in proportion to their weights as the first choice, then
the slots of each first choice are shared among the rest for the second
choice, and so on; a group of one slot takes the rest of its order from one
weighted random draw (Efraimidis and Spirakis: key ``u ** (1 / w)``). Each
prefix of an order thus comes up in its exact share of the slots, to within
one slot in :data:`SLOTS`. A query picks a slot uniformly at random
(:data:`rng`, seedable by tests). The table keeps each distinct order once: up to
:data:`JOINED_BYTES` of them joined in wire form (the common case: a few
shards, a few distinct orders), else as indexes into the tier's records, joined
per query.

A weighted answer whose orders are few and joined can also be kept as a finished
UDP reply per order (``feddns.dns.cache.DrawnReply``, from :meth:`Draw.variants`), so
that a repeated query costs what a repeated fixed answer costs: one dict lookup, one
random pick, one concatenation.
"""

from __future__ import annotations

import random
import sys
from array import array
from collections.abc import Sequence

SLOTS_BITS = 10
SLOTS = 1 << SLOTS_BITS
"""Orders in each tier's table: a share is honoured to within 1/1024 (about 0.1%)."""

_BYTES_OVERHEAD = sys.getsizeof(b"")  # a bytes object's header, as the cache counts it
_BYTE_VALUES = 256  # indexes below this fit one byte ("B" arrays); others take two ("H")

JOINED_BYTES = 16 * 1024
"""Distinct orders are kept joined while they take at most this many bytes together."""

MAX_REPLY_VARIANTS = 64
"""A weighted answer is kept as finished UDP replies only when it has at most this many orders."""

rng = random.Random()
"""The random source of the draws (``rng.seed(n)`` makes a test repeatable)."""
_getrandbits = rng.getrandbits

Unit = tuple[bytes, int]
"""What is ordered: one shard's records in wire form, joined, and its weight (> 0)."""


def apportion(weights: Sequence[int], seats: int) -> list[int]:
    """``seats`` shared in proportion to ``weights`` (each > 0) by largest remainders
    (Hamilton's method); ties go to the earlier entry. The counts sum to ``seats``."""
    total = sum(weights)
    quotas = [weight * seats for weight in weights]
    counts = [quota // total for quota in quotas]
    left = seats - sum(counts)
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(quotas[i] % total), i))
    for i in by_remainder[:left]:
        counts[i] += 1
    return counts


def weighted_shuffle(items: Sequence[int], weights: Sequence[int]) -> tuple[int, ...]:
    """``items`` in one random order drawn in proportion to ``weights`` (indexed by item):
    each next item is chosen among those left with probability weight / weight left."""
    keyed = sorted(items, key=lambda i: -(rng.random() ** (1.0 / weights[i])))
    return tuple(keyed)


def order_table(weights: Sequence[int], slots: int = SLOTS) -> list[tuple[tuple[int, ...], int]]:
    """The distinct orders of ``range(len(weights))`` with how many of ``slots`` each
    takes (see the module docstring); the counts sum to ``slots``."""
    out: list[tuple[tuple[int, ...], int]] = []
    _fill(out, (), list(range(len(weights))), weights, slots)
    return out


def _fill(out: list[tuple[tuple[int, ...], int]], prefix: tuple[int, ...], left: list[int],
          weights: Sequence[int], slots: int) -> None:
    if len(left) <= 1 or slots == 1:
        out.append((prefix + weighted_shuffle(left, weights), slots))
        return
    counts = apportion([weights[i] for i in left], slots)
    for item, count in zip(left, counts, strict=True):
        if count:
            _fill(out, (*prefix, item), [i for i in left if i != item], weights, count)


class TierDraw:
    """The orders of one tier: ``bodies`` (distinct orders joined) or ``orders``
    (distinct orders as indexes into ``records``), and ``table`` (:data:`SLOTS`
    indexes into either)."""

    __slots__ = ("bodies", "orders", "records", "size", "table")

    def __init__(self, units: Sequence[Unit]) -> None:
        self.records = tuple(records for records, _ in units)
        table = order_table([weight for _, weight in units])
        length = sum(len(records) for records in self.records)
        self.table = array("H" if len(table) >= _BYTE_VALUES else "B", [i for i, (_, count) in enumerate(table)
                                                            for _ in range(count)])
        self.bodies: tuple[bytes, ...] | None = None
        self.orders: tuple[bytes, ...] | None = None
        if length * len(table) <= JOINED_BYTES:
            self.bodies = tuple(b"".join(self.records[i] for i in order) for order, _ in table)
            self.size = length * len(table) + _BYTES_OVERHEAD * len(table)
        else:
            self.orders = tuple(bytes(order) if len(units) < _BYTE_VALUES else array("H", order).tobytes()
                                for order, _ in table)
            self.size = length + sum(len(order) + _BYTES_OVERHEAD for order in self.orders)
        self.size += len(self.table) * self.table.itemsize + 64

    def body(self, slot: int) -> bytes:
        """The tier's records in the order of table slot ``slot``."""
        index = self.table[slot]
        if self.bodies is not None:
            return self.bodies[index]
        assert self.orders is not None
        order = self.orders[index]
        if len(self.records) >= _BYTE_VALUES:
            return b"".join(self.records[i] for i in array("H", order))
        return b"".join(self.records[i] for i in order)


class Draw:
    """An ``Ordering`` (``feddns.dns.answer``) drawn at random by weight for each query.

    ``tiers`` are the tiers' units, best tier first; a tier of one unit is fixed.
    The ``tiers`` argument of :meth:`arrange` is ignored: the records were taken
    (and joined per order) here. ``size`` is the bytes the orders hold.
    """

    __slots__ = ("_variants", "parts", "size")

    def __init__(self, tiers: Sequence[Sequence[Unit]]) -> None:
        self.parts: tuple[bytes | TierDraw, ...] = tuple(
            tier[0][0] if len(tier) == 1 else TierDraw(tier) for tier in tiers if tier
        )
        self.size = sum(part.size if isinstance(part, TierDraw) else 0 for part in self.parts)
        self._variants: tuple[tuple[bytes, ...], array[int]] | bool | None = False

    def arrange(self, tiers: Sequence[Sequence[bytes]]) -> bytes:
        """The answer records in an order drawn for this query."""
        parts = self.parts
        if len(parts) == 1:
            part = parts[0]
            return part if isinstance(part, bytes) else part.body(_getrandbits(SLOTS_BITS))
        return b"".join(part if isinstance(part, bytes) else part.body(_getrandbits(SLOTS_BITS)) for part in parts)

    def variants(self) -> tuple[tuple[bytes, ...], array[int]] | None:
        """Every answer section this draw gives, joined, and the table of :data:`SLOTS`
        indexes into them, when only one tier varies and it has few joined orders
        (worked out once)."""
        if self._variants is False:
            self._variants = self._find_variants()
        return self._variants  # type: ignore[return-value]

    def _find_variants(self) -> tuple[tuple[bytes, ...], array[int]] | None:
        drawn = [part for part in self.parts if isinstance(part, TierDraw)]
        if len(drawn) != 1 or drawn[0].bodies is None or len(drawn[0].bodies) > MAX_REPLY_VARIANTS:
            return None
        varying = drawn[0]
        assert varying.bodies is not None
        at = self.parts.index(varying)
        head = b"".join(p for p in self.parts[:at] if isinstance(p, bytes))
        tail = b"".join(p for p in self.parts[at + 1 :] if isinstance(p, bytes))
        return tuple(head + body + tail for body in varying.bodies), varying.table
