"""``--backend coredns-custom``: server blocks in the platform's own ConfigMap ``kube-system/coredns-custom``.

AKS and k3s own CoreDNS's ConfigMap ``coredns`` and put it back as they ship it
(AKS's addon manager reconciles it; k3s rewrites it at every server start), so
an ``import`` line added there does not last. Both give a supported place
instead: ConfigMap ``kube-system/coredns-custom``, mounted into the CoreDNS
pods at ``/etc/coredns/custom``, and a Corefile that imports
``custom/*.server`` (AKS, relative to ``/etc/coredns``) or
``/etc/coredns/custom/*.server`` (k3s) at top level, and ``*.override`` inside
``.:53`` (AKS: https://learn.microsoft.com/en-us/azure/aks/coredns-custom;
k3s: manifests/coredns.yaml of https://github.com/k3s-io/k3s, where the volume
is ``optional: true``).

Federation F is the key ``feddns.F.server`` holding the block of the
``coredns`` backend (:func:`stubzone.backends.corefile.render`, tagged with
EDNS0 0xFEDD = ``--cluster``). Only keys of that shape whose text begins with
the marker line of every block the endpoint writes are read or written: the
customer's own keys (``mine.server``, ``feddns-notes.server``, even a
``feddns.corp.server`` of theirs) are never read as federations, changed or
deleted (409 for F's own key). The ConfigMap belongs to the
platform: the endpoint never creates or deletes it; when it is missing, GET
lists nothing and a POST or DELETE answers 503 saying how to create it.
Writes are the ``resourceVersion``-guarded replace of
:mod:`stubzone.backends.configmap`.
"""

import argparse

from stubzone.backends import Backend
from stubzone.backends.coredns import CoreDNSBackend
from stubzone.model import StubDomains

DEFAULT_CONFIGMAP = "kube-system/coredns-custom"
MISSING = ("it is the platform's (AKS and k3s mount it into CoreDNS at /etc/coredns/custom) and feddns stubzone "
           "never creates it; AKS ships it, on k3s create it: kubectl -n kube-system create configmap coredns-custom")


def make(args: argparse.Namespace, domains: StubDomains) -> Backend:
    """The backend of ``--backend coredns-custom``; loads the kubeconfig (or the service account) now."""
    return CoreDNSCustomBackend.from_flags(args, domains, DEFAULT_CONFIGMAP)


class CoreDNSCustomBackend(CoreDNSBackend):
    """Server blocks ``feddns.F.server`` in the platform's ``coredns-custom`` ConfigMap, tagged with ``cluster``."""

    name = "coredns-custom"
    prefix = "feddns."
    missing = MISSING
    by_content = True
