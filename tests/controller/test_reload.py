"""A config reload past a member cluster whose API server accepts connections and never answers.

A real kube-apiserver cannot be made to do that on demand (stopped, it refuses connections;
paused, the kernel still answers the handshake but a restart resets them), so the silent
server is a socket server in this test: it accepts every connection, reads what is sent and
never writes a byte. The controller's list requests to it block until their read timeout
(30 s here); a reload that removes or replaces that cluster must not wait for them.
"""

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from controller.settings import Settings, StubzoneSettings
from harness.kubecluster import KubeCluster
from harness.ports import wait_until
from tests.controller.harness import FAST_SYNC, FAST_WATCH, RunningController, config_raw, write_config

RELOAD_WITHIN = 1.0
"""Seconds from the config file's change to the reload applied, logged and counted."""
SETTINGS = Settings(watch=FAST_WATCH, sync=FAST_SYNC, stubzone=replace(StubzoneSettings(), config_poll=0.05))
"""The file is looked at every 50 ms, so that what is measured is the reload, not the poll (1 s by default)."""


class SilentApiServer:
    """Accepts TCP connections on a loopback port and never answers; :meth:`close` closes them all."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="silent-api-server", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections.append(connection)  # held open, never read from or written to

    def write_kubeconfig(self, path: Path, name: str) -> str:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": name, "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": name, "user": {"token": "unused"}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        }))
        return str(path)

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
        self._listener.close()
        for connection in self.connections:
            connection.close()


@pytest.fixture
def silent() -> Iterator[SilentApiServer]:
    server = SilentApiServer()
    yield server
    server.close()


def on_silent_bar(etcd_url: str, prefix: str, foo: KubeCluster, silent: SilentApiServer, tmp_path: Path) -> dict:
    """The config of clusters foo (the real kube-apiserver foo) and bar (the silent server)."""
    return config_raw(etcd_url, prefix, [
        entry(foo), {"name": "bar", "kubeconfig": silent.write_kubeconfig(tmp_path / "bar", "bar")}])


def entry(kube: KubeCluster) -> dict:
    """A ``clusters[]`` entry that reaches ``kube`` as its admin."""
    return {"name": kube.name, "kubeconfig": kube.kubeconfig}


@contextmanager
def waiting_on_silent_bar(raw: dict, path: Path, silent: SilentApiServer) -> Iterator[RunningController]:
    """A controller on ``raw`` (written to ``path``, reloaded from it) once bar's lists wait on the
    silent server and a refused config has set config_file_stale to 1; the silent server is
    closed before the controller stops, so that the cut requests end with it."""
    running = RunningController(raw, settings=SETTINGS)
    running.controller.config_path = write_config(path, raw)
    with running:
        wait_until(lambda: len(silent.connections) >= 2, timeout=10, what="bar's lists waiting on the silent server")
        write_config(path, {**raw, "federation": "other"})  # refused: a new federation needs a restart
        wait_until(lambda: running.metric("feddns_controller_config_file_stale") == 1, timeout=10,
                   what="the refused config counted")
        yield running
        silent.close()


def reload_to(path: Path, raw: dict, controller: RunningController, caplog: pytest.LogCaptureFixture,
              words: str) -> float:
    """Write ``raw`` to the config file; the seconds until the reload is logged with ``words`` and
    config_file_stale reads 0 again."""
    started = time.monotonic()
    write_config(path, raw)
    wait_until(lambda: any(words in r.getMessage() for r in caplog.records)
               and controller.metric("feddns_controller_config_file_stale") == 0,
               timeout=30, interval=0.01, what=f"a log line with {words!r}, and config_file_stale 0")
    return time.monotonic() - started


def test_a_cluster_whose_api_server_never_answers_is_removed_within_a_second(etcd, etcd_prefix, kube_foo, silent,
                                                                              tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="controller.app")
    raw, path = on_silent_bar(etcd.url, etcd_prefix, kube_foo, silent, tmp_path), tmp_path / "controller.yaml"
    with waiting_on_silent_bar(raw, path, silent) as controller:
        without = {**raw, "clusters": raw["clusters"][:1]}
        took = reload_to(path, without, controller, caplog, "config reloaded: 1 clusters (joined: none; left: bar;")
        print(f"removed in {took:.2f} s")
        assert took < RELOAD_WITHIN
        assert "bar" not in controller.controller.views


def test_a_cluster_moved_off_a_silent_api_server_is_watched_anew_within_a_second(etcd, etcd_prefix, kube_foo,
                                                                                 kube_bar, silent, tmp_path, caplog):
    """The same cluster, its kubeconfig replaced: the old watches are cut, not waited for, and
    whatever their threads would still hand over is dropped; the new ones list the real cluster."""
    caplog.set_level(logging.INFO, logger="controller.app")
    raw, path = on_silent_bar(etcd.url, etcd_prefix, kube_foo, silent, tmp_path), tmp_path / "controller.yaml"
    with waiting_on_silent_bar(raw, path, silent) as controller:
        moved = {**raw, "clusters": [raw["clusters"][0], entry(kube_bar)]}
        took = reload_to(path, moved, controller, caplog, "left: none; watched anew: bar)")
        print(f"replaced in {took:.2f} s")
        assert took < RELOAD_WITHIN
        wait_until(lambda: controller.controller.views["bar"].synced, timeout=10, what="bar listed from its new server")
