"""`feddns links` flags and files: a bad one exits 2 with one line naming it, before any socket opens."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.links.conftest import write
from tests.links.support import Pki


def links(pki: Pki, *args: str, kubeconfig: str | None = None) -> subprocess.CompletedProcess[str]:
    cert, key = pki.cert()
    base = ["--listen", "127.0.0.1:0", "--cert", str(cert), "--key", str(key), "--resolver", "127.0.0.1:53"]
    if kubeconfig:
        base += ["--kubeconfig", kubeconfig]
    env = {"PATH": "/usr/bin:/bin"}  # and no KUBERNETES_SERVICE_HOST: not in a cluster
    return subprocess.run([sys.executable, "-m", "feddns", "links", *base, *args], check=False, capture_output=True,
                          text=True, timeout=30, env=env)


def one_line(result: subprocess.CompletedProcess[str], words: str) -> None:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr


@pytest.mark.parametrize("args,words", [
    (["--zone", "bad_zone."], "--zone 'bad_zone.'"),
    (["--resolver", "dns.example:53"], "not an IP address"),
    (["--resolver", "127.0.0.1:0"], "port must be 1 to 65535"),
    (["--gating-timeout", "0"], "--gating-timeout 0 is not a number of seconds more than 0 and at most 4"),
    (["--gating-timeout", "5"], "--gating-timeout"),
    (["--listen", "127.0.0.1"], "has no port"),
    (["--metrics", "localhost"], "has no port"),
    (["--max-pending-per-address", "0"], "--max-pending-per-address must be at least 1"),
    (["--request-timeout", "0"], "--request-timeout 0 is not a number of seconds more than 0"),
    (["--federation-label", "not a label"], "--federation-label: 'not a label' is not a label key"),
    (["--cert", "/nonexistent.crt"], "--cert /nonexistent.crt: No such file or directory"),
    (["--kubeconfig", "/nonexistent.kubeconfig"], "/nonexistent.kubeconfig"),
    (["--policies", "/nonexistent.yaml"], "policy file /nonexistent.yaml: cannot read: No such file or directory"),
    (["--no-such-flag"], "unrecognized arguments"),
])
def test_bad_flags_exit_2_with_one_line(pki: Pki, kubeconfig: str, args, words):
    one_line(links(pki, *args, kubeconfig=kubeconfig), words)


def test_without_kubeconfig_outside_a_cluster_exits_2(pki: Pki):
    one_line(links(pki), "no --kubeconfig and not in a cluster")


def test_kubeconfig_that_is_not_one_exits_2(pki: Pki, tmp_path: Path):
    one_line(links(pki, kubeconfig=str(write(tmp_path / "k", "just: [a, list]\n"))), "--kubeconfig")


def test_key_of_another_certificate_exits_2(pki: Pki, kubeconfig: str, tmp_path: Path):
    other = tmp_path / "other"
    subprocess.run([sys.executable, "-m", "feddns", "certs", "init", "--dir", str(other)], check=True,
                   capture_output=True)
    one_line(links(pki, "--key", str(other / "ca.key"), kubeconfig=kubeconfig), "key values mismatch")


@pytest.mark.parametrize("text,words", [
    ("policies: [\n", "not valid YAML"),
    ("- just a list\n", "must be a mapping"),
    ("policy: []\n", "policy: unknown key (expected policies)"),
    ("policies:\n  - {name: p, namespace: shop, selector: {}}\n", "policies[0].links: is required"),
    ("policies:\n  - {name: p, namespace: Shop, selector: {}, links: [{prefix: A, service: a.b.c}]}\n",
     "policies[0].namespace: namespace 'Shop'"),
    ("policies:\n  - {name: p, namespace: s, selector: {}, links: [{prefix: A, service: a.b}]}\n",
     "policies[0].links[0]: 'a.b' is not <service>.<namespace>.<federation>"),
    ("policies:\n  - {name: p, namespace: s, selector: {}, links: [{prefix: 9A, service: a.b.c}]}\n",
     "policies[0].links[0]: prefix '9A'"),
    ("policies:\n  - {name: p, namespace: s, selector: {}, links: [{prefix: KUBERNETES, service: a.b.c}]}\n",
     "policies[0].links[0]: prefix KUBERNETES is reserved"),
    ("policies:\n  - {name: p, namespace: s, selector: {}, links: [{prefix: A, service: a.b.c, required: 'no'}]}\n",
     "policies[0].links[0].required: must be true or false"),
    (("policies:\n  - {name: p, namespace: s, selector: {}, links: [{prefix: A, service: a.b.c, "
     "ports: [{name: http, port: 0}]}]}\n"), "policies[0].links[0]: port 'http:0'"),
    (("policies:\n  - {name: p, namespace: s, selector: {}, links: [{prefix: A, service: a.b.c, "
     "ports: [{name: http, port: '80'}]}]}\n"), "policies[0].links[0].ports[0].port: must be a number"),
    (("policies:\n  - {name: p, namespace: s, selector: {}, links: [{prefix: A, service: a.b.c}, "
     "{prefix: a, service: d.e.f}]}\n"), "policies[0].links: a prefix is used twice"),
    (("policies:\n  - {name: p, namespace: s, selector: {}, links: [{prefix: A, service: a.b.c}]}\n"
     "  - {name: p, namespace: t, selector: {}, links: [{prefix: A, service: a.b.c}]}\n"),
     "policies[1]: name 'p' is used twice"),
    ("policies:\n"
     "  - {name: p, namespace: s, selector: {matchLabels: {a: b c}}, links: [{prefix: A, service: a.b.c}]}\n",
     "policies[0].selector.matchLabels.a: 'b c' is not a label value"),
])
def test_bad_policy_file_exits_2_naming_the_entry(pki: Pki, kubeconfig: str, tmp_path: Path, text, words):
    path = write(tmp_path / "policies.yaml", text)
    one_line(links(pki, "--policies", str(path), kubeconfig=kubeconfig), f"policy file {path}: {words}")


def test_listen_address_in_use_exits_2_naming_the_flag(pki: Pki, kubeconfig: str):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = links(pki, "--listen", f"127.0.0.1:{port}", kubeconfig=kubeconfig)
    assert result.returncode == 2
    assert (result.stderr.strip().splitlines()[-1]
            == f"feddns links: error: --listen 127.0.0.1:{port}: cannot listen: Address already in use")


GOOD_POLICY = """\
policies:
  - name: shop-database
    namespace: shop
    selector: {}
    links:
      - prefix: DB
        service: postgres.data.myfederation
        required: true
"""


@pytest.mark.parametrize("change,words", [
    # (a) a key twice: YAML would keep the last one without a word
    (("        required: true\n", "        required: true\n        prefix: CACHE\n"),
     "line 9: duplicate key 'prefix' (column 9, first given on line 6)"),
    # (b) a misspelled key
    (("        required: true\n", "        requried: false\n"),
     "policies[0].links[0].requried: unknown key (expected prefix, service, required, ports) (line 8, column 9)"),
    # (c) a YAML syntax error on line 7
    (("        service: postgres.data.myfederation\n", "        service: postgres: data\n"),
     "not valid YAML: mapping values are not allowed here (line 7, column 26)"),
    # a value error: the line and column of its key
    (("        required: true\n", "        required: 'yes'\n"),
     "policies[0].links[0].required: must be true or false (line 8, column 9)"),
    # the selector's shape is checked like the rest: a misspelled key is named at its own line and column
    (("    selector: {}\n", "    selector:\n      matchExpressions:\n"
                           "        - {key: tier, operator: In, valeus: [web]}\n"),
     "policies[0].selector.matchExpressions[0].valeus: unknown key (expected key, operator, values) "
     "(line 6, column 37)"),
    (("    selector: {}\n", "    selector:\n      matchLabel: {tier: web}\n"),
     "policies[0].selector.matchLabel: unknown key (expected matchLabels, matchExpressions) (line 5, column 7)"),
    (("    selector: {}\n", "    selector:\n      matchExpressions:\n"
                           "        - {key: tier, operator: in, values: [web]}\n"),
     "policies[0].selector.matchExpressions[0]: operator 'in' is not one of In, NotIn, Exists, DoesNotExist "
     "(line 6, column 23)"),
])
def test_bad_policy_file_names_its_line_and_column(pki: Pki, kubeconfig: str, tmp_path: Path, change, words):
    old, new = change
    path = write(tmp_path / "policies.yaml", GOOD_POLICY.replace(old, new))
    one_line(links(pki, "--policies", str(path), kubeconfig=kubeconfig), f"policy file {path}: {words}")
