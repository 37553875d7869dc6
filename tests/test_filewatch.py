"""feddns.filewatch: a file's identity follows its symlink chain, a rewrite and a replacement."""

import asyncio
import os
from pathlib import Path

import pytest

from feddns.filewatch import FileWatch, identity


def swap_data(root: Path, name: str, content: str) -> None:
    """Point ``root/..data`` at a new directory holding ``content``, as kubelet's AtomicWriter does."""
    target = root / f"..{name}"
    target.mkdir()
    (target / "tls.crt").write_text(content)
    (root / "..data_tmp").symlink_to(target.name)
    os.replace(root / "..data_tmp", root / "..data")


def test_a_volume_data_swap_is_a_change_even_with_the_same_size_and_time(tmp_path):
    swap_data(tmp_path, "one", "same")
    (tmp_path / "tls.crt").symlink_to("..data/tls.crt")
    watch = FileWatch([tmp_path / "tls.crt"], 1.0)
    assert watch.seen[0] is not None and watch.seen[0][0].endswith("..one/tls.crt")
    assert not watch.changed()
    swap_data(tmp_path, "two", "same")
    os.utime(tmp_path / "..two" / "tls.crt", ns=(0, watch.seen[0][4]))
    assert watch.changed()
    assert watch.seen[0] is not None and watch.seen[0][0].endswith("..two/tls.crt")
    assert not watch.changed()


def test_a_rewrite_a_replacement_and_a_removal_are_changes(tmp_path):
    path = tmp_path / "policies.yaml"
    path.write_text("a: 1\n")
    watch = FileWatch([path], 1.0)
    path.write_text("a: 12\n")
    assert watch.changed()
    new = tmp_path / "new"
    new.write_text("a: 13\n")
    os.utime(new, ns=(0, watch.seen[0][4]))
    new.replace(path)
    assert watch.changed()
    path.unlink()
    assert watch.changed()
    assert watch.seen == (None,)
    assert identity(tmp_path / "dangling") is None


def test_latest_looks_again_only_after_the_interval(tmp_path):
    path = tmp_path / "password"
    path.write_text("one\n")
    watch = FileWatch([path], 3600.0)
    before = watch.latest()
    path.write_text("longer\n")
    assert watch.latest() == before  # looked at less than an interval ago
    assert watch.look() != before


def test_wait_returns_once_a_file_changes(tmp_path):
    path = tmp_path / "records.yaml"
    path.write_text("{}\n")
    watch = FileWatch([path], 0.01)

    async def change_then_wait() -> None:
        waiting = asyncio.ensure_future(watch.wait())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        path.write_text("{}\n# changed\n")
        await asyncio.wait_for(waiting, 5)

    asyncio.run(change_then_wait())
    assert not watch.changed()


def test_a_bad_interval_is_refused(tmp_path):
    with pytest.raises(ValueError, match="positive interval"):
        FileWatch([tmp_path], 0)
