"""feddns serve on the example federation answers the design document's lookup."""

from harness.serve import ServeProcess

QNAME = "myservice.myns.myfederation.svc.federation."


def test_example_federation_puts_own_cluster_first():
    with ServeProcess(example=True) as server:
        addresses = server.addresses(QNAME, cluster="foo")
    assert addresses[0] == "10.0.3.64"
    assert sorted(addresses[1:]) == ["104.32.64.130", "108.120.45.12"]
