"""The etcd fixture itself: a real server that stores, deletes and compacts."""


def test_put_get_delete_roundtrip(etcd, etcd_prefix):
    rev = etcd.put(f"{etcd_prefix}/a", {"x": 1})
    assert etcd.get_prefix(etcd_prefix) == {f"{etcd_prefix}/a": '{"x": 1}'}
    assert etcd.delete(etcd_prefix, prefix=True) > rev
    assert etcd.get_prefix(etcd_prefix) == {}
