"""deploy/monitoring/: the alerts fire when they should and only then (``promtool test
rules``), every query parses, and every metric they, the dashboard and
docs/operations.md name is one a running feddns really exports."""

import json
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from harness.controller import ControllerProcess
from harness.etcd import EtcdServer
from harness.kubecluster import KubeCluster
from harness.ports import free_port, wait_until
from harness.serve import ServeProcess
from harness.stubzone import Pki, StubzoneProcess, make_pki, skydns_args
from tests.controller.harness import config_raw, write_config
from tests.deploy.manifests import DEPLOY, REPO, all_objects, containers

MONITORING = DEPLOY / "monitoring"
RULES = MONITORING / "feddns-rules.yaml"
DASHBOARD = MONITORING / "feddns-dashboard.json"
PODMONITORS = MONITORING / "podmonitors.yaml"
ALERT_TESTS = Path(__file__).parent / "monitoring" / "alerts_test.yaml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
METRIC = re.compile(r"\b(?:feddns|etcd)_[a-z0-9_]*[a-z0-9]\b")
"""A metric name of ours or etcd's (``feddns_controller_*`` prefixes end in ``_`` and are left out)."""


def rule_document() -> dict[str, Any]:
    (document,) = yaml.safe_load_all(RULES.read_text())
    return dict(document)


def rules() -> list[dict[str, Any]]:
    return [rule for group in rule_document()["spec"]["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_the_prometheus_rule_is_well_formed() -> None:
    document = rule_document()
    assert (document["apiVersion"], document["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    names = [rule["alert"] for rule in rules()]
    assert len(names) == len(set(names)) and names
    for rule in rules():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in ("critical", "warning"), rule
        assert set(rule["annotations"]) == {"summary", "description"}, rule


def test_promtool_checks_the_rules_and_each_alert_fires_and_stays_silent(tmp_path: Path) -> None:
    """Every alert has a case where it fires and one where it does not; promtool runs them."""
    (tmp_path / "feddns-rules.yaml").write_text(yaml.safe_dump(rule_document()["spec"]))
    shutil.copy(ALERT_TESTS, tmp_path / "alerts_test.yaml")
    check = promtool("check", "rules", "feddns-rules.yaml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    result = promtool("test", "rules", "alerts_test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
    fired: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(ALERT_TESTS.read_text())["tests"]:
        for check_case in case.get("alert_rule_test", []):
            (fired if check_case["exp_alerts"] else silent).add(check_case["alertname"])
    names = {rule["alert"] for rule in rules()}
    assert fired == names, f"alerts never shown to fire: {names - fired}"
    assert silent == names, f"alerts never shown to stay silent: {names - silent}"


def test_the_locality_panel_is_what_promtool_evaluates() -> None:
    """The panel of shares leaving the asker's zone and region runs the queries that
    alerts_test.yaml evaluates (promql_expr_test) with promtool."""
    dashboard = json.loads(DASHBOARD.read_text())
    (panel,) = [p for p in dashboard["panels"] if p["title"].startswith("Share of answers leaving the asker's zone")]
    tested = [test["expr"] for case in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
              for test in case.get("promql_expr_test", [])]
    assert [target["expr"] for target in panel["targets"]] == tested


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    """promtool parses each query as the expression of a recording rule."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["templating"]["list"][0]["type"] == "datasource"
    exprs = dashboard_exprs()
    assert exprs
    recorded = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"feddns:dashboard_query_{i}", "expr": expr} for i, expr in enumerate(exprs)]}]}
    (tmp_path / "dashboard-rules.yaml").write_text(yaml.safe_dump(recorded))
    check = promtool("check", "rules", "dashboard-rules.yaml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    panel_ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(panel_ids) == len(set(panel_ids))


def test_the_pod_monitors_scrape_ports_the_manifests_declare() -> None:
    declared = {port["name"] for container in containers([obj for _, obj in all_objects()])
                for port in container.spec.get("ports", [])}
    monitors = [doc for doc in yaml.safe_load_all(PODMONITORS.read_text()) if doc]
    assert {doc["kind"] for doc in monitors} == {"PodMonitor"}
    for monitor in monitors:
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            assert endpoint["port"] in declared, endpoint


# -- the metric names, against running processes --------------------------------------


def exported(url: str) -> set[str]:
    """The sample names ``url`` exports (a counter family ``x`` exports ``x_total``)."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {sample.name for sample in family.samples}
        names |= {family.name + suffix for suffix in {"counter": ("_total",), "gauge": ("",),
                                                       "histogram": ("_bucket", "_sum", "_count")}.get(family.type, ())}
    return names


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def running(etcd: EtcdServer, kube_foo: KubeCluster, pki: Pki,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    """Every metric name that a running serve, controller (with an external publisher, watching the real
    kube-apiserver foo), stub-zone endpoint and etcd export."""
    directory = tmp_path_factory.mktemp("monitoring")
    serve = ServeProcess(etcd_url=etcd.url, prefix="/monitoring", extra_args=["--metrics", "127.0.0.1:0"])
    stub_metrics = free_port()
    stubzone = StubzoneProcess(pki, *skydns_args(etcd.url, "/monitoring-skydns"), "--metrics",
                               f"127.0.0.1:{stub_metrics}")
    external = {"provider": "rfc2136", "server": f"127.0.0.1:{free_port()}", "zone": "example.com."}
    raw = config_raw(etcd.url, "/monitoring", [{"name": "foo", "kubeconfig": kube_foo.kubeconfig}], external=external)
    controller = ControllerProcess(write_config(directory / "controller.yaml", raw), directory / "controller.log")
    try:
        serve.start()
        stubzone.start()
        controller.start()
        wait_until(lambda: controller.metric("feddns_controller_leader") == 1, timeout=30, what="a leader")
        assert serve.metrics_url is not None
        names = (exported(serve.metrics_url + "/metrics") | exported(f"http://127.0.0.1:{controller.port}/metrics")
                 | exported(f"http://127.0.0.1:{stub_metrics}/metrics") | exported(etcd.url + "/metrics"))
        yield names
    finally:
        controller.terminate()
        stubzone.stop()
        serve.stop()


@pytest.mark.parametrize("source", ["rules", "dashboard", "docs/operations.md"])
def test_every_metric_named_is_exported(running: set[str], source: str) -> None:
    if source == "rules":
        text = "\n".join(rule["expr"] for rule in rules())
    elif source == "dashboard":
        text = "\n".join(dashboard_exprs())
    else:
        text = (REPO / source).read_text()
    named = set(METRIC.findall(text))
    assert named, source
    missing = named - running
    assert not missing, f"{source} names metrics nothing exports: {sorted(missing)}"
