"""A device while planning (``DeviceState``), and the frozen plan that the devices of a finished
placement make (``build_plan``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from autoshard.core.costing import predict_nonempty
from autoshard.core.types import CostModel, DevicePlan, ShardingPlan, Table
from autoshard.planners.placement_unit import Unit


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

    def extend(self, units: Sequence[Unit], load: float) -> None:
        """``add`` each of ``units``, in order, the load after the last ``load``."""
        self.units.extend(units)
        self.memory_bytes += sum(u.memory_bytes for u in units)
        self.parents.update(u.parent for u in units)
        self.load = load

    def remove(self, position: int, load: float) -> Unit:
        unit = self.units.pop(position)
        self.memory_bytes -= unit.memory_bytes
        self.parents.discard(unit.parent)
        self.load = load
        return unit

    def copy(self) -> DeviceState:
        """A copy that changes independently of this one (the units themselves are frozen)."""
        return DeviceState(self.index, self.capacity, list(self.units), self.memory_bytes, self.load, set(self.parents))


Assignment = tuple[tuple[str, ...], ...]
"""Each device's unit names, in its order: placements with the same assignment are the same
placement (local search from them ends in the same place)."""


def assignment(devices: Sequence[DeviceState]) -> Assignment:
    return tuple(tuple(u.name for u in d.units) for d in devices)


def max_load(states: Sequence[DeviceState]) -> float:
    return max(s.load for s in states)


def build_plan(
    name: str,
    states: Sequence[DeviceState],
    started: float,
    batch_size: int,
    cost_model: CostModel | None = None,
    partial: bool = False,
    reused_s: float = 0.0,
) -> ShardingPlan:
    """The frozen plan. Device costs come from ``cost_model`` (one batched call), or, without
    one, are the states' loads; ``plan_time_s`` runs from ``started`` (``time.perf_counter``);
    ``reused_s``: the planning time of placements it took from other planners."""
    costs = (
        [s.load for s in states]
        if cost_model is None
        else predict_nonempty(cost_model, [s.tables for s in states], batch_size)
    )
    devices = tuple(DevicePlan(tuple(u.shard for u in s.units), float(c)) for s, c in zip(states, costs))
    return ShardingPlan(name, devices, time.perf_counter() - started, partial=partial, reused_s=reused_s)
