"""The webhook's TLS: 1.2 or later, the certificate the API server's caBundle trusts, rotated without a restart."""

import http.client
import json
import shutil
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from tests.links.support import LinksProcess, Pki, admission_review, certs, make_pki, pod


def serial_seen(process: LinksProcess, context: ssl.SSLContext | None = None) -> int:
    """The serial number of the certificate the server presents to a new connection."""
    connection = http.client.HTTPSConnection("127.0.0.1", process.port, context=context or process.context(),
                                             timeout=10)
    try:
        connection.connect()
        assert connection.sock is not None
        der = connection.sock.getpeercert(binary_form=True)
    finally:
        connection.close()
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def test_tls_below_1_2_is_refused(webhook: LinksProcess):
    context = webhook.context()
    context.minimum_version = ssl.TLSVersion.TLSv1
    context.maximum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with pytest.raises(ssl.SSLError):
        serial_seen(webhook, context)


def test_a_client_trusting_another_ca_is_refused(webhook: LinksProcess, tmp_path: Path):
    other = make_pki(tmp_path)
    with pytest.raises(ssl.SSLCertVerificationError):
        serial_seen(webhook, ssl.create_default_context(cafile=str(other.ca)))


def test_a_rotated_certificate_is_served_to_new_connections(kubeconfig: str, tmp_path: Path, pki: Pki):
    own = Pki(tmp_path)
    shutil.copy(pki.ca, own.ca)
    shutil.copy(pki.dir / "ca.key", tmp_path / "ca.key")
    certs("issue-server", "--dir", str(tmp_path), "--ip", "127.0.0.1")
    cert, key = own.cert()
    process = LinksProcess(own, kubeconfig=kubeconfig, resolver="127.0.0.1:53").start()
    try:
        kept = http.client.HTTPSConnection("127.0.0.1", process.port, context=process.context(), timeout=10)
        kept.connect()
        assert serial_seen(process) == serial_of(cert)

        mark = len(process.lines)
        cert.write_text("not a certificate\n")  # a half-written rotation: the old one stays
        process.wait_for_log("keeping the certificate", start=mark)
        certs("issue-server", "--dir", str(tmp_path), "--ip", "127.0.0.1", "--force")
        process.wait_for_log(f"certificate {cert} / key {key} reloaded", start=mark)
        assert serial_seen(process) == serial_of(cert)

        body = json.dumps(admission_review(pod())).encode()  # the connection opened before still answers
        kept.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        assert kept.getresponse().status == 200
        kept.close()
    finally:
        assert process.stop() == 0
