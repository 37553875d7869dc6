"""The etcd client URLs of one cluster, tried in turn, a client for the current one, and reconnecting.

:class:`EtcdEndpoints` holds the ``--etcd`` URLs (or a config's
``etcd.endpoints``) and the :class:`~feddns.etcd.credentials.Access` to log in
with; :meth:`EtcdEndpoints.client` makes an
:class:`~feddns.etcd.client.EtcdClient` for the current URL and
:meth:`EtcdEndpoints.failover` moves on to the next after a failure.

The certificate, key and password files are read when a client is made, and
watched (:class:`feddns.filewatch.FileWatch`): :meth:`EtcdEndpoints.changed`
tells a long-lived client's owner that they changed since the client was made
(a rotated Secret), so that it reconnects at a safe point (:func:`unless_changed`)
while the old certificate is still valid.
"""

import asyncio
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from feddns.errors import ConfigError
from feddns.etcd.credentials import Access, TLSFiles, grpc_quiet
from feddns.etcd.urls import parse_etcd_url
from feddns.filewatch import FileWatch, Identities

if TYPE_CHECKING:
    import aetcd

    from feddns.etcd.client import EtcdClient

log = logging.getLogger(__name__)

FILES_CHECK_SECONDS = 1.0
"""How often (at most) the certificate and password files are looked at again (a ``stat`` each)."""


class EtcdEndpoints:
    """The etcd client URLs of one cluster (``--etcd``, repeatable), tried in turn, and how to log in.

    ``urls`` are ``http://`` or ``https://`` URLs (all the same scheme); ``timeout``
    bounds each call (seconds) and sets the gRPC keep-alive (:func:`feddns.etcd.client.grpc_options`);
    ``access`` carries TLS files and the user (``None``: plain, no user).
    Raises :class:`ConfigError` when the list is empty, a URL is bad, the schemes
    are mixed, TLS files are given for ``http://``, or a file cannot be read.
    ``client()`` returns a new client for the current endpoint; ``failover()``
    moves on to the next one after a failure.
    """

    def __init__(self, urls: list[str], timeout: float = 5.0, access: Access | None = None) -> None:
        access = access or Access()
        if not urls:
            raise ConfigError("at least one etcd endpoint is needed")
        self.urls = [parse_etcd_url(url) for url in urls]
        schemes = {url.scheme for url in self.urls}
        if len(schemes) > 1:
            raise ConfigError("etcd endpoints mix http:// and https://; use one scheme for all")
        self.secure = schemes == {"https"}
        if access.tls is not None and not self.secure:
            raise ConfigError("etcd TLS files (--etcd-cacert, --etcd-cert, --etcd-key) need https:// endpoints")
        if self.secure and access.tls is None:
            access = Access(TLSFiles(), access.user, access.password_file, access.password_env)
        self.files = FileWatch(access.files(), FILES_CHECK_SECONDS)
        """The certificate, key and password files (looked at before they are checked: a change while they
        are read is seen next time)."""
        access.check()
        self.access = access
        self.timeout = timeout
        self._current = 0

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """``(host, port)`` of each URL, in order."""
        return [(url.host, url.port) for url in self.urls]

    @property
    def current(self) -> str:
        """The URL tried now, as text."""
        return str(self.urls[self._current])

    def client(self) -> "EtcdClient":
        """A client for the current endpoint, with the certificate and password as the files
        hold them now (it connects lazily, on the first call). Raises :class:`ConfigError`
        when a file has become unreadable."""
        url = self.urls[self._current]
        files = self.signature()
        credentials = self.access.tls.grpc_credentials() if self.access.tls is not None else None
        grpc_quiet()
        from feddns.etcd.client import EtcdClient  # noqa: PLC0415 - aetcd and gRPC only once a client is made

        return EtcdClient(url, credentials=credentials, user=self.access.user, password=self.access.password(),
                          timeout=self.timeout, files=files)

    def failover(self) -> None:
        """Move to the next endpoint (wrapping round). Logged at debug level only: a caller
        retrying through an outage says once that etcd is lost and once that it is back."""
        self._current = (self._current + 1) % len(self.urls)
        if len(self.urls) > 1:
            log.debug("etcd: trying endpoint %s", self.current)

    def signature(self) -> Identities:
        """The identities of the certificate, key and password files, looked at again at most every
        :data:`FILES_CHECK_SECONDS`: a client made from other identities is out of date."""
        return self.files.latest()

    def changed(self, client: "aetcd.Client") -> bool:
        """True when a certificate, key or password file changed since ``client`` was made."""
        made_from: Identities = getattr(client, "files", ())
        return made_from != self.signature()


async def until_changed(endpoints: EtcdEndpoints, client: "aetcd.Client") -> None:
    """Return once ``client``'s certificate or password files have changed (polled, :class:`FileWatch`)."""
    await endpoints.files.differs(getattr(client, "files", ()))
    log.info("etcd: the client certificate or password files changed; reconnecting with the new ones")


async def unless_changed(endpoints: EtcdEndpoints, client: "aetcd.Client", work: Coroutine[Any, Any, None]) -> bool:
    """Run ``work`` (a long watch on ``client``) until it ends, or cancel it when the
    certificate or password files change first; True in that case: reconnect then, so
    that a rotated client certificate is in use before the old one expires.

    Whatever ``work`` raises is raised; cancelling this cancels ``work``.
    """
    follow = asyncio.ensure_future(work)
    rotated = asyncio.ensure_future(until_changed(endpoints, client))
    try:
        await asyncio.wait([follow, rotated], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (follow, rotated):
            task.cancel()
        await asyncio.gather(follow, rotated, return_exceptions=True)
    if follow.done() and not follow.cancelled():
        follow.result()
        return False
    return True
