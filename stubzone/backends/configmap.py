"""One ConfigMap, read and changed through the Kubernetes API with the ``kubernetes`` client.

Shared by the ``coredns`` and ``kube-dns`` backends. A change is the API's
optimistic concurrency (Kubernetes API concepts, "Resource versions";
``metadata.resourceVersion``):

1. ``GET`` the ConfigMap (404: it does not exist yet);
2. apply the change to a copy of its ``data``; when nothing differs, stop;
3. ``PUT`` the whole object back with the ``resourceVersion`` read, or
   ``POST`` it when it did not exist;
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
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from feddns import names
from feddns.backoff import Backoff
from feddns.errors import ConfigError
from feddns.kubeapi import load_configuration
from stubzone.backends import BackendUnavailable, Deadline
from stubzone.model import StubDomains

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
Change = Callable[[Data], Data]
"""Gets a copy of the ConfigMap's ``data`` (empty when it does not exist), returns the new ``data``."""


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


class ConfigMapStore:
    """ConfigMap ``namespace/name`` on the API server of ``configuration``.

    ``timeout`` (seconds) bounds each read or change, every HTTP request of it included. Methods raise
    :class:`BackendUnavailable` when the API server cannot be reached, refuses
    (401, 403, 422...), or the object kept changing through
    :data:`CONFLICT_RETRIES` attempts.
    """

    def __init__(self, namespace: str, name: str, configuration: kubernetes.client.Configuration,
                 timeout: float) -> None:
        self.namespace, self.name = namespace, name
        self.timeout = timeout
        self._api_client = kubernetes.client.ApiClient(configuration)
        self._api = kubernetes.client.CoreV1Api(self._api_client)
        # Changes from this process take turns; resourceVersion orders them against other writers.
        self._writing = asyncio.Lock()

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    async def read(self) -> tuple[Data, str | None]:
        """``(data, resourceVersion)``; ``({}, None)`` when the ConfigMap does not exist."""
        obj = await asyncio.to_thread(self._get, Deadline(self.timeout))
        if obj is None:
            return {}, None
        return dict(obj.get("data") or {}), str(obj["metadata"].get("resourceVersion"))

    async def update(self, change: Change) -> tuple[Data, Data]:
        """Apply ``change`` as described in the module doc; returns ``(data before, data after)``.

        Exceptions raised by ``change`` propagate, and nothing is written then.
        """
        deadline = Deadline(self.timeout)
        async with deadline.holding(self._writing, self.where):
            return await asyncio.to_thread(self._update, change, deadline)

    def close(self) -> None:
        self._api_client.close()  # type: ignore[no-untyped-call]

    # -- in the worker thread ----------------------------------------------------------------

    def _update(self, change: Change, deadline: Deadline) -> tuple[Data, Data]:
        retry = Backoff(BACKOFF_INITIAL, BACKOFF_MAX)
        for _ in range(CONFLICT_RETRIES):
            obj = self._get(deadline)
            before = dict((obj or {}).get("data") or {})
            after = change(dict(before))
            if after == before:
                return before, after
            try:
                if obj is None:
                    self._create(after, deadline)
                else:
                    self._replace(obj, after, deadline)
                return before, after
            except ApiException as exc:
                if exc.status not in (404, 409):  # 404: deleted since the GET; create it again
                    raise self._refused(exc, write=True) from exc
                log.info("%s: %s; reading it again", self.where, _status_message(exc))
            time.sleep(min(retry.next(), deadline.remaining()))  # in the worker thread
        raise BackendUnavailable(f"{self.where} kept changing under concurrent writers ({CONFLICT_RETRIES} attempts)")

    def _get(self, deadline: Deadline) -> dict[str, Any] | None:
        try:
            body = self._call(False, deadline, self._api.read_namespaced_config_map, self.name, self.namespace)
        except ApiException as exc:
            if exc.status == HTTPStatus.NOT_FOUND:
                return None
            raise self._refused(exc, write=False) from exc
        try:
            obj: dict[str, Any] = json.loads(body)
        except ValueError as exc:
            raise BackendUnavailable(f"the API server answered {self.where} with something not JSON") from exc
        return obj

    def _replace(self, obj: dict[str, Any], data: Data, deadline: Deadline) -> None:
        body = copy.deepcopy(obj)
        body["data"] = data
        self._call(True, deadline, self._api.replace_namespaced_config_map, self.name, self.namespace, body)

    def _create(self, data: Data, deadline: Deadline) -> None:
        body = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": self.name, "namespace": self.namespace}, "data": data}
        self._call(True, deadline, self._api.create_namespaced_config_map, self.namespace, body)

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


class ConfigMapBackend:
    """What the backends kept in one ConfigMap share: the ConfigMap, the stub domains, ``ping`` and ``close``."""

    def __init__(self, store: ConfigMapStore, domains: StubDomains) -> None:
        self.store = store
        self.domains = domains
        self.where = store.where

    async def ping(self) -> str:
        """The ConfigMap's ``resourceVersion``, or that it does not exist yet."""
        _, version = await self.store.read()
        return f"{self.where} resourceVersion {version}" if version else f"{self.where} not created yet"

    async def close(self) -> None:
        """Close the API client."""
        self.store.close()


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
