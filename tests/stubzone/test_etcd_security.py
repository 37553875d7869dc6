"""The SkyDNS backend against a secured etcd (docs/reference.md section 6): client certificates
(``--client-cert-auth``) rotated without a restart, and etcd users, over the v2 and v3 APIs."""

import shutil
from pathlib import Path

import pytest

from feddns.etcd.credentials import Access, TLSFiles
from feddns.etcd.endpoints import EtcdEndpoints
from harness.etcd import EtcdServer
from harness.stubzone import Pki, StubzoneProcess, skydns_args
from tests.test_etcd_access import read_once

NS1 = "/skydns/local/cluster/dns/stub/federation/svc/{}/ns1"


def keys(etcd: EtcdServer, api: str) -> dict[str, str]:
    return etcd.v2_leaves("/skydns/") if api == "v2" else etcd.get_prefix("/skydns/")


@pytest.mark.parametrize("api", ["v2", "v3"])
def test_client_certificate_rotated_without_a_restart(pki: Pki, tls_etcd: EtcdServer, tmp_path: Path,
                                                      api: str) -> None:
    etcd_pki = tls_etcd.pki
    assert etcd_pki is not None
    with StubzoneProcess(pki, *skydns_args(tls_etcd.url, "/skydns", "--skydns-etcd-api", api),
                         *etcd_pki.flags()) as server:
        assert server.request("POST", "/federations/one", {"nameservers": ["192.0.2.1"]}).status == 200
        assert NS1.format("one") in keys(tls_etcd, api)

        old = tmp_path / "old"
        shutil.copytree(etcd_pki.component.path / "..data", old)
        etcd_pki.rotate()  # a new client CA and certificate, swapped into the Secret volume
        tls_etcd.stop()
        tls_etcd.start()  # etcd trusts the new CA only from now on
        refused = read_once(EtcdEndpoints([tls_etcd.url], timeout=3, access=Access(TLSFiles(
            etcd_pki.server_ca, old / "tls.crt", old / "tls.key"))), b"/skydns/")
        assert refused.startswith("tls: TLS handshake failed"), refused  # the old certificate is no use

        answer = server.request("POST", "/federations/two", {"nameservers": ["192.0.2.2"]})
        assert answer.status == 200, answer
        assert NS1.format("two") in keys(tls_etcd, api)


@pytest.mark.parametrize("api", ["v2", "v3"])
def test_no_client_certificate_is_a_tls_failure_not_unreachable(pki: Pki, tls_etcd: EtcdServer, api: str) -> None:
    assert tls_etcd.pki is not None
    with StubzoneProcess(pki, *skydns_args(tls_etcd.url, "/skydns", "--skydns-etcd-api", api),
                         "--etcd-cacert", str(tls_etcd.pki.server_ca)) as server:
        answer = server.request("POST", "/federations/one", {"nameservers": ["192.0.2.1"]})
        assert answer.status == 503, answer
        assert "TLS handshake failed" in answer.body["error"], answer.body
        assert answer.body["mayHaveApplied"] is False
    assert keys(tls_etcd, api) == {}


@pytest.fixture
def auth_etcd(private_etcd: EtcdServer) -> EtcdServer:
    """etcd with v3 users on (``feddns`` may write ``/skydns/``) and v2 users on (the v2 key space's own)."""
    private_etcd.enable_auth({"feddns": ("v3-password", ["/skydns/"])})
    private_etcd.enable_v2_auth("feddns", "v2-password")
    return private_etcd


@pytest.mark.parametrize("api", ["v2", "v3"])
def test_etcd_user_with_a_password_file(pki: Pki, auth_etcd: EtcdServer, tmp_path: Path, api: str) -> None:
    password = tmp_path / "password"
    password.write_text(f"{api}-password\n")
    with StubzoneProcess(pki, *skydns_args(auth_etcd.url, "/skydns", "--skydns-etcd-api", api),
                         "--etcd-user", "feddns", "--etcd-password-file", str(password)) as server:
        assert server.request("POST", "/federations/one", {"nameservers": ["192.0.2.1"]}).status == 200
        assert server.request("GET", "/federations/one").body["nameservers"] == ["192.0.2.1"]
    assert NS1.format("one") in keys(auth_etcd, api)


@pytest.mark.parametrize("api", ["v2", "v3"])
def test_a_wrong_password_is_reported_as_one(pki: Pki, auth_etcd: EtcdServer, monkeypatch: pytest.MonkeyPatch,
                                             api: str) -> None:
    monkeypatch.setenv("FEDDNS_ETCD_PASSWORD", "wrong")
    with StubzoneProcess(pki, *skydns_args(auth_etcd.url, "/skydns", "--skydns-etcd-api", api),
                         "--etcd-user", "feddns") as server:
        for method, path in (("POST", "/federations/one"), ("GET", "/federations")):
            answer = server.request(method, path, {"nameservers": ["192.0.2.1"]})
            assert answer.status == 503, answer
            assert answer.body["error"].startswith("etcd authentication failed") or \
                "authentication failed" in answer.body["error"], answer.body
            assert "cannot be reached" not in answer.body["error"]
            assert answer.body["mayHaveApplied"] is False
    assert keys(auth_etcd, api) == {}
