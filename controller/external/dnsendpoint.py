"""The ``dnsendpoint`` provider: ExternalDNS's ``DNSEndpoint`` objects in one member cluster.

ExternalDNS (kubernetes-sigs/external-dns) publishes to Route53, Cloud DNS, Azure
DNS, Cloudflare and dozens more; its CRD source (``--source=crd``) reads
``DNSEndpoint`` objects (``externaldns.k8s.io/v1alpha1``). This provider keeps one
such object per federated service in ``external.namespace`` of the cluster
``external.cluster``, and the operator's ExternalDNS does the rest
(docs/external-dns.md):

- the object ``<svc>.<ns>.<federation>`` holds ``<svc>.<ns>.<federation>.svc.<zone>``
  as an ``A`` and an ``AAAA`` endpoint (only those with addresses: ExternalDNS gives
  an endpoint without targets its ``--default-targets``), with the TTL;
- ownership is the labels :data:`MANAGED_BY` and :data:`FEDERATION_LABEL` and the
  annotation :data:`SERVICE_ANNOTATION`: an object without them is someone else's
  and is never written, nor is a name another object in the namespace already
  holds;
- every write is conditional on the ``resourceVersion`` last read (a replace
  carries it, a delete has it as a precondition), so an object changed by anyone
  in between (ExternalDNS writes ``status.observedGeneration``) gets 409 Conflict,
  which the publisher handles by looking again (:class:`PrerequisiteFailed`);
- an unready name (no shard ready) carries the label :data:`UNREADY_LABEL`.

It implements :class:`controller.external.provider.Provider` over the blocking
``kubernetes`` client, one call at a time in a worker thread, each with the
publisher's timeout. The objects are mapped onto the publisher's
:class:`NameState`: an owned object's "TXT" is the ownership marker (and the
unready mark), a foreign one's is empty.
"""

import asyncio
import ipaddress
import json
import logging
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any, TypeVar

import dns.exception
import dns.name
import kubernetes.client
import urllib3.exceptions

from controller.external.config import ExternalConfig
from controller.external.provider import UNREADY_MARK, NameChange, NameState, PrerequisiteFailed, ProviderError, marker
from feddns.records import IPAddress

# The logger keeps the name it had before the package split: it is in every log line.
log = logging.getLogger("controller.external_dnsendpoint")

GROUP, VERSION, PLURAL, KIND = "externaldns.k8s.io", "v1alpha1", "dnsendpoints", "DNSEndpoint"
API_VERSION = f"{GROUP}/{VERSION}"
MANAGED_BY = ("app.kubernetes.io/managed-by", "feddns-controller")
"""The label every object this provider writes carries (ExternalDNS's ``--label-filter``)."""
FEDERATION_LABEL = "federation.feddns.io/federation"
"""The label naming the object's federation: two federations can share a namespace."""
SERVICE_ANNOTATION = "federation.feddns.io/service"
"""``<ns>/<svc>``: the federated service an object publishes."""
UNREADY_LABEL = "federation.feddns.io/stale"
"""``"true"`` while no shard of the service is ready (the addresses are the last ones).

Its key keeps the word "stale" it was published with, for the selectors and alerts
that already match it (:data:`controller.external.provider.UNREADY_MARK` likewise)."""
PAGE_SIZE = 500

_T = TypeVar("_T")
Connect = Callable[[], kubernetes.client.ApiClient]


class DnsEndpointProvider:
    """Keeps DNSEndpoint objects in ``config.namespace`` of the cluster ``connect`` reaches.

    ``federation`` is F of the names; ``timeout`` (seconds) bounds each API call.
    Every method raises :class:`ProviderError` with reason ``unreachable``,
    ``timeout``, ``forbidden``, ``unauthorized``, ``no-crd`` (the CRD is not
    installed), ``invalid`` (422) or ``http-<status>``.
    """

    def __init__(self, config: ExternalConfig, federation: str, connect: Connect, timeout: float = 5.0) -> None:
        assert config.cluster is not None and config.namespace is not None, "a dnsendpoint config"
        self._config = config
        self._federation = federation
        self._namespace = config.namespace
        self._connect = connect
        self._timeout = timeout
        self._suffix = dns.name.from_text(f"{federation}.svc.{config.zone}")
        self._api: kubernetes.client.CustomObjectsApi | None = None
        self._seen: dict[dns.name.Name, dict[str, Any]] = {}
        """Our objects as last read or written, by the name they publish (their resourceVersion)."""
        self._claimed: dict[dns.name.Name, str] = {}
        """Names below the suffix that other objects in the namespace publish (as last listed)."""

    # -- Provider --

    async def read_names(self, suffix: dns.name.Name) -> dict[dns.name.Name, NameState]:
        """Every name below ``suffix`` that an object in the namespace publishes, ours
        (with the ownership marker) and others' (without)."""
        objects = await self._call(self._list, "list of DNSEndpoints")
        self._seen, self._claimed = {}, {}
        names: dict[dns.name.Name, NameState] = {}
        names.update((name, state) for obj in objects for name, state in self._states(obj)
                     if name.is_subdomain(suffix) and name != suffix)
        return names

    async def lookup(self, name: dns.name.Name) -> NameState | None:
        """What publishes ``name`` now: our object, another object in the namespace, or nothing."""
        obj = await self._call(lambda api: self._get(api, self._object_name(name)), f"read of {name}")
        if obj is not None:
            states = dict(self._states(obj))
            if name in states:
                return states[name]
        self._seen.pop(name, None)
        await self.read_names(self._suffix)  # another object may publish the name
        claimer = self._claimed.get(name)
        return NameState() if claimer is not None else None

    async def apply(self, change: NameChange) -> None:
        """Create, replace or delete the object of ``change.name``, conditionally."""
        name = change.name
        if change.prior is None and name in self._claimed:
            raise PrerequisiteFailed(f"{name} is published by DNSEndpoint {self._namespace}/{self._claimed[name]}")
        seen = self._seen.get(name)
        if change.prior is not None and seen is None:
            raise PrerequisiteFailed(f"{name}: its DNSEndpoint has not been read")
        if not change.addresses:
            assert seen is not None
            await self._call(lambda api: self._delete(api, seen), f"delete of {name}", conditional=True)
            self._seen.pop(name, None)
            return
        body = self._body(change, seen)
        write = self._replace if seen is not None else self._create
        self._seen[name] = await self._call(lambda api: write(api, body), f"write of {name}", conditional=True)

    # -- objects --

    def _object_name(self, name: dns.name.Name) -> str:
        """``<svc>.<ns>.<federation>`` for ``<svc>.<ns>.<federation>.svc.<zone>``."""
        service, namespace = (label.decode("ascii") for label in name.relativize(self._suffix).labels)
        return f"{service}.{namespace}.{self._federation}"

    def _body(self, change: NameChange, seen: dict[str, Any] | None) -> dict[str, Any]:
        """The object for ``change``: what was read, with our labels, annotation and spec."""
        service, namespace = (label.decode("ascii") for label in change.name.relativize(self._suffix).labels)
        meta = dict((seen or {}).get("metadata") or {})  # what others keep there (finalizers...) stays
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != UNREADY_LABEL}
        labels.update({MANAGED_BY[0]: MANAGED_BY[1], FEDERATION_LABEL: self._federation})
        if change.unready:
            labels[UNREADY_LABEL] = "true"
        annotations = {**(meta.get("annotations") or {}), SERVICE_ANNOTATION: f"{namespace}/{service}"}
        metadata = {**meta, "name": self._object_name(change.name), "namespace": self._namespace,
                    "labels": labels, "annotations": annotations}
        dns_name = change.name.to_text(omit_final_dot=True)
        endpoints = []
        for record_type, version in (("A", 4), ("AAAA", 6)):
            targets = sorted((a for a in change.addresses if a.version == version), key=lambda a: a.packed)
            if targets:
                endpoints.append({"dnsName": dns_name, "recordType": record_type,
                                  "targets": [str(a) for a in targets], "recordTTL": change.ttl})
        return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": {"endpoints": endpoints}}

    def _states(self, obj: dict[str, Any]) -> Iterator[tuple[dns.name.Name, NameState]]:
        """The names ``obj`` publishes with their state; ours are remembered in ``_seen``,
        others' in ``_claimed``."""
        meta = obj.get("metadata") or {}
        endpoints = (obj.get("spec") or {}).get("endpoints") or []
        by_name: dict[dns.name.Name, list[dict[str, Any]]] = {}
        for endpoint in endpoints if isinstance(endpoints, list) else []:
            try:
                by_name.setdefault(dns.name.from_text(str(endpoint["dnsName"])), []).append(endpoint)
            except (KeyError, TypeError, dns.exception.DNSException):
                continue
        owned = self._owned_name(meta)
        for name, items in by_name.items():
            addresses, ttls = _addresses(items)
            if name == owned:
                labels = meta.get("labels") or {}
                txt = {(self._marker(name),)} | ({(UNREADY_MARK,)} if labels.get(UNREADY_LABEL) == "true" else set())
                self._seen[name] = obj
                yield name, NameState(frozenset(addresses), min(ttls) if ttls else None, frozenset(txt))
            else:
                self._claimed[name] = str(meta.get("name"))
                yield name, NameState(frozenset(addresses), min(ttls) if ttls else None)

    def _owned_name(self, meta: dict[str, Any]) -> dns.name.Name | None:
        """The name an object of ours publishes (by its labels and annotation), else ``None``."""
        labels = meta.get("labels") or {}
        if labels.get(MANAGED_BY[0]) != MANAGED_BY[1] or labels.get(FEDERATION_LABEL) != self._federation:
            return None
        namespace, _, service = str((meta.get("annotations") or {}).get(SERVICE_ANNOTATION, "")).partition("/")
        try:
            name = dns.name.from_text(service, dns.name.from_text(namespace, self._suffix))
        except dns.exception.DNSException:
            return None
        return name if service and meta.get("name") == self._object_name(name) else None

    def _marker(self, name: dns.name.Name) -> str:
        service, namespace = (label.decode("ascii") for label in name.relativize(self._suffix).labels)
        return marker(self._federation, namespace, service)

    # -- the API --

    def _list(self, api: kubernetes.client.CustomObjectsApi) -> list[dict[str, Any]]:
        objects: list[dict[str, Any]] = []
        token = None
        while True:
            page: Any = api.list_namespaced_custom_object(
                GROUP, VERSION, self._namespace, PLURAL, limit=PAGE_SIZE, _continue=token,
                _request_timeout=self._timeout)
            objects.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return objects

    def _get(self, api: kubernetes.client.CustomObjectsApi, object_name: str) -> dict[str, Any] | None:
        try:
            obj: Any = api.get_namespaced_custom_object(
                GROUP, VERSION, self._namespace, PLURAL, object_name, _request_timeout=self._timeout)
        except kubernetes.client.ApiException as exc:
            if exc.status == HTTPStatus.NOT_FOUND and _is_object_missing(exc):
                return None
            raise
        return dict(obj)

    def _create(self, api: kubernetes.client.CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
        created: Any = api.create_namespaced_custom_object(
            GROUP, VERSION, self._namespace, PLURAL, body, _request_timeout=self._timeout)
        return dict(created)

    def _replace(self, api: kubernetes.client.CustomObjectsApi, body: dict[str, Any]) -> dict[str, Any]:
        replaced: Any = api.replace_namespaced_custom_object(
            GROUP, VERSION, self._namespace, PLURAL, body["metadata"]["name"], body, _request_timeout=self._timeout)
        return dict(replaced)

    def _delete(self, api: kubernetes.client.CustomObjectsApi, seen: dict[str, Any]) -> None:
        meta = seen["metadata"]
        options = kubernetes.client.V1DeleteOptions(preconditions=kubernetes.client.V1Preconditions(
            resource_version=meta["resourceVersion"], uid=meta.get("uid")))
        api.delete_namespaced_custom_object(GROUP, VERSION, self._namespace, PLURAL, meta["name"], body=options,
                                            _request_timeout=self._timeout)

    async def _call(self, call: Callable[[kubernetes.client.CustomObjectsApi], _T], what: str,
                    conditional: bool = False) -> _T:
        """Run ``call`` in a worker thread, turning failures into :class:`ProviderError`
        (409, and 404 of a write, into :class:`PrerequisiteFailed` when ``conditional``)."""
        where = f"cluster {self._config.cluster}"
        try:
            return await asyncio.to_thread(self._run, call)
        except kubernetes.client.ApiException as exc:
            status, reason = exc.status or 0, _reason(exc)
            missing = status == HTTPStatus.NOT_FOUND and _is_object_missing(exc)
            if conditional and (status == HTTPStatus.CONFLICT or missing):
                raise PrerequisiteFailed(f"{what}: {reason} (the object changed)") from None
            raise _api_error(what, where, status, reason) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._api = None  # a new client next time (credentials re-read, new connections)
            # NewConnectionError derives from ConnectTimeoutError: a refused connection is no timeout
            timed_out = (isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError))
                         and not isinstance(exc, urllib3.exceptions.NewConnectionError))
            text = f"no answer within {self._timeout:g} s" if timed_out else f"cannot reach it: {_cause(exc)}"
            raise ProviderError(f"{what}: {where}: {text}", "timeout" if timed_out else "unreachable",
                                whole_server=True) from None

    def _run(self, call: Callable[[kubernetes.client.CustomObjectsApi], _T]) -> _T:
        if self._api is None:
            self._api = kubernetes.client.CustomObjectsApi(self._connect())
        return call(self._api)


def _addresses(endpoints: list[dict[str, Any]]) -> tuple[set[IPAddress], list[int]]:
    """The A and AAAA targets of ``endpoints`` and their TTLs (other record types ignored)."""
    addresses: set[IPAddress] = set()
    ttls = []
    for endpoint in endpoints:
        if endpoint.get("recordType") not in ("A", "AAAA"):
            continue
        for target in endpoint.get("targets") or []:
            try:
                addresses.add(ipaddress.ip_address(str(target)))
            except ValueError:
                continue
        if isinstance(endpoint.get("recordTTL"), int):
            ttls.append(endpoint["recordTTL"])
    return addresses, ttls


def _reason(exc: kubernetes.client.ApiException) -> str:
    """The API server's message (its ``Status`` body), else the HTTP reason."""
    try:
        message = json.loads(exc.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or exc.reason or exc.status)


def _is_object_missing(exc: kubernetes.client.ApiException) -> bool:
    """A 404 about the object (its ``Status`` names the kind), not about the resource
    (the CRD not installed: the path itself is unknown)."""
    return "dnsendpoints" in _reason(exc) and "could not find the requested resource" not in _reason(exc)


def _api_error(what: str, where: str, status: int, reason: str) -> ProviderError:
    if status == HTTPStatus.NOT_FOUND:
        return ProviderError(f"{what}: {where} does not serve {PLURAL}.{GROUP}/{VERSION}: install ExternalDNS's "
                             f"DNSEndpoint CRD ({reason})", "no-crd", whole_server=True)
    known: dict[int, str] = {HTTPStatus.UNAUTHORIZED: "unauthorized", HTTPStatus.FORBIDDEN: "forbidden",
             HTTPStatus.UNPROCESSABLE_ENTITY: "invalid"}
    return ProviderError(f"{what}: {where}: HTTP {status}: {reason}", known.get(status, f"http-{status}"),
                         whole_server=status in (HTTPStatus.UNAUTHORIZED, HTTPStatus.FORBIDDEN)
                         or status >= HTTPStatus.INTERNAL_SERVER_ERROR)


def _cause(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc or type(exc).__name__)
