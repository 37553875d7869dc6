"""CoreDNS server blocks: rendered from a template, and read back with a small Corefile parser.

The block the ``coredns`` backend writes for federation F (docs/reference.md
section 5)::

    F.svc.federation.:53 {
        errors
        rewrite edns0 local set 0xfedd <cluster>
        forward . <nameservers>
        cache 30
    }

With ``--cache-min-ttl N`` other than CoreDNS's own floor of 5 s, the ``cache`` line opens a block
that lowers that floor, so that an answer is never held longer than its TTL (the TTL of
2 s the federation chart's serve gives, say, would otherwise be held 5 s)::

        cache 30 {
            success 9984 30 N
            denial 9984 30 N
        }

The parser knows the part of the Corefile grammar (CoreDNS's fork of the
Caddyfile) that such files use: tokens separated by blanks, ``#`` comments,
double-quoted tokens, one directive per line, ``{`` ending the line that
opens a block and ``}`` alone on the line that closes it, and top-level
``import PATTERN`` lines. It is strict where CoreDNS would be lenient, so
what it accepts CoreDNS accepts too. It is used to read back what a
ConfigMap holds (GET) and, in tests, to check that every rendered block and
the shipped Corefile change parse.
"""

from dataclasses import dataclass
from string import Template

from feddns.errors import FeddnsError
from stubzone.model import Nameserver

TAG_OPTION = 0xFEDD
"""EDNS0 option code carrying the asking cluster's name (docs/reference.md section 3)."""

MARKER = "# Written by feddns stubzone"
"""How every block the endpoint writes begins: a key whose text does not is someone else's."""

TEMPLATE = Template(MARKER + """ for cluster $cluster; each POST /federations/$federation rewrites it.
$stub_domain:$port {
    errors
    rewrite edns0 local set 0x$option $cluster
    forward . $nameservers
    $cache
}
""")

CACHE_SECONDS = 30
"""The longest a block's ``cache`` holds an answer, in seconds (a longer TTL is cut to it)."""
COREDNS_MIN_TTL = 5
"""CoreDNS's ``cache`` floor, in seconds: it holds an answer with a shorter TTL this long
(its plugin/cache ``success``/``denial`` MINTTL default)."""
CACHE_CAPACITY = 9984
"""CoreDNS's ``cache`` default capacity (entries), restated where the block sets MINTTL."""


MAX_SERVE_STALE = 3600
"""The longest ``--cache-serve-stale``, in seconds."""


def cache_directive(min_ttl: int = COREDNS_MIN_TTL, serve_stale: int = 0) -> str:
    """The block's ``cache`` line(s), indented for the server block: ``cache 30`` when ``min_ttl`` is
    CoreDNS's own floor and ``serve_stale`` 0, else a ``cache 30 { ... }`` block setting MINTTL to
    ``min_ttl`` seconds (0 to 30) for answers and denials and, when ``serve_stale`` is more than 0,
    ``serve_stale <serve_stale>s verify``: an expired answer is asked for again and, only when
    Federated-DNS cannot be reached or fails, the old one is given for up to that many seconds
    (RFC 8767; CoreDNS's plugin/cache). ValueError for a value out of range."""
    if not 0 <= min_ttl <= CACHE_SECONDS:
        raise ValueError(f"cache min TTL {min_ttl} is not 0 to {CACHE_SECONDS} seconds")
    if not 0 <= serve_stale <= MAX_SERVE_STALE:
        raise ValueError(f"cache serve-stale {serve_stale} is not 0 to {MAX_SERVE_STALE} seconds")
    if min_ttl == COREDNS_MIN_TTL and not serve_stale:
        return f"cache {CACHE_SECONDS}"
    stale = f"        serve_stale {serve_stale}s verify\n" if serve_stale else ""
    return (f"cache {CACHE_SECONDS} {{\n"
            f"        success {CACHE_CAPACITY} {CACHE_SECONDS} {min_ttl}\n"
            f"        denial {CACHE_CAPACITY} {CACHE_SECONDS} {min_ttl}\n"
            f"{stale}"
            "    }")


class CorefileError(FeddnsError, ValueError):
    """Text that is not a Corefile; the message names the line."""


@dataclass(frozen=True)
class CacheSettings:
    """How a block's ``cache`` keeps answers (:func:`cache_directive`): ``min_ttl`` (``--cache-min-ttl``)
    and ``serve_stale`` (``--cache-serve-stale``), in seconds."""

    min_ttl: int = COREDNS_MIN_TTL
    serve_stale: int = 0


COREDNS_CACHE = CacheSettings()
"""CoreDNS's own: the plain ``cache 30``."""


def render(federation: str, stub_domain: str, cluster: str, nameservers: tuple[Nameserver, ...],
           port: int = 53, cache: CacheSettings = COREDNS_CACHE) -> str:
    """F's server block; ``cluster`` is a DNS label (never starting with ``0x``: CoreDNS would read hex).

    ``port`` is the port of the server block, the one the cluster's pods ask CoreDNS on (53 in a
    stock Deployment; CoreDNS serves every block of one port from one listener, zones by longest match).
    ``cache`` gives the ``cache`` directive (:func:`cache_directive`).
    """
    return TEMPLATE.substitute(federation=federation, stub_domain=stub_domain, cluster=cluster, port=port,
                               cache=cache_directive(cache.min_ttl, cache.serve_stale),
                               option=f"{TAG_OPTION:x}", nameservers=" ".join(ns.host_port() for ns in nameservers))


@dataclass(frozen=True)
class Directive:
    """One directive line: its name, its arguments and, when it opens one, its block."""

    name: str
    args: tuple[str, ...]
    block: tuple["Directive", ...] | None
    line: int


@dataclass(frozen=True)
class ServerBlock:
    """A server block: its keys (``zone:port``, ...) and its directives in order."""

    keys: tuple[str, ...]
    directives: tuple[Directive, ...]

    def directive(self, name: str) -> list[Directive]:
        """The directives called ``name``, in order."""
        return [directive for directive in self.directives if directive.name == name]


@dataclass(frozen=True)
class Corefile:
    """The server blocks of a Corefile, and the patterns of its top-level ``import`` lines."""

    blocks: tuple[ServerBlock, ...]
    imports: tuple[str, ...]


Line = tuple[int, list[str]]


def tokenize(text: str) -> list[Line]:
    """``[(line number, tokens)]`` for each line with tokens (``{`` and ``}`` are blank-separated tokens).

    Raises :class:`CorefileError` for an unterminated quote.
    """
    lines: list[Line] = []
    for number, raw in enumerate(text.splitlines(), 1):
        tokens = _line_tokens(raw, number)
        if tokens:
            lines.append((number, tokens))
    return lines


def _line_tokens(raw: str, number: int) -> list[str]:
    tokens: list[str] = []
    current: list[str] = []
    quoted = False
    i = 0
    while i < len(raw):
        char = raw[i]
        if quoted:
            if char == "\\" and i + 1 < len(raw):
                i += 1
                current.append(raw[i])
            elif char == '"':
                quoted = False
            else:
                current.append(char)
        elif char == '"':
            quoted = True
        elif char == "#" and not current:
            break
        elif char.isspace():
            _flush(current, tokens)
        else:
            current.append(char)
        i += 1
    if quoted:
        raise CorefileError(f"line {number}: unterminated quote")
    _flush(current, tokens)
    return tokens


def _flush(current: list[str], tokens: list[str]) -> None:
    if current:
        tokens.append("".join(current))
        current.clear()


def parse(text: str) -> Corefile:
    """The server blocks of ``text``; raises :class:`CorefileError` naming the first bad line."""
    lines = tokenize(text)
    blocks: list[ServerBlock] = []
    imports: list[str] = []
    position = 0
    while position < len(lines):
        number, tokens = lines[position]
        if tokens[0] == "import":
            _, *patterns = tokens
            if len(patterns) != 1:
                raise CorefileError(f"line {number}: import takes one file or glob pattern")
            imports.append(patterns[0])
            position += 1
            continue
        if tokens[-1] != "{" or len(tokens) == 1:
            raise CorefileError(f"line {number}: expected server block keys followed by '{{'")
        keys = tuple(key for token in tokens[:-1] for key in token.split(",") if key)
        _check_braces(number, tokens[:-1])
        directives, position = _parse_block(lines, position + 1, number)
        blocks.append(ServerBlock(keys, tuple(directives)))
    return Corefile(tuple(blocks), tuple(imports))


def _parse_block(lines: list[Line], position: int, opened: int) -> tuple[list[Directive], int]:
    """The directives from ``position`` up to the matching ``}``; returns them and the position after it."""
    directives: list[Directive] = []
    while position < len(lines):
        number, tokens = lines[position]
        if tokens == ["}"]:
            return directives, position + 1
        if "}" in tokens:
            raise CorefileError(f"line {number}: '}}' must be alone on its line")
        if tokens[-1] == "{":
            _check_braces(number, tokens[:-1])
            inner, position = _parse_block(lines, position + 1, number)
            directives.append(Directive(tokens[0], tuple(tokens[1:-1]), tuple(inner), number))
            continue
        _check_braces(number, tokens)
        directives.append(Directive(tokens[0], tuple(tokens[1:]), None, number))
        position += 1
    raise CorefileError(f"line {opened}: '{{' is never closed")


def _check_braces(number: int, tokens: list[str]) -> None:
    if "{" in tokens or "}" in tokens:
        raise CorefileError(f"line {number}: '{{' must end its line and '}}' stand alone (one directive per line)")


def forward_targets(block: ServerBlock) -> tuple[Nameserver, ...]:
    """The nameservers of the block's ``forward . TO...`` line; raises ``ValueError`` when it has none."""
    forwards = [d for d in block.directive("forward") if d.args[:1] == (".",)]
    if len(forwards) != 1 or len(forwards[0].args) == 1:
        raise ValueError("no single 'forward . TO...' line")
    return tuple(Nameserver.parse(target.removeprefix("dns://")) for target in forwards[0].args[1:])
