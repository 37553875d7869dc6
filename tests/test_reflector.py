"""feddns.reflector without the kubernetes client: a scripted list call stands for the API server.

The controller's and the links webhook's tests run it against the fake API server
(tests/controller/test_watch.py, tests/links/test_resilience.py); these pin the
protocol's decisions one by one: what is asked, what a 410 or a 404 leads to.
"""

import json
import threading
from collections.abc import Iterator
from typing import Any

from feddns.reflector import PAGE_SIZE, ListSource, Reflector, WatchTiming
from harness.ports import wait_until

FAST = WatchTiming(watch_timeout=1, connect_timeout=1, read_slack=1, list_timeout=1,
                   backoff_initial=0.01, backoff_max=0.05)


class Refused(Exception):
    """What the client raises for an HTTP error: ``kubernetes.client.ApiException``'s ``status`` and ``reason``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"({status}) {reason}")
        self.status, self.reason = status, reason


class Body:
    """A response: a list page (``data``) or a watch (``stream``), released when read."""

    def __init__(self, payload: Any = None, lines: tuple[Any, ...] = ()) -> None:
        self.data = json.dumps(payload).encode()
        self.lines = lines
        self.released = False

    def stream(self, amt: int | None = None, decode_content: bool | None = None) -> Iterator[bytes]:
        for line in self.lines:
            yield line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n"

    def release_conn(self) -> None:
        self.released = True

    def shutdown(self) -> None:
        pass


class Server:
    """Answers each call with the next scripted answer (a ``Body`` or an exception to raise);
    when the script runs out, a watch that blocks until the reflector stops."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.calls: list[dict[str, Any]] = []
        self.clients = 0
        self.clients_by_then = 0
        """Clients made when the script ran out."""
        self.idle = threading.Event()

    def connect(self) -> "Server":
        self.clients += 1
        return self

    def close(self) -> None:
        pass

    def call(self, **params: Any) -> Body:
        self.calls.append(params)
        if not self.answers:
            if not self.idle.is_set():
                self.clients_by_then = self.clients
            self.idle.set()
            raise Refused(503, "script over")
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]


class Recorder:
    """A ReflectorSink keeping what it is given."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def listing(self, count: int, seconds: float) -> None:
        self.calls.append(("listing", count))

    def listed(self, objects: list[Any], seconds: float) -> None:
        self.calls.append(("listed", objects))

    def event(self, event_type: str, obj: Any) -> None:
        self.calls.append((event_type, obj))

    def failed(self, error: str) -> None:
        self.calls.append(("failed", error))

    def restarted(self, reason: str) -> None:
        self.calls.append(("restarted", reason))


def page(*names: str, version: str = "10", token: str | None = None) -> Body:
    return Body({"items": [{"metadata": {"name": n}} for n in names],
                 "metadata": {"resourceVersion": version, "continue": token}})


def added(name: str, version: str) -> dict[str, Any]:
    return {"type": "ADDED", "object": {"metadata": {"name": name, "resourceVersion": version}}}


def run(server: Server, *, optional: bool = False, selector: str | None = None) -> Recorder:
    """Run a reflector until the script is over (the first answer past it), then stop it."""
    sink = Recorder()
    reflector = Reflector(ListSource(server.connect, lambda client: client.call, label_selector=selector,
                                 optional=optional),
                          sink, name="test", timing=FAST, shrink=lambda obj: obj["metadata"]["name"])
    reflector.start()
    try:
        wait_until(server.idle.is_set, timeout=5, what="the script played")
    finally:
        reflector.stop()
    assert not reflector.alive
    return sink


def test_pages_then_a_watch_from_the_lists_version_with_the_selector():
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "20"}}}
    server = Server(page("a", token="t1"), page("b", version="12"),
                    Body(lines=(added("c", "13"), bookmark)),
                    Body(lines=(added("d", "21"),)))
    sink = run(server, selector="app=x")
    assert sink.calls[:4] == [("listed", ["a", "b"]), ("ADDED", "c"), ("restarted", "closed"), ("ADDED", "d")]
    lists, watches = server.calls[:2], server.calls[2:4]
    assert [c.get("_continue") for c in lists] == [None, "t1"] and lists[0]["limit"] == PAGE_SIZE
    assert [c["resource_version"] for c in watches] == ["12", "20"]  # the list's version, then the bookmark's
    assert all(c["label_selector"] == "app=x" and c["_preload_content"] is False for c in server.calls[:4])
    assert watches[0]["allow_watch_bookmarks"] and watches[0]["timeout_seconds"] == FAST.watch_timeout


def test_a_410_status_or_error_event_lists_again_with_the_same_client():
    gone_event = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}
    server = Server(page("a"), Refused(410, "Gone"), page("b"), Body(lines=(added("c", "11"), gone_event)), page("d"))
    sink = run(server)
    assert sink.calls[:6] == [("listed", ["a"]), ("restarted", "expired"), ("listed", ["b"]), ("ADDED", "c"),
                              ("restarted", "expired"), ("listed", ["d"])]
    assert server.clients_by_then == 1  # a 410 is no failure: the client is kept


def test_other_failures_are_reported_and_a_new_client_made():
    server = Server(Refused(500, "Internal Server Error"), Body(payload={"items": "no"}),
                    page("a"), Body(lines=(b"not json\n",)), page("b"))
    sink = run(server)
    assert [kind for kind, _ in sink.calls[:5]] == ["failed", "failed", "listed", "failed", "listed"]
    assert sink.calls[0] == ("failed", "HTTP 500 Internal Server Error")
    assert "not an event" in sink.calls[3][1]
    assert server.clients_by_then == 1 + 3  # one after each failure


def test_an_optional_resource_that_answers_404_is_listed_empty():
    sink = run(Server(Refused(404, "Not Found"), page("a")), optional=True)
    assert sink.calls[:2] == [("listed", []), ("listed", ["a"])]
    sink = run(Server(Refused(404, "Not Found")))
    assert sink.calls[0] == ("failed", "HTTP 404 Not Found")  # not optional: a failure


def test_the_timing_defaults_notice_a_black_hole_within_a_minute():
    assert WatchTiming().silence_limit == 55
