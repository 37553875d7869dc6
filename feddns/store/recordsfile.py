"""The records file of ``feddns serve --records``: read, and checked whole, before anything is served.

A YAML map from the etcd keys of docs/reference.md section 4 to their values,
each a YAML map or a JSON string. The values are checked by the reader etcd's
values go through (:func:`feddns.dns.index.check_record`), so a file and etcd
accept the same records; the file is also held to its shape
(:mod:`feddns.configfile`): a key given twice and a field the record model does
not have (``clusterIp:`` for ``clusterIP:``) are errors here, where etcd's reader
ignores unknown fields so that newer writers do not break older servers. Every
error names the file, the etcd key, the line and the column.

:class:`feddns.store.file.FileSource` follows the file and reloads it.
"""

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from feddns import configfile
from feddns.dns.index import check_record
from feddns.errors import ConfigError, RecordError
from feddns.keys import ClusterKey, Layout
from feddns.records import decode_json


def read_records(path: Path, layout: Layout) -> list[tuple[str, bytes]]:
    """Read and check a records file; returns ``(key, JSON bytes)`` pairs in file order.

    Raises :class:`ConfigError` ``"records file <path>: <key>: <what is wrong> (line L, column C)"``
    for the first bad record, key given twice, unknown field or YAML error.
    """
    return configfile.load_file(path, f"records file {path}", lambda data: parse_records(data, layout))


def parse_records(data: object, layout: Layout) -> list[tuple[str, bytes]]:
    """The ``(key, JSON bytes)`` pairs of a decoded records file (``None``: empty); raises
    :class:`ConfigError` (``"<key>: <what is wrong>"``)."""
    if data is None:
        return []
    if not isinstance(data, dict):
        raise ConfigError("must be a map from etcd keys to records")
    items = [(str(key), _value_bytes(str(key), value)) for key, value in data.items()]
    for (key, value), raw in zip(items, data.values(), strict=True):
        try:
            check_record(layout, key, value)
        except RecordError as exc:
            raise configfile.FieldError(str(exc), [key, *_field_named(str(exc).removeprefix(f"{key}: "), raw)]) from exc
        model = _Cluster if isinstance(layout.parse(key), ClusterKey) else _Shard
        configfile.validate(model, decode_json(value) if isinstance(raw, str) else raw, _WORDING, at=(key,))
    return items


def _field_named(message: str, value: object) -> list[str]:
    """The field of ``value`` that a record error's ``message`` starts with (``clusterIPs``
    for a bad ``clusterIP``), to point at its line; none when the value has no such field."""
    match = re.match(r"[A-Za-z]+", message)
    word = match.group() if match else ""
    fields = value if isinstance(value, dict) else {}
    return next(([name] for name in (word, word.removesuffix("s")) if name and name in fields), [])


def _value_bytes(key: str, value: object) -> bytes:
    if isinstance(value, str):
        return value.encode()
    try:
        return json.dumps(value).encode()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{key}: value {value!r} cannot be stored as JSON") from exc


# The fields of docs/reference.md section 4; their values are check_record's to check.

class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Port(_Shape):
    name: Any = None
    protocol: Any = None
    port: Any = None


class _Endpoint(_Shape):
    ip: Any = None
    hostname: Any = None


class _Shard(_Shape):
    cluster_ip: Any = Field(None, alias="clusterIP")
    cluster_ips: Any = Field(None, alias="clusterIPs")
    external_ip: Any = Field(None, alias="externalIP")
    external_ips: Any = Field(None, alias="externalIPs")
    ports: list[_Port] | None = None
    ready: Any = None
    policy: Any = None
    failover_order: Any = Field(None, alias="failoverOrder")
    weight: Any = None
    endpoints: list[_Endpoint] | None = None


class _Cluster(_Shape):
    zone: Any = None
    region: Any = None
    cidrs: Any = None
    pod_network: Any = Field(None, alias="podNetwork")
    stale: Any = None
    stale_action: Any = Field(None, alias="staleAction")


_WORDING = configfile.Wording(
    unknown_key=lambda parent, key, known: f"{configfile.keypath(parent)}: unknown field {key!r} "
                                           f"(known: {', '.join(known)})",
    missing=lambda parent, key: f"{configfile.keypath(parent)}: {key} is missing",
    not_a_mapping=lambda where, value: (f"{configfile.keypath(where)}: must be a JSON object, "
                                        f"not {configfile.kind(value)}"),
)
