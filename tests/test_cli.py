"""The feddns command line (docs/reference.md section 6): bad flags and files exit 2 with one line."""

import subprocess
import sys

import pytest

from tests.support.ports import wait_until
from tests.support.serve import ServeProcess, write_records


def feddns(*args: str) -> subprocess.CompletedProcess[str]:
    # check=False: the tests assert the exit status themselves.
    return subprocess.run([sys.executable, "-m", "feddns", *args], capture_output=True, text=True, timeout=20,
                          check=False)


@pytest.mark.parametrize("args,words", [
    (["serve", "--ttl", "abc"], "--ttl"),
    (["serve", "--ttl", "-5"], "--ttl"),
    (["serve", "--zone", "bad_zone."], "--zone"),
    (["serve", "--listen", "127.0.0.1"], "has no port"),
    (["serve", "--listen", "127.0.0.1:99999"], "port"),
    (["serve", "--etcd", "http://feddns:s3cret@127.0.0.1:2379"], "has credentials in it: refused"),
    (["serve", "--etcd", "https://127.0.0.1:2379", "--etcd-cacert", "/nonexistent.crt"],
     "--etcd-cacert /nonexistent.crt: cannot read"),
    (["serve", "--etcd", "http://127.0.0.1:2379", "--etcd-user", "feddns"], "FEDDNS_ETCD_PASSWORD is empty or unset"),
    (["serve", "--example", "--etcd-user", "feddns", "--etcd-password-file", "/etc/hostname"], "need --etcd"),
    (["serve", "--etcd-prefix", "noslash"], "must start with '/'"),
    (["serve", "--cluster-option-code", "8"], "option code"),
    (["serve", "--no-such-flag"], "unrecognized arguments"),
    (["serve", "--mcs-zone", "federation."], "must not be --zone"),
    (["serve", "--mcs-zone", "svc.federation."], "nor above or below it"),
    (["serve", "--zone", "x.clusterset.local.", "--mcs-zone", "clusterset.local."], "must not be"),
    (["serve", "--mcs-zone", "cluster_set.local."], "--mcs-zone"),
    (["serve", "--mcs-federation", "fed"], "--mcs-federation needs --mcs-zone"),
    (["serve", "--mcs-zone", "clusterset.local.", "--mcs-federation", "Fed"], "--mcs-federation"),
    (["serve", "--records", "/nonexistent/records.yaml"], "/nonexistent/records.yaml"),
    (["nosuchcommand"], "invalid choice"),
])
def test_bad_flags_exit_2_with_one_line(args, words):
    result = feddns(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr


@pytest.mark.parametrize("text,words", [
    ("/fed/prod/web/a: {clusterIP: 10.0.0.999}\n", "/fed/prod/web/a"),
    ("/fed/prod/web/a: [1, 2]\n", "must be a JSON object"),
    ("/fed/prod/Web/a: {clusterIP: 10.0.0.1}\n", "service name 'Web'"),
    ("just a string\n", "must be a map"),
    ("/a: {b: [\n", "not YAML"),
])
def test_bad_records_file_stops_startup_naming_the_problem(text, words):
    result = feddns("serve", "--listen", "127.0.0.1:0", "--records", write_records(text))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr


def test_help_lists_every_subcommand():
    result = feddns("--help")
    assert result.returncode == 0
    for command in ("serve", "controller", "stubzone", "certs", "links"):
        assert command in result.stdout


def test_records_file_is_reloaded_when_it_changes_and_a_bad_edit_keeps_the_old_records():
    path = write_records("/fed/prod/web/a: {clusterIP: 10.0.0.1, externalIP: 1.1.1.1}\n")
    qname = "web.prod.fed.svc.federation."
    with ServeProcess(records=path) as server:
        assert server.addresses(qname) == ["1.1.1.1"]
        with open(path, "w") as out:
            out.write("/fed/prod/web/a: {clusterIP: 10.0.0.1, externalIP: 1.1.1.2}\n")
        wait_until(lambda: server.addresses(qname) == ["1.1.1.2"], timeout=5, what="reload")
        with open(path, "w") as out:
            out.write("/fed/prod/web/a: {clusterIP: nonsense}\n")
        wait_until(lambda: "keeping the records already loaded" in server.log, timeout=5, what="bad reload logged")
        assert server.addresses(qname) == ["1.1.1.2"]
