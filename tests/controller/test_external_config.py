"""The ``external`` section of the controller config (docs/reference.md section 7), as
parse_external_config reads it."""

import base64
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from controller.config import load_config
from controller.external.config import ExternalConfig, parse_external_config
from feddns.errors import ConfigError
from harness.kubecluster import KubeCluster

SECRET = b"0123456789abcdef0123456789abcdef"


@pytest.fixture
def secret_file(tmp_path: Path) -> str:
    path = tmp_path / "tsig.secret"
    path.write_text(base64.b64encode(SECRET).decode() + "\n")
    return str(path)


def minimal(**extra: Any) -> dict[str, Any]:
    return {"provider": "rfc2136", "server": "203.0.113.53", "zone": "Example.COM", **extra}


def test_defaults() -> None:
    assert parse_external_config(minimal()) == ExternalConfig(
        provider="rfc2136", server="203.0.113.53", port=53, zone="example.com.", ttl=60,
        tsig_name=None, tsig_algorithm="hmac-sha256", tsig_secret=None)


def test_the_reference_example(secret_file: str) -> None:
    config = parse_external_config({
        "provider": "rfc2136", "server": "203.0.113.53:5353", "zone": "example.com.", "ttl": 120,
        "tsig": {"name": "FedDNS", "algorithm": "hmac-sha512", "secretFile": secret_file}})
    assert (config.server, config.port, config.ttl) == ("203.0.113.53", 5353, 120)
    assert (config.tsig_name, config.tsig_algorithm, config.tsig_secret) == ("feddns.", "hmac-sha512", SECRET)
    assert base64.b64encode(SECRET).decode() not in repr(config) and str(SECRET) not in repr(config)


@pytest.mark.parametrize("server, host, port", [
    ("[2001:db8::53]:5353", "2001:db8::53", 5353),
    ("2001:db8::53", "2001:db8::53", 53),
    ("ns1.example.net", "ns1.example.net", 53),
    ("ns1.example.net:1053", "ns1.example.net", 1053),
])
def test_server_forms(server: str, host: str, port: int) -> None:
    config = parse_external_config(minimal(server=server))
    assert (config.server, config.port) == (host, port)


def test_a_tsig_keygen_file_serves_both_named_and_feddns(tmp_path: Path) -> None:
    keygen = shutil.which("tsig-keygen") or "/usr/sbin/tsig-keygen"
    key = subprocess.run([keygen, "-a", "hmac-sha384", "feddns."], capture_output=True, text=True, check=True)
    (tmp_path / "feddns.key").write_text(key.stdout)
    config = parse_external_config(minimal(tsig={
        "name": "feddns.", "algorithm": "hmac-sha384", "secretFile": str(tmp_path / "feddns.key")}))
    assert config.tsig_secret is not None and len(config.tsig_secret) == 48
    assert base64.b64encode(config.tsig_secret).decode() in key.stdout


BAD = [
    ("not a mapping", "external: must be a mapping"),
    ({"server": "203.0.113.53", "zone": "example.com"}, "external.provider: is required"),
    (minimal(provider="route53"), "external.provider: 'route53' is not supported"),
    ({"provider": "rfc2136", "zone": "example.com"}, "external.server: is required"),
    (minimal(server=""), "external.server: must be HOST or HOST:PORT, not ''"),
    (minimal(server="203.0.113.53:99999"), "external.server: '203.0.113.53:99999': port must be 1 to 65535"),
    (minimal(server="203.0.113.53:0"), "external.server: '203.0.113.53:0': port must be 1 to 65535"),
    ({"provider": "rfc2136", "server": "203.0.113.53"}, "external.zone: is required"),
    (minimal(zone="."), "external.zone: '.': zone must not be empty"),
    (minimal(zone="ex ample.com"), "external.zone: 'ex ample.com'"),
    (minimal(zone=5), "external.zone: must be a domain name, not 5"),
    (minimal(ttl=-1), "external.ttl: must be seconds from 0"),
    (minimal(ttl="60"), "external.ttl: must be seconds from 0"),
    (minimal(ttl=True), "external.ttl: must be seconds from 0"),
    (minimal(ttl=2**31), "external.ttl: must be seconds from 0"),
    (minimal(port=53), "external.port: unknown key"),
    (minimal(tsig="feddns."), "external.tsig: must be a mapping"),
    (minimal(tsig={"secretFile": "/x"}), "external.tsig.name: is required"),
    (minimal(tsig={"name": "feddns."}), "external.tsig.secretFile: is required"),
    (minimal(tsig={"name": "feddns.", "secretFile": "/x", "secret": "c2VjcmV0"}), "external.tsig.secret: unknown key"),
    (minimal(tsig={"name": "feddns.", "secretFile": "/x", "algorithm": "hmac-md5"}),
     "external.tsig.algorithm: 'hmac-md5' is not one of"),
    (minimal(tsig={"name": "a..b", "secretFile": "/x"}), "external.tsig.name: 'a..b' is not a domain name"),
    (minimal(tsig={"name": "feddns.", "secretFile": "/nonexistent/tsig.secret"}),
     "external.tsig.secretFile: /nonexistent/tsig.secret: not readable (FileNotFoundError"),
]


@pytest.mark.parametrize("raw, message", BAD)
def test_bad_config_names_the_key(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_external_config(raw)
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("content, message", [
    ("", "the secret is empty"),
    ("not base64!\n", "the secret is not base64"),
    ('key "feddns." { algorithm hmac-sha256; secret "%%%"; };', "the secret is not base64"),
])
def test_bad_secret_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "tsig.secret"
    path.write_text(content)
    with pytest.raises(ConfigError, match=f"^external.tsig.secretFile: {path}: {message}$"):
        parse_external_config(minimal(tsig={"name": "feddns.", "secretFile": str(path)}))


def test_an_unreadable_secret_file_is_reported_without_its_content(tmp_path: Path) -> None:
    path = tmp_path / "tsig.secret"
    path.write_bytes(b"\xff\xfe secret bytes")
    with pytest.raises(ConfigError) as caught:
        parse_external_config(minimal(tsig={"name": "feddns.", "secretFile": str(path)}))
    assert "not readable" in str(caught.value) and "secret bytes" not in str(caught.value)
    directory = tmp_path / "dir"
    os.mkdir(directory)
    with pytest.raises(ConfigError, match="not readable"):
        parse_external_config(minimal(tsig={"name": "feddns.", "secretFile": str(directory)}))


CONFIG_TEXT = """\
federation: myfederation
etcd:
  endpoints: [http://127.0.0.1:2379]
clusters:
  - name: foo
    kubeconfig: {kubeconfig}
external:
  provider: rfc2136
  server: 203.0.113.53
  zone: example.com
  tsig:
    name: feddns.
    secretFile: {secret_file}
"""


@pytest.mark.parametrize(("old", "new", "words"), [
    ("  zone: example.com\n", "  zone: example.com\n  zone: example.net\n",
     "line 11: duplicate key 'zone' (column 3, first given on line 10)"),
    ("  zone: example.com\n", "  zone: example.com\n  port: 53\n",
     "external.port: unknown key (expected provider, server, zone, ttl, tsig, cluster, namespace) (line 11, column 3)"),
    ("  zone: example.com\n", "  zone: example.com\n  namespace: feddns\n",
     "external.namespace: unknown key with provider rfc2136 (expected provider, server, zone, ttl, tsig) "
     "(line 11, column 3)"),
    ("    name: feddns.\n", "    name: feddns.\n    secret: c2VjcmV0\n",
     "external.tsig.secret: unknown key (expected name, algorithm, secretFile) (line 13, column 5)"),
    ("  zone: example.com\n", "  zone: example.com\n  ttl: -1\n",
     "external.ttl: must be seconds from 0 to 2147483647, not -1 (line 11, column 3)"),
    ("  server: 203.0.113.53\n", "", "external.server: is required (line 7, column 1)"),
    ("    secretFile: {secret_file}\n", "    secretFile: /nonexistent/tsig.secret\n",
     "external.tsig.secretFile: /nonexistent/tsig.secret: not readable (FileNotFoundError: No such file or directory) "
     "(line 13, column 5)"),
])
def test_errors_in_the_controller_config_name_the_line_and_column(
        kube_foo: KubeCluster, tmp_path: Path, secret_file: str, old: str, new: str, words: str) -> None:
    """The section is part of the controller's config file: its errors, like the rest of the file's,
    name the file, the key path, the line and the column (of the key itself, for an unknown key)."""
    kubeconfig = kube_foo.write_kubeconfig(tmp_path / "foo.kubeconfig")  # read, not contacted
    path = tmp_path / "controller.yaml"
    path.write_text(CONFIG_TEXT.replace(old, new).format(kubeconfig=kubeconfig, secret_file=secret_file))
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    assert str(caught.value) == f"{path}: {words}"

