"""``--mirror-dir``: the endpoint's blocks followed through the API into a directory (stubzone/mirror.py).

Against the real kube-apiserver (``kube_foo``), as a ServiceAccount whose Role names the one ConfigMap
(get, update, list, watch: the member chart's rules in forwarder mode): a POST's block appears as a
file, a DELETE takes it out, a block that does not parse is not written (the file it had stays), keys
the backend does not own are not copied, and stray ``*.server`` files go. The fake API server of
tests/support is used only for what the real one cannot show on demand: a watch that ends in
``410 Gone`` with events never sent, and failures in a row (logged once, not at each retry).
"""

import contextlib
import logging
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from feddns.reflector import WatchTiming
from harness.kubecluster import KubeCluster
from harness.ports import free_port
from harness.scrape import unlabelled_sample
from harness.stubzone import Pki, StubzoneProcess
from stubzone.backends.configmap import ConfigMapStore, client_configuration
from stubzone.backends.coredns import CoreDNSBackend
from stubzone.backends.corefile import parse, render
from stubzone.metrics import StubzoneMetrics
from stubzone.mirror import MirrorSettings, ZoneMirror
from stubzone.model import Nameserver, StubDomains
from tests.support.fakekube import FakeKube
from tests.support.membercluster import TestObjects

NAME = "feddns-forwarder-zones"
WAIT = 30.0
"""Seconds a condition may take before the test fails: a bound for a stuck mirror, never a measure."""
BAD_BLOCK = "b.svc.federation.:1053 {\n    forward . 192.0.2.1\n"  # never closed: parse() refuses it


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT:g} s: {what}")
        time.sleep(0.05)


def files(directory: Path) -> dict[str, str]:
    """The directory's files and their text, as one look sees them (a file the endpoint removes between
    the listing and the read is gone)."""
    found = {}
    for path in directory.iterdir():
        with contextlib.suppress(FileNotFoundError):
            found[path.name] = path.read_text()
    return found


@pytest.fixture
def namespace(kube_foo: KubeCluster) -> Iterator[str]:
    """A namespace of the test's own with the empty ConfigMap (the chart makes it) and a ServiceAccount
    feddns-stubzone with the chart's rights on it, and no other; deleted after the test with all it holds."""
    ns = f"feddns-mirror-{uuid.uuid4().hex[:8]}"
    objects = TestObjects(kube_foo)
    objects.own("ServiceAccount", ns, "feddns-stubzone")  # made by MirroringEndpoint's token request
    objects.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": ns}})
    objects.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "feddns-stubzone", "namespace": ns},
                   "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [NAME],
                              "verbs": ["get", "update", "list", "watch"]}]})
    objects.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "feddns-stubzone", "namespace": ns},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "feddns-stubzone"},
                   "subjects": [{"kind": "ServiceAccount", "name": "feddns-stubzone", "namespace": ns}]})
    yield ns
    objects.close()


class MirroringEndpoint(StubzoneProcess):
    """``feddns stubzone --backend coredns --mirror-dir DIR`` as the ServiceAccount of :func:`namespace`."""

    def __init__(self, pki: Pki, kube: KubeCluster, ns: str, directory: Path) -> None:
        token = kube.service_account_token(ns, "feddns-stubzone")
        kubeconfig = kube.write_kubeconfig(directory.parent / "kubeconfig", token=token)
        self.metrics_port = free_port()
        super().__init__(pki, "--backend", "coredns", "--cluster", "foo", "--configmap", f"{ns}/{NAME}",
                         "--coredns-port", "1053", "--kubeconfig", kubeconfig, "--mirror-dir", str(directory),
                         "--metrics", f"127.0.0.1:{self.metrics_port}")

    def changes(self, change: str) -> float:
        name = "feddns_stubzone_mirror_changes_total"
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            text = response.read().decode()
        return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
                   if sample.name == name and sample.labels == {"change": change})


def test_the_directory_follows_the_endpoints_blocks_through_the_api(
        pki: Pki, kube_foo: KubeCluster, namespace: str, tmp_path: Path) -> None:
    directory = tmp_path / "feddns"
    directory.mkdir()
    (directory / "stale.server").write_text("# a block no ConfigMap holds any more\n")
    (directory / "notes.txt").write_text("not the mirror's\n")
    path = f"/api/v1/namespaces/{namespace}/configmaps/{NAME}"
    with MirroringEndpoint(pki, kube_foo, namespace, directory) as endpoint:
        wait_for(lambda: "stale.server" not in files(directory), "the stray block removed by the first list")
        assert unlabelled_sample(endpoint.metrics_port, "feddns_stubzone_mirror_synced_timestamp_seconds") > 0
        assert files(directory) == {"notes.txt": "not the mirror's\n"}  # not a *.server file: left alone

        answer = endpoint.request("POST", "/federations/a", {"nameservers": ["192.0.2.53"]})
        assert answer.status == 200, answer
        stored = kube_foo.request("GET", path)["data"]
        wait_for(lambda: "a.server" in files(directory), "a's block written")
        assert files(directory)["a.server"] == stored["a.server"]
        assert parse(files(directory)["a.server"]).blocks[0].keys == ("a.svc.federation.:1053",)

        # A block that does not parse is not written (over b's good one), nor a key the backend does not own.
        assert endpoint.request("POST", "/federations/b", {"nameservers": ["192.0.2.54"]}).status == 200
        wait_for(lambda: "b.server" in files(directory), "b's block written")
        good = files(directory)["b.server"]
        kube_foo.request("PATCH", path, {"data": {"b.server": BAD_BLOCK, "Not_A_Label.server": good,
                                                  "notes.override": "# someone else's\n"}},
                         "application/merge-patch+json")
        assert endpoint.request("POST", "/federations/c", {"nameservers": ["192.0.2.55"]}).status == 200
        wait_for(lambda: "c.server" in files(directory), "c's block, written after the bad one's event")
        assert files(directory)["b.server"] == good
        assert set(files(directory)) == {"a.server", "b.server", "c.server", "notes.txt"}
        assert endpoint.changes("refused") == 1
        endpoint.wait_for_log(r"key b\.server is not written \(CoreDNS would refuse the Corefile\)")

        assert endpoint.request("DELETE", "/federations/a").status == 200
        wait_for(lambda: "a.server" not in files(directory), "a's block removed after its DELETE")
        kube_foo.delete("ConfigMap", namespace, NAME)
        wait_for(lambda: set(files(directory)) == {"notes.txt"}, "every block removed with the ConfigMap")
        assert endpoint.changes("written") == 3 and endpoint.changes("removed") == 4  # stale, a, b, c
    assert not [name for name in files(directory) if name.endswith(".tmp")]


def test_the_endpoint_is_ready_only_once_the_first_list_is_written(
        pki: Pki, kube_foo: KubeCluster, namespace: str, tmp_path: Path) -> None:
    """Without list and watch of the ConfigMap the endpoint serves, but never reports ready, and says why once."""
    kube_foo.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": "feddns-stubzone", "namespace": namespace},
                    "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [NAME],
                               "verbs": ["get", "update"]}]})
    directory = tmp_path / "feddns"
    directory.mkdir()
    with MirroringEndpoint(pki, kube_foo, namespace, directory) as endpoint:
        line = endpoint.wait_for_log(r"mirror of ConfigMap .* HTTP 403 Forbidden; the files stay as they are")
        assert endpoint.request("GET", "/federations").status == 200
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"http://127.0.0.1:{endpoint.metrics_port}/ready", timeout=5)
        assert refused.value.code == 503
        refused.value.close()
        start = endpoint.lines.index(line) + 1
        kube_foo.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                        "metadata": {"name": "feddns-stubzone", "namespace": namespace},
                        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [NAME],
                                   "verbs": ["get", "update", "list", "watch"]}]})
        endpoint.wait_for_log(r"is in step again", start=start)
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.metrics_port}/ready", timeout=5) as response:
            assert response.status == 200
        assert not [text for text in endpoint.lines[start:] if "HTTP 403" in text]  # once, not at each retry


# -- what only the fake API server can show -----------------------------------------------------------

def mirror_of(fake: FakeKube, directory: Path) -> ZoneMirror:
    configuration = client_configuration(Path(fake.write_kubeconfig(str(directory.parent / "kubeconfig"))), None)
    store = ConfigMapStore("kube-system", NAME, configuration, 2.0)
    backend = CoreDNSBackend(store, StubDomains("federation.", "cluster.local."), "foo", 1053)
    timing = WatchTiming(backoff_initial=0.01, backoff_max=0.05)
    return ZoneMirror(MirrorSettings(directory, "kube-system", NAME, configuration, backend, timing),
                      StubzoneMetrics(CollectorRegistry()))


def block(federation: str) -> str:
    return render(federation, f"{federation}.svc.federation.", "foo", (Nameserver.parse("192.0.2.53"),), 1053)


def configmap(data: dict[str, str]) -> dict:
    return {"kind": "ConfigMap", "metadata": {"namespace": "kube-system", "name": NAME}, "data": data}


@contextlib.contextmanager
def mirroring_a(fake: FakeKube, tmp_path: Path) -> Iterator[Path]:
    """The directory of a mirror of the fake's ConfigMap holding federation a's block, once its first list is written;
    stopped on leaving."""
    directory = tmp_path / "feddns"
    directory.mkdir()
    fake.apply(configmap({"a.server": block("a")}))
    mirror = mirror_of(fake, directory)
    mirror.start()
    try:
        wait_for(lambda: mirror.synced and set(files(directory)) == {"a.server"}, "the first list written")
        yield directory
    finally:
        mirror.stop()


def test_after_410_gone_the_directory_is_what_a_new_list_says(fake: FakeKube, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """Changes made while the watch was held back, then dropped by a 410: only a new list shows them."""
    with mirroring_a(fake, tmp_path) as directory:
        wait_for(lambda: fake.watch_count("configmaps") == 1, "the watch open")
        fake.hold()
        fake.apply(configmap({"b.server": block("b")}))
        caplog.set_level(logging.INFO, "stubzone.mirror")
        fake.expire_watches()
        fake.release()
        wait_for(lambda: set(files(directory)) == {"b.server"}, "the relist's blocks, and only those")
        assert files(directory)["b.server"] == block("b")
        assert "watch of ConfigMap kube-system/feddns-forwarder-zones expired (410 Gone)" in caplog.text


def test_failures_in_a_row_are_logged_once_and_the_files_stay(fake: FakeKube, tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    with mirroring_a(fake, tmp_path) as directory:
        caplog.set_level(logging.INFO, "stubzone.mirror")
        fake.fail_next(500, times=5)
        fake.end_watches()
        wait_for(lambda: "is in step again" in caplog.text, "the mirror back after five failed lists")
        assert caplog.text.count("the files stay as they are, retrying with backoff") == 1
        assert set(files(directory)) == {"a.server"}
