"""Start-up and shutdown of the commands that serve (docs/reference.md section 6): every
socket is bound before "listening" is printed; a busy address names the flag and the
address and exits 2; a stop is logged; the records source is chosen explicitly."""

import importlib.metadata
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controller.harness import config_raw, write_config
from tests.stubzone.support import Pki, make_pki
from tests.support.ports import wait_until
from tests.support.process import child_env
from tests.support.serve import ServeProcess


def feddns(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "feddns", *args], capture_output=True, text=True, timeout=60,
                          check=False, env=child_env())


@pytest.fixture
def busy() -> Iterator[str]:
    """``127.0.0.1:PORT`` of a TCP socket that is listening (so nothing else can bind it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def stubzone_args(pki: Pki, *extra: str) -> list[str]:
    return ["stubzone", "--cert", pki.cert("server")[0], "--key", pki.cert("server")[1], "--client-ca", pki.ca,
            "--allow", "feddns-controller", "--backend", "skydns", "--etcd", "http://127.0.0.1:2379", *extra]


def controller_args(tmp_path: Path, *extra: str) -> list[str]:
    kubeconfig = tmp_path / "foo.kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: foo\n"
        "clusters: [{name: foo, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: foo, user: {token: t}}]\n"
        "contexts: [{name: foo, context: {cluster: foo, user: foo}}]\n")
    raw = config_raw("http://127.0.0.1:1", "", [{"name": "foo", "kubeconfig": str(kubeconfig)}])
    return ["controller", "--config", write_config(tmp_path / "controller.yaml", raw), *extra]


def assert_refused(result: subprocess.CompletedProcess[str], command: str, flag: str, address: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == f"feddns {command}: error: {flag} {address}: cannot listen: Address already in use", lines
    assert not any("listening" in line or "metrics on" in line for line in lines), lines


def test_version_is_the_package_version() -> None:
    result = feddns("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"feddns {importlib.metadata.version('feddns')}"


def test_serve_without_a_source_says_how_to_choose() -> None:
    result = feddns("serve", "--listen", "127.0.0.1:0")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("feddns serve: error: choose where the records come from: ")
    assert "--etcd URL" in line and "--records FILE" in line and "--example" in line


def test_serve_takes_one_source_only(tmp_path: Path) -> None:
    result = feddns("serve", "--example", "--records", str(tmp_path / "r.yaml"))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "--records and --example together" in line


def test_serve_busy_listen_exits_2_naming_it(busy: str) -> None:
    assert_refused(feddns("serve", "--example", "--listen", busy), "serve", "--listen", busy)


def test_serve_busy_metrics_exits_2_before_saying_it_listens(busy: str) -> None:
    result = feddns("serve", "--example", "--listen", "127.0.0.1:0", "--metrics", busy)
    assert_refused(result, "serve", "--metrics", busy)


def test_stubzone_busy_listen_and_metrics_exit_2(pki: Pki, busy: str) -> None:
    assert_refused(feddns(*stubzone_args(pki, "--listen", busy)), "stubzone", "--listen", busy)
    result = feddns(*stubzone_args(pki, "--listen", "127.0.0.1:0", "--metrics", busy))
    assert_refused(result, "stubzone", "--metrics", busy)


def test_controller_busy_metrics_exits_2(tmp_path: Path, busy: str) -> None:
    assert_refused(feddns(*controller_args(tmp_path, "--metrics", busy)), "controller", "--metrics", busy)


def test_serve_logs_its_stop() -> None:
    server = ServeProcess(example=True, extra_args=["--metrics", "127.0.0.1:0"])
    server.start()
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(20) == 0
    wait_until(lambda: "feddns serve: stopped" in server.log, what="the stop logged")
    assert "feddns serve: stopping (SIGTERM)" in server.log


def test_stubzone_and_controller_log_their_stop(pki: Pki, tmp_path: Path) -> None:
    for args in (stubzone_args(pki, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"),
                 controller_args(tmp_path, "--metrics", "127.0.0.1:0")):
        proc = subprocess.Popen([sys.executable, "-m", "feddns", *args], stderr=subprocess.PIPE, text=True,
                                env=child_env())
        assert proc.stderr is not None
        lines: list[str] = []
        for line in proc.stderr:
            lines.append(line)
            if "metrics on http://127.0.0.1:" in line:
                break
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=30)
        log = "".join(lines) + rest
        assert proc.returncode == 0, log
        assert "stopping (SIGINT)" in log and log.rstrip().endswith("stopped"), log
