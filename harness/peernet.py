"""The peer network of an etcd cluster on loopback, through proxies that can partition it.

Each member listens for its peers on a port of its own and advertises the port
of its proxy instead, so every connection a member opens to another crosses the
proxy of the member it goes to. ``split(groups)`` cuts the members into groups
that cannot reach each other; ``heal()`` joins them again.

A cut connection is a black hole, as a firewall dropping packets makes it: its
bytes are read and dropped both ways, nothing is answered, nothing is closed.
etcd notices only that its peers went silent. ``heal()`` closes the connections
that were cut (TCP would have given up on them: bytes are missing from their
streams) and lets every new one through.

A proxy must know which member opened a connection, and all of them come from
127.0.0.1. The kernel says: the process owning the socket at the connection's
source port (``/proc/net/tcp`` gives its inode, ``/proc/PID/fd`` its owner). A
connection whose owner is not found (it closed at once) is cut whenever the
network is split.

``tests/support/stallproxy.py`` freezes every connection of one server at once;
a partition needs to tell connections apart by who opened them, hence this one.
"""

import contextlib
import os
import selectors
import socket
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass


@dataclass
class _Pipe:
    client: socket.socket
    server: socket.socket
    source: str | None
    """The member that opened the connection (``None``: not found)."""
    target: str
    cut: bool = False


class PeerNetwork:
    """Proxies for the peer ports of the members of one etcd cluster, in one thread.

    ``add(name, port, pid)`` puts a proxy in front of member ``name``'s peer port and
    returns the proxy's port (the one to advertise); ``pid()`` gives the member's
    process id at the time a connection arrives (a member may be restarted).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[str, int] | None = None
        self._calls: list[Callable[[], object]] = []
        self._proxies: dict[socket.socket, tuple[str, int]] = {}
        self._pids: dict[str, Callable[[], int | None]] = {}
        self._pipes: list[_Pipe] = []
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._running = True
        self._thread = threading.Thread(target=self._run, name="peernet", daemon=True)
        self._thread.start()

    def add(self, name: str, port: int, pid: Callable[[], int | None]) -> int:
        """Proxy ``127.0.0.1:port`` (member ``name``'s peer listener); returns the proxy's port."""
        listener = socket.create_server(("127.0.0.1", 0))
        with self._lock:
            self._proxies[listener] = (name, port)
            self._pids[name] = pid
        self._call_soon(lambda: self._selector.register(listener, selectors.EVENT_READ))
        return int(listener.getsockname()[1])

    def split(self, *groups: Collection[str]) -> None:
        """Members of different ``groups`` can no longer reach each other (a member in no group is
        alone). Connections already open between them go silent."""
        with self._lock:
            self._groups = {name: index for index, group in enumerate(groups) for name in group}
            for pipe in self._pipes:
                pipe.cut = pipe.cut or self._blocked(pipe.source, pipe.target)

    def isolate(self, name: str) -> None:
        """Cut member ``name`` off from all the others (which still reach each other)."""
        self.split([name], [other for other in self._pids if other != name])

    def heal(self) -> None:
        """Every member reaches every other again; connections that were cut are closed."""
        with self._lock:
            self._groups = None
            cut = [pipe for pipe in self._pipes if pipe.cut]
        for pipe in cut:
            self._call_soon(lambda pipe=pipe: self._close(pipe))  # type: ignore[misc]

    def close(self) -> None:
        self._running = False
        self._wake()
        self._thread.join(10)
        for pipe in list(self._pipes):
            self._close(pipe)
        for listener in self._proxies:
            listener.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    # -- the forwarding thread ---------------------------------------------------------------

    def _blocked(self, source: str | None, target: str) -> bool:
        """Whether ``source`` cannot reach ``target`` now (the lock is held)."""
        groups = self._groups
        if groups is None:
            return False
        if source is None or source not in groups or target not in groups:
            return True  # a member in no group is alone
        return groups[source] != groups[target]

    def _call_soon(self, call: Callable[[], object]) -> None:
        """Run ``call`` in the forwarding thread: only it touches the selector and the sockets."""
        with self._lock:
            self._calls.append(call)
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _run(self) -> None:
        while self._running:
            for key, _ in self._selector.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._wake_r:
                    self._wake_r.recv(4096)
                elif sock in self._proxies:
                    self._accept(sock)
                elif sock.fileno() != -1:  # not closed by an earlier event of this round
                    self._forward(sock, key.data)
            with self._lock:
                calls, self._calls = self._calls, []
            for call in calls:
                call()

    def _accept(self, listener: socket.socket) -> None:
        client, (_, source_port) = listener.accept()
        target, port = self._proxies[listener]
        source = self._owner(source_port, listener.getsockname()[1])
        try:
            server = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            client.close()  # the member is down: so is its proxy
            return
        server.settimeout(None)
        with self._lock:
            pipe = _Pipe(client, server, source, target, self._blocked(source, target))
            self._pipes.append(pipe)
        self._selector.register(client, selectors.EVENT_READ, pipe)
        self._selector.register(server, selectors.EVENT_READ, pipe)

    def _owner(self, source_port: int, proxy_port: int) -> str | None:
        """The member whose process owns the socket ``127.0.0.1:source_port`` -> the proxy."""
        inode = _socket_inode(source_port, proxy_port)
        if inode is None:
            return None
        with self._lock:
            pids = {name: pid() for name, pid in self._pids.items()}
        for name, pid in pids.items():
            if pid is not None and _owns(pid, inode):
                return name
        return None

    def _forward(self, source: socket.socket, pipe: _Pipe) -> None:
        try:
            data = source.recv(65536)
        except OSError:
            data = b""
        if not data:
            self._close(pipe)
            return
        with self._lock:
            cut = pipe.cut
        if not cut:
            with contextlib.suppress(OSError):  # the other end is gone; its own read closes the pipe
                (pipe.server if source is pipe.client else pipe.client).sendall(data)

    def _close(self, pipe: _Pipe) -> None:
        with self._lock:
            if pipe not in self._pipes:
                return
            self._pipes.remove(pipe)
        for sock in (pipe.client, pipe.server):
            with contextlib.suppress(KeyError, ValueError):  # not registered, or already closed
                self._selector.unregister(sock)
            sock.close()


def _socket_inode(local_port: int, remote_port: int) -> str | None:
    """The inode of the TCP socket ``127.0.0.1:local_port`` connected to ``127.0.0.1:remote_port``."""
    local, remote = f"0100007F:{local_port:04X}", f"0100007F:{remote_port:04X}"
    with open("/proc/net/tcp", encoding="ascii") as table:
        for line in table:
            fields = line.split()
            if fields[1:3] == [local, remote]:
                return fields[9]  # the inode column
    return None


def _owns(pid: int, inode: str) -> bool:
    """Whether process ``pid`` holds the socket ``inode`` open."""
    wanted = f"socket:[{inode}]"
    fd_dir = f"/proc/{pid}/fd"
    try:
        descriptors = os.listdir(fd_dir)
    except OSError:
        return False
    for fd in descriptors:
        with contextlib.suppress(OSError):  # closed meanwhile
            if os.readlink(f"{fd_dir}/{fd}") == wanted:
                return True
    return False
