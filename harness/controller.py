"""``feddns controller`` as a child process, for the controller, chain and monitoring tests."""

import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from harness.process import ChildProcess, read_only_root

REPO = Path(__file__).parents[1]


class ControllerProcess:
    """``feddns controller --config FILE --metrics 127.0.0.1:0`` as a child process, its output also in
    ``log_path``.

    ``flags`` are added to its command line.
    ``read_only`` runs it on a read-only root filesystem with no writable /tmp, as deploy/ runs it
    (:func:`harness.process.read_only_root`).
    ``start()`` waits until it says where its metrics are; ``metric()`` scrapes them;
    ``kill()`` is a crash (SIGKILL: no lease revoked); ``terminate()`` a clean stop.
    """

    def __init__(self, config_path: str | Path, log_path: Path, *flags: str, read_only: bool = False) -> None:
        self.config_path, self.log_path = config_path, log_path
        args = [sys.executable, "-m", "feddns", "controller", "--config", str(config_path),
                "--metrics", "127.0.0.1:0", "--log-level", "info", *flags]
        self.child = ChildProcess(
            read_only_root(args) if read_only else args,
            ready=r"metrics on http://127\.0\.0\.1:(\d+)/metrics", name="feddns controller", log_path=log_path,
            cwd=REPO,
        )
        self.port = 0

    def start(self) -> "ControllerProcess":
        listening = self.child.start(timeout=20)
        assert listening is not None
        self.port = int(listening.group(1))
        return self

    @property
    def proc(self) -> "subprocess.Popen[str] | None":
        return self.child.proc

    def log(self) -> str:
        return self.child.log

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as reply:
                return reply.status, reply.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """One sample scraped from ``/metrics`` (0 when absent)."""
        for family in text_string_to_metric_families(self.get("/metrics")[1]):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return float(sample.value)
        return 0.0

    def kill(self) -> None:
        self.child.kill()

    def terminate(self) -> int | None:
        """SIGTERM, then the exit status (0 for a clean stop; None if never started)."""
        return self.child.stop(timeout=20)
