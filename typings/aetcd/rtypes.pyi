# aetcd.rtypes: what reads and watches return (aetcd/rtypes.py).

import enum
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence

from . import rpc

class ResponseHeader:
    cluster_id: int
    member_id: int
    revision: int
    raft_term: int
    def __init__(self, header: rpc.ResponseHeader) -> None: ...

class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int
    def __init__(self, keyvalue: rpc.KeyValue) -> None: ...

class Get(KeyValue):
    header: ResponseHeader
    def __init__(self, header: rpc.ResponseHeader, keyvalue: rpc.KeyValue) -> None: ...

class GetRange:
    header: ResponseHeader
    # The raw protobuf key-values; iterating over the GetRange wraps each in a KeyValue.
    kvs: Sequence[rpc.KeyValue]
    more: bool
    count: int
    def __init__(self, header: rpc.ResponseHeader, kvs: Sequence[rpc.KeyValue], more: bool, count: int) -> None: ...
    def __bool__(self) -> bool: ...
    def __len__(self) -> int: ...
    def __iter__(self) -> Iterator[KeyValue]: ...
    def __getitem__(self, index: int) -> KeyValue: ...

class Put:
    header: ResponseHeader
    prev_kv: KeyValue | None

class Delete:
    header: ResponseHeader
    deleted: int
    prev_kv: KeyValue | None

class EventKind(str, enum.Enum):  # noqa: UP042 - as aetcd defines it
    PUT = "PUT"
    DELETE = "DELETE"

class Event:
    # aetcd sets the protobuf enum's name, a plain str ("PUT" or "DELETE"), which equals
    # the EventKind member of that name.
    kind: str
    kv: KeyValue
    prev_kv: KeyValue | None
    def __init__(self, kind: int, kv: rpc.KeyValue, prev_kv: rpc.KeyValue | None = None) -> None: ...

class Watch:
    # ``iterator`` makes the event stream; ``cancel_func`` ends it.
    watch_id: int
    def __init__(self, iterator: Callable[[], AsyncIterator[Event]], cancel_func: Callable[[], Awaitable[None]],
                 watch_id: int) -> None: ...
    def __aiter__(self) -> AsyncIterator[Event]: ...
    async def cancel(self) -> None: ...
