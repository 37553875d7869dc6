"""Loopback ports chosen by the OS, and waiting for what a test expects (``wait_until``, and
``async_wait_until`` in coroutines)."""

import asyncio
import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


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


class _Deadline:
    """What ``wait_until`` and ``async_wait_until`` share: ``timeout`` seconds from now, then the error."""

    def __init__(self, timeout: float, what: str) -> None:
        self.timeout, self.what = timeout, what
        self.end = time.monotonic() + timeout

    def check(self, value: object) -> None:
        """TimeoutError naming ``what`` and the last ``value`` once the time is up."""
        if time.monotonic() > self.end:
            raise TimeoutError(f"{self.what} not reached within {self.timeout}s (last: {value!r})")


def wait_until(condition: Callable[[], T], timeout: float = 5.0, interval: float = 0.01,
               what: str = "condition") -> T:
    """Poll ``condition()`` every ``interval`` seconds until it returns a truthy value, which is returned.

    Raises ``TimeoutError`` naming ``what`` (and the last value) after ``timeout`` seconds.
    """
    deadline = _Deadline(timeout, what)
    while True:
        value = condition()
        if value:
            return value
        deadline.check(value)
        time.sleep(interval)


async def async_wait_until(
        condition: Callable[[], T],
        timeout: float = 5.0,  # noqa: ASYNC109 - wait_until's arguments; the error names `what` and the last value
        interval: float = 0.01, what: str = "condition") -> T:
    """``wait_until`` for a coroutine: the same arguments and errors; ``condition`` runs in a worker thread
    (``asyncio.to_thread``: it may block, as dig and the Kubernetes client do) while the loop runs on."""
    deadline = _Deadline(timeout, what)
    while True:
        value = await asyncio.to_thread(condition)
        if value:
            return value
        deadline.check(value)
        await asyncio.sleep(interval)
