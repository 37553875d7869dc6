"""The controller config's bounds: its names and labels held to RFC 1035's lengths (label 63,
name 253), each refused with the file, the line and the column, without quoting the value; and
the file's size (--max-config-size), refused before it is read.

Validating the config reads each kubeconfig and contacts nothing, so these tests write a
kubeconfig of their own and need no API server.
"""

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from controller.config import load_config
from feddns.configfile import SizeLimit
from feddns.errors import ConfigError
from harness.process import child_env
from tests.controller.harness import REPO

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: foo, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: foo, user: {token: unused}}]
contexts: [{name: foo, context: {cluster: foo, user: foo}}]
current-context: foo
"""

LABEL_TOO_LONG = "characters long; a DNS label has at most 63 (RFC 1035 section 2.3.4)"
NAME_TOO_LONG = "characters long; a DNS name has at most 253 (RFC 1035 section 2.3.4)"
LONG_LABEL = "a" * 64
LONG_NAME = ".".join(["a" * 62] * 4) + ".ab"  # labels of 62 and 2: 254 characters


def minimal(tmp_path: Path) -> dict:
    kubeconfig = tmp_path / "foo.kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    return {"federation": "myfederation", "etcd": {"endpoints": ["http://127.0.0.1:2379"]},
            "clusters": [{"name": "foo", "kubeconfig": str(kubeconfig)}]}


def stubzone(url: str) -> dict:
    return {"url": url, "cert": "/etc/hostname", "key": "/etc/hostname", "ca": "/etc/hostname"}


CASES = [
    # (change to the minimal file, the message it must give, with its line and column)
    (lambda r: r.update(federation=LONG_LABEL), f"federation: name is 64 {LABEL_TOO_LONG} (line 7, column 1)"),
    (lambda r: r["clusters"][0].update(name=LONG_LABEL), f"clusters[0].name: name is 64 {LABEL_TOO_LONG}"),
    (lambda r: r["clusters"][0].update(zone=LONG_LABEL),
     "clusters[0].zone: is 64 characters long; a zone or region is a Kubernetes label value, at most 63"),
    (lambda r: r["clusters"][0].update(region="r" * 100), "clusters[0].region: is 100 characters long"),
    (lambda r: r.update(nameservers={"fromService": {"cluster": "foo", "namespace": LONG_LABEL, "name": "dns"}}),
     f"nameservers.fromService.namespace: name is 64 {LABEL_TOO_LONG}"),
    (lambda r: r.update(nameservers={"fromService": {"cluster": "foo", "namespace": "ns", "name": LONG_LABEL}}),
     f"nameservers.fromService.name: name is 64 {LABEL_TOO_LONG}"),
    (lambda r: r.update(nameservers={"fromService": {"cluster": "Foo", "namespace": "ns", "name": "dns"}}),
     "nameservers.fromService.cluster: name 'Foo' is not a lowercase DNS label"),
    (lambda r: r.update(nameservers=["192.0.2.1"]) or r["clusters"][0].update(
        stubzone=stubzone(f"https://{LONG_NAME}:8443")), f"clusters[0].stubzone.url: its host is 254 {NAME_TOO_LONG}"),
    (lambda r: r.update(nameservers=["192.0.2.1"]) or r["clusters"][0].update(
        stubzone=stubzone(f"https://{LONG_LABEL}.example")),
     "clusters[0].stubzone.url: its host has a label of 64 characters; a DNS label has at most 63"),
    (lambda r: r.update(external={"provider": "rfc2136", "server": "192.0.2.53", "zone": LONG_NAME}),
     f"aaa.ab': zone is 254 {NAME_TOO_LONG}"),  # the value quoted cut short
    (lambda r: r.update(external={"provider": "rfc2136", "server": "192.0.2.53", "zone": LONG_LABEL + ".com"}),
     "aaa.com': zone has a label of 64 characters; a DNS label has at most 63"),
    (lambda r: r.update(external={"provider": "rfc2136", "server": LONG_NAME, "zone": "example.com"}),
     f"external.server: host is 254 {NAME_TOO_LONG}"),
    (lambda r: r.update(external={"provider": "rfc2136", "server": "192.0.2.53", "zone": "example.com",
                                  "tsig": {"name": LONG_NAME, "secretFile": "/etc/hostname"}}),
     f"external.tsig.name: name is 254 {NAME_TOO_LONG}"),
    (lambda r: r.update(external={"provider": "dnsendpoint", "cluster": "foo", "namespace": LONG_LABEL,
                                  "zone": "example.com"}), f"external.namespace: name is 64 {LABEL_TOO_LONG}"),
]


@pytest.mark.parametrize(("change", "message"), CASES, ids=[m.split(":")[0] + m[-12:] for _, m in CASES])
def test_names_and_labels_longer_than_rfc_1035_allows_are_refused(tmp_path, monkeypatch, change, message):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    raw = minimal(tmp_path)
    change(raw)
    path = tmp_path / "controller.yaml"
    path.write_text(yaml.safe_dump(raw, width=1000))
    with pytest.raises(ConfigError) as caught:
        load_config(str(path))
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"{path}: ") and "(line " in str(caught.value)


def test_a_zone_of_5_mb_is_refused_by_the_command_with_its_line_and_column(tmp_path):
    """The audit's file: a cluster whose zone is a 5 MB string was accepted, and etcd's refusal
    of the record was reported as 'etcd cannot be reached'. Now the load refuses it, in one short
    line naming the file, the key, the line and the column, before anything connects (the etcd
    endpoint here has nothing listening). The size cap is raised so that the bound is what speaks."""
    raw = minimal(tmp_path)
    raw["clusters"][0]["zone"] = "a" * 5_000_000
    text = yaml.safe_dump(raw, sort_keys=False, width=10_000_000)
    path = tmp_path / "controller.yaml"
    path.write_text(text)
    line = next(n for n, text_line in enumerate(text.splitlines(), 1) if "zone: aaa" in text_line)
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "feddns", "controller", "--config", str(path), "--max-config-size", "8MiB"],
        check=False, capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env())
    print(f"refused in {time.monotonic() - started:.1f} s")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"feddns controller: error: {path}: clusters[0].zone: is 5,000,000 characters long; a zone or region is a "
        f"Kubernetes label value, at most 63 characters (a DNS label's length, RFC 1035 section 2.3.4) "
        f"(line {line}, column 3)"]


def run_controller(*argv: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "feddns", "controller", *argv], check=False,
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=child_env())
    return result, time.monotonic() - started


def test_a_config_of_20_mb_exits_2_within_2_s_naming_its_size_and_the_cap(tmp_path):
    """The audit's 20 MB config took 66 s and 1.7 GB to be refused (5 MB, 65,000 clusters: more
    than 60 s and no output). Over --max-config-size (1 MiB unless given) it is refused before
    it is read: one line with its size and the cap, exit 2, in the time the command takes to start."""
    path = tmp_path / "controller.yaml"
    raw = minimal(tmp_path)
    cluster = raw["clusters"][0]
    raw["clusters"] = [dict(cluster, name="c0")]
    head, _, entry = yaml.safe_dump(raw, sort_keys=False).partition("clusters:\n")
    assert entry.startswith("- name: c0\n") and entry.count("\n- ") == 0  # the list is the document's last key
    # 260,000 clusters, each the first's YAML with its own name (PyYAML takes 50 s to dump them)
    clusters = "".join(entry.replace("name: c0\n", f"name: c{n}\n") for n in range(260_000))
    path.write_text(head + "clusters:\n" + clusters)
    size = path.stat().st_size
    assert size > 20_000_000
    result, took = run_controller("--config", str(path))
    print(f"20 MB config refused in {took:.2f} s")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"feddns controller: error: {path}: {size:,} bytes, over the limit of 1,048,576 bytes (--max-config-size); "
        "not read"]
    assert took < 2.0


@pytest.mark.parametrize(("given", "words"), [
    ("2KiB", "over the limit of 2,048 bytes (--max-config-size)"),
    ("lots", "--max-config-size 'lots' is not a size in bytes"),
])
def test_the_cap_is_the_flag_given(tmp_path, given, words):
    path = tmp_path / "controller.yaml"
    path.write_text(yaml.safe_dump(minimal(tmp_path)) + "#" * 2048 + "\n")
    result, _ = run_controller("--config", str(path), "--max-config-size", given)
    assert result.returncode == 2 and words in result.stderr, result.stderr


def test_a_config_within_the_cap_loads_and_one_over_it_is_refused_on_reload_too(tmp_path):
    """The controller reloads its config with the cap it started with (Controller.config_limit)."""
    path = tmp_path / "controller.yaml"
    path.write_text(yaml.safe_dump(minimal(tmp_path)))
    size = path.stat().st_size
    assert load_config(str(path), SizeLimit(size, "--max-config-size")).federation == "myfederation"
    with pytest.raises(ConfigError, match=f"{size:,} bytes, over the limit of {size - 1:,} bytes"):
        load_config(str(path), SizeLimit(size - 1, "--max-config-size"))
