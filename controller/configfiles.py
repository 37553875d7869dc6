"""The controller's config file and the files it names: one watch that tells when any of them changed.

Whether the config loads depends on more than its own text:
:func:`controller.config.load_config` reads each kubeconfig, the etcd TLS and
password files and the TSIG secret, and checks that each stub-zone certificate,
key and CA is a file. A kubelet may deliver a config naming a new cluster
before that cluster's kubeconfig Secret, so the controller tries a config again
when the file or any file it names changes (docs/controller.md, "Reloading the
config"): :class:`ConfigFiles` polls them all (:class:`feddns.filewatch.FileWatch`),
a ``stat`` each, instead of reading the whole file at every poll.

What a config names is read from its YAML document leniently
(:func:`named_files`), not from a loaded
:class:`controller.config.ControllerConfig`: a refused file has none, and it
is the refused file whose files decide when it is worth another try.
"""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import yaml

from feddns.configfile import BoundedLoader
from feddns.filewatch import FileWatch

FILE_KEYS = (
    "etcd.tls.cacert", "etcd.tls.cert", "etcd.tls.key", "etcd.passwordFile",
    "clusters[].kubeconfig", "clusters[].stubzone.cert", "clusters[].stubzone.key", "clusters[].stubzone.ca",
    "external.tsig.secretFile",
)
"""The keys of the config whose values are paths of files it reads (docs/reference.md section 7),
in its error messages' notation: ``clusters[]`` is each item of ``clusters``."""


def named_files(document: object) -> list[Path]:
    """The paths the decoded config ``document`` gives under :data:`FILE_KEYS`, each once, in that order.

    Lenient: a key missing, or a value of the wrong kind, is skipped (the loader says what is
    wrong with it); any document, valid or not, gives a list."""
    found = dict.fromkeys(Path(value) for key in FILE_KEYS for value in _values(document, key.split("."))
                          if isinstance(value, str) and value)
    return list(found)


def _values(node: object, parts: list[str]) -> Iterator[object]:
    """The values at the key path ``parts`` under ``node``, a ``name[]`` part taking each list item."""
    if not parts:
        yield node
        return
    name, rest = parts[0], parts[1:]
    child = node.get(name.removesuffix("[]")) if isinstance(node, dict) else None
    if not name.endswith("[]"):
        yield from _values(child, rest) if child is not None else ()
    elif isinstance(child, list):
        for item in child:
            yield from _values(item, rest)


def read_document(path: Path) -> object:
    """The YAML document at ``path`` (PyYAML's safe loader, refusing an alias bomb:
    :class:`feddns.configfile.BoundedLoader`); ``None`` when it cannot be read or decoded."""
    try:
        with open(path, encoding="utf-8") as stream:
            return yaml.load(stream, Loader=BoundedLoader)  # a safe loader
    except (OSError, yaml.YAMLError, UnicodeDecodeError, RecursionError):
        return None


class ConfigFiles:
    """The config file at ``path`` and the files it names, polled every ``interval`` seconds.

    :meth:`changed` returns once one of them changed; the first call returns at once, so that a
    change made before the watch began is not missed. Raises ``ValueError`` when ``interval``
    is not positive."""

    def __init__(self, path: Path, interval: float) -> None:
        self.path = path
        self._watch = FileWatch([path], interval)
        self._watch.seen = ()  # unlike any look: the first wait returns at once

    @property
    def paths(self) -> tuple[Path, ...]:
        """What is watched now: the config file, then the files it named when last read."""
        return self._watch.paths

    async def changed(self) -> None:
        """Return once the config file or a file it names changed since the last return.

        The files it names are read again from the file first, and their identities taken then:
        the caller loads the config after, so a change made while it loads is reported next time."""
        await self._watch.wait()
        paths = (self.path, *named_files(await asyncio.to_thread(read_document, self.path)))
        if paths != self._watch.paths:
            config_seen = self._watch.seen[0]  # from before the read: a rewrite since is reported next time
            self._watch = FileWatch(paths, self._watch.interval)
            self._watch.seen = (config_seen, *self._watch.seen[1:])
