"""`feddns certs`: a CA, server and client certificates as PEM files, keys at mode 0600."""

import datetime
import ipaddress
import stat
import subprocess
import sys

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from feddns.cli import main
from harness.stubzone import certs


def load(path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_init_and_issue_write_pem_files_with_private_keys_at_0600(tmp_path):
    result = subprocess.run([sys.executable, "-m", "feddns", "certs", "init", "--dir", str(tmp_path)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        f"wrote {tmp_path}/ca.crt and {tmp_path}/ca.key (key mode 0600): CN=feddns stub-zone CA")
    certs("issue-server", "--dir", str(tmp_path), "--dns", "stubzone.example",
          "--ip", "203.0.113.10", "--ip", "2001:db8::10")
    certs("issue-client", "--dir", str(tmp_path), "--cn", "feddns-controller", "--uri", "spiffe://fed/ctl")
    for name in ("ca", "server", "client"):
        assert mode(tmp_path / f"{name}.key") == 0o600
        assert mode(tmp_path / f"{name}.crt") == 0o644
        assert (tmp_path / f"{name}.key").read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ca.crt", "ca.key", "client.crt", "client.key", "server.crt", "server.key"
    ]


def test_profiles(tmp_path):
    certs("init", "--dir", str(tmp_path), "--days", "100")
    certs("issue-server", "--dir", str(tmp_path), "--dns", "Stubzone.Example.", "--ip", "203.0.113.10", "--days", "7")
    certs("issue-client", "--dir", str(tmp_path), "--cn", "ctl")
    ca, server, client = (load(tmp_path / f"{name}.crt") for name in ("ca", "server", "client"))

    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert isinstance(ca.public_key(), ec.EllipticCurvePublicKey) and ca.public_key().curve.name == "secp256r1"
    assert ca.not_valid_after_utc - ca.not_valid_before_utc == datetime.timedelta(days=100)

    assert server.issuer == ca.subject
    assert server.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "stubzone.example"
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["stubzone.example"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("203.0.113.10")]
    server_usage = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(server_usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not server.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert server.not_valid_after_utc - server.not_valid_before_utc == datetime.timedelta(days=7)
    server.verify_directly_issued_by(ca)

    client_usage = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(client_usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    client.verify_directly_issued_by(ca)


def test_key_types_and_validity_start(tmp_path):
    certs("init", "--dir", str(tmp_path), "--key-type", "ecdsa-p384")
    certs("issue-client", "--dir", str(tmp_path), "--cn", "c", "--key-type", "rsa-2048",
          "--not-before", "2024-02-03T04:05:06Z", "--days", "1")
    ca, client = load(tmp_path / "ca.crt"), load(tmp_path / "client.crt")
    assert ca.public_key().curve.name == "secp384r1"
    assert isinstance(client.public_key(), rsa.RSAPublicKey) and client.public_key().key_size == 2048
    assert client.not_valid_before_utc == datetime.datetime(2024, 2, 3, 4, 5, 6, tzinfo=datetime.UTC)
    assert client.not_valid_after_utc == datetime.datetime(2024, 2, 4, 4, 5, 6, tzinfo=datetime.UTC)
    client.verify_directly_issued_by(ca)


@pytest.fixture
def ca_dir(tmp_path):
    certs("init", "--dir", str(tmp_path), "--days", "30")
    return tmp_path


BAD = {
    "existing file": (["issue-client", "--cn", "c", "--name", "ca"], "ca.crt exists; use --force to replace it"),
    "server without names": (["issue-server"], "issue-server needs at least one --dns or --ip"),
    "bad --ip": (["issue-server", "--ip", "10.0.0.300"], "--ip '10.0.0.300' is not an IP address"),
    "zero days": (["issue-client", "--cn", "c", "--days", "0"], "--days 0 is not a number of days more than 0"),
    "CA expired before the start": (["issue-client", "--cn", "c", "--not-before", "2999-01-01"],
                                    "before the certificate"),
    "missing CA": (["issue-client", "--cn", "c", "--ca-cert", "/nonexistent/ca.crt"], "cannot load the CA"),
    "leaf as CA": (["issue-client", "--cn", "c", "--ca-cert", "{dir}/leaf.crt", "--ca-key", "{dir}/leaf.key"],
                   "is not a CA certificate"),
    "key of another certificate": (["issue-client", "--cn", "c", "--ca-key", "{dir}/leaf.key"],
                                   "is not the private key of"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_request_exits_2_with_one_line_and_writes_nothing(ca_dir, capsys, case):
    certs("issue-client", "--dir", str(ca_dir), "--cn", "leaf", "--name", "leaf")
    args, words = BAD[case]
    before = {p.name: p.read_bytes() for p in ca_dir.iterdir()}
    capsys.readouterr()
    try:
        status = main(["certs", args[0], "--dir", str(ca_dir), *(a.format(dir=ca_dir) for a in args[1:])])
    except SystemExit as exc:  # argparse's own refusals, said by the action's parser (feddns certs ACTION)
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("feddns certs") and ": error: " in err[0] and words in err[0], err
    assert {p.name: p.read_bytes() for p in ca_dir.iterdir()} == before


def test_a_leaf_never_outlives_its_ca(ca_dir, capsys):
    certs("issue-client", "--dir", str(ca_dir), "--cn", "c", "--days", "31")
    assert "(capped at the CA's expiry)" in capsys.readouterr().out
    assert load(ca_dir / "client.crt").not_valid_after_utc == load(ca_dir / "ca.crt").not_valid_after_utc


def test_force_replaces(ca_dir):
    old = (ca_dir / "ca.crt").read_bytes()
    certs("init", "--dir", str(ca_dir), "--force")
    assert (ca_dir / "ca.crt").read_bytes() != old
    assert mode(ca_dir / "ca.key") == 0o600


def test_bad_not_before_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["certs", "init", "--not-before", "yesterday"])
    assert exit_info.value.code == 2
    assert "'yesterday' is not an ISO 8601 time" in capsys.readouterr().err
