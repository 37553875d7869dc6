"""The log lines of every command: one text format and one JSON format (``--log-format``).

Every line goes through the stdlib :mod:`logging` to stderr, in one of two formats chosen by
``--log-format`` (docs/operations.md, "Logs"):

* ``text`` (default): ``TIME LEVEL LOGGER: MESSAGE``, e.g.
  ``2024-05-01T12:00:00.123Z INFO feddns serve: listening on udp+tcp 127.0.0.1:5353``;
* ``json``: one object per line, ``{"time": ..., "level": ..., "logger": ..., "message": ...}``
  and the record's extra fields (the query log's ``qname``, ``rcode``...), as ExternalDNS's
  ``--log-format json`` writes them.

TIME is RFC 3339 in UTC with milliseconds; LEVEL is ``DEBUG``, ``INFO``, ``WARNING`` or
``ERROR`` in text and lowercase in JSON (CoreDNS and logrus spell it so). A process that
serves for another (a worker of ``feddns serve --workers N``) names itself in ``process``:
``LOGGER (worker 1): MESSAGE`` in text, ``"process": "worker 1"`` in JSON.

The one line of a bad flag or file (exit status 2, docs/reference.md section 6) keeps its
own shape in text, ``feddns COMMAND: error: WHAT``, as argparse's errors have it; in JSON
it is an object like any other line (:func:`error_line`).
"""

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

LEVELS = ("debug", "info", "warning", "error")
"""The choices of ``--log-level``."""

FORMATS = ("text", "json")
"""The choices of ``--log-format``."""

FLAGS_WITH_VALUE = ("--log-level", "--log-format")
"""The flags of this module, which take a value (the command line is scanned for them before parsing)."""

# The attributes every LogRecord has: anything else on a record came in ``extra=`` and is a field.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def add_arguments(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """Add ``--log-level`` and ``--log-format`` to ``parser``.

    ``defaults`` is True for the top-level parser, which sets ``info`` and ``text``; a
    subcommand's parser sets nothing unless the flag is given after the subcommand
    (``argparse.SUPPRESS``), so that ``feddns --log-level debug serve`` keeps ``debug``.
    """
    parser.add_argument("--log-level", choices=LEVELS, default="info" if defaults else argparse.SUPPRESS,
                        help="log verbosity (default info)")
    parser.add_argument("--log-format", choices=FORMATS, default="text" if defaults else argparse.SUPPRESS,
                        help="text: TIME LEVEL LOGGER: MESSAGE; json: one object per line with time, level, "
                             "logger, message and extra fields (default text)")


def format_in(argv: Sequence[str]) -> str:
    """The ``--log-format`` given in ``argv`` (the last one wins, as argparse has it), ``text`` when none
    or not a known one: for the lines written before the flags are parsed (argparse's errors)."""
    chosen = "text"
    for number, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == "--log-format" and number + 1 < len(argv):
            chosen = argv[number + 1]
        elif arg.startswith("--log-format="):
            chosen = arg.partition("=")[2]
    return chosen if chosen in FORMATS else "text"


def _utc(created: float) -> str:
    """RFC 3339 UTC time with milliseconds: ``2024-05-01T12:00:00.123Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: MESSAGE`` (``LOGGER (PROCESS): MESSAGE`` when ``process`` is given), then
    the traceback of ``exc_info`` if any, as the stdlib writes it."""

    def __init__(self, process: str | None = None) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        name = f"{record.name} ({self.process})" if self.process else record.name
        line = f"{_utc(record.created)} {record.levelname} {name}: {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (RFC 3339, UTC), ``level`` (lowercase), ``logger``,
    ``message``, ``process`` when given, the record's extra fields, and ``error`` (the traceback
    as one string) when it has ``exc_info``. A value JSON cannot hold is written as its ``str``."""

    def __init__(self, process: str | None = None) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {"time": _utc(record.created), "level": record.levelname.lower(),
                                "logger": record.name, "message": record.getMessage()}
        if self.process:
            line["process"] = self.process
        line.update((key, value) for key, value in vars(record).items() if key not in _STANDARD)
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`setup` installs (told apart from a handler someone else installed)."""


def setup(level: str, log_format: str, process: str | None = None) -> None:
    """Send every logger's records at ``level`` (one of :data:`LEVELS`) and above to stderr in
    ``log_format`` (one of :data:`FORMATS`); ``process`` names a process serving for another
    (``worker 1``). Replaces what an earlier call set up; like ``logging.basicConfig``, does
    nothing when something else already handles the root logger (a test runner calling a
    command in its own process)."""
    root = logging.getLogger()
    if not all(isinstance(handler, _StderrHandler) for handler in root.handlers):
        return
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(process) if log_format == "json" else TextFormatter(process))
    root.addHandler(handler)
    root.setLevel(level.upper())


def error_line(logger: str, message: str, log_format: str) -> str:
    """The one line of a bad flag or file (exit status 2), ``logger`` being the command (``feddns serve``):
    ``feddns serve: error: MESSAGE`` in text (argparse's shape), a JSON object of level ``error`` in JSON."""
    if log_format != "json":
        return f"{logger}: error: {message}"
    return json.dumps({"time": _utc(time.time()), "level": "error", "logger": logger, "message": message},
                      ensure_ascii=False)
