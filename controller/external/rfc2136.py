"""The RFC 2136 provider: dynamic updates signed with TSIG, over TCP.

BIND, Knot, PowerDNS, Windows DNS (with a TSIG-capable setup) and several
managed DNS services accept these. Every request goes over TCP (RFC 7766) so a
large RRset is never truncated and a stopped server shows at once as a refused
connection. dnspython builds and signs the messages (``dns.update``,
``dns.tsig``); this module only decides what goes into them:

- a change (``provider.NameChange``) is one UPDATE message (RFC 2136 section 2):
  the prerequisite (name not in use, section 2.4.5; or the TXT RRset exactly as
  last seen, section 2.4.2), then "delete RRset" of A and AAAA and "add" of the
  new rdata and the ownership TXT (sections 2.5.2 and 2.5.1), and "add" or
  "delete an RR from an RRset" (section 2.5.4) of the unready mark; for a
  deletion, "delete an RR from an RRset" for the TXT marker and the unready mark;
- the zone is read back with a TSIG-signed AXFR (RFC 5936);
- one name is looked up with signed A, AAAA and TXT queries.
"""

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Iterable
from typing import TypeVar

import dns.asyncquery
import dns.exception
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdataset
import dns.rdatatype
import dns.rdtypes.ANY.TXT
import dns.tsig
import dns.update
import dns.xfr
import dns.zone

from controller.external.config import ExternalConfig
from controller.external.provider import (
    UNREADY_MARK,
    NameChange,
    NameState,
    PrerequisiteFailed,
    ProviderError,
    TransferRefused,
)
from feddns.records import IPAddress

_T = TypeVar("_T")
IPV4 = 4
"""``ipaddress`` version number of an A record's address (6 for AAAA)."""

# RFC 2136 section 3.2.5: the rcodes of a prerequisite that does not hold.
_PREREQUISITE_RCODES = (dns.rcode.YXDOMAIN, dns.rcode.NXRRSET, dns.rcode.NXDOMAIN, dns.rcode.YXRRSET)
# Rcodes that say the server will refuse every name the same way.
_SERVER_RCODES = (dns.rcode.NOTAUTH, dns.rcode.NOTZONE)


class Rfc2136Provider:
    """Talks RFC 2136 to ``config.server``:``config.port`` for ``config.zone``.

    ``timeout`` (seconds) bounds each request and each message of a zone transfer.
    Implements ``controller.external.provider.Provider``; every method raises
    ``ProviderError`` (reason ``timeout``, ``unreachable``, ``badkey``, ``badsig``,
    ``badtime``, ``tsig``, an rcode in lower case, or ``badresponse``).
    """

    def __init__(self, config: ExternalConfig, timeout: float = 5.0) -> None:
        self._config = config
        self._zone = dns.name.from_text(config.zone)
        self._timeout = timeout
        self._key = None
        if config.tsig_name is not None and config.tsig_secret is not None:
            self._key = dns.tsig.Key(config.tsig_name, config.tsig_secret, config.tsig_algorithm)

    # -- Provider --

    async def apply(self, change: NameChange) -> None:
        """Send ``change`` as one UPDATE; raises ``PrerequisiteFailed`` when the name is not as expected."""
        response = await self._exchange(self._update(change), f"update of {change.name}")
        rcode = response.rcode()
        if rcode in _PREREQUISITE_RCODES:
            raise PrerequisiteFailed(f"update of {change.name}: prerequisite not met ({dns.rcode.to_text(rcode)})")
        if rcode != dns.rcode.NOERROR:
            text = dns.rcode.to_text(rcode)
            raise ProviderError(f"update of {change.name} refused by the server: {text}", text.lower(),
                                whole_server=rcode in _SERVER_RCODES)

    async def lookup(self, name: dns.name.Name) -> NameState | None:
        """The A, AAAA and TXT RRsets at ``name`` (three signed queries); ``None`` on NXDOMAIN."""
        found: dict[dns.rdatatype.RdataType, dns.rdataset.Rdataset] = {}
        for rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA, dns.rdatatype.TXT):
            query = dns.message.make_query(name, rdtype)
            if self._key is not None:
                query.use_tsig(self._key)
            response = await self._exchange(query, f"lookup of {name}")
            if response.rcode() == dns.rcode.NXDOMAIN:
                return None
            if response.rcode() != dns.rcode.NOERROR:
                text = dns.rcode.to_text(response.rcode())
                raise ProviderError(f"lookup of {name}: {text}", text.lower(), whole_server=False)
            for rrset in response.answer:
                if rrset.name == name and rrset.rdtype == rdtype:
                    found[rdtype] = rrset  # the last one wins, as in a node
        return _state(found.values())

    async def read_names(self, suffix: dns.name.Name) -> dict[dns.name.Name, NameState]:
        """AXFR the zone (signed) and return the names strictly below ``suffix``.

        Raises ``TransferRefused`` when the server answers REFUSED or NOTAUTH.
        """
        zone = dns.zone.Zone(self._zone, relativize=False)
        query, _ = dns.xfr.make_query(zone, serial=None, keyring=self._key)
        try:
            await self._guard(dns.asyncquery.inbound_xfr(
                await self._where(), zone, query, port=self._config.port,
                timeout=self._timeout, lifetime=self._timeout * 12), "zone transfer")
        except dns.xfr.TransferError as exc:
            text = dns.rcode.to_text(exc.rcode)
            if exc.rcode in (dns.rcode.REFUSED, dns.rcode.NOTAUTH):
                raise TransferRefused(f"the server refused the zone transfer (AXFR) of {self._zone}: {text}") from None
            raise ProviderError(f"zone transfer of {self._zone}: {text}", text.lower(), whole_server=False) from None
        return {name: _state(node.rdatasets) for name, node in zone.nodes.items()
                if name.is_subdomain(suffix) and name != suffix}

    # -- messages --

    def _update(self, change: NameChange) -> dns.update.UpdateMessage:
        """The UPDATE of ``change``: its prerequisite, then the RRset changes (RFC 2136 2.4, 2.5)."""
        update = dns.update.UpdateMessage(self._zone, keyring=self._key)
        _prerequisite(update, change)
        name, mark, unready_mark = change.name, _txt(change.marker), _txt(UNREADY_MARK)
        if change.prior is not None:
            update.delete(name, dns.rdatatype.A)
            update.delete(name, dns.rdatatype.AAAA)
        if not change.addresses:
            update.delete(name, mark)
            update.delete(name, unready_mark)
            return update
        for rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            rdata = sorted(str(address) for address in change.addresses if _rdtype(address) == rdtype)
            if rdata:
                update.add(name, dns.rdataset.from_text_list(dns.rdataclass.IN, rdtype, change.ttl, rdata))
        update.add(name, change.ttl, mark)
        if change.unready:
            update.add(name, change.ttl, unready_mark)
        elif change.prior is not None and (UNREADY_MARK,) in change.prior.txt:
            update.delete(name, unready_mark)
        return update

    # -- transport --

    async def _exchange(self, message: dns.message.Message, what: str) -> dns.message.Message:
        where = await self._where()
        return await self._guard(
            dns.asyncquery.tcp(message, where, timeout=self._timeout, port=self._config.port), what)

    async def _where(self) -> str:
        """The server's address; a hostname is resolved for every request (it may move)."""
        host, port = self._config.server, self._config.port
        try:
            return str(ipaddress.ip_address(host))
        except ValueError:
            pass
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ProviderError(f"cannot resolve {host}: {exc}", "unreachable", whole_server=True) from None
        return str(infos[0][4][0])

    async def _guard(self, request: Awaitable[_T], what: str) -> _T:
        """Await ``request``, turning transport and TSIG failures into ``ProviderError``."""
        server = f"{self._config.server}:{self._config.port}"
        key = self._config.tsig_name
        try:
            return await request
        except dns.xfr.TransferError:
            raise
        except dns.tsig.PeerBadKey:
            message, reason = f"{server} does not know TSIG key {key} (BADKEY)", "badkey"
        except dns.tsig.PeerBadSignature:
            message = f"{server} rejected the signature of TSIG key {key} (BADSIG: wrong secret or algorithm?)"
            reason = "badsig"
        except dns.tsig.PeerBadTime:
            message, reason = f"{server} rejected the time of the TSIG signature (BADTIME: clocks apart?)", "badtime"
        except (dns.tsig.PeerError, dns.tsig.BadSignature, dns.tsig.BadKey, dns.tsig.BadTime) as exc:
            message, reason = f"TSIG failure with {server}: {exc}", "tsig"
        except dns.exception.Timeout:
            message, reason = f"no answer from {server} within {self._timeout:g} s", "timeout"
        except (OSError, EOFError) as exc:
            message, reason = f"cannot reach {server}: {exc or exc.__class__.__name__}", "unreachable"
        except dns.exception.DNSException as exc:
            message = f"{what}: bad response from {server}: {exc}"
            raise ProviderError(message, "badresponse", whole_server=False) from None
        raise ProviderError(f"{what}: {message}", reason, whole_server=True)


def _prerequisite(update: dns.update.UpdateMessage, change: NameChange) -> None:
    """Name not in use (RFC 2136 2.4.5), or the TXT RRset exactly as last seen (2.4.2)."""
    if change.prior is None:
        update.absent(change.name)
    elif change.prior.txt:
        update.present(change.name, dns.rdataset.from_rdata_list(0, [_txt(*texts) for texts in change.prior.txt]))
    else:
        update.present(change.name)


def _state(rdatasets: Iterable[dns.rdataset.Rdataset]) -> NameState:
    """The addresses, their TTL and the TXT strings held by the ``rdatasets`` of one name."""
    addresses: set[IPAddress] = set()
    ttls = []
    txt: set[tuple[str, ...]] = set()
    for rdataset in rdatasets:
        if rdataset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
            addresses.update(ipaddress.ip_address(rdata.address) for rdata in rdataset)
            ttls.append(rdataset.ttl)
        elif rdataset.rdtype == dns.rdatatype.TXT:
            txt.update(tuple(text.decode("utf-8", "surrogateescape") for text in rdata.strings) for rdata in rdataset)
    return NameState(frozenset(addresses), min(ttls) if ttls else None, frozenset(txt))


def _txt(*texts: str) -> dns.rdtypes.ANY.TXT.TXT:
    """One TXT rdata holding ``texts`` as its character-strings (each at most 255 bytes)."""
    strings = [text.encode("utf-8", "surrogateescape") for text in texts]
    return dns.rdtypes.ANY.TXT.TXT(dns.rdataclass.IN, dns.rdatatype.TXT, strings)


def _rdtype(address: IPAddress) -> dns.rdatatype.RdataType:
    return dns.rdatatype.A if address.version == IPV4 else dns.rdatatype.AAAA
