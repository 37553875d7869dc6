"""A directory laid out as kubelet lays out a Secret or ConfigMap volume (its AtomicWriter): each key is
a symlink into ``..data``, itself a symlink to a timestamped directory that one ``rename`` swaps, so a
reader sees the old set of files or the new one, never a mix; a key gone from the object disappears."""

import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path


class KubeletVolume:
    """The volume at ``path`` (made if missing); ``write`` replaces its whole content at once."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def write(self, files: Mapping[str, bytes | str]) -> None:
        """Make the volume hold exactly ``files`` (name -> content): a new directory, then one
        ``rename`` of the ``..data`` link; the links of names no longer there are removed."""
        stamp = self.path / f"..{time.time_ns()}"
        stamp.mkdir()
        for name, content in files.items():
            (stamp / name).write_bytes(content.encode() if isinstance(content, str) else content)
        data = self.path / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        link = self.path / "..data_tmp"
        os.symlink(stamp.name, link)
        os.replace(link, data)
        for name in files:
            if not (self.path / name).is_symlink():
                os.symlink(f"..data/{name}", self.path / name)
        for entry in self.path.iterdir():
            if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in files:
                entry.unlink()
        if old is not None:
            shutil.rmtree(self.path / old)

    def file(self, name: str) -> Path:
        return self.path / name

    def files(self) -> dict[str, str]:
        """What a reader of the volume sees: each key's text."""
        return {p.name: p.read_text() for p in self.path.iterdir() if not p.name.startswith("..")}
