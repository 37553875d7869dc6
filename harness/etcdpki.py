"""Certificates for a real etcd with ``--client-cert-auth``, made with ``feddns certs``.

``EtcdPki`` holds, in one directory:

* ``server/``: a CA and etcd's server certificate for 127.0.0.1 (``--cert-file``).
  It carries both ``serverAuth`` and ``clientAuth``, and its CA is trusted for
  clients too: with ``--client-cert-auth``, etcd's own HTTP/JSON gateway dials
  etcd's gRPC side presenting that certificate (``feddns certs issue-server``
  makes ``serverAuth`` only, so this one is made with ``cryptography``);
* ``admin/``: a CA and the client certificate the tests' own etcd client uses;
* ``clients-N/``: the CAs of the component under test's client certificates,
  one per generation; etcd trusts the admin CA and the current generation's CA
  (``trusted.pem``, its ``--trusted-ca-file``), so that moving to a new
  generation and restarting etcd refuses the old client certificate;
* ``component/``: the component's client certificate and key, laid out as a
  Kubernetes Secret volume (``tls.crt`` -> ``..data/tls.crt``, ``..data`` a
  symlink swapped at each rotation, as kubelet does).
"""

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from feddns.cli import main as feddns_main
from harness.volume import KubeletVolume
from stubzone import pki


def certs(*args: str) -> None:
    """``feddns certs ARGS`` in this process; fails unless it exits 0."""
    assert feddns_main(["certs", *args]) == 0, args


class EtcdPki:
    """Server, admin and component certificates for etcd on 127.0.0.1 (see the module doc)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        certs("init", "--dir", str(root / "server"), "--cn", "etcd server CA")
        _issue_etcd_server(root / "server")
        certs("init", "--dir", str(root / "admin"), "--cn", "etcd admin CA")
        certs("issue-client", "--dir", str(root / "admin"), "--cn", "root")
        self.generation = 0
        self.component = KubeletVolume(root / "component")
        self.rotate()

    @property
    def server_ca(self) -> Path:
        return self.root / "server" / "ca.crt"

    @property
    def server_cert(self) -> tuple[Path, Path]:
        return self.root / "server" / "server.crt", self.root / "server" / "server.key"

    @property
    def admin_cert(self) -> tuple[Path, Path]:
        return self.root / "admin" / "client.crt", self.root / "admin" / "client.key"

    @property
    def trusted(self) -> Path:
        """etcd's ``--trusted-ca-file``: the admin CA and the current component CA."""
        return self.root / "trusted.pem"

    @property
    def client_cert(self) -> tuple[Path, Path]:
        """The component's ``--etcd-cert`` and ``--etcd-key`` (symlinks into the Secret volume)."""
        return self.component.file("tls.crt"), self.component.file("tls.key")

    def rotate(self) -> None:
        """A new generation: a new client CA, a new client certificate in the Secret volume,
        and ``trusted.pem`` naming the new CA only (etcd reads it when it starts)."""
        self.generation += 1
        directory = self.root / f"clients-{self.generation}"
        certs("init", "--dir", str(directory), "--cn", f"component CA {self.generation}")
        certs("issue-client", "--dir", str(directory), "--cn", "feddns")
        self.component.write({"tls.crt": (directory / "client.crt").read_bytes(),
                              "tls.key": (directory / "client.key").read_bytes()})
        bundle = b"".join((self.root / name / "ca.crt").read_bytes() for name in ("server", "admin", directory.name))
        temporary = self.root / "trusted.pem.tmp"
        temporary.write_bytes(bundle)
        os.replace(temporary, self.trusted)

    def flags(self) -> list[str]:
        """The component's flags: ``--etcd-cacert``, ``--etcd-cert``, ``--etcd-key``."""
        cert, key = self.client_cert
        return ["--etcd-cacert", str(self.server_ca), "--etcd-cert", str(cert), "--etcd-key", str(key)]


def _issue_etcd_server(directory: Path) -> None:
    """``server.crt``/``server.key`` for 127.0.0.1 with serverAuth and clientAuth, signed by ``ca.crt``."""
    authority = pki.load_authority(directory / "ca.crt", directory / "ca.key")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "etcd")]))
        .issuer_name(authority.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                    x509.DNSName("localhost")]), critical=False)
        .sign(authority.key, hashes.SHA256())
    )
    pki.save(certificate, key, directory / "server.crt", directory / "server.key", force=True)
