"""A fake Kubernetes API server on loopback that speaks the real list/watch protocol.

No kube-apiserver can run on the test machines, so the controller is tested
against this. ``kmock`` (PyPI) was looked at first: its emulator stores
objects and streams changes, but lists carry no real ``resourceVersion``, a
watch replays every object as ``ADDED`` whatever version it asks for, and
there is no ``410 Gone``, no bookmark and no ``timeoutSeconds`` — exactly the
parts the controller must get right. So this is our own, small, and strict
about the protocol (Kubernetes API concepts, "Efficient detection of changes"):

* one ``resourceVersion`` counter per server, as etcd's revision; every write
  gets the next one;
* list: ``GET /api/v1/services`` (also ``/api/v1/namespaces/NS/services``),
  ``/apis/discovery.k8s.io/v1/endpointslices``,
  ``/apis/multicluster.x-k8s.io/v1alpha1/serviceexports``; ``labelSelector``
  (equality-based), ``limit``/``continue`` over a consistent snapshot; items of
  built-in kinds carry no ``kind``/``apiVersion``, as the real server's do;
* watch (``watch=true``): events as JSON lines in a chunked response, starting
  after the given ``resourceVersion`` (``""``/``"0"``: synthetic ``ADDED`` for
  everything first); an object leaving a label selector is sent as
  ``DELETED``; ``allowWatchBookmarks`` gets a ``BOOKMARK`` after each quiet
  ``bookmark_interval``; ``timeoutSeconds`` ends the stream;
* ``compact()`` forgets history: a watch or ``continue`` from before it gets
  ``410 Gone`` (an ``ERROR`` event with a ``Status`` of code 410 and reason
  ``Expired``, or with ``gone_as_status=True`` the HTTP status 410);
  ``expire_watches()`` sends that error to every open watch;
* ``stop()`` takes the server off the network (connections refused) and
  ``start()`` brings it back on the same port, with its objects;
  ``black_hole()`` keeps every connection open and answers nothing more
  (no events, no bookmarks, no end at ``timeoutSeconds``, new requests never
  answered), as a server behind a firewall that drops packets;
  ``restore()`` ends that;
* single objects of the writable kinds, ConfigMap (the stub-zone endpoint's
  store), EndpointSlice (the demo's ``fail``) and the ExternalDNS CRD
  DNSEndpoint (``externaldns.k8s.io/v1alpha1``, the controller's
  ``dnsendpoint`` provider): ``GET``, ``PUT`` (replace) and ``DELETE`` on
  ``/api/v1/namespaces/NS/PLURAL/NAME`` or ``/apis/GROUP/VERSION/namespaces/NS/PLURAL/NAME``,
  ``POST`` (create) on the namespaced collection. A replace whose
  ``metadata.resourceVersion`` is not the stored one gets ``409 Conflict``
  (one without it is unconditional, as the real server allows for
  ConfigMaps); a create of an existing name gets ``409 AlreadyExists``; a
  delete whose ``DeleteOptions.preconditions`` (``resourceVersion``, ``uid``)
  do not hold gets ``409 Conflict``. Names must be DNS subdomains and label
  values valid (else ``422 Invalid``, as the real server checks every object);
* a kind with a status subresource (DNSEndpoint, as its CRD declares) keeps
  ``metadata.generation``, which a replace bumps only when ``spec`` changes; a
  replace of the object ignores ``status``, and ``PUT .../NAME/status`` (what
  ExternalDNS does to record ``status.observedGeneration``) changes only
  ``status``, both with the same ``resourceVersion`` rule;
* ``FakeKube(without=("dnsendpoints",))`` serves a cluster where that CRD is
  not installed (its paths answer 404);
  ``before_next_write(fn)`` runs ``fn`` just before the next write is
  handled (a writer racing in between a client's GET and PUT),
  ``fail_next_write(status)`` refuses it, ``drop_after_next_write()`` applies
  it and then cuts the connection without an answer; ``writes`` lists the
  writes handled.

Objects are defaulted like the real API server does it (uid,
resourceVersion, creationTimestamp; a Service's type, clusterIP(s) from
``service_cidr``, ipFamilies, port protocol and targetPort, empty status).
Fixture objects are YAML (``load()``).
"""

import asyncio
import base64
import contextlib
import copy
import ipaddress
import json
import re
import threading
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import yaml
from aiohttp import web


@dataclass(frozen=True)
class Kind:
    """One resource the fake serves."""

    group: str
    version: str
    kind: str
    plural: str
    builtin: bool = True
    status_subresource: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


KINDS = {
    k.plural: k
    for k in (
        Kind("", "v1", "Service", "services"),
        Kind("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices"),
        Kind("multicluster.x-k8s.io", "v1alpha1", "ServiceExport", "serviceexports", builtin=False),
        Kind("", "v1", "ConfigMap", "configmaps"),
        Kind("externaldns.k8s.io", "v1alpha1", "DNSEndpoint", "dnsendpoints", builtin=False, status_subresource=True),
    )
}
KUBERNETES_VERSION = "1.30.0"
"""The one Kubernetes version whose schemas (kubernetes-validate) the manifests in deploy/
and the objects of these tests are validated against, and that the docs name: the
oldest release the manifests are written for."""

WRITABLE = frozenset({"configmaps", "endpointslices", "dnsendpoints"})
"""Kinds the fake lets clients write (GET/PUT/POST/DELETE of one object)."""
_BY_KIND = {k.kind: k for k in KINDS.values()}

Key = tuple[str, str]


@dataclass
class _Event:
    version: int
    plural: str
    type: str
    old: dict[str, Any] | None
    new: dict[str, Any] | None


@dataclass(eq=False)
class _Watcher:
    plural: str
    namespace: str | None
    selector: list[tuple[str, str, str | None]]
    pending: deque[_Event] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    end: str | None = None  # "expire" or "close"


def parse_selector(text: str | None) -> list[tuple[str, str, str | None]]:
    """Equality-based label selector: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``, comma-separated.

    Returns ``(op, key, value)`` triples; raises ``ValueError`` for set-based syntax."""
    terms: list[tuple[str, str, str | None]] = []
    for raw in (text or "").split(","):
        term = raw.strip()
        if not term:
            continue
        if " in " in term or " notin " in term or "(" in term:
            raise ValueError(f"set-based selector {term!r} is not supported by the fake")
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append(("!=", key.strip(), value.strip()))
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            terms.append(("=", key.strip(), value.strip()))
        elif term.startswith("!"):
            terms.append(("!", term[1:].strip(), None))
        else:
            terms.append(("exists", term, None))
    return terms


def matches(selector: list[tuple[str, str, str | None]], obj: dict[str, Any] | None) -> bool:
    """Whether ``obj``'s labels satisfy ``selector`` (``None`` matches nothing)."""
    if obj is None:
        return False
    labels = obj.get("metadata", {}).get("labels") or {}
    for op, key, value in selector:
        ok = {
            "=": labels.get(key) == value,
            "!=": labels.get(key) != value,
            "exists": key in labels,
            "!": key not in labels,
        }[op]
        if not ok:
            return False
    return True


class FakeKube:
    """One fake member cluster's API server on ``127.0.0.1``.

    Thread-safe: tests call ``apply``/``delete``/``compact`` from their own
    thread while the server runs its event loop in a daemon thread.
    ``close()`` ends it for good.
    """

    def __init__(
        self,
        name: str = "cluster",
        *,
        bookmark_interval: float = 0.5,
        service_cidr: str = "10.96.0.0/16",
        gone_as_status: bool = False,
        without: Iterable[str] = (),
    ) -> None:
        self.name = name
        self.without = frozenset(without)
        """Plurals this cluster does not serve (a CRD that is not installed): 404."""
        self.bookmark_interval = bookmark_interval
        self.gone_as_status = gone_as_status
        self.port = 0
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._lock = threading.Lock()
        self._version = 1000
        self._oldest = self._version  # watches/continues from before this version get 410
        self._objects: dict[str, dict[Key, dict[str, Any]]] = {plural: {} for plural in KINDS}
        self._events: list[_Event] = []
        self._snapshots: dict[str, list[dict[str, Any]]] = {}
        self._watchers: set[_Watcher] = set()
        self._opened: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._errors: deque[int] = deque()
        self._write_hooks: deque[Any] = deque()
        self.writes: list[tuple[str, str, int]] = []
        self._held = False
        self._answering = asyncio.Event()
        self._ips = ipaddress.ip_network(service_cidr).hosts()
        next(self._ips)  # .1 is the kubernetes Service's
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"fakekube-{name}", daemon=True)
        self._thread.start()
        self._loop.call_soon_threadsafe(self._answering.set)
        self._runner: web.AppRunner | None = None

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Listen (again) on 127.0.0.1 (the first time on a port the OS picks)."""
        self._call(self._start())

    def stop(self) -> None:
        """Go off the network: close the listener, then every connection (open
        watches are cut, not ended cleanly, as when a server goes away)."""
        self._call(self._stop())

    def close(self) -> None:
        self.stop()
        self._call(self._cancel_handlers())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _cancel_handlers(self) -> None:
        """Cancel what is left (handlers of watches whose clients went away)."""
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def write_kubeconfig(self, path: str, context: str | None = None) -> str:
        """Write a kubeconfig for this server at ``path`` (context named ``context``
        or the server's name, set as current) and return ``path``."""
        context = context or self.name
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.name, "cluster": {"server": self.url}}],
            "users": [{"name": f"{self.name}-user", "user": {"token": f"token-{self.name}"}}],
            "contexts": [{"name": context, "context": {"cluster": self.name, "user": f"{self.name}-user"}}],
            "current-context": context,
        }
        with open(path, "w", encoding="utf-8") as stream:
            yaml.safe_dump(config, stream)
        return path

    # -- state, from the test's thread ----------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self._lock:
            return self._version

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace ``obj`` (of any kind the fake serves, unconditionally, as a test's
        set-up would); returns it as stored."""
        kind = _BY_KIND[obj["kind"]]
        new = copy.deepcopy(obj)
        meta = new.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        key = (meta["namespace"], meta["name"])
        with self._lock:
            old = self._objects[kind.plural].get(key)
            if kind.status_subresource:
                _split_status(new, old, None)
            self._default(kind, new, old)
            self._version += 1
            meta["resourceVersion"] = str(self._version)
            self._objects[kind.plural][key] = new
            self._publish(_Event(self._version, kind.plural, "MODIFIED" if old else "ADDED", old, new))
        return copy.deepcopy(new)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        """Delete an object (``kind`` like ``Service``); raises ``KeyError`` if absent."""
        plural = _BY_KIND[kind].plural
        with self._lock:
            old = self._objects[plural].pop((namespace, name))
            self._version += 1
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(self._version)
            self._publish(_Event(self._version, plural, "DELETED", old, gone))

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self._objects[_BY_KIND[kind].plural].get((namespace, name))
            return copy.deepcopy(obj) if obj else None

    def load(self, path: str) -> list[dict[str, Any]]:
        """Apply every object of a YAML file (documents, or ``kind: List`` with ``items``)."""
        with open(path, encoding="utf-8") as stream:
            docs = [d for d in yaml.safe_load_all(stream) if d]
        objects = [item for d in docs for item in (d["items"] if d.get("kind") == "List" else [d])]
        return [self.apply(obj) for obj in objects]

    def compact(self) -> None:
        """Forget all history: watches and continue tokens from before now get 410 Gone."""
        with self._lock:
            self._oldest = self._version
            self._events.clear()
            self._snapshots.clear()

    def expire_watches(self) -> None:
        """Compact, then send ``ERROR`` 410 Expired to every open watch and end it; events
        not yet sent are dropped, as when the API server's watch cache falls behind."""
        self.compact()
        self._end_watches("expire")

    def end_watches(self) -> None:
        """End every open watch cleanly, as ``timeoutSeconds`` does; events not yet
        sent are not sent (a client resumes from the last version it saw)."""
        self._end_watches("close")

    def black_hole(self) -> None:
        """Answer nothing from now on, closing nothing (see the module doc); ``restore()`` ends it."""
        self._loop.call_soon_threadsafe(self._answering.clear)

    def restore(self) -> None:
        """Answer again after :meth:`black_hole` (what was held back is sent)."""
        self._loop.call_soon_threadsafe(self._answering.set)

    def hold(self) -> None:
        """Stop sending events on open watches (a lagging watch); ``release()`` resumes."""
        with self._lock:
            self._held = True

    def release(self) -> None:
        with self._lock:
            self._held = False
            for watcher in self._watchers:
                self._loop.call_soon_threadsafe(watcher.wake.set)

    def fail_next(self, status: int, times: int = 1) -> None:
        """Answer the next ``times`` list or watch requests with HTTP ``status``."""
        with self._lock:
            self._errors.extend([status] * times)

    def before_next_write(self, hook: Any) -> None:
        """Call ``hook()`` (from the server's thread) just before the next write is handled."""
        with self._lock:
            self._write_hooks.append(hook)

    def fail_next_write(self, status: int) -> None:
        """Answer the next write with HTTP ``status`` (nothing stored)."""
        self.before_next_write(("fail", status))

    def drop_after_next_write(self) -> None:
        """Store the next write, then close its connection without an answer (the client cannot know)."""
        self.before_next_write(("drop", 0))

    def watch_count(self, plural: str | None = None) -> int:
        with self._lock:
            return sum(1 for w in self._watchers if plural in (None, w.plural) and w.end is None)

    def watches_opened(self, plural: str) -> int:
        """Watches of ``plural`` ever registered (open or ended): a test that shares the server with
        earlier ones waits for this to grow, since an earlier client's watch may still count as open
        until the server next writes to its closed connection."""
        with self._lock:
            return self._opened[plural]

    def _end_watches(self, how: str) -> None:
        with self._lock:
            for watcher in self._watchers:
                watcher.end = how
                self._loop.call_soon_threadsafe(watcher.wake.set)

    def _publish(self, event: _Event) -> None:
        """Under the lock: record ``event`` and queue it for the open watches."""
        self._events.append(event)
        for watcher in self._watchers:
            if watcher.plural == event.plural:
                watcher.pending.append(event)
                self._loop.call_soon_threadsafe(watcher.wake.set)

    def _default(self, kind: Kind, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        """Fill in what the API server would (under the lock)."""
        obj["apiVersion"] = kind.api_version
        meta = obj["metadata"]
        old_meta = (old or {}).get("metadata", {})
        meta["uid"] = old_meta.get("uid") or str(uuid.uuid4())
        meta["creationTimestamp"] = old_meta.get("creationTimestamp") or _now()
        if kind.kind == "Service":
            self._default_service(obj, old)

    def _default_service(self, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        if spec["type"] != "ExternalName":
            old_ip = (old or {}).get("spec", {}).get("clusterIP")
            cluster_ip = spec.setdefault("clusterIP", old_ip or str(next(self._ips)))
            spec.setdefault("clusterIPs", [cluster_ip])
            family = "IPv6" if ":" in cluster_ip else "IPv4"  # a headless Service gets the default family
            spec.setdefault("ipFamilies", [family])
            spec.setdefault("ipFamilyPolicy", "SingleStack")
            spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
        obj.setdefault("status", {"loadBalancer": {}})

    # -- HTTP, on the server's loop ---------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await self._answering.wait()  # black-holed: the request is never answered
        query = dict(request.query)
        self.requests.append((request.path, query))
        single = _object_route(request.path)
        if single is not None and self._serves(single[0]) and single[0].plural in WRITABLE:
            return await self._object(request, *single)
        route = _route(request.path)
        if route is None or not self._serves(route[0]):
            return _status(404, "NotFound", f"the server could not find the requested resource ({request.path})")
        if request.method == "POST" and route[0].plural in WRITABLE and route[1] is not None:
            return await self._object(request, route[0], route[1], None)
        return await self._read(request, *route, query)

    def _serves(self, kind: Kind) -> bool:
        """Whether this server has ``kind`` (not one of the ``without``, which answer 404)."""
        return kind.plural not in self.without

    async def _read(self, request: web.Request, kind: Kind, namespace: str | None,
                    query: dict[str, str]) -> web.StreamResponse:
        """A request to a collection other than a create: a list, or a watch with ``?watch=true``."""
        if request.method != "GET":
            return _status(405, "MethodNotAllowed", "the fake serves list and watch only")
        with self._lock:
            error = self._errors.popleft() if self._errors else None
        if error is not None:
            return _status(error, "InternalError", "injected failure")
        try:
            selector = parse_selector(query.get("labelSelector"))
        except ValueError as exc:
            return _status(400, "BadRequest", str(exc))
        if query.get("watch") in ("true", "1"):
            return await self._watch(request, kind, namespace, selector)
        return self._list(kind, namespace, selector, query)

    async def _object(self, request: web.Request, kind: Kind, namespace: str, name: str | None,
                      subresource: str | None = None) -> web.StreamResponse:
        """One object: GET, PUT (replace), DELETE; POST (create) on the collection (``name`` None);
        ``subresource`` ``"status"``: GET and PUT of the status only."""
        if subresource is not None and (subresource != "status" or not kind.status_subresource
                                        or request.method not in ("GET", "PUT")):
            return _status(404, "NotFound", f"the server could not find the requested resource ({request.path})")
        if request.method == "GET" and name is not None:
            return self._get(kind, namespace, name)
        if request.method not in ("PUT", "POST", "DELETE"):
            return _status(405, "MethodNotAllowed", f"{request.method} is not allowed on one {kind.kind}")
        body: dict[str, Any] = {}
        if request.method != "DELETE" or request.can_read_body:
            try:
                body = await request.json()
            except ValueError:
                return _status(400, "BadRequest", "the body is not JSON")
        action = self._next_write_action()
        if action[0] == "fail":
            return _status(action[1], "InternalError", "injected failure")
        response = self._write(request.method, kind, namespace, name, body, subresource)
        if action[0] == "drop" and request.transport is not None:
            request.transport.abort()
        return response

    def _get(self, kind: Kind, namespace: str, name: str) -> web.Response:
        with self._lock:
            obj = self._objects[kind.plural].get((namespace, name))
        if obj is None:
            return _status(404, "NotFound", f'{kind.plural} "{name}" not found')
        return web.json_response(_as_event_object(kind, obj))

    def _next_write_action(self) -> tuple[str, int]:
        """Run the queued hook of this write: a callable runs now; a ("fail"|"drop", status) is returned."""
        with self._lock:
            hook = self._write_hooks.popleft() if self._write_hooks else None
        if callable(hook):
            hook()
            return ("store", 0)
        return hook or ("store", 0)

    def _write(self, method: str, kind: Kind, namespace: str, name: str | None, body: dict[str, Any],
               subresource: str | None = None) -> web.Response:
        """Check and store one write, as the real API server would answer it."""
        if method == "DELETE":
            return self._delete(kind, namespace, name, body)
        refusal = _refuse_body(kind, namespace, name, body)
        if refusal is not None:
            return refusal
        meta = body.get("metadata") or {}
        key = (namespace, name or meta["name"])
        with self._lock:
            stored = self._objects[kind.plural].get(key)
            self.writes.append((method, key[1], self._version))
            refusal = _refuse_against_stored(method, kind, key[1], meta, stored)
            if refusal is not None:
                return refusal
            self._version += 1
            new = copy.deepcopy(body)
            new["kind"] = kind.kind
            new.setdefault("metadata", {})["namespace"] = namespace
            if kind.status_subresource:
                _split_status(new, stored, subresource)
            self._default(kind, new, stored)
            new["metadata"]["resourceVersion"] = str(self._version)
            self._objects[kind.plural][key] = new
            self._publish(_Event(self._version, kind.plural, "MODIFIED" if stored else "ADDED", stored, new))
            shown = _as_event_object(kind, new)
        return web.json_response(shown, status=201 if method == "POST" else 200)

    def _delete(self, kind: Kind, namespace: str, name: str | None, options: dict[str, Any]) -> web.Response:
        """Delete one object, honouring ``DeleteOptions.preconditions`` (resourceVersion, uid)."""
        key = (namespace, name or "")
        preconditions = options.get("preconditions") or {}
        with self._lock:
            stored = self._objects[kind.plural].get(key)
            self.writes.append(("DELETE", key[1], self._version))
            if stored is None:
                return _status(404, "NotFound", f'{kind.plural} "{key[1]}" not found')
            meta = stored["metadata"]
            for field_name in ("resourceVersion", "uid"):
                wanted = preconditions.get(field_name)
                if wanted and wanted != meta.get(field_name):
                    return _status(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural} "{key[1]}": '
                                   f"Precondition failed: {field_name.replace('resourceVersion', 'ResourceVersion')}"
                                   f" in precondition: {wanted}, in object meta: {meta.get(field_name)}")
            self._version += 1
            old = self._objects[kind.plural].pop(key)
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = str(self._version)
            self._publish(_Event(self._version, kind.plural, "DELETED", old, gone))
        return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                  "details": {"name": key[1], "kind": kind.plural}})

    def _list(self, kind: Kind, namespace: str | None, selector: Any, query: dict[str, str]) -> web.Response:
        limit = int(query.get("limit") or 0)
        with self._lock:
            if query.get("continue"):
                token = json.loads(base64.urlsafe_b64decode(query["continue"]))
                if token["rv"] < self._oldest or token["id"] not in self._snapshots:
                    return _status(410, "Expired", "The provided continue parameter is too old to display "
                                   "a consistent list result. You can start a new list without the continue "
                                   "parameter.")
                snapshot_id, version, offset = token["id"], token["rv"], token["offset"]
                items = self._snapshots[snapshot_id]
            else:
                snapshot_id, version, offset = uuid.uuid4().hex, self._version, 0
                items = [
                    obj for (ns, _), obj in sorted(self._objects[kind.plural].items())
                    if namespace in (None, ns) and matches(selector, obj)
                ]
            page = items[offset:offset + limit] if limit else items[offset:]
            meta: dict[str, Any] = {"resourceVersion": str(version)}
            if limit and offset + limit < len(items):
                self._snapshots[snapshot_id] = items
                meta["continue"] = base64.urlsafe_b64encode(json.dumps(
                    {"rv": version, "id": snapshot_id, "offset": offset + limit}).encode()).decode()
                meta["remainingItemCount"] = len(items) - offset - limit
        body = {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": meta,
            "items": [_as_item(kind, obj) for obj in page],
        }
        return web.json_response(body)

    async def _watch(
        self, request: web.Request, kind: Kind, namespace: str | None, selector: Any
    ) -> web.StreamResponse:
        query = request.query
        since = query.get("resourceVersion", "")
        deadline = self._loop.time() + int(query.get("timeoutSeconds") or 3600)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        watcher = _Watcher(kind.plural, namespace, selector)
        with self._lock:
            expired = since not in ("", "0") and int(since) < self._oldest
            if not expired:
                backlog = self._backlog(kind, watcher, since)
                self._watchers.add(watcher)
                self._opened[kind.plural] += 1
        if expired and self.gone_as_status:
            return _status(410, "Expired", f"too old resource version: {since} ({self._oldest})")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            if expired:
                await _send(response, _gone_event(since, self._oldest))
                return response
            for event in backlog:
                await _send(response, event)
            await self._stream(request, response, kind, watcher, deadline, bookmarks)
        except ConnectionError:
            pass  # the client went away
        finally:
            with self._lock:
                self._watchers.discard(watcher)
        return response

    def _backlog(self, kind: Kind, watcher: _Watcher, since: str) -> list[dict[str, Any]]:
        """Under the lock: the events a new watch starts with."""
        if since in ("", "0"):
            return [
                {"type": "ADDED", "object": _as_event_object(kind, obj)}
                for (ns, _), obj in sorted(self._objects[kind.plural].items())
                if watcher.namespace in (None, ns) and matches(watcher.selector, obj)
            ]
        return [
            shown for event in self._events
            if event.version > int(since) and event.plural == kind.plural
            and (shown := _for_watcher(kind, watcher, event)) is not None
        ]

    async def _stream(
        self, request: web.Request, response: web.StreamResponse, kind: Kind, watcher: _Watcher,
        deadline: float, bookmarks: bool,
    ) -> None:
        while True:
            timeout = min(self.bookmark_interval, deadline - self._loop.time())
            if timeout <= 0 or request.transport is None or request.transport.is_closing():
                return
            deadline = await self._wait_for_wake(watcher, timeout, deadline)
            taken = self._take_pending(watcher)
            if taken is None:
                continue
            events, version = taken
            for event in events:
                if (shown := _for_watcher(kind, watcher, event)) is not None:
                    await _send(response, shown)
            if watcher.end == "expire":
                await _send(response, _gone_event(str(version), self._oldest))
            if watcher.end is not None:
                return
            if bookmarks and not events:
                await _send(response, {"type": "BOOKMARK", "object": {
                    "kind": kind.kind, "apiVersion": kind.api_version,
                    "metadata": {"resourceVersion": str(version)},
                }})

    async def _wait_for_wake(self, watcher: _Watcher, seconds: float, deadline: float) -> float:
        """Wait up to ``seconds`` for an event for ``watcher``; while black-holed, wait for the
        server to answer again. Returns the stream's deadline, moved past a black-holed spell."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(watcher.wake.wait(), seconds)
        if not self._answering.is_set():
            await self._answering.wait()  # black-holed: silent, and never ended
            deadline = max(deadline, self._loop.time() + self.bookmark_interval)
        watcher.wake.clear()
        return deadline

    def _take_pending(self, watcher: _Watcher) -> tuple[list[_Event], int] | None:
        """The events queued for ``watcher`` and the version the stream has then reached, or
        ``None`` while events are held; a watch being ended gets no more events."""
        with self._lock:
            if watcher.end is not None:
                watcher.pending.clear()
            if self._held and watcher.end is None:
                return None
            events = list(watcher.pending)
            watcher.pending.clear()
            return events, self._version  # everything up to here is in `events` or sent


def _route(path: str) -> tuple[Kind, str | None] | None:
    """``(kind, namespace or None)`` for a collection path, or ``None``."""
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"]:
        rest, group, version = parts[2:], "", "v1"
    elif len(parts) >= 3 and parts[0] == "apis":
        rest, group, version = parts[3:], parts[1], parts[2]
    else:
        return None
    namespace = None
    if len(rest) == 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    kind = KINDS.get(rest[0]) if len(rest) == 1 else None
    if kind is None or (kind.group, kind.version) != (group, version):
        return None
    return kind, namespace


def _object_route(path: str) -> tuple[Kind, str, str, str | None] | None:
    """``(kind, namespace, name, subresource or None)`` for the path of one namespaced
    object (``/api/v1/namespaces/NS/PLURAL/NAME`` or ``/apis/G/V/namespaces/NS/PLURAL/NAME``,
    optionally ``/status``), or ``None``."""
    parts = path.strip("/").split("/")
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if len(rest) not in (4, 5) or rest[0] != "namespaces":
        return None
    kind = KINDS.get(rest[2])
    if kind is None or (kind.group, kind.version) != (group, version):
        return None
    return kind, rest[1], rest[3], rest[4] if len(rest) == 5 else None


def _for_watcher(kind: Kind, watcher: _Watcher, event: _Event) -> dict[str, Any] | None:
    """How ``event`` shows on ``watcher``'s stream (selector transitions included), or ``None``."""
    obj = event.new or event.old
    assert obj is not None
    if watcher.namespace not in (None, obj["metadata"]["namespace"]):
        return None
    before = matches(watcher.selector, event.old) and event.type != "ADDED"
    after = matches(watcher.selector, event.new) and event.type != "DELETED"
    if before and after:
        shown = "MODIFIED"
    elif after:
        shown = "ADDED"
    elif before:
        shown = "DELETED"
    else:
        return None
    return {"type": shown, "object": _as_event_object(kind, obj)}


def _as_item(kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
    """A list item: the real server drops kind/apiVersion from built-in kinds' items."""
    if not kind.builtin:
        return obj
    return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}


def _as_event_object(kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
    return {**obj, "kind": kind.kind, "apiVersion": kind.api_version}


_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _invalid(kind: Kind, body: dict[str, Any]) -> str | None:
    """What the real API server would refuse in ``body`` (422), or ``None``: a name that is
    not a DNS subdomain, a label value that is not valid, and for DNSEndpoint what its
    CRD's schema says (``spec.endpoints[]`` of ``dnsName``, ``recordType``, ``targets``,
    ``recordTTL``, ``labels``, ``setIdentifier``, ``providerSpecific``)."""
    invalid = _invalid_metadata(body.get("metadata") or {})
    if invalid is None and kind.kind == "DNSEndpoint":
        invalid = _invalid_endpoints((body.get("spec") or {}).get("endpoints") or [])
    return invalid


def _invalid_metadata(meta: dict[str, Any]) -> str | None:
    name = meta.get("name", "")
    if not isinstance(name, str) or len(name) > 253 or not _SUBDOMAIN.fullmatch(name):
        return f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower case " \
               "alphanumeric characters, '-' or '.'"
    for value in (meta.get("labels") or {}).values():
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            return f"metadata.labels: Invalid value: {value!r}: a valid label must be 63 characters or less"
    return None


_ENDPOINT_FIELDS: dict[str, type] = {"dnsName": str, "recordType": str, "targets": list, "recordTTL": int,
                                     "labels": dict, "setIdentifier": str, "providerSpecific": list}
"""The fields of a DNSEndpoint's ``spec.endpoints[]`` in its CRD's schema, and their types."""


def _invalid_endpoints(endpoints: Any) -> str | None:
    if not isinstance(endpoints, list):
        return "spec.endpoints: Invalid value: must be of type array"
    for i, endpoint in enumerate(endpoints):
        invalid = _invalid_endpoint(f"spec.endpoints[{i}]", endpoint)
        if invalid is not None:
            return invalid
    return None


def _invalid_endpoint(path: str, endpoint: Any) -> str | None:
    """What the schema refuses in one endpoint, the one at ``path``, or ``None``."""
    if not isinstance(endpoint, dict):
        return f"{path}: Invalid value: must be of type object"
    for field_name, value in endpoint.items():
        wanted = _ENDPOINT_FIELDS.get(field_name)
        if wanted is None:
            return f'{path}: unknown field "{field_name}"'
        if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)):
            return f"{path}.{field_name}: Invalid value: must be of type {wanted.__name__}"
    if not all(isinstance(t, str) for t in endpoint.get("targets") or []):
        return f"{path}.targets: Invalid value: must be strings"
    return None


def _refuse_body(kind: Kind, namespace: str, name: str | None, body: dict[str, Any]) -> web.Response | None:
    """The answer to a create or replace whose body alone is wrong (400, 422), or ``None``."""
    meta = body.get("metadata") or {}
    mismatch = (meta.get("namespace", namespace) != namespace or body.get("kind", kind.kind) != kind.kind
                or not meta.get("name") or (name is not None and meta["name"] != name))
    if mismatch:
        return _status(400, "BadRequest", "the name, namespace or kind of the body does not match the URL")
    if not all(isinstance(v, str) for v in (body.get("data") or {}).values()):
        return _status(422, "Invalid", f'{kind.kind} "{meta.get("name")}" is invalid: data values must be strings')
    invalid = _invalid(kind, body)
    if invalid is not None:
        return _status(422, "Invalid", f'{kind.kind} "{meta.get("name")}" is invalid: {invalid}')
    return None


def _refuse_against_stored(method: str, kind: Kind, name: str, meta: dict[str, Any],
                           stored: dict[str, Any] | None) -> web.Response | None:
    """The answer to a create (POST) or replace (PUT) that the stored object ``stored`` refuses
    (409 exists or conflict, 404, 400), or ``None``."""
    if method == "POST" and stored is not None:
        return _status(409, "AlreadyExists", f'{kind.plural} "{name}" already exists')
    if method != "POST" and stored is None:
        return _status(404, "NotFound", f'{kind.plural} "{name}" not found')
    if method == "POST" and meta.get("resourceVersion"):
        return _status(400, "BadRequest", "resourceVersion should not be set on objects to be created")
    wanted = meta.get("resourceVersion")
    if method == "PUT" and wanted and stored is not None and wanted != stored["metadata"]["resourceVersion"]:
        return _status(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural} "{name}": '
                       "the object has been modified; please apply your changes to the latest version "
                       "and try again")
    return None


def _split_status(new: dict[str, Any], stored: dict[str, Any] | None, subresource: str | None) -> None:
    """For a kind with a status subresource: a write of the object keeps the stored status
    and bumps ``metadata.generation`` when ``spec`` changed; a write of ``status`` keeps
    everything else as stored."""
    old = stored or {}
    meta = new.setdefault("metadata", {})
    if subresource == "status":
        status = new.get("status")
        new.clear()
        new.update(copy.deepcopy(old))
        new["status"] = status if status is not None else {}
        return
    new["status"] = copy.deepcopy(old.get("status", {}))
    generation = int(old.get("metadata", {}).get("generation", 0))
    meta["generation"] = generation + 1 if stored is None or new.get("spec") != old.get("spec") else generation


def _gone_event(since: str, oldest: int) -> dict[str, Any]:
    return {"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"too old resource version: {since} ({oldest})", "reason": "Expired", "code": 410,
    }}


async def _send(response: web.StreamResponse, event: dict[str, Any]) -> None:
    await response.write(json.dumps(event).encode() + b"\n")


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": message, "reason": reason, "code": code},
        status=code,
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
