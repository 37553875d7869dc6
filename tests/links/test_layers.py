"""links/ is a deployable of its own: it imports from feddns only, and feddns never imports it."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]


def imported(package: str) -> set[tuple[str, str]]:
    """``(file, top-level module)`` of every import in ``package``."""
    found = set()
    for path in (REPO / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {(path.name, alias.name.split(".")[0]) for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add((path.name, node.module.split(".")[0]))
    return found


@pytest.mark.parametrize("package,forbidden", [
    ("links", {"controller", "stubzone", "tests"}),
    ("feddns", {"links"}),
    ("controller", {"links"}),
    ("stubzone", {"links"}),
])
def test_layers(package, forbidden):
    assert {(f, m) for f, m in imported(package) if m in forbidden} == set()
