"""A real etcd server for tests, and a small synchronous client for arranging data.

``EtcdServer`` runs Debian's ``etcd`` (package ``etcd-server``) on loopback ports
with a throw-away data directory. ``stop()``/``start()`` simulate an outage with
the data kept; ``pause()``/``resume()`` freeze it (SIGSTOP) with its sockets
open. The client side talks to etcd's JSON gateway (``/v3/kv/...``, base64 keys
and values), so tests need no event loop to put and read keys.

etcd 3.4 also serves its v2 key space (``/v2/keys/...``, what released SkyDNS
and kube2sky use) when started with ``--enable-v2``, which ``EtcdServer`` does
unless told otherwise; the ``v2_*`` methods read and write it.

Secured etcd (docs/reference.md section 6): with ``pki`` (harness/etcdpki.py)
it serves ``https://`` with ``--client-cert-auth --trusted-ca-file``, and the
tests' own client presents the admin certificate. ``enable_auth()`` turns on
etcd's v3 authentication with ``etcdctl`` (``user add``, ``role add``,
``role grant-permission``, ``user grant-role``, ``auth enable``), after which the
tests' client logs in as root; ``enable_v2_auth()`` does the same for the v2
key space, whose users are separate (its HTTP ``/v2/auth`` API).

:func:`etcd_cluster` starts the members of one cluster; given a ``PeerNetwork``
(harness/peernet.py), their peer traffic crosses its proxies, which can cut a
member off from the others (a network partition) and join it again.

etcd logs errors only; ``FEDDNS_TEST_ETCD_LOG=info`` in the environment logs more
(``etcd.log`` in its data directory).
"""

import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from harness.etcdpki import EtcdPki
from harness.peernet import PeerNetwork
from harness.ports import free_port, wait_until

ROOT_PASSWORD = "root-password"


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _prefix_end(prefix: str) -> str:
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return _b64(bytes(raw))


class EtcdServer:
    """One etcd member on 127.0.0.1; ``url`` is its client URL.

    Alone by default; :func:`etcd_cluster` makes members of one cluster (``name`` and
    ``initial_cluster``, etcd's ``--name`` and ``--initial-cluster``)."""

    def __init__(self, *, enable_v2: bool = True, pki: EtcdPki | None = None, name: str = "test",
                 extra_args: Sequence[str] = ()) -> None:
        self.enable_v2 = enable_v2
        self.pki = pki
        self.name = name
        self.extra_args = list(extra_args)
        self._token: str | None = None
        self._v2_auth: str | None = None
        self.data_dir = tempfile.mkdtemp(prefix="feddns-etcd-")
        self.client_port = free_port()
        self.peer_port = free_port()
        self.advertised_peer_port = self.peer_port
        """The peer port the other members are told to use: a proxy's (harness/peernet.py) or its own."""
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.log_path = os.path.join(self.data_dir, "etcd.log")
        self.initial_cluster = f"{name}={self.peer_url}"

    @property
    def peer_url(self) -> str:
        """The peer URL the other members use (``--initial-advertise-peer-urls``)."""
        return f"http://127.0.0.1:{self.advertised_peer_port}"

    @property
    def url(self) -> str:
        scheme = "https" if self.pki is not None else "http"
        return f"{scheme}://127.0.0.1:{self.client_port}"

    def start(self, wait: bool = True) -> None:
        """Start (or restart) etcd and wait until it answers (``wait``; a member of a
        cluster answers only once a quorum has started: see :func:`etcd_cluster`)."""
        binary = shutil.which("etcd") or "/usr/bin/etcd"
        tls: list[str] = []
        if self.pki is not None:
            cert, key = self.pki.server_cert
            tls = ["--cert-file", str(cert), "--key-file", str(key),
                   "--client-cert-auth", "--trusted-ca-file", str(self.pki.trusted)]
        # etcd keeps its own copy of the log's descriptor, so ours closes at once.
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    binary, "--name", self.name, "--data-dir", os.path.join(self.data_dir, "data"),
                    "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                    "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
                    "--initial-advertise-peer-urls", self.peer_url,
                    "--initial-cluster", self.initial_cluster, "--logger", "zap",
                    "--log-level", os.environ.get("FEDDNS_TEST_ETCD_LOG", "error"),
                    *(["--enable-v2"] if self.enable_v2 else []), *tls, *self.extra_args,
                ],
                stdout=log, stderr=log,
            )
        if wait:
            self.wait_healthy()

    def wait_healthy(self, timeout: float = 20) -> None:
        """Wait until this member answers; raises if it exits, and stops it if it never answers."""
        try:
            wait_until(self._healthy, timeout=timeout, interval=0.05, what=f"etcd on {self.url}")
        except BaseException:
            self.stop()
            raise

    def _healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"etcd exited with {self.proc.returncode}; log in {self.log_path}")
        try:
            self.call("/v3/maintenance/status", {})
            return True
        except OSError:
            return False

    def pid(self) -> int | None:
        """The process id of the running etcd (``None`` when stopped)."""
        return self.proc.pid if self.proc is not None else None

    def has_leader(self) -> bool:
        """Whether this member knows a leader now (its status, read without asking for one)."""
        try:
            return int(self.call("/v3/maintenance/status", {}, timeout=2).get("leader", 0)) != 0
        except OSError:
            return False

    def pause(self) -> None:
        """Freeze etcd with SIGSTOP: its sockets stay open and it answers nothing."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """Let a frozen etcd go on (SIGCONT)."""
        if self.proc is not None and self.paused:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        """Stop etcd (data kept); ``start()`` brings it back on the same ports."""
        self.resume()  # a frozen process would not act on SIGTERM
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # a member cut off from its peers may hang in its stop
                self.proc.kill()
                self.proc.wait(timeout=10)
            self.proc = None

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- the synchronous client -------------------------------------------------

    def _context(self) -> ssl.SSLContext | None:
        """The tests' TLS client context: etcd's server CA and the admin client certificate."""
        if self.pki is None:
            return None
        context = ssl.create_default_context(cafile=str(self.pki.server_ca))
        context.load_cert_chain(*map(str, self.pki.admin_cert))
        return context

    def call(self, path: str, body: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        """POST ``body`` to the JSON gateway at ``path`` (as root once auth is on); raises ``OSError``."""
        try:
            return self._call(path, body, timeout)
        except urllib.error.HTTPError as exc:
            if exc.code != 401 or self._token is None:
                raise
        # the token died with a restart of etcd: log in again
        self._token = self._call("/v3/auth/authenticate", {"name": "root", "password": ROOT_PASSWORD}, timeout,
                                 anonymous=True)["token"]
        return self._call(path, body, timeout)

    def _call(self, path: str, body: dict[str, Any], timeout: float, anonymous: bool = False) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self._token is not None and not anonymous:
            headers["Authorization"] = self._token
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                         headers=headers)
        with urllib.request.urlopen(request, timeout=timeout, context=self._context()) as response:
            return json.loads(response.read())

    # -- authentication ------------------------------------------------------------------

    def etcdctl(self, *args: str) -> str:
        """Run ``etcdctl ARGS`` against this server (TLS flags added); returns its output."""
        flags = ["--endpoints", self.url, "--dial-timeout", "5s"]
        if self.pki is not None:
            cert, key = self.pki.admin_cert
            flags += ["--cacert", str(self.pki.server_ca), "--cert", str(cert), "--key", str(key)]
        if self._token is not None:
            flags += ["--user", f"root:{ROOT_PASSWORD}"]
        done = subprocess.run(["etcdctl", *flags, *args], check=False, capture_output=True, text=True, timeout=30,
                              env=dict(os.environ, ETCDCTL_API="3"))
        assert done.returncode == 0, f"etcdctl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def enable_auth(self, users: dict[str, tuple[str, list[str]]]) -> None:
        """Turn on v3 authentication: ``users`` maps a name to ``(password, [key prefixes it may
        read and write])``; root gets :data:`ROOT_PASSWORD`, and the tests' client logs in as root."""
        self.etcdctl("user", "add", "root", f"--new-user-password={ROOT_PASSWORD}")
        for name, (password, prefixes) in users.items():
            self.etcdctl("user", "add", name, f"--new-user-password={password}")
            self.etcdctl("role", "add", f"{name}-role")
            for prefix in prefixes:
                self.etcdctl("role", "grant-permission", f"{name}-role", "--prefix=true", "readwrite", prefix)
            self.etcdctl("user", "grant-role", name, f"{name}-role")
        self.etcdctl("auth", "enable")
        self._token = self.call("/v3/auth/authenticate", {"name": "root", "password": ROOT_PASSWORD})["token"]

    def enable_v2_auth(self, user: str, password: str) -> None:
        """Turn on the v2 key space's own authentication (HTTP basic auth) with root and ``user``,
        who may write everything; the tests' v2 calls go as root from then on."""
        for name, secret in (("root", ROOT_PASSWORD), (user, password)):
            self._v2_auth_call("PUT", f"/v2/auth/users/{name}", {"user": name, "password": secret})
        self._v2_auth_call("PUT", f"/v2/auth/roles/{user}-role", {
            "role": f"{user}-role", "permissions": {"kv": {"read": ["/*"], "write": ["/*"]}}})
        self._v2_auth_call("PUT", f"/v2/auth/users/{user}", {"user": user, "grant": [f"{user}-role"]})
        self._v2_auth_call("PUT", "/v2/auth/enable", None)
        self._v2_auth = "Basic " + base64.b64encode(f"root:{ROOT_PASSWORD}".encode()).decode()

    def _v2_auth_call(self, method: str, path: str, body: dict[str, Any] | None) -> None:
        request = urllib.request.Request(self.url + path, method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Content-Type": "application/json"})
        if self._v2_auth is not None:
            request.add_header("Authorization", self._v2_auth)
        with urllib.request.urlopen(request, timeout=5, context=self._context()) as response:
            response.read()

    def put(self, key: str, value: str | bytes | dict[str, Any]) -> int:
        """Put one key (a dict is JSON-encoded); returns the new revision."""
        if isinstance(value, dict):
            value = json.dumps(value)
        reply = self.call("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})
        return int(reply["header"]["revision"])

    def put_many(self, items: dict[str, str | dict[str, Any]], batch: int = 100) -> int:
        """Put many keys, ``batch`` per transaction (etcd allows 128 operations per txn)."""
        pairs = list(items.items())
        revision = 0
        for start in range(0, len(pairs), batch):
            ops = [{"request_put": {"key": _b64(k), "value": _b64(json.dumps(v) if isinstance(v, dict) else v)}}
                   for k, v in pairs[start : start + batch]]
            revision = int(self.call("/v3/kv/txn", {"success": ops})["header"]["revision"])
        return revision

    def delete(self, key: str, prefix: bool = False) -> int:
        """Delete one key, or every key under ``key`` with ``prefix``; returns the revision."""
        body = {"key": _b64(key)}
        if prefix:
            body["range_end"] = _prefix_end(key)
        return int(self.call("/v3/kv/deleterange", body)["header"]["revision"])

    def get_prefix(self, prefix: str) -> dict[str, str]:
        """Every key under ``prefix`` with its value, as text."""
        reply = self.call("/v3/kv/range", {"key": _b64(prefix), "range_end": _prefix_end(prefix)})
        return {
            base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode()
            for kv in reply.get("kvs", [])
        }

    def revision(self) -> int:
        reply = self.call("/v3/kv/range", {"key": _b64("\0"), "limit": 1})
        return int(reply["header"]["revision"])

    def compact(self, revision: int) -> None:
        """Compact history up to ``revision`` (physical, so old revisions are gone)."""
        self.call("/v3/kv/compaction", {"revision": revision, "physical": True})

    # -- the v2 key space (--enable-v2) ---------------------------------------------------

    def v2_call(self, method: str, key: str, params: dict[str, str] | None = None,
                timeout: float = 5.0) -> tuple[int, dict[str, Any], int]:
        """``(status, JSON body, X-Etcd-Index)`` of one v2 request; form ``params`` for PUT."""
        url = f"{self.url}/v2/keys{urllib.parse.quote(key)}"
        data = urllib.parse.urlencode(params or {}).encode() if method == "PUT" else None
        if method != "PUT" and params:
            url += "?" + urllib.parse.urlencode(params)
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/x-www-form-urlencoded")
        if self._v2_auth is not None:
            request.add_header("Authorization", self._v2_auth)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self._context()) as response:
                return response.status, json.loads(response.read()), int(response.headers["X-Etcd-Index"])
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}"), int(exc.headers.get("X-Etcd-Index") or 0)

    def v2_put(self, key: str, value: str | dict[str, Any]) -> int:
        """Put one v2 key (a dict is JSON-encoded); returns its modifiedIndex."""
        text = json.dumps(value) if isinstance(value, dict) else value
        status, body, _ = self.v2_call("PUT", key, {"value": text})
        assert status in (200, 201), body
        return int(body["node"]["modifiedIndex"])

    def v2_leaves(self, prefix: str) -> dict[str, str]:
        """Every v2 leaf key under the directory ``prefix`` with its value ({} when it does not exist)."""
        status, body, _ = self.v2_call("GET", prefix.rstrip("/") or "/", {"recursive": "true"})
        leaves: dict[str, str] = {}

        def walk(node: dict[str, Any]) -> None:
            if node.get("dir"):
                for child in node.get("nodes", []):
                    walk(child)
            else:
                leaves[node["key"]] = node["value"]

        if status == 200:
            walk(body["node"])
        return leaves

    def v2_index(self) -> int:
        """The v2 store's current index (moves with every v2 write)."""
        return self.v2_call("GET", "/")[2]


def etcd_cluster(size: int = 3, *, network: PeerNetwork | None = None,
                 extra_args: Sequence[str] = ()) -> list[EtcdServer]:
    """``size`` members of one etcd cluster on 127.0.0.1, started and answering.

    With ``network`` (harness/peernet.py) their peer traffic goes through its
    proxies, which can partition them. ``extra_args`` go to every member."""
    members = [EtcdServer(name=f"m{i}", extra_args=extra_args) for i in range(size)]
    if network is not None:
        for member in members:
            member.advertised_peer_port = network.add(member.name, member.peer_port, member.pid)
    initial = ",".join(f"{m.name}={m.peer_url}" for m in members)
    for member in members:
        member.initial_cluster = initial
        member.start(wait=False)
    for member in members:
        member.wait_healthy(timeout=30)
    return members
