"""The $(VAR) expansion function against Kubernetes' semantics: the design's table of cases, then ours."""

import pytest

from links.expansion import expand, references

# The mapping of the expansion design's examples; no other variable is defined.
MAPPING = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}

# Every row of the design's table. Its input column is written as Go literals ("\\" is one backslash) and its
# result column as plain text; here both are Python literals. A backslash is an ordinary character.
DESIGN_TABLE = [
    ("$(VAR_A)", "A"),
    ("___$(VAR_B)___", "___B___"),
    ("___$(VAR_C)", "___C"),
    ("$(VAR_A)-$(VAR_A)", "A-A"),
    ("$(VAR_A)-1", "A-1"),
    ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
    ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
    ("$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"),
    ("f000-$$VAR_A", "f000-$VAR_A"),
    ("foo\\$(VAR_C)bar", "foo\\Cbar"),
    ("foo\\\\$(VAR_C)bar", "foo\\\\Cbar"),
    ("foo\\\\\\\\$(VAR_A)bar", "foo\\\\\\\\Abar"),
    ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),
    ("$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
    ("$(VAR_REF)", "$(VAR_A)"),
    ("%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"),
    ("foo$(VAR_EMPTY)bar", "foobar"),
    ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),
    ("f00__(VAR_A)__", "f00__(VAR_A)__"),
    ("$?_boo_$!", "$?_boo_$!"),
    ("$VAR_A", "$VAR_A"),
    ("$(VAR_DNE)", "$(VAR_DNE)"),
    ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
    ("$$$$$$(VAR_A)", "$$$(VAR_A)"),
    ("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
    ("$$$$$$$(VAR_A)", "$$$A"),
    ("$VAR_A)", "$VAR_A)"),
    ("${VAR_A}", "${VAR_A}"),
    ("$(VAR_B)_______$(A", "B_______$(A"),
    ("$(VAR_C)_______$(", "C_______$("),
    ("$(VAR_A)foobarzab$", "Afoobarzab$"),
    ("foo-\\$(VAR_A", "foo-\\$(VAR_A"),
    ("--$($($($($--", "--$($($($($--"),
    ("$($($($($--foo$(", "$($($($($--foo$("),
    ("foo0--$($($($(", "foo0--$($($($("),
    ("$(foo$$var)", "$(foo$$var)"),
]

OUR_CASES = [
    ("", ""),
    ("$", "$"),
    ("$$", "$"),
    ("$$$", "$$"),
    ("$(", "$("),
    ("$()", "$()"),                                   # the empty name is unknown: kept
    ("$(VAR_A)$(VAR_B)$(VAR_C)", "ABC"),
    ("$(VAR_A)$", "A$"),
    ("$$$(VAR_A)", "$A"),                             # an escape, then a reference
    ("$(VAR_A))", "A)"),                              # the first ) closes
    ("(($(VAR_B)))", "((B))"),
    ("$(VAR_REF)$(VAR_REF)", "$(VAR_A)$(VAR_A)"),     # values are not expanded again
    ("$(var_a)", "$(var_a)"),                         # names are case-sensitive
    ("$( VAR_A )", "$( VAR_A )"),                     # spaces are part of the name
    ("$(VAR_A\n)", "$(VAR_A\n)"),
    ("$é$(VAR_A)", "$éA"),                            # a multi-byte character after $ stays whole
    ("naïve $(VAR_B) ✓", "naïve B ✓"),
    ("$($(VAR_A))", "$($(VAR_A))"),                   # the name is "$(VAR_A": unknown
    ("postgres://$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)/app", "postgres://$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)/app"),
]


@pytest.mark.parametrize("text,expected", DESIGN_TABLE + OUR_CASES, ids=[repr(t) for t, _ in DESIGN_TABLE + OUR_CASES])
def test_expand(text, expected):
    assert expand(text, MAPPING.get) == expected


def test_links_variables_expand_in_a_containers_value():
    mapping = {"DB_SERVICE_HOST": "postgres.data.myfederation.svc.federation.", "DB_SERVICE_PORT": "5432"}
    assert expand("postgres://$(DB_SERVICE_HOST):$(DB_SERVICE_PORT)/app", mapping.get) == \
        "postgres://postgres.data.myfederation.svc.federation.:5432/app"


@pytest.mark.parametrize("text,names", [
    ("$(A)-$(B)", ["A", "B"]),
    ("$$(A) $(B)", ["B"]),
    ("$(A", []),
    ("$(A$(B))", ["A$(B"]),
    ("$$$(C)", ["C"]),
    ("no references", []),
])
def test_references(text, names):
    assert references(text) == names
