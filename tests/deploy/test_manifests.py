"""The manifests in deploy/: valid Kubernetes objects whose parts agree with each other
and with the ``feddns`` command line (issue 6)."""

import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from controller.config import parse_config
from feddns.cli import build_parser
from links.policy import parse_policies
from tests.deploy.manifests import (
    REPO,
    Container,
    all_objects,
    containers,
    corefile_lines,
    dockerfile_instruction,
    find,
    flag,
    load,
    manifest_files,
    namespace,
)

KUBERNETES_VERSION = "1.30.0"
OBJECTS = [obj for _, obj in all_objects()]
FEDDNS_CONTAINERS = [c for c in containers(OBJECTS) if c.is_feddns]


def test_there_is_a_manifest_for_each_part():
    kinds = {(obj["kind"], obj["metadata"]["name"]) for obj in OBJECTS}
    assert {("Deployment", "feddns"), ("StatefulSet", "feddns-etcd"), ("Service", "feddns"),
            ("Deployment", "kube-dns"), ("ConfigMap", "coredns"), ("Deployment", "feddns-links"),
            ("MutatingWebhookConfiguration", "links.feddns.io")} <= kinds
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


def test_the_image_runs_feddns_and_its_default_command_parses():
    assert dockerfile_instruction("ENTRYPOINT") == ["feddns"]
    args = dockerfile_instruction("CMD")
    build_parser(args).parse_args(args)
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
                if source in volume:
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
    raw = yaml.safe_load(find(OBJECTS, "ConfigMap", "feddns-myfederation", "feddns-controller")["data"]["controller.yaml"])
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


def test_each_member_cluster_has_a_coredns_block_tagging_its_name(tmp_path):
    clusters = [c["name"] for c in _controller_config(tmp_path)["clusters"]]
    tagged = {}
    for path, obj in all_objects():
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "coredns":
            lines = corefile_lines(obj["data"]["Corefile"])
            assert ["myfederation.svc.federation.:53", "{"] in lines, path
            (rewrite,) = [w for w in lines if w[:4] == ["rewrite", "edns0", "local", "set"]]
            assert int(rewrite[4], 16) == 65245
            assert any(w[:2] == ["forward", "."] for w in lines)
            tagged[rewrite[5]] = path
    assert sorted(tagged) == sorted(clusters)


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
