"""Kubernetes objects as the member clusters hold them (Service, EndpointSlice, ServiceExport),
built for the tests, the demo and the benchmarks: plain dicts in the API's JSON shape, ready to
apply to a real kube-apiserver or to tests/support/fakekube.py."""

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Any


def service(
    namespace: str,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    type: str = "ClusterIP",
    cluster_ip: str | None = None,
    load_balancer_ips: Iterable[str] = (),
    load_balancer_hostnames: Iterable[str] = (),
    external_ips: Iterable[str] = (),
    ports: Iterable[tuple[str, str, int]] = (("http", "TCP", 80),),
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ``v1`` Service; ``ports`` are ``(name, protocol, port)``."""
    spec: dict[str, Any] = {
        "type": type,
        "selector": {"app": name},
        "ports": [{"name": n, "protocol": p, "port": port} for n, p, port in ports],
    }
    if cluster_ip is not None:
        spec["clusterIP"] = cluster_ip
    if external_ips:
        spec["externalIPs"] = list(external_ips)
    ingress = [{"ip": ip} for ip in load_balancer_ips] + [{"hostname": h} for h in load_balancer_hostnames]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"namespace": namespace, "name": name, "labels": dict(labels or {}),
                     **({"annotations": dict(annotations)} if annotations else {})},
        "spec": spec,
        "status": {"loadBalancer": {"ingress": ingress} if ingress else {}},
    }


def endpoint_slice(
    namespace: str,
    service_name: str,
    *,
    ready: int,
    not_ready: int = 0,
    name: str | None = None,
    address_type: str = "IPv4",
    base: str = "10.244.0.0",
    hostnames: Sequence[str | None] = (),
    headless: bool = False,
    ports: Iterable[tuple[str, str, int]] = (("http", "TCP", 8080),),
) -> dict[str, Any]:
    """A ``discovery.k8s.io/v1`` EndpointSlice of ``service_name`` with ``ready`` ready
    and ``not_ready`` not-ready endpoints (pod addresses counted up from ``base``);
    ``hostnames`` are given to the first endpoints (as a StatefulSet's pods have);
    ``headless`` adds the label the EndpointSlice controller puts on the slices of a
    headless Service (``service.kubernetes.io/headless``); ``ports`` are ``(name,
    protocol, port)``."""
    first = ipaddress.ip_address(base)
    endpoints = []
    for i in range(ready + not_ready):
        endpoint: dict[str, Any] = {
            "addresses": [str(first + i + 1)],
            "conditions": {"ready": i < ready, "serving": i < ready, "terminating": False},
            "targetRef": {"kind": "Pod", "namespace": namespace, "name": f"{service_name}-{i}"},
        }
        if i < len(hostnames) and hostnames[i] is not None:
            endpoint["hostname"] = hostnames[i]
        endpoints.append(endpoint)
    labels = {
        "kubernetes.io/service-name": service_name,
        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
    }
    if headless:
        labels["service.kubernetes.io/headless"] = ""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"namespace": namespace, "name": name or f"{service_name}-abcde", "labels": labels},
        "addressType": address_type,
        "endpoints": endpoints,
        "ports": [{"name": n, "protocol": p, "port": port} for n, p, port in ports],
    }


def service_export(namespace: str, name: str) -> dict[str, Any]:
    """A ``multicluster.x-k8s.io/v1alpha1`` ServiceExport."""
    return {
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ServiceExport",
        "metadata": {"namespace": namespace, "name": name},
    }
