"""The manifests in deploy/: valid Kubernetes objects whose parts agree with each other
and with the ``feddns`` command line."""

import ipaddress
import posixpath
import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from controller.config import parse_config
from feddns.cli import build_parser
from links.policy import parse_policies
from stubzone.backends.corefile import parse as parse_corefile
from stubzone.cli import check_flags
from tests.deploy.manifests import (
    DEPLOY,
    REPO,
    STOCK,
    Container,
    all_objects,
    containers,
    dockerfile_instruction,
    expand,
    find,
    flag,
    load,
    manifest_files,
    namespace,
    patch_files,
    service_variables,
    strategic_merge,
)
from tests.support.fakekube import KUBERNETES_VERSION

OBJECTS = [obj for _, obj in all_objects()]
FEDDNS_CONTAINERS = [c for c in containers(OBJECTS) if c.is_feddns]


def test_there_is_a_manifest_for_each_part():
    kinds = {(obj["kind"], obj["metadata"]["name"]) for obj in OBJECTS}
    assert {("Deployment", "feddns"), ("StatefulSet", "feddns-etcd"), ("Service", "feddns"),
            ("Deployment", "feddns-stubzone"), ("ConfigMap", "coredns-feddns"), ("Deployment", "skydns"),
            ("StatefulSet", "skydns-etcd"), ("Deployment", "kube2sky"), ("Deployment", "feddns-links"),
            ("MutatingWebhookConfiguration", "links.feddns.io")} <= kinds
    assert {path.parent.name for path in (DEPLOY / "cluster-dns").rglob("*.yaml")} == \
        {"coredns", "kube-dns", "skydns", "rke2"}
    commands = {c.spec["args"][0] for c in FEDDNS_CONTAINERS}
    assert commands == {"serve", "controller", "stubzone", "links"}


@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_object_validates_against_the_kubernetes_schema(path: Path):
    for obj in load(path):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("container", FEDDNS_CONTAINERS, ids=lambda c: c.where)
def test_feddns_arguments_parse(container: Container):
    args = list(container.spec["args"])
    parsed = build_parser(args).parse_args(args)
    assert parsed.command == args[0]
    if parsed.command == "stubzone":  # names, zones and the backend's flags, as at start (files aside)
        check_flags(parsed)


@pytest.mark.parametrize("container", list(containers(OBJECTS)), ids=lambda c: c.where)
def test_variables_in_arguments_are_ones_kubernetes_defines(container: Container):
    defined = {env["name"] for env in container.spec.get("env", [])}
    pod = container.workload["spec"]["template"]["spec"]
    if pod.get("enableServiceLinks", True):
        defined |= set(service_variables(OBJECTS, namespace(container.workload)))
    for arg in container.spec.get("args", []):
        _, missing = expand(arg, {name: "x" for name in defined})
        assert not missing, f"{container.where}: {arg} uses undefined {missing}"


def _service_before_workload(path: Path, service: str, workload: str) -> bool:
    names = [(obj["kind"], obj["metadata"]["name"]) for obj in load(path)]
    return names.index(("Service", service)) < min(i for i, (kind, name) in enumerate(names) if name == workload
                                                    and kind in ("Deployment", "StatefulSet"))


def test_the_image_runs_feddns_and_serves_no_default_data():
    """The image has no CMD: a container started without arguments serves nothing (no
    made-up example federation); every manifest says what to run."""
    assert dockerfile_instruction("ENTRYPOINT") == ["feddns"]
    assert not any(line.startswith("CMD") for line in (REPO / "Dockerfile").read_text().splitlines())
    for container in FEDDNS_CONTAINERS:
        assert "command" not in container.spec, f"{container.where}: must use the image's ENTRYPOINT"


@pytest.mark.parametrize("container", FEDDNS_CONTAINERS, ids=lambda c: c.where)
def test_listen_and_metrics_flags_match_the_container_ports(container: Container):
    declared = {(p["containerPort"], p["protocol"]) for p in container.spec["ports"]}
    args = container.spec["args"]
    for address in flag(args, "listen"):
        port = int(address.rsplit(":", 1)[1])
        wanted = {(port, "UDP"), (port, "TCP")} if args[0] == "serve" else {(port, "TCP")}
        assert wanted <= declared, f"{container.where}: --listen {address} not in its ports"
    (metrics,) = flag(args, "metrics")
    metrics_port = int(metrics.rsplit(":", 1)[1])
    assert (metrics_port, "TCP") in declared
    for probe, path in (("livenessProbe", "/health"), ("readinessProbe", "/ready")):
        get = container.spec[probe]["httpGet"]
        assert get["path"] == path
        assert container.port(get["port"])["containerPort"] == metrics_port


@pytest.mark.parametrize("container", list(containers(OBJECTS)), ids=lambda c: c.where)
def test_containers_are_non_root_with_requests(container: Container):
    pod = container.workload["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert container.spec["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"cpu", "memory"} <= set(container.spec["resources"]["requests"])


def test_workload_selectors_match_their_pod_labels():
    for obj in OBJECTS:
        if obj["kind"] in ("Deployment", "StatefulSet"):
            labels = obj["spec"]["template"]["metadata"]["labels"]
            assert obj["spec"]["selector"]["matchLabels"].items() <= labels.items(), obj["metadata"]["name"]


def _selected(ns: str, selector: dict) -> list[Container]:
    return [c for c in containers(OBJECTS) if namespace(c.workload) == ns
            and selector.items() <= c.workload["spec"]["template"]["metadata"]["labels"].items()]


@pytest.mark.parametrize("service", [o for o in OBJECTS if o["kind"] == "Service"],
                         ids=lambda o: f"{namespace(o)}/{o['metadata']['name']}")
def test_service_ports_reach_a_selected_container(service):
    selected = _selected(namespace(service), service["spec"]["selector"])
    assert selected, "the selector matches no pod"
    for port in service["spec"]["ports"]:
        target = port["targetPort"]
        found = [p for c in selected for p in c.spec.get("ports", []) if p["name"] == target]
        assert found and found[0]["protocol"] == port["protocol"], f"targetPort {target!r}"


HTTPS_COMMANDS = ("stubzone", "links")
"""The feddns commands that serve HTTPS."""


def _https_load_balancers() -> list[dict]:
    return [o for o in OBJECTS if o["kind"] == "Service" and o["spec"].get("type") == "LoadBalancer"
            and any(c.is_feddns and c.spec.get("args", [""])[0] in HTTPS_COMMANDS
                    for c in _selected(namespace(o), o["spec"]["selector"]))]


def test_https_load_balancers_let_in_only_the_source_ranges_set():
    """Outside the cluster, only the addresses set may open connections to an HTTPS endpoint at all."""
    services = _https_load_balancers()
    assert len(services) == 3  # the stub-zone endpoint of each cluster DNS
    for service in services:
        ranges = service["spec"].get("loadBalancerSourceRanges")
        where = f"Service {namespace(service)}/{service['metadata']['name']}"
        assert ranges, f"{where} sets no loadBalancerSourceRanges"
        networks = [ipaddress.ip_network(text) for text in ranges]
        assert all(network.prefixlen > 0 for network in networks), f"{where} lets every address in: {ranges}"


def test_federated_dns_service_answers_on_53_udp_and_tcp():
    service = find(OBJECTS, "Service", "feddns-myfederation", "feddns")
    assert {(p["port"], p["protocol"]) for p in service["spec"]["ports"]} == {(53, "UDP"), (53, "TCP")}


def test_disruption_budgets_select_a_workload():
    for pdb in (o for o in OBJECTS if o["kind"] == "PodDisruptionBudget"):
        assert _selected(namespace(pdb), pdb["spec"]["selector"]["matchLabels"]), pdb["metadata"]["name"]


def test_statefulset_etcd_has_three_members_behind_a_headless_service():
    etcd = find(OBJECTS, "StatefulSet", "feddns-myfederation", "feddns-etcd")
    assert etcd["spec"]["replicas"] == 3
    headless = find(OBJECTS, "Service", "feddns-myfederation", etcd["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    (args,) = [c.spec["args"] for c in containers([etcd])]
    (initial,) = flag(args, "initial-cluster")
    members = [f"feddns-etcd-{i}=http://feddns-etcd-{i}.feddns-etcd:2380" for i in range(3)]
    assert initial.split(",") == members


def test_referenced_configmap_and_secret_keys_exist():
    for container in containers(OBJECTS):
        pod = container.workload["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        claims = {t["metadata"]["name"] for t in container.workload["spec"].get("volumeClaimTemplates", [])}
        for mount in container.spec.get("volumeMounts", []):
            if mount["name"] in claims:
                continue
            assert mount["name"] in volumes, f"{container.where}: no volume {mount['name']!r}"
            volume = volumes[mount["name"]]
            for kind, source, name_key in (("ConfigMap", "configMap", "name"), ("Secret", "secret", "secretName")):
                # optional: the pod starts without it (the controller's stub-zone client Secret,
                # made by the operator, is needed only once a cluster has a stub zone).
                if source in volume and not volume[source].get("optional"):
                    target = find(OBJECTS, kind, namespace(container.workload), volume[source][name_key])
                    keys = set(target.get("data", {})) | set(target.get("stringData", {}))
                    wanted = {item["key"] for item in volume[source].get("items", [])}
                    assert wanted <= keys, f"{container.where}: {kind} lacks {wanted - keys}"
                    if "subPath" in mount:
                        assert mount["subPath"] in {i["path"] for i in volume[source]["items"]}


@pytest.mark.parametrize("container", FEDDNS_CONTAINERS, ids=lambda c: c.where)
def test_files_named_in_arguments_are_mounted(container: Container):
    for name in ("config", "cert", "key", "client-ca", "policies"):
        for path in flag(container.spec["args"], name):
            container.mount_for(path)


def _controller_config(tmp_path: Path) -> dict:
    """The ConfigMap's controller config, its kubeconfig paths moved to copies of the Secret's."""
    config_map = find(OBJECTS, "ConfigMap", "feddns-myfederation", "feddns-controller")
    raw = yaml.safe_load(config_map["data"]["controller.yaml"])
    secret = find(OBJECTS, "Secret", "feddns-myfederation", "feddns-clusters")["stringData"]
    for cluster in raw["clusters"]:
        key = Path(cluster["kubeconfig"]).name
        (tmp_path / key).write_text(secret[key])
        cluster["kubeconfig"] = str(tmp_path / key)
    return raw


def test_controller_config_is_valid_and_uses_the_same_etcd_as_serve(tmp_path):
    config = parse_config(_controller_config(tmp_path))
    (serve,) = [c for c in FEDDNS_CONTAINERS if c.spec["args"][0] == "serve"]
    assert list(config.etcd_endpoints) == flag(serve.spec["args"], "etcd")
    assert config.federation == "myfederation"


def _stubzone(backend: str) -> Container:
    (container,) = [c for c in FEDDNS_CONTAINERS if c.spec["args"][0] == "stubzone"
                    and f"--backend={backend}" in c.spec["args"]]
    return container


def _patched_coredns() -> tuple[dict, str]:
    """The stock CoreDNS Deployment with deploy's patch applied, and the stock Corefile with the import line."""
    stock = load(STOCK / "coredns.yaml")
    (patch_path,) = patch_files()
    deployment = strategic_merge(find(stock, "Deployment", "kube-system", "coredns"), load(patch_path)[0])
    line = (DEPLOY / "cluster-dns" / "coredns" / "corefile-import.txt").read_text()
    return deployment, line + find(stock, "ConfigMap", "kube-system", "coredns")["data"]["Corefile"]


def test_coredns_patch_applies_to_the_stock_deployment_and_validates():
    deployment, _ = _patched_coredns()
    kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/etc/coredns", "/etc/coredns/feddns"]
    assert container["image"].startswith("registry.k8s.io/coredns/coredns:")  # the rest is as it was


def test_corefile_imports_the_configmap_the_endpoint_writes():
    deployment, corefile = _patched_coredns()
    parsed = parse_corefile(corefile)
    (pattern,) = parsed.imports
    assert pattern.endswith("/*.server") and parsed.blocks[0].directive("reload")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == posixpath.dirname(pattern)]
    (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["optional"] is True and "items" not in volume["configMap"]
    (written,) = flag(_stubzone("coredns").spec["args"], "configmap")
    assert written == f"kube-system/{volume['configMap']['name']}"
    assert find(OBJECTS, "ConfigMap", "kube-system", volume["configMap"]["name"])


@pytest.mark.parametrize("backend", ["coredns", "kube-dns"])
def test_stubzone_may_get_and_update_only_the_configmap_it_writes(backend):
    objects = load(DEPLOY / "cluster-dns" / backend / "stubzone.yaml")
    (container,) = [c for c in containers(objects) if c.spec["args"][0] == "stubzone"]
    (written,) = flag(container.spec["args"], "configmap")
    account = container.workload["spec"]["template"]["spec"]["serviceAccountName"]
    bindings = [o for o in objects if o["kind"] == "RoleBinding"
                and {"kind": "ServiceAccount", "name": account, "namespace": "kube-system"} in o["subjects"]]
    rules = sorted((find(objects, "Role", "kube-system", b["roleRef"]["name"])["rules"] for b in bindings),
                   key=lambda rule: rule[0]["resources"])
    assert rules == [[{"apiGroups": [""], "resources": ["configmaps"],
                       "resourceNames": [written.split("/")[1]], "verbs": ["get", "update"]}],
                     # the path check's --probe-service: list of Services, in kube-system only
                     [{"apiGroups": [""], "resources": ["services"], "verbs": ["list"]}]], rules
    assert flag(container.spec["args"], "probe-service") == ["kube-system/k8s-app=kube-dns"]
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]


def test_coredns_tags_with_a_cluster_of_the_federation(tmp_path):
    (cluster,) = flag(_stubzone("coredns").spec["args"], "cluster")
    assert cluster in [c["name"] for c in _controller_config(tmp_path)["clusters"]]


def test_skydns_etcd_is_one_member_with_a_volume_serving_v2():
    path = DEPLOY / "cluster-dns" / "skydns" / "k8s-dns.yaml"
    objects = load(path)
    etcd = find(objects, "StatefulSet", "kube-system", "skydns-etcd")
    assert etcd["spec"]["replicas"] == 1
    (container,) = containers([etcd])
    assert "--enable-v2=true" in container.spec["args"]
    (data_dir,) = flag(container.spec["args"], "data-dir")
    claims = [template["metadata"]["name"] for template in etcd["spec"]["volumeClaimTemplates"]]
    assert container.mount_for(data_dir)["name"] in claims
    for workload in ("skydns", "kube2sky", "feddns-stubzone"):
        assert _service_before_workload(path, "skydns-etcd", workload), workload


def test_skydns_reads_what_the_endpoint_writes():
    path = DEPLOY / "cluster-dns" / "skydns" / "k8s-dns.yaml"
    objects = load(path)
    (skydns,) = containers([find(objects, "Deployment", "kube-system", "skydns")])
    options = {arg.lstrip("-").partition("=")[0]: arg.partition("=")[2] for arg in skydns.spec["args"]}
    assert "stubzones" in options and "etcd3" not in options  # released SkyDNS: etcd v2
    stubzone = _stubzone("skydns").spec["args"]
    assert flag(stubzone, "skydns-etcd-api") in ([], ["v2"])
    assert flag(stubzone, "etcd-prefix") == ["/" + options["path-prefix"]]
    assert flag(stubzone, "cluster-domain") == [options["domain"]]
    (kube2sky,) = containers([find(objects, "Deployment", "kube-system", "kube2sky")])
    assert options["machines"] == flag(stubzone, "etcd")[0] == flag(kube2sky.spec["args"], "etcd-server")[0]
    assert find(objects, "Deployment", "kube-system", "skydns")["spec"]["template"]["metadata"]["labels"][
        "k8s-app"] == "kube-dns"  # the cluster's kube-dns Service sends it the queries


# -- deploy/links/: the service-links webhook ------------------------------------------------

def _links() -> tuple[Container, dict]:
    (container,) = [c for c in FEDDNS_CONTAINERS if c.spec["args"][0] == "links"]
    (hook,) = find(OBJECTS, "MutatingWebhookConfiguration", "default", "links.feddns.io")["webhooks"]
    return container, hook


def test_links_webhook_never_blocks_pods_and_gating_fits_its_timeout():
    container, hook = _links()
    assert hook["failurePolicy"] == "Ignore"
    assert hook["timeoutSeconds"] == 5
    assert hook["sideEffects"] == "None" and "v1" in hook["admissionReviewVersions"]
    assert hook["namespaceSelector"] == {"matchLabels": {"links.feddns.io/enabled": "true"}}
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    (gating,) = flag(container.spec["args"], "gating-timeout")
    assert float(gating) <= 2 < hook["timeoutSeconds"]


def test_links_webhook_calls_the_service_in_front_of_the_webhook_pods():
    container, hook = _links()
    target = hook["clientConfig"]["service"]
    assert target["path"] == "/mutate"
    service = find(OBJECTS, "Service", target["namespace"], target["name"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == target["port"]]
    (listen,) = flag(container.spec["args"], "listen")
    assert container.port(port["targetPort"])["containerPort"] == int(listen.rsplit(":", 1)[1])
    assert namespace(container.workload) == target["namespace"]
    assert target["namespace"] not in _opted_in_namespaces(hook), "the webhook must not gate its own pods"


def _opted_in_namespaces(hook: dict) -> set[str]:
    wanted = hook["namespaceSelector"]["matchLabels"].items()
    return {o["metadata"]["name"] for o in OBJECTS
            if o["kind"] == "Namespace" and wanted <= (o["metadata"].get("labels") or {}).items()}


def test_links_service_account_may_list_and_watch_services():
    container, _ = _links()
    account = container.workload["spec"]["template"]["spec"]["serviceAccountName"]
    ns = namespace(container.workload)
    find(OBJECTS, "ServiceAccount", ns, account)
    bindings = [o for o in OBJECTS if o["kind"] == "ClusterRoleBinding"
                and {"kind": "ServiceAccount", "name": account, "namespace": ns} in o["subjects"]]
    rules = [rule for b in bindings for rule in find(OBJECTS, "ClusterRole", "default", b["roleRef"]["name"])["rules"]]
    assert any("" in r["apiGroups"] and "services" in r["resources"] and {"get", "list", "watch"} <= set(r["verbs"])
               for r in rules)


def test_links_policy_configmap_is_a_valid_policy_file_mounted_whole():
    container, _ = _links()
    (path,) = flag(container.spec["args"], "policies")
    mount = container.mount_for(path)
    assert "subPath" not in mount, "a subPath mount never sees ConfigMap updates"
    configmap = find(OBJECTS, "ConfigMap", namespace(container.workload), "feddns-links-policies")
    policies = parse_policies(yaml.safe_load(configmap["data"][Path(path).name]))
    assert len(policies) >= 1


def test_the_image_holds_every_package_the_project_installs():
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = {line.split()[1] for line in (REPO / "Dockerfile").read_text().splitlines() if line.startswith("COPY ")}
    assert {pattern.rstrip("*") for pattern in include} <= copied
