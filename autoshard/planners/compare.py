"""Run several planners on one task side by side: what the CLI, the evaluation and the service share."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from autoshard.communication import CommunicationModel, WithCommunication
from autoshard.errors import PlannerError
from autoshard.planners.context import PlannerContext
from autoshard.planners.proxies import ProxyCostModel
from autoshard.planners.registry import available_planners, make_planner, planner_spec
from autoshard.planners.shared import SharedWork
from autoshard.types import ShardingPlan, Topology, Workload


@dataclass(frozen=True, slots=True)
class Comparison:
    plans: tuple[ShardingPlan, ...]
    skipped: tuple[tuple[str, str], ...]  # (planner, why it did not plan)
    errors: tuple[PlannerError, ...]


def compare_planners(workload: Workload, topology: Topology, names: Sequence[str] | None,
                     context: PlannerContext, communication: CommunicationModel | None = None) -> Comparison:
    """Plans of every named planner (``None``: every one that can run here, TorchRec's included), all scored
    by ``context.cost_model`` (with ``communication``: compute plus each device's all-to-all),
    or without one by ``ProxyCostModel`` so that plans still compare like with like; planners
    whose needs are not met are skipped with the reason. The planners share the placements they
    compute alike (``context.shared``, a new ``SharedWork`` for the task if the caller gave none)."""
    if context.shared is None:
        context = replace(context, shared=SharedWork(workload, topology))
    if context.cost_model is not None and communication is not None:
        context = replace(context, cost_model=WithCommunication(context.cost_model, communication,
                                                                topology.num_devices))
    skipped: list[tuple[str, str]] = []
    if names is None:
        names, unavailable = available_planners(context, defaults_only=False)
        skipped.extend(unavailable)
    # without a trained model, every plan is scored by one proxy, so that plans compare like with like
    scored = context if context.cost_model is not None else replace(context, cost_model=ProxyCostModel())
    plans, errors = [], []
    for name in names:
        try:
            unmet = planner_spec(name).unmet(context)  # its needs, against what the caller really has
            if unmet is not None:
                raise unmet
            plans.append(make_planner(name, scored).plan(workload, topology))
        except PlannerError as error:
            errors.append(error)
            skipped.append((name, str(error)))
    return Comparison(tuple(plans), tuple(skipped), tuple(errors))
