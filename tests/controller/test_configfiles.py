"""The files a controller config names, and the watch over them (controller/configfiles.py)."""

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import yaml

from controller.configfiles import ConfigFiles, named_files, read_document
from tests.controller.harness import REPO


def example() -> dict:
    """The example of docs/controller.md, with a stub-zone endpoint for its first cluster."""
    text = (Path(REPO) / "docs" / "controller.md").read_text()
    raw = yaml.safe_load(text.split("```yaml\n", 1)[1].split("```", 1)[0])
    raw["clusters"][0]["stubzone"] = {"url": "https://10.0.0.20:8443", "cert": "/etc/feddns/stubzone/tls.crt",
                                      "key": "/etc/feddns/stubzone/tls.key", "ca": "/etc/feddns/stubzone/ca.crt"}
    return raw


def strings(node: object) -> list[str]:
    """Every string value under ``node``, in document order."""
    if isinstance(node, dict):
        return [s for value in node.values() for s in strings(value)]
    if isinstance(node, list):
        return [s for item in node for s in strings(item)]
    return [node] if isinstance(node, str) else []


def test_every_path_the_example_gives_is_a_file_it_names():
    raw = example()
    paths = [Path(s) for s in strings(raw) if s.startswith("/")]
    assert len(paths) >= 10  # etcd: 4, kubeconfigs: 2, the stub zone: 3, the TSIG secret
    assert sorted(named_files(raw)) == sorted(paths)


@pytest.mark.parametrize("document", [None, "text", [], {"etcd": []}, {"clusters": {"name": "foo"}},
                                      {"clusters": [None, {"kubeconfig": 3}, {"stubzone": "x"}]},
                                      {"etcd": {"tls": None, "passwordFile": ""}}])
def test_a_document_of_any_shape_names_what_it_can(document):
    assert named_files(document) == []


def test_a_file_that_does_not_decode_is_no_document(tmp_path):
    path = tmp_path / "controller.yaml"
    path.write_bytes(b"clusters: [\n")
    assert read_document(path) is None
    path.write_bytes(b"# caf\xe9\n")
    assert read_document(path) is None
    assert read_document(tmp_path / "missing.yaml") is None


def watching(config: Path, *steps: Callable[[ConfigFiles], Awaitable[None]]) -> None:
    """Run ``steps`` in turn on one :class:`ConfigFiles` of ``config`` (polling every 10 ms)."""

    async def scenario() -> None:
        files = ConfigFiles(config, 0.01)
        for step in steps:
            await step(files)

    asyncio.run(scenario())


async def changes(files: ConfigFiles) -> bool:
    """Whether :meth:`ConfigFiles.changed` returns within a few polls."""
    try:
        await asyncio.wait_for(files.changed(), timeout=0.2)
    except TimeoutError:
        return False
    return True


def write(path: Path, text: str) -> None:
    """Write ``text`` with a modification time a second later than the file had (past the clock's tick)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    after = max(path.stat().st_mtime_ns, before + 1_000_000_000)
    os.utime(path, ns=(after, after))


def test_a_file_named_later_is_watched_from_the_change_that_names_it(tmp_path):
    config = tmp_path / "controller.yaml"
    late = tmp_path / "late.kubeconfig"
    write(config, "clusters: [{name: foo}]\n")

    async def first(files: ConfigFiles) -> None:
        assert await changes(files), "the first call returns at once"
        assert files.paths == (config,)
        assert not await changes(files)

    async def names_late(files: ConfigFiles) -> None:
        write(config, f"clusters: [{{name: foo, kubeconfig: {late}}}]\n")
        assert await changes(files)
        assert files.paths == (config, late)
        assert not await changes(files), "the file named is missing, as it was"

    async def late_arrives(files: ConfigFiles) -> None:
        write(late, "apiVersion: v1\n")
        assert await changes(files), "the file named arrived"
        assert not await changes(files)
        write(late, "apiVersion: v1\nkind: Config\n")
        assert await changes(files), "the file named was rewritten"

    watching(config, first, names_late, late_arrives)


def test_an_alias_bomb_names_no_file(tmp_path):
    path = tmp_path / "controller.yaml"
    path.write_text("m0: &m0 {x: 1}\n" + "".join(f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}]}}\n" for i in range(1, 40))
                    + "etcd: {passwordFile: /p}\n")
    assert read_document(path) is None
