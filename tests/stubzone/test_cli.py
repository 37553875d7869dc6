"""`feddns stubzone` flags: a bad one exits 2 with one line, before any socket (docs/reference.md section 6)."""

import socket
import subprocess
import sys
import urllib.request

import pytest

from feddns.cli import main
from harness.ports import free_port
from harness.stubzone import ALLOWED, StubzoneProcess, skydns_args


def flags(pki, **overrides: str | None) -> list[str]:
    """`feddns stubzone` arguments with ``overrides`` (``None`` drops the flag)."""
    values: dict[str, str | None] = {
        "--listen": "127.0.0.1:0", "--cert": pki.cert("server")[0], "--key": pki.cert("server")[1],
        "--client-ca": pki.ca, "--allow": ALLOWED, "--backend": "skydns", "--etcd": "http://127.0.0.1:2379",
    }
    values.update({f"--{name.replace('_', '-')}": value for name, value in overrides.items()})
    args = ["stubzone"]
    for flag, value in values.items():
        if value is not None:
            args += [flag, value]
    return args


def unbound_conf(tmp_path, include: str | None = None) -> str:
    """An unbound.conf in ``tmp_path``, by default including ``tmp_path/feddns/*.conf``."""
    path = tmp_path / "unbound.conf"
    line = f'include-toplevel: "{tmp_path}/feddns/*.conf"' if include is None else include
    path.write_text(f"server:\n    verbosity: 1\n{line}\n")
    return str(path)


def kubeconfig(tmp_path) -> str:
    """A kubeconfig naming an API server nobody listens at: it loads, and nothing is asked of it."""
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\n"
                    "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
                    "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n")
    return str(path)


def garbage(tmp_path, name: str = "garbage.pem") -> str:
    path = tmp_path / name
    path.write_text("-----BEGIN NOTHING-----\nxyz\n")
    return str(path)


BAD = {
    "missing cert file": (lambda pki, tmp: {"cert": str(tmp / "nope.crt")}, "--cert "),
    "key is a directory": (lambda pki, tmp: {"key": str(tmp)}, "--key "),
    "key not PEM": (lambda pki, tmp: {"key": garbage(tmp)}, "--cert "),
    "key of another certificate": (lambda pki, tmp: {"key": pki.cert("client")[1]}, "key values mismatch"),
    "client CA not PEM": (lambda pki, tmp: {"client_ca": garbage(tmp)}, "--client-ca "),
    "no --allow": (lambda pki, tmp: {"allow": None}, "at least one --allow"),
    "empty --allow": (lambda pki, tmp: {"allow": ""}, "--allow ''"),
    "--allow with a space": (lambda pki, tmp: {"allow": "a b"}, "--allow 'a b'"),
    "bad --listen": (lambda pki, tmp: {"listen": "127.0.0.1"}, "has no port"),
    "credentials in the etcd URL": (lambda pki, tmp: {"etcd": "http://feddns:s3cret@127.0.0.1:2379"},
                                    "has credentials in it: refused"),
    "etcd user with its password": (lambda pki, tmp: {"etcd_user": "feddns:s3cret"}, "never from argv"),
    "etcd user without a password": (lambda pki, tmp: {"etcd_user": "feddns"},
                                     "FEDDNS_ETCD_PASSWORD is empty or unset"),
    "etcd TLS files for http": (lambda pki, tmp: {"etcd_cacert": pki.ca}, "need https:// endpoints"),
    "etcd cert without key": (lambda pki, tmp: {"etcd": "https://127.0.0.1:2379", "etcd_cert": pki.cert("client")[0]},
                              "--etcd-cert and --etcd-key go together"),
    "bad federation zone": (lambda pki, tmp: {"federation_zone": "fed_zone."}, "--federation-zone"),
    "bad skydns domain": (lambda pki, tmp: {"skydns_domain": "."}, "--cluster-domain '.'"),
    "zone equal to the cluster domain": (lambda pki, tmp: {"federation_zone": "cluster.local"},
                                         "is equal to or under the cluster domain cluster.local."),
    "zone under the cluster domain": (lambda pki, tmp: {"federation_zone": "fed.svc.k8s.example",
                                                        "cluster_domain": "K8S.example."},
                                      "--federation-zone fed.svc.k8s.example. is equal to or under"),
    "zone containing the cluster domain": (lambda pki, tmp: {"federation_zone": "local."}, "contains the cluster"),
    "unknown backend": (lambda pki, tmp: {"backend": "bind"}, "invalid choice: 'bind'"),
    "coredns without --cluster": (
        lambda pki, tmp: {"backend": "coredns", "etcd": None},
        "--backend coredns tags queries with this cluster's name: --cluster NAME is required"),
    "unbound without --cluster": (lambda pki, tmp: {"backend": "unbound", "etcd": None}, "--cluster NAME is required"),
    "coredns-custom without --cluster": (
        lambda pki, tmp: {"backend": "coredns-custom", "etcd": None},
        "--backend coredns-custom tags queries with this cluster's name: --cluster NAME is required"),
    "coredns-custom cluster read as hex": (
        lambda pki, tmp: {"backend": "coredns-custom", "etcd": None, "cluster": "0xfeed"},
        "CoreDNS reads a value starting with 0x as hex"),
    "configmap flag with openshift": (
        lambda pki, tmp: {"backend": "openshift", "etcd": None, "configmap": "kube-system/x"},
        "--configmap is for --backend coredns, coredns-custom or kube-dns, not openshift"),
    "cluster not a DNS label": (lambda pki, tmp: {"cluster": "Foo_1"},
                                "--cluster 'Foo_1' is not a lowercase DNS label"),
    "cluster of 64 characters": (lambda pki, tmp: {"cluster": "a" * 64},
                                 "64 characters long; a DNS label has at most 63"),
    "cluster read as hex by CoreDNS": (lambda pki, tmp: {"backend": "coredns", "etcd": None, "cluster": "0xfeed"},
                                       "CoreDNS reads a value starting with 0x as hex"),
    "mirror dir with skydns": (lambda pki, tmp: {"mirror_dir": str(tmp)},
                               "--mirror-dir is for --backend coredns or coredns-custom, not skydns"),
    "mirror dir with kube-dns": (lambda pki, tmp: {"backend": "kube-dns", "etcd": None, "mirror_dir": str(tmp)},
                                 "--mirror-dir is for --backend coredns or coredns-custom, not kube-dns"),
    "mirror dir missing": (lambda pki, tmp: {"backend": "coredns", "etcd": None, "cluster": "foo",
                                             "kubeconfig": kubeconfig(tmp), "mirror_dir": str(tmp / "nope")},
                           "/nope: not a directory"),
    "etcd flag with coredns": (lambda pki, tmp: {"backend": "coredns", "cluster": "foo"},
                               "--etcd is for --backend skydns, not coredns"),
    "configmap flag with skydns": (lambda pki, tmp: {"configmap": "kube-system/x"},
                                   "--configmap is for --backend coredns, coredns-custom or kube-dns, not skydns"),
    "bad --configmap": (lambda pki, tmp: {"backend": "kube-dns", "etcd": None, "configmap": "kube-dns"},
                        "--configmap 'kube-dns' must be NAMESPACE/NAME"),
    "missing kubeconfig": (lambda pki, tmp: {"backend": "kube-dns", "etcd": None, "kubeconfig": str(tmp / "nope")},
                           "--kubeconfig "),
    "no kubeconfig outside a pod": (lambda pki, tmp: {"backend": "kube-dns", "etcd": None},
                                    "no --kubeconfig and not in a cluster"),
    "unbound without its config": (lambda pki, tmp: {"backend": "unbound", "etcd": None, "cluster": "foo"},
                                   "--backend unbound needs --unbound-config FILE"),
    "unbound config missing": (lambda pki, tmp: {"backend": "unbound", "etcd": None, "cluster": "foo",
                                                 "unbound_config": str(tmp / "unbound.conf")}, "--unbound-config "),
    "unbound config without the include": (lambda pki, tmp: {"backend": "unbound", "etcd": None, "cluster": "foo",
                                                             "unbound_config": unbound_conf(tmp, "")},
                                           'does not include the stub zones: add the line include-toplevel: "'),
    "unbound-control missing": (lambda pki, tmp: {"backend": "unbound", "etcd": None, "cluster": "foo",
                                                  "unbound_config": unbound_conf(tmp), "unbound_control": "nope-ctl"},
                                "--unbound-control nope-ctl: no such program"),
    "bad etcd API": (lambda pki, tmp: {"skydns_etcd_api": "v4"}, "invalid choice: 'v4'"),
    "zero backend timeout": (lambda pki, tmp: {"backend_timeout": "0"}, "--backend-timeout 0 is not a number"),
    "relative etcd prefix": (lambda pki, tmp: {"etcd_prefix": "skydns"}, "must start with '/'"),
    "bad --metrics": (lambda pki, tmp: {"metrics": "nowhere"}, "has no port"),
    "zero handshake timeout": (lambda pki, tmp: {"tls_handshake_timeout": "0"}, "--tls-handshake-timeout 0 is not"),
    "zero reload interval": (lambda pki, tmp: {"tls_reload_interval": "0"}, "--tls-reload-interval 0 is not"),
    "no connection allowed": (lambda pki, tmp: {"max_connections": "0"}, "--max-connections must be at least 1"),
    "no pending connection allowed": (lambda pki, tmp: {"max_pending": "0"}, "--max-pending must be at least 1"),
    "share over the pool": (lambda pki, tmp: {"max_pending": "8", "max_pending_per_address": "9"},
                            "--max-pending-per-address 9 is more than --max-pending 8"),
    "zero request timeout": (lambda pki, tmp: {"request_timeout": "0"}, "--request-timeout 0 is not a number"),
    "zero idle timeout": (lambda pki, tmp: {"idle_timeout": "-1"}, "--idle-timeout -1 is not a number"),
    "coredns port 0": (lambda pki, tmp: {"backend": "coredns", "etcd": None, "cluster": "foo", "coredns_port": "0"},
                       "--coredns-port 0 is not a port (1-65535)"),
    "coredns port with skydns": (lambda pki, tmp: {"coredns_port": "5353"},
                                 "--coredns-port is for --backend coredns or coredns-custom, not skydns"),
    "cache min TTL over the cap": (lambda pki, tmp: {"backend": "coredns", "etcd": None, "cluster": "foo",
                                                     "cache_min_ttl": "31"},
                                   "--cache-min-ttl 31 is not a number of seconds from 0 to 30"),
    "serve stale over the cap": (lambda pki, tmp: {"backend": "coredns", "etcd": None, "cluster": "foo",
                                                   "cache_serve_stale": "3601"},
                                 "--cache-serve-stale 3601 is not a number of seconds from 0 to 3600"),
    "cache min TTL with skydns": (lambda pki, tmp: {"cache_min_ttl": "0"},
                                  "--cache-min-ttl is for --backend coredns or coredns-custom, not skydns"),
    "zero probe interval": (lambda pki, tmp: {"probe_interval": "0"}, "--probe-interval 0 is not a number"),
    "probe interval not a number": (lambda pki, tmp: {"probe_interval": "soon"},
                                    "argument --probe-interval: invalid float value: 'soon'"),
    "probe server without a port": (lambda pki, tmp: {"probe_server": "10.96.0.10", "cluster": "foo"},
                                    "--probe-server '10.96.0.10' has no port"),
    "probe server port 0": (lambda pki, tmp: {"probe_server": "10.96.0.10:0", "cluster": "foo"},
                            "--probe-server 10.96.0.10:0: port 0 is not 1-65535"),
    "probe server by name": (lambda pki, tmp: {"probe_server": "kube-dns.kube-system:53", "cluster": "foo"},
                             "--probe-server kube-dns.kube-system:53: 'kube-dns.kube-system' is not an IP address"),
    "probe interval not finite": (lambda pki, tmp: {"probe_interval": "inf", "probe_server": "10.96.0.10:53",
                                                    "cluster": "foo"},
                                  "--probe-interval inf is not a number of seconds more than 0"),
    "probe server without --cluster": (lambda pki, tmp: {"probe_server": "10.96.0.10:53"},
                                       "--probe-server checks that Federated-DNS names this cluster: --cluster NAME"),
    "probe service with skydns": (lambda pki, tmp: {"probe_service": "kube-system/k8s-app=kube-dns", "cluster": "foo"},
                                  "--probe-service is for --backend coredns, coredns-custom, kube-dns or openshift, "
                                  "not skydns"),
    "probe service and server": (lambda pki, tmp: {"backend": "coredns", "etcd": None, "cluster": "foo",
                                                   "probe_service": "kube-system/k8s-app=kube-dns",
                                                   "probe_server": "10.96.0.10:53"},
                                 "--probe-server and --probe-service both say where to probe: give one"),
    "probe service without a selector": (lambda pki, tmp: {"backend": "coredns", "etcd": None, "cluster": "foo",
                                                           "probe_service": "kube-system"},
                                         "--probe-service 'kube-system' must be NAMESPACE/SELECTOR"),
    "probe service with a set selector": (lambda pki, tmp: {"backend": "coredns", "etcd": None, "cluster": "foo",
                                                            "probe_service": "kube-system/k8s-app in (kube-dns)"},
                                          "'k8s-app in (kube-dns)' is not a label requirement key=value"),
    "probe service without --cluster": (lambda pki, tmp: {"backend": "kube-dns", "etcd": None,
                                                          "probe_service": "kube-system/k8s-app=kube-dns"},
                                        "--probe-service checks that Federated-DNS names this cluster"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_flag_exits_2_with_one_line(pki, tmp_path, capsys, monkeypatch, case):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    make, words = BAD[case]
    try:
        status = main(flags(pki, **make(pki, tmp_path)))
    except SystemExit as exc:  # argparse's own refusals
        status = exc.code
    assert status == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("feddns stubzone: error: ")
    assert words in err[0]


def test_missing_required_flag_is_an_argparse_error(pki):
    result = subprocess.run([sys.executable, "-m", "feddns", *flags(pki, client_ca=None)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("the following arguments are required: --client-ca")


def test_port_in_use_exits_2(pki, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(flags(pki, listen=f"127.0.0.1:{port}")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"feddns stubzone: error: --listen 127.0.0.1:{port}: cannot listen: Address already in use"


def test_sigterm_stops_cleanly_and_metrics_count_requests(pki, etcd, etcd_prefix):
    metrics_port = free_port()
    server = StubzoneProcess(pki, *skydns_args(etcd.url, etcd_prefix), "--metrics", f"127.0.0.1:{metrics_port}")
    server.start()
    try:
        assert server.request("GET", "/federations").status == 200
        assert server.request("GET", "/federations", cert="stranger").status == 403
        server.wait_for_log(r"client refused: .* is not allowed")
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
            text = response.read().decode()
        assert 'feddns_stubzone_requests_total{method="GET",route="/federations",status="200"} 1.0' in text
        assert "feddns_stubzone_tls_refused_total 1.0" in text  # refused after the handshake, never a request
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/ready", timeout=5) as response:
            assert response.status == 200
    finally:
        assert server.stop() == 0
    server.wait_for_log("stopping")


def test_the_backend_alone_is_imported(pki, tmp_path, kube_foo):
    """`--backend skydns` starts without importing kubernetes (about a second) or aetcd (v3 only)."""
    kubeconfig = kube_foo.kubeconfig
    script = (
        "import sys\n"
        "from feddns.cli import build_parser\n"
        "from stubzone.cli import settings_from\n"
        "args = sys.argv[1:]\n"
        "settings_from(build_parser(args).parse_args(args))\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'kubernetes', 'aetcd', 'grpc'}))\n"
    )
    base = flags(pki, etcd=None, backend=None)
    cases = {
        "skydns": ([*base, "--backend", "skydns"], "[]"),
        "skydns v3": ([*base, "--backend", "skydns", "--skydns-etcd-api", "v3"], "['aetcd', 'grpc']"),
        "unbound": ([*base, "--backend", "unbound", "--cluster", "foo", "--unbound-config", unbound_conf(tmp_path)],
                    "[]"),
        "coredns": ([*base, "--backend", "coredns", "--cluster", "foo", "--kubeconfig", kubeconfig], "['kubernetes']"),
    }
    for name, (args, imported) in cases.items():
        result = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                                timeout=60, check=False)
        assert result.returncode == 0, (name, result.stderr)
        assert result.stdout.strip() == imported, name


def test_remove_all_that_cannot_reach_the_store_exits_1_naming_it(pki, tmp_path):
    """``--remove-all`` (the member chart's pre-delete hook) against an API server address nothing
    listens on: exit 1 and the ConfigMap named, so the hook Job, and with it the uninstall, fails."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{free_port()}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n")
    args = flags(pki, backend="coredns", etcd=None, cluster="foo", kubeconfig=str(kubeconfig))
    result = subprocess.run([sys.executable, "-m", "feddns", *args, "--remove-all"], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert "--remove-all stopped: the API server cannot be reached for ConfigMap kube-system/coredns-feddns" in \
        result.stderr
