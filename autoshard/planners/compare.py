"""Run several planners on one task side by side: what the CLI, the evaluation and the service share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from autoshard.communication import CommunicationModel, WithCommunication
from autoshard.errors import PlannerError
from autoshard.planners.proxies import ProxyCostModel
from autoshard.planners.registry import available_planners, make_planner
from autoshard.types import CostModel, ShardingPlan, Topology, Workload


@dataclass(frozen=True, slots=True)
class Comparison:
    plans: tuple[ShardingPlan, ...]
    skipped: tuple[tuple[str, str], ...]  # (planner, why it did not plan)
    errors: tuple[PlannerError, ...]


def compare_planners(workload: Workload, topology: Topology, names: Sequence[str] | None,
                     cost_model: CostModel | None, seed: int = 0, allow_column_split: bool = False,
                     communication: CommunicationModel | None = None) -> Comparison:
    """Plans of every named planner (``None``: every available one), all scored by one cost model.

    With ``communication``, a device's cost is its compute plus its all-to-all. Without a cost
    model, every plan is scored by ``ProxyCostModel`` so that plans still compare like with
    like; planners that need a model are skipped with the reason.
    """
    if cost_model is not None and communication is not None:
        cost_model = WithCommunication(cost_model, communication, topology.num_devices)
    evaluator = cost_model or ProxyCostModel()
    skipped: list[tuple[str, str]] = []
    if names is None:
        names, unavailable = available_planners(cost_model)
        skipped.extend(unavailable)
    plans, errors = [], []
    for name in names:
        try:
            planner = make_planner(name, cost_model if name == "cost_greedy" else evaluator, seed,
                                   allow_column_split)
            plans.append(planner.plan(workload, topology))
        except PlannerError as error:
            errors.append(error)
            skipped.append((name, str(error)))
    return Comparison(tuple(plans), tuple(skipped), tuple(errors))
