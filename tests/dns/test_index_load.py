"""A full load's pages (``Index.put_page``) leave the index exactly as a put per record does.

``put_page`` stores the usual shard record itself and sends every other record through
``Index.put``; these tests give both the same records, good and bad, in range-read order
and out of it, and compare what each index holds, logs and counts: a bad key or value is
skipped, logged once and kept in ``invalid`` either way, and a service with no valid
shard is not a name.
"""

import logging
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feddns.dns.index import Index
from feddns.errors import RecordError
from feddns.keys import Layout, RangeSplitter

GOOD = b'{"clusterIP":"10.0.0.1","externalIP":"192.0.2.1","ports":[{"name":"http","protocol":"TCP","port":80}]}'
VALUES = [
    GOOD,
    b'{"clusterIP":"10.0.0.2","ready":0}',
    b'{"clusterIPs":["10.0.0.3","fd00::3"],"externalIPs":["2001:db8::3"],"ready":2}',
    b'{"clusterIP":"10.0.0.4","ports":[{"name":"http","port":80},{"name":"dns","protocol":"UDP","port":53}]}',
    b'{"clusterIP":"10.0.0.5","policy":"failover","failoverOrder":["b","a"]}',
    b'{"clusterIP":"10.0.0.6","policy":"round-robin"}',  # a bad policy: the default one, noted
    b'{"clusterIP":"10.0.0.7","endpoints":[{"ip":"10.1.0.7","hostname":"web-0"}]}',  # headless
    b'{"clusterIP":"10.0.0.999"}',  # a bad address: skipped
    b'{"clusterIP":"10.0.0.8","ports":[{"name":"HTTP","port":80}]}',  # a bad port name: skipped
    b"not json",
    b"[]",
    b'{"zone":"z1","region":"r1","cidrs":["10.240.0.0/16"]}',
    b'{"zone":""}',
]
KEYS = [
    "/fed/prod/web/a", "/fed/prod/web/b", "/fed/prod/web/c", "/fed/prod/api/a", "/fed/dev/web/a",
    "/other/prod/web/a", "/fed/_clusters/a", "/fed/_clusters/b", "/fed/prod/web/B", "/fed/prod/web/",
    "/fed/prod/web/a/x", "/fed/Prod/web/a", "/fed/prod/web", "/fed/prod/web/-a", "outside/prod/web/a",
]


def state(index: Index) -> dict[str, object]:
    """Everything an index holds that answers, metrics or logs read."""
    return {
        "names": {name: (node.kind, node.service, node.shards) for name, node in index.names.items()},
        "by_id": {sid: node.shards for sid, node in index.by_id.items()},
        "federations": {name: (fed.clusters, fed.shard_refs, dict(fed.namespaces), fed.known, fed.cidr_table)
                        for name, fed in index.federations.items()},
        "invalid": index.invalid, "defaulted": index.defaulted, "skipped": index.skipped, "len": len(index),
    }


def one_by_one(items: list[tuple[str, bytes]]) -> Index:
    index = Index(Layout())
    for key, value in items:
        index.put(key, value)
    return index


def paged(items: list[tuple[str, bytes]]) -> Index:
    index = Index(Layout())
    index.put_page(items)
    return index


@settings(max_examples=400, derandomize=True, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES)), max_size=12), st.booleans())
def test_a_page_is_stored_as_a_put_per_record(items, in_key_order):
    if in_key_order:
        items = sorted(items)
    assert state(paged(items)) == state(one_by_one(items))


def test_a_service_emptied_by_a_bad_record_in_the_page_is_made_again_by_its_next_shard():
    items = [("/fed/prod/api/a", GOOD), ("/fed/prod/api/b", GOOD),  # cluster names a and b known to the splitter
             ("/fed/prod/web/a", GOOD), ("/fed/prod/web/a", b"not json"), ("/fed/prod/web/b", GOOD)]
    index = paged(items)
    assert state(index) == state(one_by_one(items))
    assert index.lookup(b"\x01b\x03web\x04prod\x03fed\x03svc") is not None


def test_a_bad_value_is_logged_and_kept_in_invalid_as_a_watch_event_is(caplog):
    items = [("/fed/prod/web/a", GOOD), ("/fed/prod/web/b", b'{"clusterIP":"10.0.0.999"}'),
             ("/fed/prod/web/c", b"not json"), ("/fed/prod/lonely/a", b"[]")]
    with caplog.at_level(logging.WARNING, logger="feddns.dns.index"):
        index = paged(items)
    paged_log = [record.getMessage() for record in caplog.records]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="feddns.dns.index"):
        one_by_one(items)
    assert paged_log == [record.getMessage() for record in caplog.records]
    assert len(paged_log) == 3 and index.skipped == 3
    assert set(index.invalid) == {"/fed/prod/web/b", "/fed/prod/web/c", "/fed/prod/lonely/a"}
    assert set(index.by_id["fed", "prod", "web"].shards or {}) == {"a"}
    assert index.lookup(b"\x06lonely\x04prod\x03fed\x03svc") is None  # no valid shard: no name


def test_the_splitter_splits_as_the_layout_does():
    layout = Layout("/p")
    splitter = RangeSplitter(layout)
    keys = ["/p/fed/prod/web/a", "/p/fed/prod/web/b", "/p/fed/prod/web/B", "/p/fed/prod/web/b/c",
            "/p/fed/_clusters/a", "/p/fed/prod/web/a", "/p/fed/prod/web/", "/fed/prod/web/a", "/p/fed/prod/api/a"]
    for key in keys:
        try:
            expected: object = layout.split(key)
        except RecordError as exc:
            with pytest.raises(RecordError, match=re.escape(str(exc))):
                splitter.split(key)
            continue
        parts = splitter.split(key)
        got = (*parts[0], parts[1]) if isinstance(parts[0], tuple) else parts
        assert got == expected, key
