"""A measured choice among a task's plans: a predicted win is a hypothesis.

The planners choose by the cost model, whose error per device set (5-7%) is as large as the gains
a search finds past cost_greedy (1-5%), so the search's "wins" are as often where the model
under-prices a set as where the plan is better (docs/concepts.md, "Why predicted gains measure
smaller"). ``verify`` settles it on
the machine itself: it measures the best-predicted distinct placements side by side (the caller's
measurer, interleaved rounds) and keeps the one that measured fastest, paired by round (the
geometric mean of its per-round max over the predicted best's). The predicted best is no default
to beat beyond the noise: it is the plan most likely to sit where the model errs low, so a tie
goes to the measurement, not to the model (docs/decisions.md, 26). A placement
several planners made is one candidate, named by all of them; the best-predicted heuristic's is
always one, so the choice is measured against the heuristics users run today.

Measurement is passed in (``RoundsMeasurer``), as in ``autoshard.evaluation``: the CLI hands it
``autoshard.evaluation.measure_plan.measure_plans``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from autoshard.core.errors import InputError
from autoshard.core.stats import ratio_ci95, verdict
from autoshard.core.types import ShardingPlan
from autoshard.planners.report import costs_descending
from autoshard.planning.registry import HEURISTICS

RoundsMeasurer = Callable[[Sequence[ShardingPlan]], Sequence[Sequence[float]]]
"""(plans of one task) -> each plan's measured max in each round, rounds paired across plans."""

VERIFIED = "verified"
"""The name a verified choice carries where it stands beside the planners' plans (``evaluate --verify``)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One distinct placement: the plan of the first planner that made it, and every planner that did."""

    plan: ShardingPlan
    planners: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Verification:
    """The candidates (best predicted first), each one's measured max per round, and the choice:
    ``chosen`` indexes the candidates (the measured fastest)."""

    candidates: tuple[Candidate, ...]
    round_max_ms: tuple[tuple[float, ...], ...]
    chosen: int

    @property
    def plan(self) -> ShardingPlan:
        return self.candidates[self.chosen].plan

    def against_predicted_best(self, k: int) -> tuple[float, float, float]:
        """Candidate ``k``'s measured max over the predicted best's: (geometric mean over rounds, 95% interval)."""
        return ratio_ci95(self.round_max_ms[k], self.round_max_ms[0])

    def to_dict(self) -> dict[str, Any]:
        rows = []
        for k, candidate in enumerate(self.candidates):
            ratio, low, high = self.against_predicted_best(k)
            rows.append(
                {
                    "planners": list(candidate.planners),
                    "predicted_max_ms": round(candidate.plan.max_cost_ms, 4),
                    "measured_max_ms": round(statistics.median(self.round_max_ms[k]), 4),
                    "measured_ratio_to_predicted_best": round(ratio, 4),
                    "ci95": None if k == 0 else [round(low, 4), round(high, 4)],
                    "verdict": None if k == 0 else verdict(low, high),
                    "chosen": k == self.chosen,
                }
            )
        return {
            "rounds": len(self.round_max_ms[0]),
            "chosen": list(self.candidates[self.chosen].planners),
            "changed": self.chosen != 0,
            "candidates": rows,
        }


def placement_key(plan: ShardingPlan) -> tuple:
    """What a plan places where, as a comparable key: each device's shards, the devices in any
    order (two plans that differ only by device numbering run alike)."""
    return tuple(sorted(d.set_key for d in plan.devices))


def distinct_candidates(plans: Sequence[ShardingPlan], top: int) -> list[Candidate]:
    """The ``top`` best-predicted distinct placements of ``plans``: by predicted max, then (plans
    bound by the same device tie on it) by the next costliest devices, since a device near the
    max may measure above it; then the planners' order. The best-predicted heuristic's placement
    (what users run today) joins them if it is not among them."""
    if top < 1:
        raise InputError("top", f"must be at least 1, got {top}", "verify at least the predicted best plan")
    groups: dict[tuple, list[ShardingPlan]] = {}
    for plan in plans:
        groups.setdefault(placement_key(plan), []).append(plan)
    found = [Candidate(same[0], tuple(p.planner for p in same)) for same in groups.values()]
    found.sort(key=lambda c: costs_descending(c.plan))  # stable
    heuristic = next((k for k, c in enumerate(found) if set(c.planners) & set(HEURISTICS)), None)
    return found[:top] + ([found[heuristic]] if heuristic is not None and heuristic >= top else [])


def verify(plans: Sequence[ShardingPlan], measure: RoundsMeasurer, top: int = 4) -> Verification:
    """Measure the ``top`` best-predicted distinct placements of ``plans`` (``measure``; with the
    best-predicted heuristic's) and choose the one with the lowest geometric mean, over rounds, of
    its max over the predicted best's; equal ones (plans bound by the same device read the same
    measurement) keep the predicted order."""
    if not plans:
        raise InputError("plans", "there is no plan to verify", "plan with at least one planner first")
    candidates = distinct_candidates(plans, top)
    rounds = tuple(tuple(float(v) for v in r) for r in measure([c.plan for c in candidates]))
    verification = Verification(tuple(candidates), rounds, 0)
    ratios = [verification.against_predicted_best(k)[0] for k in range(len(candidates))]
    return replace(verification, chosen=min(range(len(candidates)), key=lambda k: (round(ratios[k], 12), k)))


__all__ = ["Candidate", "RoundsMeasurer", "VERIFIED", "Verification", "distinct_candidates", "placement_key", "verify"]
