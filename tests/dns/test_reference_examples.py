"""The dig examples of docs/reference.md section 2, run again with dig against
examples/policies.yaml: each prints the records shown (as sets: rotated tiers and
weighted draws change the order from run to run)."""

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from harness.serve import ServeProcess

ROOT = Path(__file__).parents[2]
REFERENCE = (ROOT / "docs" / "reference.md").read_text()


def examples() -> list[tuple[str, list[str]]]:
    """``(dig command, output lines)`` of each ``$ dig ... +answer`` line of the console blocks."""
    out: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", REFERENCE, re.DOTALL):
        for command, output in re.findall(r"^\$ (dig [^\n]*\+answer[^\n]*)\n((?:[^$][^\n]*\n)*)", block, re.MULTILINE):
            out.append((command, [" ".join(line.split()) for line in output.splitlines() if line.strip()]))
    return out


EXAMPLES = examples()


def test_the_reference_has_its_examples():
    assert len(EXAMPLES) >= 15


@pytest.fixture(scope="module")
def example_server():
    args = ["--mcs-zone", "clusterset.local."]
    with ServeProcess(records=str(ROOT / "examples" / "policies.yaml"), extra_args=args) as server:
        yield server


@pytest.mark.parametrize(("command", "expected"), EXAMPLES, ids=[c.split("+answer ")[1] for c, _ in EXAMPLES])
def test_dig_prints_what_the_reference_shows(example_server, command, expected):
    argv = [str(example_server.port) if arg == "5353" else arg for arg in shlex.split(command)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=True)
    got = [" ".join(line.split()) for line in result.stdout.splitlines() if line.strip()]
    assert sorted(got) == sorted(expected)
