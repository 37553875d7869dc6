"""A TCP proxy on loopback that can make the server behind it stall at an exact byte of a request.

``freeze_after(n)``: once ``n`` more bytes went from clients to the server,
the proxy forwards nothing more in either direction and accepts new
connections without forwarding them, as a server stopped with SIGSTOP
would look (the kernel still accepts and buffers). ``thaw()`` delivers
what was held, in order, and forwards normally again, as SIGCONT would: a
request the server had only partly received is then read and applied after
the client gave up on it. ``sent`` counts bytes forwarded from clients;
``settled`` is true when the server answered or closed every connection
whose held bytes it got at the thaw (so what they asked for is done).
"""

import contextlib
import selectors
import socket
import threading
from dataclasses import dataclass, field


@dataclass
class _Pipe:
    client: socket.socket
    server: socket.socket
    held: dict[socket.socket, bytearray] = field(default_factory=dict)
    closing: bool = False
    awaiting: bool = False


class StallProxy:
    """Forwards ``127.0.0.1:port`` to ``target`` (host, port) until told to stall."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sent = 0
        self._budget: int | None = None  # bytes still forwarded before the stall; None: no stall planned
        self._frozen = False
        self._lock = threading.Lock()
        self._pipes: list[_Pipe] = []
        self._selector = selectors.DefaultSelector()
        self._registered: set[socket.socket] = set()
        self._selector.register(self.listener, selectors.EVENT_READ)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._running = True
        self._thread = threading.Thread(target=self._run, name="stallproxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def freeze_after(self, count: int) -> None:
        """Stall once ``count`` more bytes went from clients to the server (0: now)."""
        with self._lock:
            self._budget = count
            self._frozen = count == 0

    @property
    def frozen(self) -> bool:
        with self._lock:
            return self._frozen

    @property
    def settled(self) -> bool:
        with self._lock:
            return not self._frozen and not any(pipe.awaiting or any(pipe.held.values()) for pipe in self._pipes)

    def thaw(self) -> None:
        """Deliver what was held and forward normally again."""
        with self._lock:
            self._budget, self._frozen = None, False
        self._wake_w.send(b"x")

    def close(self) -> None:
        self._running = False
        self._wake_w.send(b"x")
        self._thread.join(10)
        for pipe in self._pipes:
            pipe.client.close()
            pipe.server.close()
        self.listener.close()
        self._wake_r.close()
        self._wake_w.close()

    # -- the forwarding thread ---------------------------------------------------------------

    def _run(self) -> None:
        while self._running:
            for key, _ in self._selector.select(timeout=0.5):
                sock = key.fileobj
                if sock is self.listener:
                    self._accept()
                elif sock is self._wake_r:
                    self._wake_r.recv(4096)
                    self._flush_held()
                else:
                    assert isinstance(sock, socket.socket)
                    self._forward(sock, key.data)

    def _accept(self) -> None:
        client, _ = self.listener.accept()
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()  # the server is down: so is the proxy
            return
        server.settimeout(None)
        pipe = _Pipe(client, server, {client: bytearray(), server: bytearray()})
        self._pipes.append(pipe)
        self._watch(client, pipe)
        self._watch(server, pipe)

    def _forward(self, source: socket.socket, pipe: _Pipe) -> None:
        try:
            data = source.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._close(pipe)
            return
        held = pipe.held[source]
        with self._lock:
            if source is pipe.server:
                pipe.awaiting = False
            if self._frozen:
                held += data
                return
            if source is pipe.client and self._budget is not None:
                now, later = data[: self._budget], data[self._budget:]
                self._budget -= len(now)
                if self._budget == 0:
                    self._frozen = True
                held += later
                data = now
            if source is pipe.client:
                self.sent += len(data)
        self._send(pipe.server if source is pipe.client else pipe.client, data)

    def _flush_held(self) -> None:
        if self.frozen:
            return
        for pipe in list(self._pipes):
            for source, held in pipe.held.items():
                if held:
                    target = pipe.server if source is pipe.client else pipe.client
                    data = bytes(held)
                    with self._lock:
                        held.clear()
                        pipe.awaiting = pipe.awaiting or source is pipe.client
                    self._send(target, data)
            if pipe.closing:  # the client left while frozen: the server gets its bytes, then end of stream
                with self._lock:
                    pipe.awaiting = True
                pipe.client.close()
                with contextlib.suppress(OSError):  # the server already left
                    pipe.server.shutdown(socket.SHUT_WR)
                self._watch(pipe.server, pipe)
                pipe.closing = False

    def _watch(self, sock: socket.socket, pipe: _Pipe) -> None:
        if sock not in self._registered:
            self._selector.register(sock, selectors.EVENT_READ, pipe)
            self._registered.add(sock)

    def _unwatch(self, sock: socket.socket) -> None:
        if sock in self._registered:
            self._selector.unregister(sock)
            self._registered.discard(sock)

    def _send(self, target: socket.socket, data: bytes) -> None:
        with contextlib.suppress(OSError):  # the other end is gone; its own read will close the pipe
            target.sendall(data)

    def _close(self, pipe: _Pipe) -> None:
        """One side closed: deliver what it sent first (unless frozen, then it waits), then close both."""
        with self._lock:
            pipe.awaiting = False
        if self.frozen:
            pipe.closing = True  # the held bytes go out at thaw, then both close; stop reading meanwhile
            for sock in (pipe.client, pipe.server):
                self._unwatch(sock)
            return
        for sock in (pipe.client, pipe.server):
            self._unwatch(sock)
            sock.close()
        if pipe in self._pipes:
            self._pipes.remove(pipe)
