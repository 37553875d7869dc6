"""The records file of ``feddns serve --records``: read, and checked whole, before anything is served.

A YAML map from the etcd keys of docs/reference.md section 4 to their values,
each a YAML map or a JSON string. The values are checked by the reader etcd's
values go through (:func:`feddns.dns.index.check_record`), so a file and etcd
accept the same records; the file is also held to its shape
(:mod:`feddns.configfile`): a key given twice (in YAML, or inside a JSON string
value) and a field the record model does not have (``clusterIp:`` for
``clusterIP:``, checked before the values, so that it is named) are errors here,
where etcd's reader ignores unknown fields so that newer writers do not break
older servers. Every error names the file, the etcd key, the line and the column.

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


def read_records(path: Path, layout: Layout, limit: configfile.SizeLimit | None = None) -> list[tuple[str, bytes]]:
    """Read and check a records file; returns ``(key, JSON bytes)`` pairs in file order.

    Raises :class:`ConfigError` ``"records file <path>: <key>: <what is wrong> (line L, column C)"``
    for the first bad record, key given twice, unknown field or YAML error, and
    ``"records file <path>: N bytes, over the limit of M bytes (--max-records-size); not read"``
    for a file over ``limit``, before reading it.
    """
    return configfile.load_file(path, f"records file {path}", lambda data: parse_records(data, layout), limit)


def parse_records(data: object, layout: Layout) -> list[tuple[str, bytes]]:
    """The ``(key, JSON bytes)`` pairs of a decoded records file (``None``: empty); raises
    :class:`ConfigError` (``"<key>: <what is wrong>"``)."""
    if data is None:
        return []
    if not isinstance(data, dict):
        raise ConfigError("must be a map from etcd keys to records")
    return [_record(layout, str(key), raw) for key, raw in data.items()]


def _record(layout: Layout, key: str, raw: object) -> tuple[str, bytes]:
    """One record, checked in the order that names the cause: its key, then (for a JSON
    string) its JSON, its shape (a misspelled field before the value it leaves out), then
    its values, as etcd's reader checks them."""
    try:
        model = _Cluster if isinstance(layout.parse(key), ClusterKey) else _Shard
    except RecordError as exc:
        raise configfile.FieldError(str(exc), [key]) from exc
    value = _decode_json_value(key, raw) if isinstance(raw, str) else raw
    try:
        configfile.validate(model, value, _WORDING, at=(key,))
    except configfile.FieldError as exc:
        if isinstance(raw, str) and len(exc.loc) == 1:  # the value is no object: point at the string
            raise configfile.FieldError(str(exc), [key, _IN_STRING]) from exc
        raise
    stored = _value_bytes(key, raw)
    try:
        check_record(layout, key, stored)
    except RecordError as exc:
        raise configfile.FieldError(str(exc), [key, *_field_named(str(exc).removeprefix(f"{key}: "), value)]) from exc
    return key, stored


_IN_STRING = "(in its JSON string)"
"""A key path part past a JSON string value: the line and column found are the string's."""


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s ``object_pairs_hook``: the object, unless a key is given twice in it."""
    value: dict[str, Any] = {}
    for key, item in pairs:
        if key in value:
            raise _DuplicateKey(key)
        value[key] = item
    return value


def _decode_json_value(key: str, text: str) -> Any:
    """A JSON string value decoded, refusing a key given twice in one object (RFC 8259 section 4
    leaves it to the reader; YAML's loader refuses it, and so does this file). Only the file is
    read this way: etcd's values go through the faster :func:`feddns.records.decode_json`.
    An error points at the string (a key path into it ends there)."""
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicates)
    except _DuplicateKey as exc:
        raise configfile.FieldError(f"{key}: duplicate key {exc.key!r} in its JSON value", [key, exc.key]) from exc
    except json.JSONDecodeError as exc:
        raise configfile.FieldError(f"{key}: value is not JSON: {exc.msg} at character {exc.pos + 1} of the string",
                                    [key, _IN_STRING]) from exc


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
    none_ready: Any = Field(None, alias="noneReady")
    ttl: Any = None
    endpoints: list[_Endpoint] | None = None


class _Cluster(_Shape):
    zone: Any = None
    region: Any = None
    cidrs: Any = None
    pod_network: Any = Field(None, alias="podNetwork")
    stale: Any = None
    stale_action: Any = Field(None, alias="staleAction")


_WORDING = configfile.Wording(  # a record is a JSON object (docs/reference.md section 4), in etcd and here
    not_a_mapping=lambda where, value: (f"{configfile.keypath(where)}: must be a JSON object, "
                                        f"not {configfile.kind(value)}"),
)
