"""The optimizer's curse: what the cost model's error on each device does to a plan's max.

A planner balances the predicted costs of its devices, so the slowest device of its plan is one
of many near the max, and the model's error on each of them (a device set's error is its own:
the measured residuals of one task's devices spread by about 9%, docs/evaluation.md) lifts the
measured max above the predicted one, and further than for a plan with one device well above the
rest. Given errors the model has made on measured device sets, a plan is expected to measure
E[max_d c_d exp(e_d)], each e_d drawn independently from those errors: its max if the model's
error were all that stood between prediction and measurement.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

DRAWS = 20_000
"""Monte Carlo draws of every device's error (20,000: the expected max of an 8-device plan
within about 0.1%)."""


def device_errors(predicted: Sequence[float], measured: Sequence[float]) -> np.ndarray:
    """log(measured / predicted) of each device that holds work (both above 0)."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    held = (p > 0) & (m > 0)
    return np.log(m[held] / p[held])


def centred(errors: np.ndarray) -> np.ndarray:
    """``errors`` less their median: one run's drift and scale, common to every device of a task
    measured together, taken out."""
    return errors - np.median(errors) if len(errors) else errors


def expected_max(predicted: Sequence[float], errors: np.ndarray, seed: int = 0, draws: int = DRAWS) -> float:
    """E[max_d predicted_d exp(e_d)] over the devices that hold work, each e_d drawn
    independently from ``errors`` (seeded: plans compared with one seed meet the same draws)."""
    costs = np.asarray(predicted, dtype=float)
    costs = costs[costs > 0]
    if not len(costs):
        return 0.0
    if not len(errors):
        return float(costs.max())
    drawn = np.random.default_rng(seed).choice(errors, size=(draws, len(costs)))
    return float((costs[None, :] * np.exp(drawn)).max(1).mean())
