"""The config file (docs/reference.md section 7): every key checked before anything connects; bad files exit 2."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from controller.config import DEFAULT_LABEL, load_config
from feddns.errors import ConfigError
from harness.etcdpki import EtcdPki
from harness.kubecluster import KubeCluster
from harness.process import child_env
from tests.controller.harness import REPO


@pytest.fixture
def kubeconfig(kube_foo: KubeCluster, tmp_path: Path) -> str:
    """A kubeconfig of the session's real kube-apiserver; validating the config reads it and
    contacts nothing."""
    return kube_foo.write_kubeconfig(tmp_path / "foo.kubeconfig")


def minimal(kubeconfig: str) -> dict:
    return {"federation": "myfederation", "etcd": {"endpoints": ["http://127.0.0.1:2379"]},
            "clusters": [{"name": "foo", "kubeconfig": kubeconfig}]}


def write(tmp_path: Path, raw: object) -> str:
    path = tmp_path / "controller.yaml"
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw))
    return str(path)


def test_defaults(tmp_path, kubeconfig):
    config = load_config(write(tmp_path, minimal(kubeconfig)))
    assert config.etcd_prefix == ""
    assert config.selector.label == DEFAULT_LABEL and config.selector.service_exports is False
    assert config.resync_seconds == 300 and config.lease_seconds == 15 and config.external is None
    (cluster,) = config.clusters
    assert (cluster.context, cluster.zone, cluster.region, cluster.cidrs) == (None, None, None, ())
    assert (cluster.stale_after, cluster.stale_action) == (None, "demote")  # kept forever, as before
    assert cluster.pod_network == "isolated" and cluster.record().to_json() == {"podNetwork": "isolated"}


def test_pod_network_routable_goes_to_the_cluster_record(tmp_path, kubeconfig):
    raw = minimal(kubeconfig)
    raw["clusters"][0]["podNetwork"] = "routable"
    config = load_config(write(tmp_path, raw))
    assert config.clusters[0].record().to_json() == {"podNetwork": "routable"}


def test_complete_example_from_the_docs(tmp_path, kubeconfig):
    """The example of docs/controller.md, with its paths pointed at this test's files."""
    text = (Path(REPO) / "docs" / "controller.md").read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    raw = yaml.safe_load(example)
    for cluster in raw["clusters"]:
        if "kubeconfig" in cluster:
            cluster["kubeconfig"], cluster["context"] = kubeconfig, "foo"
        else:
            cluster["kubeconfig"] = kubeconfig
    secret = tmp_path / "tsig.secret"
    secret.write_text("c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0\n")
    raw["external"]["tsig"]["secretFile"] = str(secret)
    pki = EtcdPki(tmp_path / "etcd-pki")
    cert, key = pki.client_cert
    raw["etcd"]["tls"] = {"cacert": str(pki.server_ca), "cert": str(cert), "key": str(key)}
    (tmp_path / "password").write_text("etcd-password\n")
    raw["etcd"]["passwordFile"] = str(tmp_path / "password")
    config = load_config(write(tmp_path, raw))
    assert config.federation == "myfederation" and len(config.clusters) == 3
    assert config.external is not None and config.external.zone == "example.com."
    assert config.etcd_access.user == "feddns-controller" and config.etcd_access.password() == "etcd-password"
    assert config.clusters[1].stale_after == 600


CASES = [
    # (change to the minimal file, the message it must give)
    (lambda r: r.pop("federation"), "federation: is required"),
    (lambda r: r.update(federation="My_Fed"), "federation: name 'My_Fed' is not a lowercase DNS label"),
    (lambda r: r.update(zone="x"), "zone: unknown key"),
    (lambda r: r["etcd"].update(endpoints=[]), "etcd.endpoints: must be a non-empty list"),
    (lambda r: r["etcd"].update(endpoints=["https://feddns:pw@e:2379"]),
     "etcd.endpoints[0]: etcd URL 'https://***@e:2379' has credentials in it: refused"),
    (lambda r: r["etcd"].update(endpoints=["http://a:2379", "https://b:2379"]), "etcd: etcd endpoints mix"),
    (lambda r: r["etcd"].update(tls={"cacert": "/nonexistent.crt"}), "etcd: etcd TLS files (--etcd-cacert"),
    (lambda r: r["etcd"].update(endpoints=["https://e:2379"], tls={"cacert": "/nonexistent.crt"}),
     "etcd: --etcd-cacert /nonexistent.crt: cannot read"),
    (lambda r: r["etcd"].update(tls={"ca": "x"}), "etcd.tls.ca: unknown key"),
    (lambda r: r["etcd"].update(user="feddns"), "etcd: etcd user 'feddns' needs a password: $FEDDNS_ETCD_PASSWORD"),
    (lambda r: r["etcd"].update(user="feddns", passwordFile="/nonexistent"),
     "etcd: etcd password file /nonexistent: cannot read"),
    (lambda r: r["etcd"].update(password="x"), "etcd.password: unknown key"),
    (lambda r: r["etcd"].update(prefix="feddns"), "etcd.prefix: etcd prefix 'feddns' must start with '/'"),
    (lambda r: r.update(clusters=[]), "clusters: must be a non-empty list"),
    (lambda r: r["clusters"][0].update(zone=3), "clusters[0].zone: must be a string, not an int (3)"),
    (lambda r: r["clusters"][0].update(cidrs=["10.0.0.1/14"]), "clusters[0].cidrs[0]: 10.0.0.1/14 has host bits"),
    (lambda r: r["clusters"][0].update(cidrs="10.0.0.0/8"), "clusters[0].cidrs: must be a list"),
    (lambda r: r["clusters"][0].update(nmae="x"), "clusters[0].nmae: unknown key"),
    (lambda r: r["clusters"][0].pop("name"), "clusters[0].name: is required"),
    (lambda r: r["clusters"].append(dict(r["clusters"][0])), "clusters[1].name: 'foo' is listed twice"),
    (lambda r: r["clusters"][0].update(context="nope"), "clusters[0].context: context 'nope' is not in"),
    (lambda r: r["clusters"][0].update(kubeconfig="/nonexistent"), "clusters[0].kubeconfig: cannot read /nonexistent"),
    (lambda r: r["clusters"][0].pop("kubeconfig"), "clusters[0]: no kubeconfig given and not running in a pod"),
    (lambda r: r["clusters"][0].update(podNetwork="flat"),
     "clusters[0].podNetwork: must be one of isolated, routable, not a str ('flat')"),
    (lambda r: r.update(selector={"label": "bad key!"}), "selector.label: must be a Kubernetes label key"),
    (lambda r: r.update(selector={"serviceExports": "yes"}), "selector.serviceExports: must be true or false"),
    (lambda r: r.update(resyncSeconds=0), "resyncSeconds: must be a positive number of seconds"),
    (lambda r: r["clusters"][0].update(staleAfterSeconds=-5), "clusters[0].staleAfterSeconds: must be a positive"),
    (lambda r: r["clusters"][0].update(staleAction="hide"), "clusters[0].staleAction: must be one of demote, drop"),
    (lambda r: r.update(leaseSeconds=1), "leaseSeconds: must be a whole number of seconds >= 2"),
    (lambda r: r.update(external={"provider": "rfc2136"}), "external.server"),
    (lambda r: r.update(nameservers=["ns1.example.net"]),
     "nameservers[0]: 'ns1.example.net' is not an IP address (hostnames are not accepted)"),
    (lambda r: r.update(nameservers=["0.0.0.0"]), "nameservers[0]: '0.0.0.0' is unspecified, not a unicast address"),
    (lambda r: r.update(nameservers=["255.255.255.255"]), "nameservers[0]: '255.255.255.255' is the broadcast address"),
    (lambda r: r.update(nameservers=["[fe80::1%eth0]:53"]), "nameservers[0]: '[fe80::1%eth0]:53' is link-local"),
    (lambda r: r.update(nameservers=["2001:db8::1%eth0"]), "'2001:db8::1%eth0' is an IPv6 address with a zone"),
    (lambda r: r.update(nameservers=["::ffff:192.0.2.1"]), "'::ffff:192.0.2.1' is an IPv4-mapped IPv6 address; write"),
    (lambda r: r.update(nameservers=["192.0.2.1", "192.0.2.1:53"]), "nameservers: lists an address twice"),
    (lambda r: r.update(nameservers=[]), "nameservers: must list 1 to 16 addresses, not 0"),
    (lambda r: r.update(nameservers={"fromService": {"cluster": "bar", "namespace": "n", "name": "s"}}),
     "nameservers.fromService.cluster: 'bar' is not one of clusters[].name (foo)"),
    (lambda r: r.update(nameservers={"fromService": {"cluster": "foo", "name": "s"}}),
     "nameservers.fromService.namespace: is required"),
    (lambda r: r.update(nameservers={"service": {}}), "nameservers.service: unknown key (expected fromService)"),
    (lambda r: r["clusters"][0].update(stubzone={"url": "https://s.example.net", "cert": "/etc/hostname",
                                                 "key": "/etc/hostname", "ca": "/etc/hostname"}),
     "clusters[0].stubzone: needs nameservers"),
    (lambda r: r.update(nameservers=["192.0.2.1"]) or r["clusters"][0].update(stubzone={
        "url": "http://s.example.net", "cert": "/etc/hostname", "key": "/etc/hostname", "ca": "/etc/hostname"}),
     "clusters[0].stubzone.url: must be https://HOST[:PORT]"),
    (lambda r: r.update(nameservers=["192.0.2.1"]) or r["clusters"][0].update(stubzone={
        "url": "https://s.example.net", "cert": "/nonexistent.crt", "key": "/etc/hostname", "ca": "/etc/hostname"}),
     "clusters[0].stubzone.cert: /nonexistent.crt is not a readable file"),
    (lambda r: r.update(nameservers=["192.0.2.1"]) or r["clusters"][0].update(stubzone={"url": "https://s"}),
     "clusters[0].stubzone.cert: is required"),
]


@pytest.mark.parametrize("nameserver", ["127.0.0.1:5353", "127.1.2.3", "::1", "[::1]:5353"])
def test_loopback_nameservers_need_the_flag(tmp_path, kubeconfig, nameserver):
    """The stub-zone endpoint refuses them without its --allow-loopback-nameservers: refused at load here."""
    raw = minimal(kubeconfig)
    raw["nameservers"] = ["192.0.2.1", nameserver]
    path = write(tmp_path, raw)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value) == (f"{path}: nameservers[1]: {nameserver!r} is loopback: each member's cluster DNS "
                                 "would send the queries to itself (--allow-loopback-nameservers, for a test on one "
                                 "host) (line 10, column 3)")
    config = load_config(path, loopback=True)
    assert config.nameservers is not None and len(config.nameservers.addresses) == 2


def test_cli_refuses_a_loopback_nameserver_in_one_line_without_the_flag(tmp_path, kubeconfig):
    raw = minimal(kubeconfig)
    raw["nameservers"] = ["127.0.0.1:5353"]
    path = write(tmp_path, raw)
    result = subprocess.run([sys.executable, "-m", "feddns", "controller", "--config", path], check=False,
                            capture_output=True, text=True, timeout=30, cwd=REPO, env=child_env())
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"feddns controller: error: {path}: nameservers[0]: '127.0.0.1:5353' is loopback: each member's cluster "
        "DNS would send the queries to itself (--allow-loopback-nameservers, for a test on one host) "
        "(line 9, column 3)"]


def test_nameservers_are_written_with_their_port(tmp_path, kubeconfig):
    raw = minimal(kubeconfig)
    raw["nameservers"] = ["192.0.2.1", "2001:db8::1", "[2001:db8::2]:5353"]
    config = load_config(write(tmp_path, raw))
    assert config.nameservers is not None
    assert config.nameservers.addresses == ("192.0.2.1:53", "[2001:db8::1]:53", "[2001:db8::2]:5353")


@pytest.mark.parametrize(("change", "message"), CASES, ids=[m for _, m in CASES])
def test_bad_files_name_the_key(tmp_path, kubeconfig, monkeypatch, change, message):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("FEDDNS_ETCD_PASSWORD", raising=False)
    raw = minimal(kubeconfig)
    change(raw)
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, raw))
    assert message in str(caught.value)
    assert str(caught.value).startswith(str(tmp_path / "controller.yaml") + ": ")


@pytest.mark.parametrize(("text", "message"), [
    ("federation: a\nfederation: b\n", "line 2: duplicate key 'federation'"),
    ("federation: [unclosed\n", "not valid YAML"),
    ("- a list\n", "controller.yaml: must be a mapping, not a list"),
])
def test_bad_yaml(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_config(write(tmp_path, text))


def test_secured_etcd_and_stale_clusters(tmp_path, kubeconfig, monkeypatch):
    raw = minimal(kubeconfig)
    raw["etcd"] = {"endpoints": ["https://etcd-0:2379"], "user": "feddns", "passwordFile": str(tmp_path / "pw")}
    (tmp_path / "pw").write_text("secret\n")
    raw["clusters"][0].update(staleAfterSeconds=600, staleAction="drop")
    config = load_config(write(tmp_path, raw))
    assert config.etcd_access.user == "feddns" and config.etcd_access.password() == "secret"
    assert config.etcd_access.tls is None  # https:// with the system's roots
    assert (config.clusters[0].stale_after, config.clusters[0].stale_action) == (600, "drop")
    monkeypatch.setenv("FEDDNS_ETCD_PASSWORD", "from-env")
    del raw["etcd"]["passwordFile"]
    assert load_config(write(tmp_path, raw)).etcd_access.password() == "from-env"


def test_in_cluster_needs_the_pod_environment(tmp_path, kubeconfig, monkeypatch):
    raw = minimal(kubeconfig)
    raw["clusters"][0].pop("kubeconfig")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert load_config(write(tmp_path, raw)).clusters[0].kubeconfig is None


@pytest.mark.parametrize("argv", [
    ["--config", "{bad}"],
    ["--config", "{good}", "--metrics", "localhost"],
    ["--config", "/nonexistent.yaml"],
])
def test_cli_exits_2_with_one_line(tmp_path, kubeconfig, argv):
    bad = minimal(kubeconfig)
    bad["clusters"][0]["zone"] = ["not", "a", "string"]
    paths = {"bad": write(tmp_path, bad)}
    good_path = tmp_path / "good.yaml"
    good_path.write_text(yaml.safe_dump(minimal(kubeconfig)))
    paths["good"] = str(good_path)
    argv = [a.format(**paths) for a in argv]
    result = subprocess.run(
        [sys.executable, "-m", "feddns", "controller", *argv], check=False,
        capture_output=True, text=True, timeout=30, cwd=REPO, env=child_env(),
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("feddns controller: error: "), result.stderr


def test_a_file_that_is_not_utf8_is_refused_naming_the_byte(tmp_path):
    path = tmp_path / "controller.yaml"
    path.write_bytes(b"# caf\xe9\nfederation: myfederation\n")
    with pytest.raises(ConfigError, match=r"controller\.yaml: not UTF-8 text \(byte 5\)"):
        load_config(str(path))


def test_a_kubeconfig_that_is_not_utf8_is_refused(tmp_path, kubeconfig):
    (tmp_path / "bad.kubeconfig").write_bytes(b"\xff\xfe")
    raw = minimal(kubeconfig)
    raw["clusters"][0]["kubeconfig"] = str(tmp_path / "bad.kubeconfig")
    with pytest.raises(ConfigError, match=r"clusters\[0\]\.kubeconfig: .* is not valid YAML"):
        load_config(write(tmp_path, raw))


CONFIG_TEXT = """\
federation: myfederation
etcd:
  endpoints:
    - http://127.0.0.1:2379
clusters:
  - name: foo
    kubeconfig: {kubeconfig}
    zone: eu-west-1a
"""


@pytest.mark.parametrize(("old", "new", "words"), [
    # (a) a key twice: YAML alone would keep the last one without a word
    ("    zone: eu-west-1a\n", "    zone: eu-west-1a\n    zone: eu-west-1b\n",
     "line 9: duplicate key 'zone' (column 5, first given on line 8)"),
    # (b) a misspelled key
    ("    zone: eu-west-1a\n", "    znoe: eu-west-1a\n",
     "clusters[0].znoe: unknown key (expected name, kubeconfig, context, zone, region, cidrs, podNetwork, "
     "staleAfterSeconds, staleAction, stubzone) (line 8, column 5)"),
    # (c) a YAML syntax error on line 7
    ("    kubeconfig: {kubeconfig}\n", "    kubeconfig: a: b\n",
     "not valid YAML: mapping values are not allowed here (line 7, column 18)"),
    # a value error: the line and column of its key
    ("    zone: eu-west-1a\n", "    zone: 3\n",
     "clusters[0].zone: must be a string, not an int (3) (line 8, column 5)"),
])
def test_the_cli_names_the_line_and_column_of_a_bad_file(tmp_path, kubeconfig, old, new, words):
    path = write(tmp_path, CONFIG_TEXT.replace(old, new).format(kubeconfig=kubeconfig))
    result = subprocess.run(
        [sys.executable, "-m", "feddns", "controller", "--config", path], check=False,
        capture_output=True, text=True, timeout=30, cwd=REPO, env=child_env(),
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [f"feddns controller: error: {path}: {words}"], result.stderr
