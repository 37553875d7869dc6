"""The design's cluster controller ("Initial Setup"): every member's stub zone forwards to Federated-DNS.

The design document has the federation control plane POST Federated-DNS's addresses to each new
member's stub-zone endpoint (docs/reference.md section 5). The controller's leader does it:

* **What.** For each cluster with a ``stubzone`` block (docs/reference.md section 7), the stub zone of
  the federation (``POST /federations/F {"nameservers": [...]}``) holds exactly the addresses of
  ``nameservers``: a fixed list, or the load-balancer IPs of Federated-DNS's Service
  (:class:`ServiceNameservers`, read by every replica so a new leader knows them at once).
* **When.** At start and on gaining leadership (after a GET: a zone already right is left alone),
  when the addresses change, when a cluster joins (a config reload); at each ``resyncSeconds`` a GET,
  and a POST when someone changed the zone. A cluster that leaves gets ``DELETE /federations/F``.
* **Fencing.** Only the leader writes, and only while it holds its lease (``may_write``, the elector's
  ``holds_lease``, checked right before every request), as the external DNS writes are fenced: a leader
  paused past its lease sends nothing when it wakes.
* **Failures.** Each member is tried on its own, concurrently, with a deadline per request; one whose
  endpoint cannot be reached, or answers 4xx or 5xx, is retried with an exponential backoff of its own
  (:class:`feddns.backoff.Backoff`) and
  never holds up the others. A 503 (``mayHaveApplied`` either way) is retried like any failure: POST and
  DELETE are idempotent. Each state change is logged once (a 4xx with its body); metrics per cluster
  say whether it is synced, count errors by kind, and give the time of the last success.

The client certificate, key and CA are read from their files for every pass, so a rotated Secret
applies without a restart.
"""

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import kubernetes.client

from controller.config import MAX_NAMESERVERS, ClusterConfig, ServiceRef, StubzoneEndpoint
from controller.metrics import Metrics
from controller.settings import StubzoneSettings
from feddns.backoff import Backoff
from feddns.errors import ConfigError
from feddns.hostport import host_port, parse_ip_port

log = logging.getLogger(__name__)

class StubzoneFailure(Exception):
    """A request to a stub-zone endpoint that did not succeed: ``kind`` (a metric label) and a message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def canonical(text: str) -> str:
    """``ip:port`` (``[v6]:port``) of a nameserver as the stub-zone API writes it: always with the port,
    53 when ``text`` gives none, the address in its shortest form (RFC 5952 for IPv6)."""
    address, port = parse_ip_port(text, 53)
    return host_port(str(address), port)


@dataclass
class _Member:
    """What the leader knows of one member's stub zone."""

    endpoint: StubzoneEndpoint
    backoff: Backoff
    """Its wait after a failure: ``StubzoneSettings.first`` doubling to ``maximum``, reset by a success."""
    synced: bool = False
    """The zone was seen (or made) equal to the nameservers: only a periodic GET is due."""
    verified: float = 0.0
    """Monotonic time of the last GET or POST that succeeded."""
    retry_at: float = 0.0
    error: str | None = None
    """The last failure, logged once; ``None`` after a success."""
    extra: dict[str, Any] = field(default_factory=dict)


class StubZones:
    """Keeps the members' stub zones equal to the nameservers (see the module doc).

    ``clusters`` are the config's clusters (those with ``stubzone`` are members); ``lease_left()`` is
    how many seconds this replica may still count on its lease (0 when it does not lead): a request is
    sent only with some left, and its deadline is the lease's end if that comes before the timeout;
    ``verify_every`` (seconds) is ``resyncSeconds``.
    """

    def __init__(self, federation: str, clusters: Iterable[ClusterConfig], lease_left: Callable[[], float],
                 metrics: Metrics, settings: StubzoneSettings, verify_every: float) -> None:
        self.federation, self.lease_left, self.metrics = federation, lease_left, metrics
        self.settings, self.verify_every = settings, verify_every
        self.nameservers: tuple[str, ...] | None = None
        self.members: dict[str, _Member] = {}
        self.leaving: dict[str, _Member] = {}
        """Clusters removed from the config whose stub zone is still to be deleted."""
        self._wake = asyncio.Event()
        self.configure(clusters)

    def may_write(self) -> bool:
        return self.lease_left() > 0

    # -- what the controller tells it -------------------------------------------------------

    def configure(self, clusters: Iterable[ClusterConfig]) -> None:
        """The clusters of a (re)loaded config: members joining are programmed, members leaving get
        a DELETE, a member whose endpoint changed is programmed at its new address."""
        wanted = {c.name: c.stubzone for c in clusters if c.stubzone is not None}
        urls = {endpoint.url for endpoint in wanted.values()}
        for name in [n for n, m in self.leaving.items() if m.endpoint.url in urls]:
            del self.leaving[name]  # a member renamed, or another at the same endpoint: no DELETE there
        for name in [n for n in self.members if wanted.get(n) != self.members[n].endpoint]:
            member = self.members.pop(name)
            self.metrics.stubzone_synced.labels(name).set(0)
            if name not in wanted and member.endpoint.url not in urls:
                log.info("cluster %s left: deleting its stub zone at %s", name, member.endpoint.url)
                self.leaving[name] = self._member(member.endpoint)
        for name, endpoint in wanted.items():
            if name not in self.members:
                self.leaving.pop(name, None)
                self.members[name] = self._member(endpoint)
                self.metrics.stubzone_synced.labels(name).set(0)
        self._wake.set()

    def set_nameservers(self, addresses: Iterable[str] | None) -> None:
        """Federated-DNS's addresses (``ip:port``), or ``None`` while none is known."""
        new = None if addresses is None else tuple(canonical(a) for a in addresses) or None
        if new == self.nameservers:
            return
        self.nameservers = new
        self.metrics.nameservers.set(len(new or ()))
        for name, member in self.members.items():
            member.synced, member.retry_at = False, 0.0
            member.backoff.reset()
            self.metrics.stubzone_synced.labels(name).set(0)
        self._wake.set()

    def _member(self, endpoint: StubzoneEndpoint) -> _Member:
        return _Member(endpoint, Backoff(self.settings.first, self.settings.maximum))

    def leadership_changed(self, leader: bool) -> None:
        """A new leader looks at every member again (a GET first: a zone already right is kept)."""
        for member in self.members.values():
            member.verified, member.retry_at = 0.0, 0.0
            member.backoff.reset()
        self._wake.set()

    # -- the loop -------------------------------------------------------------------------------

    async def run(self) -> None:
        """Forever: while this replica may write, bring every member that is due in line."""
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                await self._sleep()
                if not self.may_write():
                    continue
                now = time.monotonic()
                due = [(n, m, self._sync) for n, m in self.members.items() if self._due(m, now)]
                due += [(n, m, self._delete) for n, m in self.leaving.items() if m.retry_at <= now]
                results = await asyncio.gather(*(step(session, name, member) for name, member, step in due),
                                               return_exceptions=True)
                for (name, member, _), result in zip(due, results, strict=True):
                    if isinstance(result, Exception):  # a bug or an answer of a shape we did not expect
                        self._failed(name, member, StubzoneFailure("error", f"{type(result).__name__}: {result}"))

    def _due(self, member: _Member, now: float) -> bool:
        if self.nameservers is None or member.retry_at > now:
            return False
        return not member.synced or now - member.verified >= self.verify_every

    async def _sleep(self) -> None:
        """Until woken, or until the next member is due (every ``hold_back`` while not writing)."""
        now = time.monotonic()
        dues = [self._next(m, leaving=False) for m in self.members.values()]
        dues += [m.retry_at for m in self.leaving.values()]
        wait = min((max(0.0, due - now) for due in dues), default=self.verify_every)
        if not self.may_write():
            wait = self.settings.hold_back
        # Not asyncio.wait_for: in Python 3.11 it returns the event's result and drops a cancel
        # that comes as the event is set (a step-down wakes this loop as the stop cancels it),
        # and this loop would then run on; asyncio.timeout passes the cancel on.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(wait, 0.01)):
                await self._wake.wait()
        self._wake.clear()

    def _next(self, member: _Member, leaving: bool) -> float:
        """Monotonic time at which ``member`` is next due (never while no address is known)."""
        if leaving:
            return member.retry_at
        if self.nameservers is None:
            return float("inf")
        if member.error is not None:
            return member.retry_at
        if not member.synced:
            return 0.0 if self.nameservers is not None else float("inf")
        return member.verified + self.verify_every

    async def _sync(self, session: aiohttp.ClientSession, name: str, member: _Member) -> None:
        wanted = list(self.nameservers or ())
        try:
            context = _client_context(member.endpoint)
            if member.verified:  # known before: look first, write only when someone changed it
                held = await self._request(session, name, member, "GET", context)
                if held is not None and [canonical(a) for a in held.get("nameservers", [])] == wanted:
                    self._succeeded(name, member, "verified")
                    return
                what = "repaired (it held " + (", ".join(held.get("nameservers", [])) if held else "nothing") + ")"
            else:
                what = "programmed"
            await self._request(session, name, member, "POST", context, {"nameservers": wanted})
            self._succeeded(name, member, what)
        except StubzoneFailure as exc:
            self._failed(name, member, exc)

    async def _delete(self, session: aiohttp.ClientSession, name: str, member: _Member) -> None:
        try:
            await self._request(session, name, member, "DELETE", _client_context(member.endpoint))
        except StubzoneFailure as exc:
            self._failed(name, member, exc)
            return
        self.leaving.pop(name, None)
        self.metrics.stubzone_last_success.labels(name).set(time.time())
        log.info("cluster %s: stub zone of %s deleted at %s", name, self.federation, member.endpoint.url)

    async def _request(self, session: aiohttp.ClientSession, name: str, member: _Member, method: str,
                       context: ssl.SSLContext, body: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """One request; its JSON answer (``None`` for a 404 to GET or DELETE). Raises StubzoneFailure."""
        left = self.lease_left()
        if left <= 0:  # fenced: the lease may have expired while we waited
            raise StubzoneFailure("fenced", "no longer the leader holding its lease")
        url = f"{member.endpoint.url}/federations/{self.federation}"
        self.metrics.stubzone_requests.labels(name, method).inc()
        deadline = aiohttp.ClientTimeout(total=min(self.settings.timeout, left))  # over before the lease is
        try:
            async with session.request(method, url, json=body, ssl=context, timeout=deadline) as response:
                text = await response.text()
                status = response.status
        except aiohttp.ClientSSLError as exc:
            raise StubzoneFailure("tls", f"{method} {url}: TLS: {exc.os_error}") from exc
        except aiohttp.ClientConnectorError as exc:  # its text names the SSL context object: not the same twice
            raise StubzoneFailure("unreachable", f"{method} {url}: cannot connect: {exc.os_error}") from exc
        except TimeoutError as exc:
            raise StubzoneFailure("unreachable", f"{method} {url}: no answer within {deadline.total:g} s") \
                from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise StubzoneFailure("unreachable", f"{method} {url}: {type(exc).__name__}: {exc}") from exc
        if status == 404 and method != "POST":  # noqa: PLR2004 - HTTP status
            return None
        if status >= 400:  # noqa: PLR2004 - HTTP status
            kind = "http-4xx" if status < 500 else "http-5xx"  # noqa: PLR2004 - HTTP status
            raise StubzoneFailure(kind, f"{method} {url}: {status} {' '.join(text.split())[:500]}")
        try:
            answer: dict[str, Any] = json.loads(text)
        except ValueError as exc:
            raise StubzoneFailure("http-5xx", f"{method} {url}: {status} with a body that is not JSON") from exc
        return answer

    def _succeeded(self, name: str, member: _Member, what: str) -> None:
        was_failing, member.error = member.error, None
        member.synced, member.verified, member.retry_at = True, time.monotonic(), 0.0
        member.backoff.reset()
        self.metrics.stubzone_synced.labels(name).set(1)
        self.metrics.stubzone_last_success.labels(name).set(time.time())
        if what != "verified" or was_failing:
            log.info("cluster %s: stub zone %s: forwards %s to %s", name, what if what != "verified" else "right again",
                     self.federation, ", ".join(self.nameservers or ()))

    def _failed(self, name: str, member: _Member, exc: StubzoneFailure) -> None:
        if exc.kind == "fenced":
            return
        member.retry_at = time.monotonic() + member.backoff.next()
        self.metrics.stubzone_errors.labels(name, exc.kind).inc()
        if name in self.members:
            member.synced = False
            self.metrics.stubzone_synced.labels(name).set(0)
        if str(exc) != member.error:
            log.warning("cluster %s: stub zone not synced: %s (retrying with backoff, the other members go on)",
                        name, exc)
        else:
            log.debug("cluster %s: stub zone still failing: %s", name, exc)
        member.error = str(exc)


def _client_context(endpoint: StubzoneEndpoint) -> ssl.SSLContext:
    """A TLS client context presenting the controller's certificate and trusting the endpoint's CA."""
    try:
        context = ssl.create_default_context(cafile=str(endpoint.ca))
        context.load_cert_chain(str(endpoint.cert), str(endpoint.key))
    except (OSError, ssl.SSLError) as exc:
        raise StubzoneFailure("files", f"{endpoint.url}: cannot load {endpoint.cert}, {endpoint.key} "
                                       f"or {endpoint.ca}: {exc}") from exc
    return context


def service_nameservers(service: Any) -> list[str] | None:
    """``ip:port`` of each ``status.loadBalancer.ingress[].ip`` of a ``V1Service`` (or its dict), the port
    being the Service's UDP port named ``dns``, else its first UDP port, else 53; ``None`` without one."""
    data = service if isinstance(service, dict) else service.to_dict()
    spec, status = data.get("spec") or {}, data.get("status") or {}
    ports = [p for p in spec.get("ports") or [] if (p.get("protocol") or "TCP") == "UDP"]
    port = next((p["port"] for p in ports if p.get("name") == "dns"), ports[0]["port"] if ports else 53)
    ingress = (status.get("load_balancer") or status.get("loadBalancer") or {}).get("ingress") or []
    addresses = []
    for item in ingress:
        if item.get("ip"):
            try:
                addresses.append(canonical(host_port(item["ip"], port)))
            except ConfigError:
                log.warning("Federated-DNS's Service: ingress ip %r is not an IP address; left out", item["ip"])
    if len(addresses) > MAX_NAMESERVERS:
        log.warning("Federated-DNS's Service has %d ingress IPs; the stub-zone API takes %d, the first of them "
                    "in address order", len(addresses), MAX_NAMESERVERS)
    return sorted(addresses)[:MAX_NAMESERVERS] or None  # in a stable order: the API server's may change


async def follow_service(ref: ServiceRef, client: Callable[[], kubernetes.client.ApiClient], stubzones: StubZones,
                         every: float) -> None:
    """Read Federated-DNS's Service ``ref`` every ``every`` seconds (on every replica) and hand its
    load-balancer addresses to ``stubzones``; each change, and each failure, is logged once. Needs only
    ``list`` of Services in that namespace (deploy/member/controller-access.yaml's ClusterRole)."""
    where = f"Service {ref.namespace}/{ref.name} in cluster {ref.cluster}"
    api: kubernetes.client.CoreV1Api | None = None
    last: list[str] | str | None = "unknown"
    while True:
        try:
            if api is None:
                api = kubernetes.client.CoreV1Api(await asyncio.to_thread(client))
            found = await asyncio.to_thread(api.list_namespaced_service, ref.namespace,
                                            field_selector=f"metadata.name={ref.name}", _request_timeout=10)
            addresses = service_nameservers(found.items[0]) if found.items else None
        except Exception as exc:  # noqa: BLE001 - the API server's failures are many; each is retried
            api = None  # a client made anew: rotated credentials are read again
            message = f"nameservers: cannot read {where}: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            if message != last:
                log.warning("%s (the last addresses known are kept)", message)
            last = message
        else:
            if addresses != last:
                log.info("nameservers from %s: %s", where, ", ".join(addresses) if addresses else
                         "none yet (no status.loadBalancer.ingress[].ip)")
                stubzones.set_nameservers(addresses)
            last = addresses
        await asyncio.sleep(every)
