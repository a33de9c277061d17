"""The classic placement heuristics, as in the DreamShard / AutoShard / NeuroShard baselines.

Every heuristic places memory-aware: a table only goes to a device with room for it (and, for a
column shard, with no other shard of its table). Device ``cost_ms`` in the plan comes from the
planner's ``cost_model``; without one it is the sum of the planner's proxy (memory bytes for
size_greedy, dim for dim_greedy, dim x pooling for lookup_greedy and for random and round_robin,
dim x pooling x log10(rows) for size_lookup_greedy) -- proxy units, not milliseconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from autoshard.core.types import CostModel, ShardingPlan, Topology, Workload
from autoshard.planners.choosers import Chooser, least_loaded
from autoshard.planners.device_state import build_plan
from autoshard.planners.place_loop import place_workload
from autoshard.planners.placement_state import PlacementState
from autoshard.planners.placement_unit import proxy_costs
from autoshard.planners.proxies import Proxy, lookup_proxy
from autoshard.planners.unit_preparation import TaskUnits


def _plan(
    name: str,
    workload: Workload,
    topology: Topology,
    proxy: Proxy,
    allow_split: bool,
    cost_model: CostModel | None,
    order_by_cost: bool,
    choose: Chooser,
) -> ShardingPlan:
    started = time.perf_counter()
    state = place_workload(
        TaskUnits(workload, topology, proxy_costs(proxy)),
        allow_split,
        choose,
        lambda units: PlacementState(units, topology),
        order_by_cost,
    )
    return build_plan(name, state.devices, started, workload.batch_size, cost_model)


@dataclass(frozen=True, slots=True)
class GreedyProxyPlanner:
    """Tables by proxy, descending (ties by name); each to the device with the smallest proxy
    sum among those with room (ties: less memory used, then lowest index). Column splitting,
    if allowed, splits tables whose proxy exceeds the split level (``split_units``)."""

    name: str
    proxy: Proxy
    cost_model: CostModel | None = None
    allow_column_split: bool = False

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        return _plan(
            self.name, workload, topology, self.proxy, self.allow_column_split, self.cost_model, True, least_loaded
        )


@dataclass(frozen=True, slots=True)
class RandomPlanner:
    """Tables in the given order, each to a uniformly random device among those with room;
    seeded (``numpy`` Generator), so a planner plans the same way every call."""

    cost_model: CostModel | None = None
    seed: int = 0
    allow_column_split: bool = False
    name: str = "random"

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        rng = np.random.default_rng(self.seed)

        def choose(state: PlacementState, allowed: np.ndarray) -> int:
            return int(allowed[rng.integers(len(allowed))])

        return _plan(
            self.name, workload, topology, lookup_proxy, self.allow_column_split, self.cost_model, False, choose
        )


@dataclass(frozen=True, slots=True)
class RoundRobinPlanner:
    """Table i (given order) to device i mod D, or the next device after it with room."""

    cost_model: CostModel | None = None
    allow_column_split: bool = False
    name: str = "round_robin"

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        devices = topology.num_devices

        def choose(state: PlacementState, allowed: np.ndarray) -> int:
            return min(allowed.tolist(), key=lambda d: (d - state.position) % devices)

        return _plan(
            self.name, workload, topology, lookup_proxy, self.allow_column_split, self.cost_model, False, choose
        )
