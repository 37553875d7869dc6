"""The backends of the stub-zone API: one module per cluster DNS, behind one Protocol.

Like CoreDNS plugins, each backend is one module that knows one store and
nothing of HTTP; the HTTP layer (:mod:`stubzone.app`) knows only
:class:`Backend`. Each module provides ``make(args, domains) -> Backend``
(checking its flags, raising :class:`feddns.errors.ConfigError`, opening
nothing). :func:`load` imports only the chosen module, so ``--backend skydns``
never imports ``kubernetes`` (about a second of start-up) and ``--backend
coredns`` never imports ``aetcd``.

==============  ==================================================  ===========
backend         where the stub zone is kept                         tags 0xFEDD
==============  ==================================================  ===========
coredns         ConfigMap key ``F.server`` (a server block)         yes
coredns-custom  key ``feddns.F.server`` of ConfigMap coredns-custom  yes
kube-dns        ``stubDomains`` of ConfigMap ``kube-dns``           no
openshift       entry ``feddns-F`` of ``DNS/default`` spec.servers  no
skydns          SkyDNS's etcd, v2 API (v3 with a flag)              no
unbound         ``<dir>/feddns/F.conf`` + unbound-control           yes
==============  ==================================================  ===========

The rules every backend keeps (docs/reference.md section 5): reads go to the
store every time (nothing is cached), a write is all or nothing, entries the
endpoint did not write are never touched, a failed write says whether it
may have been applied, and a request is done with the store within
``--backend-timeout`` in total (:class:`Deadline`), however many requests
wait before it.
"""

import argparse
import asyncio
import importlib
import ipaddress
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from feddns.errors import FeddnsError
from stubzone.model import DEFAULT_PORT, Nameserver, StubDomains, StubZone


class BackendUnavailable(FeddnsError):
    """The store could not be reached or kept changing (HTTP 503).

    ``may_have_applied`` is true when a write was sent but its outcome is
    unknown (the connection dropped after the request); POST is idempotent, so
    the client retries either way.
    """

    def __init__(self, message: str, *, may_have_applied: bool = False) -> None:
        super().__init__(message)
        self.may_have_applied = may_have_applied


class Deadline:
    """When one request must be done with the store: ``seconds`` (``--backend-timeout``) after it began.

    Each call to the store gets the time left as its timeout, and so does the
    wait for this process's earlier writes (:meth:`holding`): while the store
    hangs, the eighth of eight queued POSTs gets its 503 within the timeout,
    not after eight of them. Thread-safe: backends use it in worker threads.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def remaining(self) -> float:
        """Seconds left (> 0); raises :class:`BackendUnavailable` (nothing sent) when none are."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise BackendUnavailable(f"the store did not answer within {self.seconds:g} s (--backend-timeout)")
        return left

    @asynccontextmanager
    async def holding(self, lock: asyncio.Lock, where: str) -> AsyncIterator[None]:
        """Hold ``lock`` (this process's turn to write ``where``), waiting for it at most until the deadline.

        Raises :class:`BackendUnavailable` (nothing sent) when earlier writes still hold it then.
        """
        try:
            async with asyncio.timeout(self.remaining()):
                await lock.acquire()
        except TimeoutError as exc:
            raise BackendUnavailable(f"earlier writes to {where} were still waiting for it after "
                                     f"{self.seconds:g} s (--backend-timeout)") from exc
        try:
            yield
        finally:
            lock.release()


class NotWrittenHere(FeddnsError):
    """The backend holds the federation's stub domain, but not in the place this endpoint writes (HTTP 409).

    It is left alone: the endpoint never touches what it did not write.
    """


class UnsupportedNameservers(FeddnsError):
    """The backend cannot forward to those nameservers: too many, or a form its cluster DNS breaks on (HTTP 400)."""


class Backend(Protocol):
    """A cluster DNS whose stub domains the API programs.

    Every method raises :class:`BackendUnavailable` when the store cannot be
    reached; ``put`` and ``delete`` may raise :class:`NotWrittenHere`.
    """

    name: str
    """The ``--backend`` value."""
    max_nameservers: int
    """The most nameservers one stub domain may have in this cluster DNS."""
    ipv6_ports: bool
    """Whether an IPv6 nameserver may have a port other than 53 (kube-dns: no, see its module)."""

    async def list(self) -> list[StubZone]:
        """Every programmed federation, sorted by name."""

    async def get(self, federation: str) -> StubZone | None:
        """F's stub zone as the store holds it, ``None`` when F is not programmed."""

    async def put(self, federation: str, nameservers: Sequence[Nameserver]) -> tuple[StubZone, bool]:
        """Program F; returns the stored zone and whether the store changed (idempotent)."""

    async def delete(self, federation: str) -> StubZone | None:
        """Remove F; returns what was programmed, ``None`` when nothing was."""

    async def ping(self) -> str:
        """A short description of the store's state (a revision, a version); proves it answers."""

    async def close(self) -> None:
        """Release connections; called once at shutdown."""


@dataclass(frozen=True)
class BackendKind:
    """One ``--backend`` choice: the module that implements it and whether it tags queries."""

    module: str
    tags: bool
    summary: str


BACKENDS: dict[str, BackendKind] = {
    "coredns": BackendKind("stubzone.backends.coredns", True,
                           "a CoreDNS server block per federation in a ConfigMap the Corefile imports"),
    "coredns-custom": BackendKind("stubzone.backends.corednscustom", True,
                                  "a CoreDNS server block per federation in the platform's coredns-custom ConfigMap "
                                  "(AKS, k3s)"),
    "kube-dns": BackendKind("stubzone.backends.kubedns", False, "stubDomains in the kube-dns ConfigMap"),
    "openshift": BackendKind("stubzone.backends.openshift", False,
                             "a forwarding entry per federation in the OpenShift DNS operator's DNS/default"),
    "skydns": BackendKind("stubzone.backends.skydns", False, "SkyDNS stub keys in its etcd (v2 API; v3 with a flag)"),
    "unbound": BackendKind("stubzone.backends.unbound", True, "a forward-zone file and unbound-control reload"),
}


def load(args: argparse.Namespace, domains: StubDomains) -> Backend:
    """The backend ``args.backend`` made from the flags; imports that backend's module only."""
    module = importlib.import_module(BACKENDS[args.backend].module)
    backend: Backend = module.make(args, domains)
    return backend


def check_nameservers(backend: Backend, nameservers: Sequence[Nameserver]) -> None:
    """Raise :class:`UnsupportedNameservers` when ``backend`` cannot take that many, or takes no port on
    an IPv6 nameserver and one has a port other than 53 (docs/reference.md section 5)."""
    if len(nameservers) > backend.max_nameservers:
        raise UnsupportedNameservers(f"'nameservers' has {len(nameservers)} entries; the {backend.name} backend "
                                     f"forwards to at most {backend.max_nameservers}")
    if not backend.ipv6_ports:
        for ns in nameservers:
            if isinstance(ns.address, ipaddress.IPv6Address) and ns.port != DEFAULT_PORT:
                raise UnsupportedNameservers(
                    f"{str(ns)!r}: the {backend.name} backend takes no port on an IPv6 nameserver "
                    f"(its cluster DNS cannot forward to one); give that address on port 53, or an IPv4 address")
