"""Plans that fit the memory a cost model counts, where it counts more than the planners do.

Our planners count a device's weights and optimizer state against its memory. A cost model may
count more (TorchRec's: its storage reservation, each shard's input and output buffers) and say
so with three methods: ``planning_topology(topology, shrink_bytes)``, the topology to plan on
(each device's memory as the model leaves it, less ``shrink_bytes``), ``overflow_bytes(plan)``,
how far the fullest device of a plan is past the model's count, and ``uncounted_bytes(plan)``,
the most bytes the model counts on a device beyond the planners' count. ``fitted`` wraps a
planner so that it plans on the model's topology, then again with every device shrunk: by the
overflow while a plan is over, else by the uncounted bytes (room for them, so that the planners'
own choices, whose costs the model prices, fit without its barrier). It keeps the fitting plan of
lowest max (at most ``ATTEMPTS`` plans, their times added up; none once half the planner's time
budget is spent or after one that no longer fits the planners' count); without one, the last plan
stands, priced over the model's count, for ``planning.kernels`` to try more tables in host memory
or refuse it (the model's ``check_memory``). Any other cost model leaves the planner as it is.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from autoshard.core.errors import PlannerError
from autoshard.core.types import Planner, ShardingPlan, Topology, Workload
from autoshard.planners.sharding_options import spread_option_memo
from autoshard.planning.kernels import kernel_fitted

ATTEMPTS = 3


class MemoryFitted:
    """``planner`` planning within the memory ``cost_model`` counts (see the module docstring)."""

    def __init__(self, planner: Planner, cost_model: Any) -> None:
        self.planner, self.cost_model = planner, cost_model

    @property
    def name(self) -> str:
        return self.planner.name

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        with spread_option_memo():  # the passes differ in memory alone: their spread options are one
            return self._plan(workload, topology)

    def _plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        best: ShardingPlan | None = None
        plan: ShardingPlan | None = None
        shrink, spent = 0, 0.0
        for attempt in range(ATTEMPTS):
            try:
                plan = self.planner.plan(workload, self.cost_model.planning_topology(topology, shrink))
            except PlannerError:
                if attempt == 0:
                    raise
                break  # less room than this fits nothing: the plans so far stand
            spent += plan.plan_time_s
            over = self.cost_model.overflow_bytes(plan)
            if over <= 0 and (best is None or plan.max_cost_ms < best.max_cost_ms):
                best = plan
            budget = getattr(self.planner, "time_budget_s", None)
            if plan.partial or (budget is not None and 2 * spent > budget):  # no time for another plan
                break
            # over: shrink by the overflow; fitting: leave room for the bytes our count left out
            # (TorchRec's buffers), so that the planners' own choices fit without the barrier
            wanted = shrink + over + 1 if over > 0 else self.cost_model.uncounted_bytes(plan)
            if wanted <= shrink:
                break
            shrink = wanted
        chosen = best if best is not None else plan
        assert chosen is not None
        return replace(chosen, plan_time_s=spent)


def fitted(planner: Planner, cost_model: object) -> Planner:
    """``planner`` within ``cost_model``'s memory count, where the model has one."""
    if all(hasattr(cost_model, m) for m in ("planning_topology", "overflow_bytes", "uncounted_bytes")):
        return kernel_fitted(MemoryFitted(planner, cost_model), cost_model)  # kernels: planning.kernels
    return planner
