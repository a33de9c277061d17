"""The classic placement heuristics, as in the DreamShard / AutoShard / NeuroShard baselines.

Every heuristic places memory-aware: a table only goes to a device with room for it (and, for a
column shard, with no other shard of its table). Device ``cost_ms`` in the plan comes from the
planner's ``cost_model``; without one it is the sum of the planner's proxy (memory bytes for
size_greedy, dim for dim_greedy, dim x pooling for lookup_greedy and for random and round_robin,
dim x pooling x log10(rows) for size_lookup_greedy) -- proxy units, not milliseconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from autoshard.core.sharding import ShardingType
from autoshard.core.types import CostModel, ShardingPlan, Table, Topology, Workload
from autoshard.planners.choosers import Chooser, least_loaded
from autoshard.planners.device_state import build_plan
from autoshard.planners.feasibility import check_total
from autoshard.planners.place_loop import place_workload
from autoshard.planners.placement_rules import PlacementRules, check_constraints
from autoshard.planners.placement_state import PlacementState
from autoshard.planners.placement_unit import Unit, proxy_costs
from autoshard.planners.proxies import Proxy, lookup_proxy
from autoshard.planners.sharding_options import (
    ALL_TYPES,
    DP_MEMORY_SHARE,
    SpreadOption,
    must_spread,
    place_spread,
    spread_options,
)
from autoshard.planners.spread_variants import fits_placed
from autoshard.planners.unit_preparation import TaskUnits

_ROW_RULE = (ShardingType.TABLE_ROW_WISE, ShardingType.ROW_WISE, ShardingType.GRID_SHARD)


@dataclass(frozen=True, slots=True)
class SpreadRule:
    """Which sharding types a heuristic may use, and whether it replicates tiny tables."""

    sharding_types: frozenset[ShardingType] = ALL_TYPES
    replicate_tiny: bool = False

    def fixed(
        self, workload: Workload, topology: Topology, proxy: Proxy, allow_split: bool, rules: PlacementRules
    ) -> tuple[tuple[int, Unit], ...]:
        """The spread shards, on their ranks (module docstring), within each table's own
        sharding types and pin."""
        constraints = workload.constraints
        kinds = {t.name: constraints.allowed_types(t.name, self.sharding_types) for t in workload.tables}
        needed = [
            t
            for t in workload.tables
            if not fits_placed(t, topology, allow_split, kinds[t.name]) or must_spread(kinds[t.name])
        ]
        needed = [
            t for t in needed if kinds[t.name] & {*_ROW_RULE, ShardingType.DATA_PARALLEL}
        ]  # else placement names it
        tiny: list[Table] = []
        if self.replicate_tiny:
            limit = DP_MEMORY_SHARE * topology.smallest_device_memory_bytes
            tiny = [
                t
                for t in workload.tables
                if t.memory_bytes <= limit
                and t not in needed
                and ShardingType.DATA_PARALLEL in kinds[t.name]
                and t.name not in constraints.placed_tables
            ]
        replicated = {t.name for t in tiny}

        def options(table: Table) -> list[SpreadOption]:
            own = kinds[table.name]
            if table.name in replicated or not own & set(_ROW_RULE):
                return spread_options(table, topology, own & {ShardingType.DATA_PARALLEL})
            for kind in _ROW_RULE:  # the first type with an option that fits; place_spread picks the host
                if kind in own:
                    found = [
                        o for o in spread_options(table, topology, {kind}) if rules.ranks_allowed(table.name, o.ranks)
                    ]
                    if found and max(s.memory_bytes for _, s in found[0].placements) <= topology.device_memory_bytes:
                        return found
            return []

        if not needed and not tiny:
            return ()
        return place_spread(needed + tiny, options, topology, proxy_costs(proxy))


def _plan(
    name: str,
    workload: Workload,
    topology: Topology,
    proxy: Proxy,
    allow_split: bool,
    cost_model: CostModel | None,
    order_by_cost: bool,
    choose: Chooser,
    rule: SpreadRule,
) -> ShardingPlan:
    started = time.perf_counter()
    check_total(workload.memory_bytes, topology)
    check_constraints(workload, topology, rule.sharding_types)
    rules = PlacementRules(workload.constraints, topology)
    fixed = rule.fixed(workload, topology, proxy, allow_split, rules)
    spread = {u.parent for _, u in fixed}
    rest = tuple(t for t in workload.tables if t.name not in spread)
    if not rest:
        devices = PlacementState([], topology, fixed=fixed).devices
        return build_plan(name, devices, started, workload.batch_size, cost_model)
    state = place_workload(
        TaskUnits(replace(workload, tables=rest) if fixed else workload, topology, proxy_costs(proxy)),
        allow_split,
        choose,
        lambda units: PlacementState(units, topology, fixed=fixed, rules=rules),
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
    rule: SpreadRule = SpreadRule()

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        return _plan(
            self.name,
            workload,
            topology,
            self.proxy,
            self.allow_column_split,
            self.cost_model,
            True,
            least_loaded,
            self.rule,
        )


@dataclass(frozen=True, slots=True)
class RandomPlanner:
    """Tables in the given order, each to a uniformly random device among those with room;
    seeded (``numpy`` Generator), so a planner plans the same way every call."""

    cost_model: CostModel | None = None
    seed: int = 0
    allow_column_split: bool = False
    name: str = "random"
    rule: SpreadRule = SpreadRule()

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        rng = np.random.default_rng(self.seed)

        def choose(state: PlacementState, allowed: np.ndarray) -> int:
            return int(allowed[rng.integers(len(allowed))])

        return _plan(
            self.name,
            workload,
            topology,
            lookup_proxy,
            self.allow_column_split,
            self.cost_model,
            False,
            choose,
            self.rule,
        )


@dataclass(frozen=True, slots=True)
class RoundRobinPlanner:
    """Table i (given order) to device i mod D, or the next device after it with room."""

    cost_model: CostModel | None = None
    allow_column_split: bool = False
    name: str = "round_robin"
    rule: SpreadRule = SpreadRule()

    def plan(self, workload: Workload, topology: Topology) -> ShardingPlan:
        devices = topology.num_devices

        def choose(state: PlacementState, allowed: np.ndarray) -> int:
            return min(allowed.tolist(), key=lambda d: (d - state.position) % devices)

        return _plan(
            self.name,
            workload,
            topology,
            lookup_proxy,
            self.allow_column_split,
            self.cost_model,
            False,
            choose,
            self.rule,
        )
