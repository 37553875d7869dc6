"""Gating a pod's start on the existence of the federated services it requires.

The explicit-links design gates on existence, not readiness: a service that
exists but has no ready shard still lets the pod start. Existence is asked of
the cluster DNS (``--resolver``, default the first nameserver of
/etc/resolv.conf), which forwards the federation's domain to Federated-DNS:

* NXDOMAIN: the federated service does not exist (docs/reference.md section 1:
  every existing service name answers NOERROR, with or without addresses);
* an answer, even an empty one (NODATA): it exists;
* SERVFAIL, REFUSED, a timeout, a network error: unknown. The pod is not
  denied for what the webhook could not find out; the caller warns instead.

All names of one review are asked at once, under one deadline (default 2 s,
well inside the API server's 5 s webhook timeout). At most
:data:`MAX_QUERIES_IN_FLIGHT` questions are out at a time across all reviews,
so a flood of pods with many links cannot run the process out of sockets nor
flood the cluster DNS; a question still waiting at the deadline is unknown.
"""

import asyncio
import enum
from collections.abc import Sequence
from dataclasses import dataclass

import dns.asyncresolver
import dns.exception
import dns.resolver

from feddns.errors import ConfigError

DEFAULT_TIMEOUT = 2.0
"""Seconds all DNS questions of one review may take together (``--gating-timeout``)."""

MAX_QUERIES_IN_FLIGHT = 128
"""DNS questions out at once, all reviews together (each holds a socket)."""


class Existence(enum.Enum):
    """What the cluster DNS said of a federated name."""

    EXISTS = "exists"
    MISSING = "missing"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Finding:
    """The :class:`Existence` of one name, and ``detail``: what was heard (``NXDOMAIN``, ``SERVFAIL``, ...)."""

    existence: Existence
    detail: str


class Gate:
    """Asks the cluster DNS whether federated names exist.

    ``nameserver`` is ``(address, port)``, or ``None`` for /etc/resolv.conf's
    nameservers. Raises :class:`ConfigError` when there is none to ask.
    """

    def __init__(self, nameserver: tuple[str, int] | None, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = timeout
        try:
            self._resolver = dns.asyncresolver.Resolver(configure=nameserver is None)
        except dns.resolver.NoResolverConfiguration as exc:
            raise ConfigError("no --resolver given and /etc/resolv.conf names no nameserver") from exc
        if nameserver is not None:
            self._resolver.nameservers = [nameserver[0]]
            self._resolver.port = nameserver[1]
        self._resolver.cache = None
        self._in_flight = asyncio.Semaphore(MAX_QUERIES_IN_FLIGHT)
        self.nameservers = [f"{address}:{self._resolver.port}" for address in self._resolver.nameservers]

    async def check(self, names: Sequence[str]) -> dict[str, Finding]:
        """The finding for each absolute name of ``names``, all asked at once within :attr:`timeout` seconds."""
        unique = list(dict.fromkeys(names))
        deadline = asyncio.get_running_loop().time() + self.timeout
        tasks = {name: asyncio.create_task(self._ask(name, deadline)) for name in unique}
        _, pending = await asyncio.wait(tasks.values(), timeout=self.timeout)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)  # let them close their sockets
        late = Finding(Existence.UNKNOWN, f"no answer within {self.timeout:g} s")
        return {name: late if task in pending else task.result() for name, task in tasks.items()}

    async def _ask(self, name: str, deadline: float) -> Finding:
        async with self._in_flight:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return Finding(Existence.UNKNOWN, f"no answer within {self.timeout:g} s")
            try:
                await self._resolver.resolve(name, "A", raise_on_no_answer=False, search=False, lifetime=remaining)
            except dns.resolver.NXDOMAIN:
                return Finding(Existence.MISSING, "NXDOMAIN")
            except dns.resolver.LifetimeTimeout:
                return Finding(Existence.UNKNOWN, f"no answer within {self.timeout:g} s")
            except dns.resolver.NoNameservers as exc:
                return Finding(Existence.UNKNOWN, _rcodes(exc) or "no nameserver answered")
            except (dns.exception.DNSException, OSError) as exc:
                return Finding(Existence.UNKNOWN, f"{type(exc).__name__}: {exc}")
        return Finding(Existence.EXISTS, "NOERROR")


_ANSWER = 3
"""Where dnspython's ``NoNameservers`` error tuples ``(server, tcp, port, answer or error)`` hold the answer."""


def _rcodes(exc: dns.resolver.NoNameservers) -> str:
    """The rcodes or errors the nameservers gave (``SERVFAIL``, ``REFUSED``), from dnspython's error list."""
    errors = exc.kwargs.get("errors") or []
    said = {str(error[_ANSWER]) for error in errors if len(error) > _ANSWER}
    return ", ".join(sorted(said))
