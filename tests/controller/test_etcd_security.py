"""The controller against a secured etcd (docs/reference.md sections 6 and 7): client
certificates rotated without a restart, and an etcd user whose password is refused."""

import logging
from pathlib import Path
from typing import Any

import pytest

from harness.controller import ControllerProcess
from harness.etcd import EtcdServer
from harness.objects import service
from harness.ports import wait_until
from tests.controller.harness import LABEL, RunningController, records, write_config
from tests.controller.test_controller import SYNCED, two_clusters, wait_records


def _tls_config(etcd: EtcdServer, prefix: str, foo: Any, bar: Any, tmp_path: Path) -> dict[str, Any]:
    assert etcd.pki is not None
    raw = two_clusters(etcd, prefix, foo, bar, tmp_path)
    cert, key = etcd.pki.client_cert
    raw["etcd"]["tls"] = {"cacert": str(etcd.pki.server_ca), "cert": str(cert), "key": str(key)}
    return raw


def test_client_certificates_rotated_without_a_restart(tls_etcd, etcd_prefix, foo, bar, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="controller")
    caplog.set_level(logging.INFO, logger="feddns")
    assert tls_etcd.pki is not None
    with RunningController(_tls_config(tls_etcd, etcd_prefix, foo, bar, tmp_path)) as running:
        wait_records(tls_etcd, etcd_prefix, SYNCED)
        wait_until(lambda: running.controller.syncer.resynced, what="resync done")
        tls_etcd.pki.rotate()  # a new CA and client certificate, swapped into the Secret volume
        wait_until(lambda: caplog.text.count("client certificate or password files changed") >= 3, timeout=10,
                   what="the elector, the writer and the prefix watch reconnecting with the new files")
        tls_etcd.stop()
        tls_etcd.start()  # trusts the new CA only: the old certificate would be refused now
        foo.apply(service("myns", "rotated", labels=LABEL, cluster_ip="10.0.3.91"))
        wait_until(lambda: "myns/rotated/foo" in records(tls_etcd, etcd_prefix), timeout=20,
                   what="a write with the new certificate")
        tls_etcd.delete(f"{etcd_prefix}/myfederation/myns/myservice/foo")
        wait_until(lambda: "myns/myservice/foo" in records(tls_etcd, etcd_prefix), timeout=10,
                   what="the prefix watch working with the new certificate")
        # etcd's restart may outlast the lease's confirmation (2 s): the replica steps down, then leads again
        wait_until(lambda: running.is_leader, timeout=15, what="leading with the new certificate")


def test_an_https_etcd_without_a_client_certificate_is_a_tls_failure(tls_etcd, etcd_prefix, foo, bar, tmp_path):
    raw = _tls_config(tls_etcd, etcd_prefix, foo, bar, tmp_path)
    del raw["etcd"]["tls"]["cert"], raw["etcd"]["tls"]["key"]
    controller = ControllerProcess(write_config(tmp_path / "c.yaml", raw), tmp_path / "c.log").start()
    try:
        wait_until(lambda: "TLS handshake failed" in controller.log(), timeout=15, what="the TLS failure logged")
        assert "cannot be reached" not in controller.log()
        assert controller.get("/ready")[0] == 503
    finally:
        assert controller.terminate() == 0


@pytest.fixture
def auth_etcd(private_etcd: EtcdServer, etcd_prefix: str) -> EtcdServer:
    """etcd with users on; ``feddns`` may write P/F/ and the election key, nothing else."""
    private_etcd.enable_auth({"feddns": ("controller-password", [f"{etcd_prefix}/", "feddns-controller-leader"])})
    return private_etcd


@pytest.mark.parametrize("password", ["controller-password", "wrong"])
def test_an_etcd_user(auth_etcd, etcd_prefix, foo, bar, tmp_path, password):
    raw = two_clusters(auth_etcd, etcd_prefix, foo, bar, tmp_path)
    (tmp_path / "password").write_text(password + "\n")
    raw["etcd"].update(user="feddns", passwordFile=str(tmp_path / "password"))
    controller = ControllerProcess(write_config(tmp_path / "c.yaml", raw), tmp_path / "c.log").start()
    try:
        if password == "wrong":
            wait_until(lambda: "authentication failed (wrong user or password)" in controller.log(), timeout=15,
                       what="the refusal logged as one")
            assert "cannot be reached" not in controller.log()
            assert controller.get("/ready")[0] == 503
            assert records(auth_etcd, etcd_prefix) == {}
        else:
            wait_records(auth_etcd, etcd_prefix, SYNCED)
            wait_until(lambda: controller.get("/ready")[0] == 200, what="ready")
    finally:
        assert controller.terminate() == 0
