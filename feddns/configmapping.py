"""One check for a mapping read from a config file: a mapping, holding only known keys.

The controller config's ``external`` section (``controller.external.config``)
words its messages its own way, and the messages are part of the user contract
(docs/reference.md), so the caller passes its wording. The rest of the
controller's config, the links policy file and the records file are checked by
the pydantic models of :mod:`feddns.configfile`, which refuse unknown keys
themselves; ``external`` could move there too.
"""

from collections.abc import Callable, Collection, Mapping
from typing import Any

from feddns.errors import ConfigError


def check_mapping(
    raw: object,
    allowed: Collection[str],
    *,
    not_a_mapping: Callable[[object], str],
    unknown_key: Callable[[str], str],
) -> Mapping[str, Any]:
    """``raw`` itself when it is a mapping whose keys are all in ``allowed``.

    Raises :class:`ConfigError` with ``not_a_mapping(raw)`` when it is no
    mapping, or ``unknown_key(key)`` for the first key not allowed.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(not_a_mapping(raw))
    for key in raw:
        if key not in allowed:
            raise ConfigError(unknown_key(str(key)))
    return raw
