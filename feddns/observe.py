"""The HTTP endpoint for Prometheus metrics and probes, shared by the commands.

``/metrics`` is ``prometheus_client``'s exposition of a registry; ``/health``
answers 200 while the process runs its loop; ``/ready`` answers 200 once the
command says it is ready (Federated-DNS: the first load of records is done).
The body of ``/ready`` is ``ok`` or ``not ready``, and after it the lines the
command's ``detail`` gives, if any: why it is not ready, or what is wrong while
it is (records served with no etcd leader behind them, a cluster not listed).
The server runs in a daemon thread (``prometheus_client``'s WSGI app under
``wsgiref``) so a scrape never runs on the DNS event loop.
"""

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from feddns.hostport import parse_hostport

Check = Callable[[], bool]
Detail = Callable[[], str]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # the stdlib's parameter name
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


def make_app(registry: CollectorRegistry, health: Check, ready: Check,
             detail: Detail | None = None, health_detail: Detail | None = None) -> Callable[..., Iterable[bytes]]:
    """A WSGI app serving ``/metrics`` from ``registry`` and the two probes; ``detail``
    adds its text (when not empty) to ``/ready``'s body, ``health_detail`` to ``/health``'s
    (the status stays what ``health`` says)."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/health", "/healthz", "/ready", "/readyz"):
            readiness = path.startswith("/ready")
            ok = (ready if readiness else health)()
            status = "200 OK" if ok else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain")])
            told = detail if readiness else health_detail
            more = told() if told is not None else ""
            return [b"ok\n" if ok else b"not ready\n", f"{more}\n".encode() if more else b""]
        if path == "/metrics":
            body: Iterable[bytes] = metrics(environ, start_response)
            return body
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app


class ObserveServer:
    """Serves :func:`make_app` on ``listen`` (``HOST:PORT``, port 0 picks one).

    ``start()`` binds and starts the thread (raises ``OSError`` when the address
    cannot be bound); ``port`` is then the bound port; ``stop()`` closes it.
    """

    def __init__(self, listen: str, registry: CollectorRegistry, health: Check, ready: Check,
                 detail: Detail | None = None, health_detail: Detail | None = None) -> None:
        self.listen = listen
        """The ``HOST:PORT`` given (for messages)."""
        self._address = parse_hostport(listen)
        self._app = make_app(registry, health, ready, detail, health_detail)
        self._server: WSGIServer | None = None

    def start(self) -> None:
        """Bind and serve in a daemon thread; raises ``OSError`` when the address cannot be bound."""
        host, port = self._address
        server_class = _ThreadingServer6 if ":" in host else _ThreadingServer
        self._server = make_server(host, port, self._app, server_class, _QuietHandler)
        threading.Thread(target=self._server.serve_forever, name="feddns-metrics", daemon=True).start()

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` of the bound server."""
        host = self._address[0]
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    def stop(self) -> None:
        """Stop serving and close the socket (nothing when not started)."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
