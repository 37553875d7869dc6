"""What the e2e tier measured (the node's start, the join and the leave), printed at the end of the
run by conftest.py's terminal summary, so that `make e2e` and the README's test command show them."""

FIGURES: dict[str, str] = {}
"""A figure's name: its value as printed (with its unit)."""
