"""Memory-aware placement shared by every planner: mutable per-device state while planning, the
greedy placement loop, and the final frozen ``ShardingPlan``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from autoshard.errors import PlannerError
from autoshard.planners.feasibility import check_feasible, no_room_error
from autoshard.planners.splitting import split_units
from autoshard.planners.units import CostFn, Unit
from autoshard.types import CostModel, DevicePlan, ShardingPlan, Table, TableShard, Topology, Workload


@dataclass(slots=True)
class DeviceState:
    """One device while planning: its units, memory used, and load (a proxy sum, or the cost
    model's prediction for the whole set, depending on the planner)."""

    index: int
    capacity: int
    units: list[Unit] = field(default_factory=list)
    memory_bytes: int = 0
    load: float = 0.0
    parents: set[str] = field(default_factory=set)

    @property
    def free_bytes(self) -> int:
        return self.capacity - self.memory_bytes

    @property
    def tables(self) -> list[Table]:
        return [u.table for u in self.units]

    def accepts(self, unit: Unit) -> bool:
        """Room for ``unit``, and no other shard of its table here."""
        return unit.parent not in self.parents and unit.memory_bytes <= self.free_bytes

    def add(self, unit: Unit, load: float) -> None:
        self.units.append(unit)
        self.memory_bytes += unit.memory_bytes
        self.parents.add(unit.parent)
        self.load = load

    def remove(self, position: int, load: float) -> Unit:
        unit = self.units.pop(position)
        self.memory_bytes -= unit.memory_bytes
        self.parents.discard(unit.parent)
        self.load = load
        return unit


Chooser = Callable[[int, Unit, list[DeviceState]], tuple[DeviceState, float]]
"""(position in placement order, unit, devices that accept it) -> (device, its load after adding)."""


def prepare_units(workload: Workload, topology: Topology, cost_fn: CostFn, allow_split: bool,
                  shard_memory_limit: int | None = None, max_ways: int | None = None) -> list[Unit]:
    """The workload's tables as units with their costs alone, split column-wise if allowed
    (shards at most ``shard_memory_limit`` bytes if they can be, default the device memory);
    raises ``PlannerError`` if they cannot fit."""
    tables = workload.tables
    units = [Unit.of(TableShard(t), c) for t, c in zip(tables, cost_fn(tables))]
    if allow_split and topology.num_devices > 1:
        units = split_units(units, cost_fn, topology, shard_memory_limit, max_ways)
    check_feasible(units, topology, allow_split)
    return units


def place_workload(workload: Workload, topology: Topology, cost_fn: CostFn, allow_split: bool,
                   choose: Chooser, order_by_cost: bool = True, lookahead: bool = False,
                   max_ways: int | None = None) -> list[DeviceState]:
    """``prepare_units`` then ``place`` (heaviest first, or in the given order). When splitting
    is allowed and placement runs into a dead end, retry with shards of at most half, a quarter,
    ... of a device's memory, until the split stops changing."""
    limit, count = topology.device_memory_bytes, -1
    while True:
        units = prepare_units(workload, topology, cost_fn, allow_split, limit, max_ways)
        try:
            return place(by_cost(units) if order_by_cost else units, topology, choose, lookahead)
        except PlannerError:
            if not allow_split or len(units) == count:
                raise
            limit, count = limit // 2, len(units)


def by_cost(units: Sequence[Unit]) -> list[Unit]:
    """Heaviest first; ties by name."""
    return sorted(units, key=lambda u: (-u.cost, u.name))


def packable(sizes_desc: Sequence[int], free: list[int]) -> bool:
    """Whether items (sizes, largest first) fit into bins with ``free`` bytes, by first-fit
    decreasing; stops early once the rest provably fits (every bin's room beyond the current
    item adds up to the remaining total, so any-fit cannot fail)."""
    free = sorted(free, reverse=True)
    remaining = sum(sizes_desc)
    for size in sizes_desc:
        if sum(max(0, f - size) for f in free) >= remaining:
            return True
        slot = next((j for j, f in enumerate(free) if f >= size), None)
        if slot is None:
            return False
        free[slot] -= size
        remaining -= size
    return True


def place(units: Sequence[Unit], topology: Topology, choose: Chooser, lookahead: bool = False) -> list[DeviceState]:
    """Place units in order, each on the device ``choose`` picks among those that accept it.

    With ``lookahead``, a device is a candidate only if the units still to place can still be
    packed afterwards (first-fit decreasing), which avoids packing dead ends when memory is
    tight; if no device passes (FFD is not exact), every device with room stays a candidate.
    """
    states = [DeviceState(d, topology.device_memory_bytes) for d in range(topology.num_devices)]
    for position, unit in enumerate(units):
        candidates = [s for s in states if s.accepts(unit)]
        if not candidates:
            raise no_room_error(unit, states)
        if lookahead and len(candidates) > 1:
            rest = sorted((u.memory_bytes for u in units[position + 1:]), reverse=True)
            safe = [c for c in candidates if packable(rest, [s.free_bytes - (unit.memory_bytes if s is c else 0)
                                                              for s in states])]
            candidates = safe or candidates
        state, load = choose(position, unit, candidates)
        state.add(unit, load)
    return states


def least_loaded(position: int, unit: Unit, candidates: list[DeviceState]) -> tuple[DeviceState, float]:
    """The device with the lowest load; ties to the one with less memory used, then the lowest
    index (as DreamShard's greedy sharders); load is a running sum of unit costs."""
    state = min(candidates, key=lambda s: (s.load, s.memory_bytes, s.index))
    return state, state.load + unit.cost


def predict_costs(cost_model: CostModel, table_sets: Sequence[Sequence[Table]], batch_size: int) -> list[float]:
    """One batched ``predict_many`` call; an empty set costs 0.0 without asking the model."""
    out = [0.0] * len(table_sets)
    asked = [i for i, tables in enumerate(table_sets) if tables]
    if asked:
        for i, cost in zip(asked, cost_model.predict_many([list(table_sets[i]) for i in asked], batch_size)):
            out[i] = float(cost)
    return out


def build_plan(name: str, states: Sequence[DeviceState], started: float, batch_size: int,
               cost_model: CostModel | None = None) -> ShardingPlan:
    """The frozen plan. Device costs come from ``cost_model`` (one batched call), or, without
    one, are the states' loads; ``plan_time_s`` runs from ``started`` (``time.perf_counter``)."""
    costs = ([s.load for s in states] if cost_model is None
             else predict_costs(cost_model, [s.tables for s in states], batch_size))
    devices = tuple(DevicePlan(tuple(u.shard for u in s.units), float(c)) for s, c in zip(states, costs))
    return ShardingPlan(name, devices, time.perf_counter() - started)
