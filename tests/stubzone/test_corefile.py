"""The CoreDNS server block template, and the small Corefile parser that checks it."""

import ipaddress

import pytest

from stubzone.backends.corefile import CacheSettings, CorefileError, forward_targets, parse, render, tokenize
from stubzone.model import Nameserver

STOCK_COREFILE = """\
.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
"""
"""kubeadm's Corefile (CoreDNS 1.11), which deploy/cluster-dns/coredns/ adds one line to."""


def nameservers(*texts: str) -> tuple[Nameserver, ...]:
    return tuple(Nameserver.parse(text) for text in texts)


@pytest.mark.parametrize("servers", [("203.0.113.53",), ("192.0.2.1:5353", "[2001:db8::1]:5353", "2001:db8::2")])
def test_rendered_block_parses_as_one_server_block_with_the_four_directives(servers):
    text = render("myfederation", "myfederation.svc.federation.", "foo", nameservers(*servers))
    (block,) = parse(text).blocks
    assert block.keys == ("myfederation.svc.federation.:53",)
    assert [(d.name, d.args) for d in block.directives] == [
        ("errors", ()),
        ("rewrite", ("edns0", "local", "set", "0xfedd", "foo")),
        ("forward", (".", *(ns.host_port() for ns in nameservers(*servers)))),
        ("cache", ("30",)),
    ]
    assert int(block.directives[1].args[3], 16) == 65245
    assert all(d.block is None for d in block.directives)
    assert forward_targets(block) == nameservers(*servers)


def test_rendered_block_is_the_documented_text():
    assert render("myfederation", "myfederation.svc.federation.", "foo", nameservers("203.0.113.53")) == (
        "# Written by feddns stubzone for cluster foo; each POST /federations/myfederation rewrites it.\n"
        "myfederation.svc.federation.:53 {\n"
        "    errors\n"
        "    rewrite edns0 local set 0xfedd foo\n"
        "    forward . 203.0.113.53:53\n"
        "    cache 30\n"
        "}\n"
    )


def test_the_block_listens_on_the_port_coredns_answers_the_pods_on():
    (block,) = parse(render("myfederation", "myfederation.svc.federation.", "foo", nameservers("203.0.113.53"),
                            port=1053)).blocks
    assert block.keys == ("myfederation.svc.federation.:1053",)


def test_stock_corefile_with_the_import_line_parses():
    corefile = parse("import /etc/coredns/feddns/*.server\n" + STOCK_COREFILE)
    assert corefile.imports == ("/etc/coredns/feddns/*.server",)
    (block,) = corefile.blocks
    assert block.keys == (".:53",)
    (kubernetes,) = block.directive("kubernetes")
    assert kubernetes.args == ("cluster.local", "in-addr.arpa", "ip6.arpa")
    assert [d.name for d in kubernetes.block or ()] == ["pods", "fallthrough", "ttl"]
    assert block.directive("reload")


def test_tokens_comments_and_quotes():
    assert tokenize('a "b c" d # comment\n\n  # only a comment\ne"f"g{\n') == [(1, ["a", "b c", "d"]), (4, ["efg{"])]


# (name, text, words of the error)
BAD = [
    ("unclosed block", "a.:53 {\n    errors\n", "line 1: '{' is never closed"),
    ("brace not alone", "a.:53 {\n    errors }\n", "line 2: '}' must be alone"),
    ("two directives on a line", "a.:53 {\n    errors { cache 30\n}\n}\n", "line 2: '{' must end its line"),
    ("no keys", "{\n}\n", "line 1: expected server block keys"),
    ("directive outside a block", "errors\n", "line 1: expected server block keys"),
    ("brace glued to the key", "a.:53{\n}\n", "line 1: expected server block keys"),
    ("import with two patterns", "import a b\n", "line 1: import takes one"),
    ("unterminated quote", 'a.:53 {\n    forward . "1.2.3.4\n}\n', "line 2: unterminated quote"),
]


@pytest.mark.parametrize(("text", "words"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_corefiles_are_refused_naming_the_line(text, words):
    with pytest.raises(CorefileError, match=words.replace("{", r"\{").replace("}", r"\}")):
        parse(text)


def test_forward_targets_need_one_forward_dot_line():
    (block,) = parse("a.:53 {\n    forward example.org 192.0.2.1\n}\n").blocks
    with pytest.raises(ValueError, match="no single 'forward"):
        forward_targets(block)
    (block,) = parse("a.:53 {\n    forward . dns://192.0.2.1:54 [2001:db8::5]\n}\n").blocks
    assert forward_targets(block) == (Nameserver(ipaddress.ip_address("192.0.2.1"), 54),
                                      Nameserver(ipaddress.ip_address("2001:db8::5")))


@pytest.mark.parametrize("min_ttl", [0, 1, 30])
def test_a_cache_min_ttl_other_than_corednss_own_sets_success_and_denial_minttl(min_ttl):
    """``--cache-min-ttl``: the block's ``cache`` keeps its 30 s cap and sets MINTTL (CoreDNS's plugin/cache
    ``success CAPACITY TTL MINTTL`` and ``denial ...``), so that a 2 s answer is held 2 s, not CoreDNS's 5."""
    text = render("myfederation", "myfederation.svc.federation.", "foo", nameservers("203.0.113.53"),
                  cache=CacheSettings(min_ttl))
    (block,) = parse(text).blocks
    (cache,) = block.directive("cache")
    assert cache.args == ("30",)
    assert cache.block is not None
    assert [(d.name, d.args) for d in cache.block] == [("success", ("9984", "30", str(min_ttl))),
                                                        ("denial", ("9984", "30", str(min_ttl)))]


def test_corednss_own_min_ttl_renders_the_plain_cache_line():
    assert render("f", "f.svc.federation.", "foo", nameservers("203.0.113.53"), cache=CacheSettings(5)) == render(
        "f", "f.svc.federation.", "foo", nameservers("203.0.113.53"))


@pytest.mark.parametrize("min_ttl", [-1, 31])
def test_a_cache_min_ttl_out_of_range_is_refused(min_ttl):
    with pytest.raises(ValueError, match=f"cache min TTL {min_ttl} is not 0 to 30 seconds"):
        render("f", "f.svc.federation.", "foo", nameservers("203.0.113.53"), cache=CacheSettings(min_ttl))
