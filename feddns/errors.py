"""The feddns error hierarchy.

Every error feddns raises on purpose derives from :class:`FeddnsError`; library
errors are wrapped with ``raise ... from`` so the cause stays visible.
"""


class FeddnsError(Exception):
    """Base class of the errors feddns raises on purpose."""


class ConfigError(FeddnsError, ValueError):
    """A flag, config file or records file is invalid.

    The message is one line naming what is wrong; commands print it and exit
    with status 2 before opening any socket (docs/reference.md section 6).
    """


class RecordError(FeddnsError, ValueError):
    """An etcd key or value does not follow the layout of docs/reference.md section 4.

    ``key`` is the offending key (str), or ``None`` when the value is checked
    on its own. Readers skip such a record, log it once and count it.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key


class EtcdError(FeddnsError):
    """An etcd call failed: etcd refused it (credentials, permissions, a bad request),
    could not be reached, or did not answer in time.

    Raised from aetcd's or gRPC's error (``__cause__``), whose words the message
    repeats; :func:`feddns.etcd.failures.describe` says which kind of failure it is.
    """


class EtcdCompacted(EtcdError):
    """The revision a read or watch needs was compacted away: read everything again.

    ``revision`` is etcd's compaction revision (the oldest it still has) when etcd says
    it (a watch's cancellation does; a range read's error does not: ``None``).
    """

    def __init__(self, message: str, revision: int | None = None) -> None:
        super().__init__(message)
        self.revision = revision


class EtcdTimeout(EtcdError):
    """An etcd call did not complete within its timeout (etcd may still have applied it)."""
