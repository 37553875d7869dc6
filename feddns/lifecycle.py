"""Start-up and shutdown shared by the commands that serve (docs/reference.md section 6).

Every listening socket is bound before "listening" is printed; a bind failure
is one line naming the flag and the address, and exit status 2
(:func:`cannot_listen`). SIGTERM and SIGINT stop a command, which logs the stop
(:class:`StopSignals` says which signal came).
"""

import asyncio
import os
import signal
import socket

from feddns import libc
from feddns.errors import ConfigError
from feddns.hostport import unresolvable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def cannot_listen(flag: str, address: str, exc: OSError) -> ConfigError:
    """The error for an address that cannot be bound, naming the flag and the address:
    ``--metrics 127.0.0.1:9153: cannot listen: Address already in use``. asyncio rewords
    ``OSError`` messages, so the reason comes from the errno when there is one; a host that
    does not resolve is said so (:func:`feddns.hostport.unresolvable`)."""
    if isinstance(exc, socket.gaierror):
        return unresolvable(flag, address, address.rpartition(":")[0].strip("[]") or address, exc)
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return ConfigError(f"{flag} {address}: cannot listen: {reason}")


class StopSignals:
    """SIGTERM and SIGINT, caught on the running loop from creation until :meth:`close`.

    Made before a command announces that it listens, so that a signal sent as
    soon as it has said so is a clean stop, not an interrupt.
    """

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._received: asyncio.Future[str] = self._loop.create_future()
        for signum in STOP_SIGNALS:
            self._loop.add_signal_handler(signum, self._handle, signum)

    def _handle(self, signum: signal.Signals) -> None:
        if not self._received.done():
            self._received.set_result(signum.name)

    async def wait(self) -> str:
        """Wait for the first of the signals; returns its name (``SIGTERM``)."""
        return await asyncio.shield(self._received)

    def close(self) -> None:
        """Give the signals back to their default handlers."""
        for signum in STOP_SIGNALS:
            self._loop.remove_signal_handler(signum)


def describe_exit(status: int) -> str:
    """``exited with status 1`` or ``was killed by SIGKILL`` (``status`` as asyncio gives it:
    the exit code, or minus the signal's number)."""
    if status < 0:
        try:
            return f"was killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"was killed by signal {-status}"
    return f"exited with status {status}"


def die_with_parent(parent: int) -> None:
    """In a child just forked from process ``parent``: SIGKILL it when that parent exits
    (``prctl(PR_SET_PDEATHSIG)``, which the child's own forks do not inherit), and exit at once
    if the parent has exited already. Nothing where ``prctl`` is missing."""
    libc.prctl(libc.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)
