"""The ``feddns`` console script: one command, its subcommands (docs/reference.md section 6).

Each subcommand lives in its own module, which provides::

    configure(parser: argparse.ArgumentParser) -> None   # add the flags
    run(args: argparse.Namespace) -> int                  # validate, then serve

Only the chosen subcommand's module is imported, and it imports its heavy libraries
(``kubernetes``, ``aiohttp``) in ``run``, so that ``--help`` answers at once and ``feddns
serve`` never loads them. ``--log-level`` and ``--log-format`` (:mod:`feddns.logs`) are taken
before or after the subcommand. Bad flags, and a :class:`ConfigError` raised by ``run``
before it opens a socket, print one line and exit 2.
"""

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from feddns import __version__, logs
from feddns.errors import ConfigError

DESCRIPTION = "Federated DNS for Kubernetes federations: the DNS server, its controller, and the member-cluster parts."

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("feddns.server.command", "run Federated-DNS, the authoritative server for the federation zone"),
    "controller": ("controller.cli", "run the FederatedDNSController (member clusters -> etcd)"),
    "stubzone": ("stubzone.cli", "run the stub-zone HTTPS endpoint of a cluster's DNS pod"),
    "certs": ("stubzone.certs", "create a CA and issue server and client certificates"),
    "links": ("links.cli", "run the admission webhook injecting explicit links to federated services"),
    "explain": ("feddns.explain", "the answer feddns serve gives a cluster for a name, and why each record is there"),
    "status": ("feddns.status", "a federation at a glance: clusters, staleness, degraded services (exits 1 if any)"),
}

LOG_LEVELS = logs.LEVELS

log = logging.getLogger("feddns")


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit status 2, in the
    ``--log-format`` of the command line (``log_format``)."""

    def __init__(self, *args: Any, log_format: str = "text", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log_format = log_format
        self.chosen: Parser | None = None
        """The chosen subcommand's parser, which says what is wrong with its arguments."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, logs.error_line(self.prog, message, self.log_format) + "\n")


def chosen_command(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv``: its first word that is neither a flag nor the value of
    ``--log-level`` or ``--log-format`` given before it."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in logs.FLAGS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def build_parser(argv: Sequence[str]) -> Parser:
    """The parser for ``argv``: every subcommand listed, the chosen one configured."""
    log_format = logs.format_in(argv)
    parser = Parser(prog="feddns", description=DESCRIPTION, log_format=log_format)
    parser.add_argument("--version", action="version", version=f"feddns {__version__}")
    logs.add_arguments(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    chosen = chosen_command(argv)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text, log_format=log_format)
        if name == chosen:
            parser.chosen = sub_parser
            module = importlib.import_module(module_name)
            module.configure(sub_parser)
            _add_log_arguments(sub_parser)
            sub_parser.set_defaults(_run=module.run)
    return parser


def _add_log_arguments(parser: argparse.ArgumentParser) -> None:
    """``--log-level`` and ``--log-format`` on ``parser`` and on the parsers of its own subcommands
    (``feddns certs init``), so that they are taken wherever on the command line they come."""
    logs.add_arguments(parser, defaults=False)
    for action in parser._actions:  # argparse lists a parser's subcommands only there
        if isinstance(action, argparse._SubParsersAction):
            for nested in action.choices.values():
                _add_log_arguments(nested)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``feddns`` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the subcommand's parser: "feddns links: error: ...", as its other errors are
        (parser.chosen or parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    logs.setup(args.log_level, args.log_format)
    try:
        return int(args._run(args) or 0)
    except ConfigError as exc:
        print(logs.error_line(f"feddns {args.command}", str(exc), args.log_format), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
