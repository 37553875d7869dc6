"""`feddns status` against a real etcd: a healthy federation exits 0; a stale cluster, a service
with no healthy shard, shards that disagree on policy and a key that is no record each make it
degraded (exit 1) and are named; text fits 100 columns; etcd that does not answer is said in
one line within --timeout (exit 3); bad flags exit 2."""

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from harness.etcd import EtcdServer

HEALTHY = {
    "fed/_clusters/foo": {"zone": "us-central1-a", "region": "us-central1"},
    "fed/_clusters/bar": {"zone": "us-central1-b", "region": "us-central1"},
    "fed/prod/web/foo": {"clusterIP": "10.0.0.1", "externalIP": "1.1.1.1", "ready": 2},
    "fed/prod/web/bar": {"clusterIP": "10.0.0.2", "externalIP": "1.1.1.2"},
    "fed/prod/api/foo": {"clusterIP": "10.0.1.1", "externalIP": "1.1.2.1", "policy": "failover",
                         "failoverOrder": ["foo", "bar"]},
    "fed/prod/api/bar": {"clusterIP": "10.0.1.2", "externalIP": "1.1.2.2", "policy": "failover",
                         "failoverOrder": ["foo", "bar"]},
}


def feddns(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "feddns.cli", *args], capture_output=True, text=True, timeout=60,
                          check=False)


def status(etcd: EtcdServer, prefix: str, *args: str) -> subprocess.CompletedProcess[str]:
    return feddns("status", "--etcd", etcd.url, "--etcd-prefix", prefix, *args)


def put(etcd: EtcdServer, prefix: str, records: dict[str, object]) -> None:
    for key, value in records.items():
        etcd.put(f"{prefix}/{key}", value if isinstance(value, str) else json.dumps(value))


def test_a_healthy_federation_exits_0(etcd: EtcdServer, etcd_prefix: str):
    put(etcd, etcd_prefix, HEALTHY)
    result = status(etcd, etcd_prefix)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "federation fed: 2 clusters, 2 services, 4 shards" in lines
    assert any(line.split()[:3] == ["foo", "us-central1-a", "us-central1"] and line.split()[-2:] == ["no", "2"]
               for line in lines), result.stdout
    assert lines[-1] == "healthy"
    assert max(len(line) for line in lines) <= 100
    assert f"revision {etcd.revision()}" in lines[0]


def test_each_problem_is_named_and_exits_1(etcd: EtcdServer, etcd_prefix: str):
    put(etcd, etcd_prefix, HEALTHY | {
        "fed/_clusters/baz": {"zone": "europe-west1-b", "region": "europe-west1", "stale": True,
                              "staleAction": "drop"},
        "fed/prod/down/foo": {"clusterIP": "10.0.2.1", "ready": 0},
        "fed/prod/gone/baz": {"clusterIP": "10.0.3.3", "externalIP": "1.1.3.3"},  # only in the dropped stale baz
        "fed/prod/mixed/foo": {"clusterIP": "10.0.4.1", "policy": "failover", "failoverOrder": ["foo"]},
        "fed/prod/mixed/bar": {"clusterIP": "10.0.4.2"},
        "fed/prod/broken/foo": "{not json",
    })
    result = status(etcd, etcd_prefix)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines()[-5:] == [
        "degraded:", "  1 stale cluster", "  2 services with no healthy shard",
        "  1 service whose shards disagree on policy", "  1 key that is no record"]
    assert max(len(line) for line in result.stdout.splitlines()) <= 100
    found = json.loads(status(etcd, etcd_prefix, "--output", "json").stdout)
    fed = found["federations"]["fed"]
    assert fed["no_healthy_shard"] == ["prod/down", "prod/gone"]
    assert fed["policy_disagrees"] == ["prod/mixed"]
    assert fed["clusters"]["baz"]["stale"] is True and fed["clusters"]["baz"]["stale_action"] == "drop"
    assert fed["clusters"]["foo"]["shards"] == 4  # web, api, down, mixed; not the broken record
    assert list(found["invalid"]) == [f"{etcd_prefix}/fed/prod/broken/foo"]


def test_demoted_stale_shards_still_answer(etcd: EtcdServer, etcd_prefix: str):
    put(etcd, etcd_prefix, {"fed/_clusters/baz": {"zone": "z", "region": "r", "stale": True},
                            "fed/prod/far/baz": {"clusterIP": "10.0.3.3", "externalIP": "1.1.3.3"}})
    found = json.loads(status(etcd, etcd_prefix, "--output", "json").stdout)
    assert found["federations"]["fed"]["no_healthy_shard"] == []
    assert found["problems"] == ["1 stale cluster"]


@pytest.fixture
def black_hole() -> Iterator[str]:
    """An address that accepts TCP connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_unreachable_etcd_is_said_within_the_timeout(black_hole: str):
    for url in (black_hole, "http://127.0.0.1:1"):
        started = time.monotonic()
        result = feddns("status", "--etcd", url, "--timeout", "2")
        took = time.monotonic() - started
        assert result.returncode == 3, result.stderr
        assert result.stderr.startswith(f"feddns status: error: etcd unreachable: {url}")
        assert len(result.stderr.splitlines()) == 1 and result.stdout == ""
        assert took < 2 + 5, took  # the timeout, and the start of a Python process on a busy machine


@pytest.mark.parametrize(("args", "says"), [
    ([], "--etcd URL is needed"),
    (["--etcd", "http://127.0.0.1:2379", "--timeout", "-1"], "--timeout -1 is not a number of seconds"),
    (["--etcd", "ftp://127.0.0.1:2379"], "ftp"),
])
def test_bad_flags_exit_2_with_one_line(args: list[str], says: str):
    result = feddns("status", *args)
    assert result.returncode == 2 and says in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
