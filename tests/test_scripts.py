"""scripts/: every install step says what it does, on one line, before it starts; run.sh
serves the example explicitly; test.sh installs everything the tests use."""

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def bash(script: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", f"source {REPO}/scripts/debian-deps.sh; {script}"], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **env})


def test_present_debian_packages_are_one_line() -> None:
    result = bash("install_debian bash=bash sh=dash")
    assert result.returncode == 0
    assert result.stdout.splitlines() == ["==> Debian packages: all present (bash sh)"]


def test_missing_debian_packages_say_each_step(tmp_path: Path) -> None:
    """With stand-ins for apt-get, a missing command shows the update and the install, one line each."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-get").write_text("#!/bin/sh\necho \"apt-get $*\" >> \"$CALLS\"\n")
    (bin_dir / "apt-get").chmod(0o755)
    calls = tmp_path / "calls"
    result = bash("install_debian nosuchcommand-feddns=feddns-pkg bash=bash", PATH=f"{bin_dir}:{os.environ['PATH']}",
                  CALLS=str(calls))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["==> apt-get update (to install feddns-pkg)",
                                          "==> apt-get install feddns-pkg"]
    assert calls.read_text().splitlines()[0] == "apt-get update -qq"


def test_installing_the_venv_is_one_line(tmp_path: Path) -> None:
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    for name in ("python", "pip"):
        (venv_bin / name).write_text("#!/bin/sh\nexit 0\n")
        (venv_bin / name).chmod(0o755)
    result = bash('install_venv "[test]"', cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["==> pip install -e .[test] into .venv (feddns and its Python dependencies)"]


def test_run_sh_serves_the_example_explicitly() -> None:
    text = (REPO / "scripts" / "run.sh").read_text()
    (command,) = [line for line in text.splitlines() if line.startswith("exec ")]
    assert "feddns serve --example " in command


def test_test_sh_installs_every_program_the_tests_start() -> None:
    text = (REPO / "scripts" / "test.sh").read_text().replace("\\\n", " ")
    lines = [line for line in text.splitlines() if line.startswith("install_debian")]
    commands = dict(pair.split("=") for line in lines for pair in line.split()[1:])
    assert commands == {"etcd": "etcd-server", "etcdctl": "etcd-client", "dig": "bind9-dnsutils",
                        "unbound": "unbound", "named": "bind9", "curl": "curl", "promtool": "prometheus",
                        "testssl": "testssl.sh", "nsd": "nsd", "dnsperf": "dnsperf",
                        # the e2e tier's node (harness/node.py) and its images (scripts/images.sh)
                        "containerd": "containerd", "runc": "runc",
                        "/usr/lib/cni/bridge": "containernetworking-plugins",
                        "iptables": "iptables", "conntrack": "conntrack", "buildah": "buildah",
                        "mmdebstrap": "mmdebstrap", "cc": "gcc"}
    assert text.index("bash scripts/images.sh local") < text.index("wait \"$peers\"") \
        < text.index("bash scripts/images.sh peers") < text.index("wait \"$images\"") < text.index("exec "), \
        "the images that need no peer are made while the peers build, CoreDNS's and etcd's after them, " \
        "all before the tests"
    assert re.search(r"^\.ci/run|exec bash scripts/test.sh", (REPO / ".ci" / "run").read_text(), re.MULTILINE)
    assert re.search(r"^bash scripts/peers\.sh", text, re.MULTILINE), "the real peers are built before the tests"
    assert text.index("bash scripts/peers.sh") < text.index("wait \"$peers\"") < text.index("exec ")
