"""A real etcd server for tests, and a small synchronous client for arranging data.

``EtcdServer`` runs Debian's ``etcd`` (package ``etcd-server``) on loopback ports
with a throw-away data directory. ``stop()``/``start()`` simulate an outage with
the data kept; ``pause()``/``resume()`` freeze it (SIGSTOP) with its sockets open. The client side talks to etcd's JSON gateway (``/v3/kv/...``,
base64 keys and values), so tests need no event loop to put and read keys.

etcd 3.4 also serves its v2 key space (``/v2/keys/...``, what released SkyDNS
and kube2sky use) when started with ``--enable-v2``, which ``EtcdServer`` does
unless told otherwise; the ``v2_*`` methods read and write it.
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from tests.support.ports import free_port, wait_until


def _b64(data: str | bytes) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _prefix_end(prefix: str) -> str:
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return _b64(bytes(raw))


class EtcdServer:
    """One etcd member on 127.0.0.1; ``url`` is its client URL."""

    def __init__(self, *, enable_v2: bool = True) -> None:
        self.enable_v2 = enable_v2
        self.data_dir = tempfile.mkdtemp(prefix="feddns-etcd-")
        self.client_port = free_port()
        self.peer_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.log_path = os.path.join(self.data_dir, "etcd.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        """Start (or restart) etcd and wait until it answers."""
        binary = shutil.which("etcd") or "/usr/bin/etcd"
        peer = f"http://127.0.0.1:{self.peer_port}"
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                binary, "--name", "test", "--data-dir", os.path.join(self.data_dir, "data"),
                "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"test={peer}", "--logger", "zap", "--log-level", "error",
                *(["--enable-v2"] if self.enable_v2 else []),
            ],
            stdout=log, stderr=log,
        )
        log.close()
        wait_until(self._healthy, timeout=20, interval=0.05, what=f"etcd on {self.url}")

    def _healthy(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"etcd exited with {self.proc.returncode}; log in {self.log_path}")
        try:
            self.call("/v3/maintenance/status", {})
            return True
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
            self.proc.wait(timeout=10)
            self.proc = None

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    # -- the synchronous client -------------------------------------------------

    def call(self, path: str, body: dict[str, Any], timeout: float = 5.0) -> dict[str, Any]:
        """POST ``body`` to the JSON gateway at ``path``; raises ``OSError`` on failure."""
        request = urllib.request.Request(
            self.url + path, data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())

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
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
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
