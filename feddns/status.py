"""``feddns status --etcd URL``: a federation at a glance (docs/reference.md section 6).

One range read of every key under the prefix, paged at one revision as serve's first load
reads it (``feddns.snapshot``), bounded by ``--timeout``; then one pass over the keys and
values, which reads of each shard record only what the answer rules look at (``ready``,
``policy``, ``failoverOrder``). It shows each federation's clusters (zone, region, the etcd
revision their record was last written at, stale or not, shard count), the services with no
healthy shard, the services whose shards disagree on policy (serve then answers them with
the default, docs/reference.md section 2), the keys that are no record, and the revision.

Nothing in etcd holds a heartbeat: the controller marks a cluster ``"stale": true`` in its
record after ``staleAfterSeconds`` without reaching it, and the revision of that write is the
last sign of the controller shown here (its metric
``feddns_controller_cluster_last_sync_timestamp_seconds`` has the time).

Exit status: 0 healthy, 1 degraded (a stale cluster, a service with no healthy shard, shards
that disagree on policy, a key that is no record), 2 bad flags, 3 etcd unreachable (said
within ``--timeout``).
"""

import argparse
import json
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from feddns import logs, snapshot
from feddns.records import StaleAction

EXIT_DEGRADED = 1
EXIT_ETCD = 3
SHOWN = 20
"""Services of each kind the text names at most (the count is always given; JSON lists all)."""
_CLUSTERS = b"_clusters"
_KEY_PARTS_SHARD = 4  # F/<ns>/<svc>/C
_KEY_PARTS_CLUSTER = 3  # F/_clusters/C


@dataclass
class Cluster:
    """A member cluster as etcd shows it: from its record (``None`` fields: no record) and
    its shards; ``record_revision`` is the etcd revision its record was last written at."""

    name: str
    zone: str | None = None
    region: str | None = None
    stale: bool = False
    stale_action: str = StaleAction.DEMOTE.value
    record_revision: int | None = None
    shards: int = 0


@dataclass
class Federation:
    """One federation: its clusters by name, its service count, and the services (``ns/svc``)
    with no healthy shard and those whose shards disagree on policy."""

    name: str
    clusters: dict[str, Cluster] = field(default_factory=dict)
    services: int = 0
    no_healthy_shard: list[str] = field(default_factory=list)
    policy_disagrees: list[str] = field(default_factory=list)


@dataclass
class Status:
    """What ``feddns status`` reports: the revision read at, the newest record's revision,
    the federations by name, the keys that are no record (``invalid``: key to why)."""

    revision: int
    newest: int = 0
    federations: dict[str, Federation] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)

    def problems(self) -> list[str]:
        """What is degraded, one phrase each (empty: nothing)."""
        out = []
        stale = sum(c.stale for f in self.federations.values() for c in f.clusters.values())
        for count, what in ((stale, "stale cluster"),
                            (sum(len(f.no_healthy_shard) for f in self.federations.values()),
                             "service with no healthy shard"),
                            (sum(len(f.policy_disagrees) for f in self.federations.values()),
                             "service whose shards disagree on policy"),
                            (len(self.invalid), "key that is no record")):
            if count:
                out.append(f"{count} {what}" if count == 1 else f"{count} {_plural(what)}")
        return out


def _plural(what: str) -> str:
    first, _, rest = what.partition(" ")
    return f"{first}s {rest}" if rest else first + "s"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``feddns status`` flags."""
    snapshot.add_arguments(parser, files=False)


def run(args: argparse.Namespace) -> int:
    """Read etcd once and report; returns the exit status (module docstring)."""
    source = snapshot.source_from(args, files=False)
    try:
        pages, revision = snapshot.read_etcd(source, args.timeout)
    except snapshot.EtcdUnreachable as exc:
        print(logs.error_line("feddns status", str(exc), args.log_format), file=sys.stderr)
        return EXIT_ETCD
    status = survey(pages, source.layout.root.encode(), revision)
    if args.output == "json":
        print(json.dumps(asdict(status) | {"problems": status.problems()}, indent=2))
    else:
        print(render(status, f"etcd {', '.join(source.etcd)}, prefix {args.etcd_prefix!r}"))
    return EXIT_DEGRADED if status.problems() else 0


class _Service:
    """What one service's shards say, as the pass meets them."""

    __slots__ = ("disagrees", "live", "policy", "shards")

    def __init__(self, policy: tuple[Any, Any]) -> None:
        self.policy = policy
        self.disagrees = False
        self.live: list[str] = []
        self.shards = 0


def survey(pages: Iterable[Iterable[Any]], root: bytes, revision: int) -> Status:
    """The status of the etcd ``KeyValue`` messages of ``pages`` (keys under ``root``, read at
    ``revision``): one pass, then each service judged once every cluster record is known."""
    status = Status(revision)
    services: dict[tuple[str, str, str], _Service] = {}
    cut = len(root)
    for kvs in pages:
        for kv in kvs:
            status.newest = max(status.newest, kv.mod_revision)
            parts = kv.key[cut:].lstrip(b"/").split(b"/")
            value = _value(status, kv)
            if value is None:
                continue
            if len(parts) == _KEY_PARTS_SHARD and parts[1] != _CLUSTERS:
                _add_shard(status, services, parts, value)
            elif len(parts) == _KEY_PARTS_CLUSTER and parts[1] == _CLUSTERS:
                _add_cluster(_cluster(status, parts[0].decode(), parts[2].decode()), value, kv.mod_revision)
            else:
                status.invalid[kv.key.decode("utf-8", "replace")] = "not a key of docs/reference.md section 4"
    _judge(status, services)
    return status


def _value(status: Status, kv: Any) -> dict[str, Any] | None:
    """The record of ``kv`` as a JSON object, or ``None`` (noted in ``status.invalid``)."""
    try:
        value = orjson.loads(kv.value)
    except orjson.JSONDecodeError as exc:
        status.invalid[kv.key.decode("utf-8", "replace")] = str(exc)
        return None
    if not isinstance(value, dict):
        status.invalid[kv.key.decode("utf-8", "replace")] = "not a JSON object"
        return None
    return value


def _add_shard(status: Status, services: dict[tuple[str, str, str], _Service], parts: list[bytes],
               value: dict[str, Any]) -> None:
    """Count one shard record (key ``parts`` F, ns, svc, C) in its service and its cluster."""
    fed, ns, svc, cluster = (part.decode() for part in parts)
    service = services.get((fed, ns, svc))
    policy = (value.get("policy") or "locality", value.get("failoverOrder"))
    if service is None:
        service = services[(fed, ns, svc)] = _Service(policy)
    elif policy != service.policy:
        service.disagrees = True
    service.shards += 1
    if value.get("ready") != 0:  # no ready count: ready (docs/reference.md section 2)
        service.live.append(cluster)
    _cluster(status, fed, cluster).shards += 1


def _add_cluster(cluster: Cluster, value: dict[str, Any], revision: int) -> None:
    """Fill ``cluster`` from its record, written at ``revision``."""
    cluster.zone, cluster.region = value.get("zone"), value.get("region")
    cluster.stale = value.get("stale") is True
    cluster.stale_action = value.get("staleAction") or StaleAction.DEMOTE.value
    cluster.record_revision = revision


def _judge(status: Status, services: dict[tuple[str, str, str], _Service]) -> None:
    """Note the services with no healthy shard and those whose shards disagree on policy."""
    for (fed, ns, svc), service in sorted(services.items()):
        federation = status.federations[fed]
        federation.services += 1
        clusters = federation.clusters
        if not any(not (clusters[c].stale and clusters[c].stale_action == StaleAction.DROP.value)
                   for c in service.live):
            federation.no_healthy_shard.append(f"{ns}/{svc}")
        if service.disagrees:
            federation.policy_disagrees.append(f"{ns}/{svc}")


def _cluster(status: Status, fed: str, name: str) -> Cluster:
    federation = status.federations.get(fed)
    if federation is None:
        federation = status.federations[fed] = Federation(fed)
    cluster = federation.clusters.get(name)
    if cluster is None:
        cluster = federation.clusters[name] = Cluster(name)
    return cluster


def render(status: Status, where: str) -> str:
    """The text of ``status``: lines of at most 100 characters (long names are cut with ``~``)."""
    lines = [_fit(f"{where}: revision {status.revision}, newest record written at {status.newest}")]
    for fed in sorted(status.federations.values(), key=lambda f: f.name):
        shards = sum(c.shards for c in fed.clusters.values())
        lines += ["", _fit(f"federation {fed.name}: {len(fed.clusters)} clusters, {fed.services} services, "
                           f"{shards} shards")]
        rows = [("cluster", "zone", "region", "record rev", "stale", "shards")]
        rows += [(c.name, c.zone or "-", c.region or "-", str(c.record_revision or "-"),
                  (f"yes ({c.stale_action})" if c.stale else "no") if c.record_revision else "no record",
                  str(c.shards)) for c in sorted(fed.clusters.values(), key=lambda c: c.name)]
        widths = [min(max(len(row[i]) for row in rows), 24) for i in range(6)]
        lines += ["  " + "  ".join(_cut(cell, width).ljust(width) for cell, width in zip(row, widths, strict=True))
                  .rstrip() for row in rows]
        for title, names in (("services with no healthy shard", fed.no_healthy_shard),
                             ("services whose shards disagree on policy", fed.policy_disagrees)):
            lines.append(_fit(f"  {title}: {len(names) or 'none'}"))
            lines += [_fit(f"    {name}") for name in names[:SHOWN]]
            if len(names) > SHOWN:
                lines.append(f"    ... and {len(names) - SHOWN} more (--output json lists all)")
    if status.invalid:
        lines += ["", f"keys that are no record: {len(status.invalid)}"]
        lines += [_fit(f"  {key}: {why}") for key, why in sorted(status.invalid.items())[:SHOWN]]
    problems = status.problems()
    lines += ["", "degraded:" if problems else "healthy"] + [f"  {problem}" for problem in problems]
    return "\n".join(lines)


WIDTH = 100
"""Columns the text fits in."""


def _fit(line: str) -> str:
    return _cut(line, WIDTH)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"
