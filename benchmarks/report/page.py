"""The page's building blocks: lines and goals, ratios, verdicts, failed stages, and matplotlib."""

from __future__ import annotations

import math
import os
from pathlib import Path

from benchmarks.report.running import Run
from benchmarks.report.settings import ROOT


def pyplot():
    """matplotlib's pyplot on the file backend, in the page's font sizes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 9, "axes.titlesize": 10})
    return plt


def fmt_ratio(got: dict) -> str:
    """A ratio with its 95% interval in brackets, or alone where it has none."""
    low, high = got.get("ci95") or (None, None)
    if low is None or (isinstance(low, float) and math.isnan(low)):
        return f"{got['ratio']:.3f}"
    return f"{got['ratio']:.3f} [{low:.3f}, {high:.3f}]"


def yes_no(met: bool) -> str:
    """A goal's verdict: a missed goal stands out in bold."""
    return "met" if met else "**MISSED**"


def relative(path: Path, start: Path) -> str:
    """``path`` as the page shows it: relative to ``start``."""
    return os.path.relpath(path, start)


class Page:
    """The lines of a page being written, and the goals its sections judged (for the goals table)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.goals: list[tuple[str, str, str]] = []  # (goal, this run, met)

    def add(self, *lines: str) -> None:
        self.lines.extend(lines)

    def goal(self, goal: str, latest: str, met: bool | None) -> str:
        """Record a goal with this run's figure; returns its verdict (``n/a`` when not judged)."""
        verdict = "n/a" if met is None else yes_no(met)
        self.goals.append((goal, latest, verdict))
        return verdict


def failed(run: Run, stage: str) -> str:
    """What a section says in place of its figures when its stage did not run or failed."""
    entry = run.stages.get(stage)
    if entry is None:
        return f"**Not run** (stage `{stage}`): no output in `{relative(run.work, ROOT)}`."
    tail = (entry.get("error") or "").strip().splitlines()[-3:]
    return f"**This stage failed** (exit {entry['rc']}; log `{entry.get('log')}`): " + " / ".join(
        f"`{line.strip()[:200]}`" for line in tail
    )
