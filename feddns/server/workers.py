"""Worker processes on one port (``feddns serve --workers N``), and the parent that keeps them.

The parent binds every socket, then starts N workers, each with sockets of its own
on the same address (SO_REUSEPORT, ``feddns.dns.transport.bind_shared``), and closes
its copies: the kernel spreads queries over the workers' sockets by the client's
address and port. Each worker is a whole server that answers from its own index. With
etcd, the first N workers are forked from one read of the records
(``feddns.server.forking``): they share the index's pages and each watches etcd from
the revision read. Otherwise, and for every worker started again, a worker is a fresh
interpreter (``sys.executable -c`` with an entry point, never a fork of a process that
holds a gRPC channel) that reads and watches the records itself (docs/choices.md says why).

Between the parent and each worker is a private socket pair
(``multiprocessing.connection``, pickles both ways): the parent sends a
:class:`Start` (the worker's number, what the command needs to run it, its
sockets), the worker says ``ANSWERING`` once it answers on them, and then answers
the parent's questions (``STATE``: ready and why not; ``METRICS``: its metric
families) from a thread of its own, so that a scrape never runs on the DNS loop.
A worker whose parent is gone (the pair closed) stops as on SIGTERM.

A worker that exits is started again after a backoff (:class:`feddns.backoff.Backoff`:
0.1 s doubling to 10 s, each wait drawn from the upper half of the delay so that
workers killed together do not start together; back to 0.1 s after one that ran
30 s), and answers only once it has loaded, on
sockets it binds then; the others answer everything meanwhile, as the kernel
shares a port between the sockets that are open. SIGTERM or SIGINT stops the
workers (SIGTERM each; SIGKILL after 10 s) and then the parent.

``/metrics`` is one: :class:`WorkersCollector` asks each worker at scrape time
and adds up what they say, family by family (a counter's total counts the last
figures of workers that exited too, so it never goes down); a family the command
names may be combined otherwise (the records served: the least of the workers').
``/ready`` is ready while every worker that answers has loaded, and one does.
"""

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from feddns.backoff import Backoff
from feddns.errors import FeddnsError
from feddns.lifecycle import describe_exit
from feddns.server.forking import ForkedProcess
from feddns.server.settings import WorkerTiming

log = logging.getLogger("feddns.workers")
"""Named as before the move to ``feddns.server``: the name is in logs and docs/serve.md."""

ANSWERING = "answering"
"""What a worker says once it answers on its sockets."""
STATE = "state"
"""The question whose answer is ``(ready, detail)``."""
METRICS = "metrics"
"""The question whose answer is the worker's metric families (:data:`Family`)."""

Sample = tuple[str, dict[str, str], float]
Family = tuple[str, str, str, list[Sample]]
"""A metric family as it crosses the pair: name, type, help, samples (name, labels, value)."""
Combine = Callable[[Sequence[float]], float]
SampleKey = tuple[str, str, tuple[tuple[str, str], ...]]
"""A sample across workers: its family's name, its own name, its labels in order."""


Sockets = Sequence[Sequence[tuple[socket.socket, socket.socket]]]
"""Each worker's UDP and TCP socket per ``--listen`` address."""


def close_sockets(sockets: Sockets) -> None:
    """Close every socket of ``sockets`` (the parent's copies, once the workers hold theirs)."""
    for own in sockets:
        for udp, tcp in own:
            udp.close()
            tcp.close()


@dataclass(frozen=True, slots=True)
class Start:
    """What the parent sends a worker first: its ``number`` (from 1), the command's ``plan``
    for it, and its sockets' file descriptors ``(udp, tcp)`` per address (``None``: a worker
    started again, which binds its own once it has loaded)."""

    number: int
    plan: object
    fds: list[tuple[int, int]] | None


class WorkerExited(FeddnsError):
    """A worker exited before it answered (at start-up: the server stops with ``status``)."""

    def __init__(self, number: int, status: int) -> None:
        super().__init__(f"worker {number} {describe_exit(status)} before it answered")
        self.status = status


# --- the parent ------------------------------------------------------------------------------------------


@dataclass
class Worker:
    """One worker slot of the parent: the process in it now and what it last said."""

    number: int
    backoff: Backoff
    """The wait before the slot's next process starts: grows while new ones keep exiting."""
    process: "asyncio.subprocess.Process | ForkedProcess | None" = None
    pair: Connection | None = None
    answering: bool = False
    since: float = 0.0
    """Monotonic time it began answering."""
    last_exit: str = ""
    """How the previous process in the slot ended (for ``/ready``'s body); empty: none did."""
    families: list[Family] = field(default_factory=list)
    """What it said at the last scrape."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    """One question at a time on the pair."""
    asked: int = 0
    """The number of the last question (an answer carries it back)."""

    def ask(self, question: str, timeout: float) -> Any:
        """The worker's answer to ``question``; raises ``OSError``, ``EOFError`` or ``TimeoutError``.

        Called from the metrics server's threads, one question at a time per worker; an answer
        that comes after its question timed out is read and dropped by the next question."""
        with self.lock:
            pair = self.pair
            if pair is None or not self.answering:
                raise EOFError("not answering")
            self.asked += 1
            pair.send((self.asked, question))
            deadline = time.monotonic() + timeout
            while pair.poll(max(0.0, deadline - time.monotonic())):
                number, answer = pair.recv()
                if number == self.asked:
                    return answer
            raise TimeoutError(f"worker {self.number} did not answer {question} in {timeout:g} s")


class Supervisor:
    """Starts ``count`` workers, starts each again when it exits, and stops them.

    ``command`` is the argv that runs a worker's entry point (the file descriptor of its end
    of the pair is appended); ``plan(number)`` is what the command sends worker ``number``;
    ``timing`` how they are kept (``None``: the defaults of :class:`WorkerTiming`)."""

    def __init__(self, count: int, command: Sequence[str], plan: Callable[[int], object],
                 timing: WorkerTiming | None = None) -> None:
        self.timing = timing or WorkerTiming()
        self.workers = [Worker(number, Backoff(self.timing.first_backoff, self.timing.most_backoff))
                        for number in range(1, count + 1)]
        self.command = list(command)
        self.plan = plan
        self.departed: dict[SampleKey, float] = {}
        """Counter samples of workers that exited, as they last said them: added to the totals."""
        self._watches: list[asyncio.Task[None]] = []
        self._lock = threading.Lock()
        """Held while a worker's last figures move to :attr:`departed`, and while both are read."""

    async def start(self, sockets: Sockets, forked: Sequence[tuple[int, socket.socket]] | None = None) -> None:
        """Start a worker on each entry of ``sockets`` (its UDP and TCP socket per address) and
        return once every one answers; the parent's copies of the sockets are closed. With
        ``forked``, the workers are running already (``feddns.server.forking``): each entry is a
        worker's process id, a child of this process, and the parent's end of its pair. Raises
        :class:`WorkerExited` when one exits first (the others are stopped)."""
        try:
            for slot, (worker, own) in enumerate(zip(self.workers, sockets, strict=True)):
                fds = [(udp.fileno(), tcp.fileno()) for udp, tcp in own]
                if forked is None:
                    await self._spawn(worker, fds)
                else:
                    pid, parent_end = forked[slot]
                    self._begin(worker, ForkedProcess(pid), parent_end, fds)
        finally:
            close_sockets(sockets)
        try:
            await asyncio.gather(*(self._until_answering(worker) for worker in self.workers))
        except WorkerExited:
            await self.stop()
            raise
        self._watches = [asyncio.create_task(self._keep(worker)) for worker in self.workers]

    async def _spawn(self, worker: Worker, fds: list[tuple[int, int]] | None) -> None:
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        passed = [fd for pair in fds or [] for fd in pair] + [child_end.fileno()]
        try:
            process = await asyncio.create_subprocess_exec(
                *self.command, str(child_end.fileno()), stdin=asyncio.subprocess.DEVNULL, pass_fds=passed)
        finally:
            child_end.close()
        self._begin(worker, process, parent_end, fds)

    def _begin(self, worker: Worker, process: "asyncio.subprocess.Process | ForkedProcess", parent_end: socket.socket,
               fds: list[tuple[int, int]] | None) -> None:
        """The slot's new process, sent what it runs with."""
        worker.process = process
        worker.pair = Connection(parent_end.detach())
        worker.answering = False
        try:
            worker.pair.send(Start(worker.number, self.plan(worker.number), fds))
        except OSError as exc:  # it has exited: _until_answering reports how
            log.debug("worker %d: cannot send it its start: %s", worker.number, exc)

    async def _until_answering(self, worker: Worker) -> None:
        """Wait for the worker to say it answers; raises :class:`WorkerExited` when it exits first."""
        assert worker.process is not None and worker.pair is not None
        loop = asyncio.get_running_loop()
        said: asyncio.Future[None] = loop.create_future()
        fileno = worker.pair.fileno()

        def readable() -> None:
            if not said.done():
                said.set_result(None)

        loop.add_reader(fileno, readable)
        exited: asyncio.Future[Any] = asyncio.ensure_future(worker.process.wait())
        try:
            await asyncio.wait([said, exited], return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_reader(fileno)
            exited.cancel()
        if said.done():
            try:
                if worker.pair.recv() == ANSWERING:
                    worker.answering = True
                    worker.since = time.monotonic()
                    log.info("worker %d (pid %d) answering", worker.number, worker.process.pid)
                    return
            except (EOFError, OSError):
                pass
        raise WorkerExited(worker.number, await worker.process.wait())

    async def _keep(self, worker: Worker) -> None:
        """Start the worker again each time it exits, after its backoff, until cancelled."""
        while True:
            assert worker.process is not None
            status = await worker.process.wait()
            self._gone(worker, status)
            wait = worker.backoff.next()
            log.warning("worker %d (pid %d) %s; starting another in %.1f s",
                        worker.number, worker.process.pid, describe_exit(status), wait)
            await asyncio.sleep(wait)
            try:
                await self._spawn(worker, None)
            except OSError as exc:  # no process to wait for: the old one's status comes again, with a longer backoff
                log.error("worker %d: cannot start a process: %s", worker.number, exc)
                continue
            try:
                await self._until_answering(worker)
            except WorkerExited as exc:
                log.debug("%s", exc)

    def _gone(self, worker: Worker, status: int) -> None:
        """Note the exit: the counters it last said are kept; the backoff starts again after a steady run."""
        ran = time.monotonic() - worker.since if worker.answering else 0.0
        if ran >= self.timing.steady:
            worker.backoff.reset()
        worker.last_exit = describe_exit(status)
        with self._lock:
            worker.answering = False
            for name, kind, _, samples in worker.families:
                if kind == "counter":
                    for sample, labels, value in samples:
                        key = (name, sample, tuple(sorted(labels.items())))
                        self.departed[key] = self.departed.get(key, 0.0) + value
            worker.families = []
        if worker.pair is not None:
            with worker.lock:
                worker.pair.close()
                worker.pair = None

    async def stop(self) -> None:
        """SIGTERM every worker and wait for them (SIGKILL after ``timing.drain`` seconds)."""
        for task in self._watches:
            task.cancel()
        await asyncio.gather(*self._watches, return_exceptions=True)
        running = [w.process for w in self.workers if w.process is not None and w.process.returncode is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        waits = [asyncio.ensure_future(process.wait()) for process in running]
        if waits:
            await asyncio.wait(waits, timeout=self.timing.drain)
        for process in running:
            if process.returncode is None:
                log.warning("worker (pid %d) still running %.0f s after SIGTERM: SIGKILL", process.pid,
                            self.timing.drain)
                process.kill()
        await asyncio.gather(*waits)
        for worker in self.workers:
            if worker.pair is not None:
                worker.pair.close()
                worker.pair = None

    # --- what /ready and /metrics ask, from the metrics server's threads ---------------------------------

    def states(self) -> list[tuple[Worker, bool, str]]:
        """Each worker with whether it is ready and what it says about it."""
        out = []
        for worker in self.workers:
            if not worker.answering:
                why = f"starting again: the last one {worker.last_exit}" if worker.last_exit else "starting"
                out.append((worker, False, why))
                continue
            try:
                ready, detail = worker.ask(STATE, self.timing.ask)
            except (OSError, EOFError, TimeoutError) as exc:
                ready, detail = False, f"no answer to the parent ({exc or type(exc).__name__})"
            out.append((worker, bool(ready), str(detail)))
        return out

    def ready(self) -> bool:
        """Ready while every worker that answers has loaded, and one does: a worker started again
        answers only once it has loaded, so no query reaches one that has not."""
        states = [(worker, ready) for worker, ready, _ in self.states() if worker.answering]
        return bool(states) and all(ready for _, ready in states)

    def detail(self) -> str:
        """``/ready``'s lines: what each worker says, named (none while all are well)."""
        return "\n".join(f"worker {worker.number}: {text}" for worker, _, text in self.states() if text)

    def families(self) -> tuple[list[list[Family]], dict[SampleKey, float]]:
        """Every answering worker's metric families (what it said last when it does not answer
        now), and :attr:`departed`, taken together: a worker that exits meanwhile is in one or the
        other, never both, so a counter's total never goes down."""
        for worker in self.workers:
            process = worker.process
            with contextlib.suppress(OSError, EOFError, TimeoutError):  # then what it said last
                said = worker.ask(METRICS, self.timing.ask)
                with self._lock:
                    if worker.answering and worker.process is process:
                        worker.families = said
        with self._lock:
            return [w.families for w in self.workers if w.answering], dict(self.departed)


class WorkersCollector(Collector):
    """The workers' metrics as one server's: each family added up over the workers, or combined
    by ``combine[name]`` (e.g. ``min``); a counter's sum counts the workers that exited too."""

    def __init__(self, supervisor: Supervisor, combine: dict[str, Combine]) -> None:
        self.supervisor = supervisor
        self.combine = combine

    def collect(self) -> Iterator[Metric]:
        reports, departed = self.supervisor.families()
        order: dict[str, Metric] = {}
        values: dict[SampleKey, list[float]] = {}
        for families in reports:
            for name, kind, documentation, samples in families:
                order.setdefault(name, Metric(name, documentation, kind))
                for sample, labels, value in samples:
                    values.setdefault((name, sample, tuple(sorted(labels.items()))), []).append(value)
        for key, value in departed.items():
            if key[0] in order and key[0] not in self.combine:
                values.setdefault(key, []).append(value)
        for (name, sample, pairs), figures in values.items():
            order[name].add_sample(sample, dict(pairs), self.combine.get(name, sum)(figures))
        yield from order.values()


# --- the worker --------------------------------------------------------------------------------------------


class Parent:
    """A worker's end of the pair: :attr:`start` (what the parent sent), :meth:`answering`,
    and :meth:`answer_questions` in a thread of its own."""

    def __init__(self, pair: Connection) -> None:
        self.pair = pair
        self.start: Start = pair.recv()

    @classmethod
    def from_argv(cls) -> "Parent":
        """The pair whose file descriptor the parent put last on the command line."""
        return cls(Connection(int(sys.argv[-1])))

    def answering(self) -> None:
        """Tell the parent this worker answers on its sockets."""
        self.pair.send(ANSWERING)

    def answer_questions(self, registry: CollectorRegistry, ready: Callable[[], bool],
                         detail: Callable[[], str]) -> None:
        """Answer the parent's questions in a daemon thread; when the parent is gone, stop this
        worker as SIGTERM would."""
        threading.Thread(target=self._answer, args=(registry, ready, detail), name="feddns-worker-parent",
                         daemon=True).start()

    def _answer(self, registry: CollectorRegistry, ready: Callable[[], bool], detail: Callable[[], str]) -> None:
        try:
            while True:
                number, question = self.pair.recv()
                if question == STATE:
                    self.pair.send((number, (ready(), detail())))
                elif question == METRICS:
                    self.pair.send((number, families(registry)))
        except (EOFError, OSError):
            log.info("the parent is gone: stopping")
            os.kill(os.getpid(), signal.SIGTERM)


def families(registry: CollectorRegistry) -> list[Family]:
    """The registry's metric families as they cross the pair."""
    return [(f.name, f.type, f.documentation, [(s.name, dict(s.labels), float(s.value)) for s in f.samples])
            for f in registry.collect()]
