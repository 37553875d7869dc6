"""The child processes the tests run (feddns serve, controller, stubzone, links; unbound): one harness
that spawns a program, reads its output line by line, waits for the line that says it is ready, and
stops it with every pipe and file closed."""

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Self

LOG_TAIL = 4000
"""Characters of the child's log quoted in an error."""


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment without the in-cluster ``KUBERNETES_*`` variables, with unbuffered
    Python output (so that a log line arrives when it is written), and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def read_only_root(args: Sequence[str], writable: Sequence[str] = ()) -> list[str]:
    """``args`` run as a container with ``readOnlyRootFilesystem: true`` runs: in a mount namespace of
    its own (``unshare(1)``) where the root filesystem is remounted read-only, so no temporary directory
    is usable (/tmp, /var/tmp and the working directory are on it); each of ``writable`` gets an empty
    tmpfs, as an ``emptyDir`` volume would. Needs root (CAP_SYS_ADMIN), as the tests run."""
    mounts = "".join(f" && mount -t tmpfs -o size=16m tmpfs {path}" for path in writable)
    script = f"mount --make-rprivate / && mount -o remount,bind,ro /{mounts} && exec \"$@\""
    return ["unshare", "--mount", "--", "sh", "-c", script, "sh", *args]


def children(pid: int) -> list[int]:
    """The process ids of ``pid``'s children, from ``/proc/PID/task/*/children`` (every
    thread's: a child is listed under the thread that forked it); none once it is gone."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (its children, theirs, ...), from ``/proc``."""
    out: list[int] = []
    todo = [pid]
    while todo:
        found = children(todo.pop())
        out += found
        todo += found
    return out


def ended(pid: int) -> bool:
    """Whether process ``pid`` has exited: it is a zombie (state ``Z`` in ``/proc/PID/stat``)
    or gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


class ChildProcess:
    """``args`` (an argv) as a child process; a thread reads its stdout and stderr (one pipe) into ``lines``.

    ``ready`` is a regular expression: ``start()`` returns once a line matches it (the match: groups give
    ports). ``env`` defaults to :func:`child_env`; ``log_path``, when given, gets every line too (appended),
    for a person to read or ``tail -f``. ``name`` names the child in errors. The reader closes the pipe
    and the log file and reaps the child when the output ends, so a child that exits on its own leaves
    nothing open either; ``stop()`` ends a running one. ``start()`` may be called again after a stop:
    ``lines`` goes on growing.
    """

    def __init__(self, args: Sequence[str], *, ready: str | re.Pattern[str] | None = None,
                 env: Mapping[str, str] | None = None, name: str | None = None,
                 log_path: Path | None = None, cwd: str | Path | None = None) -> None:
        self.args = list(args)
        self.ready = re.compile(ready) if isinstance(ready, str) else ready
        self.env = dict(env) if env is not None else child_env()
        self.name = name or Path(self.args[0]).name
        self.log_path = log_path
        self.cwd = cwd
        self.lines: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    # --- life ----------------------------------------------------------------------------------------

    def start(self, timeout: float = 15.0) -> re.Match[str] | None:
        """Spawn the child; with ``ready``, wait up to ``timeout`` seconds for a new line matching it and
        return that match. RuntimeError (with the log) if the child exits first, TimeoutError after
        ``timeout``."""
        assert not self.running, f"{self.name} is running already"
        begin = len(self.lines)
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace", env=self.env,
                                     cwd=self.cwd)
        self._reader = threading.Thread(target=self._read, args=(self.proc,), name=f"{self.name} reader",
                                        daemon=True)
        self._reader.start()
        if self.ready is None:
            return None
        try:
            return self.wait_for(self.ready, timeout=timeout, start=begin)
        except BaseException:
            self.stop()
            raise

    def _read(self, proc: "subprocess.Popen[str]") -> None:
        assert proc.stdout is not None
        log: IO[str] | None = open(self.log_path, "a") if self.log_path else None  # noqa: SIM115 - closed below
        try:
            for line in proc.stdout:
                self.lines.append(line.rstrip("\n"))
                if log is not None:
                    log.write(line)
                    log.flush()
        finally:
            proc.stdout.close()
            if log is not None:
                log.close()
            proc.wait()  # the output ends when the child does: reap it

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the child, wait up to ``timeout`` seconds, then SIGKILL it; wait for the reader to
        finish (every pipe and file closed). Its exit status (negative: the signal), None if never started."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self._finish()

    def kill(self) -> int | None:
        """SIGKILL the child (a crash: no clean-up of its own) and wait as ``stop()`` does."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
        return self._finish()

    def _finish(self) -> int:
        assert self.proc is not None and self._reader is not None
        returncode = self.proc.wait()
        self._reader.join(10)
        assert not self._reader.is_alive(), f"{self.name}'s output still open after it exited (a grandchild?)"
        return returncode

    def send_signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- output ----------------------------------------------------------------------------------------

    @property
    def log(self) -> str:
        """Everything the child wrote so far, one line a line."""
        return "".join(line + "\n" for line in self.lines)

    def wait_for(self, pattern: str | re.Pattern[str], timeout: float = 10.0, start: int = 0) -> re.Match[str]:
        """The match of the first line from index ``start`` on matching ``pattern``, waiting up to
        ``timeout`` seconds; RuntimeError once the child has exited and its output ended without one."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        seen = start
        while True:
            ended = self._reader is not None and not self._reader.is_alive()
            lines = self.lines[seen:]
            for line in lines:
                if found := regex.search(line):
                    return found
            seen += len(lines)
            if ended:
                assert self.proc is not None
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before a line matching "
                                   f"{regex.pattern!r}:\n{self.log[-LOG_TAIL:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no line of {self.name} matching {regex.pattern!r} within {timeout}s:\n"
                                   f"{self.log[-LOG_TAIL:]}")
            time.sleep(0.01)

    def rss(self) -> int:
        """Resident memory of the child in bytes (``VmRSS`` of /proc/PID/status)."""
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS line")
