"""``feddns stubzone``: the stub-zone HTTPS endpoint next to a cluster's DNS (docs/reference.md sections 5, 6).

Every flag is checked, the certificates loaded and the backend's flags
checked before a socket is opened; a bad one exits 2 with one line. Then the
server listens, logs ``listening on https://HOST:PORT`` (the bound port, so
``--listen 127.0.0.1:0`` works), and serves until SIGTERM or SIGINT. Only the
chosen backend's module is imported (:mod:`stubzone.backends`).

``--remove-all`` starts no server: it deletes every federation the backend
holds and exits, which is what the member chart's pre-delete hook runs so that
an uninstall leaves no stub domain in the cluster's DNS (docs/operations.md).
"""

import argparse
import asyncio
import gc
import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

import feddns.etcd.flags
from feddns import numbers
from feddns.errors import ConfigError
from feddns.hostport import parse_hostport
from feddns.https import ListenerMetrics, ListenerSettings, TLSListener
from feddns.lifecycle import StopSignals
from feddns.listen import (
    ListenAddresses,
    add_https_arguments,
    listener_settings,
    log_listening,
    start_observe,
)
from feddns.observe import ObserveServer
from stubzone import probe as probe_module
from stubzone import probetarget, tls
from stubzone.auth import AllowList, authorizer
from stubzone.backends import BACKENDS, Backend, BackendUnavailable, NotWrittenHere, load
from stubzone.backends.corefile import CACHE_SECONDS, MAX_SERVE_STALE
from stubzone.metrics import NAMESPACE, StubzoneMetrics
from stubzone.model import StubDomains, check_cluster

if TYPE_CHECKING:
    from stubzone.mirror import MirrorSettings

log = logging.getLogger("stubzone")

BACKEND_FLAGS: dict[str, tuple[str, ...]] = {
    "configmap": ("coredns", "coredns-custom", "kube-dns"),
    "kubeconfig": ("coredns", "coredns-custom", "kube-dns", "openshift"),
    "kube_context": ("coredns", "coredns-custom", "kube-dns", "openshift"),
    "probe_service": ("coredns", "coredns-custom", "kube-dns", "openshift"),
    "coredns_port": ("coredns", "coredns-custom"),
    "cache_min_ttl": ("coredns", "coredns-custom"),
    "cache_serve_stale": ("coredns", "coredns-custom"),
    "mirror_dir": ("coredns", "coredns-custom"),
    "etcd": ("skydns",),
    "etcd_prefix": ("skydns",),
    "etcd_cacert": ("skydns",),
    "etcd_cert": ("skydns",),
    "etcd_key": ("skydns",),
    "etcd_user": ("skydns",),
    "etcd_password_file": ("skydns",),
    "skydns_etcd_api": ("skydns",),
    "unbound_config": ("unbound",),
    "unbound_control": ("unbound",),
    "unbound_checkconf": ("unbound",),
}
"""Flags that only some backends take: given with another, they are refused (a typo in --backend)."""

FLAG_NAMES = {"kube_context": "--context"}
"""The flags of :data:`BACKEND_FLAGS` not spelt as their ``dest`` (``--kube-context`` is ``--context``'s old name)."""

def configure(parser: argparse.ArgumentParser) -> None:
    """Add the flags of ``feddns stubzone``."""
    add_https_arguments(parser, serves="the stub-zone API",
                        ready="ready once it listens (with --mirror-dir: and the first list is written); /healthz on "
                              "--listen pings the backend")
    parser.add_argument("--client-ca", type=Path, required=True, help="CA that signs client certificates, PEM")
    parser.add_argument("--allow", action="append", default=[], metavar="NAME",
                        help="client identity let in: a certificate CN or SAN (repeatable; at least one)")
    parser.add_argument("--allow-loopback-nameservers", action="store_true",
                        help="accept loopback nameservers (127.0.0.0/8, ::1) in a POST: only where the cluster DNS "
                             "does not run in a network namespace of its own, as in a test on one host")
    parser.add_argument("--backend", choices=sorted(BACKENDS), required=True,
                        help="the cluster DNS to program: " + "; ".join(
                            f"{name}: {kind.summary}" for name, kind in sorted(BACKENDS.items())))
    parser.add_argument("--cluster", metavar="NAME",
                        help="this cluster's name, sent in EDNS0 option 0xFEDD (required by coredns, coredns-custom "
                             "and unbound)")
    parser.add_argument("--cluster-domain", "--skydns-domain", dest="cluster_domain", default="cluster.local.",
                        help="the cluster DNS's own domain, SkyDNS's -domain (default cluster.local.)")
    parser.add_argument("--federation-zone", default="federation.",
                        help="zone of the stub domains F.svc.ZONE (default federation.)")
    parser.add_argument("--backend-timeout", "--etcd-timeout", dest="backend_timeout", **numbers.seconds(),
                        default=5.0,
                        metavar="SECONDS", help="deadline of each call to the backend's store (default 5)")
    kube = parser.add_argument_group("coredns, coredns-custom, kube-dns and openshift: the Kubernetes API")
    kube.add_argument("--configmap", metavar="NS/NAME",
                      help="the ConfigMap written (default kube-system/coredns-feddns; coredns-custom: "
                           "kube-system/coredns-custom; kube-dns: kube-system/kube-dns)")
    kube.add_argument("--kubeconfig", type=Path, metavar="FILE",
                      help="kubeconfig of the API server (default: the pod's service account)")
    kube.add_argument("--context", dest="kube_context", metavar="NAME",
                      help="context of --kubeconfig (default: its current one)")
    kube.add_argument("--kube-context", dest="kube_context", help=argparse.SUPPRESS)  # its first name: still taken
    kube.add_argument("--coredns-port", type=int, metavar="PORT",
                      help="coredns, coredns-custom: port of the server blocks written, where CoreDNS answers "
                           "the pods (default 53)")
    kube.add_argument("--cache-min-ttl", type=int, metavar="SECONDS",
                      help="coredns, coredns-custom: the least time the block's cache holds an answer, 0 to 30 "
                           "(default 5, CoreDNS's own: an answer whose TTL is shorter is held 5 s; 0 holds none "
                           "longer than its TTL)")
    kube.add_argument("--cache-serve-stale", type=int, metavar="SECONDS",
                      help="coredns, coredns-custom: when Federated-DNS cannot be reached or fails, the block's "
                           "cache gives an expired answer for up to this long (CoreDNS's serve_stale, verify "
                           "mode: only after asking again), 0 to 3600 (default 0: never)")
    kube.add_argument("--mirror-dir", type=Path, metavar="DIR",
                      help="coredns, coredns-custom: also keep DIR's *.server files equal to the endpoint's blocks "
                           "in the ConfigMap, followed through the API (a watch: seconds, where a ConfigMap volume "
                           "waits for kubelet's sync); ready once the first list is written. A CoreDNS in the same "
                           "pod imports DIR/*.server (default: none; --remove-all ignores it)")
    etcd = parser.add_argument_group("skydns: SkyDNS's etcd")
    etcd.add_argument("--etcd", action="append", metavar="URL",
                      help="the cluster's SkyDNS etcd (repeatable; default http://127.0.0.1:2379)")
    etcd.add_argument("--etcd-prefix", help="'/' + SkyDNS's -path-prefix (default /skydns)")
    etcd.add_argument("--skydns-etcd-api", choices=("v2", "v3"),
                      help="the etcd API SkyDNS reads: v2 (released SkyDNS, default) or v3 (builds with -etcd3)")
    feddns.etcd.flags.add_arguments(etcd)
    unbound = parser.add_argument_group("unbound")
    unbound.add_argument("--unbound-config", type=Path, metavar="FILE",
                         help="unbound.conf of the running unbound; it includes DIR/feddns/*.conf (DIR: its directory)")
    unbound.add_argument("--unbound-control", metavar="PATH", help="unbound-control program (default: from PATH)")
    unbound.add_argument("--unbound-checkconf", metavar="PATH", help="unbound-checkconf program (default: from PATH)")
    probe = parser.add_argument_group("the path check (docs/stubzone.md)")
    probe.add_argument("--probe-server", metavar="HOST:PORT",
                       help="the address pods ask the cluster DNS at (its Service, e.g. 10.96.0.10:53, or "
                            "NodeLocal DNSCache's, 169.254.20.10:53) to ask _whoami.F.svc.ZONE TXT through, for "
                            "each federation held: metric feddns_stubzone_path_ok and the /health body "
                            "(default: no probe; needs --cluster)")
    probe.add_argument("--probe-service", metavar="NAMESPACE/SELECTOR",
                       help="coredns, coredns-custom, kube-dns, openshift: instead of --probe-server, the cluster DNS "
                            "Service found through the API every round by its labels (e.g. "
                            "kube-system/k8s-app=kube-dns), asked at its clusterIP and UDP port; needs list of "
                            "Services in NAMESPACE (metric feddns_stubzone_path_target_found 0 when none matches)")
    probe.add_argument("--probe-interval", **numbers.seconds(),
                       default=probe_module.DEFAULT_INTERVAL, metavar="SECONDS",
                       help=f"seconds between two probes (default {probe_module.DEFAULT_INTERVAL:g})")
    parser.add_argument("--tls-reload-interval", **numbers.seconds(), default=tls.RELOAD_INTERVAL, metavar="SECONDS",
                        help="how often --cert, --key and --client-ca are read again; a change applies to new "
                             f"connections (default {tls.RELOAD_INTERVAL:g})")
    parser.add_argument("--remove-all", action="store_true",
                        help="start no server: delete every federation this backend holds (only the entries the "
                             "endpoint wrote; every other key or entry stays), print each, exit 0 (1 when the "
                             "store cannot be reached); the member chart's pre-delete hook")


@dataclass(frozen=True)
class StubzoneSettings:
    """Everything ``feddns stubzone`` needs, checked and loaded from its flags (see :func:`settings_from`)."""

    addresses: ListenAddresses
    """The HTTPS address and the metrics address (``--listen``, ``--metrics``)."""
    credentials: tls.ServerCredentials
    """The server certificate and key and the client CA, loaded (``--cert``, ``--key``, ``--client-ca``)."""
    allow: AllowList
    """The client identities let in (``--allow``)."""
    backend: Backend
    """The cluster DNS programmed, made from its flags (``--backend`` and its group of flags)."""
    listener: ListenerSettings
    """The bounds of the HTTPS socket: pools, handshake, request and idle timeouts."""
    reload_interval: float
    """Seconds between two looks at the certificate files (``--tls-reload-interval``)."""
    probe: probe_module.ProbeSettings | None = None
    """How the path through the cluster DNS is probed (``--probe-server`` or ``--probe-service``,
    ``--probe-interval``; ``None``: not)."""
    mirror: "MirrorSettings | None" = None
    """What ``--mirror-dir`` follows and where it writes (``None``: no mirror)."""
    loopback: bool = False
    """Whether a POST may name a loopback nameserver (``--allow-loopback-nameservers``)."""


def check_flags(args: argparse.Namespace) -> StubDomains:
    """The checks that read no file: names, zones, timeouts, addresses, flags of the chosen backend.

    Returns the stub domains; raises :class:`ConfigError` naming the first bad flag.
    """
    listener_settings(args)
    if args.coredns_port is not None and not 0 < args.coredns_port < 65536:  # noqa: PLR2004 - the port range
        raise ConfigError(f"--coredns-port {args.coredns_port} is not a port (1-65535)")
    if args.cache_min_ttl is not None and not 0 <= args.cache_min_ttl <= CACHE_SECONDS:
        raise ConfigError(f"--cache-min-ttl {args.cache_min_ttl} is not a number of seconds from 0 to {CACHE_SECONDS}")
    if args.cache_serve_stale is not None and not 0 <= args.cache_serve_stale <= MAX_SERVE_STALE:
        raise ConfigError(f"--cache-serve-stale {args.cache_serve_stale} is not a number of seconds from 0 to "
                          f"{MAX_SERVE_STALE}")
    if args.cluster is not None:
        check_cluster(args.cluster)
    elif BACKENDS[args.backend].tags:
        raise ConfigError(f"--backend {args.backend} tags queries with this cluster's name: --cluster NAME is required")
    for dest, backends in BACKEND_FLAGS.items():
        if getattr(args, dest) is not None and args.backend not in backends:
            flag = FLAG_NAMES.get(dest, "--" + dest.replace("_", "-"))
            choices = " or ".join(filter(None, (", ".join(backends[:-1]), backends[-1])))
            raise ConfigError(f"{flag} is for --backend {choices}, not {args.backend}")
    ListenAddresses.from_flags(args.listen, args.metrics)
    AllowList(args.allow)
    check_probe_flags(args)
    return StubDomains(args.federation_zone, args.cluster_domain)


def check_probe_flags(args: argparse.Namespace) -> tuple[str, int] | None:
    """Check the path check's flags; returns ``--probe-server``'s address (``None`` without it).

    Raises :class:`ConfigError` naming ``--probe-server`` when it is not IP:PORT (an address: a name
    would need the very DNS the probe checks), ``--probe-service`` when it is not NAMESPACE/SELECTOR or
    comes with ``--probe-server``, and ``--cluster`` when either comes without it (``--probe-interval``
    is checked as it is parsed: :mod:`feddns.numbers`)."""
    if args.probe_service is not None:
        if args.probe_server is not None:
            raise ConfigError("--probe-server and --probe-service both say where to probe: give one")
        probetarget.parse_service_selector(args.probe_service)
        _check_probe_cluster(args, "--probe-service")
        return None
    if args.probe_server is None:
        return None
    server = parse_hostport(args.probe_server, flag="--probe-server")
    if not 0 < server[1] < 65536:  # noqa: PLR2004 - the port range
        raise ConfigError(f"--probe-server {args.probe_server}: port {server[1]} is not 1-65535")
    try:
        ipaddress.ip_address(server[0])
    except ValueError:
        raise ConfigError(f"--probe-server {args.probe_server}: {server[0]!r} is not an IP address (give the "
                          "cluster DNS Service's clusterIP)") from None
    _check_probe_cluster(args, "--probe-server")
    return server


def _check_probe_cluster(args: argparse.Namespace, flag: str) -> None:
    if args.cluster is None:
        raise ConfigError(f"{flag} checks that Federated-DNS names this cluster: --cluster NAME is required")


def probe_settings(args: argparse.Namespace) -> probe_module.ProbeSettings | None:
    """The path check's settings (``None`` without ``--probe-server`` or ``--probe-service``); with
    ``--probe-service``, loads the kubeconfig (or the service account). Raises :class:`ConfigError`
    (:func:`check_probe_flags`)."""
    server = check_probe_flags(args)
    target: probetarget.ProbeTarget
    if server is not None:
        target = probetarget.FixedTarget(server)
    elif args.probe_service is not None:
        from stubzone.backends.configmap import client_configuration  # noqa: PLC0415 - it imports kubernetes

        target = probetarget.service_target(client_configuration(args.kubeconfig, args.kube_context),
                                            args.probe_service, args.backend_timeout)
    else:
        return None
    return probe_module.ProbeSettings(target, args.probe_interval, args.cluster, BACKENDS[args.backend].tags)


def settings_from(args: argparse.Namespace) -> StubzoneSettings:
    """Check the flags, load the certificates, make the backend; raises :class:`ConfigError`."""
    domains = check_flags(args)
    credentials = tls.ServerCredentials(args.cert, args.key, args.client_ca)
    backend = load(args, domains)
    mirror = None
    if args.mirror_dir is not None:
        from stubzone.mirror import mirror_settings  # noqa: PLC0415 - it imports kubernetes

        mirror = mirror_settings(args.mirror_dir, backend)
    return StubzoneSettings(
        addresses=ListenAddresses.from_flags(args.listen, args.metrics),
        credentials=credentials,
        allow=AllowList(args.allow),
        backend=backend,
        listener=listener_settings(args),
        reload_interval=args.tls_reload_interval,
        probe=probe_settings(args),
        loopback=args.allow_loopback_nameservers,
        mirror=mirror,
    )


def run(args: argparse.Namespace) -> int:
    """Check the flags, then serve until SIGTERM or SIGINT (or, with ``--remove-all``, remove and exit);
    returns the exit status."""
    if args.remove_all:
        return asyncio.run(remove_all(load(args, check_flags(args))))
    return asyncio.run(serve(settings_from(args)))


async def remove_all(backend: Backend) -> int:
    """Delete every federation ``backend`` holds (:meth:`Backend.list`: only the entries the endpoint
    wrote), printing ``removed F: stub domain S, nameservers N,...`` for each; returns 0, or 1 when the
    store cannot be reached or refuses (logged, naming the store; the rest is not tried).

    The member chart's ``helm.sh/hook: pre-delete`` Job runs it, so an uninstall takes the stub domains
    out of a cluster DNS object the chart does not own (docs/operations.md, "Join a cluster").
    """
    try:
        for zone in await backend.list():
            try:
                removed = await backend.delete(zone.federation)
            except NotWrittenHere as exc:  # changed by someone else since the list: theirs now
                log.warning("--remove-all left %s alone: %s", zone.federation, exc)
                continue
            if removed is not None:
                nameservers = ",".join(str(ns) for ns in removed.nameservers) or "-"
                print(f"removed {removed.federation}: stub domain {removed.stub_domain}, nameservers {nameservers}",
                      flush=True)
    except BackendUnavailable as exc:
        log.error("--remove-all stopped: %s", exc)
        return 1
    finally:
        await backend.close()
    return 0


async def serve(settings: StubzoneSettings) -> int:
    """Serve the API over TLS on ``settings.addresses.listen`` until a signal; returns 0.

    The HTTPS socket and the ``--metrics`` socket are both bound before
    "listening" is logged; a bind failure is a :class:`ConfigError` naming the
    flag and the address (exit 2), with whatever was bound closed again."""
    from aiohttp import web  # noqa: PLC0415 - aiohttp only once the command runs: --help answers without it

    from stubzone.app import make_app, protocol_factory  # noqa: PLC0415 - it imports aiohttp
    from stubzone.mirror import ZoneMirror  # noqa: PLC0415 - it imports kubernetes

    registry = CollectorRegistry()
    metrics = StubzoneMetrics(registry)
    settings.credentials.observe(metrics)
    app = make_app(settings.backend, settings.allow, metrics, loopback=settings.loopback)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    assert runner.server is not None, "runner.setup() makes it"
    credentials = settings.credentials
    listener = TLSListener(protocol_factory(runner.server, metrics, settings.listener.idle_timeout),
                           lambda: credentials.context, ListenerMetrics(registry, NAMESPACE), settings.listener, log,
                           authorize=authorizer(settings.allow))
    server: asyncio.Server | None = None
    observe: ObserveServer | None = None
    signals = StopSignals()
    reloads = asyncio.create_task(settings.credentials.watch(settings.reload_interval))
    path = None if settings.probe is None else probe_module.PathProbe(settings.probe, settings.backend, metrics)
    probes = None if path is None else asyncio.create_task(path.run())
    mirror = None if settings.mirror is None else ZoneMirror(settings.mirror, metrics)
    if mirror is not None:
        mirror.start()
    gc.freeze()  # what start-up made lives for good: later collections (feddns.https.give_back_memory) skip it
    try:
        server = await listener.bind(*settings.addresses.listen)
        observe = start_observe(settings.addresses.metrics, registry,
                                ready=lambda: mirror is None or mirror.synced,  # the forwarder has the blocks
                                health_detail=None if path is None else path.health_lines)
        log_listening(log, "https", (sock.getsockname() for sock in server.sockets))
        if observe is not None:
            log.info("metrics on %s (/metrics, /health, /ready)", observe.url)
        log.info("backend %s; %s", settings.backend.name, settings.credentials.summary)
        log.info("stopping (%s)", await signals.wait())
    finally:
        signals.close()
        reloads.cancel()
        if probes is not None:
            probes.cancel()
        if settings.probe is not None:
            settings.probe.target.close()
        if mirror is not None:
            mirror.stop()
        await listener.shut_down(server, observe, runner.cleanup)
    log.info("stopped")
    return 0

