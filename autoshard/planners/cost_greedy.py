"""Cost-model greedy plus local search: the strongest non-learned baseline."""

from __future__ import annotations

import time
from dataclasses import dataclass

from autoshard.core.costing import is_exact
from autoshard.core.errors import PlannerError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, ShardingPlan, Topology, Workload
from autoshard.planners.choosers import CANDIDATES, cheapest_after
from autoshard.planners.context import DEPARTURE_MARGIN
from autoshard.planners.deadline import Deadline
from autoshard.planners.device_state import DeviceState, build_plan, max_load
from autoshard.planners.local_search import MAX_ROUNDS, improve
from autoshard.planners.option_search import change_options
from autoshard.planners.place_loop import place_workload
from autoshard.planners.placement_state import PlacementState, unit_cap
from autoshard.planners.placement_unit import Unit
from autoshard.planners.sharding_options import ALL_TYPES
from autoshard.planners.split_cap_choice import best_over_split_caps
from autoshard.planners.spread_stage import best_of_tasks, spread_tasks
from autoshard.planners.task_cache import Placement, TaskCache

RUNNER_UP_WITHIN = 0.05
"""The runner-up task plan is searched too (under an exact model) when its max is within 5% of
the best's: option search lowers a max by about 10% (syn80_4x8_b8192: 27.16 to 24.25 ms, and
26.97 to 24.57 ms from the other start, on TorchRec's estimator)."""


@dataclass(frozen=True, slots=True)
class CostGreedyPlanner:
    """Tables by predicted cost alone, descending (ties by name; one batched call for all); each
    to the device whose predicted cost for its whole set with the table added is lowest, among
    devices with room that leave the remaining tables packable and that hold fewer units than
    the extrapolation guard allows (``unit_cap``: the model's largest trained set, or 1.25x the
    even share; ties: lowest index; one batched call per table). Then ``improve``: moves
    and swaps off the max-cost device for at most ``max_rounds`` rounds (0 turns it off).
    Column splitting, if allowed, splits tables predicted above the split level (``split_units``:
    the average device load, or the costliest unit at its cheapest) into at most 2, 4, ... D
    shards (a shard still pays every lookup, so more shards are not always cheaper): the plan
    without splits and, where splitting could pay, the plan of the cap whose units balance best
    by their own costs; the split plan only if it is predicted more than
    ``departure_margin`` below the other (``best_over_split_caps``).
    Device ``cost_ms`` is the cost model's prediction. Past ``time_budget_s`` the search stops
    (greedy placement places the rest without the packing lookahead; no further local-search
    round or split cap) and the best plan so far comes back ``partial``.
    ``cache``: the task's (``TaskCache``), where a placement another planner of the task
    searched already is reused (without one, or one of another task, it makes its own).

    Sharding types (``sharding_types``, every one TorchRec runs by default): tables that must or
    may gain from row-wise, table-row-wise, grid or data-parallel sharding are spread first
    (``spread_variants``: a few variants, each table on its option and host that leaves the
    lowest load, ``place_spread``), and the rest is placed as above around them. A plan with
    spread tables replaces the plan without (where one exists) only if it is predicted more than
    ``departure_margin`` below it, as a split plan does; among variants, likewise against the
    first. Local search then also changes tables' options off the max device
    (``option_search.change_options``: a placed table row-sharded, a spread one moved to another
    host or made table-wise), with moves and swaps after any change."""

    cost_model: CostModel
    allow_column_split: bool = False
    max_rounds: int = MAX_ROUNDS
    time_budget_s: float | None = None
    name: str = "cost_greedy"
    cache: TaskCache | None = None
    departure_margin: float = DEPARTURE_MARGIN
    sharding_types: frozenset[ShardingType] = ALL_TYPES

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        started = time.perf_counter()
        deadline = Deadline(started, self.time_budget_s)
        reused: list[float] = []  # seconds of the placements taken from the task's other planners
        cache = TaskCache.for_task(self.cache, workload, topology)
        tasks = spread_tasks(cache, self.cost_model, self.allow_column_split, self.sharding_types)
        planned: list[list[DeviceState]] = [[d.copy() for d in t.devices] for t in tasks if isinstance(t, Placement)]

        def plan_task(task: TaskCache) -> list[DeviceState]:
            found = self._placed(task, deadline, reused)
            planned.append([d.copy() for d in found])
            return found

        best = best_of_tasks(tasks, plan_task, self.departure_margin, deadline, self.cost_model)
        self._change_options(best, workload, topology, deadline)
        if is_exact(self.cost_model):
            best = self._runner_up_searched(best, planned, workload, topology, deadline)
        return build_plan(self.name, best, started, workload.batch_size, partial=deadline.hit, reused_s=sum(reused))

    def _runner_up_searched(
        self,
        best: list[DeviceState],
        planned: list[list[DeviceState]],
        workload: Workload,
        topology: Topology,
        deadline: Deadline,
    ) -> list[DeviceState]:
        """Under an exact model, the task plans' option search is a greedy of its own: the best plan
        before it need not be the best after. The runner-up task plan (the second lowest max
        before, within ``RUNNER_UP_WITHIN`` of the lowest) is searched too, and the lower final
        kept (while the ``deadline`` allows)."""
        ranked = sorted(planned, key=max_load)
        if len(ranked) < 2 or deadline.expired:
            return best
        runner_up = ranked[1]
        if max_load(runner_up) > (1 + RUNNER_UP_WITHIN) * max_load(ranked[0]):
            return best
        self._change_options(runner_up, workload, topology, deadline)
        return runner_up if max_load(runner_up) < max_load(best) else best

    def _change_options(
        self, devices: list[DeviceState], workload: Workload, topology: Topology, deadline: Deadline
    ) -> None:
        if self.max_rounds:
            option_rounds(devices, self.cost_model, workload, topology, self.sharding_types, self.max_rounds, deadline)

    def _placed(self, cache: TaskCache, deadline: Deadline, reused: list[float]) -> list[DeviceState]:
        """The task's units placed and searched, over split caps (``best_over_split_caps``)."""

        def plan_at(cap: int | None) -> list[DeviceState]:
            found = searched_greedy(cache, self.cost_model, cap, self.max_rounds, deadline)
            reused.append(found.reused_s)
            return list(found.devices)

        units_at = cache.units(self.cost_model).at_cap
        return best_over_split_caps(
            cache.topology, self.allow_column_split, plan_at, units_at, self.departure_margin, deadline
        )


def option_rounds(
    devices: list[DeviceState],
    cost_model: CostModel,
    workload: Workload,
    topology: Topology,
    allowed: frozenset[ShardingType],
    max_rounds: int,
    deadline: Deadline,
) -> None:
    """Option changes off the max device (``change_options``), then moves and swaps again: the
    end of cost_greedy's search, which rl+refine runs on its own plans too."""
    batch_size = workload.batch_size
    if change_options(
        devices, cost_model, topology, batch_size, allowed, deadline=deadline, constraints=workload.constraints
    ):
        guard = unit_cap(cost_model, sum(len(d.units) for d in devices), topology.num_devices)
        improve(devices, cost_model, batch_size, max_rounds, deadline, is_exact(cost_model), guard)


def searched_greedy(
    cache: TaskCache, cost_model: CostModel, cap: int | None, max_rounds: int, deadline: Deadline
) -> Placement:
    """cost_greedy's placement of a split cap after its local search (the ``cache``'s, if another
    planner of the task searched it already within its budget); the devices are the caller's."""

    def search() -> tuple[Placement, bool]:
        state = greedy_placement(cache, cost_model, cap, deadline)
        batch_size = cache.workload.batch_size
        exact, guard = is_exact(cost_model), state.max_units_per_device
        improve(state.devices, cost_model, batch_size, max_rounds, deadline, even_out=exact, max_units=guard)
        return Placement(tuple(state.units), tuple(state.devices)), not deadline.hit

    return cache.placement(("cost_greedy", cap, max_rounds), search)


def greedy_placement(
    cache: TaskCache, cost_model: CostModel, cap: int | None, deadline: Deadline | None = None
) -> PlacementState:
    """cost_greedy's placement before local search: largest predicted cost first, each unit to
    the device whose predicted cost with it is lowest, with the packing lookahead until the
    ``deadline`` (``place``; shards of at most ``cap`` ways, or none without a cap). Its steps'
    costs are the task's ``StepCosts`` (``cache``)."""
    topology = cache.topology

    def start(units: list[Unit]) -> PlacementState:
        return PlacementState(
            units,
            topology,
            cost_model.accumulator(topology.num_devices, cache.workload.batch_size),
            lookahead=True,
            max_units_per_device=unit_cap(cost_model, len(units) + len(cache.fixed), topology.num_devices),
            steps=cache.steps(units),
            fixed=cache.fixed,
            rules=cache.rules,
            held=cache.held(cost_model),
        )

    task_units = cache.units(cost_model)
    # a unit order that dead-ended under this model dead-ends again (the same start, chooser, scope)
    fresh: tuple[CostModel, dict[tuple[str, ...], PlannerError]] = (cost_model, {})  # the model kept: its id holds
    dead_ends = cache.derived(("greedy dead ends", id(cost_model)), lambda: fresh)[1]
    return place_workload(
        task_units,
        cap is not None,
        cheapest_after,
        start,
        max_ways=cap,
        scope=CANDIDATES,
        deadline=deadline,
        dead_ends=dead_ends,
    )
