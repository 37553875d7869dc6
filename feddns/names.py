"""Validation of the names that appear in keys and DNS owner names.

Federation, namespace, service and cluster names are RFC 1123 labels as
Kubernetes uses them (``metadata.name`` of a Service is an RFC 1035 label, a
namespace an RFC 1123 label): lowercase ASCII letters, digits and ``-``, 1 to 63
characters, starting and ending with a letter or digit.
"""

import re

_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def is_label(text: str) -> bool:
    """Return True when ``text`` is a lowercase RFC 1123 label (1-63 chars)."""
    return bool(_LABEL.match(text))


def check_label(text: object, what: str) -> str:
    """Return ``text`` when it is a lowercase RFC 1123 label.

    Raises ``ValueError`` naming ``what`` (e.g. ``"federation name"``) otherwise.
    """
    if not isinstance(text, str) or not is_label(text):
        raise ValueError(
            f"{what} {text!r} is not a lowercase DNS label "
            "(RFC 1123: a-z, 0-9 and '-', 1 to 63 characters, no leading or trailing '-')"
        )
    return text


def normalize_zone(text: str) -> str:
    """Return the zone ``text`` lowercased and ending in a dot (``"federation."``).

    Raises ``ValueError`` when a label of the zone is not an RFC 1123 label.
    """
    zone = text.strip().lower().rstrip(".")
    if not zone:
        raise ValueError("zone must not be empty or the root")
    for label in zone.split("."):
        check_label(label, "zone label")
    return zone + "."
