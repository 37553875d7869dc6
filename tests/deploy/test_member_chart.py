"""The member chart's certificates, placement, NetworkPolicy and NOTES, with the real helm and a real kube-apiserver.

* Certificates (docs/stubzone.md, "Certificates with cert-manager or your own Secret"): with
  ``stubzone.tls.existingSecret`` the chart renders no Secret and mounts yours; with
  ``certManager.enabled`` it renders a cert-manager.io/v1 Certificate into ``secretName`` for the
  Service's names and the listed ones; the client CA (``--client-ca``) comes from ``clientCA``,
  ``clientCASecret`` or ``clientCAConfigMap`` when set, never from cert-manager's ``ca.crt``.
* A Secret the chart made from ``--set-file`` outlives a ``helm upgrade`` without the files, with
  its data; a Secret of someone else's is never taken over.
* Placement: ``nodeSelector`` (default ``kubernetes.io/os: linux``, the links webhook's too),
  ``tolerations``, ``affinity``, a PodDisruptionBudget when there is more than one replica,
  ``service.loadBalancerClass``.
* The NetworkPolicy lets port 8443 in only from the source ranges (whatever the Service's type:
  a NodePort bypasses the load balancer's ranges) and the metrics port from ``metricsFrom``.
* NOTES print a command that prints the load balancer's hostname (AWS) or IP address.
* Bad values are refused with the value's path; every render passes the API server's dry run, the
  Certificate against cert-manager's own CRD (its OpenAPI schema; cert-manager's webhook, which
  checks more, does not run here).
"""

import base64
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import peers
from harness.kubecluster import KubeCluster
from tests.deploy.manifests import containers, find, flag
from tests.deploy.test_charts import MEMBER, helm, script_env
from tests.deploy.test_dry_run import DRY_RUN_LINE, POD_SECURITY, WARNING, dry_run_apply, label_namespace

Obj = dict[str, Any]
NS = "kube-system"
SERVICE_NAMES = ["feddns-stubzone.kube-system", "feddns-stubzone.kube-system.svc",
                 "feddns-stubzone.kube-system.svc.cluster.local"]
CERT_MANAGER = {"enabled": True, "issuerRef": {"name": "feddns-ca", "kind": "ClusterIssuer"},
                "dnsNames": ["stubzone.foo.example.net"]}
UNINSTALL = ("uninstall", "feddns-member", "--no-hooks")
"""The chart's pre-delete hook is a Job, which no kubelet runs here (tests/deploy/test_platforms.py runs its
arguments itself)."""
PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def member_values(**stubzone: Any) -> Obj:
    return {"cluster": "foo", "controllerAccess": {"enabled": False}, "stubzone": stubzone}


def render(values: Obj, namespace: str = "feddns-system") -> list[Obj]:
    done = helm("template", "feddns-member", str(MEMBER), "--namespace", namespace, "--values", "-",
                input=yaml.safe_dump(values))
    assert done.returncode == 0, done.stderr
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]


def kinds(objects: list[Obj], kind: str) -> list[Obj]:
    return [obj for obj in objects if obj["kind"] == kind]


def stubzone_pod(objects: list[Obj]) -> Obj:
    return dict(find(objects, "Deployment", NS, "feddns-stubzone")["spec"]["template"]["spec"])


def tls_files(objects: list[Obj]) -> dict[str, tuple[str, str, str]]:
    """Each file of the endpoint's volume "tls", as mounted: path -> (kind of source, its name, its key);
    and the flags naming them point into that volume."""
    pod = stubzone_pod(objects)
    (container,) = [c for c in containers(objects) if c.spec["args"][0] == "stubzone"
                    and c.workload["kind"] == "Deployment"]
    mount = container.mount_for(flag(container.spec["args"], "client-ca")[0])
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    for name in ("cert", "key", "client-ca"):
        assert flag(container.spec["args"], name)[0].startswith(mount["mountPath"] + "/")
    sources = volume["projected"]["sources"] if "projected" in volume else [{"secret": {
        "name": volume["secret"]["secretName"], "items": volume["secret"]["items"]}}]
    return {item["path"]: (kind, source[kind]["name"], item["key"])
            for source in sources for kind in source for item in source[kind]["items"]}


# -- certificates ----------------------------------------------------------------------------------

def test_an_existing_secret_is_mounted_and_no_secret_is_rendered() -> None:
    objects = render(member_values(tls={"existingSecret": "stubzone-tls-mine"}))
    assert not kinds(objects, "Secret") and not kinds(objects, "Certificate")
    assert tls_files(objects) == {"tls.crt": ("secret", "stubzone-tls-mine", "tls.crt"),
                                  "tls.key": ("secret", "stubzone-tls-mine", "tls.key"),
                                  "ca.crt": ("secret", "stubzone-tls-mine", "ca.crt")}


@pytest.mark.parametrize(("client_ca", "source"), [
    ({"clientCA": PEM}, ("configMap", "feddns-stubzone-client-ca", "ca.crt")),
    ({"clientCASecret": {"name": "controller-ca", "key": "ca.pem"}}, ("secret", "controller-ca", "ca.pem")),
    ({"clientCAConfigMap": {"name": "controller-ca", "key": "root.crt"}}, ("configMap", "controller-ca", "root.crt")),
], ids=["pem", "secret", "configmap"])
def test_cert_manager_writes_the_server_certificate_and_the_client_ca_comes_from_elsewhere(
        client_ca: Obj, source: tuple[str, str, str]) -> None:
    objects = render(member_values(tls={"certManager": CERT_MANAGER, **client_ca}))
    (certificate,) = kinds(objects, "Certificate")
    assert certificate["apiVersion"] == "cert-manager.io/v1"
    spec = certificate["spec"]
    assert spec["secretName"] == "feddns-stubzone-tls"
    assert spec["dnsNames"] == [*SERVICE_NAMES, "stubzone.foo.example.net"]
    assert spec["issuerRef"] == {"name": "feddns-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    assert "server auth" in spec["usages"] and "client auth" not in spec["usages"]
    assert not kinds(objects, "Secret")  # cert-manager's, not the release's
    assert tls_files(objects) == {"tls.crt": ("secret", "feddns-stubzone-tls", "tls.crt"),
                                  "tls.key": ("secret", "feddns-stubzone-tls", "tls.key"),
                                  "ca.crt": source}
    config_maps = {c["metadata"]["name"]: c for c in kinds(objects, "ConfigMap")}
    if "clientCA" in client_ca:
        assert config_maps["feddns-stubzone-client-ca"]["data"] == {"ca.crt": PEM}
    else:
        assert "feddns-stubzone-client-ca" not in config_maps


def test_files_given_with_a_separate_client_ca_need_no_ca() -> None:
    objects = render(member_values(tls={"cert": "CERT", "key": "KEY", "clientCA": PEM}))
    (secret,) = kinds(objects, "Secret")
    assert secret["stringData"] == {"tls.crt": "CERT", "tls.key": "KEY"}
    assert tls_files(objects)["ca.crt"] == ("configMap", "feddns-stubzone-client-ca", "ca.crt")


# -- placement, NetworkPolicy ----------------------------------------------------------------------

def test_pods_run_on_linux_nodes_by_default_and_where_the_values_place_them() -> None:
    defaults = render({"cluster": "foo", "links": {"enabled": True, "namespace": "feddns-links"}})
    for deployment in kinds(defaults, "Deployment"):
        assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert {d["metadata"]["name"] for d in kinds(defaults, "Deployment")} == {"feddns-stubzone", "feddns-links"}
    toleration = {"key": "dedicated", "operator": "Equal", "value": "dns", "effect": "NoSchedule"}
    spread = {"topologyKey": "kubernetes.io/hostname",
              "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "feddns-stubzone"}}}
    affinity = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "podAffinityTerm": spread}]}}
    pod = stubzone_pod(render(member_values(nodeSelector={"pool": "system"}, tolerations=[toleration],
                                            affinity=affinity)))
    # Helm merges a map of values into the default: the image's Linux stays asked for.
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "pool": "system"}
    assert (pod["tolerations"], pod["affinity"]) == ([toleration], affinity)


@pytest.mark.parametrize("replicas", [1, 2, 3])
def test_a_disruption_budget_keeps_one_endpoint_when_there_are_more(replicas: int) -> None:
    budgets = kinds(render(member_values(replicas=replicas)), "PodDisruptionBudget")
    assert [b["spec"] for b in budgets] == ([] if replicas == 1 else [
        {"minAvailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": "feddns-stubzone"}}}])


def test_the_load_balancer_class_is_passed_on() -> None:
    service = find(render(member_values(service={"loadBalancerClass": "service.k8s.aws/nlb"})),
                   "Service", NS, "feddns-stubzone")
    assert service["spec"]["loadBalancerClass"] == "service.k8s.aws/nlb"
    assert "loadBalancerClass" not in find(render(member_values()), "Service", NS, "feddns-stubzone")["spec"]


def _admits(policy: Obj, pod_labels: dict[str, str], port: int) -> list[Obj]:
    """The peers ``policy`` lets in to ``port`` of a pod with ``pod_labels`` (NetworkPolicy semantics)."""
    selected = policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert selected and policy["spec"]["policyTypes"] == ["Ingress"]
    return [peer for rule in policy["spec"]["ingress"] if any(p["port"] == port for p in rule["ports"])
            for peer in rule["from"]]


@pytest.mark.parametrize("service_type", ["LoadBalancer", "NodePort"])
def test_the_endpoint_is_reached_only_from_the_source_ranges_whatever_the_service_type(service_type: str) -> None:
    ranges = ["198.51.100.16/28", "2001:db8:100::/56"]
    controller = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "feddns-myfederation"}}}
    objects = render(member_values(service={"type": service_type, "loadBalancerSourceRanges": ranges},
                                   networkPolicy={"extraSources": ["10.20.0.0/16"], "extraPeers": [controller]}))
    pod = find(objects, "Deployment", NS, "feddns-stubzone")["spec"]["template"]
    (policy,) = kinds(objects, "NetworkPolicy")
    labels = pod["metadata"]["labels"]
    assert _admits(policy, labels, 8443) == [
        *({"ipBlock": {"cidr": c}} for c in [*ranges, "10.20.0.0/16"]), controller]
    assert _admits(policy, labels, 9155) == [{"namespaceSelector": {}}]
    ports = {p["containerPort"] for c in pod["spec"]["containers"] for p in c["ports"]}
    assert ports == {8443, 9155}, "a port the policy does not name would be closed to all"
    service = find(objects, "Service", NS, "feddns-stubzone")
    assert service["spec"]["externalTrafficPolicy"] == "Local"  # the pod sees the client's own address


def test_the_network_policy_can_be_left_out_and_metrics_opened_to_one_namespace() -> None:
    assert not kinds(render(member_values(networkPolicy={"enabled": False})), "NetworkPolicy")
    monitoring = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    (policy,) = kinds(render(member_values(networkPolicy={"metricsFrom": monitoring})), "NetworkPolicy")
    assert _admits(policy, {"app.kubernetes.io/name": "feddns-stubzone"}, 9155) == monitoring


# -- bad values ------------------------------------------------------------------------------------

BAD_VALUES = [
    ("cert-manager-without-issuer", {"tls": {"certManager": {"enabled": True}, "clientCA": PEM}},
     "at '/stubzone/tls/certManager/issuerRef/name': minLength: got 0, want 1"),
    ("cert-manager-without-client-ca", {"tls": {"certManager": CERT_MANAGER}},
     "stubzone.tls.certManager.enabled: needs stubzone.tls.clientCA, clientCASecret or clientCAConfigMap"),
    ("two-ways-to-the-certificate", {"tls": {"existingSecret": "mine", "cert": "C", "key": "K", "ca": "A"}},
     "stubzone.tls: cert and existingSecret are set"),
    ("two-client-cas", {"tls": {"clientCA": PEM, "clientCASecret": {"name": "ca"}}},
     "stubzone.tls: clientCA and clientCASecret.name are set"),
    ("files-without-a-client-ca", {"tls": {"cert": "C", "key": "K"}}, "stubzone.tls.ca: needed with stubzone.tls.cert"),
    ("secret-name-not-a-name", {"tls": {"existingSecret": "My_TLS"}},
     "at '/stubzone/tls/existingSecret': 'My_TLS' does not match pattern"),
    ("node-selector-not-a-string", {"nodeSelector": {"pool": 1}},
     "at '/stubzone/nodeSelector/pool': got number, want string"),
    ("tolerations-not-a-list", {"tolerations": {"key": "dedicated"}},
     "at '/stubzone/tolerations': got object, want array"),
    ("load-balancer-class-with-spaces", {"service": {"loadBalancerClass": "aws nlb"}},
     "at '/stubzone/service/loadBalancerClass': 'aws nlb' does not match pattern"),
    ("extra-source-not-a-cidr", {"networkPolicy": {"extraSources": ["10.0.0.1"]}},
     "at '/stubzone/networkPolicy/extraSources/0': '10.0.0.1' does not match pattern"),
    ("extra-source-open-to-all", {"networkPolicy": {"extraSources": ["0.0.0.0/0"]}},
     "at '/stubzone/networkPolicy/extraSources/0': 'not' failed"),
]


@pytest.mark.parametrize("stubzone, message", [case[1:] for case in BAD_VALUES], ids=[c[0] for c in BAD_VALUES])
def test_bad_values_are_refused_naming_the_value(stubzone: Obj, message: str) -> None:
    done = helm("template", "x", str(MEMBER), "--namespace", "x", "--values", "-",
                input=yaml.safe_dump(member_values(**stubzone)))
    assert done.returncode != 0, done.stdout
    assert message in done.stderr, done.stderr


# -- the real API server ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(kube_foo: KubeCluster) -> Iterator[KubeCluster]:
    """kube_foo with cert-manager's Certificate CRD, and kube-system labelled :data:`POD_SECURITY` while
    the module runs."""
    kube_foo.install_crds(peers.crd("certificates.yaml"))
    label_namespace(kube_foo, NS, POD_SECURITY)
    yield kube_foo
    label_namespace(kube_foo, NS, {})


DRY_RUNS = {
    "existing-secret-placed": member_values(
        tls={"existingSecret": "mine", "clientCASecret": {"name": "controller-ca"}}, replicas=3,
        tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}},
        service={"loadBalancerClass": "service.k8s.aws/nlb", "loadBalancerSourceRanges": ["2001:db8::/48"]},
        networkPolicy={"extraSources": ["10.20.0.0/16"]}),
    "files-and-client-ca": member_values(tls={"cert": "C", "key": "K", "clientCA": PEM},
                                         service={"type": "NodePort"}),
    "cert-manager": member_values(tls={"certManager": {**CERT_MANAGER, "ipAddresses": ["198.51.100.7"]},
                                       "clientCAConfigMap": {"name": "controller-ca"}}),
}


@pytest.mark.parametrize("name", DRY_RUNS)
def test_the_api_server_accepts_the_renders(cluster: KubeCluster, name: str) -> None:
    objects = render(DRY_RUNS[name])
    status, output = dry_run_apply(cluster, MEMBER, yaml.safe_dump_all(objects))
    assert status == 0, output
    sent = {(kind.partition(".")[0], obj_name) for kind, obj_name in DRY_RUN_LINE.findall(output)}
    assert sent == {(obj["kind"].lower(), obj["metadata"]["name"]) for obj in objects}, output
    assert {"networkpolicy", "poddisruptionbudget", "deployment"} <= {kind for kind, _ in sent}
    assert WARNING.findall(output) == [], output


@pytest.fixture
def release(cluster: KubeCluster, tmp_path: Path) -> Iterator["Release"]:
    ns = f"feddns-tls-{uuid.uuid4().hex[:8]}"
    cluster.ensure_namespace(ns)
    yield Release(cluster, ns, tmp_path)
    Release(cluster, ns, tmp_path).helm(*UNINSTALL, check=False)
    cluster.request("DELETE", f"/api/v1/namespaces/{ns}")


class Release:
    """helm install and upgrade of the member chart (its endpoint in ``ns`` too) into the real API server."""

    def __init__(self, cluster: KubeCluster, ns: str, directory: Path) -> None:
        self.cluster, self.ns, self.directory = cluster, ns, directory

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([peers.binary("helm"), *args, "--namespace", self.ns], capture_output=True,
                              text=True, timeout=120, check=False, env=script_env(self.cluster))
        assert not check or done.returncode == 0, done.stdout + done.stderr
        return done

    def values(self) -> list[str]:
        path = self.directory / "values.yaml"
        path.write_text(yaml.safe_dump(member_values(namespace=self.ns)))
        return ["--values", str(path)]

    def files(self, **files: str) -> list[str]:
        """``--set-file stubzone.tls.NAME=...`` of files holding these texts."""
        for name, text in files.items():
            (self.directory / name).write_text(text)
        return ["--set-file", ",".join(f"stubzone.tls.{n}={self.directory / n}" for n in files)]

    def secret(self, name: str = "feddns-stubzone-tls") -> dict[str, str] | None:
        found = self.cluster.get("Secret", self.ns, name)
        return None if found is None else {k: base64.b64decode(v).decode() for k, v in found["data"].items()}


def test_an_upgrade_without_the_files_keeps_the_secret_the_chart_made(release: Release) -> None:
    chart = ["feddns-member", str(MEMBER)]
    release.helm("install", *chart, *release.values(), *release.files(cert="CERT 1", key="KEY 1", ca="CA 1"))
    assert release.secret() == {"tls.crt": "CERT 1", "tls.key": "KEY 1", "ca.crt": "CA 1"}
    release.helm("upgrade", *chart, *release.values(), "--set", "image.tag=0.2.0")
    assert release.secret() == {"tls.crt": "CERT 1", "tls.key": "KEY 1", "ca.crt": "CA 1"}
    release.helm("upgrade", *chart, *release.values())  # and again: what it kept, it keeps
    assert release.secret() == {"tls.crt": "CERT 1", "tls.key": "KEY 1", "ca.crt": "CA 1"}
    release.helm("upgrade", *chart, *release.values(), *release.files(cert="CERT 2", key="KEY 2", ca="CA 1"))
    assert release.secret() == {"tls.crt": "CERT 2", "tls.key": "KEY 2", "ca.crt": "CA 1"}
    release.helm(*UNINSTALL)
    assert release.secret() is None, "the keys leave with the release"


def test_naming_the_releases_own_secret_as_existing_is_refused_before_helm_deletes_it(release: Release) -> None:
    chart = ["feddns-member", str(MEMBER)]
    release.helm("install", *chart, *release.values(), *release.files(cert="CERT", key="KEY", ca="CA"))
    refused = release.helm("upgrade", *chart, *release.values(), "--set",
                           "stubzone.tls.existingSecret=feddns-stubzone-tls", check=False)
    assert refused.returncode != 0
    assert "stubzone.tls.existingSecret: Secret" in refused.stderr and "copy it under another name" in refused.stderr
    assert release.secret() == {"tls.crt": "CERT", "tls.key": "KEY", "ca.crt": "CA"}


def test_a_secret_of_someone_elses_is_left_alone(release: Release) -> None:
    mine = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "feddns-stubzone-tls", "namespace": release.ns},
            "stringData": {"tls.crt": "MINE", "tls.key": "MINE", "ca.crt": "MINE"}}
    release.cluster.apply(mine)
    chart = ["feddns-member", str(MEMBER)]
    release.helm("install", *chart, *release.values())
    release.helm("upgrade", *chart, *release.values())
    release.helm(*UNINSTALL)
    assert release.secret() == {"tls.crt": "MINE", "tls.key": "MINE", "ca.crt": "MINE"}


@pytest.mark.parametrize("ingress", [{"hostname": "a1b2-123.elb.us-east-1.amazonaws.com"}, {"ip": "203.0.113.7"}],
                         ids=["hostname", "ip"])
def test_the_notes_print_a_command_that_prints_the_address(release: Release, ingress: dict[str, str]) -> None:
    """The command of NOTES, run as printed against the API server, after the load balancer's controller
    (played by the test) filled in the Service's status as AWS (a hostname) or GCP (an IP) does."""
    done = release.helm("install", "feddns-member", str(MEMBER), *release.values(),
                        "--set", "stubzone.tls.existingSecret=mine")
    (command,) = [line.strip() for line in done.stdout.splitlines() if "get service feddns-stubzone" in line]
    path = f"/api/v1/namespaces/{release.ns}/services/feddns-stubzone/status"
    release.cluster.request("PATCH", path, {"status": {"loadBalancer": {"ingress": [ingress]}}},
                            "application/merge-patch+json")
    shell = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, check=False,
                           env=script_env(release.cluster))
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout == next(iter(ingress.values())) + "\n"
