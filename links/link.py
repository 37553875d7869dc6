"""A link from a pod to a federated service, and the pod annotation that declares links.

Annotation ``links.feddns.io/services`` (docs/reference.md, ``feddns links``)::

    DB=postgres.data.myfederation, CACHE=redis.data.myfederation?required=false&ports=redis:6379

Each link is ``PREFIX=<svc>.<ns>.<federation>`` with optional parameters:
``required=true|false`` (default true: the pod is denied when the federated
name does not exist) and ``ports=name:port,...`` (used when the local cluster
has no shard of the service to read ports from). Links are separated by
commas; a comma followed by ``name:port`` continues the ``ports=`` list of the
link before it, so the two uses of the comma never clash (a link always has
``=`` before any ``:``).

The prefix follows the explicit-links design: upper case, ``-`` becomes ``_``,
and it must then be a C identifier, as the variable names built from it
(``PREFIX_SERVICE_HOST``) are.
"""

import re
from dataclasses import dataclass

from feddns.errors import FeddnsError
from feddns.names import check_label
from feddns.records import MAX_PORT

SERVICES_ANNOTATION = "links.feddns.io/services"
"""The pod annotation that declares links."""

INJECTED_ANNOTATION = "links.feddns.io/injected"
"""The pod annotation the webhook sets to record what it injected; a pod that has it is not patched again."""

RESERVED_PREFIXES = frozenset({"KUBERNETES"})
"""Prefixes whose variables the kubelet sets in every container itself, whatever ``enableServiceLinks``
says: ``KUBERNETES_SERVICE_HOST``, ``KUBERNETES_SERVICE_PORT`` and ``KUBERNETES_SERVICE_PORT_HTTPS``, the
address of the cluster's API server (the ``kubernetes`` Service of ``default``), which client libraries
read to reach it. A link with one of them would replace that address, so it is refused. (Any other
prefix yields names ending in ``_SERVICE_HOST``, ``_SERVICE_PORT`` or ``_SERVICE_PORT_<NAME>`` that
the kubelet sets only for a Service of the pod's own namespace, which a link is meant to replace.)"""

_PREFIX = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_PORT_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$")
_LINK_START = re.compile(r"^\s*[^\s=:,?&]+\s*=")
_PORT_ITEM = re.compile(r"^\s*[A-Za-z0-9-]+\s*:\s*[0-9]+\s*(&.*)?$", re.DOTALL)

_TARGET_PARTS = ("service name", "namespace", "federation name")
"""The labels of a link's target ``svc.ns.federation``, in order."""


class LinkError(FeddnsError, ValueError):
    """A link (annotation entry or policy entry) is malformed; the message names it and says why."""


@dataclass(frozen=True, slots=True)
class LinkPort:
    """A service port: ``name`` (an IANA service name, or ``""`` when unnamed) and ``port`` (1-65535)."""

    name: str
    port: int


@dataclass(frozen=True, slots=True)
class Link:
    """One link: the variables ``PREFIX_SERVICE_*`` for the federated service ``service.namespace.federation``.

    ``ports`` are the ones the link itself gives (``ports=``), used when the
    local cluster has no shard to read them from. ``source`` says where the
    link was declared (``annotation`` or ``policy NAME``), for messages.
    """

    prefix: str
    service: str
    namespace: str
    federation: str
    required: bool = True
    ports: tuple[LinkPort, ...] = ()
    source: str = "annotation"

    @property
    def target(self) -> str:
        """``<svc>.<ns>.<federation>``, as written in a link."""
        return f"{self.service}.{self.namespace}.{self.federation}"

    def host(self, zone: str) -> str:
        """The federated name, absolute: ``<svc>.<ns>.<federation>.svc.<zone>`` (``zone`` ends with a dot)."""
        return f"{self.target}.svc.{zone}"


def env_name(text: str) -> str:
    """``text`` as a variable-name part: upper case, ``-`` to ``_`` (Kubernetes' service variables)."""
    return text.upper().replace("-", "_")


def parse_prefix(text: str) -> str:
    """The normalised prefix of ``text``; raises :class:`LinkError` when it is not a C identifier then,
    or when it is one of :data:`RESERVED_PREFIXES`."""
    prefix = env_name(text.strip())
    if not _PREFIX.match(prefix):
        raise LinkError(f"prefix {text.strip()!r} is not a variable name (letters, digits, '_' and '-')")
    if prefix in RESERVED_PREFIXES:
        raise LinkError(f"prefix {prefix} is reserved: kubelet sets {prefix}_SERVICE_HOST and {prefix}_SERVICE_PORT "
                        "itself (the API server's address), and the link would replace them")
    return prefix


def parse_target(text: str) -> tuple[str, str, str]:
    """``(service, namespace, federation)`` of ``svc.ns.federation``; raises :class:`LinkError`."""
    labels = text.strip().lower().split(".")
    if len(labels) != len(_TARGET_PARTS):
        hint = " (write the federated service, not the DNS name)" if "svc" in labels[3:] else ""
        raise LinkError(f"{text.strip()!r} is not <service>.<namespace>.<federation>{hint}")
    try:
        for label, what in zip(labels, _TARGET_PARTS, strict=True):
            check_label(label, what)
    except ValueError as exc:
        raise LinkError(str(exc)) from exc
    return labels[0], labels[1], labels[2]


def parse_port(text: str) -> LinkPort:
    """``name:port`` to a :class:`LinkPort`; raises :class:`LinkError`."""
    name, sep, number = text.strip().partition(":")
    name, number = name.strip().lower(), number.strip()
    if not sep or not _PORT_NAME.match(name) or name.isdigit() or "--" in name:
        raise LinkError(f"port {text.strip()!r} is not name:port (a port name: a-z, 0-9 and '-', 1 to 15)")
    if not number.isdigit() or not 1 <= int(number) <= MAX_PORT:
        raise LinkError(f"port {text.strip()!r}: {number!r} is not a port number from 1 to {MAX_PORT}")
    return LinkPort(name, int(number))


def check_ports(ports: tuple[LinkPort, ...]) -> tuple[LinkPort, ...]:
    """``ports`` when their names are distinct; raises :class:`LinkError` naming a repeated one."""
    seen: set[str] = set()
    for port in ports:
        if port.name in seen:
            raise LinkError(f"port name {port.name!r} is given twice")
        seen.add(port.name)
    return ports


def parse_required(text: str) -> bool:
    """``true`` or ``false`` (any case); raises :class:`LinkError`."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise LinkError(f"required={text.strip()!r}: expected true or false")
    return value == "true"


def parse_link(text: str, source: str = "annotation") -> Link:
    """One link, ``PREFIX=svc.ns.federation[?required=false][&ports=name:port,...]``.

    Raises :class:`LinkError` whose message names the link (its prefix, or its text).
    """
    prefix_text, sep, rest = text.partition("=")
    if not sep or not prefix_text.strip():
        raise LinkError(f"{text.strip()!r} is not PREFIX=<service>.<namespace>.<federation>")
    prefix = parse_prefix(prefix_text)
    try:
        return _parse_rest(prefix, rest, source)
    except LinkError as exc:
        raise LinkError(f"link {prefix}: {exc}") from exc


def _parse_rest(prefix: str, rest: str, source: str) -> Link:
    target, _, query = rest.partition("?")
    service, namespace, federation = parse_target(target)
    required = True
    ports: tuple[LinkPort, ...] = ()
    seen: set[str] = set()
    for parameter in query.split("&") if query.strip() else ():
        key, eq, value = parameter.partition("=")
        key = key.strip()
        if not eq or key not in ("required", "ports"):
            raise LinkError(f"unknown parameter {parameter.strip()!r} (expected required= or ports=)")
        if key in seen:
            raise LinkError(f"{key}= is given twice")
        seen.add(key)
        if key == "required":
            required = parse_required(value)
        else:
            ports = check_ports(tuple(parse_port(item) for item in value.split(",")))
    return Link(prefix, service, namespace, federation, required, ports, source)


def split_links(text: str) -> list[str]:
    """The link texts of an annotation value: commas split links, except before ``name:port``."""
    pieces: list[str] = []
    for item in text.split(","):
        if pieces and _PORT_ITEM.match(item) and not _LINK_START.match(item):
            pieces[-1] += "," + item
        elif item.strip():
            pieces.append(item)
    return pieces


def parse_annotation(text: str) -> tuple[list[Link], list[str]]:
    """The links of a ``links.feddns.io/services`` value, and one message per malformed link.

    A malformed link is left out and the others kept; the messages name it.
    Two links with one prefix are a malformed annotation: the second is left out.
    """
    links: list[Link] = []
    errors: list[str] = []
    for piece in split_links(text):
        try:
            link = parse_link(piece)
        except LinkError as exc:
            errors.append(f"{SERVICES_ANNOTATION}: {exc}")
            continue
        if any(other.prefix == link.prefix for other in links):
            errors.append(f"{SERVICES_ANNOTATION}: prefix {link.prefix} is given twice; the second is ignored")
            continue
        links.append(link)
    return links, errors
