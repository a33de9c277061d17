"""What a trace file says: size, profile, noise, and how far set costs are from additive."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from itertools import combinations
from typing import Any

import numpy as np

from cost_model.traces.store import TraceSet


def _dist(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    a = np.asarray(values)
    return {
        "count": len(values),
        "mean": round(float(a.mean()), 4),
        "p10": round(float(np.percentile(a, 10)), 4),
        "p50": round(float(np.median(a)), 4),
        "p90": round(float(np.percentile(a, 90)), 4),
        "min": round(float(a.min()), 4),
        "max": round(float(a.max()), 4),
    }


def non_additivity(traces: TraceSet) -> tuple[list[float], list[int]]:
    """Per set of 2+ tables whose tables were each measured alone at its batch size: measured set
    cost / sum of its tables' single costs, and set sizes."""
    singles = traces.singles
    ratios, sizes = [], []
    for s in traces.sets():
        alone = [singles.get(t.name) for t in s.tables]
        if len(s.tables) >= 2 and all(a is not None and a.batch_size == s.batch_size for a in alone):
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


def summarize(traces: TraceSet) -> dict[str, Any]:
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
    return {
        "samples": len(traces.samples),
        "sets": {"total": len(sets), "train": len(traces.sets("train")), "test": len(traces.sets("test"))},
        "singles": len(traces.singles),
        "measurements": sum(len(s.passes) for s in traces.samples),
        "passes": _dist([len(s.passes) for s in traces.samples]),
        "set_size": _dist([len(s.tables) for s in sets]),
        "batch_size": traces.batch_size,
        "batch_sizes": {str(b): sum(s.batch_size == b for s in traces.samples) for b in traces.batch_sizes},
        "profile": traces.profile.to_dict(),
        "bench": traces.header["bench"],
        "cost_ms": _dist([s.cost_ms for s in sets]),
        "non_additivity": {**_dist(ratios), "by_set_size": by_size},
        "spread": {
            "within_pass_iqr_over_median": _dist(within),
            "across_passes_range_over_median": _dist(across),
            "pass_to_pass_mape": None if mape is None else round(mape, 4),
        },
    }
