"""A network namespace of the test's own, and ports of it forwarded to loopback.

``NetworkNamespace(name)`` is ``ip netns add NAME``: a network of its own with nothing but
``lo``, which ``ip netns del`` removes. Programs run in it through :meth:`NetworkNamespace.command`
(``nsenter --net``: ``ip netns exec`` would also remount /sys, which kubelet reads). Nothing in it
has a route out of it, so no packet a program there sends can leave it.

``Forwarder`` gives the test (in the host's namespace) a loopback port for a TCP address inside
the namespace, as ``kubectl port-forward`` does for a pod: one thread accepts on 127.0.0.1 and
opens the other end from inside the namespace (``setns(2)`` changes the namespace of the calling
thread only, and a socket keeps the namespace it was made in).
"""

import contextlib
import ctypes
import os
import selectors
import socket
import subprocess
import threading
from collections.abc import Sequence

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


class NetworkNamespace:
    """``ip netns add NAME`` (a bind mount at /run/netns/NAME); ``delete()`` removes it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = f"/run/netns/{name}"
        subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, text=True)

    def command(self, args: Sequence[str]) -> list[str]:
        """``args`` as an argv that runs inside the namespace."""
        return ["nsenter", f"--net={self.path}", "--", *args]

    def run(self, *args: str) -> str:
        """Run ``args`` inside the namespace; its output. RuntimeError naming the command if it fails."""
        done = subprocess.run(self.command(args), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} in netns {self.name}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def socket_in(self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        """A socket made inside the namespace (this thread enters it and comes back)."""
        with open(self.path) as inside, open("/proc/self/ns/net") as home:
            _setns(inside.fileno())
            try:
                return socket.socket(family, kind)
            finally:
                _setns(home.fileno())

    def delete(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)


class Forwarder:
    """TCP forwards from 127.0.0.1 ports into ``netns``, all in one thread (``add`` gives the port)."""

    def __init__(self, netns: NetworkNamespace, thread_name: str) -> None:
        self.netns = netns
        self._selector = selectors.DefaultSelector()
        self._targets: dict[socket.socket, tuple[str, int]] = {}
        self._peers: dict[socket.socket, socket.socket] = {}
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._pending: list[socket.socket] = []
        self._running = True
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def add(self, host: str, port: int) -> int:
        """Forward a new loopback port to ``host:port`` in the namespace; the loopback port."""
        listener = socket.create_server(("127.0.0.1", 0))
        listener.setblocking(False)
        with self._lock:
            self._targets[listener] = (host, port)
            self._pending.append(listener)
        self._wake_w.send(b"x")
        return int(listener.getsockname()[1])

    def _run(self) -> None:
        while self._running:
            for key, _ in self._selector.select(1.0):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._wake_r:
                    self._wake_r.recv(4096)
                    with self._lock:
                        pending, self._pending = self._pending, []
                    for listener in pending:
                        self._selector.register(listener, selectors.EVENT_READ)
                elif sock in self._targets:
                    self._accept(sock)
                else:
                    self._pump(sock)

    def _connect(self, target: tuple[str, int]) -> socket.socket:
        """The other end of an accepted connection: ``target`` reached from inside the namespace."""
        inside = self.netns.socket_in()
        inside.settimeout(5)
        try:
            inside.connect(target)
        except OSError:
            inside.close()
            raise
        return inside

    def _accept(self, listener: socket.socket) -> None:
        with contextlib.suppress(BlockingIOError):
            client, _ = listener.accept()
            try:
                inside = self._connect(self._targets[listener])
            except OSError:
                client.close()
                return
            for one, other in ((client, inside), (inside, client)):
                one.setblocking(False)
                self._peers[one] = other
                self._selector.register(one, selectors.EVENT_READ)

    def _pump(self, sock: socket.socket) -> None:
        other = self._peers.get(sock)
        try:
            data = sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data and other is not None:
            try:
                other.setblocking(True)
                other.sendall(data)
                other.setblocking(False)
                return
            except OSError:
                pass
        self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        for one in (sock, self._peers.pop(sock, None)):
            if one is None:
                continue
            self._peers.pop(one, None)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(one)
            one.close()

    def close(self) -> None:
        """Stop the thread; close every listener and connection. Safe to call twice."""
        if not self._running:
            return
        self._running = False
        self._wake_w.send(b"x")
        self._thread.join(5)
        for sock in [*self._targets, *self._peers]:
            sock.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
