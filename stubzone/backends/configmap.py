"""One ConfigMap, read and changed through the Kubernetes API with the ``kubernetes`` client.

Shared by the ``coredns``, ``coredns-custom`` and ``kube-dns`` backends; :class:`ObjectStore`, the
part that is not about ConfigMaps, by the ``openshift`` backend too (a ``DNS`` object). A change is
the API's optimistic concurrency (Kubernetes API concepts, "Resource versions";
``metadata.resourceVersion``):

1. ``GET`` the ConfigMap (404: it does not exist yet);
2. apply the change to a copy of its ``data``; when nothing differs, stop;
3. ``PUT`` the whole object back with the ``resourceVersion`` read, or
   ``POST`` it when it did not exist (unless it belongs to someone else, the
   platform or an operator: then the change answers 503 saying so);
4. on ``409 Conflict`` (someone wrote in between), ``409 AlreadyExists``
   (someone created it in between) or ``404`` (someone deleted it in
   between), start again from 1, so their change is kept and ours applied on
   top of it.

Only the keys the change touches differ; every other key, label and
annotation goes back as read. The client is synchronous; each call runs in a
worker thread, and the whole change (its turn, the reads, the writes, the
backoffs) ends within one ``--backend-timeout`` (:class:`Deadline`): the
thread gives each HTTP request the time left and starts no write after it.
urllib3's own retries are off: a PUT is never re-sent behind our back, so a
dropped connection after a write is reported as "may have been applied", and
a refused connection as "nothing changed".
"""

import asyncio
import copy
import json
import logging
import time
from collections.abc import Callable, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any, Generic, TypeVar

import kubernetes.client
import kubernetes.config
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from feddns import names
from feddns.backoff import Backoff
from feddns.errors import ConfigError
from feddns.kubeapi import load_configuration
from stubzone.backends import BackendUnavailable, Deadline
from stubzone.model import Nameserver, StubDomains

log = logging.getLogger(__name__)

CONFLICT_RETRIES = 10
"""How often a change is read again and redone after a 409 before the request answers 503."""
MAX_NAME = 253
"""Characters of a ConfigMap name at the most (a DNS subdomain, RFC 1123)."""
BACKOFF_INITIAL = 0.01
BACKOFF_MAX = 0.5
"""Seconds of the backoff between conflicting attempts (:class:`feddns.backoff.Backoff`), so that two
replicas that collided do not collide again."""

Data = dict[str, str]
View = TypeVar("View")
"""The part of an object that a change sees and returns: a ConfigMap's ``data``, a ``DNS``'s ``spec.servers``."""


def parse_reference(text: str) -> tuple[str, str]:
    """``NS/NAME`` of ``--configmap`` to ``(namespace, name)``; raises :class:`ConfigError`."""
    namespace, slash, name = text.partition("/")
    if not slash or not names.is_label(namespace) or not _is_subdomain(name):
        raise ConfigError(f"--configmap {text!r} must be NAMESPACE/NAME (a namespace and a ConfigMap name, lowercase)")
    return namespace, name


def _is_subdomain(name: str) -> bool:
    return 0 < len(name) <= MAX_NAME and all(names.is_label(label) for label in name.split("."))


def client_configuration(kubeconfig: Path | None, context: str | None) -> kubernetes.client.Configuration:
    """The API server and credentials: ``kubeconfig`` (and ``context``), or the pod's service account.

    Raises :class:`ConfigError` naming the flag when neither can be loaded.
    """
    configuration = kubernetes.client.Configuration()
    configuration.retries = False
    load_configuration(kubernetes.config, configuration, kubeconfig, context)
    return configuration


class ObjectStore(Generic[View]):
    """One object of the API server, read and changed with a ``resourceVersion`` guard (the module doc).

    A subclass says which object (``where``, ``_read``, ``_put``, ``_post``) and which part of it a
    change sees (``view``, ``with_view``): a ConfigMap's ``data``, a ``DNS``'s ``spec.servers``.
    ``timeout`` (seconds) bounds each read or change, every HTTP request of it included. ``missing``:
    ``None`` when a missing object is created by the first change; otherwise the object belongs to
    someone else (a platform, an operator), is never created, and a change while it is missing
    answers :class:`BackendUnavailable` (nothing sent) with this text after its name. Methods raise
    :class:`BackendUnavailable` when the API server cannot be reached, refuses (401, 403, 422...), or
    the object kept changing through :data:`CONFLICT_RETRIES` attempts.
    """

    def __init__(self, configuration: kubernetes.client.Configuration, timeout: float,
                 missing: str | None = None) -> None:
        self.timeout, self.missing = timeout, missing
        self.configuration = configuration
        self._api_client = kubernetes.client.ApiClient(configuration)
        # Changes from this process take turns; resourceVersion orders them against other writers.
        self._writing = asyncio.Lock()

    @property
    def where(self) -> str:
        raise NotImplementedError

    def view(self, obj: dict[str, Any] | None) -> View:
        """The part of ``obj`` a change sees (its empty value when ``obj`` is ``None``)."""
        raise NotImplementedError

    def with_view(self, obj: dict[str, Any], view: View) -> dict[str, Any]:
        """A copy of ``obj`` whose part is ``view``, everything else as read."""
        raise NotImplementedError

    async def read(self) -> tuple[View, str | None]:
        """``(view, resourceVersion)``; ``(empty view, None)`` when the object does not exist."""
        obj = await asyncio.to_thread(self._get, Deadline(self.timeout))
        return self.view(obj), (str(obj["metadata"].get("resourceVersion")) if obj is not None else None)

    async def update(self, change: Callable[[View], View]) -> tuple[View, View]:
        """Apply ``change`` as described in the module doc; returns ``(view before, view after)``.

        ``change`` gets a copy of the view and returns the new one. Exceptions raised by ``change``
        propagate, and nothing is written then.
        """
        deadline = Deadline(self.timeout)
        async with deadline.holding(self._writing, self.where):
            return await asyncio.to_thread(self._update, change, deadline)

    def close(self) -> None:
        self._api_client.close()  # type: ignore[no-untyped-call]

    # -- in the worker thread ----------------------------------------------------------------

    def _update(self, change: Callable[[View], View], deadline: Deadline) -> tuple[View, View]:
        retry = Backoff(BACKOFF_INITIAL, BACKOFF_MAX)
        for _ in range(CONFLICT_RETRIES):
            obj = self._get(deadline)
            if obj is None and self.missing is not None:
                raise BackendUnavailable(f"{self.where} does not exist: {self.missing}")
            before = self.view(obj)
            after = change(copy.deepcopy(before))
            if after == before:
                return before, after
            try:
                if obj is None:
                    self._call(True, deadline, self._post, self.with_view({}, after))
                else:
                    self._call(True, deadline, self._put, self.with_view(obj, after))
                return before, after
            except ApiException as exc:
                if exc.status not in (404, 409):  # 404: deleted since the GET; create it again
                    raise self._refused(exc, write=True) from exc
                log.info("%s: %s; reading it again", self.where, _status_message(exc))
            time.sleep(min(retry.next(), deadline.remaining()))  # in the worker thread
        raise BackendUnavailable(f"{self.where} kept changing under concurrent writers ({CONFLICT_RETRIES} attempts)")

    def _read(self, **request: Any) -> Any:
        """The API call that reads the object (``request``: the client's ``_preload_content`` and timeout)."""
        raise NotImplementedError

    def _put(self, body: dict[str, Any], **request: Any) -> Any:
        """The API call that replaces the object with ``body`` (its ``resourceVersion`` the one read)."""
        raise NotImplementedError

    def _post(self, body: dict[str, Any], **request: Any) -> Any:
        """The API call that creates the object; only reached when ``missing`` is ``None``."""
        raise NotImplementedError

    def _get(self, deadline: Deadline) -> dict[str, Any] | None:
        try:
            body = self._call(False, deadline, self._read)
        except ApiException as exc:
            if exc.status == HTTPStatus.NOT_FOUND:
                return None
            raise self._refused(exc, write=False) from exc
        try:
            obj: dict[str, Any] = json.loads(body)
        except ValueError as exc:
            raise BackendUnavailable(f"the API server answered {self.where} with something not JSON") from exc
        return obj

    def _call(self, write: bool, deadline: Deadline, method: Callable[..., Any], *args: Any) -> bytes:
        """The body ``method(*args)`` answers, read whole within the time left (its connection goes back to
        the pool); transport errors become :class:`BackendUnavailable`, API refusals stay ``ApiException``.

        Past the deadline nothing is sent (:class:`BackendUnavailable`, not applied).
        """
        timeout = deadline.remaining()
        try:
            response = method(*args, _preload_content=False, _request_timeout=timeout)
            try:
                return bytes(response.data)
            finally:
                response.release_conn()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _unreachable(self.where, exc, write) from exc

    def _refused(self, exc: ApiException, *, write: bool) -> BackendUnavailable:
        """A refusal by the API server; a write answered 5xx may still have been committed."""
        return BackendUnavailable(f"the API server answered {exc.status} for {self.where}: {_status_message(exc)}",
                                  may_have_applied=write and (exc.status or 0) >= HTTPStatus.INTERNAL_SERVER_ERROR)


class ConfigMapStore(ObjectStore[Data]):
    """ConfigMap ``namespace/name`` on the API server of ``configuration``; a change sees its ``data``.

    ``missing``: see :class:`ObjectStore` (``None``: the first write creates the ConfigMap).
    """

    def __init__(self, namespace: str, name: str, configuration: kubernetes.client.Configuration,
                 timeout: float, missing: str | None = None) -> None:
        super().__init__(configuration, timeout, missing)
        self.namespace, self.name = namespace, name
        self._api = kubernetes.client.CoreV1Api(self._api_client)

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    def view(self, obj: dict[str, Any] | None) -> Data:
        return dict((obj or {}).get("data") or {})

    def with_view(self, obj: dict[str, Any], view: Data) -> dict[str, Any]:
        body = copy.deepcopy(obj) or {"apiVersion": "v1", "kind": "ConfigMap",
                                      "metadata": {"name": self.name, "namespace": self.namespace}}
        body["data"] = view
        return body

    def _read(self, **request: Any) -> Any:
        return self._api.read_namespaced_config_map(self.name, self.namespace, **request)

    def _put(self, body: Any, **request: Any) -> Any:  # Any: the client takes a dict for its V1ConfigMap
        return self._api.replace_namespaced_config_map(self.name, self.namespace, body, **request)

    def _post(self, body: Any, **request: Any) -> Any:
        return self._api.create_namespaced_config_map(self.namespace, body, **request)


class ObjectBackend(Generic[View]):
    """What the backends kept in one API object share: the store, the stub domains, ``ping`` and ``close``."""

    def __init__(self, store: ObjectStore[View], domains: StubDomains) -> None:
        self.store = store
        self.domains = domains
        self.where = store.where

    async def ping(self) -> str:
        """The object's ``resourceVersion``, or that it does not exist (yet, when the endpoint creates it)."""
        _, version = await self.store.read()
        if version:
            return f"{self.where} resourceVersion {version}"
        return f"{self.where} not created yet" if self.store.missing is None else f"{self.where} does not exist"

    async def close(self) -> None:
        """Close the API client."""
        self.store.close()

    def _nameservers(self, owner: str, values: Sequence[Any]) -> tuple[Nameserver, ...]:
        """The nameservers among ``values`` (``ip``, ``ip:port``); one that does not parse is skipped and
        logged with ``owner``, the entry it came from."""
        parsed = []
        for value in values:
            try:
                parsed.append(Nameserver.parse(str(value)))
            except ValueError as exc:
                log.warning("%s: %s of %s skipped: %s", self.where, value, owner, exc)
        return tuple(parsed)


ConfigMapBackend = ObjectBackend[Data]
"""The backends kept in one ConfigMap (``coredns``, ``coredns-custom``, ``kube-dns``)."""


_NEVER_SENT = (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError,
               ConnectionRefusedError, urllib3.exceptions.NameResolutionError)


def _unreachable(where: str, exc: BaseException, write: bool) -> BackendUnavailable:
    """Whether a failed request may have reached the server: not when the connection never opened."""
    cause = exc.reason if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason else exc
    sent = not isinstance(cause, _NEVER_SENT)
    return BackendUnavailable(f"the API server cannot be reached for {where}: {type(cause).__name__}: {cause}",
                              may_have_applied=write and sent)


def _status_message(exc: ApiException) -> str:
    """The ``message`` of the API server's ``Status`` body, else the HTTP reason."""
    try:
        status = json.loads(exc.body or "{}")
    except (ValueError, TypeError):
        status = {}
    message = status.get("message") if isinstance(status, dict) else None
    return str(message or exc.reason or "no reason")
