"""The optimizer's curse: what the cost model's error on each device does to a plan's max.

A planner balances the predicted costs of its devices, so the slowest device of its plan is one
of many near the max, and the model's error on each of them (a device set's error is its own;
docs/concepts.md, "Why predicted gains measure smaller") lifts the
measured max above the predicted one, and further than for a plan with one device well above the
rest. Given errors the model has made on measured device sets, a plan is expected to measure
E[max_d c_d exp(e_d)], each e_d drawn independently from those errors: its max if the model's
error were all that stood between prediction and measurement.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autoshard.core.errors import InputError

GRID = 256
"""Steps of ``expected_max``'s integral: its answer is within (hi - lo) / (2 GRID) of the exact
one by construction, [lo, hi] the range the max can take (0.2% of the max for errors spanning
+-0.5); on the shipped profile's errors, within 0.005% of the answer on 1,024 steps, at a quarter
of the time (0.05 ms for 8 devices)."""

DEVICE_ERRORS_FILE = "device_errors.json"
"""A profile's measured device errors (``autoshard cost errors``), beside its cost model."""


def device_errors(predicted: Sequence[float] | np.ndarray, measured: Sequence[float] | np.ndarray) -> np.ndarray:
    """log(measured / predicted) of each device that holds work (both above 0)."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    held = (p > 0) & (m > 0)
    return np.log(m[held] / p[held])


def centred(errors: np.ndarray) -> np.ndarray:
    """``errors`` less their median: one run's drift and scale, common to every device of a task
    measured together, taken out."""
    return errors - np.median(errors) if len(errors) else errors


def expected_max(predicted: Sequence[float], errors: Sequence[float] | np.ndarray) -> float:
    """E[max_d predicted_d exp(e_d)] over the devices that hold work, each e_d drawn
    independently from ``errors`` (an empirical distribution), without sampling: the max's
    distribution function is the product of the devices' own, and E[max] = lo + the integral
    of 1 - F over [lo, hi], the range the max can take, by the trapezoid rule on ``GRID`` steps
    (F rises along it, so its left and right sums bound the integral)."""
    return expected_max_of(predicted, np.exp(np.sort(np.asarray(errors, dtype=float))))


def expected_max_of(predicted: Sequence[float], factors: np.ndarray) -> float:
    """``expected_max`` under the error factors exp(e), ascending (``DeviceErrors.factors``: a
    profile's, computed once for every plan priced under them)."""
    costs = np.asarray(predicted, dtype=float)
    costs = costs[costs > 0]
    if not len(costs):
        return 0.0
    if not len(factors):  # a device's cost is c_d times one of the factors
        return float(costs.max())
    lo, hi = costs.max() * factors[0], costs.max() * factors[-1]
    if hi <= lo:
        return float(lo)
    rivals = costs[costs * factors[-1] > lo]  # the others are below lo whatever their error
    edges = np.linspace(lo, hi, GRID + 1)
    below = np.searchsorted(factors, edges / rivals[:, None], side="right") / len(factors)  # each rival's F
    rest = 1.0 - below.prod(axis=0)  # P(max > x) at each edge
    return float(lo + (rest[:-1].sum() + rest[1:].sum()) / 2 * (hi - lo) / GRID)


@dataclass(frozen=True, slots=True)
class DeviceErrors:
    """A cost model's errors on measured device sets of plans (centred log errors, one per set
    and task, ``cost_model.relative_labels.centred_errors``), and the reports they came from:
    what a plan's ``expected_max`` is computed under."""

    errors: tuple[float, ...]
    tasks: int
    reports: tuple[str, ...]
    array: np.ndarray = field(init=False, repr=False, compare=False)  # the errors, sorted
    factors: np.ndarray = field(init=False, repr=False, compare=False)  # exp of them, for ``expected_max_of``

    def __post_init__(self) -> None:
        object.__setattr__(self, "array", np.sort(np.asarray(self.errors, dtype=float)))
        object.__setattr__(self, "factors", np.exp(self.array))

    def expected_max(self, predicted: Sequence[float]) -> float:
        """``expected_max`` of a plan's device costs under these errors."""
        return expected_max_of(predicted, self.factors)

    @property
    def spread(self) -> float:
        """The errors' standard deviation (log scale: about the relative error of one set)."""
        return float(np.std(self.errors))

    def summary(self) -> dict[str, float | int]:
        return {"sets": len(self.errors), "tasks": self.tasks, "spread": round(self.spread, 4)}

    def save(self, path: Path) -> None:
        path.write_text(
            json.dumps(
                {**self.summary(), "reports": list(self.reports), "errors": [round(e, 5) for e in self.errors]},
                indent=1,
            )
            + "\n"
        )

    @classmethod
    def load(cls, path: Path) -> DeviceErrors:
        """``InputError`` naming the file for anything but a list of finite errors."""
        fix = "make it again: `autoshard cost errors --model DIR --measured REPORTS`"
        try:
            data = json.loads(path.read_text())
            errors = tuple(float(e) for e in data["errors"])
            tasks, reports = int(data.get("tasks", 0)), tuple(str(r) for r in data.get("reports", ()))
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as error:
            raise InputError(
                "errors", f"unreadable device errors ({type(error).__name__}: {error})", fix, str(path)
            ) from None
        if not errors or not all(math.isfinite(e) for e in errors):
            raise InputError("errors", "must be a non-empty list of finite numbers", fix, str(path))
        return cls(errors, tasks, reports)
