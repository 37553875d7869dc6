"""What the webhook injects into a pod: the variables of its links, checked for conflicts, as a JSONPatch.

Variables (docs/reference.md section 8; the service variables of Kubernetes,
with the prefix of the explicit-links design), for each link, in this order:

* ``PREFIX_SERVICE_HOST``: the federated name, absolute (``<svc>.<ns>.<federation>.svc.<zone>``);
* ``PREFIX_SERVICE_PORT``: the first port;
* ``PREFIX_SERVICE_PORT_<NAME>``: each named port (upper case, ``-`` to ``_``).

They go into every container and init container *ahead of* its own ``env``,
so that the container's own values can refer to them with ``$(VAR)`` (a value
may only refer to variables defined before it).

Conflicts follow the Pod Preset rules: a container that already defines a
variable with the same value is fine (it is not injected twice); a different
value, a ``valueFrom``, or an ``envFrom`` whose prefix could produce the
variable is a conflict, and then *nothing* is injected into the pod and every
conflict is named in a warning. The pod itself is admitted.

Pure functions over the pod as JSON (``dict``); no I/O.
"""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from links.expansion import references
from links.link import INJECTED_ANNOTATION, Link, LinkPort, env_name

JSON = dict[str, Any]
CONTAINER_LISTS = ("initContainers", "containers")


@dataclass(frozen=True, slots=True)
class Variable:
    """One injected variable: ``name``, ``value``, and the ``link`` it comes from."""

    name: str
    value: str
    link: Link


@dataclass(frozen=True)
class Plan:
    """The outcome for one pod: the JSONPatch (empty when nothing is injected) and the warnings."""

    patch: list[JSON] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    injected: dict[str, list[str]] = field(default_factory=dict)
    """Variable names injected per link prefix (empty when nothing is)."""
    conflicted: bool = False
    """Nothing is injected because of a conflict (the warnings name it)."""


def variables(link: Link, ports: Sequence[LinkPort], zone: str) -> list[Variable]:
    """The variables of ``link`` with ``ports`` (the local shard's, or the link's own), in injection order."""
    result = [Variable(f"{link.prefix}_SERVICE_HOST", link.host(zone), link)]
    if ports:
        result.append(Variable(f"{link.prefix}_SERVICE_PORT", str(ports[0].port), link))
    result += [Variable(f"{link.prefix}_SERVICE_PORT_{env_name(port.name)}", str(port.port), link)
               for port in ports if port.name]
    return result


def plan(pod: JSON, links: Sequence[tuple[Link, Sequence[LinkPort]]], zone: str) -> Plan:
    """The patch and warnings for ``pod`` given each link with its ports.

    ``pod`` is the AdmissionReview's ``request.object`` (its ``spec`` a mapping).
    ``links.feddns.io/injected`` is added only with a variable: a pod that gets
    none (no container, or each has every variable already) is not marked.
    """
    wanted = [variable for link, ports in links for variable in variables(link, ports, zone)]
    conflicts = _clashes(wanted)
    containers = list(_containers(pod))
    for where, container in containers:
        conflicts += _conflicts(where, container, wanted)
    if conflicts:
        warnings = [f"{c}; nothing was injected into this pod" for c in conflicts]
        return Plan([], warnings + _check_references(containers, [], [link for link, _ in links], conflicted=True),
                     conflicted=True)
    patch: list[JSON] = []
    for where, container in containers:
        patch += _env_ops(where, container, wanted)
    if not containers:
        return Plan([], ["feddns links: the pod has no container to inject into (spec.containers is not a list of "
                         "containers); nothing was changed"])
    if not patch:
        return Plan([], _check_references(containers, wanted, [link for link, _ in links], conflicted=False))
    injected: dict[str, list[str]] = {}
    for variable in wanted:
        injected.setdefault(variable.link.prefix, []).append(variable.name)
    patch.append(_annotation_op(pod, links, injected))
    warnings = _check_references(containers, wanted, [link for link, _ in links], conflicted=False)
    return Plan(patch, warnings, injected)


def _containers(pod: JSON) -> list[tuple[str, JSON]]:
    """``("/spec/containers/0", container)`` pairs, init containers first; entries that are not mappings skipped."""
    spec = pod.get("spec") or {}
    found = []
    for key in CONTAINER_LISTS:
        listed = spec.get(key)
        for index, container in enumerate(listed if isinstance(listed, list) else []):
            if isinstance(container, dict):
                found.append((f"/spec/{key}/{index}", container))
    return found


def _name(container: JSON) -> str:
    return str(container.get("name") or "?")


def _clashes(wanted: Sequence[Variable]) -> list[str]:
    """Two links that would set one variable to different values."""
    first: dict[str, Variable] = {}
    found = []
    for variable in wanted:
        earlier = first.setdefault(variable.name, variable)
        if earlier.value != variable.value:
            found.append(f"conflict: {variable.name} is set by link {earlier.link.prefix} ({earlier.link.source}) "
                         f"and by link {variable.link.prefix} ({variable.link.source}) to different values")
    return found


def _conflicts(where: str, container: JSON, wanted: Sequence[Variable]) -> list[str]:
    """How ``container``'s own ``env`` and ``envFrom`` clash with the variables to inject."""
    found = []
    by_name = {variable.name: variable for variable in wanted}
    for entry in _list(container.get("env")):
        variable = by_name.get(str(entry.get("name")))
        if variable is None:
            continue
        if "valueFrom" in entry and entry["valueFrom"] is not None:
            found.append(f"conflict: container {_name(container)!r} sets {variable.name} from valueFrom; "
                         f"link {variable.link.prefix} ({variable.link.source}) would set it to {variable.value!r}")
        elif (value := str(entry.get("value") or "")) != variable.value:
            found.append(f"conflict: container {_name(container)!r} sets {variable.name}={value!r}; "
                         f"link {variable.link.prefix} ({variable.link.source}) would set it to {variable.value!r}")
    for source in _list(container.get("envFrom")):
        prefix = str(source.get("prefix") or "")
        clashing = [v for v in wanted if prefix and v.name.startswith(prefix) and prefix.startswith(v.link.prefix)]
        if clashing:
            link = clashing[0].link
            found.append(f"conflict: container {_name(container)!r} has envFrom with prefix {prefix!r}, "
                         f"which can define the variables of link {link.prefix} ({link.source})")
    return found


def _list(value: Any) -> list[JSON]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _strings(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _env_ops(where: str, container: JSON, wanted: Sequence[Variable]) -> list[JSON]:
    """JSONPatch ``add`` operations putting the variables the container lacks ahead of its ``env``."""
    own = {str(entry.get("name")) for entry in _list(container.get("env"))}
    new = [{"name": v.name, "value": v.value} for v in wanted if v.name not in own]
    new = list({entry["name"]: entry for entry in new}.values())  # a variable two links set alike: once
    if not new:
        return []
    if not isinstance(container.get("env"), list):
        return [{"op": "add", "path": f"{where}/env", "value": new}]
    return [{"op": "add", "path": f"{where}/env/{index}", "value": entry} for index, entry in enumerate(new)]


def _annotation_op(pod: JSON, links: Sequence[tuple[Link, Sequence[LinkPort]]],
                   injected: Mapping[str, list[str]]) -> JSON:
    """The ``add`` of ``links.feddns.io/injected``: per prefix, the service, where the link came from, the names."""
    record = {link.prefix: {"service": link.target, "source": link.source, "variables": injected[link.prefix]}
              for link, _ in links}
    value = json.dumps(record, separators=(",", ":"), sort_keys=True)
    annotations = (pod.get("metadata") or {}).get("annotations")
    if not isinstance(annotations, dict):
        return {"op": "add", "path": "/metadata/annotations", "value": {INJECTED_ANNOTATION: value}}
    return {"op": "add", "path": "/metadata/annotations/" + _pointer(INJECTED_ANNOTATION), "value": value}


def _pointer(token: str) -> str:
    """``token`` escaped for a JSON Pointer (RFC 6901 section 3: ``~`` to ``~0``, ``/`` to ``~1``)."""
    return token.replace("~", "~0").replace("/", "~1")


def _check_references(containers: Sequence[tuple[str, JSON]], wanted: Sequence[Variable], links: Sequence[Link],
                      conflicted: bool) -> list[str]:
    """Warnings for ``$(PREFIX_SERVICE_...)`` references, in env, command or args, that will not expand.

    The kubelet expands a container's env in order, each value seeing only the
    variables before it, then its command and args with all of them; an
    unknown reference stays as written (links.expansion). A reference is
    checked when its name is in a link's ``PREFIX_SERVICE_`` namespace; an
    ``envFrom`` that may define it (no prefix, or a prefix it starts with)
    silences the check, since its keys are not known here.
    """
    prefixes = sorted({link.prefix for link in links}, key=len, reverse=True)
    injected = [variable.name for variable in wanted]
    warnings: list[str] = []
    for _, container in containers:
        env = _list(container.get("env"))
        own = [str(entry.get("name")) for entry in env]
        defined_at = {name: index for index, name in reversed(list(enumerate(own)))}  # first definition
        if not conflicted:
            defined_at.update({name: -1 for name in injected if name not in defined_at})  # injected ahead of env
        from_prefixes = [str(source.get("prefix") or "") for source in _list(container.get("envFrom"))]
        uses = [(f"env {entry.get('name')}", entry["value"], index) for index, entry in enumerate(env)
                if isinstance(entry.get("value"), str)]
        uses += [(f"{key}[{index}]", text, len(env)) for key in ("command", "args")
                 for index, text in enumerate(_strings(container.get(key)))]
        for what, text, position in uses:
            for name in references(text) if "$(" in text else ():
                prefix = next((p for p in prefixes if name.startswith(p + "_SERVICE_")), None)
                if prefix is None or defined_at.get(name, len(env)) < position \
                        or any(name.startswith(p) for p in from_prefixes):
                    continue
                if name in defined_at:
                    why = "which is defined only after it"
                elif conflicted:
                    why = f"which is not defined: link {prefix} was not injected (conflict)"
                else:
                    names = [n for n in injected if n.startswith(prefix + "_SERVICE_")]
                    why = f"which link {prefix} does not define (it defines {', '.join(names) or 'nothing'})"
                warnings.append(f"container {_name(container)!r}: {what} refers to $({name}), {why}; "
                                "it will stay as written")
    return list(dict.fromkeys(warnings))
