"""A kept reply never outlives the record it was made from (feddns.dns.cache, ``Cache.changed``).

A real ``feddns serve`` on a real etcd: a UDP reply asked for twice is kept (the cache's
doorkeeper) and from then on sent without reading the records; every change that removes
its service, its cluster or its federation must drop it. Each case asks over UDP until the
reply is kept, removes the records as the case says, waits until TCP (never kept) says
NXDOMAIN, and then asks over UDP again, in two letter cases.
"""

import dns.rcode
import pytest

from harness.ports import wait_until
from harness.serve import ServeProcess, edns_options

FED = "kf"
GONE = f"gone.ns.{FED}.svc.federation."
KEPT = f"kept.ns.{FED}.svc.federation."
SHARD = {"clusterIP": "10.0.0.1", "externalIP": "1.1.1.1"}


def ask_udp(server: ServeProcess, qname: str, cluster: str | None) -> tuple[int, list[str]]:
    reply = server.query(qname, cluster=cluster)
    return reply.rcode(), sorted(rd.to_text() for rrset in reply.answer for rd in rrset)


def keep(server: ServeProcess, qname: str, cluster: str | None) -> None:
    """Ask until the reply is certainly kept (the doorkeeper admits a packet the second time)."""
    for _ in range(4):
        assert ask_udp(server, qname, cluster)[0] == dns.rcode.NOERROR


def gone_over_tcp(server: ServeProcess, qname: str) -> bool:
    return server.query(qname, tcp=True).rcode() == dns.rcode.NXDOMAIN


CASES = {
    # the service's only shard, in a cluster with no record; another service keeps the federation
    "shard deleted, federation stays": ({"gone/solo": SHARD, "kept/foo": SHARD, "_clusters/foo": {"zone": "z"}},
                                        ["gone/solo"], None),
    # the same, the value overwritten with one that does not parse
    "shard overwritten by a bad value": ({"gone/solo": SHARD, "kept/foo": SHARD}, ["gone/solo=bad"], None),
    # the last service of a federation with no cluster record: the federation goes too
    "last service of the federation": ({"gone/solo": SHARD}, ["gone/solo"], None),
    # asked with option 65245 naming the cluster
    "asked by the cluster itself": ({"gone/solo": SHARD, "kept/other": SHARD}, ["gone/solo"], "solo"),
    # the cluster record deleted first (queries in between), the shard later
    "cluster record first, then the shard": ({"_clusters/solo": {"zone": "z"}, "gone/solo": SHARD},
                                             ["_clusters/solo", "gone/solo"], None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_removed_service_is_not_answered_from_a_kept_reply(etcd, etcd_prefix, case: str) -> None:
    records, steps, cluster = CASES[case]
    base = f"{etcd_prefix}/{FED}"
    for key, value in records.items():
        etcd.put(f"{base}/{key}" if key.startswith("_") else f"{base}/ns/{key}", value)
    with ServeProcess(etcd_url=etcd.url, prefix=etcd_prefix) as server:
        wait_until(lambda: ask_udp(server, GONE, cluster)[0] == dns.rcode.NOERROR, what="first load")
        keep(server, GONE, cluster)
        keep(server, GONE.upper(), cluster)
        for n, step in enumerate(steps):
            if n:
                keep(server, GONE, cluster)  # still there between the steps, and kept again
            key, _, bad = step.partition("=")
            full = f"{base}/{key}" if key.startswith("_") else f"{base}/ns/{key}"
            if bad:
                etcd.put(full, "{not json")
            else:
                etcd.delete(full)
        wait_until(lambda: gone_over_tcp(server, GONE), what="NXDOMAIN over TCP")
        for qname in (GONE, GONE.upper(), "gOnE" + GONE[4:]):
            assert ask_udp(server, qname, cluster) == (dns.rcode.NXDOMAIN, []), qname


def test_a_second_federation_drops_the_mcs_replies_of_the_first(etcd, etcd_prefix) -> None:
    """The MCS zone shows the only federation held (docs/serve.md): once a second one is
    put, its names are SERVFAIL, over UDP too, not the replies kept from before."""
    base = f"{etcd_prefix}/{FED}"
    etcd.put(f"{base}/ns/kept/foo", SHARD)
    mcs = "kept.ns.svc.clusterset.local."
    with ServeProcess(etcd_url=etcd.url, prefix=etcd_prefix, extra_args=["--mcs-zone", "clusterset.local."]) as server:
        wait_until(lambda: ask_udp(server, mcs, None)[0] == dns.rcode.NOERROR, what="first load")
        keep(server, mcs, None)
        etcd.put(f"{etcd_prefix}/other/ns/web/foo", SHARD)
        wait_until(lambda: server.query(mcs, tcp=True).rcode() == dns.rcode.SERVFAIL, what="SERVFAIL over TCP")
        for qname in (mcs, mcs.upper()):
            assert ask_udp(server, qname, None)[0] == dns.rcode.SERVFAIL, qname


def test_a_cluster_known_from_its_first_shard_drops_the_replies_asked_in_its_name(etcd, etcd_prefix) -> None:
    """Option 65245 naming a cluster not known yet is passed over (ECS decides: foo's CIDR,
    foo's own clusterIP first); once the cluster's first shard is put, in another service,
    the option decides, in every service of the federation, over UDP too."""
    base = f"{etcd_prefix}/{FED}"
    etcd.put(f"{base}/_clusters/foo", {"zone": "z1", "region": "r1", "cidrs": ["10.240.0.0/16"]})
    etcd.put(f"{base}/ns/kept/foo", {"clusterIP": "10.96.0.1", "externalIP": "1.1.1.1"})
    options = edns_options("late", "10.240.1.0/24")
    with ServeProcess(etcd_url=etcd.url, prefix=etcd_prefix) as server:
        def asked(tcp: bool = False) -> list[str]:
            reply = server.query(KEPT, options=options, tcp=tcp)
            return [rd.to_text() for rrset in reply.answer for rd in rrset]
        wait_until(lambda: asked() == ["10.96.0.1"], what="first load")
        for _ in range(3):
            assert asked() == ["10.96.0.1"]
        etcd.put(f"{base}/ns/other/late", SHARD)
        wait_until(lambda: asked(tcp=True) == ["1.1.1.1"], what="the option deciding over TCP")
        assert asked() == ["1.1.1.1"]
