"""``feddns status --etcd URL``: a federation at a glance (docs/reference.md section 6).

One range read of every key under the prefix, paged at one revision as serve's first load
reads it (``feddns.snapshot``), bounded by ``--timeout``; each page is counted
(:class:`_Tally`) while the next is read, reading of each shard record only what the answer
rules look at (``ready``, ``policy``, ``failoverOrder``); the services are judged at the end,
once every cluster record is known. It shows each federation's clusters (zone, region, the etcd
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


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _plural(what: str) -> str:
    first, _, rest = what.partition(" ")
    return f"{first}s {rest}" if rest else first + "s"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``feddns status`` flags."""
    snapshot.add_arguments(parser, files=False)


def run(args: argparse.Namespace) -> int:
    """Read etcd once and report; returns the exit status (module docstring)."""
    source = snapshot.source_from(args, files=False)
    tally = _Tally(Status(0))
    cut = len(source.layout.root)
    try:
        revision = snapshot.read_etcd(source, args.timeout, lambda kvs: tally.add(kvs, cut))
    except snapshot.EtcdUnreachable as exc:
        print(logs.error_line("feddns status", str(exc), args.log_format), file=sys.stderr)
        return EXIT_ETCD
    tally.status.revision = revision
    status = tally.status_of()
    if args.output == "json":
        print(json.dumps(asdict(status) | {"problems": status.problems()}, indent=2))
    else:
        print(render(status, f"etcd {', '.join(source.etcd)}, prefix {args.etcd_prefix!r}"))
    return EXIT_DEGRADED if status.problems() else 0


class _Tally:
    """What one pass over up to millions of keys counts, with names as the bytes of the keys
    (decoded once, at the end): ``bits`` numbers each ``(federation, cluster)`` met, whose
    shard count is ``shards[bit]``; ``services`` maps ``(federation, ns, svc)`` to ``[policy,
    disagrees, live]``, ``live`` having the bit of each cluster with a shard that is ready;
    ``records`` holds the cluster records met, with the revision each was written at."""

    def __init__(self, status: Status) -> None:
        self.status = status
        self.bits: dict[tuple[bytes, bytes], int] = {}
        self.shards: list[int] = []
        self.services: dict[tuple[bytes, bytes, bytes], list[Any]] = {}
        self.records: list[tuple[bytes, bytes, dict[str, Any], int]] = []

    def add(self, kvs: Iterable[Any], cut: int) -> None:
        """Count one page. Long because it is the loop every key goes through: it calls
        nothing per shard but what it must (the key's split, the value's JSON parse)."""
        bits, shards, services, loads = self.bits, self.shards, self.services, orjson.loads
        newest = self.status.newest
        for kv in kvs:
            written = kv.mod_revision
            newest = max(newest, written)
            parts = kv.key[cut:].split(b"/")
            try:
                value = loads(kv.value)
            except orjson.JSONDecodeError as exc:
                self._invalid(kv.key, str(exc))
                continue
            if type(value) is not dict:
                self._invalid(kv.key, "not a JSON object")
            elif len(parts) == _KEY_PARTS_SHARD and parts[1] != _CLUSTERS:
                bit = bits.get((parts[0], parts[3]))
                if bit is None:
                    bit = bits[(parts[0], parts[3])] = len(shards)
                    shards.append(0)
                shards[bit] += 1
                live = 0 if value.get("ready") == 0 else 1 << bit  # no ready count: ready (section 2)
                policy = (value.get("policy") or "locality", value.get("failoverOrder"))
                service = services.get((parts[0], parts[1], parts[2]))
                if service is None:
                    services[(parts[0], parts[1], parts[2])] = [policy, False, live]
                else:
                    service[1] = service[1] or policy != service[0]
                    service[2] |= live
            elif len(parts) == _KEY_PARTS_CLUSTER and parts[1] == _CLUSTERS:
                self.records.append((parts[0], parts[2], value, written))
            else:
                self._invalid(kv.key, "not a key of docs/reference.md section 4")
        self.status.newest = newest

    def _invalid(self, key: bytes, why: str) -> None:
        self.status.invalid[key.decode("utf-8", "replace")] = why

    def status_of(self) -> Status:
        """The status: clusters from their records and shard counts, then the services judged."""
        status = self.status
        for (fed, name), bit in self.bits.items():
            _cluster(status, fed.decode(), name.decode()).shards = self.shards[bit]
        dropped = 0
        for fed, name, value, written in self.records:
            cluster = _cluster(status, fed.decode(), name.decode())
            cluster.zone, cluster.region = value.get("zone"), value.get("region")
            cluster.stale = value.get("stale") is True
            cluster.stale_action = value.get("staleAction") or StaleAction.DEMOTE.value
            cluster.record_revision = written
            its = self.bits.get((fed, name))
            if its is not None and cluster.stale and cluster.stale_action == StaleAction.DROP.value:
                dropped |= 1 << its  # its shards are left out of every other cluster's answers
        for (fed, ns, svc), (_, disagrees, live) in sorted(self.services.items()):
            federation = status.federations[fed.decode()]
            federation.services += 1
            if not live & ~dropped:
                federation.no_healthy_shard.append(f"{ns.decode()}/{svc.decode()}")
            if disagrees:
                federation.policy_disagrees.append(f"{ns.decode()}/{svc.decode()}")
        return status


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
        lines += ["", _fit(f"federation {fed.name}: {_count(len(fed.clusters), 'cluster')}, "
                           f"{_count(fed.services, 'service')}, {_count(shards, 'shard')}")]
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
