"""Kubernetes label selectors (``metav1.LabelSelector``): ``matchLabels`` and ``matchExpressions``.

Semantics as the API server gives them (Kubernetes "Labels and Selectors",
set-based requirements): every ``matchLabels`` pair and every expression must
hold; an empty selector matches every object. Operators:

* ``In``: the label is present and its value is one of ``values`` (not empty);
* ``NotIn``: the label is absent, or its value is none of ``values`` (not empty);
* ``Exists`` / ``DoesNotExist``: the key is present / absent (no ``values``).

The shape (which keys, what is a mapping or a list) is :class:`SelectorFile`, a
pydantic model read through :mod:`feddns.configfile` like the rest of a policy
file, so that an unknown key (``valeus:``) is named at its own line and column;
the label keys, values and operators are checked by :func:`selector_from`.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from feddns import configfile

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


class _Shape(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _list_or_none(value: Any) -> bool:
    return value is None or isinstance(value, list)


class RequirementFile(_Shape):
    """The shape of a ``matchExpressions`` entry (``metav1.LabelSelectorRequirement``):
    ``key`` and ``operator`` are required, ``values`` a list; :func:`selector_from` checks them."""

    key: Any
    operator: Any
    values: Annotated[list[Any] | None, configfile.refuse_unless(_list_or_none, "must be a list")] = None


class SelectorFile(_Shape):
    """The shape of a selector (``metav1.LabelSelector``): ``matchLabels``, a mapping of label keys
    to values, and ``matchExpressions``, a list of :class:`RequirementFile`; both optional."""

    match_labels: Annotated[dict[Any, Any] | None, configfile.refuse_unless(
        lambda value: value is None or isinstance(value, dict), "must be a mapping of label keys to values",
    )] = Field(None, alias="matchLabels")
    match_expressions: Annotated[list[RequirementFile] | None, configfile.refuse_unless(
        _list_or_none, "must be a list",
    )] = Field(None, alias="matchExpressions")


def parse_selector(raw: Any, where: str) -> LabelSelector:
    """A selector from its YAML/JSON form; raises :class:`feddns.configfile.FieldError` (a
    :class:`feddns.errors.ConfigError`) naming ``where`` (a key path) and the bad part."""
    return selector_from(configfile.validate(SelectorFile, raw, at=(where,)), where)


def selector_from(raw: SelectorFile, where: str) -> LabelSelector:
    """The selector a checked :class:`SelectorFile` at ``where`` (a key path) gives; raises
    :class:`feddns.configfile.FieldError` at the bad label key, value or operator."""
    pairs = tuple((_key(key, [where, "matchLabels", key]),
                   _value(value, [where, "matchLabels", key], f"{where}.matchLabels.{key}"))
                  for key, value in (raw.match_labels or {}).items())
    expressions = tuple(_requirement(item, f"{where}.matchExpressions[{i}]", [where, "matchExpressions", i])
                        for i, item in enumerate(raw.match_expressions or []))
    return LabelSelector(pairs, expressions)


def _requirement(raw: RequirementFile, where: str, loc: configfile.Loc) -> Requirement:
    key = _key(raw.key, [*loc, "key"])
    operator = raw.operator
    if operator not in OPERATORS:
        raise configfile.FieldError(f"{where}: operator {operator!r} is not one of {', '.join(OPERATORS)}",
                                    [*loc, "operator"])
    values = raw.values or []
    checked = frozenset(_value(value, [*loc, "values", i], f"{where}.values") for i, value in enumerate(values))
    if operator in ("In", "NotIn") and not checked:
        raise configfile.FieldError(f"{where}: operator {operator} needs at least one value", [*loc, "values"])
    if operator in ("Exists", "DoesNotExist") and checked:
        raise configfile.FieldError(f"{where}: operator {operator} takes no values", [*loc, "values"])
    return Requirement(key, operator, checked)


def check_key(raw: object) -> str:
    """``raw`` when it is a label key (``[prefix/]name``: a DNS subdomain, and a name of 1 to 63 characters).

    Raises ``ValueError`` saying so otherwise.
    """
    if not isinstance(raw, str) or not _KEY.match(raw):
        raise ValueError(f"{raw!r} is not a label key ([prefix/]name, name of 1 to 63 characters)")
    return raw


def _key(raw: Any, loc: configfile.Loc) -> str:
    """``raw`` checked as a label key; the error names the mapping that holds it, at ``loc``."""
    try:
        return check_key(raw)
    except ValueError as exc:
        raise configfile.FieldError(f"{configfile.keypath(loc[:-1])}: {exc}", loc) from exc


def _value(raw: Any, loc: configfile.Loc, where: str) -> str:
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise configfile.FieldError(f"{where}: {raw!r} is not a label value", loc)
    text = str(raw)
    if not _VALUE.match(text):
        raise configfile.FieldError(
            f"{where}: {text!r} is not a label value (at most 63 characters: a-z, 0-9, '-', '_', '.')", loc)
    return text
