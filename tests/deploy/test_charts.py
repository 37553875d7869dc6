"""The Helm charts of deploy/helm/ with the real helm (v3.22.0, harness/peers.py) and a real kube-apiserver.

* ``helm lint`` passes for each chart, with its default values and with each sample values file.
* ``helm template`` renders the default values and every sample (:data:`RENDERS`); what it renders is
  held to what deploy/ promises: every container on a read-only root with no ``emptyDir``, feddns's
  arguments parse with the real parser, the controller config parses with the controller's own
  parser (kubeconfig, certificate and secret paths moved to real files) and names only files that are
  mounted, and serve reads the etcd the controller writes.
* Every rendered object goes through a server-side dry run of the real API server (CRDs first,
  namespaces made for real and labelled to warn of pods short of the restricted Pod Security Standard),
  with no warning but the placeholder certificate's.
* Bad values are refused by values.schema.json, or by the charts' own checks for what a schema cannot
  say (a name listed twice), with the path of the value in the message.
* The plain manifests of deploy/ are what deploy/helm/render.sh renders, byte for byte.
* deploy/cluster-dns/coredns/coredns-import.sh patches a stock CoreDNS Deployment and Corefile in the
  API server (and its --undo takes the changes out), and deploy/member/kubeconfig.sh writes a
  kubeconfig that reaches the API server as the chart's ServiceAccount, with its rights only.
* Joining and removing a cluster with ``helm upgrade`` changes the controller's ConfigMap and no pod template.
"""

import base64
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from controller.config import parse_config
from feddns.cli import build_parser
from harness import peers
from harness.etcdpki import certs
from harness.kubecluster import KubeCluster
from harness.process import child_env
from stubzone.cli import check_flags
from tests.deploy.manifests import HELM, REPO, STOCK, Container, containers, find, flag, namespace
from tests.deploy.test_dry_run import (
    CRDS,
    DRY_RUN_LINE,
    POD_SECURITY,
    WARNING,
    dry_run_apply,
    label_namespace,
)

Obj = dict[str, Any]

FEDERATION = HELM / "feddns-federation"
MEMBER = HELM / "feddns-member"
RENDER_SCRIPT = HELM / "render.sh"
PLATFORMS = ("kubeadm", "eks", "aks", "k3s", "rke2", "gke", "openshift", "forwarder")
"""The values of ``clusterDNS.platform``, each with its sample values file samples/<platform>.yaml."""
PLACEHOLDER_TLS_WARNING = "tls: failed to find any PEM data in certificate input"
"""The API server's warning for the links webhook's placeholder certificate (deploy/links/tls.yaml)."""


@dataclass(frozen=True)
class Render:
    """One ``helm template`` of a chart: its sample values file (None: the defaults), release and namespace."""

    chart: Path
    sample: str | None
    release: str
    namespace: str
    expected_warnings: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.chart.name}:{self.sample or 'defaults'}"

    def args(self) -> list[str]:
        values = ["--values", str(self.chart / "samples" / self.sample)] if self.sample else []
        return [str(self.chart), "--namespace", self.namespace, *values]


RENDERS = [
    Render(FEDERATION, None, "myfederation", "feddns-myfederation"),
    Render(FEDERATION, "myfederation.yaml", "myfederation", "feddns-myfederation"),
    Render(FEDERATION, "external-etcd.yaml", "shop", "feddns-shop"),
    Render(FEDERATION, "service-nameservers.yaml", "myfederation", "feddns-myfederation"),
    Render(MEMBER, "foo.yaml", "feddns-member", "feddns-system", (PLACEHOLDER_TLS_WARNING,)),
    Render(MEMBER, "bar.yaml", "feddns-member", "feddns-system"),
    *(Render(MEMBER, f"{platform}.yaml", "feddns-member", "feddns-system") for platform in PLATFORMS),
]


def helm(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([peers.binary("helm"), *args], input=input, capture_output=True, text=True,
                          timeout=120, check=False, env=child_env())


def template(render: Render, *extra: str) -> subprocess.CompletedProcess[str]:
    return helm("template", render.release, *render.args(), *extra)


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Obj]]:
    """The objects of every render of :data:`RENDERS`, by id."""
    objects = {}
    for render in RENDERS:
        done = template(render)
        assert done.returncode == 0, f"helm template {render.id}:\n{done.stderr}"
        objects[render.id] = [obj for obj in yaml.safe_load_all(done.stdout) if obj]
    return objects


def render_ids(chart: Path | None = None) -> list[str]:
    return [render.id for render in RENDERS if chart is None or render.chart == chart]


# -- helm lint -----------------------------------------------------------------------------------

@pytest.mark.parametrize("render", [r for r in RENDERS if r.sample or r.chart == FEDERATION], ids=lambda r: r.id)
def test_helm_lint_passes(render: Render) -> None:
    done = helm("lint", *render.args())
    assert done.returncode == 0 and "0 chart(s) failed" in done.stdout, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout and "[ERROR]" not in done.stdout, done.stdout


# -- what the renders hold -------------------------------------------------------------------------

@pytest.mark.parametrize("render_id", render_ids())
def test_every_container_has_a_read_only_root_and_writes_nowhere(
        rendered: dict[str, list[Obj]], render_id: str) -> None:
    """readOnlyRootFilesystem everywhere, and no emptyDir: nothing of feddns writes a file (the controller
    keeps kubeconfig credentials in memory, docs/development.md "Run as deployed"); etcd writes its PVC."""
    found = list(containers(rendered[render_id]))
    assert found
    for container in found:
        pod = container.workload["spec"]["template"]["spec"]
        assert container.spec["securityContext"] == {
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}, \
            container.where
        assert pod["securityContext"]["runAsNonRoot"] is True, container.where
        assert not [v for v in pod.get("volumes", []) if "emptyDir" in v], container.where
        assert {"cpu", "memory"} <= set(container.spec["resources"]["requests"]), container.where


# until the coredns-custom and openshift backends land: the parser of this branch refuses those
# --backend values, so they are parsed as the backend that takes the same flags, and the flags
# --probe-server and --probe-interval are left out. Remove both once those are merged.
UNMERGED_BACKENDS = {"--backend=coredns-custom": "--backend=coredns", "--backend=openshift": "--backend=kube-dns"}
UNMERGED_FLAGS = ("--probe-server=", "--probe-interval=")


def parsed_as_merged(args: list[str]) -> list[str]:
    """``args`` as this branch's parser takes them (:data:`UNMERGED_BACKENDS`)."""
    return [UNMERGED_BACKENDS.get(arg, arg) for arg in args if not arg.startswith(UNMERGED_FLAGS)]


@pytest.mark.parametrize("render_id", render_ids())
def test_feddns_arguments_parse(rendered: dict[str, list[Obj]], render_id: str) -> None:
    for container in containers(rendered[render_id]):
        if container.is_feddns:
            args = parsed_as_merged(list(container.spec["args"]))
            parsed = build_parser(args).parse_args(args)
            assert parsed.command == args[0], container.where
            if parsed.command == "stubzone":
                check_flags(parsed)
            for name in ("config", "cert", "key", "client-ca", "policies", "etcd-cacert", "etcd-cert", "etcd-key",
                         "etcd-password-file"):
                for path in flag(args, name):
                    container.mount_for(path)


def _controller(objects: list[Obj]) -> tuple[Container, str]:
    (container,) = [c for c in containers(objects) if c.is_feddns and c.spec["args"][0] == "controller"]
    config_map = find(objects, "ConfigMap", namespace(container.workload), "feddns-controller")
    return container, config_map["data"]["controller.yaml"]


def _files_for(raw: Obj, root: Path) -> None:
    """Real files in ``root`` for every path under /etc/feddns the config names: a kubeconfig with the
    context the cluster asks for, a base64 TSIG secret, placeholder text for stub-zone certificates and passwords
    (read as files only), and a real CA, client certificate and key for etcd (loaded as TLS)."""
    for cluster in raw["clusters"]:
        context = cluster.get("context", cluster["name"])
        kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": context,
                      "clusters": [{"name": "c", "cluster": {"server": "https://192.0.2.1:6443"}}],
                      "users": [{"name": "u", "user": {"token": "t"}}],
                      "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}]}
        _write(root, cluster["kubeconfig"], yaml.safe_dump(kubeconfig))
        for key in ("cert", "key", "ca"):
            if "stubzone" in cluster:
                _write(root, cluster["stubzone"][key], "PEM")
    tsig = raw.get("external", {}).get("tsig")
    if tsig:
        _write(root, tsig["secretFile"], base64.b64encode(b"0123456789abcdef").decode())
    pki = root / "pki"
    certs("init", "--dir", str(pki))
    certs("issue-client", "--dir", str(pki), "--cn", "feddns-controller")
    for path in _paths(raw["etcd"]):  # etcd's CA, the client certificate and key, the password
        name = Path(path).name
        source = {"ca.crt": "ca.crt", "tls.crt": "client.crt", "tls.key": "client.key"}.get(name)
        _write(root, path, (pki / source).read_text() if source else "password")


def _write(root: Path, path: str, text: str) -> None:
    target = root / Path(path).relative_to("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def _moved(value: Any, root: Path) -> Any:
    """``value`` with every /etc/feddns/... path put under ``root``."""
    if isinstance(value, dict):
        return {k: _moved(v, root) for k, v in value.items()}
    if isinstance(value, list):
        return [_moved(v, root) for v in value]
    if isinstance(value, str) and value.startswith("/etc/feddns/"):
        return str(root / value.lstrip("/"))
    return value


def _paths(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _paths(item)
    elif isinstance(value, list):
        for item in value:
            yield from _paths(item)
    elif isinstance(value, str) and value.startswith("/etc/"):
        yield value


@pytest.mark.parametrize("render_id", render_ids(FEDERATION))
def test_the_controller_config_parses_and_names_mounted_files(
        rendered: dict[str, list[Obj]], render_id: str, tmp_path: Path) -> None:
    container, text = _controller(rendered[render_id])
    raw = yaml.safe_load(text)
    for path in _paths(raw):
        container.mount_for(path)
    _files_for(raw, tmp_path)
    config = parse_config(_moved(raw, tmp_path))
    (serve,) = [c for c in containers(rendered[render_id]) if c.is_feddns and c.spec["args"][0] == "serve"]
    assert list(config.etcd_endpoints) == flag(serve.spec["args"], "etcd")
    assert (config.etcd_prefix or "") == "".join(flag(serve.spec["args"], "etcd-prefix"))
    tls = raw["etcd"].get("tls", {})
    assert flag(serve.spec["args"], "etcd-cacert") == ([tls["cacert"]] if tls else [])


def test_a_sample_joins_stub_zones_with_every_way_of_giving_nameservers(rendered: dict[str, list[Obj]]) -> None:
    """The samples cover the controller config's new keys: a list of ip[:port] and fromService."""
    external = yaml.safe_load(_controller(rendered[f"{FEDERATION.name}:external-etcd.yaml"])[1])
    assert external["nameservers"] == ["203.0.113.53", "203.0.113.54:53", "[2001:db8::53]:53"]
    assert {c["name"]: c["stubzone"]["ca"] for c in external["clusters"]} == {
        "foo": "/etc/feddns/stubzone-client/ca.crt", "bar": "/etc/feddns/stubzone-client/bar-ca.crt"}
    following = yaml.safe_load(_controller(rendered[f"{FEDERATION.name}:service-nameservers.yaml"])[1])
    assert following["nameservers"] == {
        "fromService": {"cluster": "foo", "namespace": "feddns-myfederation", "name": "feddns"}}
    assert len([c for c in following["clusters"] if "stubzone" in c]) == 3


@pytest.mark.parametrize("render_id", render_ids(MEMBER))
def test_https_load_balancers_let_in_only_the_source_ranges_set(rendered: dict[str, list[Obj]], render_id: str) -> None:
    services = [o for o in rendered[render_id] if o["kind"] == "Service" and o["spec"].get("type") == "LoadBalancer"]
    assert [s["metadata"]["name"] for s in services] == ["feddns-stubzone"]
    for service in services:
        assert service["spec"]["loadBalancerSourceRanges"], service


# -- the real API server -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(kube_foo: KubeCluster, rendered: dict[str, list[Obj]]) -> Iterator[KubeCluster]:
    """kube_foo with the CRDs, and the renders' namespaces made and labelled :data:`POD_SECURITY`."""
    for name in CRDS:
        kube_foo.install_crds(peers.crd(name))
    names = sorted({obj["metadata"]["namespace"] for objects in rendered.values() for obj in objects
                    if "namespace" in obj["metadata"]})
    for name in names:
        kube_foo.ensure_namespace(name)
        label_namespace(kube_foo, name, POD_SECURITY)
    yield kube_foo
    for name in names:
        label_namespace(kube_foo, name, {})


@pytest.mark.parametrize("render", RENDERS, ids=lambda r: r.id)
def test_the_api_server_accepts_every_rendered_object(
        cluster: KubeCluster, rendered: dict[str, list[Obj]], render: Render) -> None:
    objects = rendered[render.id]
    status, output = dry_run_apply(cluster, RENDER_SCRIPT, yaml.safe_dump_all(objects))
    assert status == 0, f"the API server refused {render.id}:\n{output}"
    sent = {(kind.partition(".")[0], name) for kind, name in DRY_RUN_LINE.findall(output)}
    assert sent == {(obj["kind"].lower(), obj["metadata"]["name"]) for obj in objects}, output
    assert WARNING.findall(output) == list(render.expected_warnings), output


# -- bad values ------------------------------------------------------------------------------------

BAD_VALUES = [
    ("cluster-without-name", FEDERATION, {"clusters": [{"zone": "us-central1-a"}]},
     "at '/clusters/0': missing property 'name'"),
    ("nameserver-not-an-ip", FEDERATION, {"nameservers": ["203.0.113.53", "ns.example.com"]},
     "at '/nameservers/1': 'ns.example.com' does not match pattern"),
    ("nameserver-out-of-range", FEDERATION, {"nameservers": ["203.0.113.256"]},
     "at '/nameservers/0': '203.0.113.256' does not match pattern"),
    ("cluster-name-not-a-label", FEDERATION, {"clusters": [{"name": "Foo_1"}]},
     "at '/clusters/0/name': 'Foo_1' does not match pattern"),
    ("cidr-with-no-prefix", FEDERATION, {"clusters": [{"name": "foo", "cidrs": ["10.0.0.1"]}]},
     "at '/clusters/0/cidrs/0': '10.0.0.1' does not match pattern"),
    ("unknown-key", FEDERATION, {"clusters": [{"name": "foo", "zones": "a"}]},
     "at '/clusters/0': additional properties 'zones' not allowed"),
    ("stubzone-url-not-https", FEDERATION, {"clusters": [{"name": "foo", "stubzone": {"url": "http://a:8443"}}],
                                            "nameservers": ["203.0.113.53"]},
     "at '/clusters/0/stubzone/url': 'http://a:8443' does not match pattern"),
    ("etcd-user-without-password", FEDERATION, {"etcd": {"external": {"endpoints": ["https://etcd:2379"],
                                                                     "serve": {"user": "feddns-serve"}}}},
     "at '/etcd/external/serve/passwordSecret': minLength: got 0, want 1"),
    ("cluster-listed-twice", FEDERATION, {"clusters": [{"name": "foo"}, {"name": "bar"}, {"name": "foo"}]},
     "clusters[2].name: foo is listed twice"),
    ("workers-beside-another-cpu-limit", FEDERATION, {"serve": {"workers": 4}},
     "serve.workers: 4, but serve.resources.limits.cpu is 2: keep them equal"),
    ("no-worker", FEDERATION, {"serve": {"workers": 0}}, "at '/serve/workers': minimum: got 0, want 1"),
    ("stubzone-without-nameservers", FEDERATION, {"clusters": [{"name": "foo", "stubzone": {"url": "https://a"}}]},
     "clusters[0].stubzone: needs nameservers"),
    ("nameservers-from-an-unknown-cluster", FEDERATION, {"nameservers": {"fromService": {"cluster": "baz"}}},
     "nameservers.fromService.cluster: baz is not one of clusters[].name (foo, bar)"),
    ("member-without-name", MEMBER, {}, "at '/cluster': '' does not match pattern"),
    ("unknown-platform", MEMBER, {"cluster": "foo", "clusterDNS": {"platform": "microk8s"}},
     "at '/clusterDNS/platform': value must be one of 'kubeadm', 'eks', 'aks', 'k3s', 'rke2', 'gke', 'openshift', "
     "'forwarder'"),
    ("probe-server-without-port", MEMBER, {"cluster": "foo", "clusterDNS": {"probeServer": "10.96.0.10"}},
     "at '/clusterDNS/probeServer': '10.96.0.10' does not match pattern"),
    ("member-name-read-as-hex", MEMBER, {"cluster": "0xfedd"}, "at '/cluster': 'not' failed"),
    ("stubzone-open-to-all", MEMBER, {"cluster": "foo", "stubzone": {"service": {
        "loadBalancerSourceRanges": ["198.51.100.0/24", "0.0.0.0/0"]}}},
     "at '/stubzone/service/loadBalancerSourceRanges/1': 'not' failed"),
    ("gating-past-the-webhook-timeout", MEMBER, {"cluster": "foo", "links": {"gatingTimeout": 5}},
     "at '/links/gatingTimeout': maximum: got 5, want 4"),
    ("leave-zone-share-over-1", FEDERATION, {"monitoring": {"alerts": {"leaveZoneShare": 1.5}}},
     "at '/monitoring/alerts/leaveZoneShare': maximum: got 1.5, want 1"),
]


@pytest.mark.parametrize("chart, values, message", [case[1:] for case in BAD_VALUES], ids=[c[0] for c in BAD_VALUES])
def test_bad_values_are_refused_naming_the_value(chart: Path, values: Obj, message: str) -> None:
    done = helm("template", "x", str(chart), "--namespace", "x", "--values", "-", input=yaml.safe_dump(values))
    assert done.returncode != 0, done.stdout
    assert message in done.stderr, done.stderr


def test_the_leave_zone_alert_takes_its_threshold_from_the_value() -> None:
    values = {"monitoring": {"prometheusRules": True, "alerts": {"leaveZoneShare": 0.3}}}
    done = helm("template", "x", str(FEDERATION), "--namespace", "x", "--show-only", "templates/prometheusrule.yaml",
                "--values", "-", input=yaml.safe_dump(values))
    assert done.returncode == 0, done.stderr
    (rule,) = [r for g in yaml.safe_load(done.stdout)["spec"]["groups"] for r in g["rules"]
               if r.get("alert") == "FederatedDNSAnswersLeaveZone"]
    assert rule["expr"].rstrip().endswith("> 0.3") and "LEAVE_ZONE_SHARE" not in done.stdout
    assert "{{ $labels.source_cluster }}" in rule["annotations"]["summary"]  # Prometheus's templates left alone


# -- one source: the plain manifests ------------------------------------------------------------------

def test_the_plain_manifests_are_rendered_from_the_charts(tmp_path: Path) -> None:
    done = subprocess.run(["bash", str(RENDER_SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=300,
                          check=False, env=child_env(HELM=peers.binary("helm"), HOME=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    written = sorted(line.removeprefix("wrote ") for line in done.stdout.splitlines())
    assert written == sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*.yaml"))
    assert {"deploy/myfederation/federated-dns.yaml", "deploy/cluster-dns/coredns/stubzone.yaml",
            "deploy/member/controller-access.yaml", "deploy/monitoring/podmonitors.yaml"} <= set(written)
    differ = [name for name in written if (tmp_path / name).read_text() != (REPO / name).read_text()]
    assert not differ, (f"{differ} differ from what the charts render: edit deploy/helm/ and run "
                        f"`HELM={peers.binary('helm')} bash deploy/helm/render.sh`")


# -- the commands docs/operations.md gives -----------------------------------------------------------

def script_env(cluster: KubeCluster) -> dict[str, str]:
    """The scripts' environment: the peers' kubectl first on PATH, the cluster's admin kubeconfig."""
    path = f"{Path(peers.binary('kubectl')).parent}{os.pathsep}{os.environ['PATH']}"
    return child_env(PATH=path, KUBECONFIG=cluster.kubeconfig, HOME=str(cluster.directory))


@pytest.fixture
def stock_coredns(cluster: KubeCluster) -> Iterator[str]:
    """The stock CoreDNS Deployment and ConfigMap, applied for real in a namespace of the test's own."""
    ns = f"coredns-{uuid.uuid4().hex[:8]}"
    cluster.ensure_namespace(ns)
    for obj in yaml.safe_load_all((STOCK / "coredns.yaml").read_text()):
        if obj and obj["kind"] in ("Deployment", "ConfigMap"):
            obj["metadata"]["namespace"] = ns
            cluster.apply(obj)
    yield ns
    cluster.request("DELETE", f"/api/v1/namespaces/{ns}")


def test_coredns_import_wires_the_stock_coredns_once_and_undo_takes_it_out(
        cluster: KubeCluster, stock_coredns: str) -> None:
    ns = stock_coredns
    script = REPO / "deploy/cluster-dns/coredns/coredns-import.sh"
    deployment = f"/apis/apps/v1/namespaces/{ns}/deployments/coredns"
    before = cluster.request("GET", deployment)["spec"]["template"]["spec"]
    corefile = cluster.request("GET", f"/api/v1/namespaces/{ns}/configmaps/coredns")["data"]["Corefile"]

    def run(*args: str) -> str:
        done = subprocess.run(["bash", str(script), "--context", cluster.name, "--namespace", ns, *args],
                              capture_output=True, text=True, timeout=120, check=False, env=script_env(cluster))
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    run()
    spec = cluster.request("GET", deployment)["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert {"name": "feddns-stub-zones", "mountPath": "/etc/coredns/feddns", "readOnly": True} in \
        container["volumeMounts"]
    assert {"name": "coredns-feddns", "optional": True}.items() <= next(
        v for v in spec["volumes"] if v["name"] == "feddns-stub-zones")["configMap"].items()
    line = (REPO / "deploy/cluster-dns/coredns/corefile-import.txt").read_text().strip()
    assert cluster.request("GET", f"/api/v1/namespaces/{ns}/configmaps/coredns")["data"]["Corefile"] == \
        line + "\n" + corefile
    version = cluster.request("GET", f"/api/v1/namespaces/{ns}/configmaps/coredns")["metadata"]["resourceVersion"]
    assert "already as wanted" in run()  # idempotent: the Corefile is not written again
    assert cluster.request("GET", f"/api/v1/namespaces/{ns}/configmaps/coredns")["metadata"][
        "resourceVersion"] == version
    run("--undo")
    assert cluster.request("GET", f"/api/v1/namespaces/{ns}/configmaps/coredns")["data"]["Corefile"] == corefile
    after = cluster.request("GET", deployment)["spec"]["template"]["spec"]
    assert after["volumes"] == before["volumes"]
    assert after["containers"][0]["volumeMounts"] == before["containers"][0]["volumeMounts"]


def test_kubeconfig_script_gives_the_controller_the_charts_service_account_and_nothing_more(
        cluster: KubeCluster, rendered: dict[str, list[Obj]], tmp_path: Path) -> None:
    """The member chart's access objects applied for real (as deploy/member/controller-access.yaml, which
    other tests apply too); the token controller's part played by the test: it fills the token Secret."""
    access = [obj for obj in rendered[f"{MEMBER.name}:foo.yaml"]
              if obj["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "feddns-controller"]
    for obj in access:
        cluster.apply(obj)
    path = "/api/v1/namespaces/feddns-system/secrets/feddns-controller-token"
    token = cluster.service_account_token("feddns-system", "feddns-controller")
    cluster.request("PATCH", path, {"data": {"token": base64.b64encode(token.encode()).decode(),
                                             "ca.crt": base64.b64encode(cluster.ca_pem.encode()).decode()}},
                    "application/merge-patch+json")
    try:
        done = subprocess.run(["bash", str(REPO / "deploy/member/kubeconfig.sh"), "--context", cluster.name],
                              capture_output=True, text=True, timeout=120, check=False, env=script_env(cluster))
        assert done.returncode == 0, done.stderr
        kubeconfig = tmp_path / "foo.kubeconfig"
        kubeconfig.write_text(done.stdout)
        assert yaml.safe_load(done.stdout)["clusters"][0]["cluster"]["server"] == cluster.url
        allowed = cluster.kubectl("get", "services", "--all-namespaces", kubeconfig=str(kubeconfig), check=False)
        assert allowed.returncode == 0, allowed.stderr
        refused = cluster.kubectl("get", "secrets", "--all-namespaces", kubeconfig=str(kubeconfig), check=False)
        assert refused.returncode != 0 and "forbidden" in refused.stderr, refused.stdout + refused.stderr
    finally:
        cluster.request("DELETE", path)


def test_joining_and_removing_a_cluster_is_a_helm_upgrade_that_restarts_nothing(
        cluster: KubeCluster, tmp_path: Path) -> None:
    """docs/operations.md's join and leave, as far as the federation's cluster goes, with the real helm
    against the real API server: the upgrade changes the controller's ConfigMap (which the running
    controller re-reads) and no pod template, so no pod is restarted."""
    ns = f"feddns-join-{uuid.uuid4().hex[:8]}"
    values = tmp_path / "myfederation.yaml"
    env = script_env(cluster)

    def helm_against(*args: str) -> None:
        done = subprocess.run([peers.binary("helm"), *args, "--namespace", ns], capture_output=True, text=True,
                              timeout=120, check=False, env=env)
        assert done.returncode == 0, done.stdout + done.stderr

    def members() -> list[str]:
        config = cluster.request("GET", f"/api/v1/namespaces/{ns}/configmaps/feddns-controller")
        return [c["name"] for c in yaml.safe_load(config["data"]["controller.yaml"])["clusters"]]

    def pod_templates() -> dict[str, Any]:
        return {name: cluster.request("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")["spec"]["template"]
                for name in ("feddns", "feddns-controller")}

    foo = {"name": "foo", "zone": "us-central1-a", "region": "us-central1"}
    bar = {"name": "bar", "zone": "us-central1-b", "region": "us-central1"}
    baz = {"name": "baz", "zone": "europe-west1-c", "region": "europe-west1"}
    values.write_text(yaml.safe_dump({"clusters": [foo, bar]}))
    helm_against("install", "myfederation", str(FEDERATION), "--create-namespace", "--values", str(values))
    try:
        before = pod_templates()
        values.write_text(yaml.safe_dump({"clusters": [foo, bar, baz]}))
        helm_against("upgrade", "myfederation", str(FEDERATION), "--values", str(values))
        assert members() == ["foo", "bar", "baz"]
        values.write_text(yaml.safe_dump({"clusters": [foo, baz]}))
        helm_against("upgrade", "myfederation", str(FEDERATION), "--values", str(values))
        assert members() == ["foo", "baz"]
        assert pod_templates() == before
    finally:
        helm_against("uninstall", "myfederation")
        cluster.request("DELETE", f"/api/v1/namespaces/{ns}")


@pytest.mark.parametrize(("chart", "values", "value"), [
    (FEDERATION, {"createNamespace": True}, "createNamespace"),
    (MEMBER, {"cluster": "foo", "stubzone": {"enabled": False}, "controllerAccess": {"createNamespace": True}},
     "controllerAccess.createNamespace"),
], ids=["federation", "member"])
def test_a_chart_refuses_to_make_its_own_release_namespace_at_install(
        cluster: KubeCluster, tmp_path: Path, chart: Path, values: Obj, value: str) -> None:
    """The bug the node found first: with ``createNamespace: true`` (the federation chart's own sample
    set it) ``helm install -n X`` failed with 'namespaces "X" not found', since Helm stores the release
    in X before the chart can make it. Against a live API server the chart now refuses the value
    naming it and the way that works; without it, ``--create-namespace`` installs."""
    ns = f"feddns-ns-{uuid.uuid4().hex[:8]}"
    env = script_env(cluster)
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))

    def helm_against(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([peers.binary("helm"), *args, "--namespace", ns], capture_output=True, text=True,
                              timeout=120, check=False, env=env)

    refused = helm_against("install", "r", str(chart), "--values", str(path))
    assert refused.returncode != 0
    assert f"{value}: true is for `helm template`" in refused.stderr, refused.stderr
    assert "--create-namespace" in refused.stderr
    assert cluster.get("Namespace", None, ns) is None, "nothing may be left of a refused install"
    if chart == FEDERATION:  # (the member chart's ClusterRole is another test's here)
        path.write_text(yaml.safe_dump({**values, "createNamespace": False}))
        installed = helm_against("install", "r", str(chart), "--create-namespace", "--values", str(path))
        try:
            assert installed.returncode == 0, installed.stderr
        finally:
            helm_against("uninstall", "r")
            if cluster.get("Namespace", None, ns) is not None:
                cluster.delete("Namespace", None, ns)
    # helm template (the plain manifests) still renders the Namespace.
    rendered = helm("template", "r", str(chart), "--namespace", ns, "--values", "-", input=yaml.safe_dump(values))
    assert rendered.returncode == 0, rendered.stderr
    assert any(obj and obj["kind"] == "Namespace" and obj["metadata"]["name"] == ns
               for obj in yaml.safe_load_all(rendered.stdout))


def test_removing_the_last_stub_zone_changes_no_pod_template() -> None:
    """The node showed it: with the stub-zone client volume only while some cluster had a stub zone,
    removing the last one restarted the controllers, and the new leader, which never knew the zone,
    sent no DELETE. Now the upgrade changes only the controller's ConfigMap."""
    with_stub = {"clusters": [{"name": "foo", "stubzone": {"url": "https://stubzone.foo.example.net"}}],
                 "nameservers": ["203.0.113.53"]}
    without = {"clusters": [{"name": "foo"}]}

    def controller_template(values: Obj) -> Obj:
        done = helm("template", "r", str(FEDERATION), "--namespace", "x", "--values", "-", input=yaml.safe_dump(values))
        assert done.returncode == 0, done.stderr
        (deployment,) = [o for o in yaml.safe_load_all(done.stdout)
                         if o and o["kind"] == "Deployment" and o["metadata"]["name"] == "feddns-controller"]
        return dict(deployment["spec"]["template"])

    assert controller_template(with_stub) == controller_template(without)
