"""Helpers of the stub-zone tests: certificates made by ``feddns certs``, the real
``feddns stubzone`` process, and an HTTPS client with a client certificate."""

import contextlib
import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from feddns.cli import main as feddns_main
from harness.ports import free_port
from harness.process import ChildProcess
from harness.scrape import unlabelled_sample


def certs(*args: str) -> None:
    """Run ``feddns certs ARGS`` in this process; fails the test unless it exits 0."""
    assert feddns_main(["certs", *args]) == 0, args


@dataclass(frozen=True)
class Pki:
    """A CA in ``dir`` with a server certificate for 127.0.0.1 and these clients.

    ``client``: CN feddns-controller (allowed); ``stranger``: another CN of
    the same CA (not allowed); ``expired``: allowed CN, expired; ``foreign``:
    allowed CN from another CA; ``san_only``: no CN match, allowed DNS SAN.
    """

    dir: Path

    def cert(self, name: str) -> tuple[str, str]:
        return str(self.dir / f"{name}.crt"), str(self.dir / f"{name}.key")

    @property
    def ca(self) -> str:
        return str(self.dir / "ca.crt")


ALLOWED = "feddns-controller"
ALLOWED_DNS = "controller.federation.example"


def make_pki(root: Path) -> Pki:
    """Every certificate the tests use, made with ``feddns certs``."""
    certs("init", "--dir", str(root))
    certs("issue-server", "--dir", str(root), "--ip", "127.0.0.1", "--dns", "localhost")
    certs("issue-client", "--dir", str(root), "--cn", ALLOWED)
    certs("issue-client", "--dir", str(root), "--name", "stranger", "--cn", "someone-else")
    certs("issue-client", "--dir", str(root), "--name", "san_only", "--cn", "x", "--dns", ALLOWED_DNS.upper())
    certs("issue-client", "--dir", str(root), "--name", "expired", "--cn", ALLOWED,
          "--not-before", "2020-01-01T00:00:00Z", "--days", "30")
    other = root / "other"
    certs("init", "--dir", str(other), "--cn", "some other CA")
    certs("issue-client", "--dir", str(other), "--cn", ALLOWED)
    os.replace(other / "client.crt", root / "foreign.crt")
    os.replace(other / "client.key", root / "foreign.key")
    return Pki(root)


@dataclass
class Answer:
    """An HTTP response: status, JSON body (``None`` if not JSON), headers."""

    status: int
    body: Any
    headers: dict[str, str]
    raw: bytes = field(repr=False, default=b"")


def client_context(pki: Pki, cert: str | None = "client", *, maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """A client context trusting ``pki``'s CA, presenting ``cert`` (``None``: no certificate)."""
    context = ssl.create_default_context(cafile=pki.ca)
    if cert is not None:
        context.load_cert_chain(*pki.cert(cert))
    if maximum is not None:
        context.maximum_version = maximum
    return context


def request(port: int, context: ssl.SSLContext, method: str, path: str, body: Any = None,
            *, raw: bytes | None = None, content_type: str = "application/json") -> Answer:
    """One HTTPS request to 127.0.0.1:``port``; ``body`` is sent as JSON, ``raw`` as is."""
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
    try:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Content-Type": content_type} if data is not None else {}
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        payload = response.read()
        try:
            parsed = json.loads(payload)
        except ValueError:
            parsed = None
        return Answer(response.status, parsed, dict(response.getheaders()), payload)
    finally:
        connection.close()


def connect(port: int, count: int, opened: list[socket.socket], first: bytes = b"") -> None:
    """Open ``count`` TCP connections to 127.0.0.1:``port`` (appended to ``opened``), each sending ``first``."""
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        opened.append(sock)
        if first:
            with contextlib.suppress(OSError):  # closed by the server at once: over --max-connections
                sock.sendall(first)


def close_all(opened: list[socket.socket]) -> None:
    """Close and forget every socket of ``opened``."""
    for sock in opened:
        sock.close()
    opened.clear()


def skydns_args(etcd_url: str, prefix: str, *extra: str) -> list[str]:
    """The flags of ``--backend skydns`` (etcd v2 unless ``extra`` says ``--skydns-etcd-api v3``)."""
    return ["--backend", "skydns", "--etcd", etcd_url, "--etcd-prefix", prefix, *extra]


class StubzoneProcess:
    """``python -m feddns stubzone`` on 127.0.0.1 (port chosen by the OS) with ``pki``'s certificates.

    ``backend_args`` are the ``--backend`` flags and any other; the backend's
    calls time out after 2 seconds. ``lines`` is its log so far; ``child`` its :class:`ChildProcess`.
    """

    def __init__(self, pki: Pki, *backend_args: str) -> None:
        self.pki = pki
        self.args = [
            sys.executable, "-m", "feddns", "stubzone", "--listen", "127.0.0.1:0",
            "--cert", pki.cert("server")[0], "--key", pki.cert("server")[1], "--client-ca", pki.ca,
            "--allow", ALLOWED, "--allow", ALLOWED_DNS, "--backend-timeout", "2", *backend_args,
        ]
        self.child = ChildProcess(self.args, ready=r"listening on https://127\.0\.0\.1:(\d+)", name="feddns stubzone")
        self.port = 0

    @property
    def lines(self) -> list[str]:
        return self.child.lines

    @property
    def proc(self) -> "subprocess.Popen[str] | None":
        return self.child.proc

    def start(self) -> None:
        self.port = 0
        listening = self.child.start(timeout=20)
        assert listening is not None
        self.port = int(listening.group(1))

    def wait_for_log(self, pattern: str, timeout: float = 10.0, start: int = 0) -> str:
        """The first log line from index ``start`` on matching ``pattern``; raises TimeoutError."""
        return self.child.wait_for(pattern, timeout=timeout, start=start).string

    def wait_for_refusal(self, local_port: int, reason: str, start: int = 0, *,
                         what: tuple[str, str] = ("TLS handshake", "TLS handshakes")) -> str:
        """The log line of a refused handshake from 127.0.0.1:``local_port``: its own line, or, when another
        refusal was logged less than a second before, the count of the next summary line. ``what``: how the
        line names one and several (``("client", "clients")`` for a client refused after its handshake)."""
        own = rf'{what[0]} refused: peer=127\.0\.0\.1:{local_port} reason="{re.escape(reason)}"'
        counted = rf"{what[1]} refused: \d+ more in the last 1\.0 s \(.*{re.escape(reason)}: \d+"
        return self.wait_for_log(f"{own}|{counted}", start=start)

    def rss(self) -> int:
        """Resident set size of the process, in bytes (``VmRSS`` of /proc/PID/status)."""
        return self.child.rss()

    def stop(self) -> int | None:
        """SIGTERM (SIGKILL after 15 s), then the exit status (0 for a clean stop; None if never started)."""
        return self.child.stop(timeout=15)

    def restart(self) -> None:
        """Stop cleanly (exit 0) and start again; the new process gets a new port."""
        assert self.stop() == 0, self.lines[-20:]
        self.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.child.running:
            assert self.stop() == 0, self.lines[-20:]

    def request(self, method: str, path: str, body: Any = None, *, cert: str | None = "client", **kw: Any) -> Answer:
        return request(self.port, client_context(self.pki, cert), method, path, body, **kw)


class Endpoint(StubzoneProcess):
    """The endpoint with ``--metrics``; ``metric(name)`` reads one unlabelled sample."""

    def __init__(self, pki: Pki, etcd_url: str, prefix: str, *flags: str) -> None:
        self.metrics_port = free_port()
        super().__init__(pki, *skydns_args(etcd_url, prefix), "--metrics", f"127.0.0.1:{self.metrics_port}", *flags)

    def metric(self, name: str) -> float:
        return unlabelled_sample(self.metrics_port, name)

    def open_connections(self) -> int:
        return int(self.metric("feddns_stubzone_connections"))
