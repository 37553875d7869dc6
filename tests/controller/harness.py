"""Running controllers against member clusters (real kube-apiservers, or FakeKube for faults) and real etcd,
for the controller tests."""

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from controller.app import Controller
from controller.config import ControllerConfig, parse_config
from controller.settings import Settings, SyncSettings
from feddns.reflector import WatchTiming
from harness.etcd import EtcdServer
from harness.ports import free_port
from tests.support.membercluster import MemberCluster

FEDERATION = "myfederation"
LABEL = {"federation.feddns.io/name": FEDERATION}
FIXTURES = Path(__file__).parent / "fixtures"
REPO = str(Path(__file__).parents[2])

FAST_WATCH = WatchTiming(watch_timeout=30, backoff_initial=0.05, backoff_max=0.5, read_slack=10)
"""Short backoffs so that reconnect tests take a second, not half a minute."""
FAST_SYNC = SyncSettings(debounce=0.01, retry_initial=0.05, retry_max=0.5)


def cluster_entry(cluster: MemberCluster, directory: Path, **extra: Any) -> dict[str, Any]:
    """A ``clusters[]`` entry for ``cluster``, with a kubeconfig written into ``directory``."""
    kubeconfig = cluster.write_kubeconfig(str(directory / f"{cluster.name}.kubeconfig"))
    return {"name": cluster.name, "kubeconfig": kubeconfig, **extra}


def unreachable_entry(name: str, directory: Path, **extra: Any) -> dict[str, Any]:
    """A ``clusters[]`` entry named ``name`` whose API server refuses connections: its kubeconfig names a
    loopback port nothing listens on (the OS just handed it out and it was closed again)."""
    path = directory / f"{name}.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
        "users": [{"name": name, "user": {"token": "unused"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }))
    return {"name": name, "kubeconfig": str(path), **extra}


def config_raw(etcd_url: str, prefix: str, clusters: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """The config file contents (docs/reference.md section 7) as a dict."""
    return {
        "federation": FEDERATION,
        "etcd": {"endpoints": [etcd_url], "prefix": prefix},
        "clusters": clusters,
        "leaseSeconds": 2,
        **extra,
    }


def write_config(path: Path, raw: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(raw))
    return str(path)


class RunningController:
    """A :class:`Controller` run in a thread of its own with its own event loop."""

    def __init__(self, config: ControllerConfig | dict[str, Any], name: str | None = None,
                 publisher: Any = None, watch_timing: WatchTiming = FAST_WATCH,
                 settings: Settings | None = None) -> None:
        if isinstance(config, dict):
            config = parse_config(config)
        self.registry = CollectorRegistry()
        self.controller = Controller(
            config, self.registry, settings=settings or Settings(watch=watch_timing, sync=FAST_SYNC), name=name,
            publisher=publisher,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self) -> "RunningController":
        started = threading.Event()

        async def body() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            started.set()
            await self.controller.run(self._stop)

        def main() -> None:
            try:
                asyncio.run(body())
            except BaseException as exc:  # noqa: BLE001 - re-raised by stop()
                self._error = exc
                started.set()

        self._thread = threading.Thread(target=main, name="controller", daemon=True)
        self._thread.start()
        started.wait(10)
        return self

    def stop(self) -> None:
        """Stop (the controller resigns, as on SIGTERM); re-raises what the run raised."""
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(20)
        assert not self._thread.is_alive(), "controller did not stop within 20 s"
        self._thread = None
        if self._error is not None:
            raise self._error

    def __enter__(self) -> "RunningController":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def metric(self, name: str, **labels: str) -> float:
        """A sample of the controller's registry (0 when absent)."""
        return self.registry.get_sample_value(name, labels) or 0.0

    @property
    def is_leader(self) -> bool:
        return self.controller.elector.is_leader


def records(etcd: EtcdServer, prefix: str) -> dict[str, Any]:
    """The federation's keys under ``prefix``, relative to ``P/F/``, with JSON values decoded."""
    root = f"{prefix}/{FEDERATION}/"
    return {key[len(root):]: json.loads(value) for key, value in etcd.get_prefix(root).items()}


def mod_revisions(etcd: EtcdServer, prefix: str) -> dict[str, int]:
    """Each key under ``P/F/`` with its mod revision (to prove nothing was rewritten)."""
    import base64

    root = f"{prefix}/{FEDERATION}/".encode()
    end = bytearray(root)
    end[-1] += 1
    reply = etcd.call("/v3/kv/range", {
        "key": base64.b64encode(root).decode(), "range_end": base64.b64encode(bytes(end)).decode(),
    })
    return {base64.b64decode(kv["key"]).decode(): int(kv["mod_revision"]) for kv in reply.get("kvs", [])}
