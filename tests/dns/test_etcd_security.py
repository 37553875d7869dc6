"""feddns serve against a secured etcd (docs/reference.md section 6): client certificates
rotated without a restart, and an etcd user with a password file."""

from pathlib import Path

import dns.rcode

from harness.etcd import EtcdServer
from harness.ports import wait_until
from harness.serve import ServeProcess

QNAME = "web.prod.fed.svc.federation."


def test_client_certificates_rotated_without_a_restart(tls_etcd: EtcdServer, etcd_prefix: str) -> None:
    assert tls_etcd.pki is not None
    tls_etcd.put(f"{etcd_prefix}/fed/prod/web/a", {"clusterIP": "10.0.0.1", "externalIP": "1.1.1.1"})
    with ServeProcess(etcd_url=tls_etcd.url, prefix=etcd_prefix, extra_args=tls_etcd.pki.flags()) as server:
        wait_until(lambda: server.addresses(QNAME) == ["1.1.1.1"], timeout=10, what="the first load over TLS")
        tls_etcd.pki.rotate()  # a new client CA and certificate, swapped into the Secret volume
        wait_until(lambda: "client certificate or password files changed" in server.log, timeout=10,
                   what="the watch reconnecting with the new files")
        tls_etcd.stop()
        tls_etcd.start()  # trusts the new CA only
        tls_etcd.put(f"{etcd_prefix}/fed/prod/web/b", {"clusterIP": "10.0.0.2", "externalIP": "1.1.1.2"})
        wait_until(lambda: server.addresses(QNAME) == ["1.1.1.1", "1.1.1.2"], timeout=20,
                   what="a change read with the new certificate")


def test_an_etcd_user_and_a_refused_password(private_etcd: EtcdServer, etcd_prefix: str, tmp_path: Path) -> None:
    private_etcd.enable_auth({"feddns": ("serve-password", [f"{etcd_prefix}/"])})
    private_etcd.put(f"{etcd_prefix}/fed/prod/web/a", {"clusterIP": "10.0.0.1", "externalIP": "1.1.1.1"})
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.write_text("serve-password\n")
    bad.write_text("wrong\n")
    user = ["--etcd-user", "feddns", "--etcd-password-file"]
    with ServeProcess(etcd_url=private_etcd.url, prefix=etcd_prefix, extra_args=[*user, str(good)]) as server:
        wait_until(lambda: server.addresses(QNAME) == ["1.1.1.1"], timeout=10, what="the first load as feddns")
    with ServeProcess(etcd_url=private_etcd.url, prefix=etcd_prefix, extra_args=[*user, str(bad)]) as server:
        wait_until(lambda: "authentication failed (wrong user or password)" in server.log, timeout=10,
                   what="the refusal logged as one")
        assert "cannot be reached" not in server.log
        assert server.query(QNAME).rcode() == dns.rcode.SERVFAIL  # nothing loaded
