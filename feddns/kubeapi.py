"""What every component that talks to the Kubernetes API does the same way, without importing the client.

The core imports neither ``kubernetes`` nor ``urllib3`` (``feddns serve`` never
loads them), so the shapes it needs are Protocols that the client's objects
satisfy: a watch response (urllib3's ``HTTPResponse``), an API refusal
(``kubernetes.client.ApiException``: ``status`` and ``reason``), and the
``kubernetes.config`` module, passed in by the caller.

- :func:`watch_lines`: the newline-delimited JSON events of a watch
  (Kubernetes API concepts, "Efficient detection of changes").
- :func:`describe_failure`: one short line for a failed API call, for logs.
- :func:`load_configuration`: the API server and credentials from a kubeconfig
  or the pod's service account, a bad one as :class:`ConfigError` naming the flag.
  Inline credentials (``certificate-authority-data``, ``client-certificate-data``,
  ``client-key-data``) are handed to the client as files in memory
  (:func:`credentials_in_memory`): the client would write each to a temporary file,
  and a container with a read-only root filesystem has no temporary directory.
"""

import base64
import binascii
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import yaml

from feddns.errors import ConfigError


class WatchResponse(Protocol):
    """A streamed HTTP response: urllib3's ``HTTPResponse`` read with ``_preload_content=False``."""

    def stream(self, amt: int | None = ..., decode_content: bool | None = ...) -> Iterator[bytes]:
        """The body, chunk by chunk as it arrives (``amt=None``: each chunk of a chunked response)."""
        ...


@runtime_checkable
class ApiRefusal(Protocol):
    """An answer of the API server that is not a success: ``kubernetes.client.ApiException``."""

    status: int | None
    """The HTTP status (409, 410...)."""
    reason: str | None
    """The HTTP reason phrase (``Conflict``)."""


def watch_lines(response: WatchResponse) -> Iterator[bytes]:
    """The non-blank newline-delimited JSON events of a watch ``response``, each as soon as its line ends."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=True):
        pending += chunk
        if b"\n" in chunk:
            *lines, pending = pending.split(b"\n")
            yield from (line for line in lines if line.strip())
    if pending.strip():
        yield pending


def describe_failure(exc: BaseException) -> str:
    """A failed API call in a few words: ``HTTP 403 Forbidden`` for a refusal, the cause of a failed
    connection (urllib3's ``MaxRetryError.reason``), else ``ExceptionName: message``."""
    if isinstance(exc, ApiRefusal):
        return f"HTTP {exc.status} {exc.reason}"
    cause = getattr(exc, "reason", None)
    if isinstance(cause, BaseException):
        return str(cause)
    return f"{type(exc).__name__}: {exc}"


class KubeConfigModule(Protocol):
    """The loaders of ``kubernetes.config`` this module calls (the caller passes that module)."""

    @property
    def ConfigException(self) -> type[Exception]:
        """The error of a kubeconfig that cannot be used."""

    def load_incluster_config(self, client_configuration: object) -> None:
        """Fill ``client_configuration`` from the pod's service account."""

    def load_kube_config_from_dict(self, config_dict: dict[str, Any], context: str | None,
                                   client_configuration: object, persist_config: bool) -> None:
        """Fill ``client_configuration`` from a kubeconfig document and one of its contexts."""


KEEPALIVE = (15, 5, 3)
"""TCP keep-alive of the Kubernetes API connections, ``(idle, interval, count)``: first probe
after 15 s of silence, then every 5 s, 3 unanswered probes end the connection (client-go
asks for 30 s, 15 s, 9), so a watch on a black-holed API server ends in 30 s, not two hours.
Passed to ``kubernetes.utils.keepalive.tcp_keepalive_socket_options``."""


def load_configuration(config: KubeConfigModule, configuration: object, kubeconfig: str | Path | None,
                       context: str | None, *, source: str = "--kubeconfig") -> None:
    """Fill ``configuration`` (a ``kubernetes.client.Configuration``) from ``kubeconfig`` and ``context``,
    or from the pod's service account when ``kubeconfig`` is ``None``; ``config`` is ``kubernetes.config``.

    Refreshed credentials are not written back to the kubeconfig (often a read-only
    mounted Secret). Raises :class:`ConfigError` naming ``source`` (where the path came
    from: ``--kubeconfig``, or a cluster of the controller's config file) when neither
    can be loaded: a missing file, YAML that is not a kubeconfig, an unknown context,
    no service account.
    """
    try:
        if kubeconfig is None:
            config.load_incluster_config(client_configuration=configuration)
        else:
            document = credentials_in_memory(_read_kubeconfig(Path(kubeconfig)), Path(kubeconfig).parent)
            config.load_kube_config_from_dict(config_dict=document, context=context,
                                              client_configuration=configuration, persist_config=False)
    except (config.ConfigException, OSError, ValueError, yaml.YAMLError) as exc:
        where = f"{source} {kubeconfig}" if kubeconfig is not None else f"no {source} and not in a cluster"
        raise ConfigError(f"{where}: {_first_line(exc)}") from exc


def _read_kubeconfig(path: Path) -> dict[str, Any]:
    """The kubeconfig document at ``path``; ValueError when it is not a YAML mapping."""
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict):
        raise ValueError("not a kubeconfig (a YAML mapping with clusters, users and contexts)")
    return document


CREDENTIAL_FILES = (("cluster", "certificate-authority"), ("user", "client-certificate"), ("user", "client-key"))
"""The kubeconfig fields that name a file and have an inline ``-data`` twin (``clusters[].cluster``,
``users[].user``; kubeconfig format, client-go ``clientcmd/api/v1``)."""
_IN_MEMORY: dict[bytes, str] = {}
"""Paths of the in-memory files made so far, by content: the same credentials reuse one file, so
reloading a kubeconfig does not open another descriptor (bounded by the distinct credentials)."""


def credentials_in_memory(document: dict[str, Any], base: Path) -> dict[str, Any]:
    """A copy of kubeconfig ``document`` whose credential files the client can read without a disk.

    Each ``certificate-authority-data``, ``client-certificate-data`` and ``client-key-data`` (base64,
    as kubeconfig carries them) becomes a ``/proc/self/fd/N`` path to an anonymous in-memory file
    (``memfd_create(2)``), kept open for the life of the process; each relative file path is made
    absolute against ``base``, the kubeconfig's directory (as kubectl reads it). Raises ValueError
    for data that is not base64.
    """
    copy = dict(document)
    for section, entries in (("cluster", "clusters"), ("user", "users")):
        copy[entries] = [_entry_in_memory(entry, section, base) for entry in document.get(entries) or []]
    return copy


def _entry_in_memory(entry: Any, section: str, base: Path) -> Any:
    if not isinstance(entry, dict) or not isinstance(entry.get(section), dict):
        return entry
    fields = dict(entry[section])
    for where, field in CREDENTIAL_FILES:
        if where != section:
            continue
        if data := fields.pop(f"{field}-data", None):
            try:
                fields[field] = _memory_file(base64.b64decode(data, validate=True))
            except (binascii.Error, TypeError) as exc:
                raise ValueError(f"{entry.get('name')}: {field}-data is not base64") from exc
        elif isinstance(fields.get(field), str):
            fields[field] = str(base / fields[field])
    return {**entry, section: fields}


def _memory_file(content: bytes) -> str:
    if (path := _IN_MEMORY.get(content)) is None:
        descriptor = os.memfd_create("kubeconfig-credential")
        os.write(descriptor, content)
        path = _IN_MEMORY[content] = f"/proc/self/fd/{descriptor}"
    return path


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__
