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

Unknown keys and keys given twice are errors, each named with its line and
column (:mod:`feddns.configfile`). The file is checked whole: one bad entry makes the
whole file bad (at start: exit 2; on reload: the policies already loaded stay).
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

from feddns import configfile
from feddns.errors import ConfigError
from feddns.names import check_label
from links.link import Link, LinkError, check_ports, parse_port, parse_prefix, parse_target
from links.selector import LabelSelector, SelectorFile, selector_from


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


def load_policies(path: Path, limit: configfile.SizeLimit | None = None) -> LinkPolicies:
    """Read and check a policy file; raises :class:`ConfigError` naming the file, the bad entry, its
    line and its column (``policy file P: policies[0].links[1].prefix: ... (line 7, column 11)``)."""
    return configfile.load_file(path, f"policy file {path}", parse_policies, limit)


def parse_policies(raw: Any) -> LinkPolicies:
    """The policies from the file's parsed YAML (``None`` is an empty file); raises :class:`ConfigError`
    (``"<key path>: <what is wrong>"``)."""
    if raw is None:
        return LinkPolicies()
    entries = configfile.validate(_PolicyFile, raw).policies
    by_namespace: dict[str, list[LinkPolicy]] = {}
    names: set[str] = set()
    for index, entry in enumerate(entries):
        policy = _policy(entry, f"policies[{index}]")
        if policy.name in names:
            raise ConfigError(f"policies[{index}]: name {policy.name!r} is used twice")
        names.add(policy.name)
        by_namespace.setdefault(policy.namespace, []).append(policy)
    return LinkPolicies({namespace: tuple(policies) for namespace, policies in by_namespace.items()})


def _policy(raw: "_Policy", where: str) -> LinkPolicy:
    name = _label(raw.name, f"{where}.name", "policy name")
    namespace = _label(raw.namespace, f"{where}.namespace", "namespace")
    selector = selector_from(raw.selector, f"{where}.selector")
    links = tuple(_link(item, f"{where}.links[{i}]", name) for i, item in enumerate(raw.links))
    prefixes = [link.prefix for link in links]
    if len(set(prefixes)) != len(prefixes):
        raise ConfigError(f"{where}.links: a prefix is used twice ({', '.join(prefixes)})")
    return LinkPolicy(name, namespace, selector, links)


def _link(raw: "_Link", where: str, policy: str) -> Link:
    try:
        prefix = parse_prefix(raw.prefix)
        service, namespace, federation = parse_target(raw.service)
        ports = check_ports(tuple(parse_port(f"{port.name}:{port.port}") for port in raw.ports))
    except LinkError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    return Link(prefix, service, namespace, federation, raw.required, ports, f"policy {policy}")


def _label(raw: Any, where: str, what: str) -> str:
    try:
        return check_label(raw, what)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


# The file's shape (pydantic models, unknown keys refused); the values are checked above,
# where each error names its entry.

_refuse_unless = configfile.refuse_unless


def _or_empty(value: Any) -> Any:
    return [] if value is None else value


_String = Annotated[str, _refuse_unless(lambda value: isinstance(value, str), "must be a string")]


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class _Port(_Shape):
    name: _String
    port: Annotated[int, _refuse_unless(lambda value: type(value) is int, "must be a number")]


class _Link(_Shape):
    prefix: _String
    service: _String
    required: Annotated[bool, _refuse_unless(lambda value: isinstance(value, bool), "must be true or false")] = True
    # Before validators run last first: None becomes [] before the list is checked.
    ports: Annotated[list[_Port],
                     _refuse_unless(lambda value: isinstance(value, list), "must be a list of {name, port}"),
                     BeforeValidator(_or_empty)] = []


class _Policy(_Shape):
    name: Any
    namespace: Any
    selector: SelectorFile
    links: Annotated[list[_Link], _refuse_unless(lambda value: isinstance(value, list) and value,
                                                 "must be a list of at least one link")]


class _PolicyFile(_Shape):
    policies: Annotated[list[_Policy], _refuse_unless(lambda value: isinstance(value, list), "must be a list"),
                        BeforeValidator(_or_empty)] = []

