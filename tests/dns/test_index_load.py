"""A full load's pages (``Index.put_page``) leave the index exactly as a put per record does.

``put_page`` reads keys only and keeps each shard's value unread until its service is
looked up, changed or reached by ``Index.parse_some``; these tests give both the same
records, good and bad, in range-read order and out of it, and compare what each index
holds, logs and counts once parsed, and what a lookup finds before: a bad key or value
is skipped, logged once and kept in ``invalid`` either way, and a service with no valid
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
    b'{"clusterIP":\n "10.0.0.9"}',  # a newline in a value: its service's values are kept with their lengths
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


def paged(items: list[tuple[str, bytes]], *, parse: bool = True) -> Index:
    index = Index(Layout())
    index.put_page(items)
    if parse:
        index.parse_all()
    return index


def looked_up(index: Index, names: list[bytes]) -> dict[bytes, object]:
    """What a lookup of each name finds: its kind, service and shards, or ``None``."""
    found = {name: index.lookup(name) for name in names}
    return {name: None if node is None else (node.kind, node.service, node.shards) for name, node in found.items()}


def names_of(items: list[tuple[str, bytes]]) -> list[bytes]:
    """The service, shard and SRV names the keys of ``items`` could make, and a headless endpoint's."""
    names: list[bytes] = []
    for key, _ in items:
        labels = key.strip("/").split("/")
        if len(labels) == 4 and all(labels):
            service = b"".join(bytes([len(label)]) + label.encode() for label in (*labels[2:0:-1], labels[0], "svc"))
            names += [service, bytes([len(labels[3])]) + labels[3].encode() + service, b"\x05_http\x04_tcp" + service,
                      b"\x05web-0" + bytes([len(labels[3])]) + labels[3].encode() + service]
    return names


@settings(max_examples=400, derandomize=True, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES)), max_size=12), st.booleans())
def test_a_page_is_stored_as_a_put_per_record(items, in_key_order):
    if in_key_order:
        items = sorted(items)
    expected = one_by_one(items)
    assert state(paged(items)) == state(expected)
    names = names_of(items)
    assert looked_up(paged(items, parse=False), names) == looked_up(expected, names)  # parsed as looked up


@settings(max_examples=200, derandomize=True, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES)), max_size=12), st.integers(0, 12))
def test_a_service_whose_records_two_pages_part_is_stored_as_one(items, cut):
    """A range read's page may end inside a service: the next page goes on with its records."""
    items = sorted(items)
    index = Index(Layout())
    index.put_page(items[:cut])
    index.put_page(items[cut:])
    index.parse_all()
    assert state(index) == state(one_by_one(items))


@settings(max_examples=200, derandomize=True, deadline=None, database=None)
@given(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from(VALUES)), max_size=12),
       st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from([*VALUES, None])), max_size=4))
def test_a_change_to_a_service_not_yet_parsed_is_applied_to_its_records(items, changes):
    """Watch events after a load reach services whose records still wait: each is compared
    with the record it replaces, as after a put per record."""
    expected, loaded = one_by_one(items), paged(items, parse=False)
    for key, value in changes:
        for index in (expected, loaded):
            if value is None:
                index.delete(key)
            else:
                index.put(key, value)
    loaded.parse_all()
    assert state(loaded) == state(expected)


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
        index = paged(items, parse=False)
        assert not caplog.records  # the values are not read yet
        assert index.lookup(b"\x06lonely\x04prod\x03fed\x03svc") is None  # read now: no valid shard, no name
        assert [record.getMessage() for record in caplog.records] == [
            "skipping record /fed/prod/lonely/a: shard record must be a JSON object"]
        assert index.parse_some(1) == 0  # the other service
    paged_log = [record.getMessage() for record in caplog.records]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="feddns.dns.index"):
        one_by_one(items)
    assert sorted(paged_log) == sorted(record.getMessage() for record in caplog.records)
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


def test_a_cluster_known_only_by_a_bad_value_is_forgotten_when_the_value_is_read():
    """Until its value is read, a shard's key makes its cluster known (a cluster-name option may
    name it); when the value turns out bad and it was the cluster's only shard, the index tells
    its owner that the federation changed, so that answers kept for that asker go."""
    index = paged([("/fed/prod/api/z", b"not json"), ("/fed/prod/web/a", GOOD)], parse=False)
    told: list[object] = []
    index.on_change = told.append
    assert b"z" in index.federations["fed"].known
    assert index.lookup(b"\x03api\x04prod\x03fed\x03svc") is None
    assert b"z" not in index.federations["fed"].known
    assert [type(change).__name__ for change in told] == ["FederationChanged"]
    assert index.lookup(b"\x03web\x04prod\x03fed\x03svc") is not None and len(told) == 1
