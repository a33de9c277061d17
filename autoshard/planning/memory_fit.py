"""Plans that fit the memory a cost model counts, where it counts more than the planners do.

Our planners count a device's weights and optimizer state against its memory. A cost model may
count more (TorchRec's: its storage reservation, each shard's input and output buffers) and say
so with two methods: ``planning_topology(topology, shrink_bytes)``, the topology to plan on (each
device's memory as the model leaves it, less ``shrink_bytes``), and ``overflow_bytes(plan)``, how
far the fullest device of a plan is past the model's count. ``fitted`` wraps a planner so that it
plans on the model's topology and, while its plan is still over, again with every device shrunk
by the overflow (at most ``ATTEMPTS`` plans, their times added up; none after a plan cut short
by its time budget); past them its last plan stands, priced over the model's count. Any other
cost model leaves the planner as it is.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from autoshard.core.types import Planner, ShardingPlan, Topology, Workload

ATTEMPTS = 3


class MemoryFitted:
    """``planner`` planning within the memory ``cost_model`` counts (see the module docstring)."""

    def __init__(self, planner: Planner, cost_model: Any) -> None:
        self.planner, self.cost_model = planner, cost_model

    @property
    def name(self) -> str:
        return self.planner.name

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        shrink, spent, plan = 0, 0.0, None
        for _ in range(ATTEMPTS):
            plan = self.planner.plan(workload, self.cost_model.planning_topology(topology, shrink))
            spent += plan.plan_time_s
            over = self.cost_model.overflow_bytes(plan)
            if over <= 0 or plan.partial:  # it fits, or the time budget is spent
                break
            shrink += over + 1
        assert plan is not None
        return replace(plan, plan_time_s=spent)


def fitted(planner: Planner, cost_model: object) -> Planner:
    """``planner`` within ``cost_model``'s memory count, where the model has one."""
    if hasattr(cost_model, "planning_topology") and hasattr(cost_model, "overflow_bytes"):
        return MemoryFitted(planner, cost_model)
    return planner
