"""``feddns serve`` freezes the records after a full load (feddns.store.settle_heap), so that
Python's full collections no longer visit them; the next full load reaches what the last froze."""

import gc
import weakref

from feddns.dns.index import Index
from feddns.dns.responder import AnswerSettings, Responder
from feddns.keys import Layout
from feddns.store import Feed

RECORD = ("/fed/prod/web/a", b'{"clusterIP": "10.0.0.1", "externalIP": "192.0.2.1"}')


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_full_load_freezes_and_the_next_collects_what_it_froze() -> None:
    layout = Layout()
    index = Index(layout)
    feed = Feed(index, Responder(AnswerSettings()), freeze=True)
    try:
        cycle = _Cycle()
        gone = weakref.ref(cycle)
        feed.replace([RECORD], revision=1)
        assert gc.get_freeze_count() > 0
        assert len(feed.index) == 1
        del cycle
        gc.collect()
        assert gone() is not None  # frozen: full collections leave it alone
        feed.replace([RECORD], revision=2)
        assert gone() is None  # the next full load unfroze and collected it
    finally:
        gc.unfreeze()


def test_feeds_freeze_only_when_asked() -> None:
    gc.unfreeze()
    index = Index(Layout())
    Feed(index, Responder(AnswerSettings())).replace([RECORD], revision=1)
    assert gc.get_freeze_count() == 0


def test_free_memory_is_given_back_where_glibc_can() -> None:
    import platform

    from feddns import libc

    assert libc.release_free_memory() == (platform.libc_ver()[0] == "glibc")
