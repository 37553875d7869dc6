"""The names that appear in keys and DNS owner names: their validation, and the zone's
name layout in wire form (the one module that builds service, shard, endpoint and MCS names).

Federation, namespace, service and cluster names are RFC 1123 labels as
Kubernetes uses them (``metadata.name`` of a Service is an RFC 1035 label, a
namespace an RFC 1123 label): lowercase ASCII letters, digits and ``-``, 1 to 63
characters, starting and ending with a letter or digit.
"""

import re

_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

MAX_LABEL_LENGTH = 63
"""The longest DNS label, in characters (octets) (RFC 1035 section 2.3.4)."""
MAX_NAME_LENGTH = 253
"""The longest DNS name in text, in characters, without its final dot: 255 octets in wire
form (RFC 1035 section 2.3.4) less the first label's length byte and the root label."""


def is_label(text: str) -> bool:
    """Return True when ``text`` is a lowercase RFC 1123 label (1-63 chars)."""
    return bool(_LABEL.match(text))


def check_length(text: str, what: str, name: bool = False) -> str:
    """Return ``text`` when it is no longer than a DNS label (``name`` False: 63 characters)
    or a DNS name (``name`` True: 253 characters without the final dot, each label at most
    63) may be (RFC 1035 section 2.3.4).

    Raises ``ValueError`` naming ``what`` and saying how long the text is, never quoting it:
    quoted, a value of megabytes would make a message of megabytes.
    """
    if not name:
        if len(text) > MAX_LABEL_LENGTH:
            raise ValueError(f"{what} is {len(text):,} characters long; a DNS label has at most "
                             f"{MAX_LABEL_LENGTH} (RFC 1035 section 2.3.4)")
        return text
    bare = text.removesuffix(".")
    if len(bare) > MAX_NAME_LENGTH:
        raise ValueError(f"{what} is {len(bare):,} characters long; a DNS name has at most "
                         f"{MAX_NAME_LENGTH} (RFC 1035 section 2.3.4)")
    longest = max(map(len, bare.split(".")))
    if longest > MAX_LABEL_LENGTH:
        raise ValueError(f"{what} has a label of {longest:,} characters; a DNS label has at most "
                         f"{MAX_LABEL_LENGTH} (RFC 1035 section 2.3.4)")
    return text


def check_label(text: object, what: str) -> str:
    """Return ``text`` when it is a lowercase RFC 1123 label.

    Raises ``ValueError`` naming ``what`` (e.g. ``"federation name"``) otherwise; a text
    over 63 characters by its length alone (:func:`check_length`).
    """
    if isinstance(text, str):
        check_length(text, what)
    if not isinstance(text, str) or not is_label(text):
        raise ValueError(
            f"{what} {text!r} is not a lowercase DNS label "
            "(RFC 1123: a-z, 0-9 and '-', 1 to 63 characters, no leading or trailing '-')"
        )
    return text


def normalize_zone(text: str) -> str:
    """Return the zone ``text`` lowercased and ending in a dot (``"federation."``).

    Raises ``ValueError`` when the zone is longer than a DNS name may be (253 characters,
    :func:`check_length`) or a label of it is not an RFC 1123 label.
    """
    zone = text.strip().lower().rstrip(".")
    if not zone:
        raise ValueError("zone must not be empty or the root")
    check_length(zone, "zone", name=True)
    for label in zone.split("."):
        check_label(label, "zone label")
    return zone + "."


# -- the zone's name layout in wire form (RFC 1035 3.1; docs/reference.md section 1) --------
#
# Names under a zone are kept relative to it (the zone's labels cut off), lowercased:
# a service is <svc>.<ns>.<F>.svc, one cluster's shard <cluster>.<svc>.<ns>.<F>.svc, an
# endpoint of a headless shard <hostname>.<cluster>.<svc>...; in the Multi-Cluster
# Services zone (clusterset.local) a service is <svc>.<ns>.svc, its federation left out.

ServiceId = tuple[str, str, str]
"""``(federation, namespace, service)``: a service, as its shard keys name it."""

SVC = b"\x03svc"
"""The label ``svc`` in wire form: services sit under ``<F>.svc`` (``svc`` in MCS)."""

DNS = b"\x03dns"
"""``dns``, relative to the zone: the empty non-terminal above the server's own name."""

NS_HOST = b"\x02ns" + DNS
"""``ns.dns``, relative to the zone: the server's own name (MNAME and NS target, as CoreDNS)."""


WHOAMI = b"\x07_whoami"
"""The label ``_whoami`` in wire form: ``_whoami.<F>.svc`` answers how the asker was
identified (docs/reference.md section 1); an underscore label is no namespace's or
service's name (RFC 1123 labels), so it collides with nothing."""


def label(text: str) -> bytes:
    """One label in wire form: its length byte, then its ASCII bytes.

    Raises ``UnicodeEncodeError`` for a non-ASCII label (names here are RFC 1123 labels).
    """
    raw = text.encode("ascii")
    return bytes((len(raw),)) + raw


def service_name(sid: ServiceId) -> bytes:
    """``<svc>.<ns>.<F>.svc`` in wire form, relative to the zone."""
    federation, namespace, service = sid
    return label(service) + label(namespace) + label(federation) + SVC


def whoami_name(federation: str) -> bytes:
    """``_whoami.<F>.svc`` in wire form, relative to the zone."""
    return WHOAMI + label(federation) + SVC


def mcs_service_name(sid: ServiceId) -> bytes:
    """``<svc>.<ns>.svc`` in wire form, relative to the MCS zone (the federation left out)."""
    return label(sid[2]) + label(sid[1]) + SVC


def below(first: str, name: bytes) -> bytes:
    """``<first>.<name>``: a shard's name below its service's (``first`` the cluster),
    or an endpoint's below its shard's (``first`` the hostname); ``name`` in wire form."""
    return label(first) + name


def federation_name_of_mcs(rel: bytes, federation: str) -> bytes:
    """The federation's name for an MCS name relative to its zone: ``<...>.svc``
    becomes ``<...>.<federation>.svc`` (``rel`` in wire form, ending with :data:`SVC`)."""
    return rel[: -len(SVC)] + label(federation) + SVC
