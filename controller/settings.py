"""The controller's time constants, grouped by the part that uses them, under one root.

As kopf's ``_cogs/configs/configuration.py`` does: one frozen dataclass per part
(the core reflector's :class:`feddns.reflector.WatchTiming` for the list/watch threads,
whose defaults are the controller's; :class:`SyncSettings` for the etcd writer,
:class:`ExternalSettings` for the external DNS publisher and :class:`StubzoneSettings`
for the stub-zone programmer, both :class:`FencedWriterSettings`; :class:`ProbeSettings`
for the controller's own loops), each field with a
docstring, all under :class:`Settings`. Every value is in seconds unless its
docstring says otherwise. Tests and benchmarks build a faster :class:`Settings`;
the command line uses the defaults, which are not configurable by users.
"""

from dataclasses import dataclass, field

from feddns.reflector import WatchTiming


@dataclass(frozen=True, slots=True)
class SyncSettings:
    """The etcd writer, :class:`controller.sync.Syncer`."""

    debounce: float = 0.005
    """Least time between the starts of two writes, in seconds (at most 200 etcd transactions a
    second): a change after an idle spell is written at once (the events already queued with it go
    in the same write), and one that comes sooner waits out the rest of this window, so that a burst
    is written together. As a 20 ms wait after each first touch it was the controller's whole stage
    (docs/performance.md, "A rolling update of 500 Services")."""
    retry_initial: float = 0.2
    """First wait after a failed etcd call; doubled after each further failure (:class:`feddns.backoff.Backoff`)."""
    retry_max: float = 5.0
    """Longest wait between two attempts of the writer."""


@dataclass(frozen=True, slots=True)
class FencedWriterSettings:
    """A writer to a server outside etcd that only the leader may write to, each request
    fenced by the lease (``controller.leader.Elector.holds_lease``): the external DNS
    publisher and the stub-zone programmer. After a failure it waits ``first`` seconds,
    doubling up to ``maximum`` (:class:`feddns.backoff.Backoff`), until a request succeeds."""

    timeout: float = 5.0
    """Per request to the server (connect, TLS handshake and answer; each message of a zone transfer)."""
    first: float = 1.0
    """First wait after a failure."""
    maximum: float = 60.0
    """Longest wait between two attempts."""
    hold_back: float = 0.5
    """How often a writer that may not write (not the leader, or its lease unconfirmed) looks again."""


@dataclass(frozen=True, slots=True)
class ExternalSettings(FencedWriterSettings):
    """Timeouts and retry backoff of :class:`controller.external.publisher.ExternalPublisher`:
    a failed pass over the names is the failure it backs off from."""


@dataclass(frozen=True, slots=True)
class StubzoneSettings(FencedWriterSettings):
    """The stub-zone programmer, :class:`controller.stubzones.StubZones` (docs/controller.md,
    "Members' stub zones"): each member backs off on its own, so that the others are not
    held up; and the polls of the Service and config file it follows."""

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
