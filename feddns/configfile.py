"""Config files as YAML with their marks, checked by pydantic models: one loader and one error form.

The controller's config (``controller.config``), the links policy file
(``links.policy``) and the records file of ``feddns serve``
(``feddns.store.recordsfile``) are read here. Each is checked the same way:

* YAML is read by :class:`MarkedLoader`, a safe loader that refuses a mapping key
  given twice (PyYAML keeps the last one without a word) and keeps the node tree,
  so that an error found later can be traced back to its line and column;
* a key that is not a string (``3:``, ``true:``) is refused where it is read:
  every key of these files is text, and a key like ``3:`` is a misspelling;
* the shape (which keys, which are required, what is a mapping or a list) is a
  pydantic model per section with ``extra="forbid"``, checked by :func:`validate`;
  the three structural errors read the same in every file (:data:`WORDING`:
  ``clusters[0].znoe: unknown key (expected name, ...)``, ``clusters[0].name: is
  required``, ``etcd: must be a mapping, not a list ([])``);
* every error is one line, ``<file>: <key path>: <what is wrong> (line L, column C)``:
  the key path (``policies[0].links[1].prefix``) leads the message, and
  :meth:`Document.error` finds the line and column of the deepest key of the path
  that is in the file (of the key itself, for an unknown key).

Lines and columns count from 1, as editors show them.
"""

import os
import re
import reprlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, get_args

import pydantic
import yaml

from feddns.errors import ConfigError

Position = tuple[int, int]
"""A line and a column, both counted from 1."""

Loc = Sequence[str | int]
"""A path into a document: mapping keys and list indexes (pydantic's ``loc``)."""

M = TypeVar("M", bound=pydantic.BaseModel)
T = TypeVar("T")


MAX_ALIAS_VALUES = 1_000_000
"""Values that aliases (``*a``, ``<<: *a``) may add to a document, expanded: a few anchors nested
in each other ("billion laughs") otherwise make gigabytes of an error message, a JSON value
or, with PyYAML before 6.0.3, of merged keys."""


class AliasBombError(yaml.YAMLError):
    """A document whose aliases expand to more than :data:`MAX_ALIAS_VALUES` values."""


class BoundedLoader(yaml.SafeLoader):
    """A safe loader that refuses a document whose aliases expand to more than
    :data:`MAX_ALIAS_VALUES` values (:class:`AliasBombError`), before constructing it."""

    def construct_document(self, node: yaml.Node) -> Any:
        if _expanded(node) > MAX_ALIAS_VALUES:
            raise AliasBombError(f"aliases expand to more than {MAX_ALIAS_VALUES} values")
        return super().construct_document(node)


def _expanded(root: yaml.Node) -> int:
    """How many values aliases add to the tree at ``root``: its size with each alias expanded, less its
    nodes. An alias is its anchor's node, shared, so each node's size is counted once; a node
    inside itself (``&a [*a]``) counts 1 there."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = 1
        children = (node.value if isinstance(node, yaml.SequenceNode)
                    else [child for pair in node.value for child in pair] if isinstance(node, yaml.MappingNode)
                    else ())
        sizes[id(node)] = total = 1 + sum(size(child) for child in children)
        return total

    return size(root) - len(sizes)


class MarkedLoader(BoundedLoader):
    """A safe loader that refuses a mapping key given twice; see :func:`load`."""


class KeyNotStringError(yaml.constructor.ConstructorError):
    """A mapping key that is not a string (``3:``, ``yes:``); ``problem_mark`` is where it is."""

    def __init__(self, key: object, node: yaml.Node) -> None:
        super().__init__(None, None, f"key {node.value} is not a string but {kind(key)}", node.start_mark)
        self.key = key


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping gives ``key`` twice; ``problem_mark`` is the second one, ``first`` the first."""

    def __init__(self, key: object, first: yaml.Mark, second: yaml.Mark) -> None:
        super().__init__(None, None, f"duplicate key {key!r}", second)
        self.key = key
        self.first = first
        self.second = second


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _construct_mapping(loader: MarkedLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, yaml.Mark] = {}
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:  # ``<<: *anchor``: construct_mapping merges it, and own keys override;
            loader.construct_object(value_node, deep=True)  # a mapping written in place is checked as any other
            continue
        key = loader.construct_object(key_node)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: construct_mapping says so with its mark
            break
        if not isinstance(key, str):
            raise KeyNotStringError(key, key_node)
        if first is not None:
            raise DuplicateKeyError(key, first, key_node.start_mark)
        seen[key] = key_node.start_mark
    return loader.construct_mapping(node)


MarkedLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _position(mark: yaml.Mark) -> Position:
    return mark.line + 1, mark.column + 1


def keypath(loc: Loc) -> str:
    """The key path of ``loc`` as messages write it: ``("clusters", 0, "zone")`` is ``clusters[0].zone``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


@dataclass(frozen=True)
class Document:
    """A YAML file read by :func:`load`: its decoded ``data`` (``None`` when empty), the
    ``label`` its errors start with (``"policy file /etc/links/policies.yaml"``) and its
    node tree, kept to find where a key path is (:meth:`position`)."""

    label: str
    data: object
    root: yaml.Node | None

    def position(self, path: str) -> Position:
        """Where ``path`` (a key path's text) is: the line and column of its deepest key (of
        the list item, for an index) that the file has; the start of the file when none."""
        position = _position(self.root.start_mark) if self.root is not None else (1, 1)
        for mark in _walk(self.root, path):
            position = _position(mark)
        return position

    def error(self, error: ConfigError) -> ConfigError:
        """A :class:`ConfigError` for ``error`` (``"<key path>: <what is wrong>"``), naming the file,
        the line and the column of its :class:`FieldError` ``loc``, else of the key path its
        message starts with: ``"<label>: <message> (line L, column C)"``."""
        path = keypath(error.loc) if isinstance(error, FieldError) else str(error).split(": ", 1)[0]
        line, column = self.position(path)
        return ConfigError(f"{self.label}: {error} (line {line}, column {column})")


class FieldError(ConfigError):
    """A :class:`ConfigError` about the value at ``loc`` (its whole path, down to an unknown key
    itself); the message is whole, key path first, and may name a shorter path than ``loc``."""

    def __init__(self, message: str, loc: Loc) -> None:
        super().__init__(message)
        self.loc = tuple(loc)


_INDEX = re.compile(r"\[(\d+)\]")


def _walk(node: yaml.Node | None, path: str) -> Iterator[yaml.Mark]:
    """The marks of the nodes along ``path`` (a key path's text), as far as the tree has them.

    Keys may hold dots and slashes (label keys, etcd keys), so the path is not split:
    at each mapping the longest key that the rest of the path starts with is taken."""
    rest = path
    while node is not None and rest:
        if isinstance(node, yaml.SequenceNode) and (match := _INDEX.match(rest)):
            index = int(match.group(1))
            if index >= len(node.value):
                return
            node, rest = node.value[index], rest[match.end():]
            yield node.start_mark
        elif isinstance(node, yaml.MappingNode):
            found = _child(node, rest.removeprefix("."))
            if found is None:
                return
            key_node, node, rest = found
            yield key_node.start_mark
        else:  # inside a scalar (a JSON string value of a records file): the scalar itself
            yield node.start_mark
            return


def _child(node: yaml.MappingNode, rest: str) -> tuple[yaml.Node, yaml.Node, str] | None:
    best: tuple[yaml.Node, yaml.Node, str] | None = None
    for key_node, value_node in node.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(key, str) or not rest.startswith(key) or rest[len(key):len(key) + 1] not in ("", ".", "["):
            continue
        if best is None or len(key) > len(rest) - len(best[2]):
            best = (key_node, value_node, rest[len(key):])
    return best


MIB = 1024 * 1024
DEFAULT_MAX_CONFIG_BYTES = 1 * MIB
"""The default cap of a controller config and of a links policy file: 1 MiB, the most a ConfigMap
holds (etcd's request limit), where a cluster keeps both (docs/choices.md)."""
DEFAULT_MAX_RECORDS_BYTES = 16 * MIB
"""The default cap of a records file (``feddns serve --records``): 16 MiB, about 150,000 records;
a federation larger than that belongs in etcd (docs/choices.md)."""
_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": MIB, "mib": MIB, "g": 1024 * MIB, "gib": 1024 * MIB}


def parse_bytes(text: str, flag: str) -> int:
    """A size flag's value in bytes: a whole number with an optional binary suffix (``64MiB``,
    ``512k``, ``1GiB``). Raises :class:`ConfigError` ``"<flag> '<text>' is not a size in bytes ..."``."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise ConfigError(f"{flag} {text!r} is not a size in bytes (e.g. 67108864, 64MiB, 512KiB)")
    return int(match.group(1)) * unit


@dataclass(frozen=True)
class SizeLimit:
    """The cap of a file's size: at most ``max_bytes`` bytes, set by the command-line ``flag``
    that the refusal names. A file over it is refused before it is read, so that a file huge by
    mistake is refused in the time of a ``stat``, not after minutes of parsing and gigabytes."""

    max_bytes: int
    flag: str

    def refusal(self, label: str, size: int | None) -> ConfigError:
        """The one-line error for a file of ``size`` bytes (``None``: more than the cap, its size
        unknown, as a pipe's) under ``label``."""
        told = f"{size:,} bytes" if size is not None else f"more than {self.max_bytes:,} bytes"
        return ConfigError(f"{label}: {told}, over the limit of {self.max_bytes:,} bytes ({self.flag}); "
                           "not read")


def read_text(path: str | Path, label: str, limit: SizeLimit | None = None) -> str:
    """The text of the file at ``path``; raises :class:`ConfigError` ``"<label>: cannot read: <why>"``
    when it cannot be read, ``"<label>: not UTF-8 text (byte N)"``, or, for a file of more bytes than
    ``limit`` allows, :meth:`SizeLimit.refusal` (its size taken before reading; a file whose size
    the system does not know is read no further than the limit)."""
    try:
        with open(path, encoding="utf-8") as stream:
            if limit is None:
                return stream.read()
            size = os.fstat(stream.fileno()).st_size
            if size > limit.max_bytes:
                raise limit.refusal(label, size)
            text = stream.read(limit.max_bytes + 1)  # characters: never fewer than the bytes they are
            if len(text) > limit.max_bytes:
                raise limit.refusal(label, None)
            return text
    except OSError as exc:
        raise ConfigError(f"{label}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{label}: not UTF-8 text (byte {exc.start})") from exc


NOT_YAML = "not valid YAML"
"""The words every file's YAML errors start with."""


def load(text: str, label: str) -> Document:
    """Parse ``text`` (one YAML document) with :class:`MarkedLoader`.

    Raises :class:`ConfigError` naming ``label``, the line and the column:
    ``"<label>: line L: duplicate key 'K' (column C, first given on line F)"`` for a
    key given twice in one mapping, ``"<label>: key yes is not a string but a bool (True) (line L, column C)"``,
    ``"<label>: not valid YAML: <what> (line L, column C)"`` for any other YAML error,
    ``"<label>: nested too deeply"`` past Python's recursion limit,
    ``"<label>: aliases expand to more than N values"`` (:data:`MAX_ALIAS_VALUES`).
    """
    loader = None
    try:
        loader = MarkedLoader(text)  # refuses a character YAML does not allow (yaml.reader.ReaderError)
        root = loader.get_single_node()
        return Document(label, None if root is None else loader.construct_document(root), root)
    except DuplicateKeyError as exc:
        (line, column), (first, _) = _position(exc.second), _position(exc.first)
        raise ConfigError(f"{label}: line {line}: duplicate key {exc.key!r} "
                          f"(column {column}, first given on line {first})") from exc
    except KeyNotStringError as exc:
        raise ConfigError(f"{label}: {_yaml_problem(exc)}") from exc
    except AliasBombError as exc:
        raise ConfigError(f"{label}: {exc}") from exc
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(f"{label}: {NOT_YAML}: {_yaml_problem(exc)}") from exc
    except yaml.reader.ReaderError as exc:
        line, column = text.count("\n", 0, exc.position) + 1, exc.position - text.rfind("\n", 0, exc.position)
        raise ConfigError(f"{label}: {NOT_YAML}: character #x{exc.character:04x} is not allowed in YAML "
                          f"(line {line}, column {column})") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{label}: {NOT_YAML}: {' '.join(str(exc).split())}") from exc
    except RecursionError as exc:
        raise ConfigError(f"{label}: nested too deeply") from exc
    finally:
        if loader is not None:
            loader.dispose()


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    what = ", ".join(part for part in (exc.context, exc.problem) if part)
    if exc.problem_mark is None:
        return what
    line, column = _position(exc.problem_mark)
    return f"{what} (line {line}, column {column})"


def _at(where: Loc) -> str:
    """A message's start: the key path and ``": "``, nothing for the whole file."""
    return f"{keypath(where)}: " if where else ""


def _unknown_key(parent: Loc, key: str, known: Sequence[str]) -> str:
    return f"{keypath([*parent, key])}: unknown key (expected {', '.join(known)})"


def _missing(parent: Loc, key: str) -> str:
    return f"{keypath([*parent, key])}: is required"


def _not_a_mapping(where: Loc, value: object) -> str:
    return f"{_at(where)}must be a mapping, not {kind(value)}"


@dataclass(frozen=True)
class Wording:
    """How the errors of a file's shape read; each returns the whole message, key path
    first (:func:`keypath`). ``unknown_key(parent, key, known)``: ``key`` is not one of
    ``known`` in the mapping at ``parent``; ``missing(parent, key)``: the required ``key``
    is not in it; ``not_a_mapping(where, value)``: ``value`` at ``where`` must be a mapping.
    The defaults are every file's words; a file replaces one only to say more (the
    external section names the provider a key belongs to)."""

    unknown_key: Callable[[Loc, str, Sequence[str]], str] = _unknown_key
    missing: Callable[[Loc, str], str] = _missing
    not_a_mapping: Callable[[Loc, object], str] = _not_a_mapping


WORDING = Wording()
"""The one wording of shape errors: ``clusters[0].znoe: unknown key (expected name, ...)``,
``clusters[0].name: is required``, ``etcd: must be a mapping, not a list ([])``."""


def refuse_unless(test: Callable[[Any], bool], message: str) -> pydantic.BeforeValidator:
    """A validator for ``Annotated[...]`` that raises ``ValueError(message)`` (the error
    :func:`validate` reports, after the key path) unless ``test(value)``."""
    def check(value: Any) -> Any:
        if not test(value):
            raise ValueError(message)
        return value
    return pydantic.BeforeValidator(check)


def validate(model: type[M], raw: object, wording: Wording = WORDING, at: Loc = ()) -> M:
    """``raw`` checked against ``model`` (``at``: where ``raw`` is in its file).

    Raises :class:`FieldError` with the first unknown key, else the first error pydantic reports, as
    ``"<key path>: <what is wrong>"``: a validator's own :class:`ValueError`
    (a :class:`ConfigError` is one) keeps its words; unknown keys, missing keys
    and values that are no mapping take ``wording``'s; any other pydantic error
    (a type a validator does not check) its ``msg``. The file's label, line and
    column are added by :meth:`Document.error`.
    """
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError as exc:
        errors = exc.errors(include_url=False)
        # An unknown key first: a misspelled key is the cause of the key it then misses.
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        raise FieldError(_message(model, first, wording, at), [*at, *first["loc"]]) from exc


def _message(model: type[pydantic.BaseModel], error: Any, wording: Wording, at: Loc) -> str:
    loc, kind = [*at, *error["loc"]], error["type"]
    parent, last = loc[:-1], str(loc[-1]) if loc else ""
    if kind == "extra_forbidden":
        return wording.unknown_key(parent, last, _known_keys(model, error["loc"][:-1]))
    if kind == "missing":
        return wording.missing(parent, last)
    if kind in {"model_type", "dict_type", "model_attributes_type"}:
        return wording.not_a_mapping(loc, error["input"])
    if kind == "invalid_key":  # the loader refuses these in a file; a caller's dict may hold one
        return f"{_at(parent)}key {error['input']!r} is not a string"
    cause = (error.get("ctx") or {}).get("error")
    what = str(cause) if isinstance(cause, Exception) else error["msg"]
    return f"{_at(loc)}{what}"


def _known_keys(model: type[pydantic.BaseModel], loc: Loc) -> list[str]:
    """The keys the model at ``loc`` under ``model`` takes (their aliases), in declaration order."""
    current: type[pydantic.BaseModel] | None = model
    for part in loc:
        if current is None:
            return []
        if isinstance(part, str):
            field = next((f for name, f in current.model_fields.items() if (f.alias or name) == part), None)
            current = None if field is None else _model_in(field.annotation)
    return [] if current is None else [f.alias or name for name, f in current.model_fields.items()]


def _model_in(annotation: Any) -> type[pydantic.BaseModel] | None:
    """The model an annotation holds (``X``, ``X | None``, ``list[X]``, ``Annotated[X, ...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation
    return next((m for m in map(_model_in, get_args(annotation)) if m is not None), None)


_SHORT = reprlib.Repr()
"""A repr cut short (``[1, 2, ...]``): a value shared by aliases, or a long one, makes a one-line message."""
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxlong, _SHORT.maxother = 2, 60, 60, 60
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 4


def shown(value: object) -> str:
    """``repr(value)`` cut short past a few items, levels or characters (``'xxxxxx...xxxxx'``): a
    message quoting a value stays one short line however long the value."""
    return _SHORT.repr(value)


def kind(value: object) -> str:
    """How messages name a wrong value: ``"nothing"`` for ``None``, else its type and repr
    (``"an int (3)"``, ``"a str ('x')"``), cut short past a few items, levels or characters."""
    if value is None:
        return "nothing"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name} ({shown(value)})"


def load_file(path: str | Path, label: str, parse: Callable[[object], T], limit: SizeLimit | None = None) -> T:
    """Read, parse and check a whole file: :func:`read_text` (refusing a file over ``limit``
    unread), :func:`load`, then ``parse`` on the decoded data, whose :class:`ConfigError`
    (``"<key path>: <what>"``) becomes :meth:`Document.error`'s, naming the file, the line and
    the column."""
    document = load(read_text(path, label, limit), label)
    try:
        return parse(document.data)
    except ConfigError as exc:
        raise document.error(exc) from exc
    except RecursionError as exc:
        raise ConfigError(f"{label}: nested too deeply") from exc
