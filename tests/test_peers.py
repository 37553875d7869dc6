"""The real peers' build (scripts/peers.sh) and start: pinned versions that agree, and failures that name
the peer, its module and version, and the tail of its log (docs/development.md, "Real peers")."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from harness import peers
from harness.coredns import CoreDNS
from harness.kubecluster import KubeCluster

REPO = Path(__file__).parents[1]


def test_the_pinned_kubernetes_version_is_the_build_modules():
    pinned = peers.versions()["KUBERNETES_VERSION"]
    go_mod = (REPO / "tests" / "peers" / "go.mod").read_text()
    assert re.findall(r"^\s*(?:require )?k8s\.io/kubernetes (v\S+)(?: // indirect)?$", go_mod, re.MULTILINE) == [pinned]
    staging = re.findall(r"^\t(k8s\.io/[\w-]+) => \1 (v\S+)$", go_mod, re.MULTILINE)
    assert len(staging) > 20
    assert {version for _, version in staging} == {"v0." + pinned.removeprefix("v1.")}


def test_a_version_the_proxy_refuses_fails_the_build_naming_peer_module_and_version(tmp_path: Path):
    versions = tmp_path / "versions.env"
    versions.write_text((REPO / "tests" / "peers" / "versions.env").read_text()
                        .replace(f"COREDNS_VERSION={peers.versions()['COREDNS_VERSION']}", "COREDNS_VERSION=v0.0.0"))
    env = {**os.environ, "FEDDNS_PEERS_DIR": str(tmp_path / "peers"), "FEDDNS_PEERS_VERSIONS": str(versions)}
    done = subprocess.run(["bash", "scripts/peers.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.startswith("==> peer coredns: building github.com/coredns/coredns@v0.0.0"), done.stdout
    assert "building coredns (github.com/coredns/coredns@v0.0.0) failed; the last lines of" in done.stderr
    assert "github.com/coredns/coredns@v0.0.0" in done.stderr.split("failed; the last lines of", 1)[1]
    assert not (tmp_path / "peers" / "coredns-v0.0.0").exists(), "a failed build is never taken for a done one"


def test_a_peer_that_is_not_built_names_the_command_that_builds_it(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path):
    monkeypatch.setenv("FEDDNS_PEERS_DIR", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"peer coredns is not built in .*: run `bash scripts/peers.sh`"):
        peers.binary("coredns")


def test_a_peer_that_fails_to_start_names_itself_and_shows_its_log(kube_foo: KubeCluster):
    coredns = CoreDNS(kube_foo, project=False)
    coredns.corefile.write_text(coredns.corefile.read_text().replace("errors", "no-such-plugin"))
    try:
        with pytest.raises(RuntimeError, match=r"(?s)coredns \(foo\) exited .*no-such-plugin"):
            coredns.start()
    finally:
        coredns.close()
