"""``--backend unbound``: a forward zone per federation in a running unbound (docs/stubzone.md).

For federation F the endpoint writes ``<dir>/feddns/F.conf``, ``<dir>`` being
the directory of ``--unbound-config``, whose unbound.conf ends with
``include-toplevel: "<dir>/feddns/*.conf"`` (or ``include:``)::

    server:
        edns-client-string-opcode: 65245
        edns-client-string: 203.0.113.53/32 <cluster>
    forward-zone:
        name: "F.svc.federation."
        forward-addr: 203.0.113.53@53

``edns-client-string`` is a ``server:`` option; an included file may open
its own ``server:`` clause, so the tag lives next to the forward zone. It
tags every query unbound sends to that address (Federated-DNS's) with EDNS0
option 65245 (0xFEDD) = the cluster's name.

Then ``unbound-control reload_keep_cache`` makes the running unbound read its
configuration again, in the same process: the forward zone and the tag both
apply, the cache of every other name is kept, and ``flush_zone`` drops what
was cached under the stub domain. ``forward_add``/``forward_remove`` would
change the forward zone alone: the tag cannot be set at run time
(``set_option`` does not take ``edns-client-string``), and the next reload
would drop the runtime zone anyway. unbound exits when a reload finds a bad
configuration, so ``unbound-checkconf`` checks the whole configuration
before each reload, and a refused change is undone.

Writers take turns with an exclusive ``flock`` on ``<dir>/feddns/.lock``, so
two endpoint processes sharing the directory never interleave; files are
written to a temporary name and renamed. A request's waits and runs all fit
in one ``--backend-timeout`` (:class:`Deadline`). GET asks unbound what it forwards
(``list_forwards``), with the ports from the files (unbound does not print
them). A forward zone for F that does not come from ``F.conf`` is not the
endpoint's: POST and DELETE answer 409 and leave it alone.
"""

import argparse
import asyncio
import fcntl
import ipaddress
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from string import Template

from feddns.errors import ConfigError
from stubzone.backends import Backend, BackendUnavailable, Deadline, NotWrittenHere
from stubzone.model import Nameserver, StubDomains, StubZone

log = logging.getLogger(__name__)

TAG_OPCODE = 0xFEDD
MAX_NAMESERVERS = 16
RELOAD = "reload_keep_cache"
LOCK_NAME = ".lock"
LOCK_POLL_SECONDS = 0.02

TEMPLATE = Template("""\
# Written by feddns stubzone for cluster $cluster; each POST /federations/$federation rewrites it.
server:
    edns-client-string-opcode: $opcode
$tags
forward-zone:
    name: "$stub_domain"
$addrs
""")

_INCLUDE = re.compile(r'^\s*include(?:-toplevel)?:\s*"?([^"#\s]+)"?', re.MULTILINE)
_FORWARD_ADDR = re.compile(r"^\s*forward-addr:\s*([0-9A-Fa-f.:]+)@(\d+)\s*$", re.MULTILINE)


def render(federation: str, stub_domain: str, cluster: str, nameservers: Sequence[Nameserver]) -> str:
    """F.conf: the tag for each nameserver's address and the forward zone, in the nameservers' order."""
    prefixes = {ns.address: ns.address.max_prefixlen for ns in nameservers}
    return TEMPLATE.substitute(
        federation=federation, cluster=cluster, opcode=TAG_OPCODE, stub_domain=stub_domain,
        tags="\n".join(f"    edns-client-string: {address}/{length} {cluster}" for address, length in prefixes.items()),
        addrs="\n".join(f"    forward-addr: {ns.address}@{ns.port}" for ns in nameservers),
    )


def make(args: argparse.Namespace, domains: StubDomains) -> Backend:
    """The backend of ``--backend unbound``: checks the config file and finds the programs now."""
    if args.unbound_config is None:
        raise ConfigError("--backend unbound needs --unbound-config FILE (the running unbound's unbound.conf)")
    config = Path(args.unbound_config).absolute()
    try:
        text = config.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--unbound-config {config}: {getattr(exc, 'strerror', None) or exc}") from exc
    pattern = str(config.parent / "feddns" / "*.conf")
    if pattern not in {os.path.normpath(found) for found in _INCLUDE.findall(text)}:
        raise ConfigError(f'--unbound-config {config} does not include the stub zones: add the line '
                          f'include-toplevel: "{pattern}" at its end')
    try:  # unbound refuses to start when the directory of an include glob is missing
        (config.parent / "feddns").mkdir(exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--unbound-config {config}: cannot create {config.parent / 'feddns'}: "
                          f"{exc.strerror or exc}") from exc
    return UnboundBackend(config, _program("--unbound-control", args.unbound_control or "unbound-control"),
                          _program("--unbound-checkconf", args.unbound_checkconf or "unbound-checkconf"),
                          domains, str(args.cluster), args.backend_timeout)


def _program(flag: str, name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise ConfigError(f"{flag} {name}: no such program")
    return found


class UnboundBackend:
    """The federations' ``F.conf`` files next to ``config``, and the running unbound they configure.

    ``control`` and ``checkconf`` are the paths of ``unbound-control`` and
    ``unbound-checkconf``; ``timeout`` (seconds) bounds each request: its turn and every run of them.
    """

    name = "unbound"
    max_nameservers = MAX_NAMESERVERS
    ipv6_ports = True

    def __init__(self, config: Path, control: str, checkconf: str, domains: StubDomains, cluster: str,
                 timeout: float) -> None:
        self.config = config
        self.directory = config.parent / "feddns"
        self.control, self.checkconf = control, checkconf
        self.domains = domains
        self.cluster = cluster
        self.timeout = timeout
        self.where = f"unbound ({config})"
        # One writer thread per process waits for the file lock; the others wait here.
        self._writing = asyncio.Lock()

    async def list(self) -> list[StubZone]:
        forwards = await asyncio.to_thread(self._forwards, Deadline(self.timeout))
        return [self._zone(federation, addresses) for federation, addresses in sorted(forwards.items())]

    async def get(self, federation: str) -> StubZone | None:
        addresses = (await asyncio.to_thread(self._forwards, Deadline(self.timeout))).get(federation)
        return self._zone(federation, addresses) if addresses is not None else None

    async def put(self, federation: str, nameservers: Sequence[Nameserver]) -> tuple[StubZone, bool]:
        text = render(federation, self.domains.stub_domain(federation), self.cluster, nameservers)
        deadline = Deadline(self.timeout)
        async with deadline.holding(self._writing, self.where):
            changed = await asyncio.to_thread(self._write, federation, text, deadline)
        return self.domains.zone(federation, tuple(nameservers)), changed

    async def delete(self, federation: str) -> StubZone | None:
        deadline = Deadline(self.timeout)
        async with deadline.holding(self._writing, self.where):
            return await asyncio.to_thread(self._remove, federation, deadline)

    async def ping(self) -> str:
        status = await asyncio.to_thread(self._control, Deadline(self.timeout), "status")
        version = next((line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("version:")),
                       "?")
        return f"unbound {version} running"

    async def close(self) -> None:
        """Nothing to release: every call runs its own unbound-control."""

    # -- in worker threads ---------------------------------------------------------------------

    def _write(self, federation: str, text: str, deadline: Deadline) -> bool:
        """Make F.conf ``text`` and unbound use it; returns whether anything changed."""
        path = self._path(federation)
        with _FileLock(self.directory / LOCK_NAME, deadline):
            forwards = self._forwards(deadline)  # unreachable: 503 before anything is written
            old = _read(path)
            if old is None and federation in forwards:
                raise self._not_ours(federation)
            if old == text and federation in forwards:
                return False
            _replace(path, text)
            self._apply(federation, path, old, deadline)
            self._verify(federation, _FORWARD_ADDR.findall(text), deadline)
        return True

    def _remove(self, federation: str, deadline: Deadline) -> StubZone | None:
        path = self._path(federation)
        with _FileLock(self.directory / LOCK_NAME, deadline):
            forwards = self._forwards(deadline)  # unreachable: 503 before anything is written
            old = _read(path)
            if old is None:
                if federation in forwards:
                    raise self._not_ours(federation)
                return None
            written = tuple(ipaddress.ip_address(address) for address, _ in _FORWARD_ADDR.findall(old))
            zone = self._zone(federation, forwards.get(federation, written), old)
            try:
                path.unlink()
            except OSError as exc:
                raise BackendUnavailable(f"{path}: {exc.strerror or exc}") from exc
            self._apply(federation, path, old, deadline)
            self._verify(federation, [], deadline)
        return zone

    def _apply(self, federation: str, path: Path, old: str | None, deadline: Deadline) -> None:
        """Check the configuration and reload; a refused or unreachable change puts ``old`` back.

        When ``old`` cannot be put back, the new file stays where unbound's next
        reload or restart reads it: the change may yet be applied, and the 503 says so.
        """
        try:
            self._run([self.checkconf, str(self.config)], "unbound-checkconf", deadline)
            self._control(deadline, RELOAD)
        except BackendUnavailable as exc:
            if not exc.may_have_applied and not _restore(path, old):
                exc.may_have_applied = True
            raise
        try:
            self._control(deadline, "flush_zone", self.domains.stub_domain(federation))
        except BackendUnavailable as exc:  # the change is in; at worst old answers live out their TTL
            log.warning("%s: flush_zone after the reload failed: %s", self.where, exc)

    def _verify(self, federation: str, addrs: Sequence[tuple[str, str]], deadline: Deadline) -> None:
        """Check that unbound now forwards F to ``addrs`` (none: not at all); 503 "may have been applied" if not."""
        try:
            held = self._forwards(deadline).get(federation)
        except BackendUnavailable as exc:  # the reload was sent: unbound may run the new configuration
            exc.may_have_applied = True
            raise
        wanted = tuple(ipaddress.ip_address(address) for address, _ in addrs) or None
        if held != wanted:
            shown_held, shown_wanted = [str(a) for a in held or ()], [str(a) for a in wanted or ()]
            raise BackendUnavailable(
                f"{self.where} forwards {self.domains.stub_domain(federation)} to {shown_held} after the reload, "
                f"not {shown_wanted}: another forward-zone for it may come first", may_have_applied=True)

    def _forwards(self, deadline: Deadline) -> dict[str, tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]]:
        """``{federation: addresses}`` of the forward zones unbound holds (``list_forwards``)."""
        forwards = {}
        for line in self._control(deadline, "list_forwards").splitlines():
            words = line.split()
            federation = self.domains.federation(words[0]) if words else None
            if federation is not None and "forward" in words:
                forwards[federation] = tuple(_addresses(words[words.index("forward") + 1:]))
        return forwards

    def _zone(self, federation: str, addresses: Sequence[ipaddress.IPv4Address | ipaddress.IPv6Address],
              text: str | None = None) -> StubZone:
        """F's zone: the addresses unbound forwards to, with the ports F.conf gives them (53 otherwise)."""
        text = _read(self._path(federation)) if text is None else text
        ports = {ipaddress.ip_address(a): int(p) for a, p in _FORWARD_ADDR.findall(text or "")}
        return self.domains.zone(federation, tuple(Nameserver(a, ports.get(a, 53)) for a in addresses))

    def _control(self, deadline: Deadline, *command: str) -> str:
        """Output of ``unbound-control -c CONFIG COMMAND``; :class:`BackendUnavailable` when it fails."""
        return self._run([self.control, "-c", str(self.config), *command], f"unbound-control {command[0]}", deadline)

    def _run(self, argv: Sequence[str], what: str, deadline: Deadline) -> str:
        timeout = deadline.remaining()  # nothing is run past the deadline
        try:
            result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            # A reload sent and not answered may be under way: the client must not assume either way.
            raise BackendUnavailable(f"{what} did not finish within the {deadline.seconds:g} s of the request",
                                     may_have_applied=what.endswith(RELOAD)) from exc
        except OSError as exc:
            raise BackendUnavailable(f"{what}: {exc.strerror or exc}") from exc
        output = (result.stdout + result.stderr).strip()
        if result.returncode != 0 or output.startswith("error"):
            last = output.splitlines()[-1] if output else f"exit status {result.returncode}"
            raise BackendUnavailable(f"{what} failed: {last}")
        return result.stdout

    def _path(self, federation: str) -> Path:
        return self.directory / f"{federation}.conf"

    def _not_ours(self, federation: str) -> NotWrittenHere:
        return NotWrittenHere(f"{self.where} forwards {self.domains.stub_domain(federation)} from a configuration "
                              f"this endpoint did not write (not {self._path(federation)}); it is left alone")


class _FileLock:
    """An exclusive ``flock`` on ``path``, waited for until ``deadline`` (then 503, nothing changed)."""

    def __init__(self, path: Path, deadline: Deadline) -> None:
        self.path, self.deadline = path, deadline
        self.fd = -1

    def __enter__(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BackendUnavailable(f"{self.path}: {exc.strerror or exc}") from exc
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > self.deadline.at:
                    os.close(self.fd)
                    raise BackendUnavailable(f"{self.path} stayed locked by another writer for the "
                                             f"{self.deadline.seconds:g} s of the request") from None
                time.sleep(LOCK_POLL_SECONDS)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # releases the lock


def _addresses(words: list[str]) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    found = []
    for word in words:
        try:
            found.append(ipaddress.ip_address(word))
        except ValueError:
            continue  # a flag such as +i
    return found


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BackendUnavailable(f"{path}: {exc.strerror or exc}") from exc


def _replace(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a temporary file (not matching ``*.conf``), fsync, rename."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        raise BackendUnavailable(f"{path}: {exc.strerror or exc}") from exc


def _restore(path: Path, old: str | None) -> bool:
    """Put back what ``path`` held before (``None``: it did not exist); ``False`` (and logged) when that failed."""
    try:
        if old is None:
            path.unlink(missing_ok=True)
        else:
            _replace(path, old)
    except (OSError, BackendUnavailable) as exc:
        log.error("%s could not be put back: %s", path, exc)
        return False
    return True

