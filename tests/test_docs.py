"""The docs agree with the code and the manifests: every ``feddns ...`` command line in
README.md and docs/*.md parses with the real command line, passes the checks made before
any socket opens (or fails with the very error the page shows), the certificate names
match what the manifests let in, and one Kubernetes version is named everywhere."""

import argparse
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from feddns.cli import SUBCOMMANDS, build_parser
from feddns.errors import ConfigError
from feddns.hostport import parse_hostport
from tests.deploy.manifests import all_objects, containers, flag
from tests.support.fakekube import KUBERNETES_VERSION

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SHELL_BLOCKS = ("sh", "shell", "bash", "console")
"""Fenced blocks whose lines are commands (``console``: those after a ``$`` prompt)."""
COMMAND = re.compile(rf"feddns (?:{'|'.join(SUBCOMMANDS)}|--[a-z-]+)(?:\s|$)")
"""A line that runs feddns (not output such as ``feddns serve: error: ...``, nor prose)."""


@dataclass(frozen=True)
class Command:
    """One documented command: where it is, its arguments, and the error the page shows for it."""

    where: str
    argv: list[str]
    error: str | None


def documented_commands() -> Iterator[Command]:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for block in FENCE.finditer(text):
            if block.group(1) not in SHELL_BLOCKS:
                continue  # output, YAML, ...
            line_number = text[:block.start()].count("\n") + 2
            yield from _commands(f"{page.relative_to(REPO)}:{line_number}", block.group(2),
                                 prompted=block.group(1) == "console")


def _commands(where: str, block: str, prompted: bool) -> Iterator[Command]:
    lines = block.replace("\\\n", " ").splitlines()
    for i, line in enumerate(lines):
        if prompted and not line.startswith("$ "):
            continue  # a console block's output
        text = line.strip().removeprefix("$ ")
        if not COMMAND.match(text):
            continue  # not a command (prose, or output such as "feddns serve: error: ...")
        command_text = re.split(r"\s(?:\||>|&&|;|&)(?:\s|$)", text)[0]  # the shell's part is not feddns's
        words = shlex.split(command_text, comments=True)
        following = lines[i + 1].strip() if i + 1 < len(lines) else ""
        error = following if re.match(rf"feddns {re.escape(words[1])}: error: ", following) else None
        yield Command(where, words[1:], error)


def pre_socket_checks(args: argparse.Namespace) -> None:
    """What each command checks before it opens a socket, where that reads no file."""
    if args.command == "serve":
        from feddns.server.settings import settings_from

        settings_from(args)
    elif args.command == "stubzone":
        from stubzone.cli import check_flags

        check_flags(args)
    elif args.command in ("controller", "links") and args.metrics:
        parse_hostport(args.metrics)
    if args.command == "links":
        parse_hostport(args.listen)
        if args.resolver:
            parse_hostport(args.resolver)


COMMANDS = list(documented_commands())


def test_the_docs_show_commands_of_every_subcommand() -> None:
    assert {c.argv[0] for c in COMMANDS} >= {"serve", "controller", "stubzone", "certs", "links"}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: f"{c.where} {' '.join(c.argv)[:60]}")
def test_documented_command_parses_and_passes_its_checks(command: Command) -> None:
    try:
        args = build_parser(command.argv).parse_args(command.argv)
        pre_socket_checks(args)
    except ConfigError as exc:
        assert command.error == f"feddns {command.argv[0]}: error: {exc}", f"{command.where}: {exc}"
        return
    except SystemExit as exc:
        raise AssertionError(f"{command.where}: feddns {' '.join(command.argv)} does not parse") from exc
    if command.error is not None:  # an error only a socket shows (an address in use)
        assert ": cannot listen: " in command.error, f"{command.where}: the page shows {command.error!r}"


def allowed_names() -> set[str]:
    """Every client identity the manifests' stub-zone endpoints let in (``--allow``)."""
    objects = [obj for _, obj in all_objects()]
    return {name for c in containers(objects) if c.is_feddns for name in flag(c.spec.get("args", []), "allow")}


def test_the_client_certificate_in_the_docs_is_one_the_manifests_let_in() -> None:
    allowed = allowed_names()
    assert allowed
    issued = {c.argv[c.argv.index("--cn") + 1] for c in COMMANDS if c.argv[:2] == ["certs", "issue-client"]}
    let_in = {c.argv[i + 1] for c in COMMANDS if c.argv[0] == "stubzone" for i, w in enumerate(c.argv)
              if w == "--allow"}
    assert issued and issued <= allowed, (issued, allowed)
    assert let_in and let_in <= allowed, (let_in, allowed)
    for page in PAGES:
        for cn in re.findall(r'CN=([\w.-]+)"', page.read_text(encoding="utf-8")):
            assert cn in allowed | {"someone-else"}, f"{page.name}: CN={cn}"


def test_one_kubernetes_version_is_named_everywhere() -> None:
    minor = ".".join(KUBERNETES_VERSION.split(".")[:2])
    named = {(page.name, version) for page in PAGES
             for version in re.findall(r"Kubernetes (1\.\d+)", page.read_text(encoding="utf-8"))}
    assert named, "the docs name the Kubernetes version the manifests are validated against"
    assert {version for _, version in named} == {minor}, named


def test_etcdctl_is_always_told_where_etcd_is() -> None:
    for page in PAGES:
        for line in page.read_text(encoding="utf-8").splitlines():
            for call in re.findall(r"etcdctl( [^`|;#]*)", line):
                assert "--endpoints" in call, f"{page.name}: etcdctl{call}"
