"""What a trace file says (``TraceSummary``): size, profile, noise, and how far set costs are from additive."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from cost_model.profile import DeviceProfile
from cost_model.traces.store import TraceSet


@dataclass(frozen=True, slots=True)
class Distribution:
    """Count, mean and percentiles of some values, rounded to 4 places; the count alone for none."""

    count: int
    mean: float | None = None
    p10: float | None = None
    p50: float | None = None
    p90: float | None = None
    min: float | None = None
    max: float | None = None

    def to_dict(self) -> dict[str, Any]:
        if not self.count:
            return {"count": 0}
        return {
            "count": self.count,
            "mean": self.mean,
            "p10": self.p10,
            "p50": self.p50,
            "p90": self.p90,
            "min": self.min,
            "max": self.max,
        }


def _dist(values: Sequence[float]) -> Distribution:
    if not values:
        return Distribution(0)
    a = np.asarray(values)
    return Distribution(
        len(values),
        round(float(a.mean()), 4),
        round(float(np.percentile(a, 10)), 4),
        round(float(np.median(a)), 4),
        round(float(np.percentile(a, 90)), 4),
        round(float(a.min()), 4),
        round(float(a.max()), 4),
    )


def non_additivity(traces: TraceSet) -> tuple[list[float], list[int]]:
    """Per set of 2+ tables whose tables were each measured alone at its batch size: measured set
    cost / sum of its tables' single costs, and set sizes."""
    singles = traces.singles
    ratios: list[float] = []
    sizes: list[int] = []
    for s in traces.sets():
        found = (singles.get(t.name) for t in s.tables)
        alone = [a for a in found if a is not None and a.batch_size == s.batch_size]
        if len(s.tables) >= 2 and len(alone) == len(s.tables):
            ratios.append(s.cost_ms / sum(a.cost_ms for a in alone))
            sizes.append(len(s.tables))
    return ratios, sizes


def pairwise_pass_mape(per_sample: Iterable[Sequence[float]]) -> float | None:
    """Mean of |p_i - p_j| / p_j over every pair of passes i < j of every sample (each sample's
    per-pass total ms): the single-pass noise floor. None if no sample has two passes."""
    errors = [abs(a - b) / b for passes in per_sample for a, b in combinations(passes, 2)]
    return statistics.fmean(errors) if errors else None


def pass_to_pass_mape(traces: TraceSet) -> float | None:
    """``pairwise_pass_mape`` over every sample of the traces."""
    return pairwise_pass_mape([m.total.median for m in s.passes] for s in traces.samples)


@dataclass(frozen=True, slots=True)
class SetCounts:
    total: int
    train: int
    test: int

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "train": self.train, "test": self.test}


@dataclass(frozen=True, slots=True)
class NonAdditivity:
    """Measured set cost / sum of its tables' single costs (``non_additivity``), over every set and by set size."""

    ratio: Distribution
    by_set_size: dict[str, Distribution]

    def to_dict(self) -> dict[str, Any]:
        return {**self.ratio.to_dict(), "by_set_size": {k: d.to_dict() for k, d in self.by_set_size.items()}}


@dataclass(frozen=True, slots=True)
class Spread:
    """The measurements' noise: within a pass (IQR / median), across passes (range / median), and
    the pass-to-pass MAPE (None with a single pass per sample)."""

    within_pass_iqr_over_median: Distribution
    across_passes_range_over_median: Distribution
    pass_to_pass_mape: float | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "within_pass_iqr_over_median": self.within_pass_iqr_over_median.to_dict(),
            "across_passes_range_over_median": self.across_passes_range_over_median.to_dict(),
            "pass_to_pass_mape": self.pass_to_pass_mape,
        }


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """``summarize``: what `autoshard bench summary` reports. ``bench``: the benchmark settings the
    trace file's header records, as it records them."""

    samples: int
    sets: SetCounts
    singles: int
    measurements: int
    passes: Distribution
    set_size: Distribution
    batch_size: int
    batch_sizes: dict[str, int]
    profile: DeviceProfile
    bench: dict[str, Any]
    cost_ms: Distribution
    non_additivity: NonAdditivity
    spread: Spread

    def to_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "sets": self.sets.to_dict(),
            "singles": self.singles,
            "measurements": self.measurements,
            "passes": self.passes.to_dict(),
            "set_size": self.set_size.to_dict(),
            "batch_size": self.batch_size,
            "batch_sizes": dict(self.batch_sizes),
            "profile": self.profile.to_dict(),
            "bench": self.bench,
            "cost_ms": self.cost_ms.to_dict(),
            "non_additivity": self.non_additivity.to_dict(),
            "spread": self.spread.to_dict(),
        }


def summarize(traces: TraceSet) -> TraceSummary:
    sets = traces.sets()
    ratios, sizes = non_additivity(traces)
    by_size = {}
    for low, high in ((2, 4), (5, 7), (8, 10), (11, 15), (16, 20), (21, 10**9)):
        chosen = [r for r, n in zip(ratios, sizes) if low <= n <= high]
        if chosen:
            by_size[f"{low}-{high}" if high < 10**9 else f"{low}+"] = _dist(chosen)
    within = [m.total.iqr / m.total.median for s in traces.samples for m in s.passes if m.total.median > 0]
    across = [s.pass_spread for s in traces.samples if len(s.passes) >= 2]
    mape = pass_to_pass_mape(traces)
    return TraceSummary(
        samples=len(traces.samples),
        sets=SetCounts(len(sets), len(traces.sets("train")), len(traces.sets("test"))),
        singles=len(traces.singles),
        measurements=sum(len(s.passes) for s in traces.samples),
        passes=_dist([len(s.passes) for s in traces.samples]),
        set_size=_dist([len(s.tables) for s in sets]),
        batch_size=traces.batch_size,
        batch_sizes={str(b): sum(s.batch_size == b for s in traces.samples) for b in traces.batch_sizes},
        profile=traces.profile,
        bench=traces.header["bench"],
        cost_ms=_dist([s.cost_ms for s in sets]),
        non_additivity=NonAdditivity(_dist(ratios), by_size),
        spread=Spread(_dist(within), _dist(across), None if mape is None else round(mape, 4)),
    )
