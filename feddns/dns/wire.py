"""The DNS wire format of queries (RFC 1035 section 4.1, RFC 6891 section 6).

Parsing is strict because the answer cache is keyed by the query's bytes: a
query is accepted only when every byte belongs to a well-formed header,
exactly one question, resource records and at most one OPT record. Anything
else raises :class:`FormError` (answered FORMERR), or :class:`ShortHeader`
when not even the 12-byte header is there (dropped, as dnspython's test server
does). Answers are packed elsewhere (``feddns.dns.answer``); this module only
builds the header-only error replies.
"""

import struct
from dataclasses import dataclass, field

# RR types (RFC 1035 3.2.2, RFC 3596, RFC 2782, RFC 6891)
A, NS, SOA, AAAA, SRV, OPT, IXFR, AXFR, ANY = 1, 2, 6, 28, 33, 41, 251, 252, 255
CLASS_IN = 1

# RCODEs (RFC 1035 4.1.1, RFC 6891 9)
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP, REFUSED, BADVERS = 0, 1, 2, 3, 4, 5, 16

# Header flag bits (RFC 1035 4.1.1, RFC 4035 3.2)
QR, AA, TC, RD, RA, AD, CD = 0x8000, 0x0400, 0x0200, 0x0100, 0x0080, 0x0020, 0x0010
OPCODE_MASK = 0x7800
EDNS_DO = 0x8000

# EDNS0 option codes
OPTION_ECS = 8  # RFC 7871

MAX_NAME_BYTES = 255  # RFC 1035 3.1
MAX_POINTER_JUMPS = 64

_HEADER = struct.Struct("!HHHHHH")
_RR_FIXED = struct.Struct("!HHIH")
_OPTION = struct.Struct("!HH")


class ShortHeader(Exception):
    """The packet is shorter than a DNS header: there is nothing to answer."""


class FormError(Exception):
    """The packet is not a well-formed query (answered FORMERR); the message says why."""


@dataclass(slots=True)
class Edns:
    """The OPT pseudo-RR of a query (RFC 6891 6.1.2).

    ``payload`` is the requester's UDP payload size in bytes, ``version`` the
    EDNS version, ``flags`` the 16 EDNS flag bits (``EDNS_DO`` among them) and
    ``options`` the ``(code, data)`` pairs in wire order.
    """

    payload: int
    version: int
    flags: int
    options: list[tuple[int, bytes]] = field(default_factory=list)

    def option(self, code: int) -> bytes | None:
        """The data of the first option with ``code``, or ``None``."""
        for option_code, data in self.options:
            if option_code == code:
                return data
        return None


@dataclass(slots=True)
class Query:
    """A parsed query.

    ``labels`` are the qname's labels lowercased (ASCII), most specific first;
    ``qname_wire`` is the qname uncompressed in its original case, as the
    answer echoes it; ``flags`` the header's 16 flag bits.
    """

    id: int
    flags: int
    labels: tuple[bytes, ...]
    qname_wire: bytes
    qtype: int
    qclass: int
    edns: Edns | None

    @property
    def opcode(self) -> int:
        return (self.flags & OPCODE_MASK) >> 11


def read_name(data: bytes, pos: int) -> tuple[list[bytes], int]:
    """Read a possibly compressed name at ``pos`` (RFC 1035 4.1.4).

    Returns ``(labels, end)`` where ``end`` is the offset after the name's
    bytes at ``pos``. Raises :class:`FormError` for a name that runs past the
    end, a reserved label type, a pointer that does not point backwards, too
    many jumps, or more than 255 bytes.
    """
    labels: list[bytes] = []
    end = -1
    total = 1
    jumps = 0
    size = len(data)
    while True:
        if pos >= size:
            raise FormError("name runs past the end of the packet")
        length = data[pos]
        if length == 0:
            return labels, (pos + 1 if end < 0 else end)
        if length >= 0xC0:
            if pos + 1 >= size:
                raise FormError("compression pointer runs past the end of the packet")
            target = ((length & 0x3F) << 8) | data[pos + 1]
            if target >= pos:
                raise FormError("compression pointer does not point backwards")
            jumps += 1
            if jumps > MAX_POINTER_JUMPS:
                raise FormError("too many compression pointers")
            if end < 0:
                end = pos + 2
            pos = target
            continue
        if length > 63:
            raise FormError(f"reserved label type 0x{length & 0xC0:02x}")
        total += length + 1
        if total > MAX_NAME_BYTES:
            raise FormError("name is longer than 255 bytes")
        label = data[pos + 1 : pos + 1 + length]
        if len(label) < length:
            raise FormError("label runs past the end of the packet")
        labels.append(label)
        pos += 1 + length


def name_to_wire(labels: list[bytes] | tuple[bytes, ...]) -> bytes:
    """The uncompressed wire form of a name given as labels."""
    return b"".join(bytes((len(label),)) + label for label in labels) + b"\0"


def parse_header(data: bytes) -> tuple[int, int, int, int, int, int]:
    """``(id, flags, qdcount, ancount, nscount, arcount)``; raises :class:`ShortHeader`."""
    if len(data) < 12:
        raise ShortHeader()
    return _HEADER.unpack_from(data)


def parse_query(data: bytes) -> Query:
    """Parse a query packet.

    Raises :class:`ShortHeader` (drop it) or :class:`FormError` (answer
    FORMERR): not exactly one question, an OPT outside the additional section,
    not owned by the root or given twice (RFC 6891 6.1.1), a truncated record
    or option, or bytes after the last record.
    """
    ident, flags, qdcount, ancount, nscount, arcount = parse_header(data)
    if qdcount != 1:
        raise FormError(f"query has {qdcount} questions, not 1")
    labels, pos = read_name(data, 12)
    if pos + 4 > len(data):
        raise FormError("question runs past the end of the packet")
    qtype, qclass = struct.unpack_from("!HH", data, pos)
    pos += 4
    edns = None
    for index in range(ancount + nscount + arcount):
        rr_labels, pos = read_name(data, pos)
        if pos + 10 > len(data):
            raise FormError("resource record runs past the end of the packet")
        rtype, rclass, ttl, rdlength = _RR_FIXED.unpack_from(data, pos)
        pos += 10
        rdata = data[pos : pos + rdlength]
        if len(rdata) < rdlength:
            raise FormError("RDATA runs past the end of the packet")
        pos += rdlength
        if rtype == OPT:
            if index < ancount + nscount or rr_labels or edns is not None:
                raise FormError("OPT must appear once, in the additional section, owned by the root")
            edns = Edns(rclass, (ttl >> 16) & 0xFF, ttl & 0xFFFF, _parse_options(rdata))
    if pos != len(data):
        raise FormError(f"{len(data) - pos} bytes after the last record")
    return Query(
        ident, flags, tuple(label.lower() for label in labels), name_to_wire(labels), qtype, qclass, edns
    )


def _parse_options(rdata: bytes) -> list[tuple[int, bytes]]:
    options = []
    pos = 0
    while pos < len(rdata):
        if pos + 4 > len(rdata):
            raise FormError("EDNS option header is truncated")
        code, length = _OPTION.unpack_from(rdata, pos)
        value = rdata[pos + 4 : pos + 4 + length]
        if len(value) < length:
            raise FormError(f"EDNS option {code} is truncated")
        options.append((code, value))
        pos += 4 + length
    return options


def error_reply(data: bytes, rcode: int) -> bytes:
    """A header-only reply to the packet ``data`` (at least 12 bytes) with ``rcode``.

    Copies the ID, opcode and RD and sets QR; no question, no records. Used
    where the question cannot be trusted (FORMERR) or the opcode is not QUERY
    (NOTIMP).
    """
    ident, flags = struct.unpack_from("!HH", data)
    return _HEADER.pack(ident, QR | (flags & (OPCODE_MASK | RD)) | rcode, 0, 0, 0, 0)
