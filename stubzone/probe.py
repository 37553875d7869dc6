"""The path check: does the cluster DNS still forward each federation to Federated-DNS, tagged?

Platforms' reconcilers silently undo what the endpoint programs (a Corefile
rewritten without its import line, a ConfigMap put back), and nothing in the
endpoint would notice: its store still holds the stub zone. So every
``--probe-interval`` seconds, for each federation the backend holds
(:meth:`stubzone.backends.Backend.list`), :class:`PathProbe` asks
``_whoami.F.svc.<federation zone>`` TXT through the cluster DNS where pods ask it
(:mod:`stubzone.probetarget`: ``--probe-server``, a fixed address such as NodeLocal DNSCache's, or
``--probe-service``, the cluster DNS Service found through the API each round) and reads what
``feddns serve`` says of the asker (docs/reference.md section 1): the path is ok when serve names
this cluster (``--cluster``) found by option 0xFEDD, or, for a backend that does not tag
(kube-dns, openshift, skydns), found by ECS or source address.

What it keeps (docs/stubzone.md, "The path check"): ``feddns_stubzone_path_ok{federation}``
and ``feddns_stubzone_path_cluster_info{federation,cluster,by}``, and per federation a
line of the ``/health`` body. When there is nowhere to ask (no Service matches), no federation
is probed: ``feddns_stubzone_path_target_found`` is 0, the ``/health`` body says why, and the
log says so once, until an address is found again. The probe never changes the status of ``/health`` or
``/ready``: the endpoint is what repairs the path, so it must stay in its Service.
Each change of state is logged once. A round waits for its own queries (each bounded by
:data:`MAX_TIMEOUT` and the interval) before the next one starts, so a server that never
answers cannot stack probes.
"""

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import dns.asyncquery
import dns.exception
import dns.message
import dns.rcode
import dns.rdatatype

from feddns.hostport import host_port
from stubzone.backends import Backend, BackendUnavailable
from stubzone.metrics import StubzoneMetrics
from stubzone.model import StubZone
from stubzone.probetarget import ProbeTarget, TargetNotFound

log = logging.getLogger("stubzone")

DEFAULT_INTERVAL = 30.0
"""``--probe-interval`` default, seconds."""
MAX_TIMEOUT = 2.0
"""Seconds one probe waits for its answer at the most (less when ``--probe-interval`` is shorter)."""
WHOAMI = "_whoami"
"""The label asked below each stub domain (docs/reference.md section 1)."""
TAGGED_BY = "option"
"""serve's ``by=`` when the cluster DNS tagged the query with option 0xFEDD."""
UNTAGGED_BY = ("ecs", "source")
"""serve's ``by=`` values that prove the path of a cluster DNS that does not tag its queries."""


@dataclass(frozen=True, slots=True)
class PathState:
    """What the last probe of one federation found: ``ok``, and ``text``: the cluster seen
    (``cluster foo by option``) or why the path is broken. ``cluster`` and ``by`` are
    what serve said (``None`` when it said nothing)."""

    ok: bool
    text: str
    cluster: str | None = None
    by: str | None = None

    def line(self, federation: str) -> str:
        """The ``/health`` body's line of ``federation``."""
        return f"path {federation}: {'ok' if self.ok else 'broken'}: {self.text}"


@dataclass(frozen=True, slots=True)
class ProbeSettings:
    """How the path is probed (``feddns stubzone``'s flags, docs/reference.md section 5)."""

    target: ProbeTarget
    """Where the cluster DNS is asked (``--probe-server`` or ``--probe-service``)."""
    interval: float
    """Seconds between two rounds (``--probe-interval``)."""
    cluster: str
    """This cluster's name (``--cluster``), which serve must name."""
    tags: bool
    """True when the backend tags queries with option 0xFEDD (coredns, coredns-custom, unbound)."""

    @property
    def timeout(self) -> float:
        """Seconds one probe waits: :data:`MAX_TIMEOUT`, or the interval when shorter."""
        return min(MAX_TIMEOUT, self.interval)


class PathProbe:
    """Probes each federation of ``backend`` through the cluster DNS every interval (see the module doc).

    ``states`` maps each federation probed to its last :class:`PathState`; it is replaced
    whole after each round, so the ``/health`` thread reads one round's states. ``server`` is
    the address asked in the last round; ``no_target`` why there was none (else ``None``).
    """

    def __init__(self, settings: ProbeSettings, backend: Backend, metrics: StubzoneMetrics) -> None:
        self.settings = settings
        self.backend = backend
        self.metrics = metrics
        self.states: Mapping[str, PathState] = {}
        self.server: tuple[str, int] | None = None
        self.no_target: str | None = None

    def health_lines(self) -> str:
        """One line per federation probed, for the ``/health`` body (empty before the first round);
        ``path check: no target: WHY`` when there was nowhere to ask."""
        if self.no_target is not None:
            return f"path check: no target: {self.no_target}"
        return "\n".join(state.line(federation) for federation, state in sorted(self.states.items()))

    async def run(self) -> None:
        """Probe every ``interval`` seconds until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            try:
                await self.round()
            except Exception:  # a bug in one round must not end the path check for good
                log.exception("path check round failed; the next one runs in %g s", self.settings.interval)
            await asyncio.sleep(max(0.0, self.settings.interval - (loop.time() - began)))

    async def round(self) -> None:
        """Probe each federation the backend holds once, all at once; a federation no longer
        held is forgotten. The backend out of reach: nothing changes until it answers again. No
        target: every federation is forgotten (see the module doc)."""
        try:
            server = await self.settings.target.find()
        except TargetNotFound as exc:
            self._lost_target(str(exc))
            return
        self._found_target(server)
        try:
            zones = await self.backend.list()
        except BackendUnavailable as exc:
            log.debug("path check skipped: %s", exc)
            return
        found = await asyncio.gather(*(self.probe(zone, server) for zone in zones))
        states = {zone.federation: state for zone, state in zip(zones, found, strict=True)}
        for federation, state in states.items():
            self._record(federation, self.states.get(federation), state)
        for federation in set(self.states) - set(states):
            self._forget(federation, self.states[federation])
        self.states = states

    def _lost_target(self, why: str) -> None:
        """No address to ask: forget every federation's state, say so once (metric, log, /health)."""
        if self.no_target is None:
            log.warning("path check: no target, nothing probed: %s", why)
        self.no_target, self.server = why, None
        for federation, old in self.states.items():
            self._forget(federation, old)
        self.states = {}
        self.metrics.path_target_found.labels(self.settings.target.flag).set(0)

    def _found_target(self, server: tuple[str, int]) -> None:
        """An address to ask: metric 1; logged when it is new."""
        if server != self.server:
            log.info("path check asks %s at %s", self.settings.target.source, host_port(*server))
        self.no_target, self.server = None, server
        self.metrics.path_target_found.labels(self.settings.target.flag).set(1)

    async def probe(self, zone: StubZone, server: tuple[str, int]) -> PathState:
        """Ask ``_whoami.<stub domain>`` TXT through the cluster DNS at ``server``; what the answer says
        of the path."""
        timeout = self.settings.timeout
        query = dns.message.make_query(f"{WHOAMI}.{zone.stub_domain}", dns.rdatatype.TXT)
        try:
            reply = await dns.asyncquery.udp(query, server[0], port=server[1], timeout=timeout)
        except (dns.exception.DNSException, OSError) as exc:
            if isinstance(exc, dns.exception.Timeout):
                return PathState(False, f"no answer from {host_port(*server)} within {timeout:g} s")
            return PathState(False, f"no answer from {host_port(*server)}: {exc}")
        return self.judge(zone, reply, server)

    def judge(self, zone: StubZone, reply: dns.message.Message, server: tuple[str, int]) -> PathState:
        """The state a reply from ``server`` shows: ok when serve names ``--cluster`` by a rule this
        backend uses (option 0xFEDD when it tags, else ECS or the source address)."""
        rcode = reply.rcode()
        if rcode != dns.rcode.NOERROR:
            return PathState(False, f"answered {dns.rcode.to_text(rcode)}: the cluster DNS does not forward "
                                    f"{zone.stub_domain} to Federated-DNS")
        said = _whoami_fields(reply)
        cluster, by = said.get("cluster"), said.get("by")
        if cluster is None or by is None:
            return PathState(False, "answered without the _whoami record: the answer does not come from "
                                    "Federated-DNS")
        problem = self._problem(cluster, by)
        if problem is not None:
            return PathState(False, problem, cluster, by)
        return PathState(True, f"cluster {cluster} by {by} via {host_port(*server)}", cluster, by)

    def _problem(self, cluster: str, by: str) -> str | None:
        """What is wrong with serve naming ``cluster`` by rule ``by``; ``None`` when nothing is."""
        me = self.settings.cluster
        if not cluster:
            return f"names no cluster (by={by}): serve finds this cluster by no rule"
        if cluster != me:
            return f"names cluster {cluster} (by={by}), this is {me}"
        if self.settings.tags and by != TAGGED_BY:
            return f"names cluster {cluster} by {by}, not by option 0xFEDD: the cluster DNS forwards without its tag"
        if not self.settings.tags and by not in (TAGGED_BY, *UNTAGGED_BY):
            return f"names cluster {cluster} by {by}"
        return None

    def _record(self, federation: str, old: PathState | None, new: PathState) -> None:
        """Set the metrics of ``federation``; log when ok turned broken or back (or the first time)."""
        self.metrics.path_ok.labels(federation).set(1 if new.ok else 0)
        if old is not None and (old.cluster, old.by) != (new.cluster, new.by):
            self._forget_cluster(federation, old)
        if new.cluster is not None and new.by is not None:
            self.metrics.path_cluster.labels(federation, new.cluster, new.by).set(1)
        if old is None or old.ok != new.ok:
            level = logging.INFO if new.ok else logging.WARNING
            log.log(level, "%s", new.line(federation))

    def _forget(self, federation: str, old: PathState) -> None:
        """Drop the metrics of a federation the backend no longer holds."""
        self.metrics.path_ok.remove(federation)
        self._forget_cluster(federation, old)

    def _forget_cluster(self, federation: str, old: PathState) -> None:
        """Drop the ``path_cluster_info`` sample of what ``old`` saw (nothing when it saw nothing)."""
        if old.cluster is not None and old.by is not None:
            self.metrics.path_cluster.remove(federation, old.cluster, old.by)


def _whoami_fields(reply: dns.message.Message) -> dict[str, str]:
    """``key=value`` strings of the TXT records in the answer section, as a dict."""
    fields: dict[str, str] = {}
    for rrset in reply.answer:
        if rrset.rdtype != dns.rdatatype.TXT:
            continue
        for rdata in rrset:
            for raw in rdata.strings:
                key, sep, value = raw.decode("utf-8", "replace").partition("=")
                if sep:
                    fields.setdefault(key, value)
    return fields
