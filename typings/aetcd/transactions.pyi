# aetcd.transactions: the compares and operations of a transaction (aetcd/transactions.py).
# A compare is built with an operator: ``Create(key) == 0``, ``Mod(key, end) < revision``.

from typing import Self

from .leases import Lease

class BaseCompare:
    key: bytes | str
    range_end: bytes | str | None
    def __init__(self, key: bytes | str, range_end: bytes | str | None = None) -> None: ...
    # aetcd overloads == and != to build a compare, not to test equality.
    def __eq__(self, other: object) -> Self: ...  # type: ignore[override]
    def __ne__(self, other: object) -> Self: ...  # type: ignore[override]
    def __lt__(self, other: int) -> Self: ...
    def __gt__(self, other: int) -> Self: ...

class Create(BaseCompare): ...
class Mod(BaseCompare): ...

class Put:
    key: bytes
    value: bytes
    lease: int | Lease | None
    prev_kv: bool
    def __init__(self, key: bytes, value: bytes, lease: int | Lease | None = None, prev_kv: bool = False) -> None: ...

class Delete:
    key: bytes
    range_end: bytes | None
    prev_kv: bool
    def __init__(self, key: bytes, range_end: bytes | None = None, prev_kv: bool = False) -> None: ...
