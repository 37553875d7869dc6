"""The DNS wire format of queries (RFC 1035 section 4.1, RFC 6891 section 6).

Two readers produce the same :class:`Query`:

* :func:`read_common` takes the shape nearly every query has (one question whose
  name is not compressed, no answer or authority records, at most one OPT record,
  EDNS version 0) with a few slices of the packet, and returns ``None`` for
  anything else;
* :func:`parse_query` parses any packet strictly: a query is accepted only when
  every byte belongs to a well-formed header, exactly one question, resource
  records and at most one OPT record. Anything else raises :class:`FormError`
  (answered FORMERR), or :class:`ShortHeader` when not even the 12-byte header
  is there (dropped, as dnspython's test server does).

What the common reader accepts, the strict parser accepts with the same result
(tests/dns/test_fuzz.py checks both on the same mutated packets). Answers are packed in
``feddns.dns.answer``; this module only builds the header-only error replies.
"""

import struct
from dataclasses import dataclass, field
from enum import IntEnum

from feddns.errors import FeddnsError


class QType(IntEnum):
    """The RR types Federated-DNS knows (RFC 1035 3.2.2, RFC 3596, RFC 2782, RFC 6891, RFC 1995)."""

    A = 1
    NS = 2
    SOA = 6
    AAAA = 28
    SRV = 33
    OPT = 41
    IXFR = 251
    AXFR = 252
    ANY = 255


TXT = 16
"""The TXT RR type (RFC 1035 3.3.14): the answer at ``_whoami.<F>.svc.<zone>``. Not a
:class:`QType`, so that the metrics' ``qtype`` label keeps the values docs/serve.md lists
(a TXT question is counted as ``other``)."""


class MetaType(IntEnum):
    """QTYPEs other than those of :class:`QType` that ask for no records of a name
    (RFC 6895 3.1): meta-TYPEs, which carry data of one message, and the mailbox
    QTYPEs (RFC 1035 3.2.3). Questions of these types are answered with an error
    (``feddns.dns.responder``), as BIND answers them."""

    TKEY = 249  # RFC 2930
    TSIG = 250  # RFC 8945
    MAILB = 253  # RFC 1035 3.2.3
    MAILA = 254  # RFC 1035 3.2.3; obsolete (RFC 973)


class Rcode(IntEnum):
    """Response codes (RFC 1035 4.1.1; NOTAUTH: RFC 2136 2.2, RFC 5936 2.2.1; BADVERS:
    RFC 6891 9, 12 bits with the OPT's upper 8)."""

    NOERROR = 0
    FORMERR = 1
    SERVFAIL = 2
    NXDOMAIN = 3
    NOTIMP = 4
    REFUSED = 5
    NOTAUTH = 9
    BADVERS = 16


CLASS_IN = 1

# Header flag bits (RFC 1035 4.1.1, RFC 4035 3.2)
QR, AA, TC, RD, RA, AD, CD = 0x8000, 0x0400, 0x0200, 0x0100, 0x0080, 0x0020, 0x0010
OPCODE_MASK = 0x7800
EDNS_DO = 0x8000

OPTION_ECS = 8
"""EDNS0 option code of Client Subnet (RFC 7871)."""
OPTION_COOKIE = 10
"""EDNS0 option code of COOKIE (RFC 7873 section 4)."""
CLIENT_COOKIE_BYTES = 8  # RFC 7873 4: a COOKIE option is a client cookie alone ...
SERVER_COOKIE_BYTES = range(8, 33)  # ... or one followed by a server cookie of 8 to 32 bytes
_COOKIE_PAIR_BYTES = range(CLIENT_COOKIE_BYTES + 8, CLIENT_COOKIE_BYTES + 33)  # the second: 16 to 40 bytes

HEADER_BYTES = 12  # RFC 1035 4.1.1
IPV4_BYTES = 4  # a packed IPv4 address: an A record's RDATA (RFC 1035 3.4.1)
IPV6_BYTES = 16  # a packed IPv6 address: an AAAA record's RDATA (RFC 3596 2.2)
UDP_PLAIN_BYTES = 512  # the longest UDP message without EDNS (RFC 1035 4.2.1)
MAX_NAME_BYTES = 255  # RFC 1035 3.1
MAX_LABEL_BYTES = 63  # RFC 1035 2.3.4
MAX_POINTER_JUMPS = 64
POINTER = 0xC0
"""The top two bits of a length byte that make it a compression pointer (RFC 1035 4.1.4)."""

FIRST_ROOT = HEADER_BYTES + 1
"""The offset of a shortest qname's root label (a name of at least one label)."""
LAST_ROOT = HEADER_BYTES + MAX_NAME_BYTES - 1
"""The offset of a longest qname's root label."""

_HEADER = struct.Struct("!HHHHHH")
_RR_FIXED = struct.Struct("!HHIH")
_OPTION = struct.Struct("!HH")
_OPTION_RAW = struct.Struct("!2sH")
_TYPE_OPT = 41  # QType.OPT as a plain int: an enum member costs an attribute lookup
_QTYPE_QCLASS = struct.Struct("!HH")
_QUESTION_OPT = struct.Struct("!HHBHHHHH")  # QTYPE, QCLASS; an OPT's owner, TYPE, CLASS (payload),
# extended rcode + version, flags, RDLENGTH
_QUESTION_OPT_OPTION = struct.Struct("!HHBHHHHHHH")  # ... and the first option's code and length
_FLAGS_COUNTS = struct.Struct("!HQ")  # the header's flags, then QD, AN, NS and AR counts as one number
_QD1_AR0 = 0x0001_0000_0000_0000  # one question, nothing else
_QD1_AR1 = 0x0001_0000_0000_0001  # ... and one additional record
_blank = object.__new__
_ECS_CODE = b"\x00\x08"
_COOKIE_CODE = b"\x00\x0a"


class ShortHeader(FeddnsError):
    """The packet is shorter than a DNS header: there is nothing to answer."""


class FormError(FeddnsError):
    """The packet is not a well-formed query (answered FORMERR); the message says why."""


class OptionError(FormError):
    """A well-formed query with an EDNS option whose data its RFC forbids (answered
    FORMERR with the question and an OPT record, as a malformed ECS option is); ``query``
    is the query as read."""

    def __init__(self, message: str, query: "Query") -> None:
        super().__init__(message)
        self.query = query


def cookie_length_ok(length: int) -> bool:
    """True when a COOKIE option of ``length`` bytes holds a client cookie of 8 bytes and
    either no server cookie or one of 8 to 32 bytes: 8, or 16 to 40 (RFC 7873 section
    5.2.2, which answers any other length FORMERR)."""
    return length == CLIENT_COOKIE_BYTES or length in _COOKIE_PAIR_BYTES


@dataclass(slots=True)
class Query:
    """A query, as both readers return it.

    ``flags`` are the header's 16 flag bits; ``question`` the question section as
    asked (the qname uncompressed, in the asker's letter case, then QTYPE and
    QCLASS), which replies echo; ``name`` the qname in wire form lowercased
    (ASCII), which keys lookups; ``qtype`` and ``qclass`` the question's type and
    class. ``edns`` is True when the query had an OPT record; then ``payload`` is
    its UDP payload size in bytes, ``version`` the EDNS version, ``do`` the DO bit
    (RFC 3225), ``cluster_option`` the data of the first cluster-name option (the
    ``option_code`` asked for) and ``ecs`` the data of the first Client Subnet
    option, each ``None`` when absent. Other options (cookies, padding, unknown
    codes) are skipped: they do not change the answer (a COOKIE's length is
    checked, :func:`cookie_length_ok`). ``strict`` says which
    reader read it: :func:`parse_query` (True) or :func:`read_common`.
    """

    flags: int
    question: bytes
    name: bytes
    qtype: int
    qclass: int
    edns: bool = False
    payload: int = 512
    do: bool = False
    cluster_option: bytes | None = None
    ecs: bytes | None = None
    version: int = 0
    strict: bool = field(default=False, compare=False)

    @property
    def opcode(self) -> int:
        return (self.flags & OPCODE_MASK) >> 11


def read_common(data: bytes, option_code: bytes) -> Query | None:  # noqa: C901, PLR0911, PLR0912 - hot path: one frame per query (docs/performance.md)
    """Read a query of the common shape with a few slices, or return ``None``.

    The common shape: QR clear, opcode QUERY, one question whose name holds no
    zero byte before its end (so no compression pointer can hide in it: a
    pointer would leave the name without its root label), no answer or
    authority records, and either no additional record or exactly one OPT owned
    by the root, EDNS version 0 and extended rcode 0, whose options fill its
    RDATA exactly. ``option_code`` is the cluster-name option code as 2 bytes.
    Anything else (including every malformed packet) returns ``None``, for
    :func:`parse_query` to judge.

    Every query that is not in the reply cache comes through here, so it is
    written for the interpreter: the fixed fields are read with three struct
    unpacks, a single option (the usual case) without a loop, and the
    :class:`Query` is filled in place (no ``__init__`` frame).
    """
    zero = data.find(0, 12)
    if zero < FIRST_ROOT or zero > LAST_ROOT:
        return None
    flags, counts = _FLAGS_COUNTS.unpack_from(data, 2)
    if flags & 0xF800:  # QR or an opcode
        return None
    end = zero + 5
    size = len(data)
    query = _blank(Query)
    if size == end:
        if counts != _QD1_AR0:
            return None
        query.qtype, query.qclass = _QTYPE_QCLASS.unpack_from(data, zero + 1)
        query.edns = query.do = False
        query.payload, query.cluster_option, query.ecs = 512, None, None
    else:
        pos = end + 11
        if size < pos or counts != _QD1_AR1:
            return None
        cluster = ecs = None
        if size >= pos + 4:  # an option: read its code and length with the rest
            (qtype, qclass, root, rtype, payload, extended, ednsflags, rdlength, code,
             length) = _QUESTION_OPT_OPTION.unpack_from(data, zero + 1)
            if root or rtype != _TYPE_OPT or extended or pos + rdlength != size:
                return None
            if rdlength == length + 4:  # exactly one option
                if code == (option_code[0] << 8 | option_code[1]):
                    cluster = data[pos + 4 :]
                elif code == OPTION_ECS:
                    ecs = data[pos + 4 :]
                elif code == OPTION_COOKIE and length != CLIENT_COOKIE_BYTES and length not in _COOKIE_PAIR_BYTES:
                    return None  # cookie_length_ok inlined; FORMERR (RFC 7873 5.2.2): the strict parser says so
            else:
                cluster, ecs = _read_options(data, pos, option_code)
                if cluster is _MALFORMED:
                    return None
        else:
            qtype, qclass, root, rtype, payload, extended, ednsflags, rdlength = _QUESTION_OPT.unpack_from(
                data, zero + 1)
            if root or rtype != _TYPE_OPT or extended or rdlength or size != pos:
                return None
        query.qtype, query.qclass = qtype, qclass
        query.edns, query.payload, query.do = True, payload, ednsflags >= EDNS_DO
        query.cluster_option, query.ecs = cluster, ecs
    query.flags = flags
    query.question = data[12:end]
    query.name = data[12 : zero + 1].lower()
    query.version = 0
    query.strict = False
    return query


_MALFORMED = b"malformed"


def _read_options(data: bytes, pos: int, option_code: bytes) -> tuple[bytes | None, bytes | None]:
    """The data of the first cluster-name and ECS options from ``pos`` to the end of
    ``data``, or ``(_MALFORMED, None)`` when an option runs past the end or is a COOKIE
    of a length RFC 7873 forbids (both FORMERR)."""
    size = len(data)
    cluster = ecs = None
    while pos < size:
        start = pos + 4
        if start > size:
            return _MALFORMED, None
        code = data[pos : pos + 2]
        pos = start + (data[pos + 2] << 8 | data[pos + 3])
        if pos > size:
            return _MALFORMED, None
        if code == option_code:
            if cluster is None:
                cluster = data[start:pos]
        elif code == _ECS_CODE:
            if ecs is None:
                ecs = data[start:pos]
        elif code == _COOKIE_CODE and not cookie_length_ok(pos - start):
            return _MALFORMED, None
    return cluster, ecs


def letters_only_in_name(data: bytes, option_code: bytes) -> bool:
    """True when a packet that :func:`read_common` accepts has no ASCII letter
    outside its ID, its qname and the data of its cluster-name options
    (``option_code``, 2 bytes).

    Such a packet and any other that is equal to it once both are lowercased
    differ only in the letter case of those parts (a byte that is not a letter
    lowercases to itself, and a letter never to a non-letter).
    """
    zero = data.find(0, 12)
    if _has_letters(data[2:12]):
        return False
    end = zero + 5
    if len(data) == end:
        return not _has_letters(data[zero:])
    pos = end + 11
    if _has_letters(data[zero:pos]):
        return False
    while pos < len(data):
        code, length = _OPTION_RAW.unpack_from(data, pos)
        value = data[pos + 4 : pos + 4 + length]
        if _has_letters(data[pos : pos + 4]) or (code != option_code and _has_letters(value)):
            return False
        pos += 4 + length
    return True


def _has_letters(raw: bytes) -> bool:
    return raw.lower() != raw.upper()


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
    while True:
        if pos >= len(data):
            raise FormError("name runs past the end of the packet")
        length = data[pos]
        if length == 0:
            return labels, (pos + 1 if end < 0 else end)
        if length >= POINTER:
            jumps += 1
            if end < 0:
                end = pos + 2
            pos = _pointer_target(data, pos, jumps)
            continue
        total += length + 1
        labels.append(_label_at(data, pos, total))
        pos += 1 + length


def _pointer_target(data: bytes, pos: int, jumps: int) -> int:
    """Where the compression pointer at ``pos``, the ``jumps``-th of its name, points."""
    if pos + 1 >= len(data):
        raise FormError("compression pointer runs past the end of the packet")
    target = ((data[pos] & ~POINTER) << 8) | data[pos + 1]
    if target >= pos:
        raise FormError("compression pointer does not point backwards")
    if jumps > MAX_POINTER_JUMPS:
        raise FormError("too many compression pointers")
    return target


def _label_at(data: bytes, pos: int, total: int) -> bytes:
    """The label whose length byte is at ``pos``, its name ``total`` bytes long so far."""
    length = data[pos]
    if length > MAX_LABEL_BYTES:
        raise FormError(f"reserved label type 0x{length & POINTER:02x}")
    if total > MAX_NAME_BYTES:
        raise FormError("name is longer than 255 bytes")
    label = data[pos + 1 : pos + 1 + length]
    if len(label) < length:
        raise FormError("label runs past the end of the packet")
    return label


def name_to_wire(labels: list[bytes] | tuple[bytes, ...]) -> bytes:
    """The uncompressed wire form of a name given as labels."""
    return b"".join(bytes((len(label),)) + label for label in labels) + b"\0"


def is_labels(wire: bytes) -> bool:
    """True when ``wire`` is exactly a sequence of uncompressed labels of 1 to 63
    bytes each (a name in wire form without its root label)."""
    pos, size = 0, len(wire)
    while pos < size:
        length = wire[pos]
        if length == 0 or length > MAX_LABEL_BYTES:
            return False
        pos += length + 1
    return pos == size


def parse_header(data: bytes) -> tuple[int, int, int, int, int, int]:
    """``(id, flags, qdcount, ancount, nscount, arcount)``; raises :class:`ShortHeader`."""
    if len(data) < HEADER_BYTES:
        raise ShortHeader()
    return _HEADER.unpack_from(data)


def parse_query(data: bytes, option_code: bytes) -> Query:
    """Parse a query packet strictly (``option_code``: the cluster-name option, 2 bytes).

    Raises :class:`ShortHeader` (drop it) or :class:`FormError` (answer
    FORMERR): not exactly one question, an OPT outside the additional section,
    not owned by the root or given twice (RFC 6891 6.1.1), a truncated record
    or option, or bytes after the last record; then, for a packet well formed
    but for a COOKIE option of a length other than 8 or 16 to 40 bytes (RFC 7873
    section 5.2.2), :class:`OptionError` (answer FORMERR with the question).
    """
    _, flags, qdcount, ancount, nscount, arcount = parse_header(data)
    if qdcount != 1:
        raise FormError(f"query has {qdcount} questions, not 1")
    labels, pos = read_name(data, 12)
    if pos + 4 > len(data):
        raise FormError("question runs past the end of the packet")
    qtc = data[pos : pos + 4]
    qtype, qclass = _QTYPE_QCLASS.unpack_from(qtc)
    pos += 4
    query = Query(flags, name_to_wire(labels) + qtc, name_to_wire([label.lower() for label in labels]), qtype, qclass,
                  strict=True)
    seen_opt = False
    bad_option = None
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
        if rtype == QType.OPT:
            if index < ancount + nscount or rr_labels or seen_opt:
                raise FormError("OPT must appear once, in the additional section, owned by the root")
            seen_opt = True
            bad_option = _read_opt(query, rclass, ttl, rdata, option_code)
    if pos != len(data):
        raise FormError(f"{len(data) - pos} bytes after the last record")
    if bad_option is not None:
        raise OptionError(bad_option, query)
    return query


def _read_opt(query: Query, payload: int, ttl: int, rdata: bytes, option_code: bytes) -> str | None:
    """Fill ``query``'s EDNS fields from an OPT record; returns what is wrong with an option
    that is whole but holds data its RFC forbids (a COOKIE's length), else ``None``."""
    bad = None
    query.edns, query.payload, query.version = True, payload, (ttl >> 16) & 0xFF
    query.do = bool(ttl & EDNS_DO)
    pos = 0
    while pos < len(rdata):
        if pos + 4 > len(rdata):
            raise FormError("EDNS option header is truncated")
        code, length = _OPTION.unpack_from(rdata, pos)
        value = rdata[pos + 4 : pos + 4 + length]
        if len(value) < length:
            raise FormError(f"EDNS option {code} is truncated")
        raw = rdata[pos : pos + 2]
        if raw == option_code and query.cluster_option is None:
            query.cluster_option = value
        elif code == OPTION_ECS:
            if query.ecs is None:
                query.ecs = value
        elif code == OPTION_COOKIE and not cookie_length_ok(length) and bad is None:
            bad = f"COOKIE option of {length} bytes, not 8 or 16 to 40 (RFC 7873 5.2.2)"
        pos += 4 + length
    return bad


def error_reply(data: bytes, rcode: int) -> bytes:
    """A header-only reply to the packet ``data`` (at least 12 bytes) with ``rcode``.

    Copies the ID and opcode and sets QR; no question, no records. Used where
    the question cannot be trusted (FORMERR: RD is copied, RFC 1035 4.1.1) or
    the opcode is not QUERY (NOTIMP: no flag is echoed, because AA, RD, AD and
    CD are defined only for QUERY; ISC's genreport checks this as
    ``opcode``/``opcodeflg``).
    """
    ident, flags = struct.unpack_from("!HH", data)
    copied = OPCODE_MASK if flags & OPCODE_MASK else OPCODE_MASK | RD
    return _HEADER.pack(ident, QR | (flags & copied) | rcode, 0, 0, 0, 0)
