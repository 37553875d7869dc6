"""What an etcd failure means: refused credentials, TLS, no leader, or an etcd that cannot be reached.

:func:`failure_kind` reads etcd's own words (its ``rpctypes`` errors) and gRPC
core's TLS messages; :func:`describe` makes one line of it for a log or an error
answer. :func:`cancelled_by_client` tells a gRPC channel closed under a call from
a real cancellation. Imports neither aetcd nor gRPC: the SkyDNS v2 backend
describes its HTTP failures with it too.
"""

import asyncio

_AUTH_FAILED = ("authentication failed", "invalid user id or password")
_NO_USER = ("user name is empty", "user name not found")
_PERMISSION = ("permission denied",)
_TOKEN = ("invalid auth token", "auth: revision in header is old")
_TLS = ("tls handshake", "ssl handshake", "handshake read failed", "ssl_error", "tsi_", "certificate")
_NO_LEADER = ("no leader",)


def failure_kind(exc: BaseException) -> str:
    """What an etcd error says: ``"auth"`` (user or password refused), ``"no-user"`` (etcd
    requires a user and none was given), ``"permission"`` (the user may not do this),
    ``"token"`` (the auth token expired: reconnect), ``"tls"`` (the TLS handshake failed),
    ``"no-leader"`` (the member has no leader: try another), or ``"unreachable"``
    (anything else: refused, timed out, reset).

    The etcd server's messages are those of ``etcdserver/api/v3rpc/rpctypes``
    (``ErrGRPCAuthFailed``, ``ErrGRPCUserEmpty``, ``ErrGRPCPermissionDenied``,
    ``ErrGRPCInvalidAuthToken``, ``ErrGRPCNoLeader``); TLS failures are gRPC core's.
    A call refused for ``no leader`` was refused before etcd handled it
    (:data:`feddns.etcd.client.REQUIRE_LEADER`): nothing of it was applied.
    """
    text = " ".join(str(e) for e in _chain(exc)).lower()
    for kind, needles in (("auth", _AUTH_FAILED), ("no-user", _NO_USER), ("permission", _PERMISSION),
                          ("token", _TOKEN), ("tls", _TLS), ("no-leader", _NO_LEADER)):
        if any(needle in text for needle in needles):
            return kind
    return "unreachable"


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


_KIND_TEXT = {
    "auth": "authentication failed (wrong user or password)",
    "no-user": "etcd requires authentication and no user was given (--etcd-user)",
    "permission": "permission denied (the user's roles do not cover this key)",
    "token": "the authentication token expired; reconnecting",
    "tls": "TLS handshake failed (wrong CA, or etcd refused the client certificate)",
    "no-leader": "the member has no leader (cut off from the other members, or the cluster lost its quorum)",
    "unreachable": "cannot be reached",
}


def describe(exc: BaseException) -> str:
    """One line for a log or an error answer: what kind of failure, then etcd's own words.

    ``authentication failed (wrong user or password): etcdserver: authentication failed, ...``.
    """
    detail = str(exc) or type(exc).__name__
    return f"{_KIND_TEXT[failure_kind(exc)]}: {detail}"


def cancelled_by_client(exc: asyncio.CancelledError) -> bool:
    """True when ``exc`` came from a closed gRPC channel, not from cancelling this task.

    grpc.aio raises ``CancelledError`` into calls whose channel is closed under them;
    that is an etcd failure to retry. A real cancellation (``task.cancel()``, shutdown)
    must still end the task: then the current task's ``cancelling()`` is non-zero.
    """
    task = asyncio.current_task()
    return task is None or task.cancelling() == 0
