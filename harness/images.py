"""The container images the node tests run (harness/node.py), made on this machine: no registry
is reached here, so every image comes from Debian's packages, the Go builds of scripts/peers.sh
and this repository.

=====================  ===========================================  ==================================
image                  made from                                    built
=====================  ===========================================  ==================================
base (debian-python)   ``mmdebstrap`` of Debian 12 with ``python3``  scripts/images.sh, once per machine
                       and ``python3-venv``
dnsutils               ``mmdebstrap`` of Debian 12 with ``dig``      scripts/images.sh, once per machine
pause                  ``nodefiles/pause.c``, static                 scripts/images.sh, once per machine
coredns                the CoreDNS peer binary on scratch            scripts/images.sh, once per machine
etcd                   the etcd peer binary on scratch, named as     scripts/images.sh, once per machine
                       the federation chart's ``etcd.statefulset``
                       image (the same etcd version)
feddns                 the repository's ``Dockerfile`` as it is,     the first node test of a source
                       with the base above as both build arguments   tree, then reused by its hash
=====================  ===========================================  ==================================

Each image is a ``docker-archive`` tarball under ``$FEDDNS_PEERS_DIR/images`` that
``ctr images import`` takes. buildah builds them (``--isolation chroot``, vfs storage under the
peers directory); the Dockerfile's ``pip install`` reaches PyPI through the host's network, with
the host's CA bundle and pip configuration mounted read-only.

Run as ``python3 -m harness.images local|peers|pinned|feddns`` (scripts/images.sh): ``local`` makes
every image that needs nothing from scripts/peers.sh (the Debian ones, pause, feddns), so
scripts/test.sh makes them while the Go builds run; ``peers`` the CoreDNS and etcd images after them.
It needs only the standard library, so it runs before the test extras are installed. Each image is
made under a lock file of its own (``flock``), so two runs at once wait for each other's image
instead of both making it.
"""

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness import peers

REPO = peers.REPO
NODEFILES = Path(__file__).parent / "nodefiles"
DEBIAN_SUITE = "bookworm"
"""Debian 12: the distribution and Python (3.11) of the production bases (Dockerfile)."""
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
BASE = "localhost/feddns-node/debian-python:12"
PAUSE = "localhost/feddns-node/pause:1"
DNSUTILS = "localhost/feddns-node/dnsutils:12"
FEDDNS_SOURCES = ("Dockerfile", "pyproject.toml", "README.md", "feddns", "controller", "stubzone", "links")
"""What the Dockerfile copies, and so what the feddns image's cache key hashes."""


class ImageError(RuntimeError):
    """An image could not be made: names the image and quotes the tail of the tool's output."""


@dataclass(frozen=True)
class Image:
    """One image: ``ref`` as pods name it, ``archive`` the docker-archive tarball ``ctr`` imports."""

    ref: str
    archive: Path


def images_dir() -> Path:
    return peers.peers_dir() / "images"


def coredns_ref() -> str:
    return f"localhost/feddns-node/coredns:{peers.versions()['COREDNS_VERSION']}"


def etcd_ref() -> str:
    """The federation chart's own etcd image reference (values.yaml ``etcd.statefulset.image``)."""
    return f"registry.k8s.io/etcd:{peers.versions()['ETCD_VERSION'].lstrip('v')}-0"


def feddns_ref() -> str:
    """The chart's default image: ``ghcr.io/feddns/feddns:<the project's version>``."""
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return f"ghcr.io/feddns/feddns:{line.split('=', 1)[1].strip().strip(chr(34))}"
    raise ImageError("pyproject.toml has no version line")


def _step(text: str) -> None:
    print(f"==> {text}", flush=True)


def _run(image: str, args: list[str], *, log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        out.write(f"$ {' '.join(args)}\n")
        out.flush()
        done = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = "".join(log.read_text(errors="replace").splitlines(keepends=True)[-25:])
        raise ImageError(f"making image {image} failed ({args[0]} exited {done.returncode}); "
                         f"the last lines of {log}:\n{tail}")


class Buildah:
    """buildah over one vfs store in the peers directory (``images/storage``), so the base is
    added once and every later build starts from it."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.root = images_dir() / "storage"
        self.base = ["buildah", "--root", str(self.root), "--runroot", f"/run/feddns-buildah-{os.getuid()}",
                     "--storage-driver", "vfs"]

    def run(self, image: str, *args: str) -> None:
        _run(image, [*self.base, *args], log=self.log)

    def output(self, image: str, *args: str) -> str:
        done = subprocess.run([*self.base, *args], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ImageError(f"making image {image} failed: buildah {args[0]}: {done.stderr.strip()[-2000:]}")
        return done.stdout.strip()

    def has(self, ref: str) -> bool:
        return subprocess.run([*self.base, "inspect", "--type", "image", ref], capture_output=True,
                              check=False).returncode == 0

    def from_files(self, ref: str, files: dict[str, Path], entrypoint: list[str], env: dict[str, str]) -> None:
        """An image of ``files`` (path in the image: file here) on scratch."""
        container = self.output(ref, "from", "scratch")
        try:
            for target, source in files.items():
                self.run(ref, "copy", "--chmod", "0755", container, str(source), target)
            config = ["config", "--entrypoint", _json(entrypoint)]
            for key, value in env.items():
                config += ["--env", f"{key}={value}"]
            self.run(ref, *config, container)
            self.run(ref, "commit", "-q", container, ref)
        finally:
            subprocess.run([*self.base, "rm", container], capture_output=True, check=False)

    def export(self, ref: str, archive: Path) -> Image:
        """``ref`` as a docker-archive at ``archive`` (written beside it, then renamed)."""
        partial = archive.with_suffix(".partial")
        partial.unlink(missing_ok=True)
        self.run(ref, "push", "-q", ref, f"docker-archive:{partial}:{ref}")
        partial.rename(archive)
        return Image(ref, archive)


def _json(values: list[str]) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def _log() -> Path:
    return images_dir() / "logs" / "images.log"


@contextmanager
def _locked(name: str) -> Iterator[None]:
    """Hold ``images_dir()/name.lock`` exclusively: one process makes image ``name`` at a time."""
    images_dir().mkdir(parents=True, exist_ok=True)
    with open(images_dir() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def debian_image(buildah: Buildah, ref: str, packages: tuple[str, ...], name: str) -> Image:
    """Debian 12 (minbase) with ``packages``, by mmdebstrap (about 100 s and 200 MB once)."""
    with _locked(name):
        return _debian_image(buildah, ref, packages, images_dir() / f"{name}-{DEBIAN_SUITE}.tar")


def _debian_image(buildah: Buildah, ref: str, packages: tuple[str, ...], archive: Path) -> Image:
    if archive.exists() and buildah.has(ref):
        return Image(ref, archive)
    _step(f"image {ref}: mmdebstrap {DEBIAN_SUITE} with {', '.join(packages)} (about 2 minutes)")
    with tempfile.TemporaryDirectory(prefix="feddns-debian-") as scratch:
        rootfs = Path(scratch) / "rootfs.tar"
        _run(ref, ["mmdebstrap", "--variant=minbase", f"--include={','.join(packages)}",
                   "--dpkgopt=path-exclude=/usr/share/{doc,man,info,locale}/*", DEBIAN_SUITE, str(rootfs)],
             log=_log())
        container = buildah.output(ref, "from", "scratch")
        try:
            buildah.run(ref, "add", "-q", container, str(rootfs), "/")
            buildah.run(ref, "config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        container)
            buildah.run(ref, "commit", "-q", container, ref)
        finally:
            subprocess.run([*buildah.base, "rm", container], capture_output=True, check=False)
    return buildah.export(ref, archive)


def base_image(buildah: Buildah) -> Image:
    """Debian 12 with its python3 and python3-venv: both bases of the Dockerfile."""
    return debian_image(buildah, BASE, BASE_PACKAGES, "debian-python")


def dnsutils_image(buildah: Buildah) -> Image:
    """Debian 12 with dig (bind9-dnsutils): the client pods that look names up."""
    return debian_image(buildah, DNSUTILS, ("bind9-dnsutils",), "dnsutils")


def pause_image(buildah: Buildah) -> Image:
    """The pod sandbox's image: nodefiles/pause.c compiled static."""
    archive = images_dir() / "pause.tar"
    with _locked("pause"):
        if archive.exists():
            return Image(PAUSE, archive)
        _step(f"image {PAUSE}: cc -static nodefiles/pause.c")
        return _pause_image(buildah, archive)


def _pause_image(buildah: Buildah, archive: Path) -> Image:
    with tempfile.TemporaryDirectory(prefix="feddns-pause-") as scratch:
        binary = Path(scratch) / "pause"
        _run(PAUSE, ["cc", "-static", "-O2", "-o", str(binary), str(NODEFILES / "pause.c")], log=_log())
        buildah.from_files(PAUSE, {"/pause": binary}, ["/pause"], {})
    return buildah.export(PAUSE, archive)


def binary_image(buildah: Buildah, ref: str, binary: str, target: str, name: str) -> Image:
    """A peer's static Go binary at ``target`` on scratch, its entrypoint."""
    archive = images_dir() / f"{name}.tar"
    with _locked(name):
        if archive.exists():
            return Image(ref, archive)
        _step(f"image {ref}: {binary} on scratch")
        buildah.from_files(ref, {target: Path(binary)}, [target], {"PATH": str(Path(target).parent)})
        return buildah.export(ref, archive)


def local_images() -> list[Image]:
    """The pinned images made from Debian's packages and this repository (base, dnsutils, pause)."""
    buildah = Buildah(_log())
    return [base_image(buildah), dnsutils_image(buildah), pause_image(buildah)]


def peer_images() -> list[Image]:
    """The pinned images of peer binaries (CoreDNS, etcd): they need scripts/peers.sh's builds."""
    buildah = Buildah(_log())
    versions = peers.versions()
    return [
        binary_image(buildah, coredns_ref(), peers.binary("coredns"), "/coredns",
                     f"coredns-{versions['COREDNS_VERSION']}"),
        binary_image(buildah, etcd_ref(), peers.binary("etcd"), "/usr/local/bin/etcd",
                     f"etcd-{versions['ETCD_VERSION']}"),
    ]


def pinned_images() -> list[Image]:
    """The images whose parts are pinned (base, pause, CoreDNS, etcd), made once per machine."""
    return local_images() + peer_images()


def source_hash() -> str:
    """A digest of everything the Dockerfile copies (file names, modes and bytes; caches skipped)."""
    digest = hashlib.sha256()
    for top in FEDDNS_SOURCES:
        path = REPO / top
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if "__pycache__" in file.parts or file.suffix == ".pyc":
                continue
            digest.update(str(file.relative_to(REPO)).encode() + b"\0")
            digest.update(file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def feddns_image() -> Image:
    """The image of this source tree, built from the Dockerfile as it is (both bases: ``BASE``);
    reused while the sources hash the same. Older builds are removed."""
    buildah = Buildah(_log())
    base_image(buildah)
    ref = feddns_ref()
    archive = images_dir() / f"feddns-{source_hash()}.tar"
    with _locked("feddns"):
        return _feddns_image(buildah, ref, archive)


def _feddns_image(buildah: Buildah, ref: str, archive: Path) -> Image:
    if archive.exists():
        return Image(ref, archive)
    _step(f"image {ref}: buildah bud of the Dockerfile (a few minutes; log {_log()})")
    for old in images_dir().glob("feddns-*.tar"):
        old.unlink()
    mounts = [f"{path}:{path}:ro" for path in ("/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf")
              if Path(path).exists()]
    buildah.run(ref, "bud", "-q", "--isolation", "chroot", "--network", "host", "--layers=false",
                "--build-arg", f"BUILD_BASE={BASE}", "--build-arg", f"RUNTIME_BASE={BASE}",
                *(arg for mount in mounts for arg in ("-v", mount)), "-t", ref, str(REPO))
    image = buildah.export(ref, archive)
    buildah.output(ref, "rmi", "--prune")  # the build stage's layers: kept, they fill the disk
    return image


def image_size(image: Image) -> int:
    """Bytes of the image's archive (its layers uncompressed)."""
    return image.archive.stat().st_size


def _local_and_feddns() -> list[Image]:
    return [*local_images(), feddns_image()]


def _feddns_only() -> list[Image]:
    return [feddns_image()]


MAKERS: dict[str, Callable[[], list[Image]]] = {
    "local": _local_and_feddns, "peers": peer_images, "pinned": pinned_images, "feddns": _feddns_only}
"""What each command-line argument makes."""


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in MAKERS:
        print(f"usage: python3 -m harness.images {'|'.join(MAKERS)}", file=sys.stderr)
        return 2
    if shutil.which("buildah") is None:
        print("harness.images: buildah is not installed (scripts/test.sh installs it)", file=sys.stderr)
        return 1
    try:
        made = MAKERS[argv[0]]()
    except (ImageError, FileNotFoundError) as exc:
        print(f"harness.images: {exc}", file=sys.stderr)
        return 1
    for image in made:
        print(f"{image.ref} {image.archive} {image_size(image)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
