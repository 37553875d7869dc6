"""`feddns explain` against a real etcd and a real `feddns serve` reading the same keys: its
records, in its order, are serve's answer, for every policy, stale clusters (demoted and
dropped) and shards not ready; and its bad input, each one line with its exit status."""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from feddns import cli
from feddns.keys import Layout
from feddns.store.recordsfile import read_records
from harness.etcd import EtcdServer
from harness.ports import wait_until
from harness.serve import ServeProcess, write_records
from tests.dns import policy_records, test_stale

RECORDS = (policy_records.CLUSTERS + policy_records.LOC + policy_records.FAILOVER + policy_records.WEIGHTED
           + policy_records.LOCALITY_WEIGHTED + policy_records.FALLBACK + policy_records.HEADLESS
           + test_stale.RECORDS)
PAIRS = read_records(Path(write_records(RECORDS)), Layout())
SERVICES = sorted({tuple(key.split("/")[1:4]) for key, _ in PAIRS
                   if "/_clusters/" not in key})
CLUSTERS = {fed: sorted({key.split("/")[-1] for key, _ in PAIRS if key.startswith(f"/{fed}/")})
            for fed in ("pol", "sf")}
WEIGHTED = ("weighted", "locality-weighted")


@pytest.fixture(scope="module")
def federation(etcd: EtcdServer) -> Iterator[tuple[str, ServeProcess]]:
    """The records in the session's etcd under a prefix of this module's, and serve reading them."""
    prefix = "/explain"
    etcd.delete(prefix + "/", prefix=True)
    etcd.put_many({prefix + key: value.decode() for key, value in PAIRS})
    with ServeProcess(etcd_url=etcd.url, prefix=prefix, extra_args=["--order", "stable"]) as server:
        wait_until(lambda: server.addresses("loc.prod.pol.svc.federation.", cluster="a"), what="first load")
        yield prefix, server
    etcd.delete(prefix + "/", prefix=True)


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = cli.main(["explain", *args])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(("fed", "ns", "svc"), SERVICES, ids=[f"{s}.{f}" for f, _, s in SERVICES])
def test_explain_gives_serves_answer_in_its_order(fed: str, ns: str, svc: str, etcd: EtcdServer,
                                                  federation: tuple[str, ServeProcess],
                                                  capsys: pytest.CaptureFixture[str]):
    prefix, server = federation
    name = f"{svc}.{ns}.{fed}.svc.federation."
    for asker in [*CLUSTERS[fed], None]:
        for qtype in ("A", "AAAA"):
            flags = [] if asker is None else ["--from", asker]
            status, out, err = explain(capsys, name, *flags, "--qtype", qtype, "--etcd", etcd.url,
                                       "--etcd-prefix", prefix, "--output", "json")
            assert (status, err) == (0, "")
            found = json.loads(out)
            explained = [record["address"] for record in found["records"]]
            served = server.addresses(name, qtype, cluster=asker)
            case = (name, qtype, asker, found["policy"])
            if found["policy"] in WEIGHTED:  # drawn per answer: the same records, the groups in the same order
                assert sorted(served) == sorted(explained), case
                group_of = {record["address"]: record["group"] for record in found["records"]}
                assert [group_of[a] for a in served] == [r["group"] for r in found["records"]], case
            else:
                assert served == explained, case
            shown = {record["cluster"] for record in found["records"] + found["left_out"]}
            assert shown == {key.split("/")[-1] for key, _ in PAIRS if key.startswith(f"/{fed}/{ns}/{svc}/")}


def test_explain_says_why_shards_are_left_out(etcd: EtcdServer, federation: tuple[str, ServeProcess],
                                              capsys: pytest.CaptureFixture[str]):
    prefix, _ = federation
    flags = ["--etcd", etcd.url, "--etcd-prefix", prefix, "--output", "json"]
    _, out, _ = explain(capsys, "loc-down.prod.pol.svc.federation.", "--from", "a", *flags)
    assert {r["cluster"]: r["why"] for r in json.loads(out)["left_out"]} == {"b": "left out: ready: 0"}
    _, out, _ = explain(capsys, "web.prod.sf.svc.federation.", "--from", "a", *flags)
    found = json.loads(out)
    assert {r["cluster"]: r["why"] for r in found["left_out"]} == {
        "c": "left out: stale cluster (staleAction: drop)"}
    stale = [r for r in found["records"] if r["cluster"] == "x"]
    assert stale == [{"group": 2, "cluster": "x", "address": "1.1.1.24", "kind": "externalIP", "tier": "other",
                      "why": "stale cluster: moved to the last tier"}]
    _, out, _ = explain(capsys, "fo.prod.pol.svc.federation.", "--from", "b", *flags)
    records = json.loads(out)["records"]
    assert [(r["cluster"], r["kind"], r["why"]) for r in records][:2] == [
        ("c", "externalIP", "failover rank 1 of failoverOrder ['c', 'a']"),
        ("a", "externalIP", "failover rank 2 of failoverOrder ['c', 'a']")]
    _, out, _ = explain(capsys, "mixed.prod.pol.svc.federation.", "--from", "a", *flags)
    found = json.loads(out)
    assert (found["policy"], found["policy_why"]) == (
        "locality", "the shards disagree on policy, so the default applies (reference section 2)")
    _, out, _ = explain(capsys, "fo.prod.pol.svc.federation.", "--from", "a", *flags)
    assert json.loads(out)["policy_why"] == ""
    _, out, _ = explain(capsys, "wt.prod.pol.svc.federation.", "--from", "a", *flags)
    found = json.loads(out)
    assert {r["cluster"]: r["why"] for r in found["left_out"]} == {"c": "left out: weight 0"}
    assert {r["cluster"]: r["why"] for r in found["records"]}["a"] == "weight 3: drawn by weight per answer"


NONE_READY = """
/f/_clusters/a: {zone: z1, region: r1}
/f/_clusters/b: {zone: z2, region: r2}
/f/ns/down/a: {clusterIP: 10.0.0.1, externalIP: 1.1.1.1, ready: 0}
/f/ns/down/b: {clusterIP: 10.0.0.2, externalIP: 1.1.1.2, ready: 0}
/f/ns/quiet/a: {clusterIP: 10.0.1.1, externalIP: 1.1.2.1, ready: 0, noneReady: nodata}
"""


@pytest.mark.parametrize("flag", ["answer", "nodata"])
def test_explain_says_when_no_shard_is_ready_as_serve_answers(flag: str, capsys: pytest.CaptureFixture[str]):
    """Every shard unready: serve fails open (or answers NODATA with --none-ready nodata, or a
    record's noneReady), and explain shows the same records and says which it is."""
    path = write_records(NONE_READY)
    with ServeProcess(records=path, extra_args=["--order", "stable", "--none-ready", flag]) as server:
        cases = (("down.ns.f.svc.federation.", flag == "answer"), ("quiet.ns.f.svc.federation.", False))
        for name, fails_open in cases:
            status, out, err = explain(capsys, name, "--from", "a", "--records", path, "--none-ready", flag,
                                       "--output", "json")
            assert (status, err) == (0, "")
            found = json.loads(out)
            assert [r["address"] for r in found["records"]] == server.addresses(name, cluster="a")
            if fails_open:
                assert [r["address"] for r in found["records"]] == ["10.0.0.1", "1.1.1.2"]
                assert "no shard is ready: every shard is answered as if it were (fail open" in found["policy_why"]
                assert all("answered as if ready" in r["why"] for r in found["records"])
            else:
                assert found["records"] == []
                assert "no shard is ready: NODATA" in found["policy_why"]
                assert {r["why"] for r in found["left_out"]} == {"left out: ready: 0"}


TTLS = """
/f/_clusters/a: {zone: z1, region: r1}
/f/_clusters/b: {zone: z2, region: r2}
/f/ns/brief/a: {clusterIP: 10.0.0.1, externalIP: 1.1.1.1, ttl: 7}
/f/ns/brief/b: {clusterIP: 10.0.0.2, externalIP: 1.1.1.2, ttl: 4}
/f/ns/plain/a: {clusterIP: 10.0.1.1, externalIP: 1.1.2.1}
"""


def test_explain_gives_the_ttl_the_records_set_as_serve_answers_it(capsys: pytest.CaptureFixture[str]):
    """The annotation federation.feddns.io/ttl (the records' ttl): serve answers with the least of
    the shards', and explain says it; without one, explain says nothing of it (serve's --ttl)."""
    path = write_records(TTLS)
    with ServeProcess(records=path, extra_args=["--ttl", "30"]) as server:
        reply = server.query("brief.ns.f.svc.federation.", cluster="a")
        assert {rrset.ttl for rrset in reply.answer} == {4}
        status, out, _ = explain(capsys, "brief.ns.f.svc.federation.", "--from", "a", "--records", path,
                                 "--output", "json")
        assert (status, json.loads(out)["ttl"]) == (0, 4)
        _, text, _ = explain(capsys, "brief.ns.f.svc.federation.", "--from", "a", "--records", path)
        assert "TTL 4 s: the least federation.feddns.io/ttl of the shards' records" in text.splitlines()[2]
        assert {rrset.ttl for rrset in server.query("plain.ns.f.svc.federation.", cluster="a").answer} == {30}
        _, out, _ = explain(capsys, "plain.ns.f.svc.federation.", "--from", "a", "--records", path,
                            "--output", "json")
        assert json.loads(out)["ttl"] is None


def feddns(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "feddns.cli", *args], capture_output=True, text=True, timeout=30,
                          check=False)


EXAMPLE = "myservice.myns.myfederation.svc.federation."


@pytest.mark.parametrize(("args", "status", "says"), [
    ([EXAMPLE, "--from", "foo", "--example"], 0, ""),
    (["nosuch.myns.myfederation.svc.federation.", "--from", "foo", "--example"], 1, "NXDOMAIN"),
    ([EXAMPLE.replace("federation.", "example.com."), "--from", "foo", "--example"], 2, "outside the zone"),
    ([EXAMPLE, "--from", "qux", "--example"], 2, "--from qux: no such cluster in federation myfederation"),
    (["myns.myfederation.svc.federation.", "--example"], 2, "is not a service's name"),
    ([EXAMPLE, "--from", "foo"], 2, "choose where the records come from"),
    ([EXAMPLE, "--example", "--timeout", "0"], 2, "--timeout 0 is not a number of seconds more than 0"),
    ([EXAMPLE, "--etcd", "http://127.0.0.1:1", "--timeout", "2"], 3, "etcd unreachable: http://127.0.0.1:1"),
], ids=["answered", "nxdomain", "outside", "unknown cluster", "not a service", "no source", "timeout", "no etcd"])
def test_explain_exit_status_and_one_line(args: list[str], status: int, says: str):
    result = feddns("explain", *args)
    assert result.returncode == status, result.stderr
    if status:
        assert says in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stdout == ""
    else:
        assert "1  1      foo      10.0.3.64      clusterIP   own" in result.stdout
        assert max(len(line) for line in result.stdout.splitlines()) <= 100


@pytest.mark.parametrize(("size", "flags", "cap"), [
    (17 * 1024 * 1024, [], 16 * 1024 * 1024),
    (5000, ["--max-records-size", "4KiB"], 4096),
], ids=["default cap", "--max-records-size"])
def test_a_records_file_over_the_cap_is_refused_unread(tmp_path, size: int, flags: list[str], cap: int):
    """As serve refuses it (--max-records-size, 16 MiB unless given): before, explain read a 20 MB file whole."""
    path = tmp_path / "records.yaml"
    with path.open("wb") as stream:
        stream.truncate(size)  # sparse: written at once; read, a NUL would be a YAML error of its own
    result = feddns("explain", EXAMPLE, "--from", "foo", "--records", str(path), *flags)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"feddns explain: error: records file {path}: {size:,} bytes, over the limit of {cap:,} bytes "
        "(--max-records-size); not read"], result.stderr
