"""feddns.httpframing, the request framing the HTTPS listener times requests by (both HTTPS components use
it; the stub-zone endpoint's tests hold it): where each request ends, fed whole and a byte at a time, and
that framing it does not understand is never taken for a whole request."""

import pytest

from feddns.httpframing import MAX_HEAD, RequestFraming, Stage

GET = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
POST = b"POST /f HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
CHUNKED = b"POST /f HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n"

# (id, bytes, requests ended, stage after)
CASES = [
    ("nothing", b"", 0, Stage.BETWEEN),
    ("empty lines only", b"\r\n\r\n", 0, Stage.BETWEEN),
    ("a GET", GET, 1, Stage.BETWEEN),
    ("a GET with bare LF", b"GET / HTTP/1.1\nHost: x\n\n", 1, Stage.BETWEEN),
    ("empty lines, then a GET", b"\r\n" + GET, 1, Stage.BETWEEN),
    ("half a head", GET[:20], 0, Stage.HEAD),
    ("a POST", POST, 1, Stage.BETWEEN),
    ("a POST short of its body", POST[:-1], 0, Stage.BODY),
    ("Content-Length 0", b"POST /f HTTP/1.1\r\ncontent-length: 0\r\n\r\n", 1, Stage.BETWEEN),
    ("chunked", CHUNKED, 1, Stage.BETWEEN),
    ("chunked, coding list", CHUNKED.replace(b"chunked", b"gzip, chunked"), 1, Stage.BETWEEN),
    ("chunked short of the last chunk", CHUNKED[:-12], 0, Stage.CHUNK_SIZE),
    ("chunked short of its trailers' end", CHUNKED[:-2], 0, Stage.TRAILERS),
    ("three pipelined", GET + POST + CHUNKED, 3, Stage.BETWEEN),
    ("two and the start of a third", GET + POST + GET[:5], 2, Stage.HEAD),
    ("Content-Length and chunked", b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
     0, Stage.LOST),
    ("two Content-Lengths", b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 0, Stage.LOST),
    ("Content-Length not a number", b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\nhello", 0, Stage.LOST),
    ("a coding not ending in chunked", b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\nxx", 0, Stage.LOST),
    ("a chunk size not hex", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, Stage.LOST),
    ("no line end after a chunk", b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", 0,
     Stage.LOST),
    ("a head over the limit", b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD, 0, Stage.LOST),
]


@pytest.mark.parametrize(("stream", "ended", "stage"), [case[1:] for case in CASES], ids=[c[0] for c in CASES])
def test_where_requests_end(stream: bytes, ended: int, stage: Stage) -> None:
    whole = RequestFraming()
    assert (whole.feed(stream), whole.stage) == (ended, stage)
    by_byte = RequestFraming()
    assert (sum(by_byte.feed(stream[i:i + 1]) for i in range(len(stream))), by_byte.stage) == (ended, stage)


def test_lost_stays_lost() -> None:
    framing = RequestFraming()
    framing.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n")
    assert framing.feed(GET) == 0 and framing.in_request
