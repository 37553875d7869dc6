"""Loopback ports chosen by the OS."""

import socket
import time


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port on 127.0.0.1 the OS just handed out (free for TCP and UDP when possible).

    For servers that cannot be told to bind port 0 (etcd, BIND, unbound).
    """
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind(("127.0.0.1", 0))
            port = tcp.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                try:
                    udp.bind(("127.0.0.1", port))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair found")


def wait_for_port(host: str, port: int, timeout: float = 10.0) -> None:
    """Wait until a TCP connect to ``host:port`` succeeds; raises TimeoutError."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.2):
                return
        except OSError as err:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listening on {host}:{port} after {timeout}s") from err
            time.sleep(0.02)


def wait_until(condition, timeout: float = 5.0, interval: float = 0.01, what: str = "condition"):
    """Poll ``condition()`` until it returns a truthy value, which is returned.

    Raises ``TimeoutError`` naming ``what`` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout}s (last: {value!r})")
        time.sleep(interval)
