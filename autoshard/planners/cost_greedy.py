"""Cost-model greedy plus local search: the strongest non-learned baseline."""

from __future__ import annotations

import time
from dataclasses import dataclass

from autoshard.errors import PlannerError
from autoshard.planners.accumulator import Accumulator, make_accumulator
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
    Column splitting, if allowed, splits tables predicted above the average device load into
    at most 2, 4, ... D shards (a shard still pays every lookup, so more shards are not always
    cheaper): no split and each cap are planned, and the lowest predicted max is kept.
    Device ``cost_ms`` is the cost model's prediction."""

    cost_model: CostModel
    allow_column_split: bool = False
    max_rounds: int = 50
    name: str = "cost_greedy"

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        started = time.perf_counter()
        batch_size = workload.batch_size

        accumulator: Accumulator | None = None

        def cheapest_after(position: int, unit: Unit, candidates: list[DeviceState]) -> tuple[DeviceState, float]:
            nonlocal accumulator
            if position == 0:  # a placement (re)starts: its devices are empty
                accumulator = make_accumulator(self.cost_model, topology.num_devices, batch_size)
            assert accumulator is not None
            costs = accumulator.costs_if_added(unit.table)
            state = min(candidates, key=lambda s: (costs[s.index], s.index))
            accumulator.add(state.index, unit.table)  # ``place`` adds the unit to this device
            return state, float(costs[state.index])

        best: list[DeviceState] | None = None
        error: PlannerError | None = None
        caps = [2**k for k in range(1, topology.num_devices.bit_length())] if self.allow_column_split else []
        for cap in [None, *caps]:  # None: no split at all
            try:
                states = place_workload(workload, topology, model_costs(self.cost_model, batch_size),
                                        cap is not None, cheapest_after, lookahead=True, max_ways=cap)
            except PlannerError as failed:  # too few shards for memory at this cap: try the next
                error = failed
                continue
            improve(states, self.cost_model, batch_size, self.max_rounds)
            if best is None or max(s.load for s in states) < max(s.load for s in best):
                best = states
        if best is None:
            assert error is not None
            raise error
        return build_plan(self.name, best, started, batch_size)
