"""One AdmissionReview (``admission.k8s.io/v1``) in, one out: the webhook's decision for a pod.

The steps, for a pod being created:

1. a pod that already carries ``links.feddns.io/injected`` was patched by an
   earlier call (re-invocation): allowed unchanged;
2. links: the pod's ``links.feddns.io/services`` annotation, then every
   matching policy (malformed links are left out, with a warning). Two links
   with one prefix but different services are a conflict;
3. gating: every required link's federated name is asked of the cluster DNS;
   NXDOMAIN denies the pod with a message naming the link (links.gating);
4. ports: the local shard's (links.shards), else the link's own ``ports=``;
5. the variables, conflicts and JSONPatch (links.inject).

Whatever arrives, the answer is an AdmissionReview: a body that is not one
(not JSON, JSON nested deeper than the parser goes, no ``request.uid``), or a
request for something other than a pod, is allowed unchanged with a warning.
Only a body with no uid to answer gets an error status as well (400, from
links.app): an answer without the request's uid is one the API server
refuses anyway. Warnings follow the API server's limits (one line, at most
256 characters each, 4 KiB in all).
"""

import base64
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from links import inject
from links.gating import Existence, Gate
from links.link import INJECTED_ANNOTATION, SERVICES_ANNOTATION, Link, LinkPort, parse_annotation
from links.policy import LinkPolicies

log = logging.getLogger(__name__)

API_VERSION = "admission.k8s.io/v1"
WARNING_CHARS = 256
"""The API server cuts warnings longer than this (characters)."""
MAX_WARNINGS = 15
"""At most this many warnings (the API server keeps about 4 KiB of them)."""
MAX_LINKS = 64
"""Links of one pod, annotation and policies together; more are left out with a warning."""

JSON = dict[str, Any]


class Shards(Protocol):
    """The local cluster's shards (links.shards.LocalShards)."""

    @property
    def ready(self) -> bool:
        """True once the Services have been listed."""

    def ports(self, namespace: str, name: str, federation: str) -> tuple[LinkPort, ...] | None:
        """The local shard's ports, ``None`` without a local shard."""


@dataclass
class Outcome:
    """The decision for one review, before it is put in the AdmissionReview.

    ``result`` is the metric label: ``patched``, ``unchanged``, ``denied``,
    ``conflict``, ``reinvoked``, ``not-a-pod``, ``malformed`` (or ``error``, set by links.app).
    """

    result: str
    allowed: bool = True
    patch: list[JSON] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    message: str = ""
    pod: str = "?"
    """``namespace/name`` of the pod (``generateName`` when it has no name yet), for logs."""


@dataclass(frozen=True)
class Received:
    """A request body as far as it is an AdmissionReview (see :func:`receive`)."""

    uid: str = ""
    """``request.uid``, the one the answer must carry; empty when the body has none (answered 400)."""
    request: JSON | None = None
    """``request``; ``None`` when the body is not an AdmissionReview with a uid."""
    problem: str = ""
    """Why it is not one, for the warning; empty when it is."""


NOT_A_REVIEW = "the request is not an AdmissionReview with a request.uid"


def receive(body: bytes) -> Received:
    """``body`` parsed as an AdmissionReview; never raises, whatever the bytes."""
    try:
        review = json.loads(body)
    except RecursionError:  # the C parser's guard against a deep nesting: a body of b"[" * 100000
        return Received(problem="the body is JSON nested deeper than the webhook parses")
    except (ValueError, UnicodeDecodeError):  # json.JSONDecodeError is a ValueError
        return Received(problem=NOT_A_REVIEW)
    request = review.get("request") if isinstance(review, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    uid = uid if isinstance(uid, str) else ""
    if not uid or not isinstance(request, dict) or review.get("kind") != "AdmissionReview":
        return Received(uid, problem=NOT_A_REVIEW)
    return Received(uid, request)


@dataclass
class Reviewer:
    """Answers AdmissionReviews for ``zone`` with the current ``policies()``, ``shards`` and ``gate``."""

    zone: str
    policies: Callable[[], LinkPolicies]
    shards: Shards
    gate: Gate

    async def review(self, received: Received) -> tuple[JSON, Outcome]:
        """The AdmissionReview answering ``received``, and the outcome for metrics and logs."""
        if received.request is None:
            outcome = Outcome("malformed", warnings=[f"feddns links: {received.problem}; nothing was changed"])
            return respond(received.uid, outcome), outcome
        outcome = await self.decide(received.request)
        outcome.pod = _pod_name(received.request)
        return respond(received.uid, outcome), outcome

    async def decide(self, request: JSON) -> Outcome:
        """The outcome for an AdmissionReview's ``request``."""
        kind = request.get("kind") or {}
        is_pod = isinstance(kind, dict) and (kind.get("group"), kind.get("kind")) == ("", "Pod")
        if not is_pod or request.get("subResource"):
            what = f"{kind.get('kind')}" if isinstance(kind, dict) else "?"
            warning = f"feddns links: only pods are handled, not {what}; nothing was changed"
            return Outcome("not-a-pod", warnings=[warning])
        if request.get("operation") != "CREATE":
            warning = f"feddns links: only pod creation is handled, not {request.get('operation')}; nothing was changed"
            return Outcome("not-a-pod", warnings=[warning])
        pod = request.get("object")
        if not (isinstance(pod, dict) and isinstance(pod.get("spec"), dict) and isinstance(pod.get("metadata"), dict)):
            return Outcome("malformed", warnings=["feddns links: request.object is not a pod; nothing was changed"])
        return await self._decide_pod(pod, str(request.get("namespace") or pod["metadata"].get("namespace") or ""))

    async def _decide_pod(self, pod: JSON, namespace: str) -> Outcome:
        metadata = pod["metadata"]
        annotations = _strings(metadata.get("annotations"))
        if INJECTED_ANNOTATION in annotations:
            return Outcome("reinvoked")
        links, warnings = parse_annotation(annotations.get(SERVICES_ANNOTATION, ""))
        links += self.policies().links_for(namespace, _strings(metadata.get("labels")))
        links, clashes = merge(links)
        if len(links) > MAX_LINKS:
            warnings.append(f"feddns links: the pod has {len(links)} links; only the first {MAX_LINKS} are used")
            links = links[:MAX_LINKS]
        if not links and not clashes:
            return Outcome("unchanged", warnings=warnings)
        denial, gate_warnings = await self._gate(links)
        warnings += gate_warnings
        if denial:
            return Outcome("denied", allowed=False, warnings=warnings, message=denial)
        if clashes:
            refused = [f"{clash}; nothing was injected into this pod" for clash in clashes]
            return Outcome("conflict", warnings=[*warnings, *refused])
        with_ports, port_warnings = self._ports(links)
        plan = inject.plan(pod, with_ports, self.zone)
        result = "patched" if plan.patch else "conflict" if plan.conflicted else "unchanged"
        return Outcome(result, patch=plan.patch, warnings=warnings + port_warnings + plan.warnings)

    async def _gate(self, links: Sequence[Link]) -> tuple[str, list[str]]:
        """The denial message (empty when admitted) and warnings for what could not be checked."""
        required = [link for link in links if link.required]
        if not required:
            return "", []
        findings = await self.gate.check([link.host(self.zone) for link in required])
        missing, warnings = [], []
        for link in required:
            finding = findings[link.host(self.zone)]
            if finding.existence is Existence.MISSING:
                missing.append(f"link {link.prefix} ({link.source}): {link.host(self.zone)} does not exist "
                               f"({finding.detail})")
            elif finding.existence is Existence.UNKNOWN:
                warnings.append(f"link {link.prefix}: could not check that {link.host(self.zone)} exists "
                                f"({finding.detail}); admitted")
        if not missing:
            return "", warnings
        return ("feddns links: the pod requires federated services that do not exist: " + "; ".join(missing)
                + " (a link with required=false lets the pod start without it)"), warnings

    def _ports(self, links: Sequence[Link]) -> tuple[list[tuple[Link, tuple[LinkPort, ...]]], list[str]]:
        """Each link with the local shard's ports, or its own; a warning when neither is known for sure."""
        result, warnings = [], []
        for link in links:
            local = self.shards.ports(link.namespace, link.service, link.federation)
            result.append((link, local or link.ports))
            if local is None and not link.ports and not self.shards.ready:
                warnings.append(f"link {link.prefix}: the local shard's ports are not known yet (Services not "
                                f"listed); only {link.prefix}_SERVICE_HOST was injected")
        return result, warnings


def merge(links: Sequence[Link]) -> tuple[list[Link], list[str]]:
    """One link per prefix, and the conflicts: one prefix for two different services.

    A prefix given twice for one service (say by the annotation and a policy)
    is one link: required when either is, with the first non-empty ``ports``.
    """
    merged: dict[str, Link] = {}
    clashes = []
    for link in links:
        first = merged.get(link.prefix)
        if first is None:
            merged[link.prefix] = link
        elif first.target != link.target:
            clashes.append(f"conflict: prefix {link.prefix} links {first.target} ({first.source}) "
                           f"and {link.target} ({link.source})")
        else:
            merged[link.prefix] = Link(first.prefix, first.service, first.namespace, first.federation,
                                       first.required or link.required, first.ports or link.ports, first.source)
    return list(merged.values()), clashes


def respond(uid: str, outcome: Outcome) -> JSON:
    """The ``admission.k8s.io/v1`` AdmissionReview carrying ``outcome`` for request ``uid``."""
    response: JSON = {"uid": uid, "allowed": outcome.allowed}
    if outcome.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(outcome.patch, separators=(",", ":")).encode()).decode()
    if not outcome.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": outcome.message}
    if outcome.warnings:
        response["warnings"] = limit_warnings(outcome.warnings)
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}


def limit_warnings(warnings: Sequence[str]) -> list[str]:
    """``warnings`` deduplicated, each on one line and cut to :data:`WARNING_CHARS`, at most :data:`MAX_WARNINGS`."""
    lines = list(dict.fromkeys(" ".join(text.split()) for text in warnings))
    cut = [line if len(line) <= WARNING_CHARS else line[:WARNING_CHARS - 3] + "..." for line in lines]
    if len(cut) > MAX_WARNINGS:
        cut = [*cut[:MAX_WARNINGS - 1], f"feddns links: {len(cut) - MAX_WARNINGS + 1} more warnings in its log"]
    return cut


def _pod_name(request: JSON) -> str:
    pod = request.get("object")
    metadata = pod.get("metadata") if isinstance(pod, dict) else None
    metadata = metadata if isinstance(metadata, dict) else {}
    name = request.get("name") or metadata.get("name") or metadata.get("generateName") or "?"
    return f"{request.get('namespace') or metadata.get('namespace') or '?'}/{name}"


def _strings(value: Any) -> Mapping[str, str]:
    """A ``map[string]string`` field (labels, annotations), entries that are not strings left out."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
