"""The repository explains itself: no tracked file cites a file outside it, or the
team's own work items, which a reader of a fresh clone cannot see.

The interfaces are in docs/reference.md (sections 1-8); code, help and docs cite its
sections ("docs/reference.md section 4").
"""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Assembled from pieces so that this file does not match itself.
FORBIDDEN = re.compile("|".join([
    "(?-i:CONTRA" + "CTS)",                                   # the team's interface file (the word "contracts", as
                                                              # import-linter's table names them, is fine)
    r"\biss" + r"ues?\s*#?\d",                                 # a numbered work item
    r"\b(?:the|an|this|that|our|other|these|those)\s+iss" + r"ues?\b",   # a work item named in prose
    r"\biss" + r"ue's\b",
    r"\binter" + r"face [AB]\b",                               # the team's internal names for interfaces
    "/wo" + "rk/",                                            # paths on the team's machines
]), re.IGNORECASE)


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    out = []
    for name in names.decode().split("\0"):
        path = REPO / name
        if name and path.is_file() and not path.is_symlink():
            out.append(path)
    return out


def test_no_tracked_file_cites_an_outside_file_or_a_work_item() -> None:
    hits = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary
        for number, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    assert not hits, "cite docs/reference.md sections instead:\n" + "\n".join(hits)


def test_the_reference_has_sections_1_to_9_in_order() -> None:
    text = (REPO / "docs" / "reference.md").read_text(encoding="utf-8")
    numbers = [int(n) for n in re.findall(r"^## (\d+)\. ", text, re.MULTILINE)]
    assert numbers == list(range(1, 10))


def test_every_cited_section_exists() -> None:
    """"docs/reference.md section N" (or "sections N and M") names a section the page has."""
    cited: set[int] = set()
    pattern = re.compile(r"reference\.md,? sections? ((?:\d+(?:, | and |-| to )?)+)")
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for match in pattern.finditer(text):
            cited |= {int(n) for n in re.findall(r"\d+", match.group(1))}
    assert cited and cited <= set(range(1, 9)), sorted(cited)
