"""Cost-model greedy plus local search: the strongest non-learned baseline."""

from __future__ import annotations

import time
from dataclasses import dataclass

from autoshard.planners.local_search import improve
from autoshard.planners.placement import DeviceState, build_plan, place_workload
from autoshard.planners.units import Unit, model_costs
from autoshard.types import CostModel, ShardingPlan, Topology, Workload


@dataclass(frozen=True, slots=True)
class CostGreedyPlanner:
    """Tables by predicted cost alone, descending (ties by name; one batched call for all); each
    to the device whose predicted cost for its whole set with the table added is lowest, among
    devices with room that leave the remaining tables packable (ties: lowest index; one batched
    call per table). Then ``improve``: moves
    and swaps off the max-cost device for at most ``max_rounds`` rounds (0 turns it off).
    Column splitting, if allowed, splits tables predicted above the average device load.
    Device ``cost_ms`` is the cost model's prediction."""

    cost_model: CostModel
    allow_column_split: bool = False
    max_rounds: int = 50
    name: str = "cost_greedy"

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        started = time.perf_counter()
        batch_size = workload.batch_size
        def cheapest_after(position: int, unit: Unit, candidates: list[DeviceState]) -> tuple[DeviceState, float]:
            costs = self.cost_model.predict_many([s.tables + [unit.table] for s in candidates], batch_size)
            cost, state = min(zip(costs, candidates), key=lambda p: (p[0], p[1].index))
            return state, float(cost)

        states = place_workload(workload, topology, model_costs(self.cost_model, batch_size),
                                self.allow_column_split, cheapest_after, lookahead=True)
        improve(states, self.cost_model, batch_size, self.max_rounds)
        return build_plan(self.name, states, started, batch_size)
