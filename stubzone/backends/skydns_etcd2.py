"""``--backend skydns``: the SkyDNS stub keys in etcd's v2 key space, over plain HTTP.

Released SkyDNS images and kube2sky read and write etcd's **v2** key space,
which etcd 3.x serves when started with ``--enable-v2``; this module speaks it
as plain HTTP (``PUT``/``GET``/``DELETE /v2/keys/...``). The keys and values
are :mod:`stubzone.backends.skydns_layout`'s; :mod:`stubzone.backends.skydns_etcd3`
writes the v3 key space instead, for SkyDNS builds with ``-etcd3``
(``--skydns-etcd-api v3``).

etcd v2 has no multi-key transaction, so a change is a sequence of
compare-and-swap writes, each guarded by the ``modifiedIndex`` read just
before (``prevIndex``; ``prevExist=false`` to create). ``ns1`` is written
last, always, as the commit: when another writer committed in between, that
compare fails, the change is read again and redone. So when concurrent
writers are done, F holds exactly one writer's list, never a mix. A failure in
the middle can leave some keys written: the answer is 503 saying so, and
the client's retry (POST is idempotent) completes the change. A request's
turn and its HTTP requests all fit in one ``--backend-timeout``
(:class:`Deadline`); no write is sent after it.
"""

import asyncio
import logging
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import aiohttp

import feddns.etcd.endpoints
from feddns.errors import FeddnsError
from stubzone.backends import BackendUnavailable, Deadline
from stubzone.backends.skydns_layout import MAX_NAMESERVERS, SkyDNSLayout
from stubzone.model import Nameserver, StubZone

# The logger keeps the name of the module this one was split from: it is in every log line.
log = logging.getLogger("stubzone.backends.skydns")

CONFLICT_RETRIES = 8
"""How often a change is read again and redone when another writer changed F meanwhile."""
ETCD_UNAUTHORIZED = 110
"""etcd v2's ``errorCode`` for a request without a user it accepts (etcd ``error.EcodeUnauthorized``)."""


class CompareFailed(FeddnsError):
    """A guarded v2 write found another value than the one read (etcd error 101, 105, or 100)."""


@dataclass
class _Written:
    """Whether a write of this request was sent (so a failure after it may have been applied)."""

    any: bool = False


@dataclass(frozen=True)
class EtcdNode:
    """One v2 leaf: its value and ``modifiedIndex``."""

    value: bytes
    index: int


class SkyDNSEtcd2:
    """Reads and programs SkyDNS stub domains through etcd's v2 HTTP API.

    ``etcd``'s client URLs are each tried once per call in turn; its timeout
    (seconds) bounds each API request, every HTTP request of it included. Over
    ``https://`` the TLS files of ``etcd.access`` are used, and with a user every
    request carries HTTP basic auth (the v2 key space has users of its own,
    ``/v2/auth``); both are read again when their files change (a rotated Secret).
    """

    name = "skydns"
    max_nameservers = MAX_NAMESERVERS
    ipv6_ports = True

    def __init__(self, etcd: feddns.etcd.endpoints.EtcdEndpoints, layout: SkyDNSLayout) -> None:
        self.etcd = etcd
        self.endpoints = [str(url) for url in etcd.urls]
        self.layout = layout
        self.timeout = etcd.timeout
        self._current = 0
        self._session: aiohttp.ClientSession | None = None
        self._session_files: tuple[object, ...] = ()
        self._auth: aiohttp.BasicAuth | None = None
        # Writes from this process take turns (they are rare: clusters joining); the
        # compare-and-swap guards order writers in other processes. One lock, not one per
        # federation: a client posting many names must not grow memory.
        self._writing = asyncio.Lock()

    async def list(self) -> list[StubZone]:
        """Every federation with at least one ``ns*`` key, sorted by name."""
        _, tree = await self._get(self.layout.federations_dir, Deadline(self.timeout), recursive=True)
        return self.layout.zones({key: node.value for key, node in tree.items()})

    async def get(self, federation: str) -> StubZone | None:
        """F's zone, read from etcd, or ``None`` when F has no ``ns*`` key."""
        found = await self._read(federation, Deadline(self.timeout))
        return self.layout.zone(federation, {k: n.value for k, n in found.items()}) if found else None

    async def put(self, federation: str, nameservers: Sequence[Nameserver]) -> tuple[StubZone, bool]:
        """Make F's ``ns*`` keys exactly ``ns1..nsN`` = ``nameservers``; idempotent."""
        desired = self.layout.keys(federation, nameservers)
        deadline = Deadline(self.timeout)
        async with deadline.holding(self._writing, "etcd"):
            found = await self._converge(federation, desired, deadline)
        changed = {key: node.value for key, node in found.items()} != desired
        return self.layout.domains.zone(federation, tuple(nameservers)), changed

    async def delete(self, federation: str) -> StubZone | None:
        """Remove F's ``ns*`` keys (and its directory when that leaves it empty)."""
        deadline = Deadline(self.timeout)
        async with deadline.holding(self._writing, "etcd"):
            found = await self._converge(federation, {}, deadline)
            if found:
                try:
                    await self._remove_empty_directory(federation, deadline)
                except BackendUnavailable as exc:  # the keys are gone; an empty directory is harmless
                    log.info("directory of %s not removed: %s", federation, exc)
        return self.layout.zone(federation, {k: n.value for k, n in found.items()}) if found else None

    async def ping(self) -> str:
        """``etcd v2 index N``, read with the federations' directory."""
        index, _ = await self._get(self.layout.federations_dir, Deadline(self.timeout), recursive=False)
        return f"etcd v2 index {index}"

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- reading ---------------------------------------------------------------------------

    async def _read(self, federation: str, deadline: Deadline) -> dict[str, EtcdNode]:
        """F's ``ns*`` leaves (not deeper keys) with their indexes."""
        _, tree = await self._get(self.layout.directory(federation), deadline, recursive=False)
        return {key: node for key, node in tree.items() if self.layout.split(key) is not None}

    async def _get(self, directory: str, deadline: Deadline, *, recursive: bool) -> tuple[int, dict[str, EtcdNode]]:
        """``(etcd index, {key: EtcdNode})`` of the leaves under ``directory`` (empty when it does not exist)."""
        params = {"recursive": "true"} if recursive else {}
        status, body, index = await self._request("GET", directory, params, deadline, write=False)
        if status == HTTPStatus.NOT_FOUND:
            return index, {}
        if status != HTTPStatus.OK:
            raise BackendUnavailable(f"etcd answered GET {directory} with {status}: {_message(body, status)}")
        leaves: dict[str, EtcdNode] = {}
        _collect(body.get("node", {}), leaves)
        return index, leaves

    # -- writing ---------------------------------------------------------------------------

    async def _converge(self, federation: str, desired: dict[str, bytes], deadline: Deadline) -> dict[str, EtcdNode]:
        """Make F's ``ns*`` keys ``desired`` (see the module doc); returns what was found before."""
        commit = f"{self.layout.directory(federation)}ns1"
        written = _Written()
        for _ in range(CONFLICT_RETRIES):
            found = await self._read(federation, deadline)
            if {key: node.value for key, node in found.items()} == desired:
                return found
            try:
                await self._write(commit, found, desired, deadline, written)
                return found
            except CompareFailed:
                log.info("%s changed while it was written; reading it again", self.layout.directory(federation))
            except BackendUnavailable as exc:
                exc.may_have_applied = exc.may_have_applied or written.any
                raise
        raise BackendUnavailable(f"{self.layout.directory(federation)} kept changing under concurrent writers",
                                 may_have_applied=written.any)

    async def _write(self, commit: str, found: dict[str, EtcdNode], desired: dict[str, bytes], deadline: Deadline,
                     written: "_Written") -> None:
        """Delete the leftover keys (found, not desired) and put the changed ones, each guarded by what was
        ``found``, then the ``commit`` key (``ns1``) last; ``written.any`` turns true before the first write is sent.

        Raises :class:`CompareFailed` when a guard fails (someone wrote in between).
        """
        for key, node in found.items():
            if key not in desired and key != commit:
                written.any = True
                await self._delete(key, node.index, deadline)
        for key, value in desired.items():
            if key != commit and (key not in found or found[key].value != value):
                written.any = True
                await self._put(key, value, found.get(key), deadline)
        written.any = True
        if commit in desired:
            await self._put(commit, desired[commit], found.get(commit), deadline)
        elif commit in found:
            await self._delete(commit, found[commit].index, deadline)

    async def _put(self, key: str, value: bytes, previous: EtcdNode | None, deadline: Deadline) -> None:
        guard = {"prevIndex": str(previous.index)} if previous else {"prevExist": "false"}
        status, body, _ = await self._request("PUT", key, guard, deadline, write=True, value=value)
        _check_write(status, body, f"PUT {key}")

    async def _delete(self, key: str, index: int, deadline: Deadline) -> None:
        status, body, _ = await self._request("DELETE", key, {"prevIndex": str(index)}, deadline, write=True)
        _check_write(status, body, f"DELETE {key}")

    async def _remove_empty_directory(self, federation: str, deadline: Deadline) -> None:
        """Delete F's directory if it is empty now (etcd refuses otherwise: someone else's keys stay)."""
        status, body, _ = await self._request("DELETE", self.layout.directory(federation).rstrip("/"),
                                              {"dir": "true"}, deadline, write=True)
        if status not in (200, 403, 404):  # 403: not empty (error 108)
            log.info("directory of %s not removed: %s", federation, _message(body))

    # -- HTTP --------------------------------------------------------------------------------

    async def _request(self, method: str, key: str, params: dict[str, str], deadline: Deadline, *, write: bool,
                       value: bytes | None = None) -> tuple[int, dict[str, Any], int]:
        """``(status, JSON body, X-Etcd-Index)`` from the first endpoint that answers, within ``deadline``.

        A request that may have reached etcd (a write sent, then the connection
        dropped or timed out) is not tried on another endpoint: it raises
        :class:`BackendUnavailable` with ``may_have_applied``. Past the deadline
        nothing is sent.
        """
        failure = ""
        tries = len(self.endpoints)
        while tries > 0:
            tries -= 1
            url = f"{self.endpoints[self._current]}/v2/keys{quote(key)}"
            data = {"value": value.decode()} if value is not None else None
            timeout = aiohttp.ClientTimeout(total=deadline.remaining())
            try:
                async with self._client().request(method, url, params=params, data=data, timeout=timeout) as response:
                    body = await response.json(content_type=None)
                    index = int(response.headers.get("X-Etcd-Index", "0"))
                    return response.status, body if isinstance(body, dict) else {}, index
            except aiohttp.ClientConnectorError as exc:  # never connected: nothing sent
                failure = _describe(exc)
                if failure.startswith("TLS") and self._files_replaced():
                    tries += 1  # the same endpoint again, with the certificate the volume holds now
                    continue
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                if write:
                    raise BackendUnavailable(f"etcd {self.endpoints[self._current]}: {method} {key}: "
                                             f"{_describe(exc)}", may_have_applied=True) from exc
                failure = _describe(exc)
            log.warning("etcd %s: %s", self.endpoints[self._current], failure)
            self._current = (self._current + 1) % len(self.endpoints)
        raise BackendUnavailable(f"etcd {failure}" if failure.startswith("TLS") else
                                 f"etcd cannot be reached: {failure}")

    def _files_replaced(self) -> bool:
        """Look at the certificate and password files now, not at the next
        :data:`feddns.etcd.endpoints.FILES_CHECK_SECONDS`: True when they differ from the
        session's. A handshake that fails just after a rotation (the Secret volume swapped,
        etcd restarted to trust the new CA) is then retried once with the new files; with the
        same files it is not retried."""
        return self._session is not None and self.etcd.files.look() != self._session_files

    def _client(self) -> aiohttp.ClientSession:
        """The HTTP session; made again when the certificate or password files changed."""
        files = self.etcd.signature()
        if self._session is not None and files != self._session_files:
            log.info("etcd: the client certificate or password files changed; using the new ones")
            old, self._session = self._session, None
            asyncio.get_running_loop().create_task(old.close())
        if self._session is None:
            access = self.etcd.access
            context = access.tls.ssl_context() if access.tls is not None else None
            password = access.password()
            self._auth = aiohttp.BasicAuth(access.user, password) if access.user and password else None
            # A new connection per request: no idle keep-alive connection, dead since an etcd restart, is reused.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, ssl=context if context is not None else True),
                auth=self._auth,
            )
            self._session_files = files
        return self._session


def _collect(node: dict[str, Any], leaves: dict[str, EtcdNode]) -> None:
    """Add the leaves of a v2 ``node`` (recursively) to ``leaves``."""
    if node.get("dir"):
        for child in node.get("nodes", []):
            _collect(child, leaves)
    elif isinstance(node.get("key"), str) and isinstance(node.get("value"), str):
        leaves[node["key"]] = EtcdNode(node["value"].encode(), int(node.get("modifiedIndex", 0)))


def _check_write(status: int, body: dict[str, Any], what: str) -> None:
    """Raise :class:`CompareFailed` for a failed guard, :class:`BackendUnavailable` for any other refusal."""
    if status in (200, 201):
        return
    if body.get("errorCode") in (100, 101, 105):  # not found, compare failed, already exists
        raise CompareFailed(_message(body, status))
    raise BackendUnavailable(f"etcd refused {what} with {status}: {_message(body, status)}", may_have_applied=False)


def _message(body: dict[str, Any], status: int = 0) -> str:
    """etcd's v2 error; a 401 (error 110) says that the user or password was refused."""
    text = f"{body.get('message', 'no message')} ({body.get('cause', '')})"
    if status == HTTPStatus.UNAUTHORIZED or body.get("errorCode") == ETCD_UNAUTHORIZED:
        return f"authentication failed (--etcd-user and its password; v2 users are not v3 users): {text}"
    return text


def _describe(exc: BaseException) -> str:
    causes = [exc, getattr(exc, "os_error", None), exc.__cause__, exc.__context__]
    if any(isinstance(cause, ssl.SSLError | aiohttp.ClientSSLError) for cause in causes):
        return f"TLS handshake failed (wrong CA, or etcd refused the client certificate): {exc}"
    return str(exc) or type(exc).__name__
