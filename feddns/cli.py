"""The ``feddns`` console script: one command, its subcommands (docs/reference.md section 6).

Each subcommand lives in its own module, which provides::

    configure(parser: argparse.ArgumentParser) -> None   # add the flags
    run(args: argparse.Namespace) -> int                  # validate, then serve

Only the chosen subcommand's module is imported, so ``feddns serve`` never
loads ``kubernetes`` or ``aiohttp``. Bad flags, and a :class:`ConfigError`
raised by ``run`` before it opens a socket, print one line and exit 2.
"""

import argparse
import importlib
import logging
import sys
from typing import NoReturn

from feddns import __version__
from feddns.errors import ConfigError

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("feddns.serve", "run Federated-DNS, the authoritative server for the federation zone"),
    "controller": ("controller.cli", "run the FederatedDNSController (member clusters -> etcd)"),
    "stubzone": ("stubzone.cli", "run the stub-zone HTTPS endpoint of a cluster's DNS pod"),
    "certs": ("stubzone.certs", "create a CA and issue server and client certificates"),
    "links": ("links.cli", "run the admission webhook injecting explicit links to federated services"),
}

LOG_LEVELS = ("debug", "info", "warning", "error")


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(argv: list[str]) -> Parser:
    """The parser for ``argv``: every subcommand listed, the chosen one configured."""
    parser = Parser(prog="feddns", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"feddns {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            module = importlib.import_module(module_name)
            sub_parser.add_argument(
                "--log-level", choices=LOG_LEVELS, default="info", help="log verbosity (default info)"
            )
            module.configure(sub_parser)
            sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``feddns`` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args._run(args) or 0)
    except ConfigError as exc:
        print(f"feddns {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
