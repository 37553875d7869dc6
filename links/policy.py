"""The link policy file (``feddns links --policies FILE``): links added to pods by namespace and label selector.

As the Pod Preset design injects into every pod a selector matches, a policy
adds its links to every pod created in its namespace whose labels its
selector matches (docs/links.md has an example)::

    policies:
      - name: shop-database              # unique; named in warnings and in links.feddns.io/injected
        namespace: shop
        selector:                        # a Kubernetes LabelSelector; {} selects every pod
          matchLabels: {role: frontend}
          matchExpressions:
            - {key: tier, operator: In, values: [web, api]}
        links:
          - prefix: DB
            service: postgres.data.myfederation
            required: true               # default true
            ports: [{name: sql, port: 5432}]   # used when the cluster has no local shard

Unknown keys are errors. The file is checked whole: one bad entry makes the
whole file bad (at start: exit 2; on reload: the policies already loaded stay).
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from feddns.errors import ConfigError
from feddns.names import check_label
from links.link import Link, LinkError, LinkPort, check_ports, parse_port, parse_prefix, parse_target
from links.selector import LabelSelector, parse_selector


@dataclass(frozen=True, slots=True)
class LinkPolicy:
    """One policy: its ``links`` go to pods in ``namespace`` whose labels ``selector`` matches."""

    name: str
    namespace: str
    selector: LabelSelector
    links: tuple[Link, ...]


@dataclass(frozen=True)
class LinkPolicies:
    """Every policy of a file, indexed by namespace (a pod's namespace is looked up once)."""

    by_namespace: Mapping[str, tuple[LinkPolicy, ...]] = field(default_factory=dict)

    def __len__(self) -> int:
        return sum(len(policies) for policies in self.by_namespace.values())

    def links_for(self, namespace: str, labels: Mapping[str, str]) -> list[Link]:
        """The links of every policy selecting a pod with ``labels`` in ``namespace``, in file order."""
        return [link for policy in self.by_namespace.get(namespace, ())
                if policy.selector.matches(labels) for link in policy.links]


def load_policies(path: Path) -> LinkPolicies:
    """Read and check a policy file; raises :class:`ConfigError` naming the file and the bad entry."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"policy file {path}: {exc.strerror or exc}") from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"policy file {path}: not YAML: {str(exc).splitlines()[0]}") from exc
    try:
        return parse_policies(raw)
    except ConfigError as exc:
        raise ConfigError(f"policy file {path}: {exc}") from exc


def parse_policies(raw: Any) -> LinkPolicies:
    """The policies from the file's parsed YAML (``None`` is an empty file); raises :class:`ConfigError`."""
    if raw is None:
        return LinkPolicies()
    _fields(raw, "", required=(), optional=("policies",))
    entries = raw.get("policies") or []
    if not isinstance(entries, list):
        raise ConfigError("policies: must be a list")
    by_namespace: dict[str, list[LinkPolicy]] = {}
    names: set[str] = set()
    for index, entry in enumerate(entries):
        policy = _policy(entry, f"policies[{index}]")
        if policy.name in names:
            raise ConfigError(f"policies[{index}]: name {policy.name!r} is used twice")
        names.add(policy.name)
        by_namespace.setdefault(policy.namespace, []).append(policy)
    return LinkPolicies({namespace: tuple(policies) for namespace, policies in by_namespace.items()})


def _policy(raw: Any, where: str) -> LinkPolicy:
    _fields(raw, where, required=("name", "namespace", "selector", "links"), optional=())
    name = _label(raw["name"], f"{where}.name", "policy name")
    namespace = _label(raw["namespace"], f"{where}.namespace", "namespace")
    selector = parse_selector(raw["selector"], f"{where}.selector")
    entries = raw["links"]
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{where}.links: must be a list of at least one link")
    links = tuple(_link(item, f"{where}.links[{i}]", name) for i, item in enumerate(entries))
    prefixes = [link.prefix for link in links]
    if len(set(prefixes)) != len(prefixes):
        raise ConfigError(f"{where}.links: a prefix is used twice ({', '.join(prefixes)})")
    return LinkPolicy(name, namespace, selector, links)


def _link(raw: Any, where: str, policy: str) -> Link:
    _fields(raw, where, required=("prefix", "service"), optional=("required", "ports"))
    try:
        prefix = parse_prefix(_string(raw["prefix"], f"{where}.prefix"))
        service, namespace, federation = parse_target(_string(raw["service"], f"{where}.service"))
        ports = check_ports(_ports(raw.get("ports") or [], f"{where}.ports"))
    except LinkError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    required = raw.get("required", True)
    if not isinstance(required, bool):
        raise ConfigError(f"{where}.required: must be true or false")
    return Link(prefix, service, namespace, federation, required, ports, f"policy {policy}")


def _ports(raw: Any, where: str) -> tuple[LinkPort, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: must be a list of {{name, port}}")
    ports = []
    for index, item in enumerate(raw):
        _fields(item, f"{where}[{index}]", required=("name", "port"), optional=())
        if isinstance(item["port"], bool) or not isinstance(item["port"], int):
            raise ConfigError(f"{where}[{index}].port: must be a number")
        ports.append(parse_port(f"{_string(item['name'], f'{where}[{index}].name')}:{item['port']}"))
    return tuple(ports)


def _fields(raw: Any, where: str, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    """Raise :class:`ConfigError` unless ``raw`` is a mapping with every required key and no unknown one.

    ``where`` is the entry's path in the file (``policies[0].links[1]``), empty for the top level.
    """
    at = f"{where}: " if where else ""
    if not isinstance(raw, dict):
        raise ConfigError(f"{at}must be a mapping")
    known = required + optional
    for key in raw:
        if key not in known:
            raise ConfigError(f"{at}unknown key {key!r} (expected {', '.join(known)})")
    for key in required:
        if key not in raw:
            raise ConfigError(f"{at}{key} is missing")


def _string(raw: Any, where: str) -> str:
    if not isinstance(raw, str):
        raise ConfigError(f"{where}: must be a string")
    return raw


def _label(raw: Any, where: str, what: str) -> str:
    try:
        return check_label(raw, what)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
