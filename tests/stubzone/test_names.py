"""Tables for the pure parts: allow-list matching, nameserver forms, the SkyDNS key layout."""

import pytest
from cryptography.hazmat.primitives import serialization

from feddns.errors import ConfigError
from stubzone import pki
from stubzone.auth import AllowList, ClientIdentity
from stubzone.backends.skydns_layout import SkyDNSLayout, from_skydns, skydns_value
from stubzone.model import Nameserver, StubDomains


def identity(cn: str, dns: list[str] = (), ips: list[str] = (), uris: list[str] = ()) -> ClientIdentity:
    """The identity of a real certificate with these names (made by stubzone.pki)."""
    validity = pki.Validity.days_from(1)
    authority = pki.make_ca("test CA", pki.new_key(), validity)
    leaf = pki.issue(authority, "client", cn, pki.parse_sans(list(dns), list(ips), list(uris)), pki.new_key(), validity)
    return ClientIdentity.from_der(leaf.public_bytes(serialization.Encoding.DER))


# (allow entries, certificate names, allowed?)
ALLOW = [
    (["ctl"], {"cn": "ctl"}, True),
    (["ctl"], {"cn": "CTL"}, False),                                            # a CN is exact
    (["ctl.example.com."], {"cn": "x", "dns": ["CTL.Example.com"]}, True),     # DNS: case and trailing dot
    (["2001:db8::1"], {"cn": "x", "ips": ["2001:0db8:0:0::1"]}, True),         # IPs compare as addresses
    (["192.0.2.1"], {"cn": "192.0.2.1"}, True),                                # the CN's text
    (["192.0.2.1"], {"cn": "x", "ips": ["192.0.2.10"]}, False),
    (["spiffe://fed/ctl"], {"cn": "x", "uris": ["spiffe://fed/ctl"]}, True),
    (["spiffe://fed/ctl"], {"cn": "x", "uris": ["spiffe://fed/CTL"]}, False),
    (["a", "b"], {"cn": "c", "dns": ["d"]}, False),
]


@pytest.mark.parametrize(("entries", "names", "allowed"), ALLOW)
def test_allow_list(entries, names, allowed):
    assert (AllowList(entries).match(identity(**names)) is not None) is allowed


def test_identity_is_named_by_cn_in_logs():
    assert str(identity("ctl", dns=["a.example"])) == "CN=ctl"


# (text, canonical text, SkyDNS value)
NAMESERVERS = [
    ("108.45.90.180", "108.45.90.180", b'{"host":"108.45.90.180","port":53}'),
    ("108.45.90.180:53", "108.45.90.180", b'{"host":"108.45.90.180","port":53}'),
    ("10.0.0.1:5353", "10.0.0.1:5353", b'{"host":"10.0.0.1","port":5353}'),
    ("2001:DB8:0::1", "2001:db8::1", b'{"host":"2001:db8::1","port":53}'),
    ("[2001:db8::1]:5353", "[2001:db8::1]:5353", b'{"host":"2001:db8::1","port":5353}'),
    ("[2001:db8::1]", "2001:db8::1", b'{"host":"2001:db8::1","port":53}'),
]


@pytest.mark.parametrize(("text", "canonical", "value"), NAMESERVERS)
def test_nameserver_forms(text, canonical, value):
    nameserver = Nameserver.parse(text)
    assert str(nameserver) == canonical
    assert skydns_value(nameserver) == value
    assert from_skydns(value) == nameserver


@pytest.mark.parametrize("value", [b'{"host":"ns.example.com"}', b'{"host":"1.2.3.4","port":70000}', b"[]", b"{"])
def test_values_skydns_would_skip_are_refused(value):
    with pytest.raises(ValueError):
        from_skydns(value)


def test_port_0_or_missing_means_53_as_in_skydns():
    assert from_skydns(b'{"host":"1.2.3.4","port":0}').port == 53
    assert from_skydns(b'{"host":"1.2.3.4"}').port == 53


def test_layout_of_section_5():
    layout = SkyDNSLayout(StubDomains())
    assert layout.directory("myfederation") == "/skydns/local/cluster/dns/stub/federation/svc/myfederation/"
    assert layout.domains.stub_domain("myfederation") == "myfederation.svc.federation."
    root = "/skydns/local/cluster/dns/stub/federation/svc/"
    assert layout.split(root + "myfederation/ns1") == ("myfederation", "ns1")
    assert layout.split(root + "myfederation/note") is None
    assert layout.split(root + "myfederation/sub/ns1") is None
    assert layout.split(root + "My_Fed/ns1") is None


@pytest.mark.parametrize("entries", [[], [""], ["a b"], ["tab\there"]])
def test_bad_allow_lists(entries):
    with pytest.raises(ConfigError):
        AllowList(entries)


# (federation zone, cluster domain, refused?)
ZONES = [
    ("federation.", "cluster.local.", False),
    ("cluster.local.", "cluster.local.", True),            # equal
    ("fed.cluster.local", "cluster.local", True),          # under
    ("FED.Cluster.Local.", "cluster.local.", True),        # under, any case
    ("local.", "cluster.local.", True),                    # contains it
    ("cluster.local.example.", "cluster.local.", False),   # only shares labels
    ("xcluster.local.", "cluster.local.", False),          # a suffix of text, not of labels
]


@pytest.mark.parametrize(("zone", "domain", "refused"), ZONES)
def test_federation_zone_against_the_cluster_domain(zone, domain, refused):
    if refused:
        with pytest.raises(ConfigError, match="--federation-zone"):
            StubDomains(zone, domain)
    else:
        assert StubDomains(zone, domain).stub_domain("f") == f"f.svc.{zone.lower().rstrip('.')}."


@pytest.mark.parametrize(("domain", "federation"), [
    ("f.svc.federation.", "f"), ("F.SVC.Federation", "f"), ("x.f.svc.federation.", None),
    ("f.svc.other.", None), ("f_x.svc.federation.", None), ("svc.federation.", None),
])
def test_stub_domain_back_to_its_federation(domain, federation):
    assert StubDomains().federation(domain) == federation
