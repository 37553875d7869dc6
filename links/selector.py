"""Kubernetes label selectors (``metav1.LabelSelector``): ``matchLabels`` and ``matchExpressions``.

Semantics as the API server gives them (Kubernetes "Labels and Selectors",
set-based requirements): every ``matchLabels`` pair and every expression must
hold; an empty selector matches every object. Operators:

* ``In``: the label is present and its value is one of ``values`` (not empty);
* ``NotIn``: the label is absent, or its value is none of ``values`` (not empty);
* ``Exists`` / ``DoesNotExist``: the key is present / absent (no ``values``).
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from feddns.errors import ConfigError

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}$")
_VALUE = re.compile(rf"^({_NAME})?$")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` entry: ``key``, ``operator`` (one of :data:`OPERATORS`), ``values``."""

    key: str
    operator: str
    values: frozenset[str]

    def holds(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this requirement."""
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        inside = self.key in labels and labels[self.key] in self.values
        return inside if self.operator == "In" else not inside


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed label selector; :meth:`matches` is what the API server's ``labelSelector`` does."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object with ``labels`` is selected."""
        return all(labels.get(key) == value for key, value in self.match_labels) and all(
            requirement.holds(labels) for requirement in self.expressions
        )


def parse_selector(raw: Any, where: str) -> LabelSelector:
    """A selector from its YAML/JSON form; raises :class:`ConfigError` naming ``where`` and the bad part."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: must be a mapping with matchLabels and/or matchExpressions")
    unknown = set(raw) - {"matchLabels", "matchExpressions"}
    if unknown:
        raise ConfigError(f"{where}: unknown field {min(unknown)!r} (expected matchLabels, matchExpressions)")
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, dict):
        raise ConfigError(f"{where}.matchLabels: must be a mapping of label keys to values")
    pairs = tuple((_key(key, f"{where}.matchLabels"), _value(value, f"{where}.matchLabels.{key}"))
                  for key, value in labels.items())
    expressions = raw.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise ConfigError(f"{where}.matchExpressions: must be a list")
    return LabelSelector(pairs, tuple(_requirement(item, f"{where}.matchExpressions[{i}]")
                                      for i, item in enumerate(expressions)))


def _requirement(raw: Any, where: str) -> Requirement:
    if not isinstance(raw, dict) or set(raw) - {"key", "operator", "values"}:
        raise ConfigError(f"{where}: must be a mapping of key, operator and values")
    key = _key(raw.get("key"), where)
    operator = raw.get("operator")
    if operator not in OPERATORS:
        raise ConfigError(f"{where}: operator {operator!r} is not one of {', '.join(OPERATORS)}")
    values = raw.get("values") or []
    if not isinstance(values, list):
        raise ConfigError(f"{where}.values: must be a list")
    checked = frozenset(_value(value, f"{where}.values") for value in values)
    if operator in ("In", "NotIn") and not checked:
        raise ConfigError(f"{where}: operator {operator} needs at least one value")
    if operator in ("Exists", "DoesNotExist") and checked:
        raise ConfigError(f"{where}: operator {operator} takes no values")
    return Requirement(key, operator, checked)


def check_key(raw: object) -> str:
    """``raw`` when it is a label key (``[prefix/]name``: a DNS subdomain, and a name of 1 to 63 characters).

    Raises ``ValueError`` saying so otherwise.
    """
    if not isinstance(raw, str) or not _KEY.match(raw):
        raise ValueError(f"{raw!r} is not a label key ([prefix/]name, name of 1 to 63 characters)")
    return raw


def _key(raw: Any, where: str) -> str:
    try:
        return check_key(raw)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def _value(raw: Any, where: str) -> str:
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise ConfigError(f"{where}: {raw!r} is not a label value")
    text = str(raw)
    if not _VALUE.match(text):
        raise ConfigError(f"{where}: {text!r} is not a label value (at most 63 characters: a-z, 0-9, '-', '_', '.')")
    return text
