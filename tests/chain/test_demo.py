"""``make demo`` as a person uses it: every endpoint printed, ``fail foo`` moving the
answers to bar, and nothing left behind once it stops."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from harness.chain import CLUSTERS, REPO
from harness.ports import wait_until


def test_demo_prints_its_endpoints_fails_foo_over_to_bar_and_cleans_up(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    state = tmp_path / "demo.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(TMPDIR=str(scratch), FEDDNS_DEMO_STATE=str(state), PYTHONUNBUFFERED="1")
    log = tmp_path / "demo.log"
    with open(log, "w") as out:
        demo = subprocess.Popen([sys.executable, "scripts/demo.py", "--ttl", "1"], cwd=REPO, env=env,
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: demo.poll() is None and "Stop with Ctrl-C" in log.read_text(), timeout=90,
                   interval=0.2, what="the demo to start")
        text = log.read_text()
        for endpoint in ("etcd (Federated-DNS's records)", "feddns serve (Federated-DNS)"):
            assert endpoint in text, text
        for name in CLUSTERS:
            for endpoint in ("kube-apiserver", "DNS (CoreDNS)", "feddns stubzone", "second DNS (unbound)"):
                assert f"cluster {name}'s {endpoint}" in text, text
        assert "etcdctl --endpoints http://127.0.0.1:" in text
        assert "kubectl --kubeconfig " in text
        assert state.exists()

        failed = subprocess.run([sys.executable, "scripts/demo.py", "fail", "foo"], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=60, check=False)
        assert failed.returncode == 0, failed.stderr
        before, after = failed.stdout.split("\nafter:\n")
        foo = {CLUSTERS["foo"]["clusterIP"], CLUSTERS["foo"]["externalIP"]}
        bar = {CLUSTERS["bar"]["clusterIP"], CLUSTERS["bar"]["externalIP"]}
        assert foo <= set(before.split()), before
        assert not foo & set(after.split()) and bar <= set(after.split()), after
    finally:
        demo.send_signal(signal.SIGTERM)
        assert demo.wait(60) == 0, log.read_text()
    assert not state.exists()
    assert list(scratch.iterdir()) == []


TEST_LIBRARIES = ("tests", "pytest", "hypothesis", "schemathesis", "jsonpatch", "kubernetes_validate", "mypy")
"""The repository's tests and what pyproject.toml's test extra installs: none of them may be
needed by the demo, which scripts/demo.sh installs without that extra."""


def test_the_demo_imports_no_test_library() -> None:
    blocked = ", ".join(repr(name) for name in TEST_LIBRARIES)
    code = (f"import runpy, sys; sys.modules.update(dict.fromkeys(({blocked}))); "
            "sys.argv = ['scripts/demo.py', '--help']; runpy.run_path('scripts/demo.py', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
    assert "install_venv \"\"" in (REPO / "scripts/demo.sh").read_text()
