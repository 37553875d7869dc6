"""Where the path check asks: a fixed address, or the cluster DNS Service found through the API.

``--probe-server HOST:PORT`` is a fixed address (the Service's clusterIP, or NodeLocal DNSCache's
link-local address, which pods on every node use). ``--probe-service NAMESPACE/SELECTOR`` finds
the cluster DNS Service itself, the way a chart rendered with ``helm template`` cannot: every round
it lists the Services of NAMESPACE that match the label selector (Kubernetes API, "Labels and
Selectors": equality-based, ``k8s-app=kube-dns``) and asks the first, by name, that has a
clusterIP and a UDP port (the one named ``dns`` first), at ``spec.clusterIP`` and that port: what
kubelet's ``--cluster-dns`` gives pods. Its Role needs ``list`` of Services in NAMESPACE, nothing
more (``list`` cannot be narrowed to names; the chart grants it in that namespace only).

A lookup the API server answers with no such Service, or refuses (403), is
:class:`TargetNotFound`; one that cannot reach the API server keeps the address found last,
since the Service has not moved because the API server is away (:class:`TargetNotFound` when
none was ever found).
"""

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any, Protocol

from feddns import names
from feddns.errors import ConfigError, FeddnsError
from feddns.kubeapi import describe_failure

LABEL_KEY = r"(?:[a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
LABEL_VALUE = r"(?:[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
REQUIREMENT = re.compile(rf"{LABEL_KEY}==?{LABEL_VALUE}")
"""One equality requirement of a label selector, ``key=value`` (Kubernetes API, "Labels and Selectors";
keys and values as "Syntax and character set" of that page spells them)."""
DNS_PORT_NAME = "dns"
"""The name of the UDP port kube-dns's, CoreDNS's and OpenShift's DNS Services give port 53."""


class TargetNotFound(FeddnsError):
    """No address to probe: the message says why (no Service matches, it has no clusterIP, 403...).

    ``unreachable`` is true when the API server could not be reached at all (so the Service may
    well be where it was)."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


class ProbeTarget(Protocol):
    """Where the path check sends its queries."""

    source: str
    """What the address comes from, for messages (``--probe-server`` or ``Service NS/NAME``)."""
    flag: str
    """The flag that says where to ask, without its dashes: ``probe-server`` or ``probe-service``."""

    async def find(self) -> tuple[str, int]:
        """The address and port to ask now; raises :class:`TargetNotFound`."""

    def close(self) -> None:
        """Release connections; called once at shutdown."""


class FixedTarget:
    """``--probe-server``: always ``server``."""

    def __init__(self, server: tuple[str, int]) -> None:
        self.server = server
        self.source = "--probe-server"
        self.flag = "probe-server"

    async def find(self) -> tuple[str, int]:
        """``server``, every time."""
        return self.server

    def close(self) -> None:
        """Nothing to release."""


def parse_service_selector(text: str) -> tuple[str, str]:
    """``--probe-service NAMESPACE/SELECTOR`` to ``(namespace, selector)``: the namespace ends at the first
    ``/`` (label keys may hold one, namespaces never do). Raises :class:`ConfigError` naming the flag."""
    namespace, slash, selector = text.partition("/")
    if not slash or not names.is_label(namespace) or not selector:
        raise ConfigError(f"--probe-service {text!r} must be NAMESPACE/SELECTOR (e.g. kube-system/k8s-app=kube-dns)")
    for requirement in selector.split(","):
        if not REQUIREMENT.fullmatch(requirement):
            raise ConfigError(f"--probe-service {text!r}: {requirement!r} is not a label requirement key=value")
    return namespace, selector


def pick_address(services: Sequence[dict[str, Any]]) -> tuple[str, tuple[str, int]]:
    """The Service (its name) and address pods ask among ``services`` (v1 Service objects as JSON):
    the first by name with a clusterIP and a UDP port, the port named ``dns`` before the others.
    Raises :class:`TargetNotFound` naming what the Services lack."""
    if not services:
        raise TargetNotFound("no Service matches")
    for service in sorted(services, key=lambda s: str(s.get("metadata", {}).get("name", ""))):
        spec = service.get("spec") or {}
        cluster_ip = spec.get("clusterIP") or ""
        udp = [port for port in spec.get("ports") or () if port.get("protocol", "TCP") == "UDP"]
        if cluster_ip in ("", "None") or not udp:
            continue
        udp.sort(key=lambda port: port.get("name") != DNS_PORT_NAME)
        return str(service["metadata"]["name"]), (cluster_ip, int(udp[0]["port"]))
    found = ", ".join(sorted(str(s.get("metadata", {}).get("name")) for s in services))
    raise TargetNotFound(f"no Service with a clusterIP and a UDP port among {found}")


class ServiceTarget:
    """``--probe-service``: the cluster DNS Service of ``namespace`` matching ``selector``, looked up through
    the API server of ``configuration`` (a ``kubernetes.client.Configuration``) at each :meth:`find`, each
    lookup within ``timeout`` seconds. See the module doc for what it asks and when it keeps the last one."""

    def __init__(self, configuration: Any, namespace: str, selector: str, timeout: float) -> None:
        import kubernetes.client  # noqa: PLC0415 - only --probe-service loads the client here

        self.namespace, self.selector, self.timeout = namespace, selector, timeout
        self.source = f"Services {namespace}/{selector}"
        self.flag = "probe-service"
        self._api_client = kubernetes.client.ApiClient(configuration)
        self._api = kubernetes.client.CoreV1Api(self._api_client)
        self._last: tuple[str, int] | None = None

    async def find(self) -> tuple[str, int]:
        """The address of the Service found now, or (API server out of reach) the one found last."""
        try:
            services = await asyncio.to_thread(self._list)
        except TargetNotFound as exc:
            if not exc.unreachable or self._last is None:
                raise
            return self._last
        try:
            name, self._last = pick_address(services)
        except TargetNotFound as exc:
            self._last = None
            raise TargetNotFound(f"Services {self.namespace}/{self.selector}: {exc}") from None
        self.source = f"Service {self.namespace}/{name}"
        return self._last

    def _list(self) -> list[dict[str, Any]]:
        """The matching Services as JSON (in a worker thread); raises :class:`TargetNotFound`."""
        import urllib3.exceptions  # noqa: PLC0415 - with the client, as above
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        try:
            response: Any = self._api.list_namespaced_service(self.namespace, label_selector=self.selector,
                                                              _preload_content=False, _request_timeout=self.timeout)
            try:
                body = json.loads(response.data)
            finally:
                response.release_conn()
        except ApiException as exc:
            raise TargetNotFound(f"listing Services {self.namespace}/{self.selector}: the API server answered "
                                 f"{describe_failure(exc)}") from exc
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            raise TargetNotFound(f"listing Services {self.namespace}/{self.selector}: "
                                 f"{describe_failure(exc)}", unreachable=True) from exc
        return list(body.get("items") or [])

    def close(self) -> None:
        """Close the API client's connections."""
        self._api_client.close()  # type: ignore[no-untyped-call]


def service_target(configuration: Any, text: str, timeout: float) -> ServiceTarget:
    """The :class:`ServiceTarget` of ``--probe-service`` ``text``; raises :class:`ConfigError`."""
    namespace, selector = parse_service_selector(text)
    return ServiceTarget(configuration, namespace, selector, timeout)
