"""feddns.kubeapi against the real client's objects: the core describes and reads them without importing them."""

import base64
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


def test_inline_credentials_are_files_in_memory_and_relative_paths_are_the_kubeconfigs(tmp_path: Path):
    """A container with a read-only root filesystem has no temporary directory: the client must not need
    one for ``certificate-authority-data`` (docs/development.md, "Run as deployed")."""
    ca, key = b"-----BEGIN CERTIFICATE-----\nnot checked here\n", b"key bytes"
    (tmp_path / "client.crt").write_text("client cert")
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: here\n"
        f"clusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:6443', "
        f"certificate-authority-data: {base64.b64encode(ca).decode()}}}}}]\n"
        "users: [{name: u, user: {client-certificate: client.crt, "
        f"client-key-data: {base64.b64encode(key).decode()}}}}}]\n"
        "contexts: [{name: here, context: {cluster: c, user: u}}]\n")
    configuration = kubernetes.client.Configuration()
    load_configuration(kubernetes.config, configuration, kubeconfig, None)
    assert configuration.ssl_ca_cert.startswith("/proc/self/fd/")
    assert Path(configuration.ssl_ca_cert).read_bytes() == ca
    assert Path(configuration.key_file).read_bytes() == key
    assert configuration.cert_file == str(tmp_path / "client.crt")
    again = kubernetes.client.Configuration()
    load_configuration(kubernetes.config, again, kubeconfig, None)
    assert again.ssl_ca_cert == configuration.ssl_ca_cert  # the same credentials reuse one descriptor


def test_inline_data_that_is_not_base64_names_the_cluster(tmp_path: Path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: here\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443', certificate-authority-data: '%%%'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: here, context: {cluster: c, user: u}}]\n")
    with pytest.raises(ConfigError, match=r"c: certificate-authority-data is not base64"):
        load_configuration(kubernetes.config, kubernetes.client.Configuration(), kubeconfig, None)


def test_a_kubeconfig_that_is_not_a_mapping_names_the_file(tmp_path: Path):
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="^" + re.escape(f"--kubeconfig {kubeconfig}: not a kubeconfig")):
        load_configuration(kubernetes.config, kubernetes.client.Configuration(), kubeconfig, None)
