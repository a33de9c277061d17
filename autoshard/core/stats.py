"""Paired ratios of measurements: the geometric mean of per-round ratios, with a 95% interval;
and a robust spread."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

import numpy as np
from scipy import stats


def ratio_ci95(numerators: Sequence[float], denominators: Sequence[float]) -> tuple[float, float, float]:
    """(geometric mean, low, high) of ``numerators[r] / denominators[r]`` over rounds ``r``: a
    t-interval on the log ratios (``nan`` bounds with one round). Pairing by round cancels what a
    round shares (the machine's speed while it ran)."""
    logs = [math.log(a / b) for a, b in zip(numerators, denominators, strict=True)]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), math.nan, math.nan
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def geomean(values: Sequence[float]) -> float:
    """The geometric mean of positive ``values``."""
    return math.exp(statistics.fmean(math.log(v) for v in values))


def verdict(low: float, high: float) -> str:
    """``faster`` when the whole interval of a ratio lies below 1, ``slower`` above, else ``tie``."""
    return "faster" if high < 1 else "slower" if low > 1 else "tie"


def mad_sigma(values: Sequence[float] | np.ndarray) -> float:
    """1.4826 x the median absolute deviation: the standard deviation of a normal sample, robust
    to the few values far off."""
    values = np.asarray(values, dtype=float)
    return float(1.4826 * np.median(np.abs(values - np.median(values))))


__all__ = ["geomean", "mad_sigma", "ratio_ci95", "verdict"]
