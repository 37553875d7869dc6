"""The feddns command line (docs/reference.md section 6): bad flags and files exit 2 with one line."""

import json
import subprocess
import sys

import pytest

from feddns.cli import build_parser
from harness.ports import wait_until
from harness.serve import ServeProcess, write_records


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
    (["serve", "--cluster-option-code", "10"], "option code"),  # COOKIE (RFC 7873): its length is checked
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
    ("/a: {b: [\n", "not valid YAML"),
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


@pytest.mark.parametrize("args,line", [
    (["serve", "--listen", "127.0.0.1", "--example"],
     "feddns serve: error: --listen '127.0.0.1' has no port (expected HOST:PORT)"),
    (["serve", "--example", "--metrics", "localhost"],
     "feddns serve: error: --metrics 'localhost' has no port (expected HOST:PORT)"),
    (["serve", "--example", "--query-log-rate", "0"],
     "feddns serve: error: --query-log-rate 0 is not at least 1 line a second"),
    (["serve", "--example", "--workers", "2", "--query-log", "--query-log-rate", "1"],
     "feddns serve: error: --query-log-rate 1 is fewer lines a second than the 2 workers that split it"),
    # --log-level before the subcommand is taken: the error is of the flag after it, not of argparse
    (["--log-level", "debug", "serve", "--ttl", "-5"],
     "feddns serve: error: --ttl -5 is not from 0 to 2147483647 seconds"),
    (["--log-level=warning", "--log-format", "text", "serve", "--ttl", "-5"],
     "feddns serve: error: --ttl -5 is not from 0 to 2147483647 seconds"),
])
def test_a_bad_flag_is_named_in_the_one_line(args, line):
    result = feddns(*args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [line], result.stderr


@pytest.mark.parametrize("flag", ["--listen", "--metrics"])
def test_a_host_that_does_not_resolve_is_said_so_naming_the_flag(flag):
    result = feddns("serve", "--example", flag, "nosuchhost.invalid:53")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"feddns serve: error: {flag} nosuchhost.invalid:53: cannot listen: "
                           "host nosuchhost.invalid does not resolve ("), line
    assert "Unknown error" not in line


@pytest.mark.parametrize("args", [["--log-level", "loud", "serve"], ["serve", "--log-format", "xml"]])
def test_a_bad_log_flag_is_an_argparse_error(args):
    result = feddns(*args)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "invalid choice" in line and args[-2] in line


def test_log_flags_are_taken_after_a_nested_subcommand_too(tmp_path):
    result = feddns("certs", "issue-server", "--log-format", "json", "--dir", str(tmp_path), "--name", "x")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert json.loads(line)["logger"] == "feddns certs", line


COMMANDS = ["serve", "controller", "stubzone", "links", "certs", "explain", "status"]


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help_is_plain_text(command):
    result = feddns(*([command] if command else []), "--help")
    assert result.returncode == 0
    assert "``" not in result.stdout and ":class:" not in result.stdout, result.stdout
    assert "--log-level" in result.stdout and "--log-format" in result.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_help_imports_no_heavy_library(command):
    """What makes ``--help`` slow is importing kubernetes, aiohttp or the gRPC stack (about a second
    each); the import set is checked, not the wall time, which a shared machine makes noisy."""
    probe = ("import sys\nfrom feddns.cli import build_parser\n"
             f"build_parser([{command!r}, '--help'])\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'kubernetes', 'aiohttp', 'aetcd', 'grpc'}))\n")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=20, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout


@pytest.mark.parametrize("argv,level,log_format", [
    (["--log-level", "debug", "serve"], "debug", "text"),
    (["serve", "--log-level", "debug", "--log-format", "json"], "debug", "json"),
    (["--log-format=json", "--log-level", "error", "serve", "--log-level", "warning"], "warning", "json"),
    (["serve"], "info", "text"),
    (["--log-level", "debug", "certs", "init", "--log-format", "json", "--dir", "x"], "debug", "json"),
])
def test_log_flags_are_taken_before_or_after_the_subcommand(argv, level, log_format):
    args = build_parser(argv).parse_args(argv)
    assert (args.command, args.log_level, args.log_format) == (argv[argv.index(args.command)], level, log_format)


@pytest.mark.parametrize("command", ["serve", "controller", "stubzone", "links"])
def test_an_unknown_flag_is_named_by_its_subcommand(command):
    """As every other error of a subcommand's flags: ``feddns links: error: ...``, not ``feddns: error:``."""
    result = feddns(command, "--no-such-flag")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"feddns {command}: error: "), result.stderr
