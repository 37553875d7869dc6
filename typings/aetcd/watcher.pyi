# aetcd.watcher: the stream that carries every watch of a client (aetcd/watcher.py).

from collections.abc import Sequence

from .rpc import WatchStub

class Watcher:
    def __init__(self, watchstub: WatchStub, timeout: float | None = None,
                 metadata: Sequence[tuple[str, str]] | None = None) -> None: ...
    async def shutdown(self) -> None: ...
