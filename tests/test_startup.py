"""Start-up and shutdown of the commands that serve (docs/reference.md section 6): every
socket is bound before "listening" is printed; a busy address names the flag and the
address and exits 2; a stop is logged; the records source is chosen explicitly."""

import importlib.metadata
import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.ports import wait_until
from harness.process import child_env
from harness.serve import ServeProcess
from harness.stubzone import Pki, make_pki
from tests.controller.harness import config_raw, write_config


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


def run_until(args: list[str], ready: str, stop: signal.Signals = signal.SIGTERM) -> tuple[int, list[str]]:
    """Start ``feddns *args``, wait for a line holding ``ready`` (or the exit), send ``stop``; returns the exit
    status and the lines of stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "feddns", *args], stderr=subprocess.PIPE, text=True,
                            env=child_env())
    assert proc.stderr is not None
    lines: list[str] = []
    for line in proc.stderr:
        lines.append(line)
        if ready in line:
            proc.send_signal(stop)
            break
    with proc.stderr:
        rest = proc.stderr.read()  # from the same reader: what it read ahead is not lost (communicate() loses it)
    proc.wait(60)
    return proc.returncode, [line for line in "".join([*lines, rest]).splitlines() if line]


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
        returncode, lines = run_until(args, "metrics on http://127.0.0.1:", stop=signal.SIGINT)
        log = "\n".join(lines)
        assert returncode == 0, log
        assert "stopping (SIGINT)" in log and log.rstrip().endswith("stopped"), log


# --- --log-format json: every line on stderr is one JSON object --------------------------------------------

def json_lines(lines: list[str]) -> list[dict[str, object]]:
    """Each line parsed (a line that is not JSON fails the test, naming it), with the four fields of every line."""
    parsed = []
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            pytest.fail(f"not JSON: {line!r}")
        assert isinstance(obj, dict) and {"time", "level", "logger", "message"} <= obj.keys(), line
        parsed.append(obj)
    return parsed


def messages(lines: list[dict[str, object]]) -> list[object]:
    return [line["message"] for line in lines]


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_json_lines_and_each_state_change_once(workers: str) -> None:
    status, lines = run_until(["--log-level", "info", "serve", "--log-format", "json", "--example", "--listen",
                               "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--query-log", "--workers", workers],
                              "metrics on")
    assert status == 0, lines
    parsed = json_lines(lines)
    said = messages(parsed)
    ours = [m for line, m in zip(parsed, said, strict=True) if line["logger"] == "feddns serve"]
    assert sum(str(m).startswith("listening on udp+tcp 127.0.0.1:") for m in ours) == 1, ours
    assert ours.count("stopping (SIGTERM)") == 1 and ours[-1] == "stopped", ours
    ready = [line for line in parsed if str(line["message"]).startswith("ready: answering from")]
    assert len(ready) == int(workers), said
    if workers == "2":
        assert {line.get("process") for line in ready} == {"worker 1", "worker 2"}


def test_serve_text_lines_have_one_format() -> None:
    status, lines = run_until(["serve", "--example", "--listen", "127.0.0.1:0", "--workers", "2"], "listening on")
    assert status == 0, lines
    shape = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) [\w. ]+( \(worker \d\))?: ")
    assert all(shape.match(line) for line in lines), lines


def test_stubzone_and_controller_json_lines(pki: Pki, tmp_path: Path) -> None:
    for args in (stubzone_args(pki, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"),
                 controller_args(tmp_path, "--metrics", "127.0.0.1:0")):
        status, lines = run_until([*args, "--log-format", "json"], "metrics on", stop=signal.SIGINT)
        assert status == 0, lines
        said = messages(json_lines(lines))
        assert "stopping (SIGINT)" in said and said[-1] == "stopped", said


def test_links_and_certs_json_lines(pki: Pki, tmp_path: Path) -> None:
    cert, key = pki.cert("server")
    env = {**child_env(), "KUBERNETES_SERVICE_HOST": ""}
    links = subprocess.run([sys.executable, "-m", "feddns", "--log-format", "json", "links", "--listen", "127.0.0.1:0",
                            "--cert", cert, "--key", key, "--resolver", "127.0.0.1:53"],
                           capture_output=True, text=True, timeout=60, check=False, env=env)
    assert links.returncode == 2
    (line,) = json_lines(links.stderr.splitlines())
    assert line["level"] == "error" and line["logger"] == "feddns links", line
    certs = feddns("certs", "init", "--dir", str(tmp_path / "ca"), "--log-format", "json")
    assert certs.returncode == 0, certs.stderr
    json_lines(certs.stderr.splitlines())
    bad = feddns("--log-format", "json", "serve", "--no-such-flag")
    assert bad.returncode == 2
    (line,) = json_lines(bad.stderr.splitlines())
    assert "unrecognized arguments: --no-such-flag" in str(line["message"])


def test_stubzone_takes_context_as_links_does_and_kube_context_still(pki: Pki) -> None:
    for flag in ("--context", "--kube-context"):
        result = feddns(*stubzone_args(pki, flag, "foo"))
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == [
            "feddns stubzone: error: --context is for --backend coredns, coredns-custom, kube-dns or openshift, "
            "not skydns"], result.stderr
    shown = feddns("stubzone", "--help").stdout
    assert "--context NAME" in shown and "--kube-context" not in shown
