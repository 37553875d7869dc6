"""The YAML loader of the three config files (feddns/configfile.py), against hostile documents."""

import time

import pytest

from feddns import configfile
from feddns.errors import ConfigError


def laughs(levels: int, width: int = 9) -> str:
    """"Billion laughs": each anchor a list of ``width`` aliases of the one before, ``width ** levels`` values."""
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def merges(levels: int) -> str:
    """Merge keys that double at each level (PyYAML before 6.0.3 expands them to ``2 ** levels`` pairs)."""
    lines = ["m0: &m0 {x: 1}"] + [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}]}}" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text", [laughs(9), "- " + laughs(9).replace("\n", "\n- ").removesuffix("- "), merges(40)])
def test_an_alias_bomb_is_refused_before_it_is_expanded(text):
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"^f\.yaml: aliases expand to more than 1000000 values$"):
        configfile.load(text, "f.yaml")
    assert time.monotonic() - started < 5


def test_aliases_within_the_bound_load_as_shared_values():
    data = configfile.load(laughs(3) + "m: &m {a: 1}\nn: {<<: *m, b: 2}\n", "f.yaml").data
    assert data["a2"] == [[["lol"] * 9] * 9] * 9
    assert data["n"] == {"a": 1, "b": 2}


@pytest.mark.parametrize(("text", "words"), [
    ("e: {<<: {a: 1, a: 2}}\n", "f.yaml: line 1: duplicate key 'a' (column 16, first given on line 1)"),
    ("e: {<<: [{b: 1}, {a: 1, a: 2}]}\n", "f.yaml: line 1: duplicate key 'a' (column 25, first given on line 1)"),
    ("e: {<<: {3: x}}\n", "f.yaml: key 3 is not a string but an int (3) (line 1, column 10)"),
])
def test_a_mapping_merged_in_place_is_checked_as_any_other(text, words):
    with pytest.raises(ConfigError) as caught:
        configfile.load(text, "f.yaml")
    assert str(caught.value) == words


def test_a_wrong_value_is_named_in_a_few_words_however_large():
    shared = [["lol"] * 9] * 9
    assert len(configfile.kind([shared] * 10**6)) < 400
    assert configfile.kind("x" * 10**6).startswith("a str ('xxx")
    assert len(configfile.kind("x" * 10**6)) < 100
    assert configfile.kind([]) == "a list ([])"
    assert configfile.kind({"a": 1}) == "a dict ({'a': 1})"


def test_a_file_whose_size_is_unknown_is_read_no_further_than_the_cap():
    """A character device (or a pipe) has no size to stat: it is read up to the cap, and refused past it."""
    limit = configfile.SizeLimit(4096, "--max-config-size")
    with pytest.raises(ConfigError, match=r"^/dev/zero: more than 4,096 bytes, over the limit of 4,096 bytes "
                                          r"\(--max-config-size\); not read$"):
        configfile.read_text("/dev/zero", "/dev/zero", limit)
