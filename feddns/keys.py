"""The etcd key layout of docs/reference.md section 4; the only module that knows it.

With prefix P (``--etcd-prefix``, default empty):

* ``P/F/<ns>/<svc>/C`` holds the shard record of service ``<ns>/<svc>`` of
  federation F in cluster C (:class:`ShardKey`);
* ``P/F/_clusters/C`` holds the cluster record of C in F (:class:`ClusterKey`).

With an empty prefix keys start at ``/`` exactly as in the design document
("DNS Record Creation"): ``/myfederation/myns/myservice/foo``.
"""

import re
import sys
from dataclasses import dataclass

from feddns import names
from feddns.errors import ConfigError, RecordError

CLUSTERS = "_clusters"
"""The reserved namespace slot of cluster records (``_`` keeps it apart from
every Kubernetes namespace name)."""

CLUSTER_KEY_PARTS = 3
"""``F/_clusters/C``: the parts of a cluster key below the prefix."""
SHARD_KEY_PARTS = 4
"""``F/<ns>/<svc>/C``: the parts of a shard key below the prefix."""


@dataclass(frozen=True, slots=True)
class ShardKey:
    """Key of one shard (``<prefix>/F/<ns>/<svc>/C``): the Service ``namespace/service`` of
    federation F (its label under ``svc.federation.``) in member cluster C (as the controller's
    config names it); ``namespace`` and ``service`` are the Service's ``metadata``."""

    federation: str
    namespace: str
    service: str
    cluster: str


@dataclass(frozen=True, slots=True)
class ClusterKey:
    """Key of one cluster record (``<prefix>/F/_clusters/C``: a member's zone, region and CIDRs)."""

    federation: str
    cluster: str


class Layout:
    """Builds and parses keys under one prefix.

    ``prefix`` is ``""`` or a path such as ``/feddns`` (a trailing ``/`` is
    dropped). Raises :class:`ConfigError` for a prefix not starting with ``/``.
    """

    def __init__(self, prefix: str = "") -> None:
        prefix = prefix.rstrip("/")
        if prefix and not prefix.startswith("/"):
            raise ConfigError(f"etcd prefix {prefix!r} must start with '/'")
        self.prefix = prefix
        label = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
        self._pattern = re.compile(
            rf"{re.escape(self.root)}({label})/(?:{CLUSTERS}/({label})|({label})/({label})/({label}))\Z"
        )

    @property
    def root(self) -> str:
        """Every key of every federation starts with this string (``P/``)."""
        return self.prefix + "/"

    def federation_prefix(self, federation: str) -> str:
        """The prefix of all keys of one federation (``P/F/``)."""
        return f"{self.prefix}/{federation}/"

    def shard_key(self, key: ShardKey) -> str:
        """``P/F/<ns>/<svc>/C`` for ``key``."""
        return f"{self.prefix}/{key.federation}/{key.namespace}/{key.service}/{key.cluster}"

    def cluster_key(self, key: ClusterKey) -> str:
        """``P/F/_clusters/C`` for ``key``."""
        return f"{self.prefix}/{key.federation}/{CLUSTERS}/{key.cluster}"

    def shard_key_of(self, parts: tuple[str, str, str, str]) -> str:
        """``P/F/<ns>/<svc>/C`` for the parts :meth:`split` returns."""
        return f"{self.prefix}/{parts[0]}/{parts[1]}/{parts[2]}/{parts[3]}"

    def cluster_key_of(self, federation: str, cluster: str) -> str:
        """``P/F/_clusters/C``."""
        return f"{self.prefix}/{federation}/{CLUSTERS}/{cluster}"

    def election_key(self, federation: str) -> str:
        """The controller replicas' leader-election key for ``federation``.

        ``feddns-controller-leader<P>/<F>``: it does not start with ``/``, so it
        lies outside every Federated-DNS prefix and ``feddns serve`` never reads it.
        """
        return f"feddns-controller-leader{self.prefix}/{federation}"

    def split(self, key: str) -> tuple[str, str, str, str] | tuple[str, str]:
        """The parts of a valid key: ``(F, ns, svc, C)`` for a shard key, ``(F, C)`` for a
        cluster key. One regular-expression match (a first load splits a million
        keys); raises :class:`RecordError` as :meth:`parse` does."""
        match = self._pattern.match(key)
        if match is None:
            self.parse(key)  # raises, naming what is wrong
            raise RecordError("key does not follow the layout", key)  # not reached: parse raised
        federation, cluster, namespace, service, shard_cluster = match.groups()
        if cluster is not None:
            return federation, cluster
        return federation, namespace, service, shard_cluster

    def parse(self, key: str) -> ShardKey | ClusterKey:
        """Parse a key under this prefix.

        Raises :class:`RecordError` (with ``key``) when the key is outside the
        prefix, has the wrong number of parts, or a part is not a DNS label.
        """
        if not key.startswith(self.root):
            raise RecordError(f"key is outside prefix {self.root!r}", key)
        parts = key[len(self.root):].split("/")
        try:
            if len(parts) == CLUSTER_KEY_PARTS and parts[1] == CLUSTERS:
                return ClusterKey(
                    names.check_label(parts[0], "federation name"),
                    names.check_label(parts[2], "cluster name"),
                )
            if len(parts) == SHARD_KEY_PARTS:
                return ShardKey(
                    names.check_label(parts[0], "federation name"),
                    names.check_label(parts[1], "namespace"),
                    names.check_label(parts[2], "service name"),
                    names.check_label(parts[3], "cluster name"),
                )
        except ValueError as exc:
            raise RecordError(str(exc), key) from exc
        raise RecordError(
            "key is neither P/F/<ns>/<svc>/<cluster> nor P/F/_clusters/<cluster>", key
        )


class RangeSplitter:
    """Splits the keys of a range read in key order, as :meth:`Layout.split` does, at the cost
    of one ``str.rpartition`` for most keys.

    A range read gives the shards of one service one after the other (``P/F/<ns>/<svc>/a``,
    ``.../b``, ...): a key whose part before its last ``/`` is that of the shard key split
    just before, and whose last part is a cluster name already found valid, is that service's
    shard in that cluster; any other key gets the whole :meth:`Layout.split` (which raises
    :class:`RecordError` for a key outside the layout). The federation, namespace and cluster
    names it returns are interned (a million shards name a few of each), and the service's
    parts are one tuple shared by its shards.
    """

    CLUSTER_NAMES_MAX = 4096
    """Valid cluster names remembered; beyond these, a new name costs a whole split."""

    __slots__ = ("_clusters", "_head", "_service", "layout")

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._head: str | None = None
        self._service: tuple[str, str, str] = ("", "", "")
        self._clusters: dict[str, str] = {}

    def split(self, key: str) -> tuple[tuple[str, str, str], str] | tuple[str, str]:
        """``((F, ns, svc), C)`` for a shard key, ``(F, C)`` for a cluster key; raises
        :class:`RecordError` as :meth:`Layout.split` does."""
        head, _, last = key.rpartition("/")
        if head == self._head:
            cluster = self._clusters.get(last)
            if cluster is not None:
                return self._service, cluster
        match self.layout.split(key):
            case (federation, namespace, service, cluster):
                pass
            case cluster_key:
                return cluster_key
        self._head = head
        self._service = (sys.intern(federation), sys.intern(namespace), service)
        known = self._clusters.get(cluster)
        if known is None:
            known = sys.intern(cluster)
            if len(self._clusters) < self.CLUSTER_NAMES_MAX:
                self._clusters[known] = known
        return self._service, known
