"""The template of ``feddns serve --workers N`` with etcd: one read of the records, N forks of it.

The parent forks a template before it starts any thread or event loop. The template reads
etcd once (:func:`feddns.store.preload.preload`, through a child of its own, so that it
never holds a gRPC channel), reads every value, freezes its heap, and forks the N workers;
then it says their process ids on a pipe and exits. Each worker answers from the template's
index, whose pages the workers share copy-on-write (docs/serve.md, "Workers"), and watches
etcd from the revision read. When that read fails, the template forks the workers all the
same, with no records: each reads etcd itself, as a worker started again does.

The parent is a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): when the template exits,
its workers become the parent's children, which it waits for as for its own
(:class:`ForkedProcess`, through a pidfd). Each worker gets its sockets and its end of the
pair to the parent by inheritance, and closes every other worker's.
"""

import asyncio
import contextlib
import gc
import logging
import os
import resource
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from feddns import libc
from feddns.errors import FeddnsError
from feddns.etcd.endpoints import EtcdEndpoints
from feddns.keys import Layout
from feddns.lifecycle import describe_exit, die_with_parent
from feddns.store.preload import Preloaded, PreloadFailed, preload

log = logging.getLogger("feddns.workers")

RunWorker = Callable[[int, Preloaded | None], NoReturn]
"""A forked worker's entry point: its end of the pair (a file descriptor) and the records read."""


class TemplateFailed(FeddnsError):
    """The template exited without forking the workers."""


def available() -> bool:
    """Whether this process can keep workers forked by a template: Linux's pidfds and child
    subreapers (it becomes one; call it before forking the template)."""
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # a kernel before 5.3
        return False
    return libc.prctl(libc.PR_SET_CHILD_SUBREAPER, 1)


class ForkedProcess:
    """A worker the template forked, once it is this process's child: what the parent reads of a
    process (``pid``, ``returncode`` as asyncio gives it: negative for a signal), :meth:`wait`,
    :meth:`send_signal` and :meth:`kill`. Waits through a pidfd (Linux 5.3) on the running loop."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._exited: asyncio.Future[int] | None = None
        self._pidfd = -1

    async def wait(self) -> int:
        """The exit status once the process has exited (it is reaped then)."""
        if self.returncode is not None:
            return self.returncode
        if self._exited is None:
            loop = asyncio.get_running_loop()
            self._exited = loop.create_future()
            self._pidfd = os.pidfd_open(self.pid)
            loop.add_reader(self._pidfd, self._reap, loop)
            self._reap(loop)  # it may have exited before the pidfd was open
        return await asyncio.shield(self._exited)

    def _reap(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere: its status is lost
            pid, status = self.pid, 255 << 8
        if pid == 0 or self._exited is None or self._exited.done():
            return
        loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self.returncode = os.waitstatus_to_exitcode(status)
        self._exited.set_result(self.returncode)

    def send_signal(self, signum: int) -> None:
        """Send ``signum``, unless the process has been reaped."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(signal.SIGKILL)


class Template:
    """The parent's view of the forked template: its pid, and the pipe on which it says each
    process it forks, a line each as it forks it (``reader PID``, then ``worker PID`` in slot
    order), and ``done`` once every worker is forked."""

    def __init__(self, pid: int, said: int) -> None:
        self.pid = pid
        self._said = said
        self._heard = bytearray()

    async def workers(self) -> list[int]:
        """The workers' process ids, in slot order, once the template has forked them and exited.
        Raises :class:`TemplateFailed` when it exits first (every process it said is killed and
        waited for); cancelled, it kills the template and every process it said."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        os.set_blocking(self._said, False)
        loop.add_reader(self._said, self._hear, ended)
        template = ForkedProcess(self.pid)
        try:
            await ended
            status = await template.wait()
        except asyncio.CancelledError:
            self._end(template)
            raise
        finally:
            loop.remove_reader(self._said)
            os.close(self._said)
        lines = self._heard.decode("ascii", "replace").splitlines()
        if status == 0 and lines and lines[-1] == "done":
            return self._pids("worker")
        self._end(template)
        raise TemplateFailed(f"the process that reads the records for the workers {describe_exit(status)} "
                             "before it had forked them all")

    def _hear(self, ended: "asyncio.Future[None]") -> None:
        try:
            chunk = os.read(self._said, 4096)
        except BlockingIOError:
            return
        self._heard.extend(chunk)
        if not chunk and not ended.done():
            ended.set_result(None)

    def _pids(self, kind: str) -> list[int]:
        return [int(pid) for what, _, pid in (line.partition(" ") for line in
                                              self._heard.decode("ascii", "replace").splitlines()) if what == kind]

    def _end(self, template: ForkedProcess) -> None:
        """SIGKILL the template unless it has been waited for, wait for it, then SIGKILL and wait
        for every process it said that is this process's child now (a process it waited for
        itself is left alone: its pid may be another's by now). Blocks for as long as a
        process takes to die of SIGKILL."""
        if template.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
        for pid in self._pids("reader") + self._pids("worker"):
            if _parent_of(pid) == os.getpid():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)

    def stop(self) -> None:
        """SIGTERM the template (the parent stops before it has said the workers')."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)


def _parent_of(pid: int) -> int | None:
    """The parent's pid of ``pid`` (``/proc/PID/stat``), or ``None`` when it has gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def fork_template(endpoints: EtcdEndpoints, layout: Layout, own: Sequence[tuple[Sequence[int], int]],
                  parent_ends: Sequence[int], run_worker: RunWorker) -> Template:
    """Fork the template (see the module) and return the parent's view of it. ``own[i]`` is
    worker i's file descriptors (its sockets) and its end of the pair, ``parent_ends`` the
    parent's ends, which the template closes. Call it with no other thread running and no
    event loop; raises ``OSError`` when the fork or the pipe fails."""
    said_read, said_write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        os.close(said_write)
        return Template(pid, said_read)
    status = 1
    try:
        die_with_parent(parent)  # a parent killed: no template reading on with every socket held
        os.close(said_read)
        for fd in parent_ends:
            os.close(fd)
        preloaded = _preload(endpoints, layout, lambda reader: _say(said_write, f"reader {reader}"))
        # Imported once for every worker, which need not import it each (0.3 s) and share its pages;
        # importing opens no channel and starts no thread of gRPC's. Frozen with the rest.
        import feddns.store.etcdfeed  # noqa: F401, PLC0415
        gc.freeze()
        for number in range(len(own)):
            _say(said_write, f"worker {_fork_worker(number, own, said_write, preloaded, run_worker)}")
        _say(said_write, "done")
        status = 0
    except BaseException:  # a bug: said here, as the parent only sees the template exit
        log.exception("the process that reads the records for the workers failed")
    finally:
        os._exit(status)


def _say(said: int, line: str) -> None:
    os.write(said, f"{line}\n".encode("ascii"))


def _preload(endpoints: EtcdEndpoints, layout: Layout, forked: Callable[[int], None]) -> Preloaded | None:
    try:
        preloaded = preload(endpoints, layout, forked)
    except PreloadFailed as exc:
        log.warning("cannot read etcd before forking the workers (%s): each worker reads it itself", exc)
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    log.info("read %d records at revision %d in %.1f s (peak RSS %.0f MiB), every value parsed: forking the "
             "workers from them", len(preloaded.index), preloaded.revision, preloaded.seconds, peak)
    return preloaded


def _fork_worker(number: int, own: Sequence[tuple[Sequence[int], int]], said_write: int,
                 preloaded: Preloaded | None, run_worker: RunWorker) -> int:
    pid = os.fork()
    if pid == 0:
        os.close(said_write)
        for other, (fds, pair) in enumerate(own):
            if other != number:
                for fd in (*fds, pair):
                    os.close(fd)
        run_worker(own[number][1], preloaded)
    return pid
