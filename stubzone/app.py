"""The stub-zone HTTP API on aiohttp (docs/reference.md section 5, docs/stubzone-openapi.yaml).

Routes: ``GET /federations``, ``GET|POST|DELETE /federations/{federation}``,
``GET /healthz``. One middleware, :func:`guard`, does for every request what
must never be forgotten by a handler: authorize the client against
``--allow`` (the listener has refused a stranger right after its handshake,
:func:`stubzone.auth.authorizer`; this is the second look, 403 before any
route is looked at, so a stranger learns nothing), turn every refusal into ``{"error": "<what and why>"}`` with the
status of section 5, and log one line with the client identity, the route,
the status and the reason.

Checks run cheapest first and before anything is written: name (400),
content type (415), size (413, aiohttp stops reading past 64 KiB), JSON (a
key given twice in one object too) and fields (400), then the backend (503 when its store cannot be reached, with
``mayHaveApplied`` saying whether a write may have landed; 409 when the
backend holds the stub domain somewhere the endpoint does not write). This
module knows no backend: only :class:`stubzone.backends.Backend`.
"""

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web

from feddns.errors import FeddnsError
from feddns.https import peer_text
from feddns.names import check_label
from stubzone.auth import AllowList, ClientIdentity, not_allowed
from stubzone.backends import Backend, BackendUnavailable, NotWrittenHere, UnsupportedNameservers, check_nameservers
from stubzone.metrics import StubzoneMetrics
from stubzone.model import Nameserver, StubZone

log = logging.getLogger("stubzone")

MAX_LABEL = 63
"""Characters of a DNS label at the most (RFC 1035 section 2.3.4)."""
MAX_BODY_BYTES = 64 * 1024
"""Largest request body accepted (section 5: 413 above)."""
MAX_NAMESERVERS = 16
FIELDS = frozenset({"nameservers"})
"""The fields of a POST body; any other is refused (400)."""
MAX_LOGGED = 200
"""Characters of a client-supplied path or name kept in logs and error messages."""


BACKEND = web.AppKey("backend", Backend)
ALLOW = web.AppKey("allow", AllowList)
METRICS = web.AppKey("metrics", StubzoneMetrics)
LOOPBACK = web.AppKey("loopback", bool)
REASON = web.RequestKey("reason", str)


class ApiError(FeddnsError):
    """A refused request: HTTP ``status`` and the reason sent as ``{"error": reason}``.

    ``close``: the connection is closed after the answer (the rest of the request cannot be trusted).
    """

    def __init__(self, status: int, reason: str, *, close: bool = False) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.close = close


def make_app(backend: Backend, allow: AllowList, metrics: StubzoneMetrics, *,
             loopback: bool = False) -> web.Application:
    """The aiohttp application; serve it only over :mod:`stubzone.tls` (client certificates).

    ``loopback``: a POST may name a loopback nameserver (``--allow-loopback-nameservers``). The backend
    is closed when the application is cleaned up.
    """
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[guard])
    app[BACKEND], app[ALLOW], app[METRICS], app[LOOPBACK] = backend, allow, metrics, loopback
    app.on_cleanup.append(_close_backend)
    app.router.add_get("/federations", list_federations)
    # Anything after /federations/ is the name, then checked: an empty name or
    # one with "/" gets 400 naming the problem, not aiohttp's bare 404.
    federation = "/federations/{federation:.*}"
    app.router.add_get(federation, get_federation)  # and HEAD, as for every GET
    app.router.add_post(federation, post_federation)
    app.router.add_delete(federation, delete_federation)
    app.router.add_get("/healthz", healthz)
    return app


async def _close_backend(app: web.Application) -> None:
    await app[BACKEND].close()


def _answer(request: web.Request, body: dict[str, Any], reason: str, status: int = 200) -> web.Response:
    request[REASON] = reason
    return web.json_response(body, status=status)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_LOGGED else text[:MAX_LOGGED] + "..."


def client_identity(request: web.BaseRequest) -> ClientIdentity | None:
    """The verified client certificate's names; ``None`` without TLS (never in service)."""
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
    return ClientIdentity.from_der(der) if der else None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Authorize, answer every refusal as JSON, count and log the request (see module doc)."""
    identity = client_identity(request)
    try:
        if identity is None or request.app[ALLOW].match(identity) is None:
            raise ApiError(403, not_allowed(identity))
        response = await handler(request)
        reason = request.get(REASON, "")
    except ApiError as exc:
        response, reason = _refusal(exc.status, exc.reason), exc.reason
        if exc.close:
            response.force_close()
    except web.HTTPException as exc:  # aiohttp's own: 404 no route, 405, 413
        reason = _describe(exc, request)
        response = _refusal(exc.status, reason, exc.headers.get("Allow"))
    except BackendUnavailable as exc:
        response, reason = _unavailable(request, exc)
    except NotWrittenHere as exc:
        response, reason = _refusal(409, str(exc)), str(exc)
    except Exception:  # the boundary: a bug answers 500 JSON and is logged, never a traceback to the client
        log.exception("%s %s: internal error", request.method, _clip(request.raw_path))
        response, reason = _refusal(500, "internal error"), "internal error (logged)"
    _record(request, identity, response.status, reason)
    return response


def _refusal(status: int, reason: str, allow: str | None = None) -> web.Response:
    headers = {"Allow": allow} if allow is not None else None
    return web.json_response({"error": reason}, status=status, headers=headers)


RETRY_AFTER_SECONDS = 1
"""``Retry-After`` of a 503: the store is usually back within seconds (a restart, a leader election)."""


def _unavailable(request: web.Request, exc: BackendUnavailable) -> tuple[web.Response, str]:
    """503 with ``{"error", "mayHaveApplied"}``: the reason says whether the write may have landed."""
    writes = request.method in ("POST", "DELETE")
    if exc.may_have_applied:
        outcome = f"the {request.method} may have been applied; it is idempotent, so retry it"
    elif writes:
        outcome = f"nothing was changed; {request.method} is idempotent, so retry it"
    else:
        outcome = "nothing was changed"
    reason = f"{exc}; {outcome}"
    body = {"error": reason, "mayHaveApplied": exc.may_have_applied}
    response = web.json_response(body, status=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    return response, reason


def _describe(exc: web.HTTPException, request: web.Request) -> str:
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return f"body is over {MAX_BODY_BYTES} bytes"
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return f"method {exc.method} is not allowed here (allowed: {', '.join(sorted(exc.allowed_methods))})"
    if isinstance(exc, web.HTTPNotFound):
        return f"no such resource: {_clip(request.raw_path)}"
    return exc.reason


def _record(request: web.Request, identity: ClientIdentity | None, status: int, reason: str) -> None:
    resource = request.match_info.route.resource
    _count_and_log(request, request.app[METRICS], resource.canonical if resource is not None else "(none)",
                   identity, status, reason)


def _count_and_log(request: web.BaseRequest, metrics: StubzoneMetrics, route: str, identity: ClientIdentity | None,
                   status: int, reason: str) -> None:
    """Count the answer and log its line (INFO for 2xx, 3xx and 404, else WARNING)."""
    metrics.requests.labels(request.method, route, str(status)).inc()
    peer = peer_text(request.transport) if request.transport else "?"
    level = logging.INFO if status < HTTPStatus.BAD_REQUEST or status == HTTPStatus.NOT_FOUND else logging.WARNING
    log.log(level, '%s %s client="%s" peer=%s status=%d reason="%s"',
            _clip(request.method), _clip(request.raw_path), identity, peer, status, reason)


LINGERING_SECONDS = 2.0
"""Seconds the rest of a refused request is read and dropped, so the client sees the answer before the close."""


class JSONErrorsRequestHandler(web.RequestHandler):
    """aiohttp's protocol of one connection, answering the requests aiohttp refuses itself as JSON.

    aiohttp answers a request it cannot parse (a bad request line, a header line
    over 8190 bytes, more than 128 headers, bad chunked encoding in the head)
    itself, before any middleware, as ``text/plain`` and with an ERROR
    traceback in the log. Here such a request gets ``{"error": ...}`` with
    the same status, one log line and a count, like every other refusal.
    """

    def __init__(self, server: web.Server, metrics: StubzoneMetrics, loop: asyncio.AbstractEventLoop,
                 idle_timeout: float) -> None:
        super().__init__(server, loop=loop, keepalive_timeout=idle_timeout, lingering_time=LINGERING_SECONDS,
                         access_log=None)  # type: ignore[arg-type]  # None: no access log (guard logs each request)
        self._metrics = metrics

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """The JSON answer to an error aiohttp met; the connection is closed after it."""
        if request.writer.output_size > 0:  # as aiohttp: part of a response is out, only closing is left
            raise ConnectionError("part of the response was sent already; the error cannot be answered")
        if status >= HTTPStatus.INTERNAL_SERVER_ERROR:
            log.error("%s %s: internal error", _clip(request.method), _clip(request.raw_path), exc_info=exc)
            reason = "internal error"
        else:
            reason = _clip(" ".join((message or str(exc or "") or HTTPStatus(status).phrase).split()))
        response = _refusal(status, reason)
        response.force_close()
        _count_and_log(request, self._metrics, "(unparsed)", client_identity(request), status, reason)
        return response


def protocol_factory(server: web.Server, metrics: StubzoneMetrics,
                     idle_timeout: float) -> Callable[[], asyncio.Protocol]:
    """The HTTP protocol factory for :class:`feddns.https.TLSListener` (in place of ``runner.server``); a
    kept-alive connection is closed after ``idle_timeout`` seconds without a request (``--idle-timeout``)."""
    loop = asyncio.get_running_loop()
    return lambda: JSONErrorsRequestHandler(server, metrics, loop, idle_timeout)


def _federation(request: web.Request) -> str:
    """The ``{federation}`` path part, checked as a DNS label (400 otherwise)."""
    name = request.match_info["federation"]
    if not name:
        raise ApiError(400, "federation name is empty")
    if len(name) > MAX_LABEL:
        raise ApiError(400, f"federation name is {len(name)} characters long; a DNS label has at most {MAX_LABEL}")
    try:
        return check_label(name, "federation name")
    except ValueError as exc:
        raise ApiError(400, str(exc)) from exc


def _found(federation: str, zone: StubZone | None) -> StubZone:
    """``zone``, or 404 when the federation is not programmed."""
    if zone is None:
        raise ApiError(404, f"federation {federation!r} is not programmed")
    return zone


async def list_federations(request: web.Request) -> web.Response:
    """``GET /federations``: every programmed federation."""
    zones = await request.app[BACKEND].list()
    return _answer(request, {"federations": [zone.to_json() for zone in zones]}, f"{len(zones)} federations")


async def get_federation(request: web.Request) -> web.Response:
    """``GET /federations/F``: F's stub zone, 404 when not programmed."""
    federation = _federation(request)
    zone = _found(federation, await request.app[BACKEND].get(federation))
    return _answer(request, zone.to_json(), f"{len(zone.nameservers)} nameservers")


async def post_federation(request: web.Request) -> web.Response:
    """``POST /federations/F`` ``{"nameservers": [...]}``: program F's stub zone."""
    federation = _federation(request)
    nameservers = parse_body(await _json_body(request), loopback=request.app[LOOPBACK])
    backend = request.app[BACKEND]
    try:
        check_nameservers(backend, nameservers)
    except UnsupportedNameservers as exc:
        raise ApiError(400, str(exc)) from exc
    zone, changed = await backend.put(federation, nameservers)
    listed = ", ".join(map(str, zone.nameservers))
    return _answer(request, zone.to_json(), f"{zone.stub_domain} -> {listed}" + ("" if changed else " (unchanged)"))


async def delete_federation(request: web.Request) -> web.Response:
    """``DELETE /federations/F``: remove F's stub zone; answers what was removed."""
    federation = _federation(request)
    zone = _found(federation, await request.app[BACKEND].delete(federation))
    return _answer(request, zone.to_json(), f"removed {zone.stub_domain}")


async def healthz(request: web.Request) -> web.Response:
    """``GET /healthz``: 200 ``{"status": "ok", "backend", "store"}`` when the store answers, else 503."""
    backend = request.app[BACKEND]
    store = await backend.ping()
    return _answer(request, {"status": "ok", "backend": backend.name, "store": store}, f"store reachable: {store}")


BODY_TIMEOUT = 5.0
"""Seconds a client has, once the headers are in, to send the whole body (then 408 and the connection closes).

A body is at most 64 KiB, sent at once by any real client. The limit also ends the wait when a chunked
body goes wrong after the headers: aiohttp's C parser then queues a 400 for later instead of failing the
read in progress."""


async def _json_body(request: web.Request) -> Any:
    """The request body as JSON: 415 for another content type, 413 past 64 KiB, 400 if not JSON or badly
    framed (chunked encoding, a short Content-Length), 408 when it does not arrive in time."""
    if request.content_type != "application/json":
        raise ApiError(415, f"content type {_clip(request.content_type)!r} is not application/json")
    try:
        async with asyncio.timeout(BODY_TIMEOUT):
            raw = await request.read()
    except TimeoutError as exc:
        raise ApiError(408, f"the body did not arrive within {BODY_TIMEOUT:g} s", close=True) from exc
    except web.RequestPayloadError as exc:
        raise ApiError(400, f"body: {_clip(' '.join(str(exc).split()))}", close=True) from exc
    except ConnectionResetError as exc:
        raise ApiError(400, "the connection closed before the whole body arrived", close=True) from exc
    try:
        return json.loads(raw.decode("utf-8"), object_pairs_hook=_object, parse_constant=_not_json)
    except DuplicateKey as exc:
        raise ApiError(400, f"body: {exc}") from exc
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise ApiError(400, f"body is not JSON (RFC 8259, UTF-8): {_clip(str(exc))}") from exc


def _not_json(constant: str) -> Any:
    """Python's ``json`` takes ``NaN``, ``Infinity`` and ``-Infinity``; RFC 8259 (section 6) has no such value."""
    raise ValueError(f"{constant} is not a JSON value")


class DuplicateKey(ValueError):
    """A JSON object names one key twice (RFC 8259 section 4: the names SHOULD be unique)."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; :class:`DuplicateKey` when a key is given twice, where ``json`` would keep the last."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise DuplicateKey(f"the key {_clip(key)!r} is given twice in one object")
        found[key] = value
    return found


def parse_body(body: Any, *, loopback: bool = False) -> list[Nameserver]:
    """The nameservers of a POST body; raises :class:`ApiError` 400 naming what is wrong.

    ``body`` must be ``{"nameservers": [...]}`` with 1 to 16 distinct IP
    addresses, each with an optional port (section 5); loopback ones only with ``loopback``.
    """
    if not isinstance(body, dict):
        raise ApiError(400, f"body must be a JSON object, not {type(body).__name__}")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise ApiError(400, f"unknown field(s): {_clip(', '.join(map(repr, unknown)))} (only 'nameservers')")
    items = body.get("nameservers")
    if not isinstance(items, list):
        raise ApiError(400, "'nameservers' must be a list of IP addresses")
    if not 1 <= len(items) <= MAX_NAMESERVERS:
        raise ApiError(400, f"'nameservers' has {len(items)} entries; 1 to {MAX_NAMESERVERS} are allowed")
    nameservers = [_nameserver(i, item, loopback) for i, item in enumerate(items)]
    if len(set(nameservers)) != len(nameservers):
        raise ApiError(400, "'nameservers' lists the same address and port twice")
    return nameservers


def _nameserver(index: int, item: Any, loopback: bool) -> Nameserver:
    if not isinstance(item, str):
        raise ApiError(400, f"nameservers[{index}] must be a string, not {type(item).__name__}")
    try:
        nameserver = Nameserver.parse(item)
    except ValueError as exc:  # ConfigError too
        raise ApiError(400, f"nameservers[{index}]: {_clip(str(exc))}") from exc
    if nameserver.address.is_loopback and not loopback:  # refused here, not in Nameserver: one read back stays
        raise ApiError(400, f"nameservers[{index}]: {_clip(repr(item))} is loopback: the cluster DNS would send "
                            "the queries to itself (--allow-loopback-nameservers)")
    return nameserver
