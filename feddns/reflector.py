"""List, then watch, one resource of the Kubernetes API, in a thread of its own: the one reflector.

Both components that follow the API use it: the controller for each member
cluster's Services, EndpointSlices and ServiceExports (:mod:`controller.watch`
adds the cluster, the metrics and its logs), and the links webhook for the local
cluster's labelled Services (:mod:`links.shards` keeps their ports). It lives in
the core because the two components may not import each other; it imports
neither ``kubernetes`` nor ``urllib3`` (the core never does, see
:mod:`feddns.kubeapi`): the client, the list call and the response are the
shapes below, which the official client's objects have.

The protocol (Kubernetes API concepts, "Efficient detection of changes"), as
client-go's reflector does it:

1. list, in pages of :data:`PAGE_SIZE` (``limit``/``continue``); the list's
   ``metadata.resourceVersion`` is where the watch starts;
2. watch from that version with ``allowWatchBookmarks`` and ``timeoutSeconds``;
   each event, and each ``BOOKMARK``, moves the version on; when the server ends
   the watch, watch again from the last version;
3. ``410 Gone`` (as the HTTP status, as an ``ERROR`` event with code 410, or an
   expired ``continue`` token): the version is too old, list again, after a
   pause when it comes right after a list (a confused server is not spun on);
4. any other failure (connection refused or reset, a 5xx, a line that is not
   JSON): wait (:class:`feddns.backoff.Backoff`, doubling to ``backoff_max``), make a new
   client (credentials are read anew) and list again. What was delivered stays
   the sink's to keep.

Responses are read raw (``_preload_content=False``) and decoded with ``json``:
the client's ``Watch`` helper neither lists first, nor handles 410, nor
reconnects, and turns every object into a model class. Each decoded object
goes through ``shrink`` as it arrives, so that no more than one page of the
API's JSON is alive at a time. Blocking reads in a thread, rather than an
asyncio client, keep the one maintained client with its authentication plugins;
:meth:`Reflector.stop` ends a blocked read at once by shutting its socket.
"""

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Generic, Protocol, TypeVar

from feddns.backoff import Backoff
from feddns.errors import FeddnsError
from feddns.kubeapi import describe_failure, watch_lines

log = logging.getLogger(__name__)

PAGE_SIZE = 500
"""Objects per list page (``limit``), as client-go's reflector uses."""
PROGRESS_SECONDS = 5.0
"""A list that takes longer is reported (:meth:`ReflectorSink.listing`) this often."""


class Gone(FeddnsError):
    """The resource version is too old (410): list again."""


class WatchFailed(FeddnsError):
    """The server sent something other than events (an ``ERROR`` event, a bad line)."""


@dataclass(frozen=True, slots=True)
class WatchTiming:
    """How a :class:`Reflector` lists and watches, and backs off from failures. Every value is in seconds.

    An API server that stops answering without closing the connection (a black
    hole: a firewall dropping packets, a hung proxy) is noticed after
    :attr:`silence_limit` seconds at most (55 s with these defaults): the server
    must end every watch by ``watch_timeout``, so a watch silent for
    ``watch_timeout + read_slack`` is dead; a list page has ``list_timeout``.
    The defaults are the controller's (``controller.settings.Settings.watch``);
    the links webhook picks longer watches (``links.shards.SHARD_TIMING``).
    """

    watch_timeout: int = 45
    """``timeoutSeconds`` asked of the server, after which it ends the watch and it is opened again.
    client-go picks 5-10 minutes and notices a dead connection by HTTP/2 pings, which the
    Python client's HTTP/1.1 cannot send."""
    connect_timeout: float = 10.0
    """Connect timeout of every request to the API server."""
    read_slack: float = 10.0
    """Added to ``watch_timeout`` for the client's read timeout (the longest silence
    between two reads of a watch before the connection counts as dead)."""
    list_timeout: float = 30.0
    """Read timeout of one list page."""
    backoff_initial: float = 0.5
    """Nominal first wait after a failure (:class:`feddns.backoff.Backoff`: each wait is drawn from its
    upper half); doubled after each further failure, and back to this once an event or bookmark arrives."""
    backoff_max: float = 30.0
    """Longest wait between two attempts; also how often an absent optional resource is looked for."""

    @property
    def silence_limit(self) -> float:
        """The longest an unanswering API server goes unnoticed (seconds)."""
        return max(self.watch_timeout + self.read_slack, self.list_timeout, self.connect_timeout)


class ApiClient(Protocol):
    """An API client (``kubernetes.client.ApiClient``): closed after a failure, when a new one is made."""

    def close(self) -> None:
        """Close its connections."""


class Response(Protocol):
    """A response read with ``_preload_content=False``: urllib3's ``HTTPResponse``."""

    @property
    def data(self) -> bytes:
        """The whole body (a list page)."""

    def stream(self, amt: int | None = ..., decode_content: bool | None = ...) -> Iterator[bytes]:
        """The body, chunk by chunk as it arrives (a watch)."""

    def release_conn(self) -> None:
        """Give the connection back to the pool."""

    def shutdown(self) -> None:
        """Shut the socket, so that a read blocked in another thread ends at once."""


ListCall = Callable[..., Any]
"""A generated ``list_*`` method of the ``kubernetes`` client (or anything called the same way):
keyword arguments ``limit``, ``_continue``, ``watch``, ``resource_version``,
``allow_watch_bookmarks``, ``timeout_seconds``, ``label_selector``, ``field_selector``,
``_preload_content`` and ``_request_timeout``; returns a :class:`Response`, raises an
exception with the HTTP ``status`` when the server refuses."""

ApiClientT = TypeVar("ApiClientT", bound=ApiClient)


@dataclass(frozen=True, slots=True)
class ListSource(Generic[ApiClientT]):
    """What a :class:`Reflector` lists and watches, and how it reaches it."""

    connect: Callable[[], ApiClientT]
    """Makes the API client; called in the reflector's thread, and again after each failure,
    so that credentials are read anew."""
    list_call: Callable[[ApiClientT], ListCall]
    """The client's list method of the resource (across all namespaces)."""
    label_selector: str | None = None
    """Narrows the list and the watch on the server (``labelSelector``)."""
    field_selector: str | None = None
    """Narrows them by fields (``fieldSelector``): ``metadata.name=NAME`` follows one object, which RBAC
    then authorizes by ``resourceNames`` (Kubernetes RBAC docs, "Referring to resources")."""
    optional: bool = False
    """A resource the server may not have (a CRD): a 404 is listed empty, and the resource
    looked for again every ``backoff_max`` seconds."""


class ReflectorSink(Protocol):
    """Where a :class:`Reflector` delivers, from its thread.

    Objects arrive as the reflector's ``shrink`` made them, never as the API's JSON."""

    def listing(self, count: int, seconds: float) -> None:
        """A list still under way: ``count`` objects in ``seconds`` (every :data:`PROGRESS_SECONDS`)."""

    def listed(self, objects: list[Any], seconds: float) -> None:
        """A complete list, which replaces what was known; it took ``seconds``.

        An optional resource the server does not have (404) is listed empty."""

    def event(self, event_type: str, obj: Any) -> None:
        """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED``."""

    def failed(self, error: str) -> None:
        """Listing or watching failed (``error``: :func:`feddns.kubeapi.describe_failure`);
        the reflector backs off, then lists again. Called at each failure."""

    def restarted(self, reason: str) -> None:
        """The watch starts again: ``expired`` (410, listed again) or ``closed`` (the server
        ended it at ``timeoutSeconds``, resumed from its version: routine)."""


def _status(exc: BaseException) -> object:
    """The HTTP status of a refused call (``ApiException.status``), else ``None``."""
    return getattr(exc, "status", None)


class Reflector(Generic[ApiClientT]):
    """Keeps ``sink`` in step with the resource of ``source``, in a daemon thread named ``name``.

    ``shrink`` turns each decoded object into what the sink keeps, in this thread,
    as each page or event arrives. ``start()``/``stop()``.
    """

    def __init__(
        self,
        source: ListSource[ApiClientT],
        sink: ReflectorSink,
        *,
        name: str,
        timing: WatchTiming | None = None,
        shrink: Callable[[Any], Any] = lambda obj: obj,
    ) -> None:
        self._source, self._sink = source, sink
        self._timing = timing = timing or WatchTiming()
        self._shrink = shrink
        self._stop = threading.Event()
        self._backoff = Backoff(timing.backoff_initial, timing.backoff_max)
        self._just_listed = False
        """Listed, and no event or bookmark since: a 410 now means the server is confused."""
        self._response: Response | None = None
        self.name = name
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        """True while the thread runs."""
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """End the loop, cutting a blocked read, and wait up to ``timeout`` seconds for the thread
        (0: do not wait). A request the server has not begun to answer cannot be cut: its thread
        ends at the request's own timeout, handing the sink nothing more."""
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(OSError, RuntimeError, ValueError):  # already released or closed
                response.shutdown()
        self.join(timeout)

    def join(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread to end (once started)."""
        if self._thread.ident is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        client: ApiClientT | None = None
        while not self._stop.is_set():
            try:
                client = client or self._source.connect()
                call = self._source.list_call(client)
                version = self._list(call)
                self._watch(call, version)
            except Gone:
                self._sink.restarted("expired")
                if self._just_listed:  # 410 right after a list: do not spin on a confused server
                    self._pause()
            except Exception as exc:  # noqa: BLE001 - any failure means: back off, list again
                if client is not None:
                    client.close()
                    client = None
                if self._stop.is_set():
                    break
                if self._source.optional and _status(exc) == HTTPStatus.NOT_FOUND:
                    self._sink.listed([], 0.0)
                    self._stop.wait(self._timing.backoff_max)
                    continue
                self._sink.failed(describe_failure(exc))
                self._pause()
        if client is not None:
            client.close()

    def _pause(self) -> None:
        """Wait the backoff (or until stopped); the next wait is twice as long."""
        self._backoff.wait(self._stop)

    def _list(self, call: ListCall) -> str:
        """List every page; hands the objects to the sink; returns the list's resourceVersion."""
        objects: list[Any] = []
        token: str | None = None
        started = reported = time.monotonic()
        while True:
            response = self._open(call, {"limit": PAGE_SIZE, "_continue": token}, self._timing.list_timeout)
            try:
                page = json.loads(response.data)
            finally:
                self._release()
            items = page.get("items") or []
            if not isinstance(items, list):
                raise WatchFailed("list has no items array")
            objects.extend(map(self._shrink, items))
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
            if time.monotonic() - reported >= PROGRESS_SECONDS:
                reported = time.monotonic()
                self._sink.listing(len(objects), reported - started)
        self._sink.listed(objects, time.monotonic() - started)
        self._just_listed = True
        return str(meta.get("resourceVersion", ""))

    def _open(self, call: ListCall, params: dict[str, Any], read_timeout: float) -> Response:
        """One list or watch request; raises :class:`Gone` on 410."""
        if self._source.label_selector:
            params["label_selector"] = self._source.label_selector
        if self._source.field_selector:
            params["field_selector"] = self._source.field_selector
        try:
            response: Response = call(
                **{key: value for key, value in params.items() if value is not None},
                _preload_content=False,
                _request_timeout=(self._timing.connect_timeout, read_timeout),
            )
        except Exception as exc:
            if _status(exc) == HTTPStatus.GONE:
                raise Gone(str(getattr(exc, "reason", exc))) from exc
            raise
        self._response = response  # from here on stop() can end a blocked read
        if self._stop.is_set():
            self._release()
            raise WatchFailed("stopping")
        return response

    def _release(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            response.release_conn()

    def _watch(self, call: ListCall, version: str) -> None:
        """Watch from ``version`` until stopped; returns only through an exception or stop."""
        timing = self._timing
        while not self._stop.is_set():
            params = {
                "watch": True,
                "resource_version": version,
                "allow_watch_bookmarks": True,
                "timeout_seconds": timing.watch_timeout,
            }
            response = self._open(call, params, timing.watch_timeout + timing.read_slack)
            try:
                for line in watch_lines(response):
                    version = self._handle(line, version)
            finally:
                self._release()
            if not self._stop.is_set():
                self._sink.restarted("closed")

    def _handle(self, line: bytes, version: str) -> str:
        """Deliver one event line; returns the resourceVersion to resume from."""
        try:
            event = json.loads(line)
            event_type, obj = event["type"], event["object"]
        except (ValueError, KeyError, TypeError) as exc:
            raise WatchFailed(f"watch sent a line that is not an event: {line[:200]!r}") from exc
        if event_type == "ERROR":
            code = obj.get("code") if isinstance(obj, dict) else None
            if code == HTTPStatus.GONE:
                raise Gone(str(obj.get("message")))
            raise WatchFailed(f"watch error {code}: {obj.get('message') if isinstance(obj, dict) else obj}")
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        new_version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        self._just_listed = False
        self._backoff.reset()
        if event_type in ("ADDED", "MODIFIED", "DELETED"):
            self._sink.event(event_type, self._shrink(obj))
        elif event_type != "BOOKMARK":
            log.warning("%s: ignoring watch event of type %r", self.name, event_type)
        return str(new_version) if new_version else version
