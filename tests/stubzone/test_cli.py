"""`feddns stubzone` flags: a bad one exits 2 with one line, before any socket (CONTRACTS 6)."""

import socket
import subprocess
import sys
import urllib.request

import pytest

from feddns.cli import main
from tests.stubzone.support import ALLOWED, StubzoneProcess
from tests.support.ports import free_port


def flags(pki, **overrides: str | None) -> list[str]:
    """`feddns stubzone` arguments with ``overrides`` (``None`` drops the flag)."""
    values: dict[str, str | None] = {
        "--listen": "127.0.0.1:0", "--cert": pki.cert("server")[0], "--key": pki.cert("server")[1],
        "--client-ca": pki.ca, "--allow": ALLOWED, "--etcd": "http://127.0.0.1:2379",
    }
    values.update({f"--{name.replace('_', '-')}": value for name, value in overrides.items()})
    args = ["stubzone"]
    for flag, value in values.items():
        if value is not None:
            args += [flag, value]
    return args


def garbage(tmp_path, name: str = "garbage.pem") -> str:
    path = tmp_path / name
    path.write_text("-----BEGIN NOTHING-----\nxyz\n")
    return str(path)


BAD = {
    "missing cert file": (lambda pki, tmp: {"cert": str(tmp / "nope.crt")}, "--cert "),
    "key is a directory": (lambda pki, tmp: {"key": str(tmp)}, "--key "),
    "key not PEM": (lambda pki, tmp: {"key": garbage(tmp)}, "--cert "),
    "key of another certificate": (lambda pki, tmp: {"key": pki.cert("client")[1]}, "key values mismatch"),
    "client CA not PEM": (lambda pki, tmp: {"client_ca": garbage(tmp)}, "--client-ca "),
    "no --allow": (lambda pki, tmp: {"allow": None}, "at least one --allow"),
    "empty --allow": (lambda pki, tmp: {"allow": ""}, "--allow ''"),
    "--allow with a space": (lambda pki, tmp: {"allow": "a b"}, "--allow 'a b'"),
    "bad --listen": (lambda pki, tmp: {"listen": "127.0.0.1"}, "has no port"),
    "https etcd": (lambda pki, tmp: {"etcd": "https://127.0.0.1:2379"}, "only http://"),
    "bad federation zone": (lambda pki, tmp: {"federation_zone": "fed_zone."}, "--federation-zone"),
    "bad skydns domain": (lambda pki, tmp: {"skydns_domain": "."}, "--skydns-domain"),
    "relative etcd prefix": (lambda pki, tmp: {"etcd_prefix": "skydns"}, "must start with '/'"),
    "bad --metrics": (lambda pki, tmp: {"metrics": "nowhere"}, "has no port"),
    "zero handshake timeout": (lambda pki, tmp: {"tls_handshake_timeout": "0"}, "--tls-handshake-timeout must be"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_flag_exits_2_with_one_line(pki, tmp_path, capsys, case):
    make, words = BAD[case]
    assert main(flags(pki, **make(pki, tmp_path))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("feddns stubzone: error: ")
    assert words in err[0]


def test_missing_required_flag_is_an_argparse_error(pki):
    result = subprocess.run([sys.executable, "-m", "feddns", *flags(pki, client_ca=None)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("the following arguments are required: --client-ca")


def test_port_in_use_exits_2(pki, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(flags(pki, listen=f"127.0.0.1:{port}")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"feddns stubzone: error: --listen 127.0.0.1:{port}: Address already in use"


def test_sigterm_stops_cleanly_and_metrics_count_requests(pki, etcd, etcd_prefix):
    metrics_port = free_port()
    server = StubzoneProcess(pki, etcd.url, etcd_prefix, "--metrics", f"127.0.0.1:{metrics_port}")
    server.start()
    try:
        assert server.request("GET", "/federations").status == 200
        assert server.request("GET", "/federations", cert="stranger").status == 403
        server.wait_for_log(r"status=403")
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
            text = response.read().decode()
        assert 'feddns_stubzone_requests_total{method="GET",route="/federations",status="200"} 1.0' in text
        assert 'feddns_stubzone_requests_total{method="GET",route="/federations",status="403"} 1.0' in text
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/ready", timeout=5) as response:
            assert response.status == 200
    finally:
        assert server.stop() == 0
    server.wait_for_log("stopping")
