"""What the e2e tier measured (the clusters' start, the join and the leave, the failover),
printed at the end of the run by conftest.py's terminal summary, so that `make e2e` and the
README's test command show them."""

import statistics

FIGURES: dict[str, str] = {}
"""A figure's name: its value as printed (with its unit)."""

TIMES: dict[str, list[float]] = {}
"""A figure of the contract's table (``unready-same-cluster-answer``, ...): every measured time, in seconds."""

STAGES: dict[tuple[str, str], list[float]] = {}
"""(figure, stage): every measured time of that stage of the figure, in seconds."""


def record(name: str, seconds: float, stages: dict[str, float] | None = None) -> None:
    """One measurement of figure ``name`` and its stages (seconds each)."""
    TIMES.setdefault(name, []).append(seconds)
    for stage, value in (stages or {}).items():
        STAGES.setdefault((name, stage), []).append(value)


def print_figures() -> list[str]:
    """``e2e figure: NAME median X s max Y s n K`` for each figure, then its ``e2e stage:`` lines."""
    lines = []
    for name, values in TIMES.items():
        lines.append(f"e2e figure: {name} median {statistics.median(values):.1f} s max {max(values):.1f} s "
                     f"n {len(values)}")
    for (name, stage), values in STAGES.items():
        lines.append(f"e2e stage: {name} {stage} median {statistics.median(values):.1f} s "
                     f"max {max(values):.1f} s n {len(values)}")
    return lines
