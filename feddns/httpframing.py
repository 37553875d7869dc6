"""Where each HTTP/1.1 request ends in a stream of bytes (RFC 9112 section 6, "Message Body Length"):
just enough of the framing for the HTTPS listener (:mod:`feddns.https`) to give every request a deadline,
whatever application parses it.

A request is its head (the request line and header fields, up to the empty line), then a body of
``Content-Length`` bytes or in ``chunked`` coding (its chunks, the last chunk, trailer fields, the empty
line), or no body when neither is given (section 6.3, rule 7). Empty lines before a request line are
skipped (section 2.2). A line may end in LF alone, as the application's parser allows.

This is not a parser the application relies on: the application (aiohttp) parses every request itself
and refuses what it does not accept. Framing this module does not understand (a transfer coding that
does not end in ``chunked``, ``Content-Length`` twice or beside ``Transfer-Encoding``, a head over
:data:`MAX_HEAD` bytes, a bad chunk-size line) leaves the stream *lost*: inside a request for good,
so the deadline closes the connection, as the application closes it after refusing such a request.
Never the other way round: a request this module counts as whole is whole.
"""

import enum

MAX_HEAD = 64 * 1024
"""Bytes of a request head followed at most (the application refuses a header line over 8190 bytes)."""
MAX_LINE = 4096
"""Bytes of a chunk-size line or a trailer field followed at most."""


class Stage(enum.Enum):
    """Where the stream is."""

    BETWEEN = "between requests"
    HEAD = "in a request head"
    BODY = "in a body of known length"
    CHUNK_SIZE = "in a chunk-size line"
    CHUNK_DATA = "in a chunk's data"
    CHUNK_END = "at the line end after a chunk"
    TRAILERS = "in the trailer fields"
    LOST = "lost: framing not understood"


class RequestFraming:
    """Follows the requests of one connection: :meth:`feed` every byte received, in order."""

    __slots__ = ("_line", "_remaining", "stage")

    def __init__(self) -> None:
        self.stage = Stage.BETWEEN
        self._line = bytearray()  # the head, or the current chunk-size, chunk-end or trailer line
        self._remaining = 0  # bytes left of a body or a chunk

    @property
    def in_request(self) -> bool:
        """Whether a request has started and not ended (always, once lost)."""
        return self.stage is not Stage.BETWEEN

    @property
    def in_head(self) -> bool:
        """Whether the current request's head has not ended: the application has no request to answer yet."""
        return self.stage is Stage.HEAD

    def feed(self, data: bytes) -> int:
        """Follow ``data``; returns how many requests ended in it."""
        ended, position = 0, 0
        while position < len(data) and self.stage is not Stage.LOST:
            position, done = self._step(data, position)
            ended += done
        return ended

    def _step(self, data: bytes, position: int) -> tuple[int, int]:
        """One stage's worth of ``data`` from ``position``: the new position, and 1 when a request ended."""
        if self.stage is Stage.BETWEEN:
            return self._between(data, position), 0
        if self.stage is Stage.HEAD:
            return self._head(data, position)
        if self.stage in (Stage.BODY, Stage.CHUNK_DATA):
            taken = min(self._remaining, len(data) - position)
            self._remaining -= taken
            if self._remaining:
                return position + taken, 0
            if self.stage is Stage.BODY:
                return self._end(position + taken)
            self.stage = Stage.CHUNK_END
            return position + taken, 0
        return self._chunk_line(data, position)

    def _between(self, data: bytes, position: int) -> int:
        while position < len(data) and data[position] in b"\r\n":
            position += 1
        if position < len(data):
            self.stage = Stage.HEAD
        return position

    def _head(self, data: bytes, position: int) -> tuple[int, int]:
        start = max(len(self._line) - 2, 0)  # the end may straddle two reads
        self._line += data[position:]
        end = _head_end(self._line, start)
        if end is None:
            if len(self._line) > MAX_HEAD:
                self._lose()
            return len(data), 0
        head, rest = bytes(self._line[:end]), len(self._line) - end
        self._line.clear()
        position = len(data) - rest
        length = _body_length(head)
        if length is None:
            self._lose()
            return position, 0
        if length == CHUNKED:
            self.stage = Stage.CHUNK_SIZE
            return position, 0
        if length == 0:
            return self._end(position)
        self.stage, self._remaining = Stage.BODY, length
        return position, 0

    def _chunk_line(self, data: bytes, position: int) -> tuple[int, int]:
        """A chunk-size line, the line end after a chunk's data, or a trailer field."""
        newline = data.find(b"\n", position)
        if newline < 0:
            self._line += data[position:]
            if len(self._line) > MAX_LINE:
                self._lose()
            return len(data), 0
        self._line += data[position:newline]
        line = bytes(self._line).removesuffix(b"\r")
        self._line.clear()
        position = newline + 1
        if self.stage is Stage.CHUNK_END:
            if line:
                self._lose()
            else:
                self.stage = Stage.CHUNK_SIZE
            return position, 0
        if self.stage is Stage.TRAILERS:
            return self._end(position) if not line else (position, 0)
        size = _chunk_size(line)
        if size is None:
            self._lose()
        elif size == 0:
            self.stage = Stage.TRAILERS
        else:
            self.stage, self._remaining = Stage.CHUNK_DATA, size
        return position, 0

    def _end(self, position: int) -> tuple[int, int]:
        self.stage = Stage.BETWEEN
        return position, 1

    def _lose(self) -> None:
        self.stage = Stage.LOST
        self._line.clear()


def _head_end(buffer: bytearray, start: int) -> int | None:
    """The index just past the empty line that ends a head (``\\n\\n`` or ``\\n\\r\\n``), or ``None``."""
    ends = [(index, index + len(end)) for end in (b"\n\n", b"\n\r\n") if (index := buffer.find(end, start)) >= 0]
    return min(ends)[1] if ends else None


_HEX = frozenset(b"0123456789abcdefABCDEF")


CHUNKED = -1
"""What :func:`_body_length` says of a body in chunked coding."""


def _body_length(head: bytes) -> int | None:
    """The body's length in bytes, :data:`CHUNKED`, or ``None`` when the framing is not understood."""
    lengths: set[bytes] = set()
    codings: list[bytes] = []
    for line in head.split(b"\n")[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            continue
        name, value = name.strip().lower(), value.strip(b" \t\r")
        if name == b"content-length":
            lengths.add(value)
        elif name == b"transfer-encoding":
            codings += [coding.strip(b" \t").lower() for coding in value.split(b",")]
    if codings:
        return CHUNKED if codings[-1] == b"chunked" and not lengths else None
    if not lengths:
        return 0
    length = lengths.pop() if len(lengths) == 1 else b""
    return int(length) if length.isdigit() else None


def _chunk_size(line: bytes) -> int | None:
    size = line.partition(b";")[0].strip(b" \t")
    return int(size, 16) if size and set(size) <= _HEX else None
