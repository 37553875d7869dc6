"""feddns.kubeapi against the real client's objects: the core describes and reads them without importing them."""

import re
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import kubernetes.config
import pytest
import urllib3.exceptions

from feddns.errors import ConfigError
from feddns.kubeapi import describe_failure, load_configuration, watch_lines


class Chunks:
    """A watch response whose body arrives in the given chunks."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = chunks

    def stream(self, amt: int | None = None, decode_content: bool | None = None) -> Iterator[bytes]:
        yield from self.chunks


def test_watch_lines_are_split_where_they_end_not_where_chunks_end():
    response = Chunks(b'{"type":"ADD', b'ED"}\n{"type":"DELETED"}\n\n{"ty', b'pe":"BOOKMARK"}')
    assert list(watch_lines(response)) == [b'{"type":"ADDED"}', b'{"type":"DELETED"}', b'{"type":"BOOKMARK"}']


def test_an_api_refusal_is_its_status_and_reason():
    assert describe_failure(kubernetes.client.ApiException(status=403, reason="Forbidden")) == "HTTP 403 Forbidden"


def test_a_failed_connection_is_its_cause():
    cause = urllib3.exceptions.NewConnectionError(None, "Connection refused")
    failure = urllib3.exceptions.MaxRetryError(None, "/api/v1/services", cause)  # type: ignore[arg-type]
    assert describe_failure(failure) == str(cause)


def test_anything_else_is_its_type_and_message():
    assert describe_failure(TimeoutError("read timed out")) == "TimeoutError: read timed out"


def test_a_missing_kubeconfig_names_the_flag(tmp_path: Path):
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match="^" + re.escape(f"--kubeconfig {missing}: ")):
        load_configuration(kubernetes.config, kubernetes.client.Configuration(), missing, None)


def test_no_kubeconfig_outside_a_pod_says_so(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match=r"^no --kubeconfig and not in a cluster: "):
        load_configuration(kubernetes.config, kubernetes.client.Configuration(), None, None)


def test_a_kubeconfig_fills_the_configuration(tmp_path: Path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: here\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: secret}}]\n"
        "contexts: [{name: here, context: {cluster: c, user: u}}]\n")
    configuration = kubernetes.client.Configuration()
    load_configuration(kubernetes.config, configuration, kubeconfig, None)
    assert configuration.host == "https://127.0.0.1:6443"
    assert "Bearer secret" in configuration.api_key.values()
