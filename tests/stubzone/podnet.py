"""A pod's network for the path check's tests: a network namespace where the cluster DNS Service's
clusterIP answers, as kube-proxy makes it answer in every pod.

The tests have no kube-proxy, and a clusterIP such as 10.0.0.10 asked from the host's network would
leave the machine. So the endpoint under test runs inside a :class:`~harness.netns.NetworkNamespace`
of the test's own, which has only ``lo`` and no route out; there:

- the clusterIP is an address of ``lo``, and a UDP relay bound to CLUSTERIP:PORT sends each query to
  the real CoreDNS on the host's loopback and its answer back (what kube-proxy's DNAT does);
- 127.0.0.1:P, the kube-apiserver's port, is relayed to the host's 127.0.0.1:P, so the kubeconfig
  the endpoint is given works unchanged (TLS included: the address is the same);
- the host reaches the endpoint's ``--metrics`` port through a :class:`~harness.netns.Forwarder`.
"""

import contextlib
import socket
import threading
import uuid

from harness.netns import Forwarder, NetworkNamespace


class _IntoHost(Forwarder):
    """A :class:`Forwarder` turned around: it listens inside the namespace and connects from the host."""

    def listen(self, port: int) -> None:
        """Make 127.0.0.1:``port`` inside the namespace reach 127.0.0.1:``port`` on the host."""
        listener = self.netns.socket_in()
        listener.bind(("127.0.0.1", port))
        listener.listen(16)
        listener.setblocking(False)
        with self._lock:
            self._targets[listener] = ("127.0.0.1", port)
            self._pending.append(listener)
        self._wake_w.send(b"x")

    def _connect(self, target: tuple[str, int]) -> socket.socket:
        return socket.create_connection(target, timeout=5)


class PodNetwork:
    """The namespace, its relays, and ``forwarder`` for ports inside it; ``close()`` removes all."""

    def __init__(self) -> None:
        self.netns = NetworkNamespace(f"feddns-pod-{uuid.uuid4().hex[:8]}")
        self.netns.run("ip", "link", "set", "lo", "up")
        self.forwarder = Forwarder(self.netns, "pod network: host to pod")
        self._into_host = _IntoHost(self.netns, "pod network: pod to host")
        self._stop = threading.Event()
        self._relays: list[tuple[threading.Thread, socket.socket]] = []

    def host_port(self, port: int) -> None:
        """Make 127.0.0.1:``port`` (TCP) inside the namespace reach 127.0.0.1:``port`` on the host."""
        self._into_host.listen(port)

    def service(self, cluster_ip: str, port: int, upstream: tuple[str, int]) -> None:
        """Make ``cluster_ip:port`` (UDP) inside the namespace answer as ``upstream`` on the host does."""
        self.netns.run("ip", "addr", "add", f"{cluster_ip}/32", "dev", "lo")
        inside = self.netns.socket_in(socket.AF_INET, socket.SOCK_DGRAM)
        inside.bind((cluster_ip, port))
        inside.settimeout(0.2)  # how soon close() is seen
        thread = threading.Thread(target=self._relay, args=(inside, upstream), name=f"pod network: {cluster_ip}",
                                  daemon=True)
        thread.start()
        self._relays.append((thread, inside))

    def _relay(self, inside: socket.socket, upstream: tuple[str, int]) -> None:
        """Each query to ``upstream``, its answer back (none within 2 s: the asker times out)."""
        while not self._stop.is_set():
            try:
                query, asker = inside.recvfrom(65535)
            except TimeoutError:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as out:
                out.settimeout(2)
                out.sendto(query, upstream)
                with contextlib.suppress(TimeoutError):
                    inside.sendto(out.recv(65535), asker)

    def close(self) -> None:
        """Stop the relays and the forwards, close every socket, delete the namespace."""
        self._stop.set()
        for thread, sock in self._relays:
            thread.join(5)
            sock.close()
        self.forwarder.close()
        self._into_host.close()
        self.netns.delete()
