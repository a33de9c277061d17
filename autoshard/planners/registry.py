"""Planners by name.

``PLANNERS`` maps a name to a factory taking ``cost_model``, ``seed`` and ``allow_column_split``
by keyword; ``register_planner`` adds one. A factory raises ``PlannerError(UNAVAILABLE)`` when its
planner cannot run here (cost_greedy without a cost model, torchrec without torchrec); planners
with heavy dependencies import them inside their factory.
"""

from __future__ import annotations

from typing import Protocol

from autoshard.errors import InputError, PlannerError, PlannerErrorKind
from autoshard.planners.cost_greedy import CostGreedyPlanner
from autoshard.planners.heuristics import GreedyProxyPlanner, RandomPlanner, RoundRobinPlanner
from autoshard.planners.proxies import PROXIES
from autoshard.types import CostModel, Planner

HEURISTICS = ("random", "round_robin", "size_greedy", "dim_greedy", "lookup_greedy", "size_lookup_greedy")


class PlannerFactory(Protocol):
    def __call__(self, *, cost_model: CostModel | None, seed: int, allow_column_split: bool) -> Planner: ...


def _random(*, cost_model: CostModel | None, seed: int, allow_column_split: bool) -> Planner:
    return RandomPlanner(cost_model, seed, allow_column_split)


def _round_robin(*, cost_model: CostModel | None, seed: int, allow_column_split: bool) -> Planner:
    return RoundRobinPlanner(cost_model, allow_column_split)


def _greedy(name: str) -> PlannerFactory:
    def factory(*, cost_model: CostModel | None, seed: int, allow_column_split: bool) -> Planner:
        return GreedyProxyPlanner(name, PROXIES[name], cost_model, allow_column_split)
    return factory


def _cost_greedy(*, cost_model: CostModel | None, seed: int, allow_column_split: bool) -> Planner:
    if cost_model is None:
        raise PlannerError(PlannerErrorKind.UNAVAILABLE, "cost_greedy needs a trained cost model",
                           ("pass a cost model (CLI: --model DIR)",
                            f"or use a heuristic: {', '.join(HEURISTICS)}"))
    return CostGreedyPlanner(cost_model, allow_column_split)


def _torchrec(*, cost_model: CostModel | None, seed: int, allow_column_split: bool) -> Planner:
    try:
        from autoshard.planners.torchrec_planner import TorchRecPlanner
    except ImportError as error:
        raise PlannerError(PlannerErrorKind.UNAVAILABLE, f"TorchRec's planner cannot load ({error})",
                           ("install the torchrec extra",)) from None
    return TorchRecPlanner(allow_column_split=allow_column_split, cost_model=cost_model)


PLANNERS: dict[str, PlannerFactory] = {"random": _random, "round_robin": _round_robin,
                                       **{name: _greedy(name) for name in PROXIES},
                                       "cost_greedy": _cost_greedy, "torchrec": _torchrec}


def register_planner(name: str, factory: PlannerFactory) -> None:
    PLANNERS[name] = factory


def planner_names() -> tuple[str, ...]:
    """Every planner name, whether or not it can run here."""
    return tuple(PLANNERS)


def make_planner(name: str, cost_model: CostModel | None = None, seed: int = 0,
                 allow_column_split: bool = False) -> Planner:
    """A planner by name; ``PlannerError(UNAVAILABLE)`` if it cannot run (no cost model for
    cost_greedy, torchrec not installed), ``InputError`` if unknown."""
    if name not in PLANNERS:
        raise InputError("planner", f"unknown planner {name!r}", f"use one of {', '.join(planner_names())}")
    return PLANNERS[name](cost_model=cost_model, seed=seed, allow_column_split=allow_column_split)


def available_planners(cost_model: CostModel | None) -> tuple[list[str], list[tuple[str, str]]]:
    """(planners that can run, [(planner, reason) for the others])."""
    names, skipped = [], []
    for name in planner_names():
        try:
            make_planner(name, cost_model)
            names.append(name)
        except PlannerError as error:
            skipped.append((name, error.message))
    return names, skipped

