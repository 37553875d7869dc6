"""The seam between the publisher and a DNS provider, and the errors a provider raises.

:class:`Provider` reads the names in the zone, looks one up, and applies one
conditional :class:`NameChange`; :mod:`controller.external.rfc2136` implements
it with RFC 2136 updates signed with TSIG (RFC 8945),
:mod:`controller.external.dnsendpoint` with ExternalDNS's ``DNSEndpoint``
objects. Ownership is the TXT :func:`marker` (docs/external-dns.md).
"""

from dataclasses import dataclass
from typing import Protocol

import dns.name

from feddns.errors import FeddnsError
from feddns.records import IPAddress

UNREADY_MARK = "feddns/stale=true"
"""The TXT string a name also carries while its service is unready (no shard ready).

The published word stays "stale", as it always was, so that what operators and
their tooling already match keeps matching; in the code "stale" means only a
member cluster unreachable past its ``staleAfterSeconds``."""


@dataclass(frozen=True)
class NameState:
    """What a provider holds at one owner name, as far as the publisher cares.

    ``addresses``: the A and AAAA rdata; ``ttl``: their TTL in seconds (the lower
    of the two RRsets; ``None`` without addresses); ``txt``: every TXT rdata at
    the name as the tuple of its character-strings (RFC 1035 3.3.14), so that it
    can be sent back unchanged in a prerequisite.
    """

    addresses: frozenset[IPAddress] = frozenset()
    ttl: int | None = None
    txt: frozenset[tuple[str, ...]] = frozenset()


@dataclass(frozen=True)
class NameChange:
    """One conditional change of one owner name, sent as one message.

    ``prior`` is what the publisher believes is at ``name``: ``None`` means the
    name must not exist yet (RFC 2136 2.4.5), otherwise its TXT RRset must be
    exactly ``prior.txt`` (RFC 2136 2.4.2). The change replaces the A and AAAA
    RRsets with ``addresses`` (TTL ``ttl`` seconds), adds the ownership TXT
    ``marker``, and adds (``unready``) or removes :data:`UNREADY_MARK`; with no
    ``addresses`` it deletes both RRsets, the marker and the unready mark.
    """

    name: dns.name.Name
    prior: NameState | None
    addresses: frozenset[IPAddress]
    ttl: int
    marker: str
    unready: bool = False
    """No shard of the service is ready: ``addresses`` are kept, marked :data:`UNREADY_MARK`."""


class ProviderError(FeddnsError):
    """A request to the DNS provider failed.

    ``reason`` is the metric label (``timeout``, ``unreachable``, ``refused``,
    ``badsig``...). ``whole_server`` is true when every other request would fail
    the same way (server unreachable, key rejected), so a pass stops early.
    """

    def __init__(self, message: str, reason: str, whole_server: bool) -> None:
        super().__init__(message)
        self.reason = reason
        self.whole_server = whole_server


class PrerequisiteFailed(ProviderError):
    """The provider refused a change because the name is not as ``NameChange.prior`` said."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "prerequisite", whole_server=False)


class TransferRefused(ProviderError):
    """The provider does not let this key read the zone (AXFR refused)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "axfr-refused", whole_server=False)


class Provider(Protocol):
    """A DNS provider that can hold the published names (the seam; RFC 2136 now)."""

    async def read_names(self, suffix: dns.name.Name) -> dict[dns.name.Name, NameState]:
        """Every owner name strictly below ``suffix`` in the zone with its state.

        Raises :class:`TransferRefused` when reading the zone is not allowed,
        :class:`ProviderError` on other failures.
        """
        ...

    async def lookup(self, name: dns.name.Name) -> NameState | None:
        """The state of one name, ``None`` when it does not exist; raises :class:`ProviderError`."""
        ...

    async def apply(self, change: NameChange) -> None:
        """Apply ``change`` atomically; raises :class:`PrerequisiteFailed` or :class:`ProviderError`."""
        ...


def marker(federation: str, namespace: str, service: str) -> str:
    """The ownership TXT string of ``<service>.<namespace>.<federation>.svc.<zone>``."""
    return f"heritage=feddns,feddns/federation={federation},feddns/service={namespace}/{service}"
