"""The controller's time constants, grouped by the part that uses them, under one root.

As kopf's ``_cogs/configs/configuration.py`` does: one frozen dataclass per part
(the core reflector's :class:`feddns.reflector.WatchTiming` for the list/watch threads,
whose defaults are the controller's; :class:`SyncSettings` for the etcd writer,
:class:`ExternalSettings` for the external DNS publisher, :class:`ProbeSettings` for
the controller's own loops), each field with a
docstring, all under :class:`Settings`. Every value is in seconds unless its
docstring says otherwise. Tests and benchmarks build a faster :class:`Settings`;
the command line uses the defaults, which are not configurable by users.
"""

from dataclasses import dataclass, field

from feddns.reflector import WatchTiming


@dataclass(frozen=True, slots=True)
class SyncSettings:
    """The etcd writer, :class:`controller.sync.Syncer`."""

    debounce: float = 0.02
    """Wait after the first touch so that a burst of events is written together."""
    retry_initial: float = 0.2
    """First wait after a failed etcd call; doubled after each further failure (with jitter)."""
    retry_max: float = 5.0
    """Longest wait between two attempts of the writer."""


@dataclass(frozen=True, slots=True)
class ExternalSettings:
    """Timeouts and retry backoff of :class:`controller.external.publisher.ExternalPublisher`.

    After a failed pass the publisher waits ``first`` seconds, doubling up to
    ``maximum`` (each wait +-10% jitter), until a pass succeeds.
    """

    timeout: float = 5.0
    """Per request (one update, one lookup, or each message of a zone transfer)."""
    first: float = 1.0
    """First wait after a failed pass."""
    maximum: float = 60.0
    """Longest wait between two passes."""
    hold_back: float = 0.5
    """How often a publisher that may not write looks again whether it may."""


@dataclass(frozen=True, slots=True)
class StubzoneSettings:
    """The stub-zone programmer, :class:`controller.stubzones.StubZones` (docs/controller.md,
    "Members' stub zones"). A member whose endpoint fails is tried again after ``first``
    seconds, doubling up to ``maximum`` (:class:`feddns.backoff.Backoff`); the others are not held up."""

    timeout: float = 5.0
    """Per request to a stub-zone endpoint (connect, TLS handshake and answer)."""
    first: float = 1.0
    """First wait after a failed request."""
    maximum: float = 60.0
    """Longest wait between two attempts for one member."""
    hold_back: float = 0.5
    """How often a replica that may not write (not the leader, or its lease unconfirmed) looks again."""
    service_poll: float = 2.0
    """How often ``nameservers.fromService``'s Service is read (every replica reads it)."""
    config_poll: float = 1.0
    """How often the config file is read to see whether it changed (a mounted ConfigMap)."""


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    """The controller's own loops (:mod:`controller.app`): the heartbeat behind
    ``/health``, and the check that marks a cluster stale."""

    heartbeat: float = 1.0
    """How often the event loop notes that it runs."""
    healthy_within: float = 10.0
    """``/health`` fails when the event loop has not run for this long: a loop
    blocked by a bug or a stuck call."""
    stale_check: float = 1.0
    """How often clusters' unreachable time is compared with their
    ``staleAfterSeconds`` (docs/reference.md section 7)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Every time constant of one controller replica, by the part that uses it."""

    watch: WatchTiming = field(default_factory=WatchTiming)
    """The list/watch threads, one per cluster and resource."""
    sync: SyncSettings = field(default_factory=SyncSettings)
    """The etcd writer."""
    external: ExternalSettings = field(default_factory=ExternalSettings)
    """The external DNS publisher (used when the config has an ``external`` section)."""
    probes: ProbeSettings = field(default_factory=ProbeSettings)
    """The heartbeat and the staleness check."""
    stubzone: StubzoneSettings = field(default_factory=StubzoneSettings)
    """The members' stub zones, Federated-DNS's Service and the config file's reload."""
