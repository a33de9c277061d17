"""Planners driven by the trained policy: ``rl`` (its argmax), ``rl+refine`` (its samples, each
finished by cost_greedy's local search) and ``rl+refine_raw`` (that search's best, before the
margin that the product keeps against cost_greedy)."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, replace

import numpy as np

from autoshard.core.errors import PlannerError
from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, ShardingPlan, Topology, Workload
from autoshard.planners.choosers import CANDIDATES
from autoshard.planners.context import DEPARTURE_MARGIN
from autoshard.planners.cost_greedy import CostGreedyPlanner, option_rounds
from autoshard.planners.deadline import Deadline
from autoshard.planners.device_state import DeviceState, build_plan, max_load
from autoshard.planners.feasibility import check_total
from autoshard.planners.local_search import MAX_ROUNDS, improve
from autoshard.planners.placement_rules import check_constraints
from autoshard.planners.placement_state import SET_SIZE_HEADROOM
from autoshard.planners.sharding_options import ALL_TYPES
from autoshard.planners.task_cache import TaskCache
from autoshard.rl.env import FULL_VIEW_DEVICES
from autoshard.rl.options import OptionState
from autoshard.rl.policy import OptionPolicy, PolicyModelWarning
from autoshard.rl.rollout import Choose, argmax_choice, rollout, sampled_choice

SAMPLE_BUDGET_S = 1.0
"""rl+refine draws another sample only where the search so far plus one more rollout (as long as
the argmax one took) stays within this: every sample on tasks up to a few hundred tables, none on
1,000 tables x 128 devices, where one rollout takes 0.5-0.7 s (docs/decisions.md, 40)."""


@dataclass
class _Search:
    """rl+refine's raw search of a task, shared by its two planners (``TaskCache.derived``)."""

    devices: list[DeviceState]
    took: float
    partial: bool
    claimed: bool = False  # a planner of the task returned it already (the next one reuses it)


@dataclass(frozen=True)
class RLPlanner:
    """``samples`` 0 (``rl``): the policy's argmax, one forward pass per unit: each table's
    sharding option and devices, the mask the only rule (``OptionState``); no search, no repair,
    no fallback. Deterministic.

    ``samples`` > 0 (``rl+refine``): the argmax plan and ``samples`` plans drawn from the policy's
    softmax at ``temperature`` (seeded), each finished by cost_greedy's local search (moves and
    swaps, then option changes off the max device); the lowest predicted max is the raw result.
    With ``raw`` it is returned as it is (``rl+refine_raw``); else it is returned only where it is
    predicted more than ``departure_margin`` below cost_greedy's plan (or cost_greedy finds none),
    and cost_greedy's plan otherwise (smaller predicted gains are within the model's error: ``DEPARTURE_MARGIN``). Both
    names share one search per task (``cache``). A sample starts only within ``sample_budget_s``;
    past ``time_budget_s`` no further sample starts and the plan comes back ``partial`` (the
    argmax plan always completes)."""

    cost_model: CostModel
    policy: OptionPolicy
    allow_column_split: bool = False
    samples: int = 0
    temperature: float = 1.0
    seed: int = 0
    set_size_headroom: float = SET_SIZE_HEADROOM
    departure_margin: float = DEPARTURE_MARGIN
    max_rounds: int = MAX_ROUNDS
    time_budget_s: float | None = None
    name: str = "rl"
    cache: TaskCache | None = None
    sharding_types: frozenset[ShardingType] = ALL_TYPES
    raw: bool = False
    sample_budget_s: float = SAMPLE_BUDGET_S

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        started = time.perf_counter()
        deadline = Deadline(started, self.time_budget_s)
        mismatch = self.policy.model_mismatch(self.cost_model)
        if mismatch is not None:
            warnings.warn(mismatch, PolicyModelWarning, stacklevel=2)
        check_total(workload.memory_bytes, topology)
        check_constraints(workload, topology, self.sharding_types)
        cache = TaskCache.for_task(self.cache, workload, topology)
        if not self.samples:
            devices = self._rollout(workload, topology, argmax_choice(self.policy)).devices
            return build_plan(self.name, devices, started, workload.batch_size)
        key = ("rl+refine raw", id(self.policy), id(self.cost_model), self.samples, self.seed, self.temperature)
        search = cache.derived(key, lambda: _Search(*self._searched(workload, topology, deadline)))
        reused = search.took if search.claimed else 0.0  # the planner of the task that searched counts it
        search.claimed = True
        found = [d.copy() for d in search.devices]
        if not self.raw:
            try:
                greedy: ShardingPlan | None = self._greedy(cache).plan(workload, topology)
            except PlannerError:  # cost_greedy found no plan (a packing dead end): the search's stands
                greedy = None
            if greedy is not None and max_load(found) >= (1 - self.departure_margin) * greedy.max_cost_ms:
                took = time.perf_counter() - started
                return replace(greedy, planner=self.name, plan_time_s=took, reused_s=greedy.reused_s + reused)
        return build_plan(self.name, found, started, workload.batch_size, partial=search.partial, reused_s=reused)

    def _state(self, workload: Workload, topology: Topology) -> OptionState:
        limit = None if topology.num_devices <= FULL_VIEW_DEVICES else CANDIDATES
        return OptionState(
            workload,
            topology,
            self.cost_model,
            self.sharding_types,
            self.allow_column_split,
            TaskCache.for_task(self.cache, workload, topology).rules,
            limit,
            self.set_size_headroom,
            self.policy.info.spread_every_table,
        )

    def _rollout(self, workload: Workload, topology: Topology, choose: Choose) -> OptionState:
        return rollout(self._state(workload, topology), choose)

    def _searched(
        self, workload: Workload, topology: Topology, deadline: Deadline
    ) -> tuple[list[DeviceState], float, bool]:
        """The raw search: the argmax plan and the samples, each after cost_greedy's local search;
        the lowest, the seconds it took and whether the deadline cut it short."""
        started = time.perf_counter()
        rng = np.random.default_rng(self.seed)
        chooses = [argmax_choice(self.policy)]
        chooses += [sampled_choice(self.policy, rng, self.temperature) for _ in range(self.samples)]
        best: list[DeviceState] | None = None
        first = 0.0  # the argmax rollout's seconds: what a sample is expected to take
        for k, choose in enumerate(chooses):
            if k and (deadline.expired or time.perf_counter() - started + first > self.sample_budget_s):
                break
            try:
                began = time.perf_counter()
                state = self._rollout(workload, topology, choose)
                first = first or time.perf_counter() - began
            except PlannerError:
                if k == 0:
                    raise
                continue  # a sample into a dead end is dropped
            devices = state.devices
            improve(devices, self.cost_model, workload.batch_size, self.max_rounds, deadline, max_units=state.max_units)
            option_rounds(devices, self.cost_model, workload, topology, self.sharding_types, self.max_rounds, deadline)
            if best is None or max_load(devices) < max_load(best):
                best = devices
        assert best is not None
        return best, time.perf_counter() - started, deadline.hit

    def _greedy(self, cache: TaskCache) -> CostGreedyPlanner:
        return CostGreedyPlanner(
            self.cost_model,
            self.allow_column_split,
            self.max_rounds,
            self.time_budget_s,
            cache=cache,
            departure_margin=self.departure_margin,
            sharding_types=self.sharding_types,
        )
